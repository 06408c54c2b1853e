"""ptc.gemm on a GPU: correctness of every candidate kind, then LLM-shaped GEMMs side by side.

    python benchmarks/gemm.py OUT_DIR [--budget-s 420] [--dry-run] [--target B200]

Writes OUT_DIR/results.json, OUT_DIR/results.md and OUT_DIR/log.txt. Under 8
minutes on one Hopper/Blackwell GPU: every Inductor compile is bounded by the
time budget and skipped cases are marked, never silently dropped.

1. Correctness (ptc's runtime launching each selected kernel, vs torch.matmul in
   fp32): plain mm candidates (twice: the second time with new tensors, through
   the rebound arguments), bmm, addmm (bias EFC), fused epilogues
   (bias+relu, bias+silu, bias+gelu_tanh+residual), FP8 with row scales fused
   as an epilogue (Blackwell), MXFP8 and NVFP4 with block scales (Blackwell; vs
   ``torch._scaled_mm``, i.e. cuBLAS, instead of torch.matmul).
2. Benchmark: bf16 GEMMs, M in (1, 16, 128, 4096), (N, K) in ((4096, 4096),
   (14336, 4096), (4096, 14336)), without and with a ``bias,silu`` epilogue.
   Per case (CUDA events around 10 calls issued back to back, median of 50 such
   samples after warm-up; host time shows where it exceeds GPU time):

   - ``aten``: eager ``x @ w.t()`` (plus the eager epilogue): cuBLAS.
   - ``ptc``: ``torch.compile(mode="max-autotune-no-cudagraphs")`` inside
     ``ptc.gemm.enable()``: ptc's CuTeDSL candidates, ATen and Triton compete in
     Inductor, epilogues fused where the target has kernels for them. What a
     user gets; the goal is measured on this column.
   - ``ptc direct``: the fastest of ATen and every selected CuTeDSL kernel, each
     called through ptc's runtime (host time included where it exceeds the
     kernel's; fused EFC kernels for the epilogue cases, kept only if they beat
     ATen's GEMM alone).
   - ``best CuTeDSL``: the fastest CuTeDSL kernel, kept or not, with the host
     time its call takes to issue (``cutedsl_host_us``: a slow launch path shows
     here, not in the kernel).
   - ``inductor``: ``torch.compile(mode="max-autotune-no-cudagraphs")`` (ATen + Triton).
   - ``nvgemm``: the same with torch's own NVGEMM backend, where this torch has it.
   - ``ptc graphed`` / ``inductor graphed``: the same compiled calls captured in a
     CUDA graph and replayed, against eager ATen captured the same way: the picked
     kernels alone, without the per-call host code a one-GEMM compiled function
     pays (Dynamo's guards, Inductor's wrapper: tens of microseconds, more than a
     whole M = 1 GEMM takes on an H200).

   Compiles run while ``--budget-s`` lasts (ptc's first in each case, epilogue
   cases first); a case whose ``ptc`` compile was skipped leaves the goal
   "not measured".

   Ratios are ``aten_time / time`` (> 1 is faster than cuBLAS). Goal: geometric
   mean of ``ptc`` >= 1.0x on the epilogue cases, and no ``ptc`` ratio below 0.98;
   judged on the per-call times (the exit status) and, reported beside it, on the
   graphed ones.

Needs nothing beyond torch and, for the ptc columns, nvidia-cutlass-dsl +
nvidia-cutlass-operators (``pip install 'ptc[gemm]'``); without them the ptc
columns say so and the rest still runs. ``--dry-run`` plans every case on the
CPU (no GPU) and writes the plan, then runs the benchmark's own code on one small
case on the CPU (every column, host-clock timer; CuTeDSL kernels cannot launch
there, so they score inf and ATen is kept): what a GPU run would execute,
checked before a GPU is spent on it.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ptc import _compat  # noqa: E402

MS = (1, 16, 128, 4096)
NK = ((4096, 4096), (14336, 4096), (4096, 14336))
EPILOGUES = ("bias,silu", "")  # the epilogue cases first: they carry the goal
SMOKE = ((16, 64, 64, "bias,silu"),)  # --dry-run's CPU case


class Log:
    def __init__(self, path: Path):
        self.f = path.open("w")

    def __call__(self, *parts):
        line = " ".join(str(p) for p in parts)
        print(line, flush=True)
        self.f.write(line + "\n")
        self.f.flush()


def cases():
    return [(m, n, k, epi) for epi in EPILOGUES for m in MS for n, k in NK]


def time_cuda(fn, reps=50, warmup=5, inner=10) -> float:
    """Milliseconds per ``fn()``: the median over ``reps`` samples, each ``inner`` calls issued back
    to back between two CUDA events (as Inductor's own benchmarking does). Calls queue behind each
    other, so a call's host time shows only where it exceeds its GPU time (a lone call, timed
    alone, would leave the GPU idle while the host issues it and charge that to every column)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(inner):
            fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / inner)
    return statistics.median(times)


