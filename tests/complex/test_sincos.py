"""ptc's inline float32 sin/cos (ptc.complex.codegen.vector_sincos): accuracy, special values, fallback.

One compiled ``x -> (sin(x), cos(x))`` on 4096 values is shared by the tests;
every input is checked in ulps against float64. Where this CPU or torch has no
inline path (not x86 AVX2/AVX-512, or no hook) the same checks run on
Inductor's own code.
"""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import ptc.complex as pc
from ptc import _compat
from ptc.complex.codegen import SINCOS_LIMIT

N = 4096
MAX_ULP = 2.0  # measured: 1.53 over every float32 in [1e-6, 32768)
FALLBACK_ULP = 3.5  # Sleef's u35 functions, which Inductor calls for the vectors that leave the range


def _inline_here() -> bool:
    from torch._inductor import cpu_vec_isa

    isa = cpu_vec_isa.pick_vec_isa()
    return _compat.INDUCTOR_CPP_VEC_SINCOS and isinstance(isa, (cpu_vec_isa.VecAVX2, cpu_vec_isa.VecAVX512))


@pytest.fixture(scope="module")
def sincos():
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: (torch.sin(x), torch.cos(x)), backend=pc.backend(), dynamic=False)
    x = torch.linspace(-4.0, 4.0, N)
    _, codes = pc.generated_code(compiled, x)
    return compiled, "\n".join(codes)


def _ulps(got, x):
    """|got - f(x)| in ulps of f(x) rounded to float32, f in float64, for f = sin, cos."""
    out = []
    for value, ref in zip(got, (torch.sin(x.double()), torch.cos(x.double()))):
        ref32 = ref.float().abs()
        ulp = (torch.nextafter(ref32, torch.tensor(math.inf)) - ref32).double()
        out.append(((value.double() - ref) / ulp).abs())
    return out


def _tiled(values):
    """``values`` (a few dozen) repeated to the compiled length N."""
    return torch.tensor(values * (N // len(values) + 1), dtype=torch.float32)[:N]


def _check(sincos, x, max_ulp):
    compiled, _ = sincos
    got = compiled(x)
    for name, value, err in zip(("sin", "cos"), got, _ulps(got, x)):
        finite = torch.isfinite(x)
        assert torch.isnan(value[~finite]).all(), (name, x[~finite], value[~finite])
        worst = int(err[finite].argmax()) if finite.any() else None
        if worst is not None:
            at = x[finite][worst].item()
            assert err[finite][worst] <= max_ulp, f"{name}({at!r}) is {err[finite][worst].item():.2f} ulp off"
    return got


def test_code_is_inline_on_x86(sincos):
    """On AVX2/AVX-512 the kernel computes sin/cos inline and keeps Sleef only for out-of-range vectors."""
    _, code = sincos
    if _inline_here():
        assert "0.6366197723675814f" in code  # 2/pi: the quadrant
        assert code.count(".sin()") == 1 and code.count(".cos()") == 1  # the fallback inside each lambda
    else:
        assert "0.6366197723675814f" not in code


def test_dense_range(sincos):
    """Evenly spaced values over [-SINCOS_LIMIT, SINCOS_LIMIT] and over [-4, 4]."""
    for lo, hi in ((-SINCOS_LIMIT, SINCOS_LIMIT), (-4.0, 4.0), (-1e-3, 1e-3)):
        for start in range(4):
            x = torch.linspace(lo, hi, N * 4, dtype=torch.float64)[start::4].float()
            _check(sincos, x, MAX_ULP)


def test_near_multiples_of_half_pi(sincos):
    """The float32 values nearest k*pi/2 (where the reduction cancels most), k up to the range's end."""
    k = torch.arange(1, int(SINCOS_LIMIT / (math.pi / 2)), dtype=torch.float64)
    k = k[torch.linspace(0, len(k) - 1, N).long()]
    near = (k * (math.pi / 2)).float()
    for x in (near, torch.nextafter(near, torch.zeros(N)), -near):
        _check(sincos, x, MAX_ULP)


def test_special_values(sincos):
    """sin(+-0) = +-0, cos(+-0) = 1, subnormals and the smallest normals (vectors of finite values only,
    so the inline code computes them); nan and inf give nan."""
    compiled, _ = sincos
    tiny = float(np.finfo(np.float32).tiny)
    x = _tiled([0.0, -0.0, 1e-45, -1e-45, tiny, -tiny, 1e-20, math.pi, -math.pi, -0.0, 0.0])
    s, c = _check(sincos, x, MAX_ULP)
    zero = x == 0
    assert torch.equal(torch.signbit(s[zero]), torch.signbit(x[zero]))
    assert (c[zero] == 1).all()
    small = (x.abs() < 1e-19) & (x != 0)
    assert torch.equal(s[small], x[small]) and (c[small] == 1).all()
    x = _tiled([math.nan, 1.0, -math.nan, 0.5, math.inf, -math.inf, -0.0])
    _check(sincos, x, MAX_ULP)


def test_out_of_range_vectors_fall_back(sincos):
    """A vector with one |x| > SINCOS_LIMIT goes whole to Inductor's own sin/cos: large values stay
    accurate (Payne-Hanek in Sleef), in-range neighbours too."""
    x = torch.linspace(-3.0, 3.0, N)
    big = torch.tensor([SINCOS_LIMIT * 1.5, 1e5, 3e7, 1e20, 1e30, -3.4e38, 2.0**64, -123456.7])
    x[::17][: len(big)] = big
    x[1000::97] = torch.logspace(4.6, 38, len(x[1000::97]))
    _check(sincos, x, FALLBACK_ULP)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(width=32, min_value=-SINCOS_LIMIT, max_value=SINCOS_LIMIT), min_size=37, max_size=37))
def test_any_in_range_float(sincos, values):
    _check(sincos, _tiled(values), MAX_ULP)


@settings(max_examples=15, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=True, allow_infinity=True), min_size=37, max_size=37))
def test_any_float(sincos, values):
    _check(sincos, _tiled(values), FALLBACK_ULP)


def test_complex_exp_uses_it(sincos):
    """exp(1j*theta) of complex64 is cos + i sin through the same code: within 2 ulp-ish of eager."""
    theta = torch.linspace(-100.0, 100.0, N)
    torch._dynamo.reset()
    got = torch.compile(lambda t: torch.exp(1j * t), backend=pc.backend())(theta)
    want = torch.exp(1j * theta.double())
    assert (got.to(torch.complex128) - want).abs().max() <= 4 * 2.0**-24
