"""ptc.cudagraph side by side with its anchors, in one process run.

    python benchmarks/cudagraph.py [--iters 10,100,1000] [--rounds 5] [--json out.json]

Workload (issue 6): a while_loop of ``n`` Newton steps ``y = 0.5 * (y + a / y)``
on a 1024-float vector, ``n`` a device scalar (the trip count is data).

Modes, each compiled/captured first, then timed in interleaved rounds (each
sample one call, synchronised; min over rounds):

  eager           torch's while_loop: a host ``while`` on a device bool, one sync per step
  inductor-ro     torch.compile(mode="reduce-overhead"): the loop is partitioned out of
                  the CUDA graph (or the whole graph skipped), still one sync per step
  torch-native    torch.compile(backend="cudagraphs"): torch's own WHILE capture
                  (only where CUDAGraph.begin_capture_to_while_node exists, torch 2.14)
  ptc             ptc.cudagraph.capture(executor="cuda", segments="inductor"): one graph,
                  WHILE node, Inductor-compiled body

Goal: ptc >= 10x over eager at n = 1000. Ratios are printed as speedup over eager.

Without a GPU, ``--device cpu`` runs the same harness with ptc through the CPU
simulator (``executor="sim"``): it checks the harness and the results agree; the
timings are not meaningful.

``--growing STEPS`` runs a decode step instead (a cache that grows by a row every
call, then a while_loop on it; ``torch.compile(..., dynamic=True)``) for STEPS
calls through stock Inductor and the ``ptc_cudagraphs`` backend (and, on the CPU,
the backend with the simulator), and prints each one's first call, the rest's
total and their ratio to stock: what a size that never repeats costs.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any, Callable, Dict, List

import torch

from ptc import _compat
from ptc.cudagraph import capture
from ptc.demos import cudagraph_programs as P

GOAL_AT_1000 = 10.0


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _modes(device: str, a: torch.Tensor, n: torch.Tensor) -> Dict[str, Callable[..., Any]]:
    modes: Dict[str, Callable[..., Any]] = {"eager": P.newton}
    if device == "cuda":
        modes["inductor-ro"] = torch.compile(P.newton, mode="reduce-overhead", fullgraph=True)
        if _compat.CUDA_GRAPH_WHILE_NODES:
            modes["torch-native"] = torch.compile(P.newton, backend="cudagraphs", fullgraph=True)
        modes["ptc"] = capture(P.newton, a, n, executor="cuda", segments="inductor")
    else:
        modes["ptc(sim)"] = capture(P.newton, a, n, executor="sim", segments="eager")
    return modes


def run(device: str, iters: List[int], rounds: int) -> Dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    a = (torch.rand(1024, generator=g) + 1).to(device)
    n0 = torch.tensor(iters[0], device=device)
    modes = _modes(device, a, n0)
    results: Dict[str, Any] = {"device": device, "torch": torch.__version__, "iters": {}}
    errors: Dict[str, str] = {}
    for name, fn in list(modes.items()):  # compile / warm up / capture: 3 calls
        try:
            for _ in range(3):
                fn(a, n0)
            _sync(device)
        except Exception as e:  # noqa: BLE001 - a mode that fails is reported, not fatal
            errors[name] = f"{type(e).__name__}: {str(e)[:200]}"
            del modes[name]
    results["errors"] = errors
    for it in iters:
        n = torch.tensor(it, device=device)
        want = P.newton(a, n)
        times = {name: [] for name in modes}
        for _ in range(rounds):
            for name, fn in modes.items():
                _sync(device)
                t = time.perf_counter()
                out = fn(a, n)
                _sync(device)
                times[name].append(time.perf_counter() - t)
                if not torch.allclose(out, want, rtol=1e-4, atol=1e-5):
                    errors[f"{name}@{it}"] = "result differs from eager"
        best = {name: min(ts) for name, ts in times.items()}
        results["iters"][it] = {
            "ms": {k: v * 1e3 for k, v in best.items()},
            "speedup_vs_eager": {k: best["eager"] / v for k, v in best.items()},
        }
    if device == "cuda" and 1000 in results["iters"] and "ptc" in modes:
        s = results["iters"][1000]["speedup_vs_eager"]["ptc"]
        results["goal"] = {"ptc_vs_eager_at_1000": s, "target": GOAL_AT_1000, "met": s >= GOAL_AT_1000}
    return results


def format_results(results: Dict[str, Any]) -> str:
    lines = [f"while_loop Newton x n on 1024 floats, device {results['device']}, torch {results['torch']}"]
    for it, r in results["iters"].items():
        cells = ", ".join(
            f"{k} {r['ms'][k]:.3f} ms ({r['speedup_vs_eager'][k]:.1f}x)" for k in r["ms"]
        )
        lines.append(f"  n={it:>5}: {cells}")
    if results.get("goal"):
        g = results["goal"]
        lines.append(f"  goal ptc >= {g['target']}x over eager at n=1000: {g['ptc_vs_eager_at_1000']:.1f}x "
                     f"-> {'met' if g['met'] else 'NOT met'}")
    for k, v in results["errors"].items():
        lines.append(f"  error {k}: {v}")
    return "\n".join(lines)


def decode_step(x: torch.Tensor, cache: torch.Tensor, n: torch.Tensor, w: torch.Tensor) -> Any:
    """One decode step: append ``x`` to ``cache``, then ``n`` halvings of its projection."""
    from torch._higher_order_ops.while_loop import while_loop

    cache = torch.cat([cache, x], 0)
    i0 = torch.zeros((), dtype=torch.int64, device=x.device)
    y = while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y * 0.5), (i0, (cache @ w).relu().sum(0)))[1]
    return y, cache


def run_growing(device: str, steps: int) -> Dict[str, Any]:
    from ptc.cudagraph import make_backend

    backends: Dict[str, Any] = {"stock inductor": "inductor", "ptc_cudagraphs": "ptc_cudagraphs"}
    if device == "cpu":
        backends["ptc_cudagraphs(sim)"] = make_backend(executor="sim", segments="inductor")
    g = torch.Generator().manual_seed(0)
    w = torch.randn(64, 64, generator=g).to(device)
    xs = [torch.randn(1, 64, generator=g).to(device) for _ in range(steps)]
    results: Dict[str, Any] = {"device": device, "torch": torch.__version__, "steps": steps, "s": {}}
    for name, backend in backends.items():
        torch._dynamo.reset()
        f = torch.compile(decode_step, backend=backend, dynamic=True)
        cache = torch.zeros(4, 64, device=device)
        times = []
        for k, x in enumerate(xs):
            n = torch.tensor(k % 3, device=device)
            _sync(device)
            t = time.perf_counter()
            out, new_cache = f(x, cache, n, w)
            _sync(device)
            times.append(time.perf_counter() - t)
            if not torch.allclose(out, decode_step(x, cache, n, w)[0], rtol=1e-4, atol=1e-4):
                results.setdefault("errors", {})[f"{name}@{k}"] = "result differs from eager"
            cache = new_cache
        results["s"][name] = {"first": times[0], "rest": sum(times[1:])}
    return results


def format_growing(results: Dict[str, Any]) -> str:
    s = results["s"]
    stock = s["stock inductor"]
    lines = [f"decode step, cache growing by a row a call, {results['steps']} calls, device {results['device']}, "
             f"torch {results['torch']}"]  # fmt: skip
    for name, r in s.items():
        lines.append(f"  {name:>20}: first call {r['first']:.2f} s, the other {results['steps'] - 1} "
                     f"{r['rest']:.3f} s ({r['rest'] / max(stock['rest'], 1e-9):.1f}x stock)")  # fmt: skip
    for k, v in results.get("errors", {}).items():
        lines.append(f"  error {k}: {v}")
    return "\n".join(lines)


def main(argv: List[str] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", default="10,100,1000")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="cuda" if _compat.CUDA_AVAILABLE else "cpu")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--growing", type=int, default=0, metavar="STEPS",
                        help="time a decode step whose cache grows every call instead")
    args = parser.parse_args(argv)
    if args.growing:
        grown = run_growing(args.device, args.growing)
        print(format_growing(grown))
        return 1 if grown.get("errors") else 0
    results = run(args.device, [int(i) for i in args.iters.split(",")], args.rounds)
    print(format_results(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    bad = [k for k in results["errors"] if "@" in k]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
