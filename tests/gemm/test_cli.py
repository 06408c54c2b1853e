"""`ptc gemm explain` and `ptc demo gemm` as a user runs them (in-process)."""

import pytest
import torch

from ptc import cli
from ptc.gemm import AutotuneDB, Key, plan, GemmProblem

from .conftest import needs_ops

pytestmark = needs_ops


def test_explain_lists_candidates_reasons_and_fusion(capsys):
    assert cli.main(["gemm", "explain", "--target", "B200", "-m", "128", "-n", "4096", "-k", "4096",
                     "--epilogue", "bias,gelu"]) == 0
    out = capsys.readouterr().out
    assert "problem  mm:bf16xbf16->bf16:m128n4096k4096:tn   target B200" in out
    assert "not fused: exact GELU needs erf" in out
    assert "rank  candidate" in out and "dropped:" in out


def test_explain_without_all_says_how_many_more_and_how_to_list_them(capsys):
    assert cli.main(["gemm", "explain", "--target", "B200", "-m", "128", "-n", "4096", "-k", "4096"]) == 0
    out = capsys.readouterr().out
    dropped = int(out.split(" selected, ")[1].split(" dropped")[0])
    rows = [ln for ln in out.splitlines() if ln.startswith("    t")]
    last = out.rstrip().splitlines()[-1]
    assert len(rows) == 12 and last.startswith(f"    ... {dropped - 12} more (")
    assert last.endswith("; `ptc gemm explain --all` (show_dropped=None) lists them")


def test_explain_all_lists_every_kernel(capsys):
    assert cli.main(["gemm", "explain", "--target", "H100", "-m", "64", "-n", "256", "-k", "256", "--all"]) == 0
    out = capsys.readouterr().out
    considered = int(out.split("kernels  ")[1].split(" compatible")[0])
    rows = [ln for ln in out.splitlines() if ln.startswith("    t") or ln.lstrip()[:1].isdigit()]
    assert len(rows) == considered and "more (" not in out


def test_explain_shows_measured_times_and_winner_from_a_db(tmp_path, capsys):
    problem = GemmProblem("mm", 16, 4096, 4096)
    best = "ptc_nvgemm_" + plan(problem, "B200").selected[0].label.replace(" ", "_")
    db = AutotuneDB(tmp_path / "db.json")
    db.record(Key("B200", "t", "d", "mm", problem.signature()), {"mm": 20.0, best: 15.0})
    db.save()
    assert cli.main(["gemm", "explain", "--signature", problem.signature(), "--db", str(tmp_path / "db.json")]) == 0
    out = capsys.readouterr().out
    assert f"{best}" in out and "15.0  <- winner" in out and f"database winner: {best}" in out


def test_explain_finds_measurements_taken_on_a_gpu_that_is_the_target(tmp_path, capsys):
    """enable() records the device's own name (and the fused epilogue); explain --target matches it."""
    problem = GemmProblem("mm", 16, 4096, 4096)
    db = AutotuneDB(tmp_path / "db.json")
    db.record(Key("NVIDIA B200", "t", "d", "mm+epilogue", problem.signature() + ":epi=bias,relu"),
              {"ptc_reference_mm": 20.0, "ptc_nvgemm_x": 15.0})
    db.save()
    argv = ["gemm", "explain", "--signature", problem.signature(), "--db", str(tmp_path / "db.json")]
    assert cli.main(argv + ["--epilogue", "bias,relu"]) == 0
    assert "database winner: ptc_nvgemm_x" in capsys.readouterr().out
    assert cli.main(argv + ["--target", "H100"]) == 0
    assert "database: no measurement for this problem on H100_SXM" in capsys.readouterr().out


