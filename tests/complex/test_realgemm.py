"""Complex64 GEMMs as one real GEMM on oneDNN (ptc.complex.realgemm).

The real form must give ATen's product to rounding for every operand layout
(row- and column-major, conj and neg bits, computed operands, ``addmm``'s
scalings), forward and backward, and be chosen only where asked for: under
``gemm="auto"`` by timing once per shape, never for complex128, symbolic or
empty shapes, nor when oneDNN is switched off.
"""

import warnings

import pytest
import torch
from functorch.compile import make_boxed_func
from hypothesis import example, given, settings
from hypothesis import strategies as st
from torch._functorch.aot_autograd import aot_function

import ptc.complex as pc
from ptc.complex import realgemm
from ptc.complex.pair import Pair
from ptc.complex.rewrite import Report, rewrite
from ptc.errors import PtcValueError

pytestmark = pytest.mark.skipif(not realgemm.available(), reason="this torch has no oneDNN")

aten = torch.ops.aten


def _rewritten(fn, *args, gemm="onednn"):
    """``(result, report)`` for ``fn(*args)`` under ptc's rewrite (forward and backward), run eagerly."""
    report = Report()

    def compiler(gm, inputs):
        return make_boxed_func(rewrite(gm, inputs, decompositions=pc.decompositions(), report=report, gemm=gemm))

    out = aot_function(fn, fw_compiler=compiler, bw_compiler=compiler, decompositions=pc.decompositions())(*args)
    return out, report


def _operand(layout, rows, cols, gen):
    """A complex64 ``rows x cols`` matrix laid out as ``layout`` says."""
    if layout == "row":
        return torch.randn(rows, cols, dtype=torch.complex64, generator=gen)
    if layout == "col":
        return torch.randn(cols, rows, dtype=torch.complex64, generator=gen).mT
    if layout == "conj":
        return torch.randn(rows, cols, dtype=torch.complex64, generator=gen).conj()
    if layout == "adjoint":
        return torch.randn(cols, rows, dtype=torch.complex64, generator=gen).mH
    if layout == "neg":
        return torch._neg_view(torch.randn(rows, cols, dtype=torch.complex64, generator=gen))
    if layout == "padded":  # rows further apart than their length
        return torch.randn(rows, cols + 3, dtype=torch.complex64, generator=gen)[:, 1 : cols + 1]
    raise AssertionError(layout)


LAYOUTS = ["row", "col", "conj", "adjoint", "neg", "padded"]


@pytest.mark.parametrize("left", LAYOUTS)
@pytest.mark.parametrize("right", ["row", "col", "adjoint"])
def test_mm_of_graph_inputs_in_every_layout_equals_atens(left, right):
    gen = torch.Generator().manual_seed(0)
    a, b = _operand(left, 9, 13, gen), _operand(right, 13, 6, gen)
    out, report = _rewritten(torch.mm, a, b)
    torch.testing.assert_close(out, a @ b)
    assert not out.is_conj()
    assert report.real_gemm["mm.default"] == 1


def test_mm_of_computed_operands_equals_atens():
    gen = torch.Generator().manual_seed(1)
    a, b = _operand("row", 8, 5, gen), _operand("col", 5, 7, gen)

    def f(a, b):
        return torch.sigmoid((a * 1j + 2).real).to(torch.complex64) * a @ (b.conj() * 3).mT.mT

    out, report = _rewritten(f, a, b)
    torch.testing.assert_close(out, f(a, b))
    assert report.real_gemm["mm.default"] == 1


@pytest.mark.parametrize("beta, alpha", [(1, 1), (0.5, 2), (0, 1), (1j, 2 - 1j)])
def test_addmm_equals_atens(beta, alpha):
    gen = torch.Generator().manual_seed(2)
    a, b = _operand("row", 6, 4, gen), _operand("col", 4, 5, gen)
    bias = torch.randn(5, dtype=torch.complex64, generator=gen)
    if beta == 0:
        bias = bias * float("nan")  # as in eager, beta == 0 ignores it
    out, report = _rewritten(lambda s, a, b: torch.addmm(s, a, b, beta=beta, alpha=alpha), bias, a, b)
    torch.testing.assert_close(out, torch.addmm(bias, a, b, beta=beta, alpha=alpha))
    assert report.real_gemm["addmm.default"] == 1


def test_complex_linear_gradients_equal_eagers():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(16, 12, dtype=torch.complex64, generator=gen, requires_grad=True)
    w = torch.randn(10, 12, dtype=torch.complex64, generator=gen, requires_grad=True)
    b = torch.randn(10, dtype=torch.complex64, generator=gen, requires_grad=True)

    def loss(x, w, b):
        y = torch.nn.functional.linear(x, w, b)
        return (y.abs() ** 2).sum() + (y.conj() @ w).real.sum()

    expected = torch.autograd.grad(loss(x, w, b), (x, w, b))
    out, report = _rewritten(loss, x, w, b)
    got = torch.autograd.grad(out, (x, w, b))
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
    assert sum(report.real_gemm.values()) >= 4  # forward and backward GEMMs alike


