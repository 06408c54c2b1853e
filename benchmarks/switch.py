"""ptc.switch side by side with its anchors, in one process run.

    python benchmarks/switch.py [--ns 2,4,8,16] [--calls 2000]

1. Eager call overhead: ``ptc.switch`` vs a plain Python ``branches[int(i)](x)``
   vs torch 2.14's prototype switch HOP (where this torch has it).
2. Inductor-compiled N-way branch for each N: host syncs per call (``.item()``
   calls counted by the profiler, averaged over every index) and time per
   call, for ptc's balanced cond tree, a nested ``torch.cond`` chain (what
   torch 2.13 users write) and torch 2.14's switch HOP.

"time vs ptc" is each variant's time divided by ptc's (> 1 means ptc is faster).
"""

from __future__ import annotations

import argparse
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


def host_syncs_per_call(fn, n, x):
    """Average number of ``Tensor.item()`` host reads per call over every index.

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
        for i in range(n):
            fn(torch.tensor(i), x)
    finally:
        torch.Tensor.item = original
    return count / n


def item_calls_in_code(fn, *args):
    """Static count of ``.item()`` in Inductor's generated code for ``fn(*args)``."""
    from torch._inductor.utils import run_and_get_code

    _, codes = run_and_get_code(fn, *args)
    return sum(code.count(".item()") for code in codes)


def compiled_table(ns, calls):
    variants = [("ptc balanced tree", switch), ("nested cond chain", cond_chain)]
    native = native_switch()
    if native is not None:
        variants.append(("torch 2.14 switch HOP", native))
    x = torch.randn(SIZE)
    print(f"\n== Inductor-compiled switch, x of {SIZE} floats (per call, averaged over all indices) ==")
    print(f"  {'N':>3}  {'variant':24} {'.item() in code':>15} {'syncs/call':>10} {'us/call':>9}  {'time vs ptc':>11}")
    for n in ns:
        branches = branches_for(n)
        results = []
        for name, impl in variants:
            torch._dynamo.reset()
            compiled = torch.compile(lambda i, x, impl=impl: impl(i, branches, x), fullgraph=True)
            in_code = item_calls_in_code(compiled, torch.tensor(0), x)
            for i in range(n):  # compile and check every index once
                want = branches[i](x)
                assert torch.allclose(compiled(torch.tensor(i), x), want), (name, n, i)
            syncs = host_syncs_per_call(compiled, n, x)
            indices = [torch.tensor(i) for i in range(n)]
            us = per_call_us(lambda: [compiled(i, x) for i in indices], max(calls // n, 10)) / n
            results.append((name, in_code, syncs, us))
        ptc_us = results[0][3]
        for name, in_code, syncs, us in results:
            print(f"  {n:>3}  {name:24} {in_code:15d} {syncs:10.2f} {us:9.2f}  {us / ptc_us:10.2f}x")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ns", default="2,4,8,16", help="branch counts to compile")
    parser.add_argument("--calls", type=int, default=2000, help="calls per timing")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    eager_overhead(args.calls * 10)
    compiled_table([int(n) for n in args.ns.split(",")], args.calls)


if __name__ == "__main__":
    main()
