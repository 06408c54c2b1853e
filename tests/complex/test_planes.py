"""Real arithmetic on the interleaved planes of complex values (``view_as_real`` of a product, and
what ``view_as_complex`` reads back) is computed on the pair's parts: results equal eager's in every
case, lifted or not, and the rotary embedding is one kernel per direction."""

from __future__ import annotations

import re

import pytest
import torch

import ptc.complex as pc

from .helpers import aot, rel_close

GEN = torch.Generator().manual_seed(0)
B, N = 3, 4  # rows, complex values per row
X = torch.randn(B, 2 * N, generator=GEN)
W = torch.randn(B, 2 * N, generator=GEN)
V = torch.randn(B, 2 * N, generator=GEN)
F = torch.polar(torch.ones(N), torch.randn(N, generator=GEN))


def planes(x, f):
    """view_as_real of a computed product, flattened back to x's shape."""
    return torch.view_as_real(torch.view_as_complex(x.reshape(B, N, 2)) * f).flatten(-2)


CASES = {
    # forward: arithmetic on the planes of a product
    "weighted sum": lambda x, w, v, f: (planes(x, f) * w).sum(),
    "sum of planes": lambda x, w, v, f: planes(x, f).sum(),
    "chain and a number": lambda x, w, v, f: ((planes(x, f) * w + 1.5) / v - w).sum(),
    "stacked layout": lambda x, w, v, f: (torch.view_as_real(torch.view_as_complex(x.reshape(B, N, 2)) * f) * w.reshape(B, N, 2)).sum(),
    "planes read twice": lambda x, w, v, f: (lambda p: ((p * w).sum(), p))(planes(x, f)),
    "planes as an output": lambda x, w, v, f: planes(x, f) * w,
    "planes second": lambda x, w, v, f: (w - planes(x, f)).sum(),
    "broadcast weight": lambda x, w, v, f: (planes(x, f) * w[:, :1]).sum(),
    "transposed weight": lambda x, w, v, f: (planes(x, f) * w.reshape(2 * N, B).t()).sum(),
    "computed weight": lambda x, w, v, f: (planes(x, f) * (w * v)).sum(),
    "add with alpha": lambda x, w, v, f: torch.add(planes(x, f), w, alpha=2.0).sum(),
    "partial sum": lambda x, w, v, f: (planes(x, f) * w).sum(-1),
    # backward direction: view_as_complex of real arithmetic
    "lift inputs": lambda x, w, v, f: torch.view_as_real(torch.view_as_complex((x * 2 + w).reshape(B, N, 2)) * f),
    "lift shared": lambda x, w, v, f: (lambda t: (torch.view_as_real(torch.view_as_complex(t.reshape(B, N, 2)) * f), t.sum()))(x * w),
    "lift a scalar": lambda x, w, v, f: torch.view_as_real(torch.view_as_complex((x.sum().expand(B, 2 * N) * w).reshape(B, N, 2)) * f),
}


def _run(fn, grad_of):
    args = [t.clone().requires_grad_(i in grad_of) for i, t in enumerate((X, W, V))] + [F]
    out = fn(*args)
    flat = list(out) if isinstance(out, (tuple, list)) else [out]
    loss = sum((o * torch.arange(o.numel()).reshape(o.shape).sin()).sum() for o in flat)
    grads = torch.autograd.grad(loss, [args[i] for i in grad_of], allow_unused=True, materialize_grads=True)
    return [o.detach() for o in flat], grads


@pytest.mark.parametrize("case", CASES)
def test_values_and_gradients_equal_eager(case):
    fn = CASES[case]
    want_out, want_grads = _run(fn, (0, 1))
    got_out, got_grads = _run(aot(fn), (0, 1))
    for got, want in zip(got_out + list(got_grads), want_out + list(want_grads)):
        rel_close(got, want, torch.complex64)


@pytest.mark.slow
def test_rotary_is_one_kernel_per_direction():
    from .test_workloads import _rotary_inputs, rotary

    args, grad = _rotary_inputs(torch.Generator().manual_seed(0))
    args = [a.clone().requires_grad_(i in grad) for i, a in enumerate(args)]
    torch._dynamo.reset()
    backend = pc.backend(strict=True)
    compiled = torch.compile(rotary, backend=backend)

    def step(*a):
        return torch.autograd.grad(compiled(*a), [a[i] for i in grad])

    got, codes = pc.generated_code(step, *args)
    torch.testing.assert_close(got[0], torch.autograd.grad(rotary(*args), [args[0]])[0], rtol=2e-5, atol=2e-5)
    per_graph = [len(re.findall(r"cpp_fused_\w+ = async_compile", code)) for code in codes]
    assert per_graph == [1, 1], per_graph
