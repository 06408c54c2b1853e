"""LocalJob restarts a failed worker whose process is still finishing its exit (the
coordinator sees a killed process's connection close a moment before ``poll()`` can report
the exit), and never doubles one that is still running (hung or stopped)."""

import subprocess
import sys
import time
from pathlib import Path

from ptc.distributed.ft.launch import LocalJob, WorkerRun, python_module


def _job_with_run(tmp_path: Path, seconds: float):
    job = LocalJob(python_module("ptc.demos.ft_example"), 2, restart_after=0.0)
    proc = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])
    job.runs.append(WorkerRun(1, "restart", proc, tmp_path / "log", time.monotonic()))
    spawned = []
    job._spawn = lambda coordinator, worker, kind: spawned.append((worker, kind))
    return job, proc, spawned


def test_a_worker_still_exiting_is_restarted(tmp_path):
    job, proc, spawned = _job_with_run(tmp_path, 0.15)
    timers = []
    job._react(None, {"event": "worker_failed", "worker": 1}, [], timers)
    assert [t[1:] for t in timers] == [("restart", 1)]  # scheduled though its process still runs
    job._fire(None, "restart", 1)
    assert spawned == [(1, "restart")] and proc.poll() == 0


def test_a_worker_that_keeps_running_is_not_doubled(tmp_path):
    job, proc, spawned = _job_with_run(tmp_path, 30)
    try:
        started = time.monotonic()
        job._fire(None, "restart", 1)
        assert spawned == [] and time.monotonic() - started < 2
    finally:
        proc.kill()
        proc.wait()
