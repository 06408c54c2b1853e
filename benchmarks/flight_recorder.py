"""Flight Recorder overhead: a gloo all_reduce loop of 1 MB tensors, recorder off vs on, in one run.

    python benchmarks/flight_recorder.py [--world 2] [--blocks 200] [--iters 10] [--mb 1] [--capture auto]

Starts ``--world`` processes on 127.0.0.1 (the parent hosts the TCPStore).  Each
rank runs ``2 * blocks`` blocks of ``iters`` synchronous all_reduces, timing
each call, with the recorder off and on in turn (off, on, on, off, ...: attached
before an "on" block, detached after it), so drift on a busy machine hits both
sides alike.  Rank 0 prints the median time per all_reduce of each side, the
on/off ratio (median over adjacent block pairs, with its interquartile range)
and, measured alone on a one-rank group, what recording adds to one call; the
goal is an overhead under 2 %.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time


def _per_call_cost_us(capture: str, calls: int = 2000, rounds: int = 15) -> float:
    """What recording adds per call, measured alone: all_reduce on a one-rank gloo group."""
    import torch
    import torch.distributed as dist

    from ptc.distributed import FlightRecorder

    store = dist.HashStore()
    pg = dist.ProcessGroup(store, 0, 1)
    backend = dist.ProcessGroupGloo(store, 0, 1, datetime.timedelta(seconds=60))
    pg._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, backend)
    pg._set_default_backend(dist.ProcessGroup.BackendType.GLOO)
    t = torch.ones(4)
    rec = FlightRecorder(capacity=2048, rank=0, dump_dir=tempfile.mkdtemp(prefix="ptc-fr-bench-"), capture=capture)

    def loop() -> float:
        start = time.perf_counter()
        for _ in range(calls):
            pg.allreduce([t]).wait()
        return (time.perf_counter() - start) / calls

    loop()
    off, on = [], []
    for _ in range(rounds):
        off.append(loop())
        rec.attach(pg, name="solo", ranks=[0])
        on.append(loop())
        rec.detach(pg)
    rec.close()
    return (min(on) - min(off)) * 1e6


def _worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    from ptc.distributed import FlightRecorder

    store = dist.TCPStore("127.0.0.1", args.port, is_master=False, timeout=datetime.timedelta(seconds=60))
    dist.init_process_group("gloo", store=store, rank=args.rank, world_size=args.world)
    t = torch.ones(args.mb * 1024 * 1024 // 4)
    rec = FlightRecorder(capacity=2048, dump_dir=tempfile.mkdtemp(prefix="ptc-fr-bench-"), capture=args.capture)
    for _ in range(50):  # warm-up: connections, allocator
        dist.all_reduce(t)
    blocks = []  # (mode, per-call seconds), in the order run
    for block in range(2 * args.blocks):
        # off,on | on,off | ...: each pair has one block of each, neither always first
        mode = "on" if (block % 2) ^ ((block // 2) % 2) else "off"
        dist.barrier()
        if mode == "on":
            rec.attach()
        samples = []
        for _ in range(args.iters):
            start = time.perf_counter()
            dist.all_reduce(t)
            samples.append(time.perf_counter() - start)
        if mode == "on":
            rec.detach()
        blocks.append((mode, samples))
    entries = rec.entries()
    rec.close()
    if args.rank == 0:
        per_call_us = _per_call_cost_us(args.capture)
        times = {m: [x for mode, xs in blocks if mode == m for x in xs] for m in ("off", "on")}
        pair_ratios = []
        for k in range(0, len(blocks), 2):
            by_mode = dict(blocks[k : k + 2])
            pair_ratios.append(statistics.median(by_mode["on"]) / statistics.median(by_mode["off"]))
        q1, q2, q3 = statistics.quantiles(pair_ratios, n=4)
        off, on = statistics.median(times["off"]), statistics.median(times["on"])
        result = {
            "torch": str(torch.__version__),
            "capture": rec.capture,
            "world": args.world,
            "tensor_mb": args.mb,
            "ops_each": len(times["on"]),
            "off_median_us": round(off * 1e6, 1),
            "on_median_us": round(on * 1e6, 1),
            "ratio_of_medians": round(on / off, 4),
            "ratio_paired_median": round(q2, 4),
            "ratio_paired_iqr": [round(q1, 4), round(q3, 4)],
            "recorder_cost_per_call_us": round(per_call_us, 2),
            "recorder_cost_pct_of_off_median": round(per_call_us / (off * 1e6) * 100, 2),
            "recorded_entries_kept": len(entries),
            "states": sorted({e["state"] for e in entries}),
        }
        print(f"torch {result['torch']}, capture={result['capture']}, {args.world} ranks, {args.mb} MB all_reduce, "
              f"{result['ops_each']} timed calls per side in alternating blocks of {args.iters}")
        print(f"  recorder off: median {result['off_median_us']:8.1f} us per all_reduce")
        print(f"  recorder on:  median {result['on_median_us']:8.1f} us per all_reduce")
        print(f"  ratio on/off: {result['ratio_paired_median']:.4f} (median over {len(pair_ratios)} adjacent block pairs, "
              f"IQR {q1:.4f}..{q3:.4f}); ratio of medians {result['ratio_of_medians']:.4f}; goal < 1.02")
        print(f"  recorder's own cost: {result['recorder_cost_per_call_us']:.2f} us per call "
              f"(one-rank group, warm) = {result['recorder_cost_pct_of_off_median']:.2f} % of an all_reduce here")
        print(json.dumps(result))
    dist.destroy_process_group()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--blocks", type=int, default=200, help="blocks per mode")
    parser.add_argument("--iters", type=int, default=10, help="timed all_reduces per block")
    parser.add_argument("--mb", type=int, default=1, help="tensor size in MB")
    parser.add_argument("--capture", default="auto", choices=["auto", "hooks", "wrapper"], help="recorder capture mechanism")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rank is not None:
        _worker(args)
        return 0

    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    common = ["--world", str(args.world), "--blocks", str(args.blocks), "--iters", str(args.iters), "--mb", str(args.mb),
              "--capture", args.capture]  # fmt: skip
    procs = [
        subprocess.Popen([sys.executable, __file__, *common, "--rank", str(r), "--port", str(store.port)])
        for r in range(args.world)
    ]
    try:
        deadline = time.monotonic() + args.timeout
        codes = [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
                p.wait()
    return 0 if all(c == 0 for c in codes) else 1


if __name__ == "__main__":
    sys.exit(main())
