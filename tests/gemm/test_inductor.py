"""ptc.gemm.enable() inside Inductor's max-autotune, on CPU: candidates join, failures score inf,
injected timings pick winners, fused epilogues replace GEMM + chain, the database prunes.

The CuTeDSL kernels cannot launch without a GPU; here their launch is routed to a CPU stand-in
(``runtime.launcher``) or left to fail, which is exactly the autotuner's fallback path.
"""

import logging

import pytest
import torch
import torch.nn.functional as F

import ptc.gemm as gemm
from ptc.errors import PtcTypeError, PtcValueError
from ptc.gemm import runtime
from ptc.gemm.epilogue import Epilogue

from .conftest import CpuLauncher, compile_and_run, injected_timings, needs_ops

pytestmark = [needs_ops, pytest.mark.slow]

G = torch.Generator().manual_seed(0)
X = torch.randn(2, 16, 64, generator=G).bfloat16()
W = torch.randn(48, 64, generator=G).bfloat16()
BIAS = torch.randn(48, generator=G).bfloat16()
RES = torch.randn(2, 16, 48, generator=G).bfloat16()
A, B = X[0], W.t().contiguous()


def mlp(x, w, bias, r):
    return F.silu(F.linear(x, w, bias)) * 0.5 + r


def ptc_fastest(name):
    return 0.5 if name.startswith("ptc_nvgemm") else 1.0


def ptc_slowest(name):
    return 2.0 if name.startswith("ptc_nvgemm") else 1.0


def session(**kw):
    kw.setdefault("target", "B200")
    kw.setdefault("device_types", ("cpu",))
    return gemm.enable(**kw)


def test_candidates_that_cannot_launch_score_inf_and_aten_is_kept():
    with session() as s:
        out, code = compile_and_run(lambda a, b: a @ b, A, B)
    torch.testing.assert_close(out, A @ B)
    assert "extern_kernels.mm(" in code and "ptc_nvgemm" not in code
    (r,) = s.reports
    assert r.op == "mm" and r.problem.signature() == "mm:bf16xbf16->bf16:m16n48k64:tt"
    ptc = [n for n in r.timings_us if n.startswith("ptc_nvgemm")]
    assert len(ptc) == len(r.plan.selected) > 0
    assert all(r.timings_us[n] == float("inf") for n in ptc)
    assert r.inductor_winner == r.ptc_winner == "mm"
    assert "\nwinner   mm (kept by Inductor); tie rule picks mm" in gemm.format_report(r)


def test_fastest_ptc_candidate_is_compiled_into_the_graph():
    launcher = CpuLauncher()
    with session() as s, injected_timings(ptc_fastest), runtime.launcher(launcher):
        out, code = compile_and_run(lambda a, b: torch.bmm(a, b), X, W.t().expand(2, 64, 48))
    torch.testing.assert_close(out, torch.bmm(X, W.t().expand(2, 64, 48)), rtol=2e-2, atol=2e-2)
    (r,) = s.reports
    assert r.op == "bmm" and r.inductor_winner.startswith("ptc_nvgemm")
    operator = r.candidate_of[r.inductor_winner]
    assert f"extern_kernels.ptc_nvgemm_bmm(" in code and f"operator='{operator}'" in code and "arch='100a'" in code
    assert launcher.calls and launcher.calls[0][0] == operator


def test_addmm_bias_is_fused_as_an_epilogue():
    launcher = CpuLauncher(Epilogue.parse("bias"))
    with session(fuse_epilogues=False) as s, injected_timings(ptc_fastest), runtime.launcher(launcher):
        out, code = compile_and_run(lambda x, w, b: F.linear(x, w, b), A, W, BIAS)
    torch.testing.assert_close(out, F.linear(A, W, BIAS), rtol=2e-2, atol=2e-2)
    (r,) = s.reports
    assert r.op == "addmm" and r.plan.fusion.fused and "ptc_nvgemm_addmm(" in code
    assert launcher.calls[0][4].startswith("def epilogue(accum, bias)")


