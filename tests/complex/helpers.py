"""Shared pieces of the ptc.complex tests: the op table, tolerances, an eager-run rewrite."""

from __future__ import annotations

import math

import torch
from functorch.compile import make_boxed_func
from torch._functorch.aot_autograd import aot_function

import ptc.complex as pc
from ptc.complex.rewrite import Report, rewrite

TOL = {torch.complex64: dict(rtol=2e-5, atol=2e-6), torch.complex128: dict(rtol=1e-10, atol=1e-12)}


def aot(fn, report: Report | None = None):
    """``fn`` through AOTAutograd with ptc's decompositions and rewrite, run eagerly (no Inductor).

    The same graphs Inductor would get, minus the C++ compile: quick to check many ops.
    """

    def compiler(gm, inputs):
        return make_boxed_func(rewrite(gm, inputs, decompositions=pc.decompositions(), report=report))

    return aot_function(fn, fw_compiler=compiler, bw_compiler=compiler, decompositions=pc.decompositions())


def rel_close(actual, expected, dtype, *, scale=None):
    """Elementwise closeness relative to the size of the result, nan/inf where eager has them."""
    actual, expected = torch.as_tensor(actual), torch.as_tensor(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    tol = TOL[dtype]
    if not (expected.is_floating_point() or expected.is_complex()):
        assert torch.equal(actual, expected)
        return
    if scale is None:
        finite = expected[torch.isfinite(expected)] if expected.numel() else expected
        scale = finite.abs().max().item() if finite.numel() else 1.0
    torch.testing.assert_close(actual, expected, rtol=tol["rtol"], atol=tol["atol"] * max(1.0, scale), equal_nan=True)


def crandn(*shape, dtype=torch.complex64, gen=None, scale=1.0):
    return torch.randn(*shape, dtype=dtype, generator=gen) * scale


# name -> (fn, input kinds). Kinds: "c" complex, "r" real, "p" positive real, "u" complex in the unit disk.
OPS = {
    "add": (lambda a, b: a + b, "cc"),
    "add_alpha": (lambda a, b: torch.add(a, b, alpha=2.5), "cc"),
    "add_real": (lambda a, x: a + x, "cr"),
    "sub": (lambda a, b: a - b, "cc"),
    "rsub_scalar": (lambda a: 2.0 - a, "c"),
    "neg": (lambda a: -a, "c"),
    "mul": (lambda a, b: a * b, "cc"),
    "mul_real": (lambda a, x: x * a, "cr"),
    "mul_py_complex": (lambda a: a * (0.5 - 2j), "c"),
    "theta_1j": (lambda x: x * 1j, "r"),
    "exp_1j_theta": (lambda x: torch.exp(1j * x), "r"),
    "div": (lambda a, b: a / b, "cc"),
    "div_real": (lambda a, x: a / x, "cp"),
    "div_scalar": (lambda a: a / (3 - 4j), "c"),
    "real_div_complex": (lambda x, a: x / a, "rc"),
    "reciprocal": (lambda a: a.reciprocal(), "c"),
    "square": (lambda a: a.square(), "c"),
    "pow2": (lambda a: a**2, "c"),
    "pow3": (lambda a: a**3, "c"),
    "pow_half": (lambda a: a**0.5, "c"),
    "pow_complex": (lambda a, b: a**b, "uu"),
    "pow_float": (lambda a: a**1.7, "c"),
    "addcmul": (lambda a, b, c: torch.addcmul(a, b, c, value=0.5), "ccc"),
    "addcdiv": (lambda a, b, c: torch.addcdiv(a, b, c, value=0.5), "ccc"),
    "lerp": (lambda a, b: torch.lerp(a, b, 0.3), "cc"),
    "abs": (lambda a: a.abs(), "c"),
    "angle": (lambda a: a.angle(), "c"),
    "sgn": (lambda a: a.sgn(), "c"),
    "conj": (lambda a: a.conj() * 1, "c"),
    "conj_physical": (lambda a: torch.conj_physical(a), "c"),
    "exp": (lambda a: a.exp(), "c"),
    "expm1": (lambda a: a.expm1(), "u"),
    "log": (lambda a: a.log(), "c"),
    "log2": (lambda a: a.log2(), "c"),
    "log10": (lambda a: a.log10(), "c"),
    "log1p": (lambda a: a.log1p(), "u"),
    "sqrt": (lambda a: a.sqrt(), "c"),
    "rsqrt": (lambda a: a.rsqrt(), "c"),
    "sin": (lambda a: a.sin(), "c"),
    "cos": (lambda a: a.cos(), "c"),
    "tan": (lambda a: a.tan(), "c"),
    "sinh": (lambda a: a.sinh(), "c"),
    "cosh": (lambda a: a.cosh(), "c"),
    "tanh": (lambda a: a.tanh(), "c"),
    "asin": (lambda a: a.asin(), "c"),
    "acos": (lambda a: a.acos(), "c"),
    "atan": (lambda a: a.atan(), "c"),
    "asinh": (lambda a: a.asinh(), "c"),
    "acosh": (lambda a: a.acosh(), "c"),
    "atanh": (lambda a: a.atanh(), "c"),
    "sigmoid": (lambda a: a.sigmoid(), "c"),
    "isnan": (lambda a: a.isnan(), "c"),
    "isinf": (lambda a: a.isinf(), "c"),
    "isfinite": (lambda a: a.isfinite(), "c"),
    "eq": (lambda a, b: a == b, "cc"),
    "ne": (lambda a: a != a[..., :1], "c"),
    "logical_and": (lambda a, b: torch.logical_and(a * (a.real > 0), b), "cc"),
    "logical_or": (lambda a, b: torch.logical_or(a * (a.real > 0), b * (b.imag > 0)), "cc"),
    "logical_xor": (lambda a, x: torch.logical_xor(a * (a.real > 0), x * (x > 0)), "cr"),
    "any_all": (lambda a: torch.stack([(a * (a.real > 1)).any(1), (a * (a.imag > -1)).all(1)]), "c"),
    "ldexp": (lambda a, x: torch.ldexp(a, x.round().to(torch.int32)), "cr"),
    "scatter_reduce_add": (
        lambda a, b: a.scatter(1, torch.zeros_like(b.real, dtype=torch.long), b, reduce="add"), "cc"),
    "where": (lambda a, b: torch.where(a.real > 0, a, b), "cc"),
    "where_scalar": (lambda a: torch.where(a.imag > 0, a, 0j), "c"),
    "masked_fill": (lambda a: a.masked_fill(a.real < 0, 1 + 2j), "c"),
    "nan_to_num": (lambda a: torch.nan_to_num(a), "c"),
    "complex_ctor": (lambda x, y: torch.complex(x, y), "rr"),
    "polar": (lambda x, y: torch.polar(x, y), "pr"),
    "view_as_real": (lambda a: torch.view_as_real(a) * 2, "c"),
    "view_as_complex": (lambda x: torch.view_as_complex(torch.stack([x, x * 2], -1)) * 1, "r"),
    "real_imag": (lambda a: a.real * 2 + a.imag, "c"),
    "view_dtype": (lambda a: a.view(torch.float32 if a.dtype == torch.complex64 else torch.float64) * 2, "c"),
    "to_c128": (lambda a: a.to(torch.complex128) * 2, "c"),
    "real_to_complex": (lambda x: x.to(torch.complex64) + 1j, "r"),
    "full_complex": (lambda a: a + torch.full_like(a, 2 - 1j), "c"),
    "zeros_like": (lambda a: torch.zeros_like(a) + a, "c"),
    "transpose_contig": (lambda a: a.t().contiguous() * 2, "c"),
    "cat": (lambda a, b: torch.cat([a, b * 2]), "cc"),
    "stack": (lambda a, b: torch.stack([a, b], 1) * 2, "cc"),
    "flip": (lambda a: a.flip(-1) * 2, "c"),
    "roll": (lambda a: a.roll(3, -1) * 2, "c"),
    "index_select": (lambda a: a[:, [0, 2, 1]] * 2, "c"),
    "gather": (lambda a: torch.gather(a, 1, torch.zeros_like(a.real, dtype=torch.long)) * 2, "c"),
    "scatter_add": (lambda a, b: a.scatter_add(1, torch.zeros_like(b.real, dtype=torch.long), b), "cc"),
    "index_put": (lambda a, b: a.index_put((torch.tensor([0, 1]),), b[:2] * 2), "cc"),
    "pad": (lambda a: torch.nn.functional.pad(a, (1, 2)) * 2, "c"),
    "repeat": (lambda a: a.repeat(2, 1) * 2, "c"),
    "slice_scatter": (lambda a, b: torch.slice_scatter(a, b[:, :2] * 2, 1, 0, 2), "cc"),
    "sum": (lambda a: a.sum(), "c"),
    "sum_dim": (lambda a: a.sum(1), "c"),
    "mean": (lambda a: a.mean(1), "c"),
    "mean_all": (lambda a: a.mean(), "c"),
    "prod": (lambda a: (a * 0.3).prod(1), "c"),
    "prod_all": (lambda a: (a[:3] * 0.6).prod(), "c"),
    "cumsum": (lambda a: a.cumsum(1), "c"),
    "cumprod": (lambda a: (a * 0.5).cumprod(1), "c"),
    "var": (lambda a: a.var(1), "c"),
    "std": (lambda a: a.std(), "c"),
    "norm": (lambda a: torch.linalg.vector_norm(a, dim=1), "c"),
    "norm_1": (lambda a: torch.linalg.vector_norm(a, ord=1), "c"),
    "abs_sum": (lambda a: a.abs().sum(), "c"),
    "dot": (lambda a, b: torch.dot(a.flatten(), b.flatten()), "cc"),
    "vdot": (lambda a, b: torch.vdot(a.flatten(), b.flatten()), "cc"),
    "mm": (lambda a, b: (a @ b.mT) * 2, "cc"),
    "mv": (lambda a, b: (a @ b[0]) * 2, "cc"),
    "fft": (lambda a: torch.fft.fft(a * 2), "c"),
    "rfft_irfft": (lambda x: torch.fft.irfft(torch.fft.rfft(x) * 2j, n=x.shape[-1]), "r"),
}

# ops whose gradient is checked (first input requires grad; a real loss of the output)
GRAD_OPS = [
    "mul", "div", "abs", "sgn", "angle", "exp", "tanh", "log", "sqrt", "sin", "add", "sub",
    "mul_real", "exp_1j_theta", "view_as_real", "real_imag", "cat", "flip", "index_select", "pad",
    "sum_dim", "mean", "prod", "cumsum", "var", "norm", "vdot", "mm", "mv", "fft", "rfft_irfft",
    "polar", "complex_ctor", "reciprocal", "pow2", "sigmoid", "where", "conj", "masked_fill", "roll",
]


def make_inputs(kinds, dtype, shape=(6, 5), gen=None, layout="contiguous"):
    rdt = torch.float32 if dtype == torch.complex64 else torch.float64
    out = []
    for k in kinds:
        if k in "cu":
            if layout == "transposed":
                t = torch.randn(shape[::-1], dtype=dtype, generator=gen).t()
            elif layout == "strided":
                t = torch.randn(shape[0], shape[1] * 2, dtype=dtype, generator=gen)[:, ::2]
            else:
                t = torch.randn(shape, dtype=dtype, generator=gen)
            if k == "u":
                t = t * 0.3
            if layout == "conj":
                t = torch.randn(shape, dtype=dtype, generator=gen).conj()
                if k == "u":
                    t = t * 0.3
            out.append(t)
        elif k == "r":
            out.append(torch.randn(shape, dtype=rdt, generator=gen))
        elif k == "p":
            out.append(torch.rand(shape, dtype=rdt, generator=gen) + 0.5)
    return out


def loss(out):
    """A real, non-degenerate function of any output (complex outputs: both parts, weighted)."""
    if out.is_complex():
        r = torch.view_as_real(out.resolve_conj())
        w = torch.linspace(0.5, 1.5, r.numel(), dtype=r.dtype).reshape(r.shape)
        return (r * w).sum()
    if out.dtype == torch.bool:
        return None
    w = torch.linspace(0.5, 1.5, out.numel(), dtype=out.dtype).reshape(out.shape)
    return (out * w).sum()
