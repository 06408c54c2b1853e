"""Selected kernels compile to PTX on this CPU (cute.compile with CUTE_DSL_ARCH, in a child process).

Golden hashes are per nvidia-cutlass-dsl version (the extra pins it); the PTX of a
kernel is byte-identical across processes for one version.
"""

import pytest

from ptc.gemm import GemmProblem, plan
from ptc.gemm import catalog
from ptc.gemm.epilogue import KNOWN_COMPILE_FAILURES
from ptc.gemm.ptx import compile_many, compile_ptx
from ptc.errors import PtcError

from .conftest import needs_ops

pytestmark = [needs_ops, pytest.mark.slow]

P = GemmProblem("mm", 256, 256, 256)

# sha256 prefixes of the PTX, keyed by nvidia-cutlass-dsl version
GOLDEN = {
    "4.8.1": {"H100_SXM": "4055f1b0878c", "B200": "9388de6072e2"},
}


FP8 = GemmProblem("scaled_mm", 256, 256, 256, a_dtype="e4m3", b_dtype="e4m3", scale="row")
MXFP8 = FP8.with_(scale="block32")
NVFP4 = FP8.with_(a_dtype="e2m1x2", b_dtype="e2m1x2", scale="block16")
# every rewrite ptc emits must compile, not only pass cutlass.operators' argument checks
BLACKWELL_EPILOGUES = [(P, "bias,gelu_tanh,residual"), (P, "colbias,silu,scale"), (FP8, "rowscale")]
# block-scaled operands built the way ptc's runtime builds them from torch._scaled_mm's tensors
BLOCK_SCALED = [(MXFP8, None), (NVFP4, None)]


@pytest.fixture(scope="module")
def compiled():
    """One worker per arch: H100 plain GEMM; B200 bias+relu EFC plus the other fused kinds."""
    h = plan(P, "H100_SXM")
    (hk,) = compile_ptx(P, "H100_SXM", [h.selected[0].name])
    items = [(P, "bias,relu")] + BLACKWELL_EPILOGUES + BLOCK_SCALED
    plans = [plan(prob, "B200", epi) for prob, epi in items]
    ks = compile_many("B200", [(prob, [p.selected[0].name], epi) for (prob, epi), p in zip(items, plans)])
    return {"H100_SXM": (h, hk), "B200": (plans[0], ks[0]), "more": list(zip(items[1:], plans[1:], ks[1:]))}


def test_hopper_kernel_is_wgmma_ptx_for_sm90a(compiled):
    p, k = compiled["H100_SXM"]
    assert k.name == p.selected[0].name and "Sm90" in k.name
    assert ".target sm_90a" in k.ptx and k.ptx.count("wgmma.mma_async") >= 1


def test_blackwell_fused_kernel_is_tcgen05_ptx_for_sm100a(compiled):
    p, k = compiled["B200"]
    assert p.fusion.fused and "EFC" in k.name
    assert ".target sm_100a" in k.ptx and "tcgen05.mma" in k.ptx


def test_every_fused_epilogue_kind_compiles(compiled):
    for (prob, epi), p, k in compiled["more"]:
        if epi is None:
            continue
        assert p.fusion.fused and k.name == p.selected[0].name, epi
        assert ".target sm_100a" in k.ptx and "tcgen05.mma" in k.ptx, epi


def test_mxfp8_and_nvfp4_compile_to_block_scaled_mma(compiled):
    kinds = {prob.scale: (p, k) for (prob, epi), p, k in compiled["more"] if epi is None}
    for scale, mma in (("block32", ".kind::mxf8f6f4.block_scale.block32"), ("block16", ".kind::mxf4nvf4.block_scale.block16")):
        p, k = kinds[scale]
        assert k.name == p.selected[0].name and ".target sm_100a" in k.ptx, scale
        assert mma in k.ptx, scale


def test_ptx_matches_the_golden_hash_for_the_pinned_dsl(compiled):
    version = catalog.versions()["cutlass_dsl"]
    golden = GOLDEN.get(version)
    assert golden is not None, f"no golden PTX hashes for nvidia-cutlass-dsl {version}; the gemm extra pins 4.8.1"
    assert {t: compiled[t][1].sha256[:12] for t in ("H100_SXM", "B200")} == golden


def test_known_compile_failures_are_still_failures():
    """The fusibility table says reduction epilogues fail to compile in this release: check it."""
    if "amax" not in KNOWN_COMPILE_FAILURES.get(catalog.versions()["cutlass_operators"], {}):
        pytest.skip("this cutlass.operators release has no recorded amax failure")
    from ptc.gemm.candidates import candidates_from_operators
    from ptc.gemm.epilogue import Epilogue
    from ptc.gemm.targets import TARGETS

    epi = Epilogue.parse("relu,amax")
    ops = catalog.operators(P, TARGETS["B200"], epi.evt_source(), epi)
    name = min(candidates_from_operators(ops, P, TARGETS["B200"]), key=lambda c: c.name).name
    with pytest.raises(PtcError, match="remapped"):
        compile_ptx(P, "B200", [name], "relu,amax")


def test_unknown_operator_is_a_clear_error():
    with pytest.raises(ValueError, match=r"operators \['cutedsl.NoSuchOperator'\] do not support mm:"):
        compile_ptx(P, "B200", ["cutedsl.NoSuchOperator"])