def test_fused_epilogue_wins_and_replaces_the_chain():
    launcher = CpuLauncher(Epilogue.parse("bias,silu,scale,residual", alpha=0.5))
    with session() as s, injected_timings(ptc_fastest), runtime.launcher(launcher):
        out, code = compile_and_run(mlp, X, W, BIAS, RES)
    torch.testing.assert_close(out, mlp(X, W, BIAS, RES), rtol=3e-2, atol=3e-2)
    fused = [r for r in s.reports if r.op == "mm+epilogue"]
    assert len(fused) == 1 and fused[0].inductor_winner.startswith("ptc_nvgemm")
    assert "extern_kernels.ptc_nvgemm_fused(" in code and "names='bias,residual'" in code
    assert "sigmoid" not in code.split("ptc_nvgemm_fused(")[0].split("def call")[-1]  # nothing left unfused
    assert launcher.calls[0][4].startswith("def epilogue(accum, bias, residual)")


def test_when_aten_gemm_alone_is_faster_the_chain_is_lowered_unfused():
    with session() as s, injected_timings(ptc_slowest):
        out, code = compile_and_run(mlp, X, W, BIAS, RES)
    torch.testing.assert_close(out, mlp(X, W, BIAS, RES), rtol=3e-2, atol=3e-2)
    (fused,) = [r for r in s.reports if r.op == "mm+epilogue"]
    assert fused.inductor_winner == "ptc_reference_mm" and "lowered unfused" in fused.note
    assert "ptc_nvgemm" not in code and "ptc_reference_mm" not in code
    assert "extern_kernels.mm(" in code  # Inductor's own mm, then its fused pointwise kernel


def test_unfusible_chain_is_left_alone_with_a_logged_reason(caplog):
    def f(x, w):
        return F.gelu(x @ w.t())  # exact GELU: erf

    with caplog.at_level(logging.INFO, logger="ptc.gemm"), session() as s:
        out, code = compile_and_run(f, A, W)
    torch.testing.assert_close(out, f(A, W), rtol=2e-2, atol=2e-2)
    assert "ptc_nvgemm_fused" not in code
    assert any("exact GELU needs erf" in r.note for r in s.reports)
    assert "exact GELU needs erf" in caplog.text


def test_database_records_then_prunes(tmp_path):
    path = tmp_path / "gemm.json"
    launcher = CpuLauncher()
    with session(db=str(path)) as s, injected_timings(ptc_fastest), runtime.launcher(launcher):
        compile_and_run(lambda a, b: a @ b, A, B)
    # all ptc candidates tie at 0.5 ms: the tie rule (ptc's override_best_choice) decides, as the database does
    winner = s.reports[0].ptc_winner
    assert winner == gemm.pick(s.reports[0].timings_us) == s.reports[0].inductor_winner
    db = gemm.AutotuneDB(path)
    (key,) = db.keys()
    assert key.gpu == "B200" and key.op == "mm" and db.winner(key) == winner

    # a second process (here: session) with the file benchmarks nothing and uses the winner
    with session(db=str(path)) as s2, injected_timings(lambda n: pytest.fail(f"benchmarked {n}")), \
            runtime.launcher(launcher):
        out, code = compile_and_run(lambda a, b: a @ b, A, B)
    torch.testing.assert_close(out, A @ B, rtol=2e-2, atol=2e-2)
    assert s2.reports[0].from_db == winner and "ptc_nvgemm_mm(" in code


def test_ties_within_two_percent_keep_aten():
    with session() as s, injected_timings(lambda n: 0.99 if n.startswith("ptc_nvgemm") else 1.0), \
            runtime.launcher(CpuLauncher()):
        out, code = compile_and_run(lambda a, b: a @ b, A, B)
    (r,) = s.reports
    assert r.inductor_winner == r.ptc_winner == "mm" and "extern_kernels.mm(" in code and "ptc_nvgemm" not in code


def test_planning_errors_never_break_compilation(monkeypatch, caplog):
    import ptc.gemm.inductor as ind

    def boom(*a, **k):
        raise RuntimeError("planner exploded")

    monkeypatch.setattr(ind, "plan", boom)
    with caplog.at_level(logging.WARNING, logger="ptc.gemm"), session(fuse_epilogues=False):
        out, code = compile_and_run(lambda a, b: a @ b, A, B)
    torch.testing.assert_close(out, A @ B)
    assert "planner exploded" in caplog.text and "ptc_nvgemm" not in code


