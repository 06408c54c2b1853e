"""The baselines of ``benchmarks/ft.py``: plain torch DDP on gloo, with or without torchrun's restart.

Launched by ``torchrun`` (restart-the-world baseline: a checkpoint every
``--ckpt-every`` steps, local rank ``--victim`` SIGKILLs itself at step
``--kill-at`` in the first attempt, torchrun restarts every worker, they
resume from the checkpoint) or by ``benchmarks/ft.py`` itself with the
``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT`` environment (plain
DDP, the overhead reference).  Same model, batches and optimizer as
``ptc.demos.ft_example``.  Each process appends JSON lines with
``time.time()`` to ``--events`` (start, init_pg, restored, first_step,
step_error, kill, done) and rank 0 writes its per-step times to ``--times``:
``{"wall": [...], "cpu": [...]}`` (seconds; cpu: this process's CPU time, every thread).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path


def main() -> int:
    t_exec = time.time()
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--ckpt-every", type=int, default=0)
    p.add_argument("--ckpt", default=None)
    p.add_argument("--kill-at", type=int, default=-1)
    p.add_argument("--victim", type=int, default=2)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--events", required=True)
    p.add_argument("--times", default=None)
    args = p.parse_args()
    import datetime

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from ptc.demos.ft_example import LR, loss_of, make_model

    rank = int(os.environ["RANK"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    log = open(args.events, "a", buffering=1)

    def event(name: str, **data) -> None:
        log.write(json.dumps({"time": time.time(), "rank": rank, "attempt": attempt, "event": name, **data}) + "\n")

    event("start", since_exec_s=round(time.time() - t_exec, 3), pid=os.getpid())
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)  # imports torch._dynamo: before the group forms
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    event("init_pg", world=dist.get_world_size())
    ddp = DistributedDataParallel(model)
    step = 0
    ckpt = Path(args.ckpt) if args.ckpt else None
    if ckpt is not None and ckpt.exists():
        state = torch.load(ckpt, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = int(state["step"])
        event("restored", step=step)
    times, cpu_times = [], []
    first = True
    while step < args.steps:
        if attempt == 0 and step == args.kill_at and int(os.environ.get("LOCAL_RANK", rank)) == args.victim:
            event("kill", step=step, pid=os.getpid())
            os.kill(os.getpid(), signal.SIGKILL)
        t, c = time.perf_counter(), time.process_time()
        optimizer.zero_grad()
        if args.sleep:
            time.sleep(args.sleep)
        try:
            loss_of(ddp, rank, step).backward()
        except Exception as exc:  # noqa: BLE001 - log it, torchrun restarts us
            event("step_error", step=step, err=str(exc)[:200])
            raise
        optimizer.step()
        step += 1
        times.append(time.perf_counter() - t)
        cpu_times.append(time.process_time() - c)
        if first:
            event("first_step", step=step)
            first = False
        if ckpt is not None and args.ckpt_every and step % args.ckpt_every == 0 and rank == 0:
            tmp = ckpt.with_suffix(".tmp")
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, tmp)
            os.replace(tmp, ckpt)
            event("checkpoint", step=step)
    event("done", step=step, w0=float(next(model.parameters()).detach().flatten()[0]))
    if args.times and rank == 0:
        Path(args.times).write_text(json.dumps({"wall": times, "cpu": cpu_times}))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
