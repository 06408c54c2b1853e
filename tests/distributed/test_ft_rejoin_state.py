"""A rejoiner is indistinguishable from the members: everything a member's future depends on is equal.

A job of 3 real workers (gloo on 127.0.0.1) trains with Adam under a OneCycleLR schedule (it
moves the learning rate and Adam's betas every step), a GradScaler, a stateful sampler (its
position), dropout and draws from torch's, numpy's and Python's global generators every step;
worker 2 is SIGKILLed inside a collective, restarted as a fresh process (seeded as the script
seeds, so its streams start where every member's started) and rejoins.  At the end every worker
writes a sha256 per component; all workers' digests must be equal, component by component.
A rejoiner with a stale learning rate, sampler position or random stream (a known bug
elsewhere) shows up as one component's digest differing.

This file is also the worker: ``python test_ft_rejoin_state.py --out DIR ...``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy
import pytest
import torch

COMPONENTS = ["model", "optimizer", "scheduler", "last_lr", "scaler", "sampler", "step",
              "torch_rng", "numpy_rng", "python_rng"]  # fmt: skip
RNG_COMPONENTS = ["torch_rng", "numpy_rng", "python_rng"]
MAX_STEPS = 3000  # OneCycleLR's total_steps bounds the run: the rejoiner must be back well before


# --- the worker ------------------------------------------------------------------


def _feed(h: Any, obj: Any) -> None:
    """Feed a canonical encoding of ``obj`` (nested state dicts) to the hash ``h``."""
    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous().reshape(-1)  # 1-d: a 0-d tensor has no byte view (Adam's step)
        h.update(f"T{t.dtype}{tuple(obj.shape)}:".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(obj, numpy.ndarray):
        h.update(f"N{obj.dtype}{obj.shape}:".encode())
        h.update(numpy.ascontiguousarray(obj).tobytes())
    elif isinstance(obj, dict):
        h.update(b"{")
        for key in sorted(obj, key=repr):
            _feed(h, key)
            _feed(h, obj[key])
        h.update(b"}")
    elif isinstance(obj, (list, tuple)):
        h.update(b"[")
        for item in obj:
            _feed(h, item)
        h.update(b"]")
    elif isinstance(obj, float):
        h.update(f"F{obj.hex()};".encode())
    elif isinstance(obj, (bool, int, str, type(None))):
        h.update(f"{type(obj).__name__}{obj!r};".encode())
    elif callable(obj):
        h.update(f"C{getattr(obj, '__qualname__', type(obj).__qualname__)};".encode())
    else:
        h.update(f"R{obj!r};".encode())


def digest(obj: Any) -> str:
    h = hashlib.sha256()
    _feed(h, obj)
    return h.hexdigest()


class StatefulSampler:
    """A sampler that knows its position: a seeded permutation per epoch, ``batch`` indices per step."""

    def __init__(self, n: int, batch: int, seed: int) -> None:
        self.n, self.batch, self.seed = n, batch, seed
        self.epoch = 0
        self.position = 0

    def indices(self) -> torch.Tensor:
        perm = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed + self.epoch))
        return perm[self.position:self.position + self.batch]

    def advance(self) -> None:
        self.position += self.batch
        if self.position + self.batch > self.n:
            self.epoch, self.position = self.epoch + 1, 0

    def state_dict(self) -> Dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: Dict[str, int]) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])


def worker_main(argv: Optional[List[str]] = None) -> int:
    from ptc.errors import JobFinished

    try:
        return _train(argv)
    except JobFinished as exc:
        print(f"rejoin-state worker: {exc}", file=sys.stderr)
        return exc.exit_code


def _train(argv: Optional[List[str]]) -> int:
    from ptc.distributed.ft import faults as ft_faults
    from ptc.distributed.ft.group import init_fault_tolerant
    from ptc.distributed.ft.train import Trainer

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--until-size", type=int, default=3)
    parser.add_argument("--after-join", type=int, default=10, help="steps every member trains after the rejoin")
    parser.add_argument("--sleep", type=float, default=0.005)
    parser.add_argument("--no-sync-rng", action="store_true")
    parser.add_argument("--faults", default=None)
    args = parser.parse_args(argv)

    # the same seeds in every process, as a training script does: a restarted worker starts where all started
    torch.manual_seed(0)
    numpy.random.seed(0)
    random.seed(0)
    data = torch.randn(256, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    target = torch.sin(data.sum(1, keepdim=True))
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Dropout(0.1),
                                torch.nn.Linear(16, 1)).double()  # fmt: skip
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    optimizer.step()  # no gradients yet: changes nothing, imports what the first real step needs
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.05, total_steps=MAX_STEPS + 100)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8, growth_interval=30)
    sampler = StatefulSampler(len(data), 16, seed=11)
    faults = ft_faults.load(args.faults) if args.faults else ()
    ft = init_fault_tolerant(heartbeat_interval=0.1, timeout=30.0, faults=faults)
    trainer = Trainer(ft, model, optimizer, extra_state=[scheduler, scaler, sampler], sync_rng=not args.no_sync_rng)

    def compute(info) -> None:
        idx = (sampler.indices() + 5 * info.worker_id) % len(data)  # each worker its shard of the batch
        x = data[idx] + 0.01 * torch.randn(len(idx), 8, dtype=torch.float64)  # torch's generator
        weight = 1.0 + 0.01 * float(numpy.random.standard_normal())  # numpy's
        if random.random() < 0.5:  # Python's
            x = -x
        loss = weight * ((model(x) - target[idx]) ** 2).mean()
        scaler.scale(loss).backward()

    def before_step(info) -> None:  # the averaged gradients are in place; optimizer.step() follows
        scaler.unscale_(optimizer)
        scaler.update()
        sampler.advance()

    stop_at = None  # every member sets it at the same step: the one where the rejoiner got the state
    while trainer.step < MAX_STEPS and (trainer.step < args.steps or ft.size < args.until_size
                                        or stop_at is None or trainer.step < stop_at):  # fmt: skip
        if args.sleep:
            time.sleep(args.sleep)
        trainer.run_step(compute, before_step)
        # one scheduler step per committed step; state that came from the source may be one step behind
        # (the source committed, grew, and handed its state over before its own scheduler step)
        if scheduler.last_epoch < trainer.step:
            scheduler.step()
        if stop_at is None and ft.generation.number > 1 and ft.size >= args.until_size:  # type: ignore[union-attr]
            stop_at = trainer.step + args.after_join
    hashes = {
        "model": digest(model.state_dict()), "optimizer": digest(optimizer.state_dict()),
        "scheduler": digest(scheduler.state_dict()), "last_lr": digest(scheduler.get_last_lr()),
        "scaler": digest(scaler.state_dict()), "sampler": digest(sampler.state_dict()), "step": digest(trainer.step),
        "torch_rng": digest(torch.get_rng_state()), "numpy_rng": digest(numpy.random.get_state()),
        "python_rng": digest(random.getstate()),
    }  # fmt: skip
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"worker": ft.worker_id, "step": trainer.step, "stop_at": stop_at,
              "generation": ft.generation.number, "hashes": hashes,  # type: ignore[union-attr]
              "last_lr": scheduler.get_last_lr(), "sampler": sampler.state_dict(), "scale": scaler.get_scale(),
              "syncs": trainer.syncs}  # fmt: skip
    (out / f"worker{ft.worker_id}.json").write_text(json.dumps(report))
    ft.event("done", step=trainer.step)
    ft.close()
    return 0


# --- the test ----------------------------------------------------------------------


def _run_job(tmp_path: Path, *, sync_rng: bool = True):
    from ptc.distributed.ft import faults as F
    from ptc.distributed.ft.launch import LocalJob

    out = tmp_path / "out"
    args = ["--out", str(out), "--steps", "30", "--until-size", "3", "--after-join", "10"]
    if not sync_rng:
        args.append("--no-sync-rng")
    script = str(Path(__file__).resolve())
    job = LocalJob(lambda worker: [sys.executable, script, *args], 3, faults=[F.kill_in_collective(25, worker=2)],
                   restart_after=0.2, heartbeat_timeout=3.0, log_dir=tmp_path / "logs")  # fmt: skip
    result = job.run(timeout=120)
    outputs = {}
    for path in sorted(out.glob("worker*.json")) if out.exists() else []:
        data = json.loads(path.read_text())
        outputs[int(data["worker"])] = data
    return result, outputs


def _describe(result) -> str:
    events = "\n".join(f"{e['time'] % 1000:9.3f} {e['event']} " +
                       str({k: v for k, v in e.items() if k not in ("time", "who", "event")})
                       for e in result.events if e["event"] not in ("commit", "hello"))  # fmt: skip
    return f"{events}\n{result.describe()}"


def _check_rejoined(result, outputs, text: str) -> None:
    assert not result.timed_out, text
    for run in result.runs:
        assert run.proc.poll() is not None, f"worker {run.worker} (pid {run.proc.pid}) still running\n{text}"
    kinds = [(r.worker, r.kind, r.returncode) for r in result.runs]
    assert (2, "initial", -9) in kinds and (2, "restart", 0) in kinds, f"{kinds}\n{text}"
    assert all(rc == 0 for w, kind, rc in kinds if (w, kind) != (2, "initial")), f"{kinds}\n{text}"
    assert sorted(outputs) == [0, 1, 2], text
    gens = result.of("generation")
    assert gens[-1]["members"] == [0, 1, 2] and 2 in gens[-1]["joined"], text
    # the rejoiner took the group's state at its first sync: state moved to it, at a step far from 0
    first = outputs[2]["syncs"][0]
    assert first["bytes"] > 0 and first["step"] > 0 and first["generation"] == gens[-1]["gen"], outputs[2]["syncs"]
    synced = [e for e in result.of("state_synced") if e["gen"] == gens[-1]["gen"]]
    assert sorted(e["worker"] for e in synced) == [0, 1, 2] and all(e["bytes"] > 0 for e in synced), text
    # and trained with the members afterwards
    assert all(o["step"] == o["stop_at"] == first["step"] + 10 for o in outputs.values()), text


@pytest.mark.multiprocess
@pytest.mark.slow
def test_a_rejoiner_is_indistinguishable_from_the_members(tmp_path):
    """Model, optimizer (Adam's moments, the scheduled lr and betas), scheduler (last_lr), grad scaler,
    sampler position, step, and torch's, numpy's and Python's random states: one digest per component,
    equal on every worker after the killed worker rejoined."""
    result, outputs = _run_job(tmp_path)
    text = _describe(result)
    _check_rejoined(result, outputs, text)
    differ = {c: {w: o["hashes"][c][:12] for w, o in outputs.items()} for c in COMPONENTS
              if len({o["hashes"][c] for o in outputs.values()}) > 1}  # fmt: skip
    assert not differ, f"components that differ between workers (worker -> sha256 prefix): {differ}\n{text}"
    # the components did move: a stale one would not look like a fresh one by chance
    reference = outputs[0]
    assert reference["sampler"]["position"] > 0 or reference["sampler"]["epoch"] > 0
    assert reference["scale"] > 2.0**8  # grown every 30 steps (at least 40 are run)
    assert reference["last_lr"][0] != pytest.approx(0.05 / 25)  # OneCycleLR's initial lr (max_lr / div_factor)


@pytest.mark.multiprocess
@pytest.mark.slow
def test_without_sync_rng_the_rejoiners_random_streams_are_its_own(tmp_path):
    """``sync_rng=False``: everything else still travels, the random states do not: the rejoiner's
    streams (seeded as every process is) differ from the members', which keep theirs."""
    result, outputs = _run_job(tmp_path, sync_rng=False)
    text = _describe(result)
    _check_rejoined(result, outputs, text)
    for component in COMPONENTS:
        digests = {w: o["hashes"][component] for w, o in outputs.items()}
        if component in RNG_COMPONENTS:
            assert digests[0] == digests[1] != digests[2], f"{component}: {digests}\n{text}"
        else:
            assert len(set(digests.values())) == 1, f"{component} differs: {digests}\n{text}"


def test_rng_state_round_trips_through_a_weights_only_load():
    """The payload's random states load with ``torch.load(weights_only=True)`` and restore every stream."""
    import io

    from ptc.distributed.ft.train import rng_state, set_rng_state

    random.gauss(0, 1)  # Python's and numpy's cached gaussians are part of the state
    numpy.random.standard_normal()
    buffer = io.BytesIO()
    torch.save(rng_state(), buffer)
    first = (torch.rand(4), numpy.random.standard_normal(4), random.gauss(0, 1), random.random())
    set_rng_state(torch.load(io.BytesIO(buffer.getvalue()), weights_only=True))
    again = (torch.rand(4), numpy.random.standard_normal(4), random.gauss(0, 1), random.random())
    assert torch.equal(first[0], again[0]) and numpy.array_equal(first[1], again[1]) and first[2:] == again[2:]


def test_sync_rng_is_checked():
    from ptc.distributed.ft.coordinator import Coordinator
    from ptc.distributed.ft.group import FaultTolerantGroup
    from ptc.distributed.ft.train import Trainer
    from ptc.errors import PtcTypeError

    coordinator = Coordinator(world_size=1).start()
    try:
        group = FaultTolerantGroup(coordinator.address, 0, 1, connect_timeout=10, join_timeout=30,
                                   secret=coordinator.secret)  # fmt: skip
        try:
            model = torch.nn.Linear(2, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            with pytest.raises(PtcTypeError, match="sync_rng: expected a bool"):
                Trainer(group, model, optimizer, sync_rng="yes")
            assert Trainer(group, model, optimizer).sync_rng is True
        finally:
            group.close()
    finally:
        coordinator.stop()


if __name__ == "__main__":
    raise SystemExit(worker_main())
