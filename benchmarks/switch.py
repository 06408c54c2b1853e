"""ptc.switch side by side with its anchors, in one process run.

    python benchmarks/switch.py [--ns 2,4,8,16,32,64] [--calls 2000] [--chain-max 16] [--cold]

1. Eager call overhead: ``ptc.switch`` vs a plain Python ``branches[int(i)](x)``
   vs torch 2.14's prototype switch HOP (where this torch has it).
2. Inductor-compiled N-way branch (``fullgraph=True``) for each N: compile
   seconds, host syncs per call (``.item()`` calls counted while calling,
   averaged over every index) and time per call, for ptc's balanced cond tree,
   a nested ``torch.cond`` chain (what torch 2.13 users write; up to
   ``--chain-max`` branches, its compile time grows with N squared) and torch
   2.14's switch HOP. "compile s" is the first call after ``torch._dynamo.reset()``
   with Inductor's FX-graph cache off and its kernels already built by an
   earlier compile of the same variant in this process: the front end's cost
   (Dynamo, AOTAutograd, lowering), which is what grows with N. ``--cold``
   adds "cold s": the first call in a fresh process with an empty Inductor
   cache (every C++ kernel compiled), one process per variant and N.

"time vs ptc" is each variant's time divided by ptc's (> 1 means ptc is faster).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import timeit

import torch

from ptc import _compat
from ptc.control_flow import switch

SIZE = 1024


def branches_for(n):
    return [(lambda k: lambda x: x * (k + 1) + k)(k) for k in range(n)]


def cond_chain(index, branches, x):
    """What torch 2.13 users write: if index == 0 ... elif index == 1 ... as nested cond."""

    def at(k):
        if k == len(branches) - 1:
            return lambda i, x: branches[k](x)
        return lambda i, x: torch.cond(i <= k, lambda i, x: branches[k](x), at(k + 1), (i, x))

    return at(0)(index.clamp(0, len(branches) - 1), x)


def native_switch():
    if not _compat.NATIVE_SWITCH_HOP:
        return None
    from torch._higher_order_ops.switch import switch as native

    return lambda index, branches, x: native(index, branches, (x,))


def per_call_us(fn, calls):
    fn()
    best = min(timeit.repeat(fn, number=calls, repeat=5))
    return best / calls * 1e6


def eager_overhead(calls):
    branches = branches_for(4)
    x, index = torch.randn(8), torch.tensor(2)
    rows = [
        ("plain Python branches[int(i)](x)", per_call_us(lambda: branches[int(index)](x), calls)),
        ("ptc.switch", per_call_us(lambda: switch(index, branches, x), calls)),
    ]
    native = native_switch()
    if native is not None:
        rows.append(("torch 2.14 switch HOP", per_call_us(lambda: native(index, branches, x), max(calls // 20, 20))))
    print("\n== eager call, 4 branches, tensor index ==")
    ptc_us = rows[1][1]
    for name, us in rows:
        print(f"  {name:36} {us:9.2f} us/call   ({us / ptc_us:6.2f} x ptc)")
    print(f"  ptc overhead over plain Python: {ptc_us - rows[0][1]:.2f} us")


def host_syncs_per_call(fn, indices, *operands):
    """Average number of ``Tensor.item()`` host reads per call of ``fn(torch.tensor(i), *operands)``
    over ``indices``.

    Inductor's generated code reads each cond predicate / switch index with
    ``.item()``; the benchmark (never the library) wraps ``Tensor.item`` with a
    counter while it calls ``fn``.
    """
    original = torch.Tensor.item
    count = 0

    def counting_item(self):
        nonlocal count
        count += 1
        return original(self)

    torch.Tensor.item = counting_item
    try:
        for i in indices:
            fn(torch.tensor(i), *operands)
    finally:
        torch.Tensor.item = original
    return count / len(indices)


def item_calls_in_code(fn, *args):
    """Static count of ``.item()`` in Inductor's generated code for ``fn(*args)``."""
    from torch._inductor.utils import run_and_get_code

    _, codes = run_and_get_code(fn, *args)
    return sum(code.count(".item()") for code in codes)


