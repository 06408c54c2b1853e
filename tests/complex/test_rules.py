"""Every rule against eager: forward and gradients, complex64 and complex128, odd layouts.

These run the rewritten graphs eagerly (AOTAutograd + ptc's rewrite, no C++
compile), so the whole op table fits in seconds; ``test_inductor.py`` checks
the same rewrite through Inductor's code generation.
"""

import pytest
import torch

import ptc.complex as pc
from ptc.complex.rewrite import Report

from .helpers import GRAD_OPS, OPS, TOL, aot, loss, make_inputs, rel_close

DTYPES = [torch.complex64, torch.complex128]
LIBRARY_OPS = {"mm", "mv", "fft", "rfft_irfft"}


def _eager_or_error(fn, args):
    try:
        return fn(*args), None
    except Exception as e:  # noqa: BLE001
        return None, e


def _check(name, dtype, layout, seed=0):
    fn, kinds = OPS[name]
    gen = torch.Generator().manual_seed(seed)
    args = make_inputs(kinds, dtype, gen=gen, layout=layout)
    report = Report()
    expected, error = _eager_or_error(fn, args)
    if error is not None:
        # eager refuses this layout (view_as_real of a conj view, ...): ptc must refuse it too
        with pytest.raises(type(error)) as info:
            aot(fn, report)(*args)
        assert str(info.value).splitlines()[0] == str(error).splitlines()[0]
        return
    got = aot(fn, report)(*args)
    rel_close(got, expected, dtype)
    assert report.graphs == 1
    assert not report.fallback, f"{name}: ops left on ATen: {dict(report.fallback)}"
    if name in LIBRARY_OPS:
        assert report.library, f"{name}: expected a library kernel"
    else:
        assert not report.library, f"{name}: unexpected library kernel {dict(report.library)}"


@pytest.mark.parametrize("dtype", DTYPES, ids=["c64", "c128"])
@pytest.mark.parametrize("name", list(OPS))
def test_forward_matches_eager(name, dtype):
    _check(name, dtype, "contiguous")


@pytest.mark.parametrize("layout", ["transposed", "strided", "conj"])
@pytest.mark.parametrize("name", list(OPS))
def test_forward_odd_layouts(name, layout):
    _check(name, torch.complex64, layout, seed=1)


def _grads(fn, args, conj_inputs):
    leaves = [a.detach().clone().requires_grad_(a.is_floating_point() or a.is_complex()) for a in args]
    inputs = [x.conj() if (conj_inputs and x.is_complex()) else x for x in leaves]
    out = fn(*inputs)
    value = loss(out)
    value.backward()
    return out, [x.grad for x in leaves]


# eager itself refuses view_as_real of a conj view: that case is checked in test_forward_odd_layouts
GRAD_CASES = [(n, c) for n in GRAD_OPS for c in (False, True) if not (c and n == "view_as_real")]


@pytest.mark.parametrize("dtype", DTYPES, ids=["c64", "c128"])
@pytest.mark.parametrize("name,conj_inputs", GRAD_CASES, ids=[f"{n}-{'conj_bit' if c else 'plain'}" for n, c in GRAD_CASES])
def test_gradients_match_eager(name, dtype, conj_inputs):
    fn, kinds = OPS[name]
    gen = torch.Generator().manual_seed(2)
    args = make_inputs(kinds, dtype, gen=gen)
    report = Report()
    out_e, grads_e = _grads(fn, args, conj_inputs)
    out_p, grads_p = _grads(aot(fn, report), args, conj_inputs)
    rel_close(out_p.detach(), out_e.detach(), dtype)
    for gp, ge in zip(grads_p, grads_e):
        assert (gp is None) == (ge is None)
        if ge is not None:
            rel_close(gp, ge, dtype)
    assert report.graphs == 2, "forward and backward graphs both rewritten"
    assert not report.fallback, dict(report.fallback)


def test_tolerances_are_tight_enough_to_fail():
    """The comparison used above rejects a result off by one part in 10^4 (complex64)."""
    z = torch.randn(8, dtype=torch.complex64)
    with pytest.raises(AssertionError):
        rel_close(z * (1 + 1e-4), z, torch.complex64)
    assert TOL[torch.complex64]["rtol"] <= 1e-4


@pytest.mark.parametrize("op", [torch.atanh, torch.atan])
def test_inverse_hyperbolic_tangent_keeps_its_digits_near_the_branch_points(op):
    """atanh near z = -1 and +1 (atan near -1j, +1j): as accurate as eager's, measured against complex128."""
    x = torch.tensor([-0.992, -0.9999, -0.87, 0.87, 0.992, 0.9999])
    y = torch.tensor([-0.0241, 1e-3, -0.02, 0.02, 0.0241, -1e-3])
    z = torch.complex(x, y) if op is torch.atanh else torch.complex(-y, x)
    exact = op(z.to(torch.complex128))
    got = aot(op)(z).to(torch.complex128)
    eager = op(z).to(torch.complex128)
    err, eager_err = (got - exact).abs() / exact.abs(), (eager - exact).abs() / exact.abs()
    assert (err <= torch.maximum(4 * eager_err, torch.full_like(err, 2e-7))).all(), (err, eager_err)


def test_constant_pad_with_a_real_fill_leaves_the_imaginary_part_zero():
    z = torch.randn(2, 3, dtype=torch.complex64)
    fn = lambda z: torch.nn.functional.pad(z, (1, 2), "constant", 1.5)  # noqa: E731
    torch.testing.assert_close(aot(fn)(z), fn(z))
    fn_c = lambda z: torch.constant_pad_nd(z, (1, 1), 0.5 - 2j)  # noqa: E731
    torch.testing.assert_close(aot(fn_c)(z), fn_c(z))


def test_index_fill_and_scatter_with_real_values():
    z = torch.randn(4, 3, dtype=torch.complex64)
    idx = torch.tensor([0, 2])
    for fn in (
        lambda z, idx: z.index_fill(0, idx, 2.0),
        lambda z, idx: z.scatter(0, idx.view(2, 1).expand(2, 3), 3.0),
        lambda z, idx: z.masked_fill(z.real > 0, -1.0),
    ):
        torch.testing.assert_close(aot(fn)(z, idx), fn(z, idx))
