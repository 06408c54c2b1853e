"""Epilogues: reference semantics, EVT source, and fusibility decisions before code generation."""

import logging

import pytest
import torch
import torch.nn.functional as F
from expecttest import assert_expected_inline

from ptc.errors import PtcTypeError, PtcValueError
from ptc.gemm import Epilogue, GemmProblem, check_fusible

needs_ops = pytest.mark.skipif(
    not __import__("ptc")._compat.CUTLASS_OPERATORS, reason="needs pip install 'ptc[gemm]' (in the test extra)"
)

P = GemmProblem("mm", 256, 512, 128)


def test_parse_and_errors():
    assert Epilogue.parse("bias + relu").steps == ("bias", "relu")
    assert Epilogue.parse(None).spec() == "" and not Epilogue.parse("")
    with pytest.raises(PtcValueError, match="epilogue step 1 is 'swish'"):
        Epilogue.parse("bias,swish")
    with pytest.raises(PtcValueError, match="'amax' must be the last"):
        Epilogue.parse("amax,relu")
    with pytest.raises(PtcValueError, match="at most one bias"):
        Epilogue.parse("bias,relu,colbias")
    with pytest.raises(PtcTypeError, match="epilogue must be a string"):
        Epilogue.parse(3)


def test_reference_semantics_match_torch():
    g = torch.Generator().manual_seed(0)
    acc = torch.randn(8, 16, generator=g)
    bias, res = torch.randn(16, generator=g), torch.randn(8, 16, generator=g)
    sa, sb = torch.rand(8, 1, generator=g), torch.rand(16, generator=g)
    cases = {
        "bias,relu": F.relu(acc + bias),
        "bias,gelu": F.gelu(acc + bias),
        "bias,gelu_tanh,residual": F.gelu(acc + bias, approximate="tanh") + res,
        "silu,scale": F.silu(acc) * 0.25,
        "rowscale,sigmoid": torch.sigmoid(acc * sa * sb),
        "colbias,tanh": torch.tanh(acc + sa),
    }
    for spec, want in cases.items():
        epi = Epilogue.parse(spec, alpha=0.25)
        ops = {"bias": sa if "colbias" in spec else bias, "residual": res, "scale_a": sa, "scale_b": sb}
        got = epi.apply(acc, torch.float32, **{k: ops[k] for k in epi.operand_names()})
        torch.testing.assert_close(got, want, msg=spec)
    d, amax = Epilogue.parse("relu,amax").apply(acc, torch.bfloat16)
    assert d.dtype == torch.bfloat16 and amax.shape == (8, 1)
    torch.testing.assert_close(amax, F.relu(acc).abs().amax(1, keepdim=True))


def test_evt_source_rewrites_silu_and_gelu_tanh_exactly():
    assert_expected_inline(Epilogue.parse("bias,gelu_tanh,residual").evt_source(), """\
def epilogue(accum, bias, residual):
    v1 = accum + bias
    v2 = v1 * 0.044715
    v3 = v2 * v1
    v4 = v3 * v1
    v5 = v1 + v4
    v6 = v5 * 1.5957691216057308
    v7 = sigmoid(v6)
    v8 = v1 * v7
    D = v8 + residual
    return D
""")
    # the rewrites compute the same function
    x = torch.linspace(-6, 6, 101, dtype=torch.float64)
    c = 2 * (2 / torch.pi) ** 0.5
    torch.testing.assert_close(x * torch.sigmoid(c * (x + 0.044715 * x**3)), F.gelu(x, approximate="tanh"))
    assert "sigmoid(accum)" in Epilogue.parse("silu").evt_source()
    assert_expected_inline(Epilogue.parse("relu,amax").evt_source(), """\
def epilogue(accum):
    v1 = relu(accum)
    rmax = max(v1, dim=[1])
    rmin = min(v1, dim=[1])
    D = v1 * 1.0
    return D, rmax, rmin
""")


@needs_ops
@pytest.mark.parametrize(
    "spec, target, fused, reason",
    [
        ("bias,relu", "B200", True, ""),
        ("bias,silu", "B200", True, ""),  # cutlass.operators rejects silu(); ptc's x*sigmoid(x) passes
        ("bias,gelu_tanh,residual", "B200", True, ""),
        ("colbias,sigmoid,scale", "B200", True, ""),
        ("rowscale,tanh", "B200", True, ""),
        ("bias,gelu", "B200", False, "exact GELU needs erf"),
        ("relu,amax", "B200", False, "fails to compile"),
        ("bias,relu", "H100_SXM", False, "no epilogue-fusion kernels for sm_90a"),
        ("", "B200", False, "no epilogue"),
    ],
)
def test_fusibility_table(spec, target, fused, reason, caplog):
    with caplog.at_level(logging.INFO, logger="ptc.gemm"):
        d = check_fusible(spec, P, target)
    assert d.fused is fused, d.reason
    assert reason in d.reason
    if fused:
        assert d.efc_operators > 0 and d.source.startswith("def epilogue(accum")
    elif spec:
        assert reason in caplog.text  # every fallback is logged with its reason


@needs_ops
def test_batched_epilogues_are_not_fused():
    d = check_fusible("bias,relu", GemmProblem("bmm", 64, 64, 64, batch=4), "B200")
    assert not d.fused and "bmm" in d.reason


@needs_ops
def test_library_rejections_become_reasons(monkeypatch):
    """What the library's own argument check rejects is a reason, never an exception."""
    from ptc.gemm import catalog

    monkeypatch.setattr(Epilogue, "evt_source", lambda self: "def epilogue(accum):\n    D = silu(accum)\n    return D\n")
    catalog._CACHE.clear()
    d = check_fusible("relu", P, "B200")
    assert not d.fused and d.reason.startswith("cutlass.operators rejects it: KeyError")
