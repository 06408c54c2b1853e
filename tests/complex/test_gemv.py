"""``mv`` as a one-column complex GEMM (ptc.complex.gemv).

Each layout is checked twice: the result against eager, and that the
rewritten graph calls ``mm`` (never ATen's slow complex ``mv``) on the
matrix's own memory.
"""

import pytest
import torch
from functorch.compile import make_boxed_func
from hypothesis import given, settings
from hypothesis import strategies as st
from torch._functorch.aot_autograd import aot_function

import ptc.complex as pc
from ptc.complex.rewrite import rewrite

from .helpers import rel_close

aten = torch.ops.aten


def _rewritten(fn, *args):
    """``(result, [every rewritten graph])`` for ``fn(*args)`` under ptc's rewrite, run eagerly."""
    graphs = []

    def compiler(gm, inputs):
        graphs.append(rewrite(gm, inputs, decompositions=pc.decompositions()))
        return make_boxed_func(graphs[-1])

    out = aot_function(fn, fw_compiler=compiler, bw_compiler=compiler, decompositions=pc.decompositions())(*args)
    return out, graphs


def _targets(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def _largest_write(gm):
    """The most elements any non-view op of ``gm`` writes."""
    seen = []
    for n in gm.graph.nodes:
        val = n.meta.get("val")
        is_view = n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) and any(
            r.alias_info is not None for r in n.target._schema.returns
        )
        if n.op == "call_function" and isinstance(val, torch.Tensor) and not is_view:
            seen.append(val.numel())
    return max(seen)


def _matrix(layout, dtype, gen):
    m, n = 7, 5
    if layout == "row":
        return torch.randn(m, n, dtype=dtype, generator=gen)
    if layout == "row_conj":
        return torch.randn(m, n, dtype=dtype, generator=gen).conj()
    if layout == "row_padded":  # rows further apart than their length (a column slice)
        return torch.randn(m, n + 3, dtype=dtype, generator=gen)[:, 1 : n + 1]
    if layout == "col":
        return torch.randn(n, m, dtype=dtype, generator=gen).t()
    if layout == "col_conj":
        return torch.randn(n, m, dtype=dtype, generator=gen).mH
    if layout == "strided":  # neither dim has unit stride
        return torch.randn(2 * m, 2 * n, dtype=dtype, generator=gen)[::2, ::2]
    if layout == "neg":
        return torch._neg_view(torch.randn(m, n, dtype=dtype, generator=gen))
    if layout == "neg_conj":
        return torch._neg_view(torch.randn(m, n, dtype=dtype, generator=gen)).conj()
    raise AssertionError(layout)


