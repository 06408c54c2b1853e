"""``ptc demo flight_recorder``: three gloo processes, a desync, automatic dumps, the verdict.

Ranks 0 and 1 call ``all_reduce`` where rank 2 calls ``broadcast``; gloo gives up
after its 1 s timeout, each rank's recorder dumps on the failure, and the
analysis behind ``ptc fr-trace`` names the culprit.  Everything runs on
127.0.0.1; the workers are started and, if need be, stopped by their PIDs. The
dumps go to a temporary directory, removed when the demo ends.
"""

from __future__ import annotations

import datetime
import os
import shutil
import subprocess
import sys
import tempfile
import time

WORLD = 3
DEADLINE_S = 90.0


def _worker(rank: int, port: int, dump_dir: str) -> None:
    import torch
    import torch.distributed as dist

    from ptc.distributed import flight_recorder as fr

    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=30))
    dist.init_process_group(
        "gloo", store=dist.PrefixStore("pg", store), rank=rank, world_size=WORLD,
        timeout=datetime.timedelta(seconds=1),
    )  # fmt: skip
    rec = fr.enable(dump_dir=dump_dir, store=store, poll_interval=0.1)
    # start the collectives together: a rank still starting up would make the others
    # time out (1 s) in the first all_reduce instead of reaching the desync
    store.add("ready", 1)
    while store.add("ready", 0) < WORLD:
        time.sleep(0.01)
    t = torch.ones(1024)
    for _ in range(3):
        dist.all_reduce(t)
    try:
        if rank == WORLD - 1:
            dist.broadcast(t, src=0)  # the desync
        else:
            dist.all_reduce(t)
    except RuntimeError:
        pass  # gloo timed out; the recorder has dumped
    deadline = time.monotonic() + 20
    while not rec.dumps and time.monotonic() < deadline:
        time.sleep(0.05)
    rec.close()


def main() -> None:
    """Run the demo and print what ``ptc fr-trace`` would print."""
    import torch.distributed as dist

    from ptc.distributed.flight_recorder import analysis as fr_analysis
    from ptc.distributed.processes import wait_then_kill

    dump_dir = tempfile.mkdtemp(prefix="ptc-fr-demo-")
    procs: list = []
    try:
        store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
        print("3 gloo processes on 127.0.0.1; rank 2 calls broadcast where ranks 0 and 1 call all_reduce")
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "ptc.demos.flight_recorder", str(r), str(store.port), dump_dir],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            for r in range(WORLD)
        ]
        wait_then_kill(procs, DEADLINE_S)
        print("dumps written by the ranks' recorders when the collective failed: "
              f"{', '.join(sorted(os.listdir(dump_dir)))}\n")
        print(fr_analysis.analyze(dump_dir).format())
        print("\nthe same on a directory of dumps: ptc fr-trace DIR    (torch's own analyzer: torchfrtrace DIR -j)")
    finally:
        wait_then_kill(procs, 0)  # nothing is left running if the demo stopped early
        shutil.rmtree(dump_dir, ignore_errors=True)
    sys.stdout.flush()


if __name__ == "__main__":
    _worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
