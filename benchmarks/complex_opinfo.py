"""ptc.complex against stock ``torch.compile`` over torch's own OpInfo database.

    python benchmarks/complex_opinfo.py [--dtype complex64] [--samples 2] [--backward | --inplace] [--gemm onednn]
                                        [--ops abs,mul] [--jobs 2] [--json out.json]

Every OpInfo of ``torch.testing._internal.common_methods_invocations.op_db``
that supports the dtype on the CPU, ``--samples`` sample inputs each (the
first ones the OpInfo generates, from a fixed seed), a fresh compile per
sample, through stock Inductor and through ``ptc.complex.backend()``.
Per op and mode:

* ``ran``: every sample compiled and ran (an exception anywhere is a failure);
* ``equal``: every result equals eager's (``torch.testing.assert_close`` at the
  dtype's default tolerance, NaN where eager has NaN; integer and bool results exactly),
  and so do the inputs after the call (an op that writes into an input writes the same);
* ``fused``: no graph break and no ATen call left in the generated code that
  is neither a view nor a library kernel (:func:`ptc.complex.complex_fallbacks`).

With ``--backward``, for OpInfos that support autograd: the gradient of a real
loss (``sum(real(out * conj(w)))`` over the outputs, ``w`` fixed) with respect to
every floating or complex input, computed by backpropagating through the
compiled forward (so AOTAutograd compiles the backward too), against eager's.
With ``--inplace``, for OpInfos with an in-place variant (``x.add_(y)``): that
variant instead, the updated input compared with eager's (its write-back into
the input is part of the compiled graph).

Ops whose eager result is not a function of the inputs (random sampling,
``empty``) and samples on which eager itself raises are left out of the
denominator; the table says how many. Ops are run in ``--jobs`` worker
processes; a worker that crashes or hangs costs its op a failure, not the run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional

#: OpInfos whose results do not follow from their inputs (random, uninitialised memory)
NONDETERMINISTIC = (
    "normal", "uniform", "bernoulli", "rand", "empty", "new_empty", "multinomial", "dropout", "randn",
    "randint", "rrelu", "cauchy", "exponential", "geometric", "log_normal",
)

MODES = ("stock", "ptc")


@dataclass
class OpResult:
    """One OpInfo's outcome, in one direction (forward or backward), per mode."""

    name: str
    direction: str
    samples: int = 0  # samples eager could run
    excluded: str = ""  # why the op is not counted ("" when it is)
    ran: Dict[str, bool] = field(default_factory=dict)
    equal: Dict[str, bool] = field(default_factory=dict)
    fused: Dict[str, bool] = field(default_factory=dict)
    error: Dict[str, str] = field(default_factory=dict)
    #: why a mode's code is not fully fused: graph breaks, ATen calls left, ops of library-bound graphs
    unfused: Dict[str, str] = field(default_factory=dict)
    #: ptc's own fallbacks (graphs compiled the stock way, ops it left whole), as reported by the backend
    fallbacks: List[str] = field(default_factory=list)
    seconds: float = 0.0


