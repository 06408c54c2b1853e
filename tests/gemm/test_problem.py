"""GemmProblem and Target: validation names the argument and the rule; signatures round-trip."""

import pytest
import torch
from hypothesis import given, settings, strategies as st

from ptc.errors import PtcTypeError, PtcValueError
from ptc.gemm import GemmProblem, TARGETS, target
from ptc.gemm.targets import detect


def test_signature_is_stable_and_readable():
    assert GemmProblem("mm", 128, 4096, 4096).signature() == "mm:bf16xbf16->bf16:m128n4096k4096:tn"
    assert GemmProblem("bmm", 2, 3, 4, batch=8, a_dtype=torch.float16, b_dtype="float16", out_dtype="f16",
                       layout="nt").signature() == "bmm:f16xf16->f16:b8m2n3k4:nt"
    assert (GemmProblem("scaled_mm", 16, 32, 64, a_dtype="e4m3", b_dtype="e4m3", scale="row").signature()
            == "scaled_mm:e4m3xe4m3->bf16:m16n32k64:tn:row")


@settings(max_examples=25, deadline=None)
@given(
    op=st.sampled_from(["mm", "addmm", "bmm"]),
    m=st.integers(1, 1 << 16), n=st.integers(1, 1 << 16), k=st.integers(1, 1 << 16),
    batch=st.integers(1, 64), dt=st.sampled_from(["bf16", "f16", "f32"]), layout=st.sampled_from(["tn", "nt", "tt", "nn"]),
)
def test_signature_round_trips(op, m, n, k, batch, dt, layout):
    p = GemmProblem(op, m, n, k, batch if op == "bmm" else 1, dt, dt, dt, layout)
    assert GemmProblem.from_signature(p.signature()) == p


@pytest.mark.parametrize("dt, scale", [("e4m3", "row"), ("e5m2", "tensor"), ("e4m3", "block32"), ("e2m1x2", "block16")])
def test_scaled_signatures_round_trip(dt, scale):
    """Dtype names hold an 'x' themselves (e2m1x2): the a/b split must still find both."""
    p = GemmProblem("scaled_mm", 128, 256, 512, a_dtype=dt, b_dtype=dt, scale=scale)
    assert GemmProblem.from_signature(p.signature()) == p


@pytest.mark.parametrize(
    "kwargs, exc, words",
    [
        (dict(op="conv", m=1, n=1, k=1), PtcValueError, "op='conv'"),
        (dict(op="mm", m=0, n=1, k=1), PtcValueError, "m must be >= 1"),
        (dict(op="mm", m=1.5, n=1, k=1), PtcTypeError, "m must be an int"),
        (dict(op="mm", m=1, n=1, k=1, batch=2), PtcValueError, "needs op='bmm'"),
        (dict(op="mm", m=1, n=1, k=1, layout="tx"), PtcValueError, "layout='tx'"),
        (dict(op="mm", m=1, n=1, k=1, a_dtype="int8"), PtcValueError, "a_dtype='int8' is not a GEMM dtype"),
        (dict(op="scaled_mm", m=1, n=1, k=1, a_dtype="e4m3", b_dtype="e4m3"), PtcValueError, "needs scale="),
        (dict(op="scaled_mm", m=1, n=1, k=1, scale="row"), PtcValueError, "needs 8-bit inputs"),
        (dict(op="mm", m=1, n=1, k=1, scale="row"), PtcValueError, "only meaningful with op='scaled_mm'"),
        (dict(op="mm", m=1, n=1, k=1, a_dtype="bf16", b_dtype="f16"), PtcValueError, "differ"),
    ],
)
def test_bad_problems_raise_named_errors(kwargs, exc, words):
    with pytest.raises(exc, match=words.replace("(", r"\(").replace(")", r"\)")):
        GemmProblem(**kwargs)


def test_bad_signature():
    with pytest.raises(PtcValueError, match="not a GEMM problem signature"):
        GemmProblem.from_signature("mm:garbage")


def test_targets():
    assert target("h100") is TARGETS["H100_SXM"] and target("B200").arch == "100a"
    assert target("hopper").family == "hopper" and target("blackwell").two_cta
    assert TARGETS["H200_SXM"].cc == 90 and TARGETS["GB200"].cc == 100
    with pytest.raises(PtcValueError, match="target='A100' is not a known GPU; choose one of"):
        target("A100")
    with pytest.raises(PtcValueError, match="has no 4-bit"):
        TARGETS["H100_SXM"].peak_tflops(4)


def test_detect_maps_device_names_and_capabilities():
    assert detect("NVIDIA H200", (9, 0)).name == "H200_SXM"
    assert detect("NVIDIA B200", (10, 0)).name == "B200"
    assert detect("NVIDIA H800 PCIe", (9, 0)).name == "H100_SXM"  # unknown Hopper -> family reference
    assert detect("NVIDIA A100-SXM4-80GB", (8, 0)) is None
