"""The recorder's background threads (``_Threads``: a part of ``FlightRecorder``).

The watchdog thread wakes on the recorder's pipe (a dump signal, a queued
request, a failure the native core saw) or every ``poll_interval``: it serves
dump requests, dumps for failures, and dumps once when a call outlives its
group's timeout.  With ``store=`` a second thread tells the peers about this
recorder's automatic dumps and queues the dumps they ask for
(:class:`~ptc.distributed.flight_recorder.signals._PeerRequests`).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
import warnings

from ptc.distributed.flight_recorder.dumps import _DONE, _short


class _Threads:
    """``FlightRecorder``'s background threads (its state is set up by ``FlightRecorder.__init__``)."""

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
