"""Helpers for the distributed tests (imported as ``fr_helpers``).

Multi-process scenarios: workers (``fr_worker.py``) are started with
``subprocess.Popen`` and stopped only by their own PID; the parent hosts the
TCPStore on a port the OS picks, so no port is guessed.  In-process scenarios:
several simulated ranks, each a hand-built process group on torch's ``fake``
backend with its own recorder.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch
import torch.distributed as dist

from ptc.distributed.processes import wait_then_kill

HERE = Path(__file__).resolve().parent
WORKER = HERE / "fr_worker.py"
PTC = Path(sys.executable).with_name("ptc")
TORCHFRTRACE = Path(sys.executable).with_name("torchfrtrace")


@dataclass
class Run:
    """A finished (or stopped) multi-process scenario."""

    scenario: str
    dump_dir: Path
    returncodes: List[Optional[int]]
    outputs: List[str]
    store: dist.TCPStore
    events: List[List[Dict]] = field(default_factory=list)

    def describe(self) -> str:
        return "\n".join(f"--- rank {r} rc={rc}\n{out}" for r, (rc, out) in enumerate(zip(self.returncodes, self.outputs)))


def launch(
    scenario: str,
    world: int,
    dump_dir: Path,
    *,
    mode: str = "",
    core: str = "auto",
    timeout: float = 60.0,
    while_running: Optional[Callable[[List[subprocess.Popen], dist.TCPStore], None]] = None,
) -> Run:
    """Run ``world`` workers of ``scenario`` to the end (bounded by ``timeout``), killing leftovers.

    ``core``: the Flight Recorder core the workers' recorders use (``FlightRecorder(core=...)``).
    """
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(seconds=60))
    dump_dir.mkdir(parents=True, exist_ok=True)
    logs = [dump_dir.parent / f"{dump_dir.name}-rank{r}.log" for r in range(world)]
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", PTC_TEST_FR_CORE=core)
    procs: List[subprocess.Popen] = []
    files = []
    try:
        for r in range(world):
            f = open(logs[r], "w")
            files.append(f)
            procs.append(subprocess.Popen(
                [sys.executable, str(WORKER), scenario, str(r), str(world), str(store.port), str(dump_dir), mode],
                stdout=f, stderr=subprocess.STDOUT, env=env,
            ))  # fmt: skip
        if while_running is not None:
            while_running(procs, store)
        wait_then_kill(procs, timeout)
    finally:
        wait_then_kill(procs, 0)  # after an error: reap what was started, at once
        for f in files:
            f.close()
    outputs = [log.read_text() for log in logs]
    events = [[json.loads(line) for line in out.splitlines() if line.startswith('{"event"')] for out in outputs]
    return Run(scenario, dump_dir, [p.returncode for p in procs], outputs, store, events)


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    assert PTC.exists(), f"console script not installed at {PTC}"
    return subprocess.run([str(PTC), *args], capture_output=True, text=True, timeout=timeout)


def run_torchfrtrace(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """torch's own analyzer, as a user runs it."""
    assert TORCHFRTRACE.exists(), f"torchfrtrace not installed at {TORCHFRTRACE}"
    return subprocess.run([str(TORCHFRTRACE), *args], capture_output=True, text=True, timeout=timeout)


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def gloo_groups(size: int, timeout_s: float = 30.0) -> list:
    """The ``size`` gloo process groups of one world, all in this process (rank r's is item r),
    connected in threads; built without c10d's registry of groups."""
    import threading

    from ptc import _compat

    store = dist.HashStore()
    groups: list = [None] * size

    def connect(rank: int) -> None:
        groups[rank] = _compat.gloo_process_group(store, rank, size, datetime.timedelta(seconds=timeout_s))

    threads = [threading.Thread(target=connect, args=(r,)) for r in range(size)]
    [t.start() for t in threads], [t.join(30) for t in threads]
    assert all(g is not None for g in groups), "the gloo groups did not connect"
    return groups


def fake_group(rank: int, size: int):
    """A process group built by hand on the ``fake`` backend (no c10d registration, no name)."""
    from torch._C._distributed_c10d import FakeProcessGroup

    pg = dist.ProcessGroup(dist.HashStore(), rank, size)
    backend = FakeProcessGroup._create_internal(rank, size)
    pg._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.CUSTOM, backend)
    pg._set_default_backend(dist.ProcessGroup.BackendType.CUSTOM)
    return pg


class SimulatedRanks:
    """``size`` simulated ranks in this process, each with its own fake group and recorder."""

    def __init__(self, size: int, dump_dir: Path, capacities: Optional[List[int]] = None, **options) -> None:
        from ptc.distributed import FlightRecorder

        self.dump_dir = dump_dir
        self.groups = [fake_group(r, size) for r in range(size)]
        capacities = capacities or [64] * size
        self.recorders = [
            FlightRecorder(capacities[r], rank=r, dump_dir=dump_dir, **options).attach(
                self.groups[r], name="world", ranks=list(range(size))
            )
            for r in range(size)
        ]

    def all_reduce(self, ranks, numel: int = 8, dtype=torch.float32) -> None:
        for r in ranks:
            self.groups[r].allreduce([torch.ones(numel, dtype=dtype)]).wait()

    def broadcast(self, ranks, numel: int = 8, root: int = 0) -> None:
        for r in ranks:
            opts = dist.BroadcastOptions()
            opts.rootRank = root
            self.groups[r].broadcast([torch.ones(numel)], opts).wait()

    def send(self, src: int, dst: int, numel: int = 4) -> None:
        self.groups[src].send([torch.ones(numel)], dst, 0).wait()

    def recv(self, dst: int, src: int, numel: int = 4) -> None:
        self.groups[dst].recv([torch.zeros(numel)], src, 0).wait()

    def dump(self, ranks=None) -> Path:
        for r, rec in enumerate(self.recorders):
            if ranks is None or r in ranks:
                rec.dump("test")
        return self.dump_dir

    def close(self) -> None:
        for rec in self.recorders:
            rec.close()
