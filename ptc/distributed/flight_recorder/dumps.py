"""The ring buffer's records and the dumps made of them (``_Dumps``: a part of ``FlightRecorder``).

A recorded call is an ``_Entry``, kept in the recorder's ring buffer, of the
``_Group`` it was issued on (one per process group and generation).  A dump
turns them into torch's Flight Recorder format (``DUMP_VERSION``): what
:meth:`FlightRecorder.snapshot` returns and :meth:`FlightRecorder.dump`
writes.  Automatic dumps (a failure, a timeout) are made at most once per
group and generation (``_Dumps._auto_dump``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pickle
import socket
import tempfile
import time
from typing import Any, Dict, List, Optional, Union, cast

import torch

from ptc.distributed.flight_recorder.ops import KINDS, P2P_KINDS, describe, profiling_prefix
from ptc.errors import PtcTypeError, PtcValueError

DUMP_VERSION = "2.10"  # the format version torch 2.13 and 2.14 write and torchfrtrace reads
_DONE = frozenset({"completed", "failed"})


class _Group:
    """One process group in one generation: its name, members and counters."""

    __slots__ = (
        "pg", "pg_id", "base_name", "name", "desc", "ranks", "generation", "backend", "prefix",
        "group_rank", "timeout_ms", "timeout_ns", "collective_ids", "p2p_ids",
        "collective_seq", "p2p_seq", "last_started", "last_completed", "auto_dumps",
    )  # fmt: skip

    def __init__(self, pg: Any, pg_id: int, base_name: str, desc: str, ranks: List[int],
                 generation: int, backend: str, group_rank: int, timeout_s: float) -> None:  # fmt: skip
        self.pg = pg
        self.pg_id = pg_id
        self.base_name = base_name
        self.name = base_name if generation == 0 else f"{base_name}@gen{generation}"
        self.desc = desc
        self.ranks = ranks
        self.generation = generation
        self.backend = backend
        self.prefix = profiling_prefix(backend)
        self.group_rank = group_rank
        self.timeout_ms = int(round(timeout_s * 1000))
        self.timeout_ns = int(timeout_s * 1e9)
        # next(...) on itertools.count is atomic under the GIL: ids stay unique across threads
        self.collective_ids = itertools.count(1)
        self.p2p_ids = itertools.count(1)
        self.collective_seq = 0  # the last collective_seq_id handed out (p2p entries carry it)
        self.p2p_seq = 0
        self.last_started = -1
        self.last_completed = -1
        self.auto_dumps: set = set()  # causes ("failure", "timeout") this generation already dumped for


class _Entry:
    """One recorded call.  ``inputs``/``outputs`` are (shape, dtype) pairs, never tensors;
    the dump fields are derived from them when a dump is written."""

    __slots__ = (
        "record_id", "group", "kind", "is_p2p", "inputs", "outputs", "peer", "collective_seq_id", "p2p_seq_id",
        "thread", "thread_name", "time_created_ns", "time_started_ns", "time_completed_ns", "state",
        "error", "frames", "timed_out", "work",
    )  # fmt: skip

    def to_dict(self, thread_names: Dict[int, str]) -> Optional[Dict[str, Any]]:
        g = self.group
        op = describe(self.kind, self.inputs, self.outputs, self.peer, g.group_rank, g.prefix)
        if op is None:
            return None
        state = self.state
        entry = {
            "record_id": self.record_id,
            "pg_id": g.pg_id,
            "process_group": (g.name, g.desc),
            "collective_seq_id": self.collective_seq_id,
            "p2p_seq_id": self.p2p_seq_id,
            "op_id": self.collective_seq_id + self.p2p_seq_id,  # every call counts in exactly one
            "profiling_name": op[1],
            "time_created_ns": self.time_created_ns,
            "input_sizes": op[2],
            "input_dtypes": op[3],
            "output_sizes": op[4],
            "output_dtypes": op[5],
            "state": state,
            "time_discovered_started_ns": self.time_started_ns,
            "time_discovered_completed_ns": self.time_completed_ns,
            "retired": state in _DONE,
            "timeout_ms": g.timeout_ms,
            "is_p2p": op[6],
            "thread_id": str(self.thread),
            "thread_name": self.thread_name if self.thread_name is not None else thread_names.get(self.thread, ""),
            # ptc's own keys (stock tools ignore them)
            "backend": g.backend,
            "generation": g.generation,
            "peer": self.peer,
            "error": self.error,
            "timed_out": self.timed_out,
        }
        if self.frames is not None:
            entry["frames"] = self.frames
        return entry

    def describe(self) -> str:
        """``all_reduce (seq 5) in group '0' on rank 2``: how dump reasons name the call."""
        g = self.group
        op = KINDS.get(self.kind, self.kind.lower())
        seq = f"p2p seq {self.p2p_seq_id}" if self.is_p2p else f"seq {self.collective_seq_id}"
        return f"{op} ({seq}) in group {g.name!r} on rank {g.ranks[g.group_rank]}"


def _short(exc: BaseException, limit: int = 500) -> str:
    return _short_text(f"{type(exc).__name__}: {exc}", limit)


def _short_text(text: str, limit: int = 500) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _pg_status(enqueued: int, started: int, completed: int) -> Dict[str, int]:
    """A group's ``pg_status`` entry: its last collective sequence ids (-1: none yet)."""
    return {
        "last_enqueued_collective": enqueued or -1,
        "last_started_collective": started,
        "last_completed_collective": completed,
    }


