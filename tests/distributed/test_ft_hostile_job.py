"""A live job (LocalJob running ft_example, gloo on 127.0.0.1) against hostile clients and a member
that never gets ready; and the README's LocalJob example, whose restarted worker must rejoin."""

from __future__ import annotations

import json
import os
import random
import re
import threading
import time
from pathlib import Path

import pytest
import torch

from ft_helpers import Outcome, Peer, check_consistent, hostile_cases
from ptc.distributed.ft.launch import LocalJob, python_module

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

README = Path(__file__).resolve().parents[2] / "README.md"


class LiveJob:
    """A LocalJob of ft_example running in a thread; ``committed()`` is the highest step any member committed."""

    def __init__(self, tmp_path: Path, world: int, steps: int, sleep: float, **options):
        self.out = tmp_path / "out"
        self.events = []
        args = ["--steps", str(steps), "--sleep", str(sleep), "--out", str(self.out)]
        self.job = LocalJob(python_module("ptc.demos.ft_example", *args), world, log_dir=tmp_path / "logs",
                            heartbeat_timeout=3.0, on_event=self.events.append, **options)  # fmt: skip
        self.result = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        self.result = self.job.run(timeout=150)

    def committed(self) -> int:
        return max((e["step"] for e in list(self.events) if e["event"] == "commit"), default=-1)

    def wait_for_commit_after(self, step: int, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            now = self.committed()
            if now > step:
                return now
            assert self._thread.is_alive(), "the job ended"
            time.sleep(0.05)
        raise AssertionError(f"no step committed after step {step} within {timeout} s")

    def finish(self) -> Outcome:
        self._thread.join(200)
        assert self.result is not None, "the job did not end"
        outputs = {}
        for path in sorted(self.out.glob("worker*.pt")):
            data = torch.load(path, weights_only=False)
            outputs[int(data["worker"])] = data
        return Outcome(self.result, outputs)


def _random_json(rng: random.Random, depth: int = 0):
    kind = rng.randrange(8 if depth < 3 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, -1, 1, 2**31, 2**64, -(2**70), rng.randrange(-1000, 1000)])
    if kind == 3:
        return rng.choice([0.5, -1e308, 1e-300, 3.0])
    if kind == 4:
        return rng.choice(["", "t", "hello", "ready", "hb", "x" * rng.randrange(1, 300)])
    if kind == 5:
        return [_random_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = ["t", "gen", "worker", "data", "name", "handle", "job", "nonce", "proof", "world", "err"]
    message = {rng.choice(keys): _random_json(rng, depth + 1) for _ in range(rng.randrange(5))}
    if kind == 6:
        message["t"] = rng.choice(["hello", "ready", "fail", "grow", "event", "leave", "hb", "go", "gen"])
    return message


def test_a_live_job_survives_a_hostile_client(tmp_path):
    """Raw junk, wrong types, floods, partial lines, connections that never say hello, and a
    member-to-be that breaks the protocol: each closes only its own connection, the coordinator
    lives, and the three workers keep committing steps and end bit-identical."""
    live = LiveJob(tmp_path, 3, steps=300, sleep=0.05)
    peers = []
    try:
        live.wait_for_commit_after(-1, timeout=120)
        c = live.job.coordinator
        silent = [Peer(c) for _ in range(4)] + [Peer(c, read_challenge=False)]
        opened = time.monotonic()
        step = live.committed()
        rng = random.Random(1234)
        cases = [(name, make) for name, make in sorted(hostile_cases().items())]
        cases += [(f"random {i}", lambda nonce, v=_random_json(rng): json.dumps(v).encode() + b"\n") for i in range(40)]
        for i, (name, make) in enumerate(cases):
            peer = Peer(c)
            peers.append(peer)
            peer.raw(make(peer.challenge["nonce"]))
            assert peer.closed_by_coordinator(), f"{name}: the connection was left open"
            peer.close()
            if i % 10 == 9:
                step = live.wait_for_commit_after(step, timeout=20)
        # a worker that knows the secret, then breaks the protocol: only it is dropped
        for message in ({"t": "ready", "gen": "x", "handle": ""}, {"t": "event", "name": "x", "data": [1]}):
            joiner = Peer(c).hello(9, secret=live.job.secret.encode())
            peers.append(joiner)
            joiner.expect("welcome")
            joiner.send(message)
            assert joiner.closed_by_coordinator()
            step = live.wait_for_commit_after(step, timeout=20)
        time.sleep(max(0.0, c.hello_timeout + 1.0 - (time.monotonic() - opened)))
        for peer in silent:
            assert peer.closed_by_coordinator(timeout=5), "a connection without hello was kept"
        assert c._thread.is_alive()
        live.wait_for_commit_after(step, timeout=20)
    finally:
        for peer in peers:
            peer.close()
    outcome = live.finish()
    text = outcome.describe()
    check_consistent(outcome, expect_workers=[0, 1, 2])
    events = outcome.result.events
    assert not [e for e in events if e["event"] == "internal_error"], text
    assert not [e for e in events if e["event"] == "worker_failed" and e["worker"] in (0, 1, 2)], text
    assert sum(e["event"] == "rejected" for e in events) >= 20, text
    assert {e["worker"] for e in events if e["event"] == "worker_failed"} == {9}, text
    assert outcome.outputs[0]["history"][-1][0] == 299


def test_a_member_that_never_gets_ready_is_fenced_and_the_job_goes_on(tmp_path):
    """A protocol-level fake worker joins, is taken into a generation at a step boundary, beats but
    never says ready: after ready_timeout it is fenced and the two real workers go on without it."""
    live = LiveJob(tmp_path, 2, steps=200, sleep=0.03, ready_timeout=2.0)
    stop = threading.Event()
    fake = None
    try:
        live.wait_for_commit_after(-1, timeout=120)
        fake = Peer(live.job.coordinator).hello(9, secret=live.job.secret.encode())
        fake.expect("welcome")

        def beat():
            while not stop.is_set():
                fake.send({"t": "hb"})
                time.sleep(0.1)

        threading.Thread(target=beat, daemon=True).start()
        gen = fake.expect("gen", timeout=30)
        assert 9 in gen["members"]
        assert "not ready" in fake.expect("fenced", timeout=10)["reason"]
        live.wait_for_commit_after(live.committed(), timeout=20)
    finally:
        stop.set()
        if fake is not None:
            fake.close()
    outcome = live.finish()
    text = outcome.describe()
    check_consistent(outcome, expect_workers=[0, 1])
    gens = outcome.generations()
    assert any(9 in g["joined"] for g in gens) and gens[-1]["members"] == [0, 1], text
    failed = [e for e in outcome.result.of("worker_failed")]
    assert [e["worker"] for e in failed] == [9] and "ready_timeout = 2 s" in failed[0]["why"], text
    assert all(members == (0, 1) for _, _, members in outcome.outputs[0]["history"]), text


def _readme_localjob_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    (block,) = [b for b in blocks if "LocalJob(" in b and "restart_after" in b]
    return block


def test_the_readme_localjob_example_restarts_the_killed_worker_and_it_rejoins(tmp_path, monkeypatch):
    """The README's LocalJob example as written: worker 2 is killed inside collective 60, restarted,
    and rejoins the running job (on a loaded 2-core machine too)."""
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(_readme_localjob_example(), str(README), "exec"), namespace)  # noqa: S102 - the README's own code
    result = namespace["result"]
    outputs = {}
    for path in sorted((tmp_path / "out").glob("worker*.pt")):
        data = torch.load(path, weights_only=False)
        outputs[int(data["worker"])] = data
    outcome = Outcome(result, outputs)
    text = outcome.describe()
    kinds = [(r.worker, r.kind, r.returncode) for r in result.runs]
    assert (2, "initial", -9) in kinds and (2, "restart", 0) in kinds, text
    assert not result.of("refused"), text
    gens = outcome.generations()
    assert gens[-1]["members"] == [0, 1, 3, 2] and gens[-1]["joined"] == [2], text
    check_consistent(outcome, expect_workers=[0, 1, 2, 3])
    assert os.path.isdir(tmp_path / "out")