VARIANTS = {"ptc": "ptc balanced tree", "chain": "nested cond chain", "native": "torch 2.14 switch HOP"}


def variant_impl(name):
    return {"ptc": switch, "chain": cond_chain, "native": native_switch()}[name]


def compiled(name, n):
    branches = branches_for(n)
    impl = variant_impl(name)
    return branches, torch.compile(lambda i, x: impl(i, branches, x), fullgraph=True)


def first_call_s(name, n, x):
    """Seconds of the first call of a fresh compile of variant ``name`` with ``n`` branches."""
    torch._dynamo.reset()
    _, fn = compiled(name, n)
    start = time.perf_counter()
    fn(torch.tensor(0), x)
    return time.perf_counter() - start


def cold_first_call_s(name, n):
    """``first_call_s`` in a new process with an empty Inductor cache."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache)
        out = subprocess.run([sys.executable, __file__, "--first-call", f"{name}:{n}"], env=env, check=True,
                             capture_output=True, text=True).stdout  # fmt: skip
    return float(out.split()[-1])


def compiled_table(ns, calls, chain_max, cold):
    torch._inductor.config.fx_graph_cache = False
    variants = ["ptc", "chain"] + (["native"] if native_switch() is not None else [])
    x = torch.randn(SIZE)
    print(f"\n== Inductor-compiled switch, fullgraph=True, x of {SIZE} floats (per call, averaged over all indices) ==")
    print(f"  {'N':>3}  {'variant':24} {'compile s':>9} {'cold s':>7} {'.item() in code':>15} {'syncs/call':>10} "
          f"{'us/call':>9}  {'time vs ptc':>11}")  # fmt: skip
    for n in ns:
        results = []
        for name in variants:
            if name == "chain" and n > chain_max:
                continue
            branches, fn = compiled(name, n)
            in_code = item_calls_in_code(fn, torch.tensor(0), x)  # builds the kernels
            for i in range(n):  # every index once, checked
                assert torch.allclose(fn(torch.tensor(i), x), branches[i](x)), (name, n, i)
            syncs = host_syncs_per_call(fn, range(n), x)
            indices = [torch.tensor(i) for i in range(n)]
            us = per_call_us(lambda: [fn(i, x) for i in indices], max(calls // n, 10)) / n
            compile_s = first_call_s(name, n, x)
            cold_s = cold_first_call_s(name, n) if cold else float("nan")
            results.append((VARIANTS[name], compile_s, cold_s, in_code, syncs, us))
        ptc_us = results[0][-1]
        for label, compile_s, cold_s, in_code, syncs, us in results:
            print(f"  {n:>3}  {label:24} {compile_s:9.2f} {cold_s:7.1f} {in_code:15d} {syncs:10.2f} {us:9.2f}  "
                  f"{us / ptc_us:10.2f}x", flush=True)  # fmt: skip


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ns", default="2,4,8,16,32,64", help="branch counts to compile")
    parser.add_argument("--calls", type=int, default=2000, help="calls per timing")
    parser.add_argument("--chain-max", type=int, default=16, help="largest N for the nested cond chain")
    parser.add_argument("--cold", action="store_true", help="also time each first compile in a fresh process")
    parser.add_argument("--first-call", default=None, help=argparse.SUPPRESS)  # VARIANT:N, for --cold
    args = parser.parse_args()
    if args.first_call:
        name, n = args.first_call.split(":")
        print(first_call_s(name, int(n), torch.randn(SIZE)))
        return
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    eager_overhead(args.calls * 10)
    compiled_table([int(n) for n in args.ns.split(",")], args.calls, args.chain_max, args.cold)


if __name__ == "__main__":
    main()
