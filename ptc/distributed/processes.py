"""Bounded waiting on worker processes this program started."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Sequence


def wait_then_kill(procs: Sequence[subprocess.Popen], timeout: float) -> None:
    """Wait up to ``timeout`` seconds in all for ``procs`` to exit, then SIGKILL
    (by PID) and reap the ones still running. Only ever touches ``procs``."""
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