class _Dumps:
    """``FlightRecorder``'s dumps (its state is set up by ``FlightRecorder.__init__``)."""

    def _auto_dump(self, group: _Group, cause: str, reason: str) -> None:
        """Dump once per generation of ``group``: on its first failure or first timeout.

        A failure after a timeout dumps again (the backend's error says more
        than "still running"); a timeout after a failure does not.
        """
        with self._lock:
            done = group.auto_dumps
            if self._closed or cause in done or (cause == "timeout" and "failure" in done):
                return
            done.add(cause)
        # Taking the snapshot may itself find the overdue call failed and dump for that
        # failure; this timeout dump then has nothing to add and must not replace it.
        superseded = (lambda: "failure" in done) if cause == "timeout" else None
        # Named before the file is written: a request served meanwhile (close() serves them on
        # the caller's thread) must not replace this dump without its reason.
        previous, self._own_reason = self._own_reason, reason
        if self._write_dump(reason, unless=superseded) is None:
            if self._own_reason == reason:  # not replaced by the failure that superseded it
                self._own_reason = previous
            return
        if self._store is not None:
            self._publish.append(f"rank {self._rank}: {reason}")
            self._store_wake.set()

    def snapshot(self, reason: str = "on demand") -> Dict[str, Any]:
        """The dump as a dict (what :meth:`dump` pickles)."""
        import ptc

        if self._tap is None:
            self._discover_all()
            entries = sorted(self._buffer, key=lambda e: e.record_id)
            recorded = entries[-1].record_id + 1 if entries else 0
            skipped = self._skipped
            with self._lock:
                groups = list(self._all_groups)
            status = {g.pg_id: (g.collective_seq, g.last_started, g.last_completed) for g in groups}
        else:
            tap = self._tap
            tap.poll()
            entries = [self._native_entry(r) for r in tap.records()]
            recorded, skipped = tap.recorded, tap.skipped
            status = {slot: (seq, started, completed) for slot, (seq, _, started, completed) in enumerate(tap.status())}
            with self._lock:
                groups = list(self._all_groups)
        dicts = [d for d in (e.to_dict(self._thread_names) for e in entries) if d is not None]
        return {
            "version": DUMP_VERSION,
            "comm_lib_version": f"ptc {ptc.__version__} (torch {torch.__version__})",
            "pg_config": {g.name: {"name": g.name, "desc": g.desc, "ranks": str(g.ranks)} for g in groups},
            "pg_status": {str(g.pg_id): _pg_status(*status.get(g.pg_id, (0, -1, -1))) for g in groups},
            "entries": dicts,
            "ptc": {
                "rank": self._rank,
                "reason": reason,
                "dumped_at_ns": time.time_ns(),
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "torch": str(torch.__version__),
                "capture": self._mechanism,
                "core": self.core,
                "capacity": self.capacity,
                "recorded": recorded,
                "dropped": recorded - len(entries),
                "skipped": skipped,
                "groups": {
                    g.name: {"base_name": g.base_name, "generation": g.generation, "backend": g.backend}
                    for g in groups
                },
            },
        }

    def _native_entry(self, record: tuple) -> _Entry:
        """A record of the native core as an :class:`_Entry` (what dumps and reasons are made from)."""
        entry = _Entry()
        (entry.record_id, slot, entry.kind, entry.collective_seq_id, entry.p2p_seq_id, entry.peer, entry.thread,
         entry.thread_name, entry.time_created_ns, entry.time_started_ns, entry.time_completed_ns, entry.state,
         error, entry.timed_out, entry.inputs, entry.outputs) = record  # fmt: skip
        entry.group = self._all_groups[slot]
        entry.is_p2p = entry.kind in P2P_KINDS
        entry.error = None if error is None else _short_text(error)
        entry.frames = entry.work = None
        return entry

    def entries(self) -> List[Dict[str, Any]]:
        """The recorded calls, oldest first, as the dicts a dump holds."""
        return self.snapshot()["entries"]

    def dump(self, reason: str = "on demand", *, path: Union[str, os.PathLike, None] = None) -> str:
        """Write the buffer now; returns the file's path (``<dump_dir>/<prefix><rank>`` by default).

        The file is replaced atomically, so a reader never sees half a dump; a
        later dump of the same rank replaces an earlier one.
        """
        if not isinstance(reason, str):
            raise PtcTypeError(f"reason: expected a str, got {type(reason).__name__}")
        return cast(str, self._write_dump(reason, path))

    def _dump_path(self) -> str:
        if self._rank is None:
            raise PtcValueError("this recorder has no rank yet: attach a group first or pass rank=")
        return os.path.join(self.dump_dir, f"{self.prefix}{self._rank}")

    def _write_dump(
        self, reason: str, path: Union[str, os.PathLike, None] = None, unless: Optional[Any] = None
    ) -> Optional[str]:
        """Snapshot and write; skip the write when ``unless()`` holds after the snapshot."""
        target = os.fspath(path) if path is not None else self._dump_path()
        data = pickle.dumps(self.snapshot(reason), protocol=4)
        if unless is not None and unless():
            return None
        directory = os.path.dirname(os.path.abspath(target))
        with self._dump_lock:
            os.makedirs(directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".ptc-fr-", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, target)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            self.dumps.append(target)
        return target

    def request_peer_dumps(self, reason: str) -> None:
        """Ask every recorder on the shared ``store`` to dump (needs ``store=``)."""
        if self._store is None:
            raise PtcValueError("request_peer_dumps: this recorder has no store; pass store= when creating it")
        self._publish.append(f"rank {self._rank}: {reason}")
        self._store_wake.set()