def test_enable_validates_and_disable_restores():
    from torch._inductor import config
    from torch._inductor import select_algorithm as sa

    before = (config.max_autotune_gemm_backends, config.pre_grad_custom_pass,
              list(sa.get_algorithm_selector_cache().preprocessing_fns))
    with pytest.raises(PtcTypeError, match="backends must be a sequence"):
        gemm.enable("NVGEMM")
    with pytest.raises(PtcValueError, match="each must be one of ATEN, TRITON, NVGEMM"):
        gemm.enable(("CUBLAS",))
    with pytest.raises(PtcValueError, match="target='A100' is not a known GPU"):
        gemm.enable(target="A100")
    with pytest.raises(PtcValueError, match="max_candidates must be an int >= 1"):
        gemm.enable(max_candidates=0)
    with pytest.raises(PtcTypeError, match="device_types must be a sequence of device types"):
        gemm.enable(device_types="cuda")
    s = gemm.enable(("NVGEMM", "ATEN"), target="H100", device_types=("cuda", "cpu"))
    assert config.max_autotune_gemm_backends.startswith("ATEN") and "TRITON" not in config.max_autotune_gemm_backends
    with pytest.raises(PtcValueError, match="already enabled"):
        gemm.enable()
    s.disable()
    s.disable()  # idempotent
    assert gemm.active_session() is None
    assert (config.max_autotune_gemm_backends, config.pre_grad_custom_pass,
            list(sa.get_algorithm_selector_cache().preprocessing_fns)) == before


def test_disable_from_another_thread_is_refused_and_changes_nothing():
    """torch's config patch is per thread: disable() from another thread raised torch's
    AssertionError half way (hooks removed, the enabling thread's config still patched, the
    session still active so enable() was refused from then on)."""
    import threading

    from torch._inductor import config
    from torch._inductor import select_algorithm as sa

    before = (config.max_autotune_gemm_backends, config.pre_grad_custom_pass)
    s = gemm.enable(("NVGEMM", "ATEN"), device_types=("cpu",))
    patched = (config.max_autotune_gemm_backends, config.pre_grad_custom_pass,
               list(sa.get_algorithm_selector_cache().preprocessing_fns))  # fmt: skip
    errors = []

    def other():
        try:
            s.disable()
        except BaseException as e:  # noqa: BLE001 - recorded for the assertion
            errors.append(e)

    t = threading.Thread(target=other)
    t.start()
    t.join(timeout=30)
    try:
        assert len(errors) == 1 and isinstance(errors[0], PtcValueError), errors
        assert "from another thread than the one that called enable()" in str(errors[0])
        assert s.active and gemm.active_session() is s
        assert (config.max_autotune_gemm_backends, config.pre_grad_custom_pass,
                list(sa.get_algorithm_selector_cache().preprocessing_fns)) == patched  # fmt: skip
    finally:
        s.disable()
    assert (config.max_autotune_gemm_backends, config.pre_grad_custom_pass) == before


def test_enable_without_a_cuda_device_is_feature_unavailable(monkeypatch):
    from ptc import FeatureUnavailable, _compat

    monkeypatch.setattr(_compat, "CUDA_AVAILABLE", False, raising=False)
    monkeypatch.setattr(_compat, "CUDA_BUILD", False, raising=False)
    with pytest.raises(FeatureUnavailable, match=r"this torch is a CPU-only build .*CUDA GEMMs") as info:
        gemm.enable(target="B200")
    assert isinstance(info.value, RuntimeError) and info.value.requirement == "CUDA_BUILD"
    monkeypatch.setattr(_compat, "CUDA_BUILD", True, raising=False)
    with pytest.raises(FeatureUnavailable, match=r"no CUDA device is available") as info:
        gemm.enable()
    assert info.value.requirement == "CUDA_AVAILABLE" and gemm.active_session() is None
    gemm.enable(device_types=("cpu",)).disable()  # CPU tensors on request: no CUDA needed


def test_a_gemm_on_tensors_the_session_does_not_serve_says_why(monkeypatch):
    from ptc import _compat

    monkeypatch.setattr(_compat, "CUDA_AVAILABLE", True, raising=False)  # as on a GPU machine
    with gemm.enable(target="B200") as s:
        out, code = compile_and_run(lambda a, b: a @ b, A, B)
    torch.testing.assert_close(out, A @ B)
    (r,) = s.reports
    assert r.problem is None and "ptc_nvgemm" not in code
    assert r.note.startswith("the op's tensors are on cpu, and this session serves GEMMs on cuda tensors")
    assert "ptc.gemm's kernels are CUDA GEMMs" in r.note
    text = gemm.format_report(r)
    assert text.splitlines()[0] == "== mm: no ptc candidates" and "not described" not in text
    if not torch.cuda.is_available():
        assert r.note.endswith("; no CUDA device is available here")


