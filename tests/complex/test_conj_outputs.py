"""Conjugate views among a compiled graph's outputs and a backward graph's inputs.

A graph output eager returns as a conj view (an operand ``einsum`` saves for its backward, a
function's ``.conj()``/``.mH`` result) is returned as the values it stands for, and a backward
graph reads its inputs whatever their conj bit at run time: AOTAutograd does not guard it (a
tangent of a conj output comes without the bit), and Inductor restrides an output by a copy that
drops the bit (torch 2.13's copy kernel dropped the conjugation too: a wrong gradient).
"""

from __future__ import annotations

import pytest
import torch

import ptc.complex as pc


def _inputs(*shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, dtype=torch.complex64, generator=g) for s in shapes]


def sliced_einsum(z, w):  # einsum saves conj(sliced operand) for its backward, in another layout
    y = (z * 2 + 1)[:, :, :3, :3]
    return torch.view_as_real(torch.einsum("bixy,ioxy->boxy", y, w))


def spectral_conv(x, w):  # a Fourier neural operator's spectral convolution
    x_ft = torch.fft.rfft2(x)
    y = torch.einsum("bixy,ioxy->boxy", x_ft[:, :, :4, :4], w)
    return torch.fft.irfft2(torch.nn.functional.pad(y, (0, 5, 0, 12)), s=(16, 16))


@pytest.mark.parametrize("fn", [sliced_einsum, spectral_conv])
def test_the_gradient_through_a_saved_conj_operand_equals_eagers(fn):
    """torch 2.13: the weights' gradient was off by up to 97 (values up to 73); stock is right."""
    if fn is sliced_einsum:
        x, w = _inputs((2, 3, 6, 6), (3, 4, 3, 3))
    else:
        x, w = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1)), _inputs((3, 3, 4, 4))[0]
    w.requires_grad_()
    expected = torch.autograd.grad((fn(x, w) ** 2).sum(), w)[0]
    torch._dynamo.reset()
    backend = pc.backend()
    got = torch.autograd.grad((torch.compile(fn, backend=backend)(x, w) ** 2).sum(), w)[0]
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-4)
    assert backend.report.stock_graphs == []


def conj_of_transpose(z, w):
    return (z * w).mT.conj()


def adjoint(z, w):
    return (z * w[:, 0] + 1).mH


LOSSES = {
    "abs": lambda o: o.abs().sum(),
    "abs2": lambda o: (o.abs() ** 2).sum(),
    "real_of_product": lambda o: (o * (0.5 - 2j)).real.sum(),
    "planes": lambda o: (torch.view_as_real(o.resolve_conj()) ** 2).sum(),
}


@pytest.mark.parametrize("fn", [conj_of_transpose, adjoint])
@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_a_conj_output_trains(fn, loss):
    """The backward raised 'view is not supported for conjugate view tensors' (the tangent came
    without the conj bit its trace had); stock compile runs it."""
    z, w = _inputs((3, 4), (4,) if fn is conj_of_transpose else (4, 2), seed=2)
    w.requires_grad_()
    expected_out = fn(z, w)
    expected = torch.autograd.grad(LOSSES[loss](expected_out), w)[0]
    torch._dynamo.reset()
    backend = pc.backend()
    out = torch.compile(fn, backend=backend)(z, w)
    torch.testing.assert_close(out, expected_out)
    torch.testing.assert_close(torch.autograd.grad(LOSSES[loss](out), w)[0], expected)
    assert backend.report.stock_graphs == []
