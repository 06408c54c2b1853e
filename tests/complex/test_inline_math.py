"""ptc's inline float32 sin, cos and hypot (ptc.complex.codegen.vector_math): accuracy, special values, fallback.

One compiled ``x -> (sin(x), cos(x))`` and one ``(x, y) -> hypot(x, y)`` on
4096 values are shared by the tests; every input is checked in ulps against
float64. Where this CPU or torch has no
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
    return _compat.INDUCTOR_CPP_VEC_MATH and isinstance(isa, (cpu_vec_isa.VecAVX2, cpu_vec_isa.VecAVX512))


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


# --- hypot -------------------------------------------------------------------

HYPOT_ULP = 1.5  # measured: 1.19 over 1e8 random pairs


@pytest.fixture(scope="module")
def hypot():
    torch._dynamo.reset()
    compiled = torch.compile(torch.hypot, backend=pc.backend(), dynamic=False)
    x = torch.linspace(-4.0, 4.0, N)
    _, codes = pc.generated_code(compiled, x, x.flip(0))
    return compiled, "\n".join(codes)


def _check_hypot(hypot, x, y, max_ulp=HYPOT_ULP):
    """Within ``max_ulp`` of float64's hypot where that is finite; eager's inf and nan elsewhere."""
    compiled, _ = hypot
    got = compiled(x, y)
    want = torch.hypot(x.double(), y.double())
    finite = torch.isfinite(want.float())
    ref32 = want.float().abs()
    ulp = (torch.nextafter(ref32, torch.tensor(math.inf)) - ref32).double()
    err = ((got.double() - want) / ulp).abs()[finite]
    if err.numel():
        i = int(err.argmax())
        assert err[i] <= max_ulp, f"hypot({x[finite][i].item()!r}, {y[finite][i].item()!r}) is {err[i].item():.2f} ulp off"
    torch.testing.assert_close(got[~finite], torch.hypot(x, y)[~finite], equal_nan=True, rtol=0, atol=0)
    return got


def test_hypot_code_is_inline_on_x86(hypot):
    _, code = hypot
    assert ("0x1p100f" in code) is _inline_here()


def test_hypot_over_all_magnitudes(hypot):
    """Pairs from 1e-45 to 3e38 (over- and underflowing squares go to Sleef's hypot), signs mixed."""
    gen = torch.Generator().manual_seed(0)
    for lo, hi in ((-2.0, 2.0), (-45.0, 38.5), (15.0, 25.0), (-25.0, -15.0)):
        mag = 10.0 ** (torch.rand(2, N, generator=gen, dtype=torch.float64) * (hi - lo) + lo)
        sign = torch.randint(0, 2, (2, N), generator=gen) * 2 - 1
        x, y = (mag * sign).float()
        _check_hypot(hypot, x, y)


def test_hypot_special_values(hypot):
    """C99: inf if either is infinite (even with a nan), else nan with a nan; zeros of both signs."""
    inf, nan = math.inf, math.nan
    pairs = [(inf, nan), (nan, -inf), (nan, 1.0), (1.0, nan), (0.0, -0.0), (-0.0, 0.0), (3.0, 4.0), (1e-45, 0.0),
             (3e38, 3e38), (-inf, -inf)]
    x = _tiled([p[0] for p in pairs])
    y = _tiled([p[1] for p in pairs])
    _check_hypot(hypot, x, y)
    x = _tiled([3.0, -0.0, 5e-20, 1.0, 0.5, -2.0, 7.0])  # all on the fast path
    y = _tiled([4.0, 1.0, 5e-20, -1e-3, 1e19, -2.0, 0.0])
    _check_hypot(hypot, x, y)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.floats(width=32, allow_nan=True, allow_infinity=True), min_size=37, max_size=37),
    st.lists(st.floats(width=32, allow_nan=True, allow_infinity=True), min_size=37, max_size=37),
)
def test_hypot_any_floats(hypot, xs, ys):
    _check_hypot(hypot, _tiled(xs), _tiled(ys))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_abs_writes_hypot_where_inline(dtype):
    """complex64 ``abs`` is ``hypot`` where ptc writes it inline; complex128 keeps the one-division formula."""
    from ptc.complex.codegen import inline_hypot

    z = torch.randn(N, dtype=dtype, generator=torch.Generator().manual_seed(1))
    torch._dynamo.reset()
    got, codes = pc.generated_code(torch.compile(torch.abs, backend=pc.backend()), z)
    code = "\n".join(codes)
    torch.testing.assert_close(got, z.abs())
    inline = inline_hypot(z.real.dtype)
    assert inline is (dtype == torch.complex64 and _inline_here())
    assert ("hypot" in code) is inline
