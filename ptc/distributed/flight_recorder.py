"""Flight Recorder for any c10d backend, dumped in the format torch's ``torchfrtrace`` reads.

A :class:`FlightRecorder` keeps, per process, a bounded ring buffer of the
collective and point-to-point calls issued on the process groups it is
attached to, whatever their backend (gloo, NCCL, the ``fake`` test backend,
custom backends, ptc's fault-tolerant groups).  Each record holds the op, the
group's name and generation, sequence ids, input/output sizes and dtypes, a
state and real times:

============  ==============================================================
state         meaning
============  ==============================================================
scheduled     the call was made; the backend has not returned its Work yet
              (``time_created_ns``)
started       the backend accepted the call and returned its Work
              (``time_discovered_started_ns``; an asynchronous backend may
              start moving data a little later)
completed     the Work finished without error (``time_discovered_completed_ns``)
failed        the call raised, or its Work finished with an error (``error``
              holds the message; the time as for completed)
============  ==============================================================

Two cores keep the records (``core=``):

``"native"`` (:mod:`ptc.distributed.fr_native`, a C++ extension built once per
    torch version): the ring buffer and the per-call work are C++.  The end
    time is when the Work's future completed, from a callback the backend's
    own thread runs without the GIL, so it is exact for every Work, waited or
    not (DDP's buckets included).  A Work without a CPU future is watched by
    a poller thread through ``is_completed()``: gloo's send/recv (no future)
    end within a millisecond of their ``wait()`` returning; NCCL's (a device
    future completes at enqueue) when the GPU has finished them.  Where torch
    has C++ process-group hooks (2.14) a recorded call runs no Python at all.
``"python"``: the records are Python objects.  The end time is the moment
    ``Work.wait()`` returned in Python, which for synchronous calls
    (``dist.all_reduce(t)``) is when the collective finished; Works nobody
    waits on in Python (the DDP reducer's, those consumed through
    ``get_future()``) are seen finished at the next recorded call, or by the
    watchdog within ``poll_interval``, so their end time is an upper bound.
    (A Python done-callback would be exact, but it must take the GIL in the
    backend's thread: 5-15 % of a 1 MB gloo all_reduce.)
``"auto"`` (default): native when it is already built for this torch (it never
    starts a 30-40 s build by itself) and ``record_stacks`` is off.

Python stacks are recorded only with ``record_stacks=True`` (off by default:
it costs a frame walk per call), and only by the Python core.  Both cores
write the same dumps, field for field.

Dumps are pickles in torch's Flight Recorder format (``version`` "2.10",
``pg_config``, ``pg_status``, ``entries`` with the same keys as native
entries, plus ptc's own keys and a ``ptc`` section that stock tools ignore),
one file ``<dump_dir>/<prefix><rank>`` per process, so ``torchfrtrace DIR``
and ``ptc fr-trace DIR`` both read a directory of them.  A dump is written:

* on demand: :meth:`FlightRecorder.dump`, or :func:`dump_all` for every
  recorder of the process (what ptc's fault-tolerant runtime calls on every
  rank when it detects a failure);
* on a signal: ``dump_signal=signal.SIGUSR1``.  The signal wakes the recorder's
  own thread through ``signal.set_wakeup_fd``, so a process whose main thread
  is blocked inside a collective still dumps at once;
* when a recorded call fails (``dump_on_failure``, default on; the native
  core's callback wakes the recorder's thread, which dumps within
  milliseconds);
* when a call is still unfinished after the group's timeout (the watchdog;
  ``timeout=`` overrides the group's);
* on a peer's request: with ``store=``, a recorder that dumps because of a
  failure or timeout asks every other recorder on the store to dump too, so
  the rank that never arrived at a hung collective leaves its record as well.
  Every request is served (each has its own key on the store), and a
  requested dump that replaces this rank's own failure or timeout dump keeps
  that reason first: ``"timeout: ...; then requested by rank 1: timeout: ..."``.

Automatic dumps happen at most once per group and generation for a failure
and once for a timeout (a timeout after a failure adds nothing and does not
dump); the next generation re-arms them.

Group names and reconfiguration: a group is recorded under its c10d
``group_name`` ("0" for the default group) in generation 0, and under
``"<name>@gen<g>"`` after :meth:`FlightRecorder.on_reconfigure` moves it to
generation ``g``.  Sequence ids restart at 1 in each generation, which is
what every member of a generation, including a process that joined in it,
agrees on; the distinct names keep the generations apart for the analyzers.

How calls are captured (see :mod:`ptc.distributed.fr_capture`): where torch
has process-group pre/post hooks (2.14) the recorder registers a hook pair on
each attached group, which also sees the collectives C++ issues (DDP);
elsewhere (2.13), or with ``capture="wrapper"``, it wraps ``ProcessGroup``'s
collective methods for as long as any recorder is attached, dispatching per
group, and restores them when the last one detaches (cheaper per call, blind
to C++-issued calls).  The Python core also wraps ``Work.wait`` while attached,
for end times; the native core leaves it alone.
Either way recording starts only when you attach and stops when you detach or
close; importing ptc changes nothing in torch.  ptc records in its own buffer
and never enables torch's native recorder, so nothing is recorded twice.

What recording costs (``benchmarks/flight_recorder.py``, 2 ranks, 1 MB gloo
all_reduce, 2-core machine, 2.3-2.9 ms per step): with the native core, the
main thread's CPU time per call grows by 0-8 us through torch 2.14's C++ hooks
(0.0-0.3 %) and 17-32 us through the method wrapper on torch 2.13 (0.8-0.9 %);
warm, alone, 0-4 and 3-7 us per call.  The Python core costs 31-69 us per call
in the loop (0.9-2.4 %; cold caches: a 1 MB all_reduce evicts them between
calls) and 5-8 us warm.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import datetime
import itertools
import os
import pickle
import select
import signal
import socket
import sys
import tempfile
import threading
import time
import warnings
import weakref
from typing import Any, Dict, Iterator, List, Optional, Sequence, Set, Union, cast

import torch

from ptc import _compat
from ptc.distributed import fr_capture, fr_native
from ptc.distributed.fr_ops import IN_PLACE_KINDS, KINDS, P2P_KINDS, describe, kind_name, profiling_prefix
from ptc.errors import FeatureUnavailable, PtcTypeError, PtcValueError

__all__ = [
    "DUMP_VERSION",
    "FlightRecorder",
    "active_recorders",
    "disable",
    "dump_all",
    "enable",
    "on_reconfigure",
    "recording",
]

DUMP_VERSION = "2.10"  # the format version torch 2.13 and 2.14 write and torchfrtrace reads
DEFAULT_CAPACITY = 2048
DEFAULT_PREFIX = "rank_"
DUMP_DIR_ENV = "PTC_FR_DUMP_DIR"
_STORE_COUNT_KEY = "ptc/flight_recorder/dump_requests"  # how many requests were ever published
_STORE_REQUEST_KEY = "ptc/flight_recorder/request/"  # + a request's number: "rank R: its reason"
_PTC_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
get_ident = threading.get_ident


def _default_dump_dir() -> str:
    return os.environ.get(DUMP_DIR_ENV) or os.path.join(tempfile.gettempdir(), "ptc_flight_recorder")


_DONE = frozenset({"completed", "failed"})
# kind as capture reports it (a HookOpName name; a member also works) -> (canonical name, is p2p, in place), or
# False for kinds the recorder skips; filled on first sight, read on every call
_KIND_INFO: Dict[Any, Any] = {}


def _kind_info(kind: Any) -> Any:
    name = kind_name(kind)
    info = (name, name in P2P_KINDS, name in IN_PLACE_KINDS) if name in KINDS else False
    _KIND_INFO[kind] = info
    return info


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


def _stack(depth: int) -> List[Dict[str, Any]]:
    """The caller's Python stack, innermost first, without ptc's own frames."""
    frames: List[Dict[str, Any]] = []
    frame = sys._getframe(1)
    while frame is not None and len(frames) < depth:
        code = frame.f_code
        if not code.co_filename.startswith(_PTC_DIR):
            frames.append({"name": code.co_name, "filename": code.co_filename, "line": frame.f_lineno})
        frame = frame.f_back
    return frames


def _work_error(work: Any) -> Optional[BaseException]:
    """The error a finished Work ended with, or None, read through its future.

    A Work without a future (gloo's send/recv) reports None: its error is seen
    only where someone waits on it.  (Calling ``wait()`` again instead is not
    safe: a gloo recv waits for a second message.)
    """
    try:
        future = work.get_future()
    except Exception:  # noqa: BLE001 - this Work has no future
        return None
    try:
        future.value()
    except Exception as exc:  # noqa: BLE001 - the collective's own error
        return exc
    return None


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


CORES = ("auto", "native", "python")


def _native_core(core: Any, record_stacks: bool) -> Any:
    """The native core's module for ``core`` (None: the Python core records)."""
    if core not in CORES:
        raise PtcValueError(f"core={core!r}: expected 'auto', 'native' or 'python'")
    if core == "python" or (core == "auto" and record_stacks):
        return None
    if core == "native":
        if record_stacks:
            raise PtcValueError("record_stacks=True needs core='python' (or 'auto'): stacks are Python's to walk")
        return fr_native.load(build=True)
    try:
        return fr_native.load(build=False)
    except Exception as exc:  # noqa: BLE001 - a broken cache must not stop recording: say so, use Python
        warnings.warn(f"ptc FlightRecorder: the native core did not load ({_short(exc)}); recording in Python",
                      RuntimeWarning, stacklevel=3)  # fmt: skip
        return None


def _check_distributed() -> None:
    if not _compat.DISTRIBUTED:
        raise FeatureUnavailable(
            "the Flight Recorder needs torch.distributed, which this torch build lacks",
            requirement="DISTRIBUTED",
        )


def _resolve_group(group: Any, argument: str = "group") -> Any:
    dist = torch.distributed
    if group is None:
        if not dist.is_initialized():
            raise PtcValueError(
                f"{argument}=None means the default process group, but torch.distributed is not "
                "initialized; call torch.distributed.init_process_group first or pass a group"
            )
        return dist.group.WORLD
    if not isinstance(group, dist.ProcessGroup):
        if group is dist.GroupMember.NON_GROUP_MEMBER:
            raise PtcValueError(f"{argument}: this process is not a member of that group")
        raise PtcTypeError(
            f"{argument}: expected a torch.distributed.ProcessGroup or None, got {type(group).__name__}"
        )
    return group


def _group_timeout_s(pg: Any) -> float:
    """The group's own timeout, as the backend was configured; c10d's default if unknown."""
    for device in getattr(pg, "_device_types", ()) or ():
        try:
            timeout = pg._get_backend(device).options._timeout
        except Exception:  # noqa: BLE001 - backends without options (fake, custom)
            continue
        if isinstance(timeout, datetime.timedelta) and timeout.total_seconds() > 0:
            return timeout.total_seconds()
    return torch.distributed.default_pg_timeout.total_seconds()


def _backend_name(pg: Any) -> str:
    try:
        name = str(pg.name())
    except Exception:  # noqa: BLE001
        name = ""
    if name in ("", "custom", "undefined"):
        for device in getattr(pg, "_device_types", ()) or ():
            try:
                return type(pg._get_backend(device)).__name__
            except Exception:  # noqa: BLE001
                continue
    return name or "unknown"


def _default_ranks(pg: Any) -> Optional[List[int]]:
    """Global ranks of ``pg``'s members in group-rank order, where c10d knows them."""
    try:
        return [int(r) for r in torch.distributed.get_process_group_ranks(pg)]
    except Exception:  # noqa: BLE001 - a group built by hand is not registered with c10d
        return None


def _check_ranks(ranks: Any, argument: str) -> List[int]:
    if isinstance(ranks, (str, bytes)) or not isinstance(ranks, Sequence):
        raise PtcTypeError(f"{argument}: expected a list of global ranks, got {type(ranks).__name__}")
    out = []
    for i, r in enumerate(ranks):
        if isinstance(r, bool) or not isinstance(r, int):
            raise PtcTypeError(f"{argument}[{i}]: expected an int rank, got {type(r).__name__}")
        if r < 0:
            raise PtcValueError(f"{argument}[{i}] = {r}: ranks are >= 0")
        out.append(int(r))
    if len(set(out)) != len(out):
        raise PtcValueError(f"{argument} = {out}: ranks must be distinct")
    return out


def _timeout_seconds(timeout: Any, argument: str) -> Optional[float]:
    if timeout is None:
        return None
    if isinstance(timeout, datetime.timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        seconds = float(timeout)
    else:
        raise PtcTypeError(f"{argument}: expected seconds or a datetime.timedelta, got {type(timeout).__name__}")
    if not seconds > 0:
        raise PtcValueError(f"{argument} = {timeout!r}: must be positive")
    return seconds


_ACTIVE: "weakref.WeakSet[FlightRecorder]" = weakref.WeakSet()
_ACTIVE_LOCK = threading.Lock()
_SIGNAL_OWNER: Optional["FlightRecorder"] = None


class FlightRecorder:
    """A bounded ring buffer of the collectives issued on the groups it is attached to.

    Args:
        capacity: how many calls to keep; older ones are dropped (``dropped`` in
            the dump's ``ptc`` section counts them).
        dump_dir: where dumps go (default ``$PTC_FR_DUMP_DIR``, else
            ``<tmp>/ptc_flight_recorder``); every rank of a job should use the same.
        prefix: dump file name before the rank (``rank_`` gives ``rank_0``).
        rank: this process's identity in file names and ``pg_config``; fixed for
            the recorder's life.  Default: the default group's rank when the
            recorder first attaches.  A process that joins a reconfigured job
            must pass the identity the job gives it.
        record_stacks: record the Python stack of each call (off: it costs time).
        stack_depth: at most this many frames per call.
        dump_on_failure: dump when a recorded call fails.
        timeout: seconds (or timedelta) after which an unfinished call triggers a
            dump; default: each group's own timeout.
        store: a ``torch.distributed.Store`` shared by the job; recorders on it
            ask each other to dump when one dumps because of a failure or timeout.
        dump_signal: a signal number (e.g. ``signal.SIGUSR1``) that dumps; needs
            the main thread.
        poll_interval: seconds between the watchdog's timeout checks and store polls.
        capture: ``"auto"``, ``"hooks"`` or ``"wrapper"`` (see
            :mod:`ptc.distributed.fr_capture`).
        core: where records are kept and calls are timed: ``"native"`` (ptc's
            C++ core, :mod:`ptc.distributed.fr_native`; built on first use),
            ``"python"``, or ``"auto"`` (native when it is already built for
            this torch and ``record_stacks`` is off, else python).

    Use as a context manager, or call :meth:`close`, to stop recording and
    release the groups, threads and signal handler.
    """

    def __init__(
        self,
        capacity: int = DEFAULT_CAPACITY,
        *,
        dump_dir: Union[str, os.PathLike, None] = None,
        prefix: str = DEFAULT_PREFIX,
        rank: Optional[int] = None,
        record_stacks: bool = False,
        stack_depth: int = 32,
        dump_on_failure: bool = True,
        timeout: Union[float, datetime.timedelta, None] = None,
        store: Any = None,
        dump_signal: Optional[int] = None,
        poll_interval: float = 1.0,
        capture: str = "auto",
        core: str = "auto",
    ) -> None:
        _check_distributed()
        if isinstance(capacity, bool) or not isinstance(capacity, int):
            raise PtcTypeError(f"capacity: expected an int, got {type(capacity).__name__}")
        if capacity < 1:
            raise PtcValueError(f"capacity = {capacity}: must be at least 1")
        if dump_dir is not None and not isinstance(dump_dir, (str, os.PathLike)):
            raise PtcTypeError(f"dump_dir: expected a path, got {type(dump_dir).__name__}")
        if not isinstance(prefix, str) or os.sep in prefix or (prefix and prefix[-1].isdigit()):
            raise PtcValueError(f"prefix = {prefix!r}: expected a file-name prefix not ending in a digit")
        if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or rank < 0):
            raise PtcValueError(f"rank = {rank!r}: expected an int >= 0 or None")
        if isinstance(stack_depth, bool) or not isinstance(stack_depth, int) or stack_depth < 1:
            raise PtcValueError(f"stack_depth = {stack_depth!r}: expected an int >= 1")
        self._timeout_s = _timeout_seconds(timeout, "timeout")
        poll = _timeout_seconds(poll_interval, "poll_interval")
        if store is not None and not isinstance(store, torch.distributed.Store):
            raise PtcTypeError(f"store: expected a torch.distributed.Store or None, got {type(store).__name__}")
        self._mechanism = fr_capture.resolve_mechanism(capture)
        native = _native_core(core, bool(record_stacks))

        self.capacity = capacity
        self.dump_dir = os.fspath(dump_dir) if dump_dir is not None else _default_dump_dir()
        self.prefix = prefix
        self._record_stacks = bool(record_stacks)
        self._stack_depth = stack_depth
        self.dump_on_failure = bool(dump_on_failure)
        self._rank = rank
        self._poll_s = float(poll)  # type: ignore[arg-type]
        self._store = store

        self._lock = threading.Lock()  # group registration, automatic-dump flags
        self._dump_lock = threading.Lock()
        # The ring.  deque.append and next(itertools.count) are atomic under the GIL, so the
        # recording path takes no lock; concurrent threads may append slightly out of
        # record_id order, which snapshot() sorts out.
        self._buffer: "collections.deque[_Entry]" = collections.deque(maxlen=capacity)
        self._record_ids = itertools.count()
        self._pending: "collections.deque[_Entry]" = collections.deque(maxlen=capacity)  # started, Work held
        self._thread_names: Dict[int, str] = {}
        self._watched = fr_capture.watched_works()
        self._boxes: Dict[int, List[_Group]] = {}  # id(process group) -> [its current generation]
        self._calls: Dict[int, fr_capture.Calls] = {}  # id(process group) -> what capture calls
        self._all_groups: List[_Group] = []  # every (group, generation) seen, for pg_config
        self._detach: Dict[int, Any] = {}
        self._skipped = 0
        self._internal_errors = 0
        self._closed = False
        self.dumps: List[str] = []  # paths written, oldest first

        self._requests: "collections.deque[str]" = collections.deque()  # dump reasons for the thread
        self._publish: "collections.deque[str]" = collections.deque()  # reasons to tell peers
        self._own_reason: Optional[str] = None  # the reason of this recorder's last automatic dump
        self._stop = threading.Event()
        self._store_wake = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        # the native core (None: the Python core above keeps the records)
        self._tap: Any = native.Tap(capacity, self._wake_w) if native is not None else None
        self._attachments: Dict[int, Any] = {}  # id(process group) -> its native Attachment
        self._signal: Optional[int] = None
        self._signal_prev_handler: Any = None
        self._signal_uses_wakeup_fd = False
        try:
            if dump_signal is not None:
                self._install_signal(dump_signal)
            self._threads = [threading.Thread(target=self._serve, name="ptc-fr-watchdog", daemon=True)]
            if store is not None:
                self._peers = _PeerRequests(store)
                self._threads.append(threading.Thread(target=self._watch_store, name="ptc-fr-store", daemon=True))
        except BaseException:
            self._close_pipe()
            raise
        for thread in self._threads:
            thread.start()
        with _ACTIVE_LOCK:
            _ACTIVE.add(self)

    # --- attaching ------------------------------------------------------------

    @property
    def rank(self) -> Optional[int]:
        """This process's identity in dump names (None until known)."""
        return self._rank

    @property
    def capture(self) -> str:
        """The capture mechanism in use: ``"hooks"`` or ``"wrapper"``."""
        return self._mechanism

    @property
    def core(self) -> str:
        """Where the records are kept: ``"native"`` or ``"python"``."""
        return "python" if self._tap is None else "native"

    def attach(
        self,
        group: Any = None,
        *,
        name: Optional[str] = None,
        desc: Optional[str] = None,
        ranks: Optional[Sequence[int]] = None,
        generation: int = 0,
    ) -> "FlightRecorder":
        """Start recording the calls issued on ``group`` (default: the default group).

        ``name``/``desc`` default to the group's c10d ``group_name`` and
        ``group_desc``; a group built by hand has no name and needs one that
        every member passes alike.  ``ranks`` are the members' global ranks in
        group-rank order (default: what c10d knows; required for a group c10d
        does not know).  ``generation`` starts the group in that generation.
        Returns the recorder, so ``FlightRecorder().attach()`` chains.
        """
        self._check_open()
        pg = _resolve_group(group)
        if id(pg) in self._boxes:
            raise PtcValueError(f"group {self._boxes[id(pg)][0].name!r} is already attached to this recorder")
        generation = self._check_generation(generation, "generation")
        base = name if name is not None else str(getattr(pg, "group_name", "") or "")
        if not isinstance(base, str) or not base:
            raise PtcValueError(
                "name: this process group has no c10d group_name (it was built by hand); "
                "pass name=, the same on every member"
            )
        if desc is None:
            desc = str(getattr(pg, "group_desc", "") or "") or "undefined"
        if self._rank is None:
            self._rank = self._own_global_rank(pg, ranks)
        record = self._new_group(pg, base, desc, ranks, generation, "ranks")
        self._start(pg, record)
        return self

    def _start(self, pg: Any, record: "_Group") -> None:
        box = [record]  # the group's current generation; on_reconfigure swaps it in place
        if self._tap is not None:
            attachment = self._tap.attachment(record.pg_id)
            calls = fr_capture.Calls(attachment.begin, attachment.started, attachment.done, self._fr_internal_error)
            self._detach[id(pg)] = fr_capture.attach_native(pg, attachment, calls, self._mechanism)
            self._attachments[id(pg)] = attachment
        else:
            calls = self._calls_for(box)
            self._detach[id(pg)] = fr_capture.attach(pg, calls, self._mechanism)
        self._boxes[id(pg)] = box
        self._calls[id(pg)] = calls

    def detach(self, group: Any = None) -> None:
        """Stop recording ``group``; what was recorded stays in the buffer and in dumps."""
        pg = _resolve_group(group)
        detach = self._detach.pop(id(pg), None)
        if detach is None:
            raise PtcValueError("group: not attached to this recorder")
        detach()
        self._boxes.pop(id(pg), None)
        self._calls.pop(id(pg), None)
        self._attachments.pop(id(pg), None)

    def on_reconfigure(
        self,
        generation: int,
        *,
        group: Any = None,
        new_group: Any = None,
        ranks: Optional[Sequence[int]] = None,
    ) -> None:
        """Move ``group`` to a new generation after a reconfigure.

        Calls recorded from now on are named ``"<name>@gen<generation>"`` with
        sequence ids from 1, and automatic dumps are re-armed.  ``new_group`` is
        the process group that replaces ``group`` when the reconfigure built a
        new one (torch without ``_reconfigure``); the recorder then records it
        instead.  ``ranks``: the new members' global ranks in new group-rank
        order; needed when membership changed (it can only be guessed when the
        size stayed the same and c10d knows the group).
        """
        self._check_open()
        pg = _resolve_group(group)
        box = self._boxes.get(id(pg))
        if box is None:
            raise PtcValueError("group: not attached to this recorder; attach it first")
        old = box[0]
        generation = self._check_generation(generation, "generation")
        if generation <= old.generation:
            raise PtcValueError(
                f"generation = {generation}: must be greater than the group's current generation {old.generation}"
            )
        target = pg if new_group is None else _resolve_group(new_group, "new_group")
        if ranks is None:
            if target.size() != len(old.ranks):
                raise PtcValueError(
                    f"ranks: the group now has {target.size()} members (it had {len(old.ranks)}); pass "
                    "ranks=, the new members' global ranks in group-rank order"
                )
            ranks = _default_ranks(target) if target is not pg else None
            if ranks is None or len(ranks) != target.size():
                ranks = old.ranks
        record = self._new_group(target, old.base_name, old.desc, ranks, generation, "ranks")
        if target is pg:
            box[0] = record
            if self._tap is not None:
                self._attachments[id(pg)].set_slot(record.pg_id)
        else:
            self.detach(pg)
            self._start(target, record)

    def _check_generation(self, generation: Any, argument: str) -> int:
        if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
            raise PtcValueError(f"{argument} = {generation!r}: expected an int >= 0")
        return generation

    def _own_global_rank(self, pg: Any, ranks: Optional[Sequence[int]]) -> int:
        dist = torch.distributed
        if ranks is not None:
            return int(list(ranks)[pg.rank()])
        if dist.is_initialized():
            return int(dist.get_rank())
        return int(pg.rank())

    def _new_group(self, pg: Any, base: str, desc: str, ranks: Optional[Sequence[int]],
                   generation: int, argument: str) -> _Group:  # fmt: skip
        size = pg.size()
        group_rank = pg.rank()
        if ranks is None:
            ranks = _default_ranks(pg)
            if ranks is None:
                raise PtcValueError(
                    f"{argument}: c10d does not know this group's members (it was built by hand); "
                    "pass ranks=, the members' global ranks in group-rank order"
                )
        ranks = _check_ranks(ranks, argument)
        if len(ranks) != size:
            raise PtcValueError(f"{argument} = {ranks}: the group has {size} members, got {len(ranks)} ranks")
        if ranks[group_rank] != self._rank:
            raise PtcValueError(
                f"{argument} = {ranks}: entry {group_rank} (this process's group rank) should be this "
                f"recorder's rank {self._rank}, is {ranks[group_rank]}"
            )
        timeout_s = self._timeout_s if self._timeout_s is not None else _group_timeout_s(pg)
        with self._lock:
            record = _Group(pg, len(self._all_groups), base, desc, ranks, generation,
                            _backend_name(pg), group_rank, timeout_s)  # fmt: skip
            self._all_groups.append(record)
            if self._tap is not None:
                self._tap.set_slot(record.pg_id, record.timeout_ns)
        return record

    # --- the sink interface (called by fr_capture on the issuing thread) -----

    def _calls_for(self, box: List[_Group]) -> fr_capture.Calls:
        """The recording functions for one attached group.

        This is the hot path, run for every collective: it keeps (shape, dtype)
        pairs, counters and times, binds every name it needs locally, and
        leaves everything else to the moment a dump is written.
        """
        append = self._buffer.append
        record_ids = self._record_ids
        pending = self._pending
        popleft = pending.popleft
        watched = self._watched
        thread_names = self._thread_names
        kinds = _KIND_INFO
        record_stacks, stack_depth = self._record_stacks, self._stack_depth
        time_ns = time.time_ns
        done = self._fr_done

        def begin(kind: Any, inputs: Any, outputs: Any, peer: int) -> Optional[_Entry]:
            info = kinds.get(kind)
            if info is None:
                info = _kind_info(kind)
            if not info:
                self._skipped += 1
                return None
            if pending:
                self._discover_head()
            group = box[0]
            entry = _Entry()
            entry.group = group
            entry.kind = info[0]
            if len(inputs) == 1:  # the usual case, without a comprehension's frame
                t = inputs[0]
                entry.inputs = ((t.shape, t.dtype),)
            else:
                entry.inputs = [(t.shape, t.dtype) for t in inputs]
            # in-place collectives' outputs are their inputs (describe() reads them there)
            entry.outputs = () if info[2] or not outputs else [(t.shape, t.dtype) for t in outputs]
            entry.peer = peer
            entry.record_id = next(record_ids)
            if info[1]:
                entry.is_p2p = True
                entry.p2p_seq_id = group.p2p_seq = next(group.p2p_ids)
                entry.collective_seq_id = group.collective_seq
            else:
                entry.is_p2p = False
                entry.collective_seq_id = group.collective_seq = next(group.collective_ids)
                entry.p2p_seq_id = group.p2p_seq
            entry.thread = thread = get_ident()
            if thread not in thread_names:
                thread_names[thread] = threading.current_thread().name
            entry.state = "scheduled"
            entry.time_started_ns = entry.time_completed_ns = entry.error = entry.work = entry.thread_name = None
            entry.timed_out = False
            entry.frames = _stack(stack_depth) if record_stacks else None
            entry.time_created_ns = time_ns()
            append(entry)
            return entry

        def started(entry: _Entry, work: Any) -> None:
            entry.time_started_ns = time_ns()
            if entry.state == "scheduled":
                entry.state = "started"
            if not entry.is_p2p:
                group = entry.group
                if entry.collective_seq_id > group.last_started:
                    group.last_started = entry.collective_seq_id
            if work is not None:
                entry.work = work
                watched[id(work)] = (waited, entry)
                pending.append(entry)

        def waited(entry: _Entry, error: Optional[BaseException]) -> None:
            """``done`` as the Work.wait wrapper calls it (it already took the Work out of
            the watched table): the common success case spelled out, the rest to ``done``."""
            if error is not None or entry.state != "started":
                return done(entry, error)
            entry.time_completed_ns = time_ns()
            entry.work = None
            entry.state = "completed"
            if pending and pending[0] is entry:
                popleft()
            if not entry.is_p2p:
                group = entry.group
                if entry.collective_seq_id > group.last_completed:
                    group.last_completed = entry.collective_seq_id

        return fr_capture.Calls(begin, started, done, self._fr_internal_error)

    def _fr_internal_error(self, exc: BaseException) -> None:
        self._internal_errors += 1
        if self._internal_errors == 1:
            warnings.warn(
                f"ptc FlightRecorder: recording failed ({_short(exc)}); the collective went ahead",
                RuntimeWarning,
                stacklevel=2,
            )

    def _discover_head(self) -> None:
        """Close the oldest pending entries whose Work is done; stop at the first unfinished one.

        Works that nobody waits on in Python (the DDP reducer's, those used
        through futures) are found complete here, at the next recorded call;
        the watchdog (:meth:`_discover_all`) finds the rest.
        """
        pending = self._pending
        while pending:
            try:
                entry = pending[0]
            except IndexError:
                return
            work = entry.work
            if work is not None and entry.state not in _DONE:
                if not work.is_completed():
                    return
                self._fr_done(entry, _work_error(work))
            try:
                if pending[0] is entry:
                    pending.popleft()
            except IndexError:
                return

    def _discover_all(self) -> None:
        """Close every started entry whose Work is done, asking the Work's future too (the
        only completion signal some backends, like ``fake``, give)."""
        for entry in list(self._buffer):
            work = entry.work
            if work is None or entry.state in _DONE:
                continue
            try:
                if work.is_completed() or work.get_future().done():
                    self._fr_done(entry, _work_error(work))
            except Exception as exc:  # noqa: BLE001
                self._fr_internal_error(exc)

    def _fr_done(self, entry: _Entry, error: Optional[BaseException] = None) -> None:
        """Close ``entry``: its call raised, or its Work finished (``error``: how it failed)."""
        if entry.state in _DONE:
            return
        entry.time_completed_ns = time.time_ns()
        work, entry.work = entry.work, None
        if work is not None:
            self._watched.pop(id(work), None)
            pending = self._pending
            if pending and pending[0] is entry:  # the usual case: spare the next call a look
                pending.popleft()
        group = entry.group
        if error is None:
            entry.state = "completed"
            if not entry.is_p2p and entry.collective_seq_id > group.last_completed:
                group.last_completed = entry.collective_seq_id
            return
        entry.state = "failed"
        entry.error = _short(error)
        if self.dump_on_failure:
            try:
                self._auto_dump(group, "failure", f"failure: {entry.describe()} failed: {entry.error}")
            except Exception as exc:  # noqa: BLE001 - never turn a failed collective into a recorder error
                self._fr_internal_error(exc)

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

    # --- dumps ----------------------------------------------------------------

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

    # --- background threads ---------------------------------------------------

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"\0")

    def _request(self, reason: str) -> None:
        self._requests.append(reason)
        self._wake()

    def _serve(self) -> None:
        """Watchdog thread: signal wake-ups, queued dump requests, timeouts."""
        while not self._stop.is_set():
            try:
                readable, _, _ = select.select([self._wake_r], [], [], self._poll_s)
            except (OSError, ValueError):
                return  # the pipe was closed
            if readable:
                try:
                    data = os.read(self._wake_r, 512)
                except OSError:
                    return
                if self._signal is not None and self._signal_uses_wakeup_fd and self._signal in data:
                    self._safe_dump(f"signal {signal.Signals(self._signal).name}")
            while self._requests:
                self._serve_request(self._requests.popleft())
            if self._tap is not None:
                self._dump_native_failures()
            if self._stop.is_set():
                return
            self._check_timeouts()

    def _dump_native_failures(self) -> None:
        """Dump for the calls the native core saw fail (its callback wakes the watchdog)."""
        for record in self._tap.take_failures():
            if not self.dump_on_failure:
                continue
            entry = self._native_entry(record)
            try:
                self._auto_dump(entry.group, "failure", f"failure: {entry.describe()} failed: {entry.error}")
            except Exception as exc:  # noqa: BLE001 - never turn a failed collective into a recorder error
                self._fr_internal_error(exc)

    def _serve_request(self, request: str) -> None:
        """Dump for a request; this rank's own failure or timeout reason, if any, stays first."""
        own = self._own_reason
        self._safe_dump(request if own is None else f"{own}; then {request}")

    def _safe_dump(self, reason: str) -> None:
        try:
            self._write_dump(reason)
        except Exception as exc:  # noqa: BLE001 - a background dump must not kill the thread
            warnings.warn(f"ptc FlightRecorder: dump failed: {_short(exc)}", RuntimeWarning, stacklevel=2)

    def _check_timeouts(self) -> None:
        """Close finished entries nobody waited on; dump once when a call outlives its timeout."""
        if self._tap is not None:
            self._tap.poll()
            now = time.time_ns()
            found = self._tap.overdue(now)
            overdue = self._native_entry(found[0]) if found else None
        else:
            self._discover_all()
            now = time.time_ns()
            overdue = None
            for entry in list(self._buffer):
                if entry.state in _DONE or entry.timed_out:
                    continue
                if now - entry.time_created_ns > entry.group.timeout_ns:
                    entry.timed_out = True
                    if overdue is None:
                        overdue = entry
        if overdue is not None:
            waited_ms = (now - overdue.time_created_ns) // 1_000_000
            try:
                self._auto_dump(
                    overdue.group,
                    "timeout",
                    f"timeout: {overdue.describe()} unfinished after {waited_ms} ms "
                    f"(timeout {overdue.group.timeout_ms} ms, state {overdue.state})",
                )
            except Exception as exc:  # noqa: BLE001
                warnings.warn(f"ptc FlightRecorder: dump failed: {_short(exc)}", RuntimeWarning, stacklevel=2)

    def _watch_store(self) -> None:
        """Store thread: tell peers about our automatic dumps; dump when a peer asks."""
        failures = 0
        while not self._stop.is_set():
            try:
                while self._publish:
                    self._peers.publish(self._publish[0])
                    self._publish.popleft()
                for asked in self._peers.take():
                    self._request(f"requested by {asked}")
                failures = 0
            except Exception as exc:  # noqa: BLE001 - the store's host may be gone
                failures += 1
                if failures == 3:
                    warnings.warn(f"ptc FlightRecorder: store unreachable, peers are no longer asked to dump: {_short(exc)}", RuntimeWarning, stacklevel=2)
                    return
            self._store_wake.wait(self._poll_s)
            self._store_wake.clear()

    # --- signals ----------------------------------------------------------------

    def _install_signal(self, signum: Any) -> None:
        global _SIGNAL_OWNER
        try:
            signum = signal.Signals(signum)
        except (ValueError, TypeError):
            raise PtcValueError(f"dump_signal = {signum!r}: not a signal number") from None
        if threading.current_thread() is not threading.main_thread():
            raise PtcValueError("dump_signal: signal handlers can only be installed from the main thread")
        with _ACTIVE_LOCK:
            if _SIGNAL_OWNER is not None:
                raise PtcValueError(
                    f"dump_signal: another FlightRecorder already dumps on {signal.Signals(_SIGNAL_OWNER._signal).name}; "  # type: ignore[arg-type]
                    "close it first"
                )
            _SIGNAL_OWNER = self
        self._signal = int(signum)
        self._signal_prev_handler = signal.signal(signum, self._on_signal)
        previous_fd = signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        if previous_fd != -1:  # someone (asyncio) owns the wake-up fd: leave it theirs
            signal.set_wakeup_fd(previous_fd)
            self._signal_uses_wakeup_fd = False
            warnings.warn(
                "ptc FlightRecorder: signal.set_wakeup_fd is in use (asyncio?); a dump signal is handled "
                "only when the main thread next runs Python",
                RuntimeWarning,
                stacklevel=3,
            )
        else:
            self._signal_uses_wakeup_fd = True

    def _on_signal(self, signum: int, frame: Any) -> None:
        if not self._signal_uses_wakeup_fd:  # otherwise the watchdog thread already woke up
            self._request(f"signal {signal.Signals(signum).name}")

    def _remove_signal(self) -> None:
        global _SIGNAL_OWNER
        if self._signal is None:
            return
        try:
            if self._signal_uses_wakeup_fd:
                signal.set_wakeup_fd(-1)
            signal.signal(self._signal, self._signal_prev_handler or signal.SIG_DFL)
        except ValueError:  # not the main thread: leave the handler; it does nothing once closed
            warnings.warn("ptc FlightRecorder: close() outside the main thread left the signal handler installed", RuntimeWarning, stacklevel=3)
        with _ACTIVE_LOCK:
            if _SIGNAL_OWNER is self:
                _SIGNAL_OWNER = None
        self._signal = None

    # --- lifetime ---------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise PtcValueError("this FlightRecorder is closed")

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Detach every group, finish pending dump requests, stop the threads, restore the signal."""
        if self._closed:
            return
        for key in list(self._detach):
            self._detach.pop(key)()
        self._boxes.clear()
        self._calls.clear()
        self._attachments.clear()
        if self._tap is not None:
            self._dump_native_failures()  # failures the watchdog has not dumped yet
        self._closed = True
        for entry in list(self._buffer):
            if entry.work is not None:
                self._watched.pop(id(entry.work), None)
        while self._requests:
            self._serve_request(self._requests.popleft())
        self._stop.set()
        self._store_wake.set()
        self._wake()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=max(5.0, 2 * self._poll_s))
        if self._store is not None:
            with contextlib.suppress(Exception):
                while self._publish:
                    self._peers.publish(self._publish.popleft())
        self._remove_signal()
        if self._tap is not None:
            self._tap.close()  # no wake-up byte from now on: the pipe's fd number may be reused at once
        self._close_pipe()
        with _ACTIVE_LOCK:
            _ACTIVE.discard(self)

    def _close_pipe(self) -> None:
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    def __enter__(self) -> "FlightRecorder":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._boxes)} group(s)"
        return (f"FlightRecorder(rank={self._rank}, capacity={self.capacity}, capture={self._mechanism!r}, "
                f"core={self.core!r}, {state})")


class _PeerRequests:
    """Dump requests shared by the recorders on one store: numbered, each reason under its own key.

    ``publish(reason)`` is equivalent to::

        n = store.add(COUNT, 1)            # this request's number
        store.set(REQUEST + str(n), reason)

    ``take()`` yields the reasons of the requests other recorders published since
    the last ``take()``, in number order (a recorder is never asked by its own
    request).  A request whose number is taken but whose reason is not on the store
    yet (its publisher is between the two steps) ends the list; the next ``take()``
    looks again, and serves it as :data:`UNKNOWN` if the reason is still missing.
    """

    UNKNOWN = "a peer (its reason never reached the store)"

    def __init__(self, store: Any) -> None:
        self.store = store
        self.seen = int(store.add(_STORE_COUNT_KEY, 0))  # requests before this recorder are not for it
        self.own: Set[int] = set()
        self.late: Optional[int] = None

    def publish(self, reason: str) -> None:
        number = int(self.store.add(_STORE_COUNT_KEY, 1))
        self.own.add(number)
        self.store.set(f"{_STORE_REQUEST_KEY}{number}", reason)

    def take(self) -> Iterator[str]:
        count = int(self.store.add(_STORE_COUNT_KEY, 0))
        while self.seen < count:
            number = self.seen + 1
            key = f"{_STORE_REQUEST_KEY}{number}"
            if number in self.own:
                self.own.discard(number)
            elif self.store.check([key]):
                yield self.store.get(key).decode(errors="replace")
            elif self.late != number:
                self.late = number
                return
            else:
                yield self.UNKNOWN
            self.seen = number


# --- process-wide helpers -------------------------------------------------------


def active_recorders() -> List[FlightRecorder]:
    """The recorders of this process that are not closed."""
    with _ACTIVE_LOCK:
        return [r for r in _ACTIVE if not r.closed]


def enable(group: Any = None, **options: Any) -> FlightRecorder:
    """Create a :class:`FlightRecorder` with ``options`` and attach it to ``group`` (default group)."""
    recorder = FlightRecorder(**options)
    try:
        recorder.attach(group)
    except BaseException:
        recorder.close()
        raise
    return recorder


def disable(recorder: Optional[FlightRecorder] = None) -> None:
    """Close ``recorder``, or every active recorder of this process when None."""
    if recorder is not None:
        if not isinstance(recorder, FlightRecorder):
            raise PtcTypeError(f"recorder: expected a FlightRecorder or None, got {type(recorder).__name__}")
        recorder.close()
        return
    for r in active_recorders():
        r.close()


@contextlib.contextmanager
def recording(group: Any = None, **options: Any) -> Iterator[FlightRecorder]:
    """``with recording() as rec:`` records ``group`` for the block, then closes the recorder."""
    recorder = enable(group, **options)
    try:
        yield recorder
    finally:
        recorder.close()


def dump_all(reason: str, *, notify_peers: bool = False) -> List[str]:
    """Dump every active recorder of this process now; returns the paths written.

    This is what ptc's fault-tolerant runtime calls on every rank when it
    detects a failure.  ``notify_peers=True`` also asks the recorders on each
    recorder's ``store`` to dump.
    """
    if not isinstance(reason, str):
        raise PtcTypeError(f"reason: expected a str, got {type(reason).__name__}")
    paths = []
    for recorder in active_recorders():
        paths.append(recorder.dump(reason))
        if notify_peers and recorder._store is not None:
            recorder.request_peer_dumps(reason)
    return paths


def on_reconfigure(
    generation: int,
    *,
    group: Any = None,
    new_group: Any = None,
    ranks: Optional[Sequence[int]] = None,
) -> int:
    """Tell every active recorder attached to ``group`` that it moved to ``generation``.

    See :meth:`FlightRecorder.on_reconfigure`; returns how many recorders were updated.
    """
    pg = _resolve_group(group)
    updated = 0
    for recorder in active_recorders():
        if id(pg) in recorder._boxes:
            recorder.on_reconfigure(generation, group=pg, new_group=new_group, ranks=ranks)
            updated += 1
    return updated


@atexit.register
def _close_all_at_exit() -> None:
    for recorder in active_recorders():
        with contextlib.suppress(Exception):
            recorder.close()
