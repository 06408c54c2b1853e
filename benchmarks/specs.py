"""ptc.specs side by side with torch's own ways to say "this is dynamic", in one run.

    python benchmarks/specs.py

The same function ``f(x, y, z)`` with ``x: (B, T)``, ``y: (2*B, T)``,
``z: (B,)``, ``1 <= B <= 64``, ``8 <= T <= 512``, ``T % 8 == 0`` is run on the
same sequence of 64 valid shapes with 10 violating calls mixed in, through:

* ptc: ``@dynamic_spec`` + ``torch.compile``;
* torch's ShapesSpec + ``torch.compile`` (``dynamic_shapes=`` on 2.14,
  ``shapes_spec=`` on 2.13);
* torch.export with ``Dim`` (one export, then the program runs the sequence);
* ``mark_dynamic`` before every call + ``torch.compile``.

Printed per variant: graphs compiled, recompiles caused by violations, how
many violations raised a clear ValueError (ptc: SpecViolation) vs another
error vs nothing, and wall time of the whole sequence. Then the per-call cost
of ptc's check on this 3-tensor signature.
"""

from __future__ import annotations

import random
import time
import timeit

import sympy
import torch

from ptc import _compat
from ptc.specs import Var, dynamic_spec, spec_of, tensor


def body(x, y, z):
    return (x * 2).sum(1) + y.view(2, -1, y.shape[1]).sum(0).sum(1) + z


def sequence(seed=0):
    rng = random.Random(seed)
    calls = []
    for _ in range(64):
        b, t = rng.randint(1, 64), 8 * rng.randint(1, 64)
        calls.append(((b, t), (2 * b, t), (b,), True))
    bad = [
        ((4, 16), (9, 16), (4,)),  # y != 2B
        ((4, 12), (8, 12), (4,)),  # T % 8 != 0
        ((65, 16), (130, 16), (65,)),  # B > max
        ((4, 16), (8, 24), (4,)),  # T differs
        ((4, 16), (8, 16), (5,)),  # z != B
        ((3, 520), (6, 520), (3,)),  # T > max
        ((2, 16), (5, 16), (2,)),
        ((8, 20), (16, 20), (8,)),
        ((0, 16), (0, 16), (0,)),  # B < min
        ((6, 16), (12, 16), (7,)),
    ]
    for i, (xs, ys, zs) in enumerate(bad):
        calls.insert(6 * i + 3, (xs, ys, zs, False))
    return calls


class Counting:
    def __init__(self):
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return gm


def run(name, call, calls):
    """Run ``call`` over ``calls``; count compiles via the returned backend."""
    backend, fn = call()
    stats = {"clear": 0, "other": 0, "silent": 0, "recompiles_from_violations": 0}
    start = time.perf_counter()
    for xs, ys, zs, valid in calls:
        x, y, z = torch.randn(xs), torch.randn(ys), torch.randn(zs)
        before = backend.graphs
        if valid:
            fn(x, y, z)
            continue
        try:
            fn(x, y, z)
            stats["silent"] += 1
        except ValueError:
            stats["clear"] += 1
        except Exception:  # noqa: BLE001 - counting what each variant raises
            stats["other"] += 1
        stats["recompiles_from_violations"] += backend.graphs - before
    seconds = time.perf_counter() - start
    print(
        f"  {name:34} {backend.graphs:7d} {stats['recompiles_from_violations']:11d} "
        f"{stats['clear']:6d} {stats['other']:6d} {stats['silent']:7d} {seconds:9.2f}"
    )
    return seconds


def ptc_variant():
    B, T = Var("B", min=1, max=64, kind="unbacked"), Var("T", min=8, max=512, kind="unbacked")
    f = dynamic_spec({"x": tensor(B, T), "y": tensor(2 * B, T), "z": tensor(B)}, assumptions=[sympy.Eq(T % 8, 0)])(body)
    backend = Counting()
    return backend, torch.compile(f, fullgraph=True, backend=backend)