def reference(x, w, b, epi):
    y = x @ w.t()
    if epi:
        y = F.silu(y + b)
    return y


def plan_all(target, log):
    import ptc.gemm as gemm

    plans = {}
    for m, n, k, epi in cases():
        p = gemm.plan(gemm.GemmProblem("mm", m, n, k), target, epi or None)
        key = f"m{m}n{n}k{k}" + (f"+{epi}" if epi else "")
        plans[key] = p
        log(f"plan {key:28} {p.considered:4} kernels -> {len(p.selected)} selected; "
            f"epilogue: {p.fusion.describe() if epi else '-'}")
    return plans


def correctness(target, log):
    import ptc.gemm as gemm
    from ptc.gemm import blockscale, runtime

    results = []
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)

    def check(kind, problem, epi, run, want):
        p = gemm.plan(problem, target, epi)
        if epi and not p.fusion.fused:
            results.append({"kind": kind, "status": "not fused", "note": p.fusion.reason})
            log(f"correctness {kind:28} not fused on {target.name}: {p.fusion.reason}")
            return
        if not p.selected:
            results.append({"kind": kind, "status": "no candidates", "note": p.note or p.fusion.reason})
            log(f"correctness {kind:28} no candidates: {p.note or p.fusion.reason}")
            return
        for c in p.selected:
            try:
                got = run(c, p)
                torch.cuda.synchronize()
                err = ((got.float() - want).abs().max() / want.abs().max().clamp_min(1e-6)).item()
                ok = err < 2e-2
                results.append({"kind": kind, "candidate": c.label, "rel_err": err, "status": "ok" if ok else "WRONG"})
            except Exception as e:  # noqa: BLE001 - a failing kernel is a result
                results.append({"kind": kind, "candidate": c.label, "status": f"error: {type(e).__name__}: {e}"[:300]})
        bad = [r for r in results if r["kind"] == kind and r["status"] != "ok"]
        log(f"correctness {kind:28} {len(p.selected) - len(bad)}/{len(p.selected)} ok")

    m, n, k = 256, 384, 512
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16, generator=g)
    w = torch.randn(n, k, device=dev, dtype=torch.bfloat16, generator=g)
    bias = torch.randn(n, device=dev, dtype=torch.bfloat16, generator=g)
    res = torch.randn(m, n, device=dev, dtype=torch.bfloat16, generator=g)
    acc = a.float() @ w.float().t()

    def out():
        return torch.empty(m, n, device=dev, dtype=torch.bfloat16)

    check("mm", gemm.GemmProblem("mm", m, n, k), None,
          lambda c, p: runtime.ptc_nvgemm_mm(a, w.t(), out=out(), operator=c.name, arch=target.arch), acc)
    # the same shapes again with new tensors: runs through the rebound (cached) arguments
    a2 = torch.randn(m, k, device=dev, dtype=torch.bfloat16, generator=g)
    w2 = torch.randn(n, k, device=dev, dtype=torch.bfloat16, generator=g)
    check("mm, arguments rebound", gemm.GemmProblem("mm", m, n, k), None,
          lambda c, p: runtime.ptc_nvgemm_mm(a2, w2.t(), out=out(), operator=c.name, arch=target.arch),
          a2.float() @ w2.float().t())
    ab = torch.randn(4, m, k, device=dev, dtype=torch.bfloat16, generator=g)
    wb = torch.randn(4, n, k, device=dev, dtype=torch.bfloat16, generator=g)
    check("bmm", gemm.GemmProblem("bmm", m, n, k, batch=4), None,
          lambda c, p: runtime.ptc_nvgemm_bmm(ab, wb.transpose(1, 2), out=torch.empty(4, m, n, device=dev, dtype=torch.bfloat16),
                                              operator=c.name, arch=target.arch),
          ab.float() @ wb.float().transpose(1, 2))
    for spec in ("bias", "bias,relu", "bias,silu", "bias,gelu_tanh,residual"):
        epi = gemm.Epilogue.parse(spec)
        want = epi.apply(acc, torch.float32, bias=bias, residual=res)
        names = ",".join(epi.operand_names())
        ops = [{"bias": bias, "residual": res}[nm] for nm in epi.operand_names()]
        check(f"fused {spec}", gemm.GemmProblem("mm", m, n, k), spec,
              lambda c, p, ops=ops, names=names: runtime.ptc_nvgemm_fused(
                  a, w.t(), *ops, out=out(), operator=c.name, arch=target.arch, source=p.fusion.source, names=names),
              want)
    if target.family == "blackwell":
        a8, w8 = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
        sa = torch.rand(m, 1, device=dev, generator=g).t().contiguous().t()  # (M, 1) column-major
        sb = torch.rand(n, device=dev, generator=g)
        want = (a8.float() @ w8.float().t()) * sa * sb
        check("fp8 rowscale (fused dequant)", gemm.GemmProblem("scaled_mm", m, n, k, a_dtype="e4m3", b_dtype="e4m3", scale="row"),
              "rowscale", lambda c, p: runtime.ptc_nvgemm_fused(
                  a8, w8.t(), sa, sb, out=out(), operator=c.name, arch=target.arch, source=p.fusion.source,
                  names="scale_a,scale_b"), want)
        for scale, dt, kind in (("block32", "e4m3", "mxfp8 (block scales)"), ("block16", "e2m1x2", "nvfp4 (block scales)")):
            qa, qb, s_a, s_b = blockscale.random_operands(scale, m, n, k, device=dev, generator=g)
            want = torch._scaled_mm(qa, qb, s_a, s_b, out_dtype=torch.bfloat16).float()  # cuBLAS defines it
            check(kind, gemm.GemmProblem("scaled_mm", m, n, k, a_dtype=dt, b_dtype=dt, scale=scale), None,
                  lambda c, p, qa=qa, qb=qb, s_a=s_a, s_b=s_b: runtime.ptc_nvgemm_block_scaled_mm(
                      qa, qb, s_a, s_b, out=out(), operator=c.name, arch=target.arch), want)
    return results


