"""Views and in-place updates under ptc's backend behave as in eager: what aliases an input still does,
and an input updated in place holds eager's values afterwards."""

from __future__ import annotations

import pytest
import torch

import ptc.complex as pc


def _shares(a, b):
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


VIEWS = {
    "view_as_real": (lambda z, x: torch.view_as_real(z), lambda out, z, x: _shares(out, z)),
    "view_as_complex": (lambda z, x: torch.view_as_complex(x), lambda out, z, x: _shares(out, x)),
    "slice": (lambda z, x: z[1:3], lambda out, z, x: _shares(out, z)),
    "real": (lambda z, x: z.real, lambda out, z, x: _shares(out, z)),
    "imag": (lambda z, x: z.imag, lambda out, z, x: _shares(out, z)),
    "conj": (lambda z, x: z.conj(), lambda out, z, x: _shares(out, z) and out.is_conj()),
    "transpose": (lambda z, x: z.t(), lambda out, z, x: _shares(out, z)),
    "view_dtype": (lambda z, x: z.view(torch.float32), lambda out, z, x: _shares(out, z)),
    "computed_and_view": (
        lambda z, x: (z * 2, torch.view_as_real(z)),
        lambda out, z, x: _shares(out[1], z) and not _shares(out[0], z),
    ),
}


@pytest.mark.parametrize("name", list(VIEWS))
def test_views_of_inputs_alias_as_in_eager(name):
    fn, aliases = VIEWS[name]
    torch._dynamo.reset()
    z, x = torch.randn(4, 6, dtype=torch.complex64), torch.randn(4, 6, 2)
    eager = fn(z, x)
    out = torch.compile(fn, backend=pc.backend(strict=True))(z, x)
    assert aliases(eager, z, x)
    assert aliases(out, z, x)
    for a, b in zip(out if isinstance(out, tuple) else [out], eager if isinstance(eager, tuple) else [eager]):
        assert torch.equal(a.resolve_conj(), b.resolve_conj())


def _mul_add(z, w):
    z.mul_(w).add_(1j)
    return z.abs()


def _slice_update(z, w):
    z[1:3].mul_(w[1:3])
    return z.sum()


def _plane_update(z, w):
    torch.view_as_real(z)[..., 1].add_(w.real)
    return (z * w).real


# --- the update of an input is stored by the kernel that computes it ------------------------------


def _read_then_update(z, w):
    before = z.sum()  # the old values: read before the kernel that stores the new ones
    z.mul_(2)
    return before, torch.fft.fft(z)  # a library kernel reads the new values


def _library_reads_old(z, w):
    old = torch.fft.fft(z)
    z.add_(w)
    return old, z.abs().sum()


def _copy_from_real(z, w):
    z.copy_(w.real)
    return w.abs()


def _update_and_return_view(z, w):
    z.mul_(1j)
    return z[1:], torch.view_as_real(z)


def _clone_then_update(z, w):
    a = z.clone()
    z.mul_(w)
    return a * 3, z.t()


def _returns_the_update(z, w):
    return z.mul_(w).add_(1j)  # the graph's output is the write-back itself


UPDATES = [_mul_add, _returns_the_update, _slice_update, _plane_update, _read_then_update, _library_reads_old, _copy_from_real,
           _update_and_return_view, _clone_then_update]  # fmt: skip


def _updated_by_ptc(fn, dtype, conj=False, dynamic=False):
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(1)
    z = torch.randn(4, 6, dtype=dtype, generator=g)
    w = torch.randn(4, 6, dtype=dtype, generator=g)
    z_eager, z_ptc = z.clone(), z.clone()
    if conj:
        z_eager, z_ptc = z_eager.conj(), z_ptc.conj()
    expected = fn(z_eager, w)
    backend = pc.backend(strict=True)
    got, codes = pc.generated_code(torch.compile(fn, backend=backend, dynamic=dynamic), z_ptc, w)
    for a, b in zip(got if isinstance(got, tuple) else [got], expected if isinstance(expected, tuple) else [expected]):
        torch.testing.assert_close(a.resolve_conj(), b.resolve_conj())
    torch.testing.assert_close(z_ptc.resolve_conj(), z_eager.resolve_conj())
    assert backend.report.graphs >= 1
    return got, z_ptc, codes


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
@pytest.mark.parametrize("fn", UPDATES, ids=lambda f: f.__name__)
def test_input_update_is_stored_by_the_fused_kernel(fn, dtype):
    """An input updated in place holds eager's values afterwards, and no complex ``copy_`` runs
    after the kernels: the one that computes the new values stores them
    into the input's memory (its int64 bits for complex64, its planes for complex128), and every
    read of the old or the new values still sees eager's."""
    got, z, codes = _updated_by_ptc(fn, dtype)
    assert pc.complex_fallbacks(codes) == []
    if fn is _returns_the_update:
        assert _shares(got, z) and got.stride() == z.stride(), "the result is the input, as in eager"
    if fn is _update_and_return_view:
        assert _shares(got[0], z) and _shares(got[1], z), "outputs that view the input still do"
        assert got[0].stride() == z[1:].stride() and got[1].stride() == torch.view_as_real(z).stride()


def test_input_update_fuses_into_one_kernel():
    """``z.mul_(w).add_(1j); return z.abs()``: one kernel reads z and w, stores z and the result."""
    _, _, codes = _updated_by_ptc(_mul_add, torch.complex64)
    assert pc.aten_calls(codes) == ["view.dtype"], "only w is read through a view"
    assert sum(code.count("cpp_fused_") for code in codes) == 2, "one kernel (defined once, called once)"


@pytest.mark.parametrize("fn", [_mul_add, _read_then_update], ids=lambda f: f.__name__)
def test_input_update_with_dynamic_shapes_and_a_conj_input(fn):
    """Symbolic sizes take the same path; an input with a conj bit keeps the write-back after the kernel."""
    _, _, codes = _updated_by_ptc(fn, torch.complex64, dynamic=True)
    assert pc.complex_fallbacks(codes) == []
    _updated_by_ptc(fn, torch.complex64, conj=True)


def test_input_update_in_a_training_graph():
    """The updated input needs no gradient, another input does: values and gradients as in eager."""

    def f(z, w):
        z.mul_(2).add_(1j)
        return (z * w).abs().sum()

    torch._dynamo.reset()
    g = torch.Generator().manual_seed(2)
    z = torch.randn(5, 7, dtype=torch.complex64, generator=g)
    w = torch.randn(5, 7, dtype=torch.complex64, generator=g)
    z_eager, z_ptc = z.clone(), z.clone()
    w_eager, w_ptc = w.clone().requires_grad_(), w.clone().requires_grad_()
    expected = f(z_eager, w_eager)
    expected.backward()
    got, codes = pc.generated_code(torch.compile(f, backend=pc.backend(strict=True)), z_ptc, w_ptc)
    got.backward()
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(z_ptc, z_eager)
    torch.testing.assert_close(w_ptc.grad, w_eager.grad)
    assert pc.complex_fallbacks(codes) == []


def test_inputs_sharing_memory_updated_in_place():
    """Two inputs that are views of one tensor, one updated: AOTAutograd passes their base."""

    def f(a, b):
        a.mul_(2j)
        return b * 1.0

    torch._dynamo.reset()
    base = torch.randn(8, dtype=torch.complex64)
    base_eager = base.clone()
    expected = f(base_eager[:5], base_eager[3:])
    got = torch.compile(f, backend=pc.backend(strict=True))(base[:5], base[3:])
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(base, base_eager)