def native_variant():
    from torch.fx.experimental import dynamic_spec as ds

    B, T = ds.ShapeVar("B", min=1, max=64), ds.ShapeVar("T", min=8, max=512)
    spec = ds.ShapesSpec({"x": ds.TensorSpec([B, T]), "y": ds.TensorSpec([B * 2, T]), "z": ds.TensorSpec([B])}, assumptions=[T % 8 == 0])
    key = "dynamic_shapes" if _compat.COMPILE_DYNAMIC_SHAPES_KWARG else "shapes_spec"
    backend = Counting()
    return backend, torch.compile(body, fullgraph=True, backend=backend, **{key: spec})


def export_variant():
    from torch.export import Dim

    B, T = Dim("B", min=1, max=64), Dim("T", min=8, max=512)

    class M(torch.nn.Module):
        def forward(self, x, y, z):
            return body(x, y, z)

    backend = Counting()
    ep = torch.export.export(
        M(), (torch.randn(4, 16), torch.randn(8, 16), torch.randn(4)),
        dynamic_shapes=({0: B, 1: T}, {0: 2 * B, 1: T}, {0: B}),
    )
    backend.graphs = 1
    return backend, ep.module()


def mark_dynamic_variant():
    backend = Counting()
    compiled = torch.compile(body, backend=backend)

    def call(x, y, z):
        torch._dynamo.mark_dynamic(x, 0)
        torch._dynamo.mark_dynamic(x, 1)
        torch._dynamo.mark_dynamic(y, 0)
        torch._dynamo.mark_dynamic(y, 1)
        torch._dynamo.mark_dynamic(z, 0)
        return compiled(x, y, z)

    return backend, call


def check_overhead():
    B, T = Var("B", min=1, max=64), Var("T", min=8, max=512)
    f = dynamic_spec({"x": tensor(B, T), "y": tensor(2 * B, T), "z": tensor(B)}, assumptions=[sympy.Eq(T % 8, 0)])(body)
    checker = spec_of(f).checker
    x, y, z = torch.randn(4, 16), torch.randn(8, 16), torch.randn(4)
    n = 50000
    check_us = min(timeit.repeat(lambda: checker(x, y, z), number=n, repeat=5)) / n * 1e6
    plain_us = min(timeit.repeat(lambda: body(x, y, z), number=n // 10, repeat=5)) / (n // 10) * 1e6
    wrapped_us = min(timeit.repeat(lambda: f(x, y, z), number=n // 10, repeat=5)) / (n // 10) * 1e6
    print(f"\n== ptc check on a valid call (x, y, z; 6 dims, 1 derived dim, 1 divisibility) ==")
    print(f"  checker alone:                 {check_us:6.2f} us/call")
    print(f"  eager body:                    {plain_us:6.2f} us/call")
    print(f"  eager body through the spec:   {wrapped_us:6.2f} us/call  (overhead {wrapped_us - plain_us:.2f} us)")


def main():
    torch.set_num_threads(1)
    calls = sequence()
    print(f"torch {torch.__version__}: 64 valid shapes + 10 violations, backend counts Dynamo graphs")
    print(f"  {'variant':34} {'graphs':>7} {'recompiles':>11} {'clear':>6} {'other':>6} {'silent':>7} {'seconds':>9}")
    print(f"  {'':34} {'':>7} {'(by viol.)':>11} {'error':>6} {'error':>6} {'':>7}")
    variants = [("ptc @dynamic_spec + compile", ptc_variant)]
    if _compat.NATIVE_SHAPES_SPEC and (_compat.COMPILE_SHAPES_SPEC_KWARG or _compat.COMPILE_DYNAMIC_SHAPES_KWARG):
        variants.append(("torch ShapesSpec + compile", native_variant))
    variants += [("torch.export Dim (no T % 8)", export_variant), ("mark_dynamic + compile", mark_dynamic_variant)]
    times = {}
    for name, variant in variants:
        torch._dynamo.reset()
        try:
            times[name] = run(name, variant, calls)
        except Exception as e:  # noqa: BLE001 - a variant that cannot even run is a result
            print(f"  {name:34} failed: {type(e).__name__}: {str(e).splitlines()[0][:90]}")
    base = times.get("ptc @dynamic_spec + compile")
    if base:
        print("\n  wall time relative to ptc: " + ", ".join(f"{k}: {v / base:.2f}x" for k, v in times.items()))
    check_overhead()


if __name__ == "__main__":
    main()