def test_explain_with_a_missing_db_is_an_error(tmp_path, capsys):
    missing = tmp_path / "gemm_autotune.json"
    assert cli.main(["gemm", "explain", "-m", "16", "-n", "64", "-k", "64", "--db", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"db (--db) names {str(missing)!r}, which does not exist" in err
    assert "ptc.gemm.enable(db=...) writes one" in err and not missing.exists()


DOC = "docs/gemm.md"  # ptc.gemm's reference: its examples and commands, run as written


def _doc_text():
    from pathlib import Path

    return (Path(__file__).resolve().parents[2] / DOC).read_text()


def _doc_python_block():
    """The doc's first ```python block: the GPU example (marked to run only where CUDA is)."""
    import re

    return re.search(r"```python[^\n]*\n(.*?)```", _doc_text(), re.S).group(1)


def test_doc_explain_commands_run_as_written(tmp_path, monkeypatch, capsys):
    import shlex

    commands = [ln for ln in _doc_text().splitlines() if ln.startswith("ptc gemm explain")]
    monkeypatch.chdir(tmp_path)
    db = AutotuneDB("gemm_autotune.json")
    db.record(Key("H100_SXM", "t", "d", "mm", GemmProblem("mm", 128, 4096, 4096).signature()), {"mm": 20.0})
    db.save()
    for command in commands:
        assert cli.main(shlex.split(command)[1:]) == 0, command
    assert len(commands) == 2 and "database winner: mm" in capsys.readouterr().out


def test_doc_gpu_example_without_a_gpu_is_feature_unavailable(monkeypatch, tmp_path):
    """docs/gemm.md's enable() example, where no CUDA device is available: FeatureUnavailable
    (a RuntimeError) naming what is missing, before any CUDA tensor is made."""
    import ptc
    from ptc import _compat

    monkeypatch.setattr(_compat, "CUDA_AVAILABLE", False, raising=False)
    monkeypatch.chdir(tmp_path)
    code = _doc_python_block()
    assert "ptc.gemm.enable(" in code and 'device="cuda"' in code
    with pytest.raises(ptc.FeatureUnavailable) as info:
        exec(compile(code, DOC, "exec"), {})
    assert isinstance(info.value, RuntimeError) and info.value.requirement in ("CUDA_BUILD", "CUDA_AVAILABLE")
    assert ("CPU-only build" in str(info.value)) == (not _compat.CUDA_BUILD)
    assert "no CUDA device" in str(info.value) or "CPU-only build" in str(info.value)
    assert "ptc.gemm's kernels are CUDA GEMMs" in str(info.value)


def test_explain_errors_are_reported_not_raised(capsys):
    assert cli.main(["gemm", "explain", "-m", "1"]) == 2
    assert "needs -m, -n and -k" in capsys.readouterr().err
    assert cli.main(["gemm", "explain", "-m", "1", "-n", "1", "-k", "1", "--target", "V100"]) == 2
    assert "target='V100' is not a known GPU" in capsys.readouterr().err


def test_demo_section_runs(capsys):
    from ptc import demos

    demos.run(["gemm"])
    out = capsys.readouterr().out
    assert "fall back: exact GELU needs erf" in out and "pick: mm (faster by < 2% is a tie" in out
    assert "database winner: ptc_nvgemm_" in out


def test_capability_line():
    from ptc.gemm import capability

    assert capability("gemm").startswith("enable(): CuTeDSL mm/addmm/bmm/scaled_mm (FP8, MXFP8, NVFP4) candidates")


def _gemm_benchmark():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "gemm.py"
    spec = importlib.util.spec_from_file_location("ptc_bench_gemm", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


@pytest.mark.slow
def test_gpu_benchmark_dry_run_plans_every_case(tmp_path):
    """benchmarks/gemm.py --dry-run: plans every case and runs one through the benchmark on a CPU."""
    import json

    bench = _gemm_benchmark()
    assert bench.main([str(tmp_path), "--dry-run", "--target", "B200"]) == 0
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert len(plan) == 24 and all(len(v) == 8 for v in plan.values())
    assert "dry run: 24 cases planned for B200" in (tmp_path / "log.txt").read_text()
    # the benchmark's own code ran on one small case, every column (kernels cannot launch: ATen kept)
    (row,) = json.loads((tmp_path / "results.json").read_text())["bench"]
    assert row["case"] == "m16n64k64+bias,silu" and row["aten"] > 0 and row["ptc"] > 0 and row["inductor"] > 0
    # the graphed columns' code ran too (on the CPU the capture is stood in for by the call itself)
    assert row["aten_graphed"] > 0 and row["ptc_graphed"] > 0 and row["inductor_graphed"] > 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert set(results["goal_graphed"]) == {"bias,silu"} and results["goal_graphed_met"] in (True, False)
    assert "goal, graphed (ptc compiled vs aten" in (tmp_path / "results.md").read_text()
    assert row["ptc_direct_choice"] == "aten+epilogue" and row["cutedsl_best"] is None
    assert "mm+epilogue: ptc_reference_mm" in row["ptc_choice"]  # B200 fuses; the launch failed, ATen's GEMM won


@pytest.mark.parametrize("epi", ["", "bias,silu"])
def test_gpu_benchmark_direct_pick_keeps_aten_unless_a_kernel_beats_it(epi):
    """The benchmark's 'ptc direct' column: the fastest CuTeDSL kernel is kept only if it beats ATen
    (ATen's GEMM alone for a fused epilogue); the host time of its call is recorded. Launches go to
    a CPU stand-in; the timer is injected (kernel i takes 1 + i ms)."""
    from ptc.gemm import runtime
    from ptc.gemm.targets import target

    from ptc.gemm.epilogue import Epilogue

    from .conftest import CpuLauncher

    bench = _gemm_benchmark()
    x, w, b = torch.randn(16, 64).bfloat16(), torch.randn(48, 64).bfloat16(), torch.randn(48).bfloat16()
    launch = CpuLauncher(Epilogue.parse(epi) if epi else None)

    def timer(fn, reps=20, warmup=2):
        fn()
        return float(len({c[0] for c in launch.calls}))

    with runtime.launcher(launch):
        slow_aten = bench.ptc_pick(target("B200"), x, w, b, epi, aten_total=9.0, aten_gemm=9.0, timer=timer)
        launch.calls.clear()
        # with an epilogue, ATen's GEMM alone (0.5) is what a fused kernel must beat, not the whole chain (9.0)
        aten_total = 9.0 if epi else 0.5
        fast_aten = bench.ptc_pick(target("B200"), x, w, b, epi, aten_total=aten_total, aten_gemm=0.5, timer=timer)
    assert slow_aten["cutedsl_best"] == 1.0 and slow_aten["ptc_direct"] == 1.0
    assert slow_aten["ptc_direct_choice"] == slow_aten["cutedsl_best_label"] and slow_aten["cutedsl_host_us"] > 0
    assert slow_aten["cutedsl_direct"] is False  # a stand-in launcher never reaches the compiled function
    assert fast_aten["ptc_direct"] == aten_total and fast_aten["ptc_direct_choice"] == ("aten+epilogue" if epi else "aten")
    assert fast_aten["cutedsl_best"] == 1.0  # the fastest kernel is still reported


def test_gpu_benchmark_timer_issues_calls_back_to_back_and_reports_per_call(monkeypatch):
    """time_cuda: events around `inner` calls in a row (the GPU never waits for a lone call's
    host time), the median of the per-call times. CUDA events stood in for by a fake clock."""
    bench = _gemm_benchmark()
    clock, log = {"t": 0.0}, []

    class Event:
        def __init__(self, enable_timing=False):
            self.t = None

        def record(self):
            self.t = clock["t"]
            log.append("record")

        def synchronize(self):
            pass

        def elapsed_time(self, end):
            return end.t - self.t

    monkeypatch.setattr(bench.torch.cuda, "Event", Event)
    monkeypatch.setattr(bench.torch.cuda, "synchronize", lambda: None)
    costs = iter([5.0] + [2.0] * 4 + [3.0] * 4 + [2.5] * 4)  # warm-up, then three samples of four calls

    def fn():
        clock["t"] += next(costs)
        log.append("call")

    assert bench.time_cuda(fn, reps=3, warmup=1, inner=4) == 2.5
    assert log == ["call"] + (["record"] + ["call"] * 4 + ["record"]) * 3


def test_gpu_benchmark_a_failed_capture_is_a_noted_result_and_the_goal_says_not_measured(tmp_path):
    bench = _gemm_benchmark()

    def no_capture(fn):
        raise RuntimeError("operation not permitted when stream is capturing")

    assert bench.graphed_time(lambda: None, bench.time_cpu, no_capture) == (
        None, "capture failed: RuntimeError: operation not permitted when stream is capturing")
    row = {"case": "m1n8k8", "m": 1, "n": 8, "k": 8, "epilogue": "", "aten": 2.0, "ptc": 1.0,
           "aten_graphed": 1.0, "ptc_graphed": None, "ptc_graphed_note": "capture failed: RuntimeError: x"}
    assert bench.summarize([row], [], tmp_path, {}) is False  # per call: 2.0x, but no epilogue case measured
    md = (tmp_path / "results.md").read_text()
    assert "| capture failed: RuntimeError: x |" in md and "goal, graphed" in md and "NOT MEASURED" in md