def test_enable_registers_kernels_and_keys_the_graph_cache():
    """Cached graphs call extern_kernels.ptc_* by name, and must not leak into processes without ptc."""
    from torch._inductor import config
    from torch._inductor.select_algorithm import extern_kernels

    with session(fuse_epilogues=False):
        names = [n for n in ("ptc_nvgemm_mm", "ptc_nvgemm_addmm", "ptc_nvgemm_bmm", "ptc_nvgemm_scaled_mm",
                             "ptc_nvgemm_fused", "ptc_reference_mm") if callable(getattr(extern_kernels, n, None))]
        uuid = config.pre_grad_custom_pass.uuid()
    assert len(names) == 6
    assert b"ptc.gemm" in uuid and b"fuse=False" in uuid
    assert config.pre_grad_custom_pass is None  # restored


def test_eager_op_matches_the_chain():
    """ptc::gemm_epilogue outside compile computes epilogue(a @ b)."""
    out = torch.ops.ptc.gemm_epilogue(A, W.t(), [BIAS, RES[0]], "bias,silu,scale,residual", 0.5)
    torch.testing.assert_close(out, mlp(A, W, BIAS, RES[0]), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("mode", ["row", "tensor"])
def test_scaled_mm_fp8_gets_fused_dequant_candidates(mode):
    a = torch.randn(32, 64, generator=G).to(torch.float8_e4m3fn)
    b = torch.randn(48, 64, generator=G).to(torch.float8_e4m3fn).t()
    sa, sb = (torch.rand(32, 1, generator=G), torch.rand(1, 48, generator=G)) if mode == "row" else (
        torch.rand((), generator=G), torch.rand((), generator=G))

    def f(a, b, sa, sb):
        return torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)

    launcher = CpuLauncher(Epilogue.parse("rowscale"))
    with session(fuse_epilogues=False) as s, injected_timings(ptc_fastest), runtime.launcher(launcher):
        out, code = compile_and_run(f, a, b, sa, sb)
    torch.testing.assert_close(out, f(a, b, sa, sb), rtol=2e-2, atol=2e-2)
    (r,) = s.reports
    assert r.op == "scaled_mm" and r.problem.scale == mode and r.plan.fusion.fused
    assert "extern_kernels.ptc_nvgemm_scaled_mm(" in code and "names='scale_a,scale_b'" in code
    op, arch, a_shape, b_shape, source, names = launcher.calls[0]
    assert source.startswith("def epilogue(accum, scale_a, scale_b)") and names == ("scale_a", "scale_b")


def test_scaled_mm_on_hopper_says_why_it_has_no_candidates():
    a = torch.randn(32, 64, generator=G).to(torch.float8_e4m3fn)
    b = torch.randn(48, 64, generator=G).to(torch.float8_e4m3fn).t()
    with session(target="H100") as s:
        out, code = compile_and_run(lambda a, b, x, y: torch._scaled_mm(a, b, x, y, out_dtype=torch.bfloat16),
                                    a, b, torch.rand(32, 1), torch.rand(1, 48))
    assert "ptc_nvgemm" not in code
    assert "needs the dequant epilogue" in s.reports[0].note


def scaled_mm(a, b, sa, sb):
    return torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)


@pytest.mark.parametrize("fmt", ["mxfp8", "nvfp4"])
def test_block_scaled_mm_gets_blackwell_block_scaled_candidates(fmt):
    """MXFP8 / NVFP4 ``torch._scaled_mm`` (tiled scales) gets CuTeDSL block-scaled candidates; the
    pick computes dequantize(a) @ dequantize(b) (expected value written out in test_blockscale)."""
    from .test_blockscale import kernel, mxfp8, nvfp4, right

    a, b, sa, sb, want = (mxfp8 if fmt == "mxfp8" else nvfp4)(32, 48, 64)
    launched = []

    def launch(*args):
        launched.append(args)
        kernel(right)(*args)

    with session() as s, injected_timings(ptc_fastest), runtime.launcher(launch):
        out, code = compile_and_run(scaled_mm, a, b, sa, sb)
    torch.testing.assert_close(out.float(), want, rtol=2**-7, atol=1e-2)
    (r,) = s.reports
    mode = {"mxfp8": "block32", "nvfp4": "block16"}[fmt]
    assert r.op == "scaled_mm" and r.problem.scale == mode and not r.note
    assert r.problem.signature().endswith(f"m32n48k64:tn:{mode}")  # NVFP4: K counts values, not bytes
    assert r.inductor_winner.startswith("ptc_nvgemm") and "extern_kernels.ptc_nvgemm_block_scaled_mm(" in code
    assert f"Blockwise1x{mode[5:]}" in r.candidate_of[r.inductor_winner]
    assert f"problem  {r.problem.signature()}" in gemm.format_report(r)  # what `ptc gemm explain` shows
    operator, arch, *_, operands = launched[0]
    assert operator == r.candidate_of[r.inductor_winner] and arch == "100a"
    assert list(operands) == list(runtime.BLOCK_SCALES) and operands["block_scale_a"].dtype == sa.dtype


