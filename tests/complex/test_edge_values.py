"""Values where ptc's elementwise rules and eager parted: branch cuts with signed zeros, zero
bases of powers, overflowing hyperbolic parts, and a scatter addressed by storage strides.
Each case is compared with eager (nan where eager has nan), on both complex dtypes, through
the eager-run rewrite (the graphs Inductor gets) and, where Inductor mattered, through it."""

import pytest
import torch

import ptc.complex as pc

from .helpers import aot

DTYPES = [torch.complex64, torch.complex128]


def _same(got, want, dtype):
    tol = dict(rtol=2e-6, atol=1e-6) if dtype == torch.complex64 else dict(rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got, want, equal_nan=True, **tol)


def _c(values, dtype):
    return torch.tensor(values, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_acosh_on_the_real_segment_keeps_the_sign_of_the_imaginary_zero(dtype):
    """acosh of a real z in (-1, 1) is i acos(z), of the sign of Im z: the rule chose the sign
    from its real part, a rounding residue there (Im sign flipped at random; -0.0 ignored)."""
    x = torch.linspace(-0.99, 0.99, 199, dtype=torch.float64)
    z = torch.cat([torch.complex(x, torch.zeros_like(x)), torch.complex(x, torch.full_like(x, -0.0))]).to(dtype)
    _same(aot(torch.acosh)(z), torch.acosh(z), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_asin_acos_of_real_numbers_and_asinh_on_the_negative_zero_side(dtype):
    """asinh mirrored Re z < 0 but not Re z = -0.0 (asin and acos of a real number pass -0.0):
    the square root landed on the cancelling side (asin(3000) off by 4%, asinh(-0 + 5912i) = -inf)."""
    big = [1.5, 30.0, 3000.0, 3e5, 3e7]
    real = _c([complex(v, 0.0) for v in big] + [complex(-v, 0.0) for v in big] + [complex(v, -0.0) for v in big], dtype)
    imag = _c([complex(-0.0, v) for v in (1.5, 30.0, 300.0, 5912.0, 3e7)], dtype)
    for op, z in ((torch.asin, real), (torch.acos, real), (torch.asinh, imag)):
        _same(aot(op)(z), op(z), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_zero_to_a_power(dtype):
    """exp(b log 0) is nan; eager gives 0 for Re b > 0, inf + nan i for Re b < 0, nan at Re b = 0."""
    z = _c([0j, 0j, 0j, 0j, 0j, 1 + 1j], dtype)
    p = _c([1.5, 0.5 + 0.25j, -1.5, -1 + 1j, 0.5j, 0.7], dtype)

    def f(z, p):
        return z ** p, z ** 1.5, z ** (0.5 + 0.25j), 2.0 ** (z * 0 + p)

    for got, want in zip(aot(f)(z, p), f(z, p)):
        _same(got, want, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_hyperbolic_parts_that_overflow_times_an_exact_zero(dtype):
    """sinh(100 + 0j) is inf + 0j in eager (C99); the rule multiplied cosh(100) = inf by sin(0)."""
    big = 100.0 if dtype == torch.complex64 else 800.0
    axis = _c([complex(big, 0.0), complex(-big, 0.0), complex(big, -0.0), 1 + 2j], dtype)
    imag = _c([complex(0.0, big), complex(-0.0, -big), complex(0.0, -big), 1 + 2j], dtype)
    for op, z in ((torch.sinh, axis), (torch.cosh, axis), (torch.sin, imag), (torch.cos, imag)):
        got, want = aot(op)(z), op(z)
        _same(got, want, dtype)
        assert torch.equal(torch.signbit(torch.view_as_real(got)), torch.signbit(torch.view_as_real(want))), op


@pytest.mark.parametrize("dtype", DTYPES)
def test_as_strided_scatter_addresses_the_complex_storage(dtype):
    """Its size, strides and offset address self's storage; applied to each part's plane they
    addressed the planes' storage (wrong for every shape on the eager-run rewrite; under
    Inductor a one-element complex128 input got the wrong value and was written in place)."""

    def f(x, src):
        return torch.as_strided_scatter(x, src, (2,), (2,), 1)

    x, src = torch.randn(6, dtype=dtype), torch.randn(2, dtype=dtype)
    _same(aot(f)(x, src), f(x, src), dtype)

    def g(x, src):  # a transposed input: its clone keeps the transposed layout
        return torch.as_strided_scatter(x, src, (2, 2), (1, 3), 1)

    xt, src2 = torch.randn(3, 4, dtype=dtype).t(), torch.randn(2, 2, dtype=dtype)
    _same(aot(g)(xt, src2), g(xt, src2), dtype)

    def one(x, src):
        return torch.as_strided_scatter(x, src, (1,), (1,), 0)

    x1, src1 = _c([1 + 2j], dtype), _c([3 + 4j], dtype)
    torch._dynamo.reset()
    got = torch.compile(one, backend=pc.backend())(x1, src1)
    _same(got, one(x1, src1), dtype)
    assert torch.equal(x1, _c([1 + 2j], dtype)), "the input was written"

