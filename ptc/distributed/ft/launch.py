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

With ``coordinator_process=True`` the coordinator is a process of its own
(``python -m ptc.distributed.ft.coordinator``, its timeline in
``<log_dir>/coordinator.jsonl``) that the launcher supervises: when it dies
the launcher starts it again at the same address after
``coordinator_restart_after`` seconds, and the new one rebuilds the job's
state from the members that reconnect (the members train on meanwhile).
``kill_coordinator_at``: steps at which the launcher SIGKILLs it (the
coordinator's fault).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ptc.distributed.ft import auth
from ptc.distributed.ft import faults as ft_faults
from ptc.distributed.ft.coordinator import READY_TIMEOUT, Coordinator
from ptc.distributed.processes import wait_then_kill
from ptc.errors import PtcValueError

# How long a restart waits for a failed worker's process to finish exiting (see LocalJob._fire).
RESTART_EXIT_WAIT_S = 0.5


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


class CoordinatorProcess:
    """A coordinator run as a process by :class:`LocalJob` (``coordinator_process=True``): started,
    and started again at the same address when it died, by PID; its timeline is read from its log."""

    def __init__(self, job: "LocalJob") -> None:
        self._job = job
        self.log = job.log_dir / "coordinator.jsonl"
        self.port = 0
        self.host = "127.0.0.1"
        self.proc: Optional[subprocess.Popen] = None
        self.history: List[Dict[str, Any]] = []
        self.incarnations: List[int] = []  # the PIDs, in order
        self._offset = 0
        self._partial = b""

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> "CoordinatorProcess":
        job = self._job
        args = [sys.executable, "-m", "ptc.distributed.ft.coordinator", "--host", self.host, "--port", str(self.port),
                "--world-size", str(job.world_size), "--heartbeat-timeout", str(job.heartbeat_timeout),
                "--ready-timeout", str(job.ready_timeout), "--log", str(self.log), "--print-address"]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": "1", auth.ENV_SECRET: job.secret}
        env.pop(auth.ENV_SECRET_FILE, None)
        with open(job.log_dir / f"coordinator-{len(self.incarnations)}.log", "wb") as err:
            self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, env=env)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode().strip()
        self.proc.stdout.close()
        if not line:
            self.proc.wait(timeout=10)
            raise PtcValueError(f"the coordinator process did not start (see {job.log_dir}/coordinator-*.log)")
        self.port = int(line.rsplit(":", 1)[1])
        self.incarnations.append(self.proc.pid)
        self._event("coordinator_started", pid=self.proc.pid, address=self.address,
                    incarnation=len(self.incarnations))  # fmt: skip
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, why: str) -> None:
        """SIGKILL it (by PID): the coordinator's fault."""
        if self.alive():
            assert self.proc is not None
            self._event("coordinator_killed", pid=self.proc.pid, why=why)
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
            wait_then_kill([self.proc], 5.0)
        self.poll()

    def poll(self) -> None:
        """Read what its log gained since the last call into the timeline (and the job's queue)."""
        try:
            with open(self.log, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            self.history.append(record)
            self._job._events.put(record)

    def _event(self, name: str, **data: Any) -> None:
        """A launcher's event on the timeline (its clock: this machine's, as the coordinator's)."""
        record = {"time": time.time(), "who": "launcher", "event": name, **data}
        self.history.append(record)
        self._job._events.put(record)


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

    ``coordinator_process=True``: the coordinator runs as a process
    (:class:`CoordinatorProcess`, then ``coordinator``), started again at the
    same address ``coordinator_restart_after`` seconds after it died (None:
    never); ``kill_coordinator_at``: steps (the first ``commit`` event
    reaching each) at which the launcher SIGKILLs it.
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
        coordinator_process: bool = False,
        coordinator_restart_after: Optional[float] = 0.5,
        kill_coordinator_at: Sequence[int] = (),
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
        if kill_coordinator_at and not coordinator_process:
            raise PtcValueError("kill_coordinator_at: needs coordinator_process=True (a coordinator thread cannot be killed)")
        self.coordinator_process = bool(coordinator_process)
        self.coordinator_restart_after = None if coordinator_restart_after is None else float(coordinator_restart_after)
        self.kill_coordinator_at = sorted(kill_coordinator_at)
        self._kills: List[int] = []  # the coordinator kills still to come (run)
        self._coordinator_down = False  # its death was seen and not yet answered with a restart
        self.runs: List[WorkerRun] = []
        self._events: "queue.Queue[Dict[str, Any]]" = queue.Queue()
        self._faults_path: Optional[Path] = None  # the fault plan's file, once run() wrote it

    def _spawn(self, coordinator: Any, worker: int, kind: str) -> WorkerRun:
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
        coordinator: Any
        if self.coordinator_process:
            coordinator = CoordinatorProcess(self)
        else:
            coordinator = Coordinator(world_size=self.world_size, heartbeat_timeout=self.heartbeat_timeout,
                                      ready_timeout=self.ready_timeout, secret=self.secret,
                                      on_event=self._events.put)  # fmt: skip
        self.coordinator = coordinator.start()
        started = time.monotonic()
        timed_out = False
        timers: List[Tuple[float, str, Any]] = []  # (when, action, argument)
        joins = list(self.joins)
        self._kills = list(self.kill_coordinator_at)
        try:
            for worker in range(self.world_size):
                self._spawn(coordinator, worker, "initial")
            while True:
                now = time.monotonic()
                if now - started > timeout:
                    timed_out = True
                    break
                if self.coordinator_process:
                    coordinator.poll()
                    if (not coordinator.alive() and not self._coordinator_down
                            and any(r.proc.poll() is None for r in self.runs)):  # fmt: skip
                        self._coordinator_down = True
                        coordinator._event("coordinator_exited", pid=coordinator.proc.pid,
                                           returncode=coordinator.proc.returncode)  # fmt: skip
                        if self.coordinator_restart_after is not None:
                            timers.append((now + self.coordinator_restart_after, "restart_coordinator", None))
                self._drain(coordinator, joins, timers)
                for entry in [t for t in timers if t[0] <= now]:
                    timers.remove(entry)
                    self._fire(coordinator, entry[1], entry[2])
                if all(r.proc.poll() is not None for r in self.runs) and not [t for t in timers
                                                                               if t[1] != "restart_coordinator"]:  # fmt: skip
                    self._drain(coordinator, joins, timers)
                    if not timers:
                        break
                time.sleep(0.01)
        finally:
            wait_then_kill([r.proc for r in self.runs], 0.0 if timed_out else 10.0)
            coordinator.stop()
        # the membership timeline and the (bounded) record of refused connections, in time order
        events = sorted([*coordinator.history, *getattr(coordinator, "rejections", ())], key=lambda e: e["time"])
        return JobResult(list(events), list(self.runs), time.monotonic() - started, timed_out, self.log_dir)

    def _drain(self, coordinator: Any, joins: List[Tuple[int, int]], timers: List[Tuple[float, str, Any]]) -> None:
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

    def _react(self, coordinator: Any, event: Dict[str, Any], joins: List[Tuple[int, int]],
               timers: List[Tuple[float, str, Any]]) -> None:  # fmt: skip
        """The launcher's side of the fault kit, for one timeline event."""
        name = event["event"]
        if name == "fault_stop":
            timers.append((time.monotonic() + float(event["cont_after"]), "cont", int(event["pid"])))
        elif name == "commit":
            while self._kills and int(event["step"]) >= self._kills[0]:
                self._kills.pop(0)
                coordinator.kill(f"kill_coordinator_at step {event['step']}")
            while joins and int(event["step"]) >= joins[0][0]:
                _, worker = joins.pop(0)
                self._spawn(coordinator, worker, "joiner")
        elif name == "worker_failed" and self.restart_after is not None:
            worker = int(event["worker"])
            ours = [r for r in self.runs if r.worker == worker]  # a worker this launcher started, not a stranger
            if ours:  # (whether one of them still runs is decided when the timer fires: _fire)
                timers.append((time.monotonic() + self.restart_after, "restart", worker))

    def _fire(self, coordinator: Any, action: str, argument: Any) -> None:
        if action == "restart_coordinator":
            if not coordinator.alive() and any(r.proc.poll() is None for r in self.runs):
                coordinator._event("coordinator_restart", address=coordinator.address)
                coordinator.start()
                self._coordinator_down = False
        elif action == "cont":
            if any(r.proc.pid == argument and r.proc.poll() is None for r in self.runs):
                os.kill(argument, signal.SIGCONT)
                coordinator._event("sigcont", pid=argument)
        elif action == "restart":
            alive = [r for r in self.runs if r.worker == argument and r.proc.poll() is None]
            # The coordinator sees a killed process's connection close (its files are closed as it
            # exits) a moment before poll() can report the exit: give a dying one that moment.
            deadline = time.monotonic() + RESTART_EXIT_WAIT_S
            for r in alive:
                try:
                    r.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
            if not any(r.proc.poll() is None for r in alive):  # a live one (hung, stopped) is not doubled
                self._spawn(coordinator, argument, "restart")


def python_module(module: str, *args: str) -> Any:
    """A ``command`` for :class:`LocalJob`: ``python -m module args...`` for every worker."""
    return lambda worker: [sys.executable, "-m", module, *args]
