"""Outputs the program computes are new tensors, as in eager, even where the arithmetic is the
identity (``z * 1``, ``z + 0``, ``z + zeros_like(z)``). Inductor removes such arithmetic and
returns the input's buffer (stock ``torch.compile`` on torch 2.14.1 does), so a caller writing
into the result changed its input; an output that eager returns as a view of an input stays one."""

import pytest
import torch

import ptc.complex

Z = torch.tensor([1 + 2j, -3 + 0.5j, 0.25 - 1j, 4j], dtype=torch.complex64)

IDENTITIES = {
    "z * 1": lambda z: z * 1,
    "z + 0": lambda z: z + 0,
    "z * 1.0 - 0": lambda z: z * 1.0 - 0,
    "z + zeros_like(z)": lambda z: z + torch.zeros_like(z),
    "z.real * 1": lambda z: z.real * 1,
    "(z * 1, z * 2)": lambda z: (z * 1, z * 2),
}


def _shares_memory(a, b):
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


@pytest.mark.parametrize("name", sorted(IDENTITIES))
def test_a_computed_output_never_shares_the_input(name):
    f = IDENTITIES[name]
    torch._dynamo.reset()
    compiled = torch.compile(f, backend=ptc.complex.backend())
    for call in range(2):  # the first call finds such outputs; later calls copy them
        z = Z.clone()
        out = compiled(z)
        want = f(Z.clone())
        outs, wants = (out, want) if isinstance(out, tuple) else ((out,), (want,))
        for o, w in zip(outs, wants):
            assert torch.equal(o, w), f"call {call}"
            assert not _shares_memory(o, z), f"call {call}"
            o.mul_(0)
        assert torch.equal(z, Z), f"call {call}: writing into the result changed the input"


def test_an_output_eager_returns_as_a_view_stays_a_view():
    f = lambda z: (z * 2, z[1:])  # noqa: E731
    torch._dynamo.reset()
    compiled = torch.compile(f, backend=ptc.complex.backend())
    for _ in range(2):
        z = Z.clone()
        scaled, view = compiled(z)
        assert torch.equal(scaled, Z * 2) and not _shares_memory(scaled, z)
        assert _shares_memory(view, z)  # as in eager
        view.mul_(0)
        assert torch.equal(z[1:], torch.zeros(3, dtype=z.dtype)) and z[0] == Z[0]


def test_gradients_flow_through_the_copy():
    w = torch.tensor([0.5 - 1j, 2 + 0j, -1j, 3 + 3j])
    f = lambda z: z * 1  # noqa: E731
    torch._dynamo.reset()
    compiled = torch.compile(f, backend=ptc.complex.backend())
    for _ in range(2):
        z = Z.clone().requires_grad_()
        out = compiled(z)
        assert not _shares_memory(out, z)
        (got,) = torch.autograd.grad((out * w).abs().sum(), z)
        ze = Z.clone().requires_grad_()
        (want,) = torch.autograd.grad((f(ze) * w).abs().sum(), ze)
        assert torch.allclose(got, want)