@settings(max_examples=25, deadline=None)
@given(
    m=st.integers(1, 9), k=st.integers(1, 9), n=st.integers(1, 9),
    left=st.sampled_from(LAYOUTS), right=st.sampled_from(LAYOUTS), seed=st.integers(0, 2**16),
)
@example(m=2, k=1, n=1, left="col", right="row", seed=0)  # a column of one: contiguous, stride 2 (found in CI)
def test_the_real_form_is_the_product_for_any_shape_and_layout(m, k, n, left, right, seed):
    """``realgemm.mm`` run eagerly on the pairs of two operands is their product."""
    gen = torch.Generator().manual_seed(seed)
    a, b = _operand(left, m, k, gen), _operand(right, k, n, gen)
    got = realgemm.mm(None, Pair.of(a), Pair.of(b)).complex()
    torch.testing.assert_close(got, a @ b)


def test_inductor_compiles_the_real_form():
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(32, 24, dtype=torch.complex64, generator=gen)
    w = torch.randn(24, 16, dtype=torch.complex64, generator=gen, requires_grad=True)

    def f(x, w):
        h = x @ w
        return (h * torch.sigmoid(h.abs())).abs().sum()

    backend = pc.backend(gemm="onednn", strict=True)
    compiled = torch.compile(f, backend=backend)
    expected = torch.autograd.grad(f(x, w), w)[0]
    out = compiled(x, w)
    torch.testing.assert_close(out, f(x, w), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(torch.autograd.grad(compiled(x, w), w)[0], expected, rtol=1e-4, atol=1e-4)
    assert backend.report.real_gemm["mm.default"] >= 2 and not backend.report.stock_graphs


def test_aten_keeps_every_gemm_on_aten():
    gen = torch.Generator().manual_seed(5)
    a, b = _operand("row", 70, 70, gen), _operand("row", 70, 70, gen)
    out, report = _rewritten(torch.mm, a, b, gemm="aten")
    torch.testing.assert_close(out, a @ b)
    assert report.library["mm.default"] == 1 and not report.real_gemm


def test_only_complex64_gemms_of_static_nonempty_shapes_qualify():
    gen = torch.Generator().manual_seed(6)
    a, b = _operand("row", 5, 4, gen), _operand("row", 4, 3, gen)
    out, report = _rewritten(torch.mm, a.to(torch.complex128), b.to(torch.complex128))
    assert not report.real_gemm
    out, report = _rewritten(torch.mm, a[:, :0], b[:0])
    torch.testing.assert_close(out, a[:, :0] @ b[:0])
    assert not report.real_gemm

    backend = pc.backend(gemm="onednn", inductor=False, strict=True)
    compiled = torch.compile(lambda a, b: (a @ b) * 2, backend=backend, dynamic=True)
    torch.testing.assert_close(compiled(a, b), (a @ b) * 2)
    assert backend.report.library["mm.default"] == 1 and not backend.report.real_gemm


def test_switched_off_onednn_keeps_aten():
    gen = torch.Generator().manual_seed(7)
    a, b = _operand("row", 5, 4, gen), _operand("row", 4, 3, gen)
    with warnings.catch_warnings():  # 2.14 warns that oneDNN's TF32 needs an Intel GPU
        warnings.simplefilter("ignore")
        with torch.backends.mkldnn.flags(enabled=False):
            assert not realgemm.available()
            out, report = _rewritten(torch.mm, a, b)
    assert realgemm.available()
    torch.testing.assert_close(out, a @ b)
    assert not report.real_gemm


def test_auto_times_each_shape_once_and_follows_the_timing(monkeypatch):
    calls = []
    monkeypatch.setattr(realgemm, "_CHOICES", {})
    monkeypatch.setattr(realgemm, "_timed_choice", lambda m, k, n: calls.append((m, k, n)) or m == 80)
    gen = torch.Generator().manual_seed(8)
    b = _operand("row", 70, 70, gen)
    for m in (80, 80, 90):
        a = _operand("row", m, 70, gen)
        out, report = _rewritten(torch.mm, a, b, gemm="auto")
        torch.testing.assert_close(out, a @ b)
        assert sum(report.real_gemm.values()) == (m == 80)
    assert calls == [(80, 70, 70), (90, 70, 70)]
    # too small to be worth timing: stays on ATen
    out, report = _rewritten(torch.mm, a[:8, :8], b[:8, :8], gemm="auto")
    assert not report.real_gemm and len(calls) == 2


def test_the_timed_choice_leaves_no_trace():
    """The timing runs on its own generator, outside any trace: the global RNG is untouched."""
    state = torch.get_rng_state()
    choice = realgemm._timed_choice(64, 64, 64)
    assert isinstance(choice, bool)
    assert torch.equal(torch.get_rng_state(), state)


def test_a_bad_gemm_mode_is_refused_by_name():
    with pytest.raises(PtcValueError, match="gemm must be one of 'auto', 'onednn', 'aten', not 'mkl'"):
        pc.backend(gemm="mkl")
    with pytest.raises(ValueError, match="gemm"):
        pc.compile(lambda x: x, gemm=None)


def test_a_graph_of_one_gemm_in_the_real_form_is_compiled_not_run_as_is():
    """A lone GEMM is library-bound (run on its eager kernel) unless ptc computes it as a real GEMM."""
    from ptc.complex.backend import library_bound

    gen = torch.Generator().manual_seed(9)
    a, b = _operand("row", 8, 8, gen), _operand("col", 8, 8, gen)
    seen = []

    def spy(gm, example_inputs):
        seen.append((library_bound(gm, example_inputs), library_bound(gm, example_inputs, gemm="onednn")))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(lambda a, b: a @ b, backend=spy, fullgraph=True)(a, b)
    assert seen == [(True, False)]

    backend = pc.backend(gemm="onednn", strict=True)
    compiled = torch.compile(lambda a, b: a @ b, backend=backend, fullgraph=True)
    result, codes = pc.generated_code(compiled, a, b)
    torch.testing.assert_close(result, a @ b)
    assert backend.report.library_graphs == 0 and backend.report.real_gemm["mm.default"] == 1
    assert "ptc.onednn_linear" in "".join(codes)


def _with_edge_values(z, gen):
    """``z`` with ~15% of its real and imaginary parts replaced by 0, -0, inf, -inf, nan,
    a denormal or a value near float32's max."""
    values = torch.tensor([0.0, -0.0, 1.0, float("inf"), float("-inf"), float("nan"), 1e-45, 3e38])
    parts = torch.view_as_real(z)
    pick = torch.randint(0, len(values), parts.shape, generator=gen)
    where = torch.rand(parts.shape, generator=gen) < 0.15
    parts[where] = values[pick][where]
    return z


@pytest.mark.parametrize("computed", [False, True])
def test_nonfinite_values_propagate_as_in_atens_gemm(computed):
    """The same real products as a complex GEMM: nan and inf land where ATen's put them."""
    gen = torch.Generator().manual_seed(10)
    a = _with_edge_values(_operand("row", 6, 8, gen), gen)
    b = _with_edge_values(_operand("col", 8, 5, gen).contiguous(), gen).mT.contiguous().mT

    def f(a, b):
        return (a * 1 if computed else a) @ (b.conj().conj() * 1 if computed else b)

    out, report = _rewritten(f, a, b)
    assert report.real_gemm["mm.default"] == 1
    expected = f(a, b)
    got, exp = torch.view_as_real(out), torch.view_as_real(expected)
    assert torch.equal(got.isnan(), exp.isnan()) and torch.equal(got.isinf(), exp.isinf())
    finite = exp.isfinite()
    torch.testing.assert_close(got[finite], exp[finite], rtol=1e-4, atol=1e-3)


def test_training_steps_follow_eager_as_the_weights_change():
    """The block form is rebuilt from the weights on every call: SGD steps that update a complex
    Linear's weight in place track eager's, step after step."""
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(32, 24, dtype=torch.complex64, generator=gen)
    target = torch.randn(32, 8, dtype=torch.complex64, generator=gen)
    w0 = torch.randn(8, 24, dtype=torch.complex64, generator=gen) / 5
    b0 = torch.zeros(8, dtype=torch.complex64)

    def loss(x, w, b):
        return (torch.nn.functional.linear(x, w, b) - target).abs().pow(2).mean()

    backend = pc.backend(gemm="onednn", inductor=False, strict=True)
    compiled = torch.compile(loss, backend=backend)
    params = {"eager": [w0.clone().requires_grad_(), b0.clone().requires_grad_()],
              "ptc": [w0.clone().requires_grad_(), b0.clone().requires_grad_()]}
    for _ in range(3):
        for name, fn in (("eager", loss), ("ptc", compiled)):
            w, b = params[name]
            gw, gb = torch.autograd.grad(fn(x, w, b), (w, b))
            with torch.no_grad():
                w -= 0.5 * gw
                b -= 0.5 * gb
        for mine, theirs in zip(params["ptc"], params["eager"]):
            torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)
    # the forward addmm and the weight gradient's mm (x needs no gradient)
    assert backend.report.real_gemm["addmm.default"] >= 1 and backend.report.real_gemm["mm.default"] >= 1
