"""Run a fault-tolerant job on this machine: a coordinator thread plus worker processes.

:class:`LocalJob` is what the tests, ``ptc demo ft`` and ``benchmarks/ft.py``
use.  The launcher hosts the coordinator (so no worker holds the store),
starts ``world_size`` workers, applies the launcher's side of the fault kit
(SIGCONT after a ``stop``; joiners started when the group reaches a step;
failed workers restarted as joiners) and stops every process it started, by
PID, when the job ends or its time is up.  Every membership and worker event
lands in one timeline (one clock: the coordinator's).

Each job has a secret of its own (:mod:`ptc.distributed.ft.auth`): the
launcher generates it, its coordinator admits only workers that prove they
know it, and the workers it starts get it in ``$PTC_FT_SECRET``.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ptc.distributed.ft import auth
from ptc.distributed.ft import faults as ft_faults
from ptc.distributed.ft.coordinator import READY_TIMEOUT, Coordinator
from ptc.distributed.processes import wait_then_kill
from ptc.errors import PtcValueError


@dataclass
class WorkerRun:
    """One worker process the launcher started."""

    worker: int
    kind: str  # "initial", "joiner" or "restart"
    proc: subprocess.Popen
    log: Path
    started: float

    @property
    def returncode(self) -> Optional[int]:
        return self.proc.returncode

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@dataclass
class JobResult:
    """What happened: ``events`` (the coordinator's timeline), the worker runs, and whether time ran out."""

    events: List[Dict[str, Any]]
    runs: List[WorkerRun]
    elapsed: float
    timed_out: bool
    log_dir: Path

    def describe(self) -> str:
        lines = [f"elapsed {self.elapsed:.2f} s, timed out: {self.timed_out}"]
        for run in self.runs:
            lines.append(f"--- worker {run.worker} ({run.kind}, pid {run.proc.pid}) rc={run.returncode}")
            lines.append(run.output()[-3000:])
        return "\n".join(lines)

    def of(self, name: str) -> List[Dict[str, Any]]:
        return [e for e in self.events if e["event"] == name]


class LocalJob:
    """``command(worker_id)`` -> argv of one worker; see the module docstring.

    ``faults``: :class:`~ptc.distributed.ft.faults.Fault` records given to the
    initial workers: the job writes them to ``<log_dir>/faults.json`` and
    appends ``--faults <that path>`` to each initial worker's argv; the
    worker's script hands ``ft_faults.load(path)`` to
    ``init_fault_tolerant(faults=...)``.  ``joins``: ``(step, worker_id)``
    pairs: start that worker when some member reports committing ``step``.  ``restart_after``: restart
    a worker that died (not one that left) as a joiner after that many
    seconds; it is admitted only while the job runs (a worker that comes
    after every member left is refused with
    :class:`~ptc.errors.JobFinished`), so the members must still be
    training when it is up: e.g. ft_example's ``--until-size``.
    ``heartbeat_timeout`` and ``ready_timeout`` go to the coordinator.
    ``timeout``: the whole job's bound.  ``on_event``: called in the
    launcher's thread with every timeline event as it arrives (live
    progress; what it raises is not caught).  While :meth:`run` runs,
    ``coordinator`` is the job's :class:`Coordinator` (its ``address``) and
    ``secret`` the job secret its workers get.
    """

    def __init__(
        self,
        command: Any,
        world_size: int,
        *,
        faults: Sequence[ft_faults.Fault] = (),
        joins: Sequence[Tuple[int, int]] = (),
        restart_after: Optional[float] = None,
        heartbeat_timeout: float = 2.0,
        ready_timeout: float = READY_TIMEOUT,
        log_dir: Optional[os.PathLike] = None,
        env: Optional[Dict[str, str]] = None,
        on_event: Optional[Callable[[Dict[str, Any]], None]] = None,
    ) -> None:
        if not callable(command):
            raise PtcValueError("command: expected a callable worker_id -> argv list")
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise PtcValueError(f"world_size = {world_size!r}: expected an int >= 1")
        self.command = command
        self.world_size = world_size
        self.faults = list(faults)
        self.joins = sorted(joins)
        self.restart_after = restart_after
        self.heartbeat_timeout = heartbeat_timeout
        self.ready_timeout = ready_timeout
        self.secret = auth.new_secret()
        self.coordinator: Optional[Coordinator] = None
        self.log_dir = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="ptc-ft-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.env = dict(env or {})
        if on_event is not None and not callable(on_event):
            raise PtcValueError("on_event: expected a callable taking one event dict")
        self.on_event = on_event
        self.runs: List[WorkerRun] = []
        self._events: "queue.Queue[Dict[str, Any]]" = queue.Queue()
        self._faults_path: Optional[Path] = None  # the fault plan's file, once run() wrote it

    def _spawn(self, coordinator: Coordinator, worker: int, kind: str) -> WorkerRun:
        env = {**os.environ, **self.env, "OMP_NUM_THREADS": "1", "PTC_FT_COORDINATOR": coordinator.address,
               "RANK": str(worker), auth.ENV_SECRET: self.secret}  # fmt: skip
        env.pop("WORLD_SIZE", None)
        env.pop(auth.ENV_SECRET_FILE, None)
        command = self.command(worker)
        if kind == "initial":
            env["WORLD_SIZE"] = str(self.world_size)
            if self._faults_path is not None:
                command = [*command, "--faults", str(self._faults_path)]
        log = self.log_dir / f"worker{worker}-{len(self.runs)}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env)  # fmt: skip
        run = WorkerRun(worker, kind, proc, log, time.time())
        self.runs.append(run)
        coordinator._event("spawn", worker=worker, kind=kind, pid=proc.pid)
        return run

    def run(self, timeout: float = 120.0) -> JobResult:
        """Start the job and wait (at most ``timeout`` s) until every worker exited."""
        if self.faults:
            self._faults_path = self.log_dir / "faults.json"
            ft_faults.save(self._faults_path, self.faults)
        coordinator = Coordinator(world_size=self.world_size, heartbeat_timeout=self.heartbeat_timeout,
                                  ready_timeout=self.ready_timeout, secret=self.secret,
                                  on_event=self._events.put)  # fmt: skip
        self.coordinator = coordinator.start()
        started = time.monotonic()
        timed_out = False
        timers: List[Tuple[float, str, Any]] = []  # (when, action, argument)
        joins = list(self.joins)
        try:
            for worker in range(self.world_size):
                self._spawn(coordinator, worker, "initial")
            while True:
                now = time.monotonic()
                if now - started > timeout:
                    timed_out = True
                    break
                self._drain(coordinator, joins, timers)
                for entry in [t for t in timers if t[0] <= now]:
                    timers.remove(entry)
                    self._fire(coordinator, entry[1], entry[2])
                if all(r.proc.poll() is not None for r in self.runs) and not timers:
                    self._drain(coordinator, joins, timers)
                    if not timers:
                        break
                time.sleep(0.01)
        finally:
            wait_then_kill([r.proc for r in self.runs], 0.0 if timed_out else 10.0)
            coordinator.stop()
        return JobResult(list(coordinator.history), list(self.runs), time.monotonic() - started, timed_out, self.log_dir)

    def _drain(self, coordinator: Coordinator, joins: List[Tuple[int, int]], timers: List[Tuple[float, str, Any]]) -> None:
        while True:
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                return
            if self.on_event is not None:
                self.on_event(event)
            try:
                self._react(coordinator, event, joins, timers)
            except (KeyError, TypeError, ValueError):  # a worker's event without the fields its name promises
                pass

    def _react(self, coordinator: Coordinator, event: Dict[str, Any], joins: List[Tuple[int, int]],
               timers: List[Tuple[float, str, Any]]) -> None:  # fmt: skip
        """The launcher's side of the fault kit, for one timeline event."""
        name = event["event"]
        if name == "fault_stop":
            timers.append((time.monotonic() + float(event["cont_after"]), "cont", int(event["pid"])))
        elif name == "commit":
            while joins and int(event["step"]) >= joins[0][0]:
                _, worker = joins.pop(0)
                self._spawn(coordinator, worker, "joiner")
        elif name == "worker_failed" and self.restart_after is not None:
            worker = int(event["worker"])
            ours = [r for r in self.runs if r.worker == worker]  # a worker this launcher started, not a stranger
            if ours and not any(r.proc.poll() is None and r.kind != "initial" for r in ours):
                timers.append((time.monotonic() + self.restart_after, "restart", worker))

    def _fire(self, coordinator: Coordinator, action: str, argument: Any) -> None:
        if action == "cont":
            if any(r.proc.pid == argument and r.proc.poll() is None for r in self.runs):
                os.kill(argument, signal.SIGCONT)
                coordinator._event("sigcont", pid=argument)
        elif action == "restart":
            alive = [r for r in self.runs if r.worker == argument and r.proc.poll() is None]
            if not alive:
                self._spawn(coordinator, argument, "restart")


def python_module(module: str, *args: str) -> Any:
    """A ``command`` for :class:`LocalJob`: ``python -m module args...`` for every worker."""
    return lambda worker: [sys.executable, "-m", module, *args]