def time_cpu(fn, reps=5, warmup=1) -> float:
    """Median milliseconds of ``fn()`` on the host clock (the ``--dry-run`` smoke run on a CPU)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000.0)
    return statistics.median(times)


def cuda_graphed(fn):
    """``fn`` captured once in a CUDA graph; returns its replay: the kernels alone, none of ``fn``'s
    host code (Dynamo's guards, Inductor's wrapper, ptc's launch path) runs again. Three warm-up
    calls on a side stream first, as torch's CUDA-graph recipe asks."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def uncaptured(fn):
    """Stands in for :func:`cuda_graphed` on a CPU (the ``--dry-run``): ``fn`` itself."""
    return fn


def graphed_time(fn, timer, graph):
    """``(ms per replay of fn's captured kernels, None)``, or ``(None, why not)``."""
    try:
        return timer(graph(fn)), None
    except Exception as e:  # noqa: BLE001 - a capture that fails is a result, not a crash
        return None, f"capture failed: {type(e).__name__}: {e}"[:200]


def benchmark(target, log, budget_s, have_ptc, *, shapes=None, dev="cuda", timer=time_cuda, graph=cuda_graphed):
    """One row per case (epilogue cases first: they carry the goal). Inductor compiles run
    while the budget lasts, ptc's first, then Inductor's own, then torch's NVGEMM."""
    start = time.perf_counter()
    rows = []
    for m, n, k, epi in shapes or cases():
        key = f"m{m}n{n}k{k}" + (f"+{epi}" if epi else "")
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(n, device=dev, dtype=torch.bfloat16)
        f = (lambda x, w, b: reference(x, w, b, epi))
        row = {"case": key, "m": m, "n": n, "k": k, "epilogue": epi}
        row["aten"] = timer(lambda: f(x, w, b))
        row["aten_graphed"], row["aten_graphed_note"] = graphed_time(lambda: f(x, w, b), timer, graph)
        aten_gemm = timer(lambda: x @ w.t()) if epi else row["aten"]
        if have_ptc:
            row.update(ptc_pick(target, x, w, b, epi, row["aten"], aten_gemm, timer))
        for mode in ("ptc", "inductor", "nvgemm"):
            if mode == "ptc" and not have_ptc:
                row[mode], row["ptc_note"] = None, "cutlass packages absent"
            elif mode == "nvgemm" and not _compat.NATIVE_NVGEMM:
                row[mode], row["nvgemm_note"] = None, "not available in this torch/install"
            elif time.perf_counter() - start > budget_s or budget_s <= 0:
                row[mode], row[f"{mode}_note"] = None, "skipped: time budget"
            else:
                try:
                    row[mode], graphed, choice = compiled_time(mode, f, (x, w, b), target, timer, graph)
                    row[f"{mode}_graphed"], row[f"{mode}_graphed_note"] = graphed
                    if choice:
                        row[f"{mode}_choice"] = choice
                except Exception as e:  # noqa: BLE001
                    row[mode], row[f"{mode}_note"] = None, f"error: {type(e).__name__}: {e}"[:200]
        rows.append(row)
        ratios = {c: row["aten"] / row[c] for c in ("ptc", "ptc_direct", "cutedsl_best", "inductor", "nvgemm") if row.get(c)}
        ratios.update({c: row["aten_graphed"] / row[c] for c in ("ptc_graphed", "inductor_graphed")
                       if row.get(c) and row.get("aten_graphed")})
        log(f"bench {key:28} aten {row['aten']*1000:8.1f} us  " + "  ".join(f"{c} {r:5.2f}x" for c, r in ratios.items())
            + (f"  (best CuTeDSL call: {row['cutedsl_host_us']:.1f} us of host time)" if row.get("cutedsl_host_us") else "")
            + (f"  [ptc: {row.get('ptc_choice') or row.get('ptc_note')}]" if have_ptc else ""))
    return rows


def compiled_time(mode, f, args, target, timer, graph=uncaptured):
    """``torch.compile(f, mode="max-autotune-no-cudagraphs")``, timed per call and as a captured
    graph (:func:`graphed_time`); returns (ms, (graphed ms, why not), what was picked).

    ``ptc``: inside ``ptc.gemm.enable(target=...)`` (CuTeDSL candidates, ATen and Triton compete,
    epilogues fused where the target allows), timed while the session is active; the pick is
    each autotuned op's winner (or why it got no ptc candidate). ``inductor``: ATen + Triton.
    ``nvgemm``: ATen + Triton + torch's own NVGEMM. Every mode autotunes afresh (caches off)."""
    import torch._inductor.config as ic

    torch._dynamo.reset()
    if mode == "ptc":
        import ptc.gemm as gemm

        # caches off: a cached graph would skip autotuning, and with it the record of the picks
        with ic.patch(force_disable_caches=True), gemm.enable(target=target, device_types=(args[0].device.type,)) as s:
            g = torch.compile(f, mode="max-autotune-no-cudagraphs")
            g(*args)
            ms = timer(lambda: g(*args))
            graphed = graphed_time(lambda: g(*args), timer, graph)
        picks = [f"{r.op}: {r.inductor_winner}" if r.inductor_winner else f"{r.op}: {r.note or 'no timings'}"
                 for r in s.reports]
        return ms, graphed, "; ".join(picks)[:300]
    backends = "ATEN,TRITON,NVGEMM" if mode == "nvgemm" else "ATEN,TRITON"
    with ic.patch(max_autotune_gemm_backends=backends, force_disable_caches=True):
        g = torch.compile(f, mode="max-autotune-no-cudagraphs")
        g(*args)
    return timer(lambda: g(*args)), graphed_time(lambda: g(*args), timer, graph), None


def ptc_pick(target, x, w, b, epi, aten_total, aten_gemm, timer=time_cuda) -> dict:
    """Time every selected CuTeDSL kernel called directly (through ptc's runtime, as a compiled
    graph calls it). Returns the row's ``ptc_direct`` (what ptc's autotuner would keep from these times) and
    ``cutedsl_best`` columns, and ``cutedsl_host_us``: the host time the fastest kernel's call takes
    to issue (launches are asynchronous), which tells a slow kernel from a slow launch path."""
    import ptc.gemm as gemm
    from ptc.gemm import runtime

    m, k = x.shape
    n = w.shape[0]
    p = gemm.plan(gemm.GemmProblem("mm", m, n, k), target, epi or None)
    out = torch.empty(m, n, device=x.device, dtype=x.dtype)
    best, best_name, best_fn = math.inf, None, None
    op_of = {c.label: c.name for c in p.selected}
    for c in p.selected:
        if epi and p.fusion.fused:
            fn = (lambda c=c: runtime.ptc_nvgemm_fused(x, w.t(), b, out=out, operator=c.name, arch=target.arch,
                                                      source=p.fusion.source, names="bias"))
        elif epi:
            continue
        else:
            fn = (lambda c=c: runtime.ptc_nvgemm_mm(x, w.t(), out=out, operator=c.name, arch=target.arch))
        try:
            t = timer(fn, reps=20, warmup=2)
        except Exception:  # noqa: BLE001 - scored inf, exactly as in the autotuner
            t = math.inf
        if t < best:
            best, best_name, best_fn = t, c.label, fn
    row = {"cutedsl_best": best if math.isfinite(best) else None, "cutedsl_best_label": best_name,
           "cutedsl_host_us": host_us(best_fn, x.device) if best_fn is not None else None,
           # whether its calls went straight to the compiled function (runtime.DirectCall)
           "cutedsl_direct": any(k[0] == op_of.get(best_name) and d.checked for k, d in runtime._direct.items())}
    # fused kernels compete against ATen's GEMM alone (else the chain runs unfused); plain ones against ATen
    if best < (aten_gemm if epi else aten_total):
        row["ptc_direct"], row["ptc_direct_choice"] = best, best_name
    else:
        row["ptc_direct"], row["ptc_direct_choice"] = aten_total, "aten+epilogue" if epi else "aten"
    return row


def host_us(fn, device, calls=20) -> float:
    """Microseconds of host time per call of ``fn``, calls issued back to back, then synchronised."""
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - t) / calls * 1e6
    if device.type == "cuda":
        torch.cuda.synchronize()
    return host


