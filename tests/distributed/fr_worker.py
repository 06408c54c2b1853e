"""One rank of a multi-process Flight Recorder scenario (started by the tests, not collected).

    python fr_worker.py SCENARIO RANK WORLD STORE_PORT DUMP_DIR

The parent test hosts the TCPStore (so it outlives any worker) and owns the
processes.  Every wait here is bounded.  Each worker prints one JSON line per
event it reaches, for the parent's diagnostics.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

from ptc import _compat
from ptc.distributed import flight_recorder as fr

WAIT_S = 30.0
CORE = os.environ.get("PTC_TEST_FR_CORE", "auto")  # the recorder core the test asked for


def emit(event: str, **data) -> None:
    print(json.dumps({"event": event, **data}), flush=True)


def wait_until(predicate, timeout: float = WAIT_S, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def init(ctx, pg_timeout_s: float, **kwargs) -> None:
    dist.init_process_group(
        "gloo",
        store=dist.PrefixStore("pg", ctx["store"]),
        rank=ctx["rank"],
        world_size=ctx["world"],
        timeout=datetime.timedelta(seconds=pg_timeout_s),
        **kwargs,
    )


def desync(ctx) -> None:
    """Four good all_reduces; then the last rank calls broadcast while the others all_reduce."""
    rank, world = ctx["rank"], ctx["world"]
    init(ctx, pg_timeout_s=2)
    rec = fr.enable(dump_dir=ctx["dump_dir"], store=ctx["store"], poll_interval=0.1, core=CORE)
    t = torch.ones(1000)
    for _ in range(4):
        dist.all_reduce(t)
    try:
        if rank == world - 1:
            dist.broadcast(t, src=0)
        else:
            dist.all_reduce(t)
        emit("desync_completed")
    except RuntimeError as e:
        emit("desync_failed", error=str(e)[:200])
    wait_until(lambda: rec.dumps, what="the failure dump")
    emit("dumped", paths=rec.dumps)
    rec.close()


def hang(ctx) -> None:
    """Four good all_reduces; then the last rank never arrives at the fifth."""
    rank, world = ctx["rank"], ctx["world"]
    init(ctx, pg_timeout_s=60)  # gloo would give up only after a minute ...
    # ... the recorder's watchdog dumps after 1.5 s, and asks the others through the store
    rec = fr.enable(dump_dir=ctx["dump_dir"], store=ctx["store"], timeout=1.5, poll_interval=0.1, core=CORE)
    t = torch.ones(256)
    for _ in range(4):
        dist.all_reduce(t)
    if rank != world - 1:
        dist.all_reduce(t, async_op=True)  # never completes
    wait_until(lambda: rec.dumps, what="a dump")
    emit("dumped", paths=rec.dumps)
    rec.close()  # no dump after this one (its requests to the peers are published by now)
    # a rank that exits closes its gloo connections, which fails a peer's pending all_reduce: exit
    # only once every rank has closed its recorder, so no such failure is recorded or dumped
    store = ctx["store"]
    store.set(f"hang_closed/{rank}", "1")
    wait_until(lambda: store.check([f"hang_closed/{r}" for r in range(world)]), what="every rank's recorder closed")
    os._exit(0)  # the hung collective cannot finish; do not wait for it


def signal_dump(ctx) -> None:
    """send/recv, two all_reduces; rank 0 then blocks in a third that rank 1 never joins."""
    rank, store = ctx["rank"], ctx["store"]
    init(ctx, pg_timeout_s=60)
    rec = fr.enable(
        dump_dir=ctx["dump_dir"], dump_signal=signal.SIGUSR1, record_stacks=True, timeout=120, poll_interval=0.1
    )
    t = torch.arange(8, dtype=torch.float32)
    if rank == 0:
        dist.send(t, 1)
    else:
        dist.recv(t, 0)
    dist.all_reduce(t)
    dist.all_reduce(t)
    store.set(f"ready/{rank}", "1")
    if rank == 0:
        dist.all_reduce(t)  # the main thread blocks inside gloo: only the recorder's thread can dump
        store.set("returned/0", "1")
    else:
        time.sleep(WAIT_S)
    rec.close()


def _gloo_group(store, rank: int, size: int, timeout_s: float):
    """A process group built by hand on a fresh store prefix: torch 2.13's way to reconfigure."""
    pg = dist.ProcessGroup(store, rank, size)
    backend = dist.ProcessGroupGloo(store, rank, size, datetime.timedelta(seconds=timeout_s))
    pg._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, backend)
    pg._set_default_backend(dist.ProcessGroup.BackendType.GLOO)
    return pg


def reconfigure(ctx) -> None:
    """Generation 0 with 3 ranks; rank 2 dies; generation 1 with ranks 0, 1, where rank 1 never
    arrives at the third collective."""
    rank, world, store, mode = ctx["rank"], ctx["world"], ctx["store"], ctx["mode"]
    timeout = datetime.timedelta(seconds=60)
    if mode == "native":
        init(ctx, pg_timeout_s=60, enable_reconfigure=True)
        store.set(f"h0/{rank}", dist._get_reconfigure_handle())
        handles = [store.get(f"h0/{r}").decode() for r in range(world)]
        dist._reconfigure(1, handles, timeout=timeout).wait()
    else:
        init(ctx, pg_timeout_s=60)
    rec = fr.enable(dump_dir=ctx["dump_dir"], store=store, timeout=1.5, poll_interval=0.1, core=CORE)
    t = torch.ones(64)
    for _ in range(3):
        dist.all_reduce(t)
    emit("generation0_done")
    if rank == 2:
        os._exit(0)  # dies without a dump
    survivors = [0, 1]
    if mode == "native":
        store.set(f"h1/{rank}", dist._get_reconfigure_handle())
        handles = [store.get(f"h1/{r}").decode() for r in survivors]
        dist._reconfigure(2, handles, timeout=timeout).wait()
        fr.on_reconfigure(1, ranks=survivors)
        group = dist.group.WORLD
    else:
        group = _gloo_group(dist.PrefixStore("pg/gen1", store), survivors.index(rank), 2, timeout_s=60)
        fr.on_reconfigure(1, group=dist.group.WORLD, new_group=group, ranks=survivors)
    emit("reconfigured", size=group.size(), group_rank=group.rank())
    t = torch.ones(32)
    for _ in range(2):
        group.allreduce([t]).wait()
    if rank == 0:
        group.allreduce([t])  # rank 1 never arrives: the watchdog dumps, the store tells rank 1
    wait_until(lambda: rec.dumps, what="a dump")
    emit("dumped", paths=rec.dumps)
    rec.close()
    os._exit(0)


SCENARIOS = {"desync": desync, "hang": hang, "signal": signal_dump, "reconfigure": reconfigure}


def main(argv) -> int:
    scenario, rank, world, port, dump_dir = argv[:5]
    mode = argv[5] if len(argv) > 5 else ""
    store = dist.TCPStore("127.0.0.1", int(port), is_master=False, timeout=datetime.timedelta(seconds=WAIT_S))
    ctx = {"rank": int(rank), "world": int(world), "store": store, "dump_dir": dump_dir, "mode": mode}
    emit("start", pid=os.getpid(), torch=torch.__version__, capture="hooks" if _compat.PROCESS_GROUP_HOOKS else "wrapper",
         core=CORE)
    SCENARIOS[scenario](ctx)
    emit("done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