def test_block_scaled_mm_elsewhere_says_why_it_has_no_candidates():
    """Without a ptc candidate the graph calls ATen's _scaled_mm, which has no CPU kernel for block
    scales: its CPU error shows ATen ran."""
    from .test_blockscale import mxfp8

    a, b, sa, sb, _ = mxfp8(32, 48, 64)
    bias = torch.randn(48, generator=G).bfloat16()
    with session(target="H100") as hopper, pytest.raises(ValueError, match="Invalid scaling configuration"):
        compile_and_run(scaled_mm, a, b, sa, sb)
    assert "block32 block scales need Blackwell" in hopper.reports[0].note
    with session() as s, pytest.raises(ValueError, match="Invalid scaling configuration"):
        compile_and_run(lambda a, b, sa, sb, c: torch._scaled_mm(a, b, sa, sb, bias=c, out_dtype=torch.bfloat16),
                        a, b, sa, sb, bias)
    assert "with a bias are left to ATen" in s.reports[0].note


def test_dynamic_shapes_get_no_ptc_candidates():
    import torch._inductor.config as ic
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    with session() as s, ic.patch(force_disable_caches=True):
        out, code = run_and_get_code(torch.compile(lambda a, b: a @ b, mode="max-autotune", dynamic=True), A, B)
    torch.testing.assert_close(out, A @ B)
    assert "ptc_nvgemm" not in "\n".join(code)
    mm = [r for r in s.reports if r.op == "mm"]
    assert mm and all("dynamic shapes" in r.note for r in mm)


def test_runtime_finds_planned_operators_by_name():
    from ptc.errors import FeatureUnavailable
    from ptc.gemm import catalog
    from ptc.gemm.targets import TARGETS

    problem = gemm.GemmProblem("mm", 128, 256, 64)
    p = gemm.plan(problem, "B200")
    args = catalog.meta_arguments(problem)
    assert runtime.find_operator(p.selected[0].name, "100a", args).metadata.operator_name == p.selected[0].name
    with pytest.raises(FeatureUnavailable, match="no operator cutedsl.Nope"):
        runtime.find_operator("cutedsl.Nope", "100a", args)
    with pytest.raises(FeatureUnavailable, match="needs CUDA tensors"):
        runtime.ptc_nvgemm_mm(A, B, out=torch.empty(16, 48, dtype=torch.bfloat16), operator="x", arch="100a")
    assert TARGETS["B200"].arch == "100a"


def test_backends_restrict_the_competition_but_never_empty_it():
    with session(backends=("NVGEMM",)) as s, injected_timings(ptc_fastest), runtime.launcher(CpuLauncher()):
        compile_and_run(lambda a, b: a @ b, A, B)
        a32, b32 = A.float(), B.float()  # f32: ptc plans no candidate, so ATen must stay
        out, code = compile_and_run(lambda a, b: a @ b, a32, b32)
    torch.testing.assert_close(out, a32 @ b32)
    first, second = [r for r in s.reports if r.op == "mm"]
    assert first.timings_us and all(n.startswith("ptc_nvgemm") for n in first.timings_us)
    assert "ptc plans bf16/f16" in second.note and "kept Inductor's choices" in second.note


def test_inputs_at_unaligned_offsets_get_no_ptc_candidates():
    base = torch.randn(16 * 64 + 1, generator=G).bfloat16()

    def f(base, b):
        return base[1:].view(16, 64) @ b  # a view 1 element (2 bytes) into its storage

    with session(fuse_epilogues=False) as s:
        out, code = compile_and_run(f, base, B)
    torch.testing.assert_close(out, f(base, B))
    assert "ptc_nvgemm" not in code and "16-byte aligned" in s.reports[0].note


