"""Dumps asked for from outside the recorder: a signal (``_Signals``: a part of
``FlightRecorder``), or a peer's request through the store (``_PeerRequests``).

One recorder per process may dump on a signal (``dump_signal=``); the signal
wakes the recorder's watchdog thread through ``signal.set_wakeup_fd``, so a
process whose main thread is blocked in a collective still dumps at once.
"""

from __future__ import annotations

import signal
import threading
import warnings
from typing import Any, Iterator, Optional, Set

from ptc.errors import PtcValueError

_STORE_COUNT_KEY = "ptc/flight_recorder/dump_requests"  # how many requests were ever published
_STORE_REQUEST_KEY = "ptc/flight_recorder/request/"  # + a request's number: "rank R: its reason"
_SIGNAL_LOCK = threading.Lock()
_SIGNAL_OWNER: Optional[Any] = None  # the recorder that dumps on a signal (one per process)


class _Signals:
    """``FlightRecorder``'s dump signal (its state is set up by ``FlightRecorder.__init__``)."""

    def _install_signal(self, signum: Any) -> None:
        global _SIGNAL_OWNER
        try:
            signum = signal.Signals(signum)
        except (ValueError, TypeError):
            raise PtcValueError(f"dump_signal = {signum!r}: not a signal number") from None
        if threading.current_thread() is not threading.main_thread():
            raise PtcValueError("dump_signal: signal handlers can only be installed from the main thread")
        with _SIGNAL_LOCK:
            if _SIGNAL_OWNER is not None:
                raise PtcValueError(
                    f"dump_signal: another FlightRecorder already dumps on {signal.Signals(_SIGNAL_OWNER._signal).name}; "  # type: ignore[arg-type]
                    "close it first"
                )
            _SIGNAL_OWNER = self
        try:
            self._signal_prev_handler = signal.signal(signum, self._on_signal)
        except (OSError, ValueError) as e:  # SIGKILL, SIGSTOP: no handler can be installed
            with _SIGNAL_LOCK:
                _SIGNAL_OWNER = None
            raise PtcValueError(f"dump_signal = {signum.name}: no handler can be installed for it ({e})") from None
        self._signal = int(signum)
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
        with _SIGNAL_LOCK:
            if _SIGNAL_OWNER is self:
                _SIGNAL_OWNER = None
        self._signal = None


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
