"""Tail latency of "kill inside the allreduce": many injections in one job (``benchmarks/ft.py --tail N``).

Started by ``benchmarks/ft.py`` through :class:`~ptc.distributed.ft.launch.LocalJob`
(``restart_after=0``: a killed worker is restarted at once and rejoins as a
joiner).  The worker is ``ptc.demos.ft``'s (the same warm-up, ``ft_example``'s
MLP and batches, ``--sleep`` of simulated compute, one ``commit`` event per
committed step, the same final state file, so :func:`ptc.demos.ft.check_states`
applies), with its own fault schedule instead of a static plan: a static plan
reaches only the initial processes and counts collectives per process, so it
cannot say "the restarted worker 2 dies again 20 steps after it is back".

The schedule is a pure function of the synchronised history (every member
holds the same one, a joiner receives it with the state), so every member
reaches the same decision and exactly one of them is the victim:

* an injection is due before step ``s`` when fewer than ``--injections``
  have happened (a drop of the group's size in the history counts one), and
  the last ``--gap`` committed steps ran at full size (``--world``) in the
  current generation (so the previous victim is back and its rejoin is over);
* the victim is ``sorted(members)[done % world]``: worker ids take turns
  (0, 1, 2, 3, 0, ...), rank 0 included;
* it arms the fault kit's own ``kill_in_collective`` for its next collective
  (the step's gradient allreduce, after the peers entered it) from inside
  ``compute``: the kit announces ``fault_kill`` (the timeline's reference)
  and SIGKILLs the process inside the allreduce.

The job ends when the injections are done and the last ``--tail`` steps ran at
full size (the last victim is back), or after ``--stall`` steps in a row short
of full size (a victim that never came back): every member stops at the same
step.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

History = Sequence[Tuple[int, int, Sequence[int]]]


def injections_done(history: History) -> int:
    """How many times the group's size dropped between consecutive committed steps."""
    return sum(1 for a, b in zip(history, history[1:]) if len(b[2]) < len(a[2]))


def victim(history: History, generation: int, world: int, gap: int, injections: int) -> Optional[int]:
    """The worker id that must die inside the allreduce of the next step, or None.

    ``generation``: the number of the generation the next step runs in.  Due
    when fewer than ``injections`` drops happened and the last ``gap`` committed
    steps ran with ``world`` members in ``generation`` itself (after a kill the
    group moves to a new generation: no second victim for the same injection).
    """
    done = injections_done(history)
    if done >= injections or gap < 1 or len(history) < gap:
        return None
    tail = history[-gap:]
    if any(g != generation or len(m) != world for _, g, m in tail):
        return None
    return sorted(tail[-1][2])[done % world]


def finished(history: History, world: int, injections: int, tail: int, stall: int = 0) -> bool:
    """Every injection happened and the last ``tail`` steps ran with ``world`` members; or
    (``stall`` > 0) the last ``stall`` steps all ran short of ``world`` (a victim never came back)."""
    last = history[-tail:]
    if stall > 0 and len(history) >= stall and all(len(m) < world for _, _, m in history[-stall:]):
        return True
    return (injections_done(history) >= injections and len(last) == tail
            and all(len(m) >= world for _, _, m in last))  # fmt: skip


def main(argv: Optional[List[str]] = None) -> int:
    started = time.time()
    p = argparse.ArgumentParser(prog="benchmarks/ft_tail_worker.py")
    p.add_argument("--out", required=True)
    p.add_argument("--world", type=int, default=4)
    p.add_argument("--injections", type=int, default=50)
    p.add_argument("--gap", type=int, default=30, help="committed steps at full size before the next injection")
    p.add_argument("--tail", type=int, default=20, help="steps at full size after the last injection")
    p.add_argument("--max-steps", type=int, default=100000)
    p.add_argument("--stall", type=int, default=1500, help="stop after this many steps short of --world in a row")
    p.add_argument("--sleep", type=float, default=0.01)
    p.add_argument("--engine", default="auto")
    p.add_argument("--heartbeat-interval", type=float, default=0.1)
    args = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import torch

    from ptc.demos.ft import warm_up
    from ptc.demos.ft_example import LR, loss_of, make_model

    warm_up()  # before this process is a member
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)

    from ptc.distributed.ft import faults as F
    from ptc.distributed.ft.group import init_fault_tolerant
    from ptc.distributed.ft.train import Trainer

    joiner = "WORLD_SIZE" not in os.environ
    me = int(os.environ["RANK"])
    # a plan that never fires: it makes the group count collectives, so a fault can be armed later
    ft = init_fault_tolerant(engine=args.engine, heartbeat_interval=args.heartbeat_interval,
                             faults=[F.kill_during_reconfigure(2**62, worker=me)])  # fmt: skip
    ft.event("started", since_exec_s=round(time.time() - started, 3))
    if joiner and ft.size == 1:
        ft.event("nobody_left")
        ft.close()
        return 0
    trainer = Trainer(ft, model, optimizer, report_steps=True)

    def compute(info) -> None:  # noqa: ANN001
        if args.sleep:
            time.sleep(args.sleep)
        loss_of(trainer.model, info.worker_id, info.step).backward()
        if victim(trainer.history, info.generation, args.world, args.gap, args.injections) == ft.worker_id:
            # the next collective is this step's gradient allreduce: die inside it
            ft.faults.faults.append(F.kill_in_collective(ft.faults.collectives + 1, worker=ft.worker_id))

    step_times: List[float] = []
    while trainer.step < args.max_steps and not finished(trainer.history, args.world, args.injections, args.tail,
                                                          args.stall):
        t = time.perf_counter()
        trainer.run_step(compute)
        step_times.append(time.perf_counter() - t)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.save({"worker": ft.worker_id, "rank": ft.rank, "generation": ft.generation.number,
                "checksum": trainer.checksum(), "state": model.state_dict(), "history": trainer.history,
                "syncs": trainer.syncs, "step_times": step_times}, out / f"worker{ft.worker_id}.pt")  # fmt: skip
    ft.event("done", step=trainer.step)
    ft.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
