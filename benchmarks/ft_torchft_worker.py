"""One torchft 0.2.0 replica group (of one process) for ``benchmarks/ft.py``.

    python benchmarks/ft_torchft_worker.py --replica 0 --lighthouse http://127.0.0.1:PORT \\
        --events DIR/events-0.jsonl --go DIR/go --steps 150 [--pause-at 50 | --selfkill-at 50]

torchft.DistributedDataParallel + torchft.Optimizer over a float64 nn.Linear,
``Manager(pg=ProcessGroupGloo(timeout=5 s), checkpoint_transport=PGTransport)``,
``--sleep`` seconds of simulated compute per step; its own TCPStore on
127.0.0.1:0 and its ManagerServer bound to 127.0.0.1:0 (torchft 0.2.0
hard-codes ``bind="[::]:port"`` in manager.py).  Events are JSON lines with
``time.time()``: ready, commit (every ``should_commit``: step after it,
committed, participants), fault, done, error.

* ``--pause-at K``: after the commit that makes the step K, write ``fault`` and
  sleep: the parent SIGKILLs this process (a kill between steps).
* ``--selfkill-at K``: in the gradient allreduce of the step after K (the
  comm hook calls ``manager.allreduce``), once the quorum is in, write
  ``fault`` and SIGKILL itself before the gloo allreduce is issued: the
  peers are in the collective, waiting for it.

torchft is found through ``PTC_TORCHFT_PATH`` (prepended to ``sys.path``) or
a plain ``import torchft``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from datetime import timedelta

if os.environ.get("PTC_TORCHFT_PATH"):
    sys.path.insert(0, os.environ["PTC_TORCHFT_PATH"])
os.environ.setdefault("TORCHFT_USE_OTEL", "false")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--replica", type=int, required=True)
    p.add_argument("--lighthouse", required=True)
    p.add_argument("--events", required=True)
    p.add_argument("--go", required=True, help="start training once this file exists (every replica heartbeats by then)")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--sleep", type=float, default=0.01)
    p.add_argument("--pause-at", type=int, default=None)
    p.add_argument("--selfkill-at", type=int, default=None)
    args = p.parse_args()

    sink = open(args.events, "a", buffering=1)

    def emit(event: str, **kw: object) -> None:
        sink.write(json.dumps({"event": event, "time": time.time(), "replica": args.replica, **kw}) + "\n")
        sink.flush()

    def excepthook(kind, value, tb):  # type: ignore[no-untyped-def]
        emit("crash", error=f"{kind.__name__}: {value}"[:200])  # when a survivor dies of an exception (recorded only)
        sys.__excepthook__(kind, value, tb)

    sys.excepthook = excepthook
    import torch
    from torch import nn
    from torch.distributed import TCPStore

    import torchft
    import torchft.manager as tft_manager
    from torchft.checkpointing.pg_transport import PGTransport

    real_server = tft_manager.ManagerServer

    def loopback_server(**kw: object) -> object:  # manager.py: bind=f"[::]:{port}"; keep it on 127.0.0.1
        return real_server(**{**kw, "bind": "127.0.0.1:0"})

    tft_manager.ManagerServer = loopback_server  # type: ignore[assignment]

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Linear(16, 1, dtype=torch.float64)
    inner = torch.optim.SGD(model.parameters(), lr=0.05)
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    pg = torchft.ProcessGroupGloo(timeout=timedelta(seconds=5))
    transport = PGTransport(pg, timeout=timedelta(seconds=10), device=torch.device("cpu"))
    manager = torchft.Manager(
        pg=pg, min_replica_size=1, load_state_dict=lambda sd: (model.load_state_dict(sd["model"]), inner.load_state_dict(sd["optim"])),
        state_dict=lambda: {"model": model.state_dict(), "optim": inner.state_dict()},
        timeout=timedelta(seconds=10), quorum_timeout=timedelta(seconds=20), connect_timeout=timedelta(seconds=10),
        rank=0, world_size=1, store_addr="127.0.0.1", store_port=store.port, lighthouse_addr=args.lighthouse,
        replica_id=f"bench_{args.replica}", hostname="127.0.0.1", checkpoint_transport=transport,
    )  # fmt: skip

    if args.selfkill_at is not None:
        real_allreduce = manager.allreduce

        def allreduce(tensor, *a, **kw):  # type: ignore[no-untyped-def]
            if manager.current_step() == args.selfkill_at:
                # before the gloo allreduce is issued: the peers are (or will be) inside it, waiting for this
                # process (issued first, the 136-byte allreduce can complete before the kill: seen)
                manager.wait_quorum()
                emit("fault", step=manager.current_step(), where="allreduce")
                os.kill(os.getpid(), signal.SIGKILL)
            return real_allreduce(tensor, *a, **kw)

        manager.allreduce = allreduce  # type: ignore[method-assign]

    ddp = torchft.DistributedDataParallel(manager, model)
    optim = torchft.Optimizer(manager, inner)
    emit("ready", pid=os.getpid())
    deadline = time.monotonic() + 120
    while not os.path.exists(args.go):
        if time.monotonic() > deadline:
            emit("error", error="no go file")
            return 2
        time.sleep(0.005)

    x_all = torch.randn(64, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    y_all = x_all.sum(dim=1, keepdim=True)
    while manager.current_step() < args.steps:
        step = manager.current_step()
        idx = torch.arange(8) + 8 * ((step * 4 + args.replica) % 8)
        optim.zero_grad()  # starts the quorum
        loss = ((ddp(x_all[idx]) - y_all[idx]) ** 2).mean()
        time.sleep(args.sleep)
        loss.backward()  # the comm hook: manager.allreduce of the gradient bucket
        optim.step()  # should_commit
        after = manager.current_step()
        emit("commit", step=after, committed=after > step, participants=manager.num_participants())
        if args.pause_at is not None and after == args.pause_at and after > step:
            emit("fault", step=after, where="between steps")
            time.sleep(60)  # the parent SIGKILLs this process
            emit("error", error="not killed")
            return 3
    emit("done", step=manager.current_step(), w0=float(model.weight[0, 0]), b=float(model.bias[0]))
    sink.close()
    os._exit(0)  # skip the manager/lighthouse shutdown handshakes (not measured)


if __name__ == "__main__":
    sys.exit(main())
