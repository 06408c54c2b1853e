"""Step-time overhead of ptc's fault tolerance, measured inside the same processes as plain DDP.

Started by ``benchmarks/ft.py`` through :class:`~ptc.distributed.ft.launch.LocalJob`
(so the worker is a member of a fault-tolerant job), with ``--plain-port``: the
port of a TCPStore that worker 0 hosts for a second, ordinary gloo process group
over the same ranks.  Each worker then holds three copies of ``ft_example``'s
model, each with its own SGD optimizer:

* ``plain``: torch's ``DistributedDataParallel`` on the ordinary gloo group (the reference);
* ``hooked``: the same with torch's own Python communication hook
  (``ddp_comm_hooks.default_hooks.allreduce_hook``): what any Python hook costs, fault tolerant or not;
* ``trainer``: :class:`ptc.distributed.Trainer` on the fault-tolerant group;
* ``ddp``: ``Trainer(..., ddp=True)`` (DDP with ptc's communication hook: the C++ one where it is built);
* ``ddp_python``: the same with ``ddp_hook="python"``.

(``--model wide``: a float32 MLP of 1.6M parameters instead, whose 6.3 MB of
gradients make the allreduce's bytes count) and runs them in alternating blocks of ``--block-steps`` steps, the order rotated
from block to block, every block starting from a barrier.  Worker 0 writes, per
block and variant, the wall time and its process's CPU time (every thread) per
step to ``--out`` (JSON).  Consecutive blocks see the same machine state, so the
per-block ratios against ``plain`` are far steadier than separate jobs run one
after another on a shared 2-core machine.  What this does not count: ptc's
background threads (the coordinator link and its heartbeats) also run during
the ``plain`` blocks; the separate-jobs figure of ``benchmarks/ft.py`` includes
them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

VARIANTS = ("plain", "hooked", "trainer", "ddp", "ddp_python")


def _wide():
    import torch

    torch.manual_seed(1234)
    return torch.nn.Sequential(torch.nn.Linear(256, 2048), torch.nn.Tanh(), torch.nn.Linear(2048, 512), torch.nn.Tanh(),
                               torch.nn.Linear(512, 1))  # fmt: skip


def _wide_loss(model, worker: int, step: int):
    import torch

    g = torch.Generator().manual_seed(step * 1009 + worker)
    x = torch.randn(32, 256, generator=g)
    return ((model(x) - x[:, :1]) ** 2).mean()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--plain-port", type=int, required=True)
    p.add_argument("--blocks", type=int, default=30)
    p.add_argument("--block-steps", type=int, default=50)
    p.add_argument("--warmup-blocks", type=int, default=2)
    p.add_argument("--engine", default="auto")
    p.add_argument("--model", choices=("mlp", "wide"), default="mlp")
    p.add_argument("--out", required=True)
    args = p.parse_args()

    import torch
    from torch.distributed import PrefixStore, TCPStore
    from torch.nn.parallel import DistributedDataParallel

    from ptc import _compat
    from ptc.demos import ft_example
    from ptc.demos.ft_example import LR
    from ptc.distributed.ft.group import init_fault_tolerant
    from ptc.distributed.ft.train import Trainer

    make_model, loss_of = (ft_example.make_model, ft_example.loss_of) if args.model == "mlp" else (_wide, _wide_loss)
    ft = init_fault_tolerant(engine=args.engine, heartbeat_interval=0.1)  # as the ft demo's worker
    rank, world = ft.rank, ft.size
    timeout = datetime.timedelta(seconds=60)
    store = TCPStore("127.0.0.1", args.plain_port, world, rank == 0, timeout=timeout)
    plain_pg = _compat.gloo_process_group(PrefixStore("plain", store), rank, world, timeout)

    def optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=LR)

    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    plain_model = DistributedDataParallel(make_model(), process_group=plain_pg)
    plain_opt = optimizer(plain_model)
    hooked_model = DistributedDataParallel(make_model(), process_group=plain_pg)
    hooked_model.register_comm_hook(plain_pg, allreduce_hook)
    hooked_opt = optimizer(hooked_model)
    trainers = {}
    for name, options in (("trainer", {}), ("ddp", {"ddp": True}), ("ddp_python", {"ddp": True, "ddp_hook": "python"})):
        model = make_model()
        trainers[name] = Trainer(ft, model, optimizer(model), **options)
    steps = {name: 0 for name in VARIANTS}

    def ddp_step(name: str, model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
        opt.zero_grad()
        loss_of(model, rank, steps[name]).backward()
        opt.step()
        steps[name] += 1

    reference = {"plain": (plain_model, plain_opt), "hooked": (hooked_model, hooked_opt)}

    def ptc_step(name: str) -> None:
        trainer = trainers[name]
        trainer.run_step(lambda info: loss_of(trainer.model, info.worker_id, info.step).backward())
        steps[name] = trainer.step

    barrier = torch.zeros(1)
    blocks = []
    for block in range(args.warmup_blocks + args.blocks):
        order = VARIANTS[block % len(VARIANTS):] + VARIANTS[: block % len(VARIANTS)]
        row = {}
        for name in order:
            plain_pg.allreduce([barrier]).wait()
            t, c = time.perf_counter(), time.process_time()
            for _ in range(args.block_steps):
                ddp_step(name, *reference[name]) if name in reference else ptc_step(name)
            row[name] = {"wall_ms": (time.perf_counter() - t) * 1e3 / args.block_steps,
                         "cpu_ms": (time.process_time() - c) * 1e3 / args.block_steps}  # fmt: skip
        if block >= args.warmup_blocks:
            blocks.append(row)
    if rank == 0:
        Path(args.out).write_text(json.dumps({"world": world, "engine": args.engine, "model": args.model,
                                              "block_steps": args.block_steps,
                                              "ddp_hook": trainers["ddp"].ddp_hook,
                                              "generation": ft.generation.number, "blocks": blocks}))  # fmt: skip
    plain_pg.allreduce([barrier]).wait()
    ft.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
