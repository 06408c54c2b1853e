"""A persistent autotune database a team can commit: JSON, keyed by machine, software and problem.

One entry per key ``(gpu, torch, cutlass_dsl, op, signature)``; it holds the
measured time of each choice in µs and the winner under the tie rule of
:mod:`ptc.gemm.policy`. The file is deterministic (sorted keys, fixed float
rounding) so it diffs and merges well::

    db = AutotuneDB("gemm_autotune.json")
    db.record(Key.current("mm", "mm:bf16xbf16->bf16:m128n4096k4096:tn"), {"mm": 41.2, "ptc_nvgemm_3": 38.9})
    db.save()

Entries measured on another GPU or another software version never match this
machine's key, so a shared file is safe to load anywhere.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, Mapping, Optional

import torch

from ptc.errors import PtcValueError
from ptc.gemm import policy

__all__ = ["AutotuneDB", "Key", "FORMAT"]

FORMAT = "ptc.gemm.autotune/1"


@dataclass(frozen=True)
class Key:
    """Where a measurement is valid: GPU model, torch and cutlass-dsl versions, op, problem."""

    gpu: str
    torch: str
    cutlass_dsl: str
    op: str
    signature: str

    def text(self) -> str:
        return "|".join((self.gpu, self.torch, self.cutlass_dsl, self.op, self.signature))

    @classmethod
    def parse(cls, text: str) -> "Key":
        parts = text.split("|")
        if len(parts) != 5:
            raise PtcValueError(f"{text!r} is not a database key (gpu|torch|cutlass_dsl|op|signature)")
        return cls(*parts)

    @classmethod
    def current(cls, op: str, signature: str, gpu: Optional[str] = None) -> "Key":
        """The key for this process: the current GPU (or ``gpu``) and installed versions."""
        from ptc.gemm import catalog

        if gpu is None:
            gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
        return cls(gpu, torch.__version__, catalog.versions()["cutlass_dsl"], op, signature)


class AutotuneDB:
    """The database file ``path`` (created on first :meth:`save`).

    Args:
      path: the JSON file; loaded now if it exists.
      tolerance: the tie band used to name winners (see :func:`ptc.gemm.policy.pick`).

    Raises:
      PtcValueError: the file exists but is not a ptc autotune database.
    """

    def __init__(self, path: "str | os.PathLike", tolerance: float = 0.02) -> None:
        self.path = Path(path)
        self.tolerance = tolerance
        self._entries: Dict[str, Dict[str, float]] = {}
        if self.path.exists():
            self._entries = self._read(self.path)

    @staticmethod
    def _read(path: Path) -> Dict[str, Dict[str, float]]:
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise PtcValueError(f"autotune database {str(path)!r} is not readable JSON: {e}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise PtcValueError(f"{str(path)!r} is not a ptc autotune database (format {FORMAT!r} expected)")
        entries = {}
        for key, entry in data.get("entries", {}).items():
            Key.parse(key)
            entries[key] = {k: float(v) for k, v in entry["timings_us"].items()}
        return entries

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self) -> Iterator[Key]:
        return (Key.parse(k) for k in sorted(self._entries))

    def record(self, key: Key, timings_us: Mapping[str, float]) -> None:
        """Merge measured times (µs; ``inf`` for a failed choice); the faster value wins per choice."""
        entry = self._entries.setdefault(key.text(), {})
        for name, t in timings_us.items():
            t = float(t)
            old = entry.get(name)
            entry[name] = t if old is None or (math.isfinite(t) and (not math.isfinite(old) or t < old)) else old

    def timings(self, key: Key) -> Optional[Dict[str, float]]:
        """The recorded times for ``key``, or None."""
        entry = self._entries.get(key.text())
        return dict(entry) if entry is not None else None

    def winner(self, key: Key) -> Optional[str]:
        """The recorded winner for ``key`` (tie rule applied), or None if unknown or all failed."""
        entry = self._entries.get(key.text())
        if not entry:
            return None
        try:
            return policy.pick(entry, self.tolerance)
        except policy.NoValidChoice:
            return None

    def merge(self, other: "AutotuneDB") -> None:
        """Fold another database in (per choice the faster time is kept); order-independent."""
        for key_text, entry in other._entries.items():
            self.record(Key.parse(key_text), entry)

    def to_json(self) -> dict:
        entries = {}
        for key_text in sorted(self._entries):
            entry = self._entries[key_text]
            entries[key_text] = {
                "timings_us": {k: (round(v, 3) if math.isfinite(v) else "inf") for k, v in sorted(entry.items())},
                "winner": self.winner(Key.parse(key_text)),
            }
        return {"format": FORMAT, "tolerance": self.tolerance, "entries": entries}

    def save(self) -> Path:
        """Write the file atomically (a temporary file renamed over it)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(self.to_json(), f, indent=1, sort_keys=True)
            f.write("\n")
        os.replace(tmp, self.path)
        return self.path
