"""``ptc demo cudagraph``: the capture plan of a few loops, through the CPU simulator."""

from __future__ import annotations

import time

import torch

from ptc import _compat
from ptc.demos import cudagraph_programs as P
from ptc.cudagraph.api import capture
from ptc.cudagraph.eligibility import Support
from ptc.errors import CaptureError


def _show(title: str, fn, args, replays, **options) -> None:
    print(f"\n[{title}]")
    cf = capture(fn, *args, executor="sim", segments="eager", **options)
    print(cf.report.format())
    cf(*args)  # warmup on the host
    for i, call_args in enumerate(replays):
        torch.manual_seed(0)
        got = cf(*call_args)
        torch.manual_seed(0)
        want = fn(*call_args)
        graphs = cf.graphs
        iters = {h: n for g in graphs for h, n in g.iterations.items()}
        shown = ", ".join(str(int(a)) for a in call_args[1:])
        print(f"  call with ({shown}): matches eager = {torch.allclose(got, want)}; "
              f"WHILE iterations per handle = {iters}")
        if i == 0:
            print(f"  captured program ({len(graphs)} graph(s)):")
            for g in graphs:
                print("    " + g.render().replace("\n", "\n    "))
                print(f"    node counts: {g.counts()}")


def _host_read_demo() -> None:
    from ptc.cudagraph.simulator import SimGraph

    g = SimGraph()
    x = torch.ones(3)
    try:
        with g.capture():
            if (x.sum() > 0):  # a host read: bool(tensor)
                x = x + 1
    except CaptureError as e:
        print(f"\n[host read during capture]\n  CaptureError: {str(e)[:110]}...")


def _gpu_speed() -> None:
    n = torch.tensor(1000, device="cuda")
    a = torch.rand(1024, device="cuda") + 1
    cf = capture(P.newton, a, n, executor="cuda", segments="inductor")
    for _ in range(3):
        cf(a, n)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(5):
        cf(a, n)
    torch.cuda.synchronize()
    graphed = (time.perf_counter() - t) / 5
    t = time.perf_counter()
    for _ in range(2):
        P.newton(a, n)
    torch.cuda.synchronize()
    eager = (time.perf_counter() - t) / 2
    print(f"\n[GPU] Newton x1000 on 1k floats: eager {eager * 1e3:.2f} ms, captured {graphed * 1e3:.2f} ms, "
          f"speedup {eager / graphed:.1f}x")


def main() -> None:
    x = torch.randn(4)
    print("torch conditional-node bindings here: "
          f"WHILE={_compat.CUDA_GRAPH_WHILE_NODES} IF={_compat.CUDA_GRAPH_IF_NODES}; "
          "below, the CPU simulator stands in for the GPU (each first call is the warmup on the host)")
    t = torch.tensor
    _show("cond inside while (one WHILE node, cond -> IF/ELSE)", P.cond_in_while, (x, t(3)), [(x, t(3)), (x, t(0)), (x, t(100))])
    _show("ptc.switch inside while: its cond tree -> one SWITCH node (CUDA >= 12.8, emulated)",
          P.switch_in_while, (x, t(4), t(0)), [(x, t(4), t(-1)), (x, t(2), t(7))])
    _show("nested loops", P.nested, (x, t(2), t(3)), [(x, t(2), t(3)), (x, t(3), t(0))])
    _show("as torch 2.13 could: IF nodes, no WHILE binding -> loop on the host, its body graphed",
          P.cond_in_while, (x, t(3)), [(x, t(3))], support=Support(while_nodes=False, if_nodes=True))
    _show("RNG in the body -> ineligible, un-graphed", P.rng_body, (x, t(3)), [(x, t(3))])
    _show("CUDA 12.2 -> no conditional nodes", P.counted, (x, t(3)), [(x, t(3))],
          support=Support(while_nodes=True, if_nodes=True, cuda_version=(12, 2)))
    _host_read_demo()
    if _compat.CUDA_AVAILABLE:
        _gpu_speed()
    else:
        print("\n(no GPU here: the speedup part of this demo runs only with CUDA)")
