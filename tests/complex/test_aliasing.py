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


@pytest.mark.parametrize("fn", [_mul_add, _slice_update, _plane_update], ids=lambda f: f.__name__)
def test_input_updated_in_place_holds_eagers_values(fn):
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(0)
    z = torch.randn(4, 6, dtype=torch.complex64, generator=g)
    w = torch.randn(4, 6, dtype=torch.complex64, generator=g)
    z_eager, z_ptc = z.clone(), z.clone()
    expected = fn(z_eager, w)
    backend = pc.backend(strict=True)
    got = torch.compile(fn, backend=backend)(z_ptc, w)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(z_ptc, z_eager)
    assert backend.report.graphs >= 1