def op_name(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def complex_ops(dtype):
    from torch.testing._internal.common_methods_invocations import op_db

    return [op for op in op_db if dtype in op.supported_dtypes("cpu")]


# --- one op -----------------------------------------------------------------


def _clone(x):
    import torch
    import torch.utils._pytree as pytree

    def one(t):
        if isinstance(t, torch.Tensor):
            c = t.detach().clone()
            c.requires_grad_(t.requires_grad)
            return c
        return t

    return pytree.tree_map(one, x)


def _detached(x):
    """A copy of the tensors in ``x`` (what they hold now), for comparing later."""
    import torch
    import torch.utils._pytree as pytree

    return pytree.tree_map(lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t, x)


def _equal(actual, expected) -> Optional[str]:
    """None when ``actual`` equals eager's ``expected``; else what differs."""
    import torch
    import torch.utils._pytree as pytree

    a_leaves, a_spec = pytree.tree_flatten(actual)
    e_leaves, e_spec = pytree.tree_flatten(expected)
    if a_spec != e_spec:
        return f"structure {a_spec} != {e_spec}"
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                return f"output {i}: {type(a).__name__} instead of a tensor"
            if a.dtype != e.dtype or a.shape != e.shape:
                return f"output {i}: {a.dtype}{tuple(a.shape)} != eager's {e.dtype}{tuple(e.shape)}"
            try:
                if e.dtype.is_floating_point or e.dtype.is_complex:
                    torch.testing.assert_close(a, e, equal_nan=True)
                elif not torch.equal(a, e):
                    return f"output {i}: values differ"
            except AssertionError as err:
                return f"output {i}: {str(err).strip().splitlines()[0]} " + " ".join(
                    ln.strip() for ln in str(err).splitlines()[1:4]
                )
        elif isinstance(e, float) and isinstance(a, float):
            if not (a == e or (math.isnan(a) and math.isnan(e)) or math.isclose(a, e, rel_tol=1e-5, abs_tol=1e-6)):
                return f"output {i}: {a} != {e}"
        elif a != e and not (isinstance(e, complex) and abs(complex(a) - e) <= 1e-5 * max(1.0, abs(e))):
            return f"output {i}: {a!r} != {e!r}"
    return None


def _loss_weights(out, gen):
    import torch
    import torch.utils._pytree as pytree

    return [
        torch.randn(t.shape, dtype=t.dtype, generator=gen) if isinstance(t, torch.Tensor) and (t.is_complex() or t.is_floating_point()) else None
        for t in pytree.tree_leaves(out)
    ]


def _loss(out, weights):
    import torch.utils._pytree as pytree

    total = None
    for t, w in zip(pytree.tree_leaves(out), weights):
        if w is None or not t.requires_grad:
            continue
        term = (t * w.conj()).real.sum() if t.is_complex() else (t * w).sum()
        total = term if total is None else total + term
    return total


def _grad_inputs(args):
    import torch
    import torch.utils._pytree as pytree

    return [t for t in pytree.tree_leaves(args) if isinstance(t, torch.Tensor) and t.requires_grad]


class _Sample:
    def __init__(self, op, sample, inplace=False):
        self.op = op.inplace_variant if inplace else op
        self.args = (sample.input,) + tuple(sample.args)
        self.kwargs = dict(sample.kwargs)

    def call(self, fn=None):
        args, kwargs = _clone(self.args), _clone(self.kwargs)
        return (fn or self.op)(*args, **kwargs), args, kwargs


#: how ptc's backend computes complex64 GEMMs (``--gemm``; passed to the worker processes)
_GEMM_ENV = "PTC_OPINFO_GEMM"


def _backend(mode):
    import ptc.complex as pc

    if mode == "stock":
        return "inductor", None
    b = pc.backend(gemm=os.environ.get(_GEMM_ENV, "auto"))
    return b, b


def _run_mode(mode, sample: _Sample, expected, backward: bool, grad_expected, weights, inputs_after):
    """(ran, equal, fused, error, fallbacks, why not fused) of one sample in one mode."""
    import torch
    from torch._dynamo.utils import counters
    from torch._inductor.utils import run_and_get_code

    import ptc.complex as pc

    torch._dynamo.reset()
    backend, ptc_backend = _backend(mode)
    op = sample.op

    def fn(*args, **kwargs):
        return op(*args, **kwargs)

    compiled = torch.compile(fn, backend=backend)
    def breaks_so_far():
        # a graph break, or a frame Dynamo ran eagerly because its backend raised one of the
        # exceptions it accepts for that (counted only under "unimplemented")
        return sum(counters["graph_break"].values()) + sum(counters["unimplemented"].values())

    breaks_before = breaks_so_far()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")

            def go():
                out, args, kwargs = sample.call(compiled)
                seen_inputs.append(_detached((args, kwargs)))
                if not backward:
                    return out, None
                loss = _loss(out, weights)
                inputs = _grad_inputs((args, kwargs))
                grads = torch.autograd.grad(loss, inputs, allow_unused=True) if loss is not None else ()
                return out, [g if g is not None else torch.zeros_like(i) for g, i in zip(grads, inputs)]

            seen_inputs = []
            (out, grads), codes = run_and_get_code(go)
    except Exception as e:  # noqa: BLE001 - any failure of the compiled program is this mode's result
        msg = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        return False, False, False, msg[:300], [], ""
    breaks = breaks_so_far() - breaks_before
    diff = _equal(grads, grad_expected) if backward else _equal(out, expected)
    if diff is None and _equal(seen_inputs[0], inputs_after) is not None:
        diff = "the inputs after the call differ from eager's: " + _equal(seen_inputs[0], inputs_after)
    fallbacks = pc.complex_fallbacks(codes)
    why = []
    if breaks:
        why.append(f"{breaks} graph break(s) or eager frame(s)")
    if fallbacks:
        why.append("ATen: " + ",".join(sorted(set(fallbacks))))
    notes = []
    if ptc_backend is not None:
        notes = list(ptc_backend.report.stock_graphs)
        # a library-bound graph runs on eager kernels: fused only if it is nothing but library calls
        if ptc_backend.report.library_graph_ops:
            why.append("library-bound graph with " + ",".join(sorted(ptc_backend.report.library_graph_ops)))
        if notes:
            why.append("compiled the stock way")
    return True, diff is None, not why, diff or "", notes, "; ".join(why)


def excluded_by_name(op) -> str:
    """Why an OpInfo is not counted, where that follows from what it is ("" when it is counted)."""
    name = op_name(op)
    if any(name == p or name.startswith(p + ".") or name.startswith(p + "_") for p in NONDETERMINISTIC) or getattr(
        op, "is_factory_function", False
    ):
        return "not a function of its inputs"
    if name.startswith("jiterator_"):
        return "a CUDA-only kernel"
    return ""


def _direction(backward: bool, inplace: bool) -> str:
    return "backward" if backward else "inplace" if inplace else "forward"


def run_op(op, *, samples: int, backward: bool, dtype, modes=MODES, inplace: bool = False) -> OpResult:
    import torch

    name = op_name(op)
    res = OpResult(name, _direction(backward, inplace))
    start = time.perf_counter()
    res.excluded = excluded_by_name(op)
    if res.excluded:
        return res
    if backward and not op.supports_autograd:
        res.excluded = "no autograd"
        return res
    if inplace and op.inplace_variant is None:
        res.excluded = "no in-place variant"
        return res
    torch.manual_seed(0)
    try:
        raw = list(op.sample_inputs("cpu", dtype, requires_grad=backward))
    except Exception as e:  # noqa: BLE001
        res.excluded = f"sample_inputs raised {type(e).__name__}"
        return res
    usable = []
    gen = torch.Generator().manual_seed(1)
    for s in raw:
        if len(usable) >= samples:
            break
        sample = _Sample(op, s, inplace)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out, args, kwargs = sample.call()
                inputs_after = _detached((args, kwargs))
                again, _, _ = sample.call()
                if _equal(again, out) is not None:
                    continue  # eager itself differs between two calls
                grads = weights = None
                if backward:
                    weights = _loss_weights(out, gen)
                    loss = _loss(out, weights)
                    if loss is None:
                        continue
                    inputs = _grad_inputs((args, kwargs))
                    grads = [
                        g if g is not None else torch.zeros_like(i)
                        for g, i in zip(torch.autograd.grad(loss, inputs, allow_unused=True), inputs)
                    ]
        except Exception:  # noqa: BLE001 - eager refuses this sample: not counted
            continue
        usable.append((sample, out, grads, weights, inputs_after))
    res.samples = len(usable)
    if not usable:
        res.excluded = "no sample eager runs"
        return res
    for mode in modes:
        ran = equal = fused = True
        for sample, out, grads, weights, inputs_after in usable:
            r, e, f, err, notes, why = _run_mode(mode, sample, out, backward, grads, weights, inputs_after)
            ran, equal, fused = ran and r, equal and e, fused and f
            if err and mode not in res.error:
                res.error[mode] = err
            if why and mode not in res.unfused:
                res.unfused[mode] = why
            if mode == "ptc":
                res.fallbacks += [n for n in notes if n not in res.fallbacks]
        res.ran[mode], res.equal[mode], res.fused[mode] = ran, ran and equal, ran and fused
    res.seconds = time.perf_counter() - start
    return res


# --- the run ----------------------------------------------------------------


def _worker(names: List[str], samples: int, backward: bool, dtype_name: str, inplace: bool = False) -> None:
    """Runs the named ops one by one, one JSON line per op on stdout (``start`` lines first)."""
    import torch

    torch.set_num_threads(1)
    dtype = getattr(torch, dtype_name)
    by_name = {op_name(op): op for op in complex_ops(dtype)}
    for name in names:
        print(json.dumps({"start": name}), flush=True)
        try:
            res = run_op(by_name[name], samples=samples, backward=backward, dtype=dtype, inplace=inplace)
        except Exception as e:  # noqa: BLE001 - a bug in the harness must not hide the other ops
            res = OpResult(name, _direction(backward, inplace), excluded=f"harness: {e!r}"[:200])
            traceback.print_exc(file=sys.stderr)
        print(json.dumps({"result": asdict(res)}), flush=True)


def run(names: List[str], *, samples=2, backward=False, dtype_name="complex64", jobs=1, op_timeout=600.0, log=None,
        inplace=False):
    """Every named op through both modes in ``jobs`` worker processes; a list of :class:`OpResult`."""
    import selectors

    results: Dict[str, OpResult] = {}
    direction = _direction(backward, inplace)
    # split the queue across workers round-robin so slow families spread out
    shards = [names[i::jobs] for i in range(jobs)]
    procs = []
    sel = selectors.DefaultSelector()

    def start(shard):
        if not shard:
            return
        cmd = [sys.executable, __file__, "--worker", "--samples", str(samples), "--dtype", dtype_name]
        if backward:
            cmd.append("--backward")
        if inplace:
            cmd.append("--inplace")
        p = subprocess.Popen(
            cmd + ["--ops", ",".join(shard)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        state = {"proc": p, "shard": list(shard), "current": None, "since": time.monotonic()}
        procs.append(state)
        sel.register(p.stdout, selectors.EVENT_READ, state)

    for shard in shards:
        start(shard)
    while procs:
        for key, _ in sel.select(timeout=5.0):
            state = key.data
            line = state["proc"].stdout.readline()
            if not line:
                sel.unregister(key.fileobj)
                state["proc"].wait()
                procs.remove(state)
                current = state["current"]
                if current is not None and current not in results:
                    results[current] = _crashed(current, direction, f"worker died (exit {state['proc'].returncode})")
                    if log:
                        log(results[current])
                rest = [n for n in state["shard"] if n not in results and n != current]
                start(rest)
                continue
            msg = json.loads(line)
            if "start" in msg:
                state["current"], state["since"] = msg["start"], time.monotonic()
            else:
                r = OpResult(**msg["result"])
                results[r.name] = r
                state["current"] = None
                if log:
                    log(r)
        for state in list(procs):
            if state["current"] is not None and time.monotonic() - state["since"] > op_timeout:
                state["proc"].kill()  # its EOF restarts the shard after the hung op
    return [results[n] for n in names if n in results]


def _crashed(name, direction, why):
    r = OpResult(name, direction)
    r.samples = 1
    for m in MODES:
        r.ran[m] = r.equal[m] = r.fused[m] = False
        r.error[m] = why
    return r


def summary(results: List[OpResult]) -> Dict[str, Dict[str, int]]:
    counted = [r for r in results if not r.excluded]
    table = {"ops": {"counted": len(counted), "excluded": len(results) - len(counted)}}
    for m in MODES:
        table[m] = {k: sum(1 for r in counted if getattr(r, k).get(m)) for k in ("ran", "equal", "fused")}
    return table


def worse_than_stock(results: List[OpResult]) -> List[str]:
    """Ops where ptc fails or is wrong while stock runs or is right."""
    bad = []
    for r in results:
        if r.excluded:
            continue
        if r.ran.get("stock") and not r.ran.get("ptc"):
            bad.append(f"{r.name}: ptc fails where stock runs ({r.error.get('ptc', '')})")
        elif r.equal.get("stock") and not r.equal.get("ptc"):
            bad.append(f"{r.name}: ptc wrong where stock is right ({r.error.get('ptc', '')})")
    return bad


def wrong(results: List[OpResult], mode: str) -> List[str]:
    return [f"{r.name}: {r.error.get(mode, '')}" for r in results if not r.excluded and r.ran.get(mode) and not r.equal.get(mode)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", default="complex64", choices=["complex64", "complex128"])
    p.add_argument("--samples", type=int, default=2)
    p.add_argument("--backward", action="store_true")
    p.add_argument("--inplace", action="store_true", help="the OpInfos' in-place variants (x.add_(y))")
    p.add_argument("--ops", default="", help="comma-separated OpInfo names (default: all)")
    p.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 1)))
    p.add_argument("--json", default="", help="write every op's result here")
    p.add_argument("--gemm", default="auto", choices=["auto", "onednn", "aten"],
                   help="ptc's gemm option (onednn: every complex64 mm/addmm of a static shape as a real GEMM)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.backward and a.inplace:
        p.error("--backward and --inplace: one direction at a time")
    os.environ[_GEMM_ENV] = a.gemm
    if a.worker:
        _worker([n for n in a.ops.split(",") if n], a.samples, a.backward, a.dtype, a.inplace)
        return 0
    import torch

    names = [op_name(op) for op in complex_ops(getattr(torch, a.dtype))]
    if a.ops:
        wanted = set(a.ops.split(","))
        names = [n for n in names if n in wanted]
    started = time.perf_counter()

    def log(r: OpResult):
        if r.excluded:
            return
        marks = " ".join(f"{m}:{'R' if r.ran.get(m) else '-'}{'E' if r.equal.get(m) else '-'}{'F' if r.fused.get(m) else '-'}" for m in MODES)
        print(f"{r.name:40s} {marks} {r.seconds:6.1f}s  {r.error.get('ptc', '')[:90]}", flush=True)

    results = run(names, samples=a.samples, backward=a.backward, dtype_name=a.dtype, jobs=a.jobs, log=log,
                  inplace=a.inplace)
    table = summary(results)
    direction = _direction(a.backward, a.inplace)
    n = table["ops"]["counted"]
    print(f"\ntorch {torch.__version__}, {a.dtype}, {direction}, {a.samples} sample(s) per op, "
          f"{n} ops counted ({table['ops']['excluded']} excluded), {time.perf_counter() - started:.0f} s")
    print("| | compiled and ran | equal to eager | fully fused |\n|---|---|---|---|")
    for m in MODES:
        print(f"| {m} | {table[m]['ran']} / {n} | {table[m]['equal']} / {n} | {table[m]['fused']} / {n} |")
    for m in MODES:
        w = wrong(results, m)
        if w:
            print(f"\nwrong under {m}:\n  " + "\n  ".join(w))
    worse = worse_than_stock(results)
    print("\nptc worse than stock:" + ("\n  " + "\n  ".join(worse) if worse else " none"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "dtype": a.dtype, "direction": direction, "table": table,
                       "results": [asdict(r) for r in results]}, f, indent=1)
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
