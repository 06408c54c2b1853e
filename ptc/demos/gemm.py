"""``ptc demo gemm``: plan CuTeDSL GEMMs for named GPUs, decide epilogue fusion, pick winners with a DB (CPU only)."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path


def main() -> None:
    from ptc import _compat
    from ptc.gemm import AutotuneDB, GemmProblem, Key, check_fusible, explain, pick, plan

    if not _compat.CUTLASS_OPERATORS:
        print("ptc.gemm needs nvidia-cutlass-operators for planning: pip install 'ptc[gemm]'")
        return
    problem = GemmProblem("mm", 16, 14336, 4096)  # a decode-step MLP up-projection
    print(f"1. candidates for {problem.signature()} (planned on this CPU, no GPU needed)")
    for tgt in ("H100_SXM", "B200"):
        p = plan(problem, tgt, max_candidates=4)
        rules = Counter(reason.split(":")[0] for _, reason in p.dropped)
        print(f"   {tgt}: {p.considered} compatible kernels -> {len(p.selected)} selected; dropped: "
              + ", ".join(f"{n} {r}" for r, n in sorted(rules.items())))
        for c in p.selected:
            print(f"      {c.label:34} est {c.estimate_us:6.1f} us")

    print("\n2. epilogue fusibility (checked against cutlass.operators before any code is generated)")
    for spec in ("bias,relu", "bias,silu", "bias,gelu_tanh,residual", "bias,gelu", "relu,amax"):
        for tgt in ("B200", "H100_SXM"):
            d = check_fusible(spec, problem, tgt)
            verdict = "fuse" if d.fused else "fall back: " + d.reason
            print(f"   {spec:24} {tgt:9} {verdict[:110]}")

    print("\n3. choosing with measured times (here: injected), a 2% tie band and a shared database")
    first, second = ("ptc_nvgemm_" + c.label.replace(" ", "_") for c in p.selected[:2])
    measured = {
        "mm": 41.0,  # ATen (cuBLAS)
        "triton_mm_3": 44.2,
        first: 40.6,  # 1% faster than ATen: a tie, ATen is kept
        second: float("inf"),  # failed to compile or launch
    }
    print(f"   {measured}\n   -> pick: {pick(measured)} (faster by < 2% is a tie; ATen wins ties)")
    measured[first] = 33.0
    print(f"   with {first} at 33.0 us -> pick: {pick(measured)}")
    with tempfile.TemporaryDirectory() as d:
        db = AutotuneDB(Path(d) / "gemm_autotune.json")
        key = Key("B200", "2.14.1", "4.8.1", "mm", problem.signature())
        db.record(key, measured)
        path = db.save()
        again = AutotuneDB(path)
        print(f"   saved {path.name}: {len(again)} entry, winner {again.winner(key)} (a file to commit and share)")
        text = explain(problem, "B200", db=again, gpu="B200", max_candidates=4, show_dropped=2)
    print("\n4. ptc gemm explain (with those measurements):")
    for line in text.splitlines():
        print("   " + line)
