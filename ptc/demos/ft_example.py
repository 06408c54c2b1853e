"""A small fault-tolerant training worker, and its single-process replay.

``python -m ptc.demos.ft_example --steps 200 --out DIR`` trains a small
MLP (float64) on batches that are a pure function of ``(worker_id, step)``,
through :class:`~ptc.distributed.ft.train.Trainer`, and writes
``DIR/worker<id>.pt``: the final state, its checksum and the history of
committed steps with the members whose gradients were averaged.
:func:`replay` recomputes the final parameters from such a history in one
process, which is how tests and the benchmark check that no step was lost,
duplicated or half applied.  Used by the tests, ``ptc demo ft`` and
``benchmarks/ft.py``; ``python -m ptc.distributed.ft_example`` runs it too.
``--faults PATH`` (what :class:`~ptc.distributed.ft.launch.LocalJob` passes
with ``faults=``) reads a fault plan and hands it to the group.
``--until-size N``: after ``--steps``, keep training until the group has
``N`` members again, so a restarted worker finds the job still running.

A worker that comes (back) after its job finished prints one line on stderr
and exits with :data:`ptc.errors.EXIT_JOB_FINISHED` (0: the job completed).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import torch

LR = 0.05


def make_model() -> torch.nn.Module:
    """The model every worker starts from (same seed everywhere)."""
    torch.manual_seed(1234)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)).double()


def batch(worker: int, step: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """The batch ``worker`` trains on at ``step``: a pure function of both."""
    g = torch.Generator().manual_seed(step * 1009 + worker)
    x = torch.randn(32, 16, generator=g, dtype=torch.float64)
    return x, torch.sin(x.sum(1, keepdim=True))


def loss_of(model: torch.nn.Module, worker: int, step: int) -> torch.Tensor:
    x, y = batch(worker, step)
    return ((model(x) - y) ** 2).mean()


def replay(history: Sequence[Tuple[int, int, Sequence[int]]], lr: float = LR) -> Dict[str, torch.Tensor]:
    """Final parameters of a run whose committed steps were ``history``
    (``(step, generation, members)`` in order), computed in one process:
    per step, the mean over members of their gradients, then an SGD step."""
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for expected, (step, _, members) in enumerate(history):
        if step != expected:
            raise ValueError(f"history: step {step} at position {expected} (a step lost or duplicated)")
        total = [torch.zeros_like(p) for p in model.parameters()]
        for worker in members:
            model.zero_grad()
            loss_of(model, worker, step).backward()
            for t, p in zip(total, model.parameters()):
                t += p.grad
        for t, p in zip(total, model.parameters()):
            p.grad = t / len(members)
        optimizer.step()
    return {k: v.clone() for k, v in model.state_dict().items()}


def main(argv: Optional[List[str]] = None) -> int:
    from ptc.errors import JobFinished

    try:
        return _train(argv)
    except JobFinished as exc:
        print(f"ptc ft_example: {exc}; nothing left to do", file=sys.stderr)
        return exc.exit_code


def _train(argv: Optional[List[str]] = None) -> int:
    from ptc.distributed.ft import faults as ft_faults
    from ptc.distributed.ft import train as ft_train
    from ptc.distributed.ft import transports
    from ptc.distributed.ft.group import init_fault_tolerant
    from ptc.distributed.ft.train import Trainer

    parser = argparse.ArgumentParser(prog="python -m ptc.demos.ft_example")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--out", required=True)
    parser.add_argument("--ddp", action="store_true")
    parser.add_argument("--ddp-hook", default="auto", choices=("auto", "native", "python"),
                        help="with --ddp: Trainer(ddp_hook=...): the C++ communication hook or the Python one")
    parser.add_argument("--engine", default="auto")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds of simulated compute per step")
    parser.add_argument("--heartbeat-interval", type=float, default=0.1)
    parser.add_argument("--timeout", type=float, default=60.0, help="collective timeout (the last resort)")
    parser.add_argument("--until-size", type=int, default=0,
                        help="after --steps, keep training until the group has this many members again (max 20000 steps)")
    parser.add_argument("--fr-dir", default=None, help="record collectives with a Flight Recorder dumping here")
    parser.add_argument("--vote-copy-max-bytes", type=int, default=None,
                        help="with --ddp: ft.transports.VOTE_COPY_MAX_BYTES (0: every bucket in place, the vote alone)")
    parser.add_argument("--ddp-hook-min-bytes", type=int, default=None,
                        help="with --ddp: ft.train.DDP_HOOK_MIN_BYTES (0: the comm hook even for this small model)")
    parser.add_argument("--ddp-bucket-cap-mb", type=float, default=None,
                        help="with --ddp: DistributedDataParallel's bucket_cap_mb (0.0002: this model's gradients "
                             "in three buckets)")
    parser.add_argument("--faults", default=None, help="a fault plan (ft_faults.save's file) for this worker's group")
    args = parser.parse_args(argv)
    if args.vote_copy_max_bytes is not None:
        transports.VOTE_COPY_MAX_BYTES = args.vote_copy_max_bytes
    if args.ddp_hook_min_bytes is not None:
        ft_train.DDP_HOOK_MIN_BYTES = args.ddp_hook_min_bytes
    started = time.time()
    recorder = None
    if args.fr_dir:
        from ptc.distributed.flight_recorder import FlightRecorder

        recorder = FlightRecorder(dump_dir=args.fr_dir)
    # everything slow to set up happens before joining: a joiner is admitted inside init_fault_tolerant, and the
    # group waits for it at the next state sync (the first optimizer import pulls in torch._dynamo: seconds)
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    optimizer.step()  # no gradients yet: changes nothing, imports what the first real step needs
    faults = ft_faults.load(args.faults) if args.faults else ()
    ft = init_fault_tolerant(engine=args.engine, heartbeat_interval=args.heartbeat_interval, timeout=args.timeout,
                             flight_recorder=recorder, faults=faults)  # fmt: skip
    ft.event("started", since_main_s=round(time.time() - started, 3))
    ddp_options = {"bucket_cap_mb": args.ddp_bucket_cap_mb} if args.ddp_bucket_cap_mb is not None else None
    trainer = Trainer(ft, model, optimizer, ddp=args.ddp, ddp_hook=args.ddp_hook if args.ddp else "auto",
                      ddp_options=ddp_options, report_steps=True)  # fmt: skip

    def compute(info) -> None:
        if args.sleep:
            time.sleep(args.sleep)
        loss_of(trainer.model, info.worker_id, info.step).backward()

    while trainer.step < args.steps or (ft.size < args.until_size and trainer.step < 20000):
        trainer.run_step(compute)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.save({"worker": ft.worker_id, "rank": ft.rank, "generation": ft.generation.number,  # type: ignore[union-attr]
                "checksum": trainer.checksum(), "state": model.state_dict(), "history": trainer.history,
                "syncs": trainer.syncs}, out / f"worker{ft.worker_id}.pt")  # fmt: skip
    ft.event("done", step=trainer.step)
    if recorder is not None:
        recorder.dump("end of training")
        recorder.close()
    ft.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