def goal_of(rows, col="ptc", base="aten"):
    """The goal on ``base / col`` ratios: (per-epilogue geomean/min/how many measured, every case
    measured, met: epilogue geomean >= 1.0 and every ratio >= 0.98)."""
    goal = {}
    for epi in EPILOGUES:
        mine = [r for r in rows if r["epilogue"] == epi]
        rs = [r[base] / r[col] for r in mine if r.get(col) and r.get(base)]
        if rs:
            goal[epi or "plain"] = {"geomean": math.exp(sum(map(math.log, rs)) / len(rs)), "min": min(rs),
                                    "measured": f"{len(rs)} of {len(mine)}"}
    complete = all(r.get(col) and r.get(base) for r in rows)
    ok = (complete and goal.get("bias,silu", {}).get("geomean", 0) >= 1.0
          and all(g["min"] >= 0.98 for g in goal.values()))
    return goal, complete, ok


def summarize(rows, results, out: Path, meta):
    lines = ["# ptc.gemm GPU benchmark", "", *[f"- {k}: {v}" for k, v in meta.items()], ""]
    bad = [r for r in results if r.get("status") not in ("ok", "no candidates", "not fused")]
    lines += [f"correctness: {sum(r.get('status') == 'ok' for r in results)} ok, {len(bad)} failing", ""]
    lines += ["| case | aten us | ptc | ptc direct | best CuTeDSL | inductor | nvgemm | ptc graphed | inductor graphed "
              "| ptc picked |", "|---|---|---|---|---|---|---|---|---|---|"]

    def ratio(row, col, base="aten"):
        v, b = row.get(col), row.get(base)
        return f"{b / v:.3f}x" if v and b else (row.get(f"{col}_note") or row.get(f"{base}_note") or "n/a")

    def host(row):
        us = row.get("cutedsl_host_us")
        return f" (call issued in {us:.0f} us{', direct' if row.get('cutedsl_direct') else ''})" if us else ""

    for row in rows:
        lines.append(f"| {row['case']} | {row['aten']*1000:.1f} | {ratio(row, 'ptc')} | {ratio(row, 'ptc_direct')} | "
                     f"{ratio(row, 'cutedsl_best')}{host(row)} | {ratio(row, 'inductor')} | {ratio(row, 'nvgemm')} | "
                     f"{ratio(row, 'ptc_graphed', 'aten_graphed')} | {ratio(row, 'inductor_graphed', 'aten_graphed')} | "
                     f"{row.get('ptc_choice') or row.get('ptc_direct_choice', '-')} |")
    verdicts = {}
    for what, col, base in (("per call", "ptc", "aten"), ("graphed", "ptc_graphed", "aten_graphed")):
        goal, complete, ok = goal_of(rows, col, base)
        verdicts[what] = {"goal": goal, "met": ok}
        verdict = "MET" if ok else ("NOT MET" if complete else "NOT MEASURED on every case (see 'measured')")
        lines += ["", f"goal, {what} (ptc compiled vs aten: epilogue geomean >= 1.0x, every ratio >= 0.98x): "
                      f"{verdict} {goal}"]
    lines += ["", "per call: each call's host code runs (Dynamo's guards, Inductor's wrapper, ptc's launch): "
                  "what a one-GEMM compiled function costs; graphed: the same calls captured in a CUDA graph "
                  "and replayed (the kernels alone: the picks, without any host time)."]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    (out / "results.json").write_text(json.dumps({"meta": meta, "correctness": results, "bench": rows,
                                                  "goal": verdicts["per call"]["goal"], "goal_met": verdicts["per call"]["met"],
                                                  "goal_graphed": verdicts["graphed"]["goal"],
                                                  "goal_graphed_met": verdicts["graphed"]["met"]}, indent=1))
    print("\n".join(lines))
    return verdicts["per call"]["met"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="directory for results.json, results.md, log.txt")
    parser.add_argument("--budget-s", type=float, default=360.0, help="time for the Inductor compiles (0: none)")
    parser.add_argument("--dry-run", action="store_true", help="plan every case on the CPU; no GPU work")
    parser.add_argument("--target", default=None, help="GPU to plan for (default: detected; B200 in --dry-run)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out / "log.txt")
    have_ptc = bool(_compat.CUTLASS_OPERATORS)
    gpu = torch.cuda.is_available()
    meta = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name() if gpu else "none",
            "cutlass": "installed" if have_ptc else "ABSENT: ptc columns skipped (pip install 'ptc[gemm]')"}
    log("ptc.gemm benchmark:", meta)
    from ptc.gemm.targets import detect, target as named

    tgt = named(args.target) if args.target else (detect(torch.cuda.get_device_name(), torch.cuda.get_device_capability())
                                                    if gpu else named("B200"))
    if tgt is None:
        log("this GPU is older than Hopper: ptc.gemm plans for sm_90a/sm_100a only")
        have_ptc = False
    meta["target"] = tgt.name if tgt else "none"
    if args.dry_run:
        if not have_ptc:
            log("dry run: cutlass packages absent; nothing to plan")
            return 0
        plans = plan_all(tgt, log)
        (out / "plan.json").write_text(json.dumps({k: [c.name for c in p.selected] for k, p in plans.items()}, indent=1))
        rows = benchmark(tgt, log, math.inf, have_ptc, shapes=SMOKE, dev="cpu", timer=time_cpu, graph=uncaptured)
        summarize(rows, [], out, {**meta, "dry run": "one small case on the CPU, host clock"})
        log(f"dry run: {len(plans)} cases planned for {tgt.name}; would check "
            "mm, bmm, 4 fused epilogues" + (", fp8 rowscale" if tgt.family == "blackwell" else "")
            + " and benchmark aten/ptc/inductor" + ("/nvgemm" if _compat.NATIVE_NVGEMM else ""))
        return 0
    if not gpu:
        log("no CUDA GPU: run with --dry-run on a CPU machine")
        return 2
    results = []
    if have_ptc:
        try:
            results = correctness(tgt, log)
        except Exception:  # noqa: BLE001
            log("correctness stage crashed:\n" + traceback.format_exc())
    rows = benchmark(tgt, log, args.budget_s, have_ptc)
    ok = summarize(rows, results, out, meta)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
