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


def test_enable_in_max_autotune_on_gpu():
    _blackwell_or_hopper()
    x = torch.randn(128, 512, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1024, 512, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    f = lambda x, w, b: F.silu(F.linear(x, w, b))
    with gemm.enable() as s:
        out, _ = compile_and_run(f, x, w, b)
    torch.testing.assert_close(out.float(), f(x, w, b).float(), rtol=3e-2, atol=3e-1)
    timings = [t for r in s.reports for n, t in r.timings_us.items() if n.startswith("ptc_nvgemm")]
    assert timings and any(t != float("inf") for t in timings)