@pytest.mark.parametrize("call", ["fused", "addmm", "scaled_mm"])
def test_a_kernel_never_runs_without_the_epilogue_its_operands_need(call):
    """An unfused plan (``source=None``) must not launch a plain GEMM and drop the bias."""
    a, b, out = torch.randn(4, 8), torch.randn(8, 16), torch.empty(4, 16)
    bias = torch.randn(16)
    launched = []
    with runtime.launcher(lambda *args: launched.append(args)), pytest.raises(PtcValueError, match="need an epilogue"):
        if call == "fused":
            runtime.ptc_nvgemm_fused(a, b, bias, out=out, operator="op", arch="90a", source=None, names="bias")
        elif call == "addmm":
            runtime.ptc_nvgemm_addmm(bias, a, b, out=out, operator="op", arch="90a", source=None, name="bias")
        else:
            s = torch.ones(1)
            runtime.ptc_nvgemm_scaled_mm(a, b, s, s, out=out, operator="op", arch="90a", source=None, names="scale_a,scale_b")
    assert launched == []


def test_on_hopper_a_chain_says_why_and_a_plain_gemm_still_competes():
    """cutlass.operators 0.3.0 has no epilogue-fusion kernels for sm_90a: a GEMM + bias + silu gets
    no ptc candidate there (neither fused nor as addmm) and each op's report says why; a plain
    GEMM still gets its CuTeDSL candidates. (The GPU test of the same rule: test_cuda.py.)"""
    x, w, b = X[0], W, BIAS
    with session(target="H200_SXM") as s:
        out, code = compile_and_run(lambda x, w, b: F.silu(F.linear(x, w, b)), x, w, b)
        chain = list(s.reports)
        s.reports.clear()
        compile_and_run(lambda x, w: x @ w.t(), x, w)
    torch.testing.assert_close(out, F.silu(F.linear(x, w, b)), rtol=2e-2, atol=2e-2)
    assert "ptc_nvgemm" not in code
    assert chain and all("no epilogue-fusion kernels for sm_90a" in r.note for r in chain)
    assert not [n for r in chain for n in r.timings_us if n.startswith("ptc_nvgemm")]
    (mm,) = s.reports
    assert mm.op == "mm" and not mm.note and len([n for n in mm.timings_us if n.startswith("ptc_nvgemm")]) > 0


def _run_then_time(rule):
    """Like ``injected_timings``, but each choice really runs once (so ptc's first-run check
    sees its result) before ``rule(name)`` gives its time."""
    from torch._inductor import select_algorithm as sa

    def fn(choices):
        for c in choices:
            real = c.benchmark

            def benchmark(*args, out, real=real, name=c.name):
                real(*args, out=out)
                return rule(name)

            c.benchmark = benchmark
        return choices

    return fn


def test_a_fast_kernel_with_a_wrong_result_never_wins_and_a_pinned_one_raises(tmp_path):
    """ptc checks a kernel's first result against a @ b (epilogue included): a wrong kernel
    scores inf however fast it is, and one pinned by the database raises instead of returning
    a wrong tensor."""
    from torch._inductor import select_algorithm as sa

    from ptc import WrongResult

    def doubled(operator, arch, a, b, out, source, operands):  # e.g. a wrong scale in the kernel
        out.copy_((a.float() @ b.float() * 2).to(out.dtype))

    path = tmp_path / "gemm.json"
    hook = _run_then_time(ptc_fastest)
    with session(db=str(path)) as s, runtime.launcher(doubled):
        sa.add_preprocessing_fn(hook)
        try:
            out, code = compile_and_run(lambda a, b: a @ b, A, B)
        finally:
            sa.get_algorithm_selector_cache().preprocessing_fns.remove(hook)
    torch.testing.assert_close(out, A @ B)
    (r,) = s.reports
    ptc = {n: t for n, t in r.timings_us.items() if n.startswith("ptc_nvgemm")}
    assert ptc and all(t == float("inf") for t in ptc.values()) and r.inductor_winner == "mm"
    assert "ptc_nvgemm" not in code

    # a database (from a machine where the kernel was right) pins a ptc kernel: no benchmark runs
    db = gemm.AutotuneDB(path)
    (key,) = db.keys()
    db.record(key, {**{n: 1.0 for n in ptc}, "mm": 2.0})
    db.save()
    with session(db=str(path)), runtime.launcher(doubled), pytest.raises(WrongResult, match="disagrees with a @ b"):
        compile_and_run(lambda a, b: a @ b, A, B)
