"""The :class:`FlightRecorder` and the process-wide helpers (see :mod:`ptc.distributed.flight_recorder`).

The recorder is put together from its parts: attaching groups and recording
their calls (:mod:`~ptc.distributed.flight_recorder.attach`), the ring
buffer's records and the dumps (:mod:`~ptc.distributed.flight_recorder.dumps`),
the background threads (:mod:`~ptc.distributed.flight_recorder.threads`), and
dumps asked for by a signal or a peer (:mod:`~ptc.distributed.flight_recorder.signals`).
This module holds what ties them together: construction, lifetime, and the
registry of the process's recorders.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import datetime
import itertools
import os
import tempfile
import threading
import warnings
import weakref
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

import torch

from ptc import _compat
from ptc.distributed.flight_recorder import capture as fr_capture
from ptc.distributed.flight_recorder import native as fr_native
from ptc.distributed.flight_recorder.attach import _Attaching, _resolve_group
from ptc.distributed.flight_recorder.dumps import _Dumps, _Entry, _Group, _short
from ptc.distributed.flight_recorder.signals import _PeerRequests, _Signals
from ptc.distributed.flight_recorder.threads import _Threads
from ptc.errors import FeatureUnavailable, PtcTypeError, PtcValueError

DEFAULT_CAPACITY = 2048
DEFAULT_PREFIX = "rank_"
DUMP_DIR_ENV = "PTC_FR_DUMP_DIR"


def _default_dump_dir() -> str:
    return os.environ.get(DUMP_DIR_ENV) or os.path.join(tempfile.gettempdir(), "ptc_flight_recorder")


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


class FlightRecorder(_Attaching, _Dumps, _Threads, _Signals):
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
            :mod:`ptc.distributed.flight_recorder.capture`).
        core: where records are kept and calls are timed: ``"native"`` (ptc's
            C++ core, :mod:`ptc.distributed.flight_recorder.native`; built on first use),
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

    # --- what it is ----------------------------------------------------------

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