LAYOUTS = ["row", "row_conj", "row_padded", "col", "col_conj", "strided", "neg", "neg_conj"]


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=["c64", "c128"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_mv_layouts(layout, dtype):
    gen = torch.Generator().manual_seed(0)
    a = _matrix(layout, dtype, gen)
    x = torch.randn(a.shape[1], dtype=dtype, generator=gen)
    got, (gm,) = _rewritten(torch.mv, a, x)
    rel_close(got, torch.mv(a, x), dtype)
    targets = _targets(gm)
    assert aten.mm.default in targets and aten.mv.default not in targets, targets
    assert _largest_write(gm) < a.numel()  # the matrix is read where it lies


@pytest.mark.parametrize("view", ["mH", "t", "conj"])
def test_mv_of_a_view_made_in_the_graph_reads_the_input(view):
    """``u.mH @ x`` inside the function: the graph clones the view, ptc reads the input instead.

    Nothing as large as the matrix is written (the GEMM's operands are views of ``u``).
    """
    gen = torch.Generator().manual_seed(3)
    u = torch.randn(9, 8, dtype=torch.complex64, generator=gen)
    make = {"mH": lambda u: u.mH, "t": lambda u: u.t(), "conj": lambda u: u.conj()}[view]
    x = torch.randn(make(u).shape[1], dtype=torch.complex64, generator=gen)

    def f(u, x):
        return make(u) @ x

    got, (gm,) = _rewritten(f, u, x)
    rel_close(got, f(u, x), torch.complex64)
    assert aten.mv.default not in _targets(gm)
    assert _largest_write(gm) < u.numel()


def test_mv_computed_matrix_and_vector():
    """Neither operand is a graph input: both are interleaved once, by the kernels that compute them."""
    gen = torch.Generator().manual_seed(1)
    a = torch.randn(6, 4, dtype=torch.complex64, generator=gen)
    x = torch.randn(4, dtype=torch.complex64, generator=gen)

    def f(a, x):
        return ((a * 2j) @ torch.exp(x)) + 1

    got, (gm,) = _rewritten(f, a, x)
    rel_close(got, f(a, x), torch.complex64)
    assert aten.mv.default not in _targets(gm)


def test_mv_gradients():
    """Both of mv's backward products (outer for the matrix, mv with a^H for the vector) match eager."""
    gen = torch.Generator().manual_seed(2)
    a0 = torch.randn(6, 4, dtype=torch.complex128, generator=gen)
    x0 = torch.randn(4, dtype=torch.complex128, generator=gen)

    def grads(fn):
        a, x = a0.clone().requires_grad_(), x0.clone().requires_grad_()
        (fn(a, x).abs() ** 2).sum().backward()
        return a.grad, x.grad

    def f(a, x):
        return torch.mv(a, x)

    ref = grads(f)
    got = grads(lambda a, x: _rewritten(f, a, x)[0])
    for g, r in zip(got, ref):
        rel_close(g, r, torch.complex128)


def test_mv_special_values():
    """inf and nan travel as through eager's one-column GEMM (BLAS's arithmetic, not Annex G)."""
    inf, nan = float("inf"), float("nan")
    a = torch.tensor(
        [[1 + 1j, 2, 0], [complex(inf, 0), 1j, 0], [0, 0, complex(0, inf)], [1, 1, complex(nan, 0)]],
        dtype=torch.complex64,
    )
    x = torch.tensor([1, 0, 1], dtype=torch.complex64)
    got, _ = _rewritten(torch.mv, a, x)
    ref = torch.mm(a, x[:, None])[:, 0]
    assert torch.equal(torch.isfinite(got), torch.isfinite(torch.mv(a, x)))
    assert torch.equal(torch.view_as_real(got).isnan(), torch.view_as_real(ref).isnan())
    assert torch.equal(torch.view_as_real(got).isinf(), torch.view_as_real(ref).isinf())


def test_coverage_says_how_mv_runs():
    (entry,) = [e for e in pc.coverage() if e.op == "mv.default"]
    assert entry.status == "library" and "one-column" in entry.note


MATRIX_LAYOUTS = ["contiguous", "transposed", "sliced", "conj", "transposed_conj"]


def _laid_out(shape, dtype, layout, gen):
    """A leaf tensor in ``layout`` (strides kept by clone) and whether it is used through its conj bit."""
    if layout.startswith("transposed"):
        t = torch.randn(shape[::-1], dtype=dtype, generator=gen).t()
    elif layout == "sliced":
        t = torch.randn(*shape[:-1], shape[-1] * 2, dtype=dtype, generator=gen)[..., ::2]
    else:
        t = torch.randn(shape, dtype=dtype, generator=gen)
    return t, layout.endswith("conj")


@settings(max_examples=20, deadline=None)
@given(
    m=st.integers(1, 6),
    n=st.integers(1, 6),
    dtype=st.sampled_from([torch.complex64, torch.complex128]),
    a_layout=st.sampled_from(MATRIX_LAYOUTS),
    x_layout=st.sampled_from(["contiguous", "sliced", "conj"]),
    seed=st.integers(0, 99),
)
def test_mv_property(m, n, dtype, a_layout, x_layout, seed):
    """Any shape and layout of either operand (conj bits included), with fused neighbours, forward and gradients."""
    gen = torch.Generator().manual_seed(seed)
    (a0, a_conj), (x0, x_conj) = _laid_out((m, n), dtype, a_layout, gen), _laid_out((n,), dtype, x_layout, gen)

    def f(a, x):
        return (a @ (x * 1j)) * 2 + 1

    def run(fn):
        a, x = a0.clone().requires_grad_(), x0.clone().requires_grad_()
        out = fn(a.conj() if a_conj else a, x.conj() if x_conj else x)
        torch.view_as_real(out).sum().backward()
        return out.detach(), a.grad, x.grad

    got, ref = run(lambda a, x: _rewritten(f, a, x)[0]), run(f)
    for g, r in zip(got, ref):
        rel_close(g, r, dtype)


@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, 2), (1j, -1j), (0, 1), (0, 3 + 1j)])
@pytest.mark.parametrize("self_shape", [(7,), (1,)])
def test_addmv(beta, alpha, self_shape):
    """beta * self + alpha * (a @ x) through the one-column GEMM; beta == 0 ignores self's nan, as eager."""
    gen = torch.Generator().manual_seed(4)
    a = torch.randn(5, 7, dtype=torch.complex64, generator=gen).t()
    x = torch.randn(5, dtype=torch.complex64, generator=gen)
    s = torch.randn(self_shape, dtype=torch.complex64, generator=gen)
    if beta == 0:
        s[0] = complex(float("nan"), float("inf"))

    def f(s, a, x):
        return torch.addmv(s, a, x, beta=beta, alpha=alpha)

    got, (gm,) = _rewritten(f, s, a, x)
    rel_close(got, f(s, a, x), torch.complex64)
    targets = _targets(gm)
    assert aten.mm.default in targets and aten.addmv.default not in targets, targets
