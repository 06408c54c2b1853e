"""Helpers for the fault-tolerance tests (imported as ``ft_helpers``).

Each scenario runs the example worker (``ptc.demos.ft_example``) under
:class:`~ptc.distributed.ft.launch.LocalJob`: the coordinator is a thread of
the test process, workers are processes stopped only by their own PID.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence

import torch

from ptc.demos import ft_example
from ptc.distributed.ft.launch import JobResult, LocalJob, python_module


@dataclass
class Outcome:
    result: JobResult
    outputs: Dict[int, dict]  # worker id -> what ft_example wrote

    def describe(self) -> str:
        events = "\n".join(
            f"{e['time'] % 1000:9.3f} {e['event']} " + str({k: v for k, v in e.items() if k not in ('time', 'who', 'event')})
            for e in self.result.events if e["event"] not in ("commit", "hello")  # fmt: skip
        )
        return f"{events}\n{self.result.describe()}"

    def generations(self) -> List[dict]:
        return self.result.of("generation")


def run_scenario(tmp_path: Path, world: int, *, steps: int = 40, faults: Sequence = (), joins: Sequence = (),
                 restart_after=None, until_size: int = 0, ddp: bool = False, engine: str = "auto",
                 sleep: float = 0.0, heartbeat_timeout: float = 3.0, timeout: float = 150.0,
                 extra: Sequence[str] = ()) -> Outcome:  # fmt: skip
    out = tmp_path / "out"
    args = ["--steps", str(steps), "--out", str(out), "--engine", engine, "--sleep", str(sleep),
            "--until-size", str(until_size), *extra]  # fmt: skip
    if ddp:
        args.append("--ddp")
    job = LocalJob(python_module("ptc.demos.ft_example", *args), world, faults=faults, joins=joins,
                   restart_after=restart_after, heartbeat_timeout=heartbeat_timeout, log_dir=tmp_path / "logs")  # fmt: skip
    result = job.run(timeout=timeout)
    outputs = {}
    for path in sorted(out.glob("worker*.pt")) if out.exists() else []:
        data = torch.load(path, weights_only=False)
        outputs[int(data["worker"])] = data
    return Outcome(result, outputs)


def check_consistent(outcome: Outcome, *, expect_workers: Sequence[int]) -> None:
    """Every surviving worker finished, states are bit-identical, and equal to the replay of the history."""
    text = outcome.describe()
    assert not outcome.result.timed_out, text
    for run in outcome.result.runs:
        assert run.proc.poll() is not None, f"worker {run.worker} (pid {run.proc.pid}) still running\n{text}"
    assert sorted(outcome.outputs) == sorted(expect_workers), text
    finals = list(outcome.outputs.values())
    assert len({d["checksum"] for d in finals}) == 1, text
    assert len({d["generation"] for d in finals}) == 1, text
    reference = finals[0]
    for d in finals[1:]:
        for key, value in reference["state"].items():
            assert torch.equal(value, d["state"][key]), f"{key} differs on worker {d['worker']}\n{text}"
        assert d["history"] == reference["history"], text
    history = reference["history"]
    assert [s for s, _, _ in history] == list(range(len(history))), "a committed step was lost or repeated"
    replayed = ft_example.replay(history)
    for key, value in replayed.items():
        torch.testing.assert_close(reference["state"][key], value, rtol=1e-12, atol=1e-14)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
