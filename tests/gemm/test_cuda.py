"""On a GPU: ptc's CuTeDSL candidates launch, agree with torch.matmul and get finite times.

CPU twins: tests/gemm/test_inductor.py runs the same paths with the launch routed to a CPU stand-in.
"""

import pytest
import torch
import torch.nn.functional as F

import ptc.gemm as gemm

from .conftest import compile_and_run, needs_ops

pytestmark = [pytest.mark.cuda, needs_ops]


def _blackwell_or_hopper():
    major = torch.cuda.get_device_capability()[0]
    if major not in (9, 10):
        pytest.skip(f"ptc.gemm plans for Hopper/Blackwell; this GPU is sm_{major}x")


def test_every_selected_candidate_matches_matmul():
    _blackwell_or_hopper()
    from ptc.gemm import runtime
    from ptc.gemm.targets import detect

    tgt = detect(torch.cuda.get_device_name(), torch.cuda.get_device_capability())
    a = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(384, 512, device="cuda", dtype=torch.bfloat16)
    p = gemm.plan(gemm.GemmProblem("mm", 256, 384, 512), tgt)
    for c in p.selected:
        out = torch.empty(256, 384, device="cuda", dtype=torch.bfloat16)
        runtime.ptc_nvgemm_mm(a, w.t(), out=out, operator=c.name, arch=tgt.arch)
        torch.testing.assert_close(out.float(), (a.float() @ w.float().t()), rtol=2e-2, atol=2e-1, msg=c.label)
    # later calls (new tensors, same shapes) call each compiled function directly: checked, then used
    # (CPU twin: test_runtime.py::test_later_calls_go_straight_to_the_compiled_function)
    for _ in range(2):
        a2, w2 = torch.randn_like(a), torch.randn_like(w)
        for c in p.selected:
            out = torch.empty(256, 384, device="cuda", dtype=torch.bfloat16)
            runtime.ptc_nvgemm_mm(a2, w2.t(), out=out, operator=c.name, arch=tgt.arch)
            torch.testing.assert_close(out.float(), a2.float() @ w2.float().t(), rtol=2e-2, atol=2e-1, msg=c.label)
    direct = {k[0]: d.checked for k, d in runtime._direct.items()}
    assert all(direct.get(c.name) for c in p.selected), (direct, runtime._direct_refused)


def test_enable_in_max_autotune_on_gpu():
    """A plain GEMM gets CuTeDSL candidates with finite times; a GEMM + epilogue chain gets fused
    candidates on Blackwell and, on Hopper (no EFC kernels for sm_90a), a note saying why not.
    CPU twin: test_inductor.py::test_on_hopper_a_chain_says_why_and_a_plain_gemm_still_competes."""
    _blackwell_or_hopper()
    x = torch.randn(128, 512, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1024, 512, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    plain = lambda x, w: x @ w.t()
    chain = lambda x, w, b: F.silu(F.linear(x, w, b))
    with gemm.enable() as s:
        out, _ = compile_and_run(plain, x, w)
        seen = _seen(s)
        torch.testing.assert_close(out.float(), plain(x, w).float(), rtol=3e-2, atol=3e-1)
        timings = [t for r in s.reports for n, t in r.timings_us.items() if n.startswith("ptc_nvgemm")]
        assert timings and any(t != float("inf") for t in timings), seen
        s.reports.clear()
        out, _ = compile_and_run(chain, x, w, b)
        seen = _seen(s)
    torch.testing.assert_close(out.float(), chain(x, w, b).float(), rtol=3e-2, atol=3e-1)
    if torch.cuda.get_device_capability()[0] == 9:
        assert any("no epilogue-fusion kernels for sm_90a" in r.note for r in s.reports), seen
    else:
        fused = [t for r in s.reports if r.op == "mm+epilogue" for n, t in r.timings_us.items() if n.startswith("ptc_nvgemm")]
        assert fused and any(t != float("inf") for t in fused), seen


def _seen(session):
    """What each autotuned op got, for the failure message."""
    return [(r.op, r.note, sorted(r.timings_us)) for r in session.reports]


@pytest.mark.parametrize("fmt", ["mxfp8", "nvfp4"])
def test_block_scaled_candidates_match_cublas_on_blackwell(fmt):
    """Every selected block-scaled kernel agrees with torch._scaled_mm (cuBLAS), and max-autotune
    gets them with finite times. CPU twins: test_inductor.py::test_block_scaled_mm_gets_blackwell_
    block_scaled_candidates (the Inductor path), test_blockscale.py (layouts and meaning)."""
    if torch.cuda.get_device_capability()[0] != 10:
        pytest.skip("MXFP8/NVFP4 block-scaled MMA needs Blackwell (sm_100)")
    from ptc.gemm import blockscale, runtime
    from ptc.gemm.targets import detect

    m, n, k = 256, 384, 512
    scale = {"mxfp8": "block32", "nvfp4": "block16"}[fmt]
    g = torch.Generator(device="cuda").manual_seed(0)
    a, b, sa, sb = blockscale.random_operands(scale, m, n, k, device="cuda", generator=g)
    want = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16).float()
    tgt = detect(torch.cuda.get_device_name(), torch.cuda.get_device_capability())
    dt = {"mxfp8": "e4m3", "nvfp4": "e2m1x2"}[fmt]
    p = gemm.plan(gemm.GemmProblem("scaled_mm", m, n, k, a_dtype=dt, b_dtype=dt, scale=scale), tgt)
    assert p.selected, p.note
    for c in p.selected:
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        runtime.ptc_nvgemm_block_scaled_mm(a, b, sa, sb, out=out, operator=c.name, arch=tgt.arch)
        torch.testing.assert_close(out.float(), want, rtol=2e-2, atol=2e-2 * want.abs().max().item(), msg=c.label)
    # later calls with new tensors go straight to the compiled function, with pointers rebuilt
    # (CPU twin: test_runtime.py::test_pointers_to_the_calls_tensors_are_rebuilt_for_each_later_call)
    for _ in range(2):
        a2, b2, sa2, sb2 = blockscale.random_operands(scale, m, n, k, device="cuda", generator=g)
        want2 = torch._scaled_mm(a2, b2, sa2, sb2, out_dtype=torch.bfloat16).float()
        for c in p.selected:
            out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            runtime.ptc_nvgemm_block_scaled_mm(a2, b2, sa2, sb2, out=out, operator=c.name, arch=tgt.arch)
            torch.testing.assert_close(out.float(), want2, rtol=2e-2, atol=2e-2 * want2.abs().max().item(), msg=c.label)
    direct = {k[0]: d.checked for k, d in runtime._direct.items()}
    assert all(direct.get(c.name) for c in p.selected), (direct, runtime._direct_refused)
    with gemm.enable() as s:
        out, _ = compile_and_run(lambda a, b, sa, sb: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16), a, b, sa, sb)
    torch.testing.assert_close(out.float(), want, rtol=2e-2, atol=2e-2 * want.abs().max().item())
    timings = [t for r in s.reports for n, t in r.timings_us.items() if n.startswith("ptc_nvgemm")]
    assert timings and any(t != float("inf") for t in timings), _seen(s)
