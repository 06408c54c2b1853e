"""Helpers for the fault-tolerance tests (imported as ``ft_helpers``).

Each scenario runs the example worker (``ptc.demos.ft_example``) under
:class:`~ptc.distributed.ft.launch.LocalJob`: the coordinator is a thread of
the test process, workers are processes stopped only by their own PID.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Sequence

import torch

from ptc.demos import ft_example
from ptc.distributed.ft import auth as ft_auth
from ptc.distributed.ft import wire as ft_wire
from ptc.distributed.ft.launch import JobResult, LocalJob, python_module

SECRET = b"s3cret-of-this-test-job-0123456789"  # the job secret of the tests' own coordinators


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
                 extra: Sequence[str] = (), **job_options: Any) -> Outcome:  # fmt: skip
    """``ptc.demos.ft_example`` as a LocalJob of ``world`` workers (``job_options``: more of
    LocalJob's keywords), run to its end; the workers' final states by worker id."""
    out = tmp_path / "out"
    args = ["--steps", str(steps), "--out", str(out), "--engine", engine, "--sleep", str(sleep),
            "--until-size", str(until_size), *extra]  # fmt: skip
    if ddp:
        args.append("--ddp")
    job = LocalJob(python_module("ptc.demos.ft_example", *args), world, faults=faults, joins=joins,
                   restart_after=restart_after, heartbeat_timeout=heartbeat_timeout, log_dir=tmp_path / "logs",
                   **job_options)  # fmt: skip
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


# --- hand-driven connections to a coordinator (hostile or protocol-level fake workers) ---


class Peer:
    """One raw connection to a coordinator: reads the challenge, then sends whatever it is told."""

    def __init__(self, coordinator, *, read_challenge: bool = True):
        self.sock = socket.create_connection(("127.0.0.1", coordinator.port), timeout=5)
        self.reader = ft_wire.LineReader(ft_wire.MAX_NEWS_LINE)
        self.challenge = ft_wire.recv_one(self.sock, self.reader, 5) if read_challenge else None

    def hello(self, worker, *, secret=SECRET, job="default", world=None, nonce=None, **extra):
        proof = None if secret is None else ft_auth.hello_proof(secret, nonce or self.challenge["nonce"], job, worker)
        self.send({"t": "hello", "worker": worker, "pid": 0, "world": world, "job": job, "nonce": ft_auth.new_nonce(),
                   "proof": proof, **extra})  # fmt: skip
        return self

    def send(self, message):
        self.raw(ft_wire.encode(message))

    def raw(self, data: bytes):
        try:
            self.sock.sendall(data)
        except OSError:
            pass  # the coordinator may close before it took everything

    def expect(self, kind, timeout=5.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = ft_wire.recv_one(self.sock, self.reader, max(0.01, deadline - time.monotonic()))
            if message is None:
                break
            if message["t"] == kind:
                return message
        raise AssertionError(f"no {kind!r} message within {timeout} s")

    def closed_by_coordinator(self, timeout=5.0) -> bool:
        """True once the coordinator closed this connection (messages before the end are skipped)."""
        self.sock.settimeout(timeout)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if not self.sock.recv(65536):
                    return True
        except ConnectionResetError:
            return True
        except OSError:
            return False
        return False

    def close(self):
        self.sock.close()


def hostile_cases():
    """name -> what a hostile connection sends after reading the challenge ``nonce``."""
    nonce0 = "0" * 64

    def hello(**fields):
        return lambda nonce: ft_wire.encode({"t": "hello", "worker": 5, "job": "default", "nonce": nonce0, **fields})

    def line(data):
        return lambda nonce: data

    return {
        "int": line(b"1\n"), "array": line(b"[]\n"), "null": line(b"null\n"), "string": line(b'"x"\n'),
        "empty object": line(b"{}\n"), "blank line": line(b"\n"), "not utf-8": line(b"\xff\xfe\n"),
        "ready gen str": line(b'{"t":"ready","gen":"x","handle":""}\n'), "fail gen null": line(b'{"t":"fail","gen":null}\n'),
        "event data array": line(b'{"t":"event","name":"x","data":[1]}\n'),
        "event data worker": line(b'{"t":"event","name":"x","data":{"worker":1}}\n'),
        "hello world str": hello(world="abc"), "hello worker float": hello(worker=1.5),
        "hello huge worker": hello(worker=10**30), "heartbeat before hello": line(b'{"t":"hb"}\n'),
        "grow before hello": line(b'{"t":"grow","gen":1}\n'), "leave before hello": line(b'{"t":"leave"}\n'),
        "huge int": line(b'{"t":"ready","gen":' + b"9" * 50000 + b',"handle":""}\n'),
        "deep nesting": line(b"[" * 60000 + b"\n"), "nan": line(b'{"t":"ready","gen":NaN,"handle":""}\n'),
        "unknown kind": line(b'{"t":"shutdown"}\n'), "two objects": line(b'{"t":"hb"}{"t":"hb"}\n'),
        "flood without newline": line(b"x" * (ft_wire.MAX_LINE + 1000)),
        "long line": line(b'{"t":"hb","pad":"' + b"x" * ft_wire.MAX_LINE + b'"}\n'),
        "many partial lines then junk": line(b'{"t":"he' + b"llo" * 1000 + b"\n"),
    }
