"""Flight Recorder overhead: a gloo all_reduce loop of 1 MB tensors, recorder off and on, in one run.

    python benchmarks/flight_recorder.py [--world 2] [--rounds 150] [--iters 10] [--mb 1]
                                         [--capture auto] [--cores python,native]

Starts ``--world`` processes on 127.0.0.1 (the parent hosts the TCPStore and
builds the native core first if it is asked for and not built yet).  Each rank
has one recorder per core (``python``: ptc's Python core; ``native``: its C++
core, see ``ptc.distributed.flight_recorder.native``) and runs ``rounds`` rounds; a round
is one block of ``iters`` synchronous all_reduces per mode (off, then each
core attached), in an order that rotates from round to round, so drift on a
busy machine hits every mode alike.  Rank 0 prints, per core:

* the step time: a block's wall time / ``iters`` (mean per call in the block),
  median over rounds;
* the on/off ratio: median over rounds of (block with the core) / (off block
  of the same round), with its interquartile range, plus the ratios of the
  median and of the mean step times.  The goal (issue 8) is under 1.02;
* the main thread's CPU time per call (rank 0, in the loop, ``time.thread_time``),
  on - off: the recorder's cost on the issuing thread, cold caches included,
  and far less sensitive to other load than wall time;
* what recording adds to one call measured alone on a one-rank group (warm,
  wall time; this includes the native core's completion callback, which runs
  on gloo's thread).

The whole process's CPU time is not reported: gloo's own threads make it
swing by +-40 us per call between blocks of the same mode here, far more than
any recorder costs.

Why block means and not per-call medians: on a small shared machine the time
of one 1 MB gloo all_reduce is bimodal (about 0.7-1.2 ms when both ranks'
threads get a core at once, 3-5 ms when one waits for a scheduler tick), so a
per-call median moves by 10-20 % when a few calls change mode.  A block's mean
is the step time a training loop sees; comparing blocks of the same round
cancels slow drift.  Even so, expect a spread of a few percent in wall-time
ratios between runs on a busy machine; the CPU numbers say what the recorder
itself costs.
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


def _per_call_cost_us(capture: str, core: str, calls: int = 2000, rounds: int = 15) -> float:
    """What recording adds per call, measured alone: all_reduce on a one-rank gloo group."""
    import torch
    import torch.distributed as dist

    from ptc import _compat
    from ptc.distributed import FlightRecorder

    pg = _compat.gloo_process_group(dist.HashStore(), 0, 1, datetime.timedelta(seconds=60))
    t = torch.ones(4)
    rec = FlightRecorder(capacity=2048, rank=0, dump_dir=tempfile.mkdtemp(prefix="ptc-fr-bench-"), capture=capture,
                         core=core)  # fmt: skip

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
    cores = args.cores.split(",")
    recorders = {
        core: FlightRecorder(capacity=2048, dump_dir=tempfile.mkdtemp(prefix="ptc-fr-bench-"), capture=args.capture,
                             core=core)  # fmt: skip
        for core in cores
    }
    modes = ["off", *cores]
    for _ in range(50):  # warm-up: connections, allocator
        dist.all_reduce(t)
    rounds = []  # per round: {mode: (wall s per call, main-thread CPU s per call)}
    for r in range(args.rounds):
        order = modes[r % len(modes):] + modes[: r % len(modes)]
        if (r // len(modes)) % 2:
            order.reverse()
        measured = {}
        for mode in order:
            dist.barrier()
            if mode != "off":
                recorders[mode].attach()
            thread, start = time.thread_time(), time.perf_counter()
            for _ in range(args.iters):
                dist.all_reduce(t)
            wall, thread = time.perf_counter() - start, time.thread_time() - thread
            if mode != "off":
                recorders[mode].detach()
            measured[mode] = (wall / args.iters, thread / args.iters)
        rounds.append(measured)
    kept = {core: rec.entries() for core, rec in recorders.items()}
    for rec in recorders.values():
        rec.close()
    if args.rank == 0:
        _report(args, rounds, cores, kept, str(torch.__version__))
    dist.destroy_process_group()


def _report(args: argparse.Namespace, rounds, cores, kept, torch_version: str) -> None:
    def column(mode: str, k: int):
        return [r[mode][k] for r in rounds]

    off_wall = column("off", 0)
    results = {"torch": torch_version, "world": args.world, "tensor_mb": args.mb, "rounds": args.rounds,
               "iters_per_block": args.iters, "off_step_median_us": round(statistics.median(off_wall) * 1e6, 1),
               "cores": {}}  # fmt: skip
    print(f"torch {torch_version}, {args.world} ranks, {args.mb} MB all_reduce, {args.rounds} rounds of one "
          f"{args.iters}-call block per mode (off, {', '.join(cores)}), order rotated per round")  # fmt: skip
    print(f"  recorder off:  median step {results['off_step_median_us']:8.1f} us per all_reduce (block mean)")
    for core in cores:
        wall = column(core, 0)
        ratios = [r[core][0] / r["off"][0] for r in rounds]
        q1, q2, q3 = statistics.quantiles(ratios, n=4)
        thread_us = (statistics.median(column(core, 1)) - statistics.median(column("off", 1))) * 1e6
        warm_us = _per_call_cost_us(args.capture, core)
        entries = kept[core]
        row = {
            "capture": args.capture,
            "on_step_median_us": round(statistics.median(wall) * 1e6, 1),
            "ratio_paired_median": round(q2, 4),
            "ratio_paired_iqr": [round(q1, 4), round(q3, 4)],
            "ratio_of_median_steps": round(statistics.median(wall) / statistics.median(off_wall), 4),
            "ratio_of_mean_steps": round(statistics.mean(wall) / statistics.mean(off_wall), 4),
            "main_thread_cpu_added_us": round(thread_us, 1),
            "main_thread_cpu_added_pct_of_step": round(thread_us / (statistics.median(off_wall) * 1e6) * 100, 2),
            "warm_cost_per_call_us": round(warm_us, 2),
            "recorded_entries_kept": len(entries),
            "states": sorted({e["state"] for e in entries}),
        }
        results["cores"][core] = row
        print(f"  {core + ' core:':13} median step {row['on_step_median_us']:8.1f} us; on/off {q2:.4f} "
              f"(median of {len(ratios)} rounds, IQR {q1:.4f}..{q3:.4f}), of medians {row['ratio_of_median_steps']:.4f}, "
              f"of means {row['ratio_of_mean_steps']:.4f}; goal < 1.02")  # fmt: skip
        print(f"  {'':13} main thread CPU per all_reduce: {thread_us:+.1f} us "
              f"({row['main_thread_cpu_added_pct_of_step']:.2f} % of a step); warm, alone: {warm_us:+.2f} us per call")
    print(json.dumps(results))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=150, help="rounds of one block per mode")
    parser.add_argument("--iters", type=int, default=10, help="timed all_reduces per block")
    parser.add_argument("--mb", type=int, default=1, help="tensor size in MB")
    parser.add_argument("--capture", default="auto", choices=["auto", "hooks", "wrapper"], help="capture mechanism")
    parser.add_argument("--cores", default="python,native", help="comma-separated recorder cores to compare with off")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rank is not None:
        _worker(args)
        return 0

    import torch.distributed as dist

    if "native" in args.cores.split(","):
        from ptc.distributed.flight_recorder import native as fr_native

        fr_native.load(build=True)  # once here, not in every worker
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    common = ["--world", str(args.world), "--rounds", str(args.rounds), "--iters", str(args.iters), "--mb", str(args.mb),
              "--capture", args.capture, "--cores", args.cores]  # fmt: skip
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
