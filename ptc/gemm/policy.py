"""Choosing the winner from measured times: fastest wins, ties broken the same way everywhere.

``pick(timings)`` with ``timings = {choice_name: ms}`` (``inf`` for a choice that
failed) returns the name to use::

    best = min(t)                                     # fastest measured
    tied = [c for c in t if t[c] <= best * (1 + tolerance)]
    return min(tied, key=(backend rank, name))       # ATEN < TRITON < NVGEMM

so ATen is kept unless another backend beats it by more than ``tolerance``
(default 2 %), and the same timings always give the same winner.
"""

from __future__ import annotations

import math
from typing import Dict, Mapping, Sequence

from ptc.errors import PtcValueError

__all__ = ["BACKENDS", "backend_of", "pick", "NoValidChoice"]

#: backend names in tie-break preference order
BACKENDS = ("ATEN", "TRITON", "NVGEMM")

PTC_PREFIX = "ptc_nvgemm"


class NoValidChoice(PtcValueError):
    """Every choice failed (all timings are inf or NaN)."""


def backend_of(name: str) -> str:
    """The backend of a choice name: ptc's ``ptc_nvgemm*`` -> NVGEMM, ``triton_*`` -> TRITON, else ATEN."""
    if name.startswith(PTC_PREFIX):
        return "NVGEMM"
    if name.startswith("triton") or name.startswith("cpp_"):
        return "TRITON"
    return "ATEN"


def pick(
    timings: Mapping[str, float],
    tolerance: float = 0.02,
    preference: Sequence[str] = BACKENDS,
) -> str:
    """The winning choice name (see the module docstring for the rule).

    Raises:
      PtcValueError: ``tolerance`` is negative or ``timings`` is empty.
      NoValidChoice: no choice has a finite time.
    """
    if not isinstance(tolerance, (int, float)) or tolerance < 0:
        raise PtcValueError(f"tolerance must be a number >= 0, got {tolerance!r}")
    if not timings:
        raise PtcValueError("timings is empty: nothing to choose from")
    finite: Dict[str, float] = {k: float(v) for k, v in timings.items() if math.isfinite(float(v))}
    if not finite:
        raise NoValidChoice(f"every choice failed: {', '.join(sorted(timings))}")
    best = min(finite.values())
    tied = [k for k, v in finite.items() if v <= best * (1.0 + tolerance)]
    rank = {b: i for i, b in enumerate(preference)}
    return min(tied, key=lambda k: (rank.get(backend_of(k), len(rank)), finite[k], k))
