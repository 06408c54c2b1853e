"""Branches that compute their operand unchanged (``x * 1``, ``x + 0``,
``x + zeros_like(x)``: a scale or a bias that happens to be neutral, a NAS skip op).

Inductor removes such arithmetic also inside a ``torch.cond`` branch, which then
returns its operand's buffer; the code after the cond treats that buffer as a new
one and writes into it, so stock ``torch.cond`` changes the caller's tensor (torch
2.14.1 for Python numbers, both torches for ``zeros_like``). ``switch`` must leave
the caller's tensors as they were and return what eager returns."""

import pytest
import torch

from ptc.control_flow import switch

from .helpers import affine_branches, program

NEUTRAL = {
    "x * 1 + 0": lambda x: x * 1 + 0,
    "x * 1.0": lambda x: x * 1.0,
    "x / 1 - 0": lambda x: x / 1 - 0,
    "x + zeros_like(x)": lambda x: x + torch.zeros_like(x),
    "x * ones_like(x)": lambda x: x * torch.ones_like(x),
}

X = torch.arange(6.0) - 2.0


def _branches(first, n):
    """``first``, then branches 1 .. n - 1 of :func:`affine_branches` (branch k: ``x * (k + 1) + k``)."""
    return [first] + affine_branches(n)[1:]


def _run_and_check(fn, index, x, want_y):
    """``fn(index, x)`` returns ``(y * 10, y)``; the caller then writes into ``y``.
    Neither the call nor that write may reach ``x``."""
    before = x.clone()
    scaled, y = fn(index, x)
    assert torch.equal(x, before), "the call wrote into the caller's tensor"
    assert torch.equal(scaled, want_y * 10) and torch.equal(y, want_y)
    y.add_(100)
    assert torch.equal(x, before), "the result shares memory with the caller's tensor"


@pytest.mark.parametrize("name", sorted(NEUTRAL))
def test_a_neutral_branch_leaves_the_operand_alone_under_inductor(name):
    branches = _branches(NEUTRAL[name], 3)  # three branches: the index is read once
    fn = torch.compile(lambda i, x: (lambda y: (y * 10, y))(switch(i, branches, x)), fullgraph=True)
    _run_and_check(fn, torch.tensor(0), X.clone(), X)
    _run_and_check(fn, torch.tensor(2), X.clone(), X * 3 + 2)


@pytest.mark.parametrize("fullgraph", [True, False])
def test_two_branches_and_an_in_place_update_after_the_switch(fullgraph):
    # two branches keep a tensor predicate; the update is the op that reused the buffer
    branches = _branches(NEUTRAL["x + zeros_like(x)"], 2)
    fn = torch.compile(lambda i, x: switch(i, branches, x).add_(5), fullgraph=fullgraph)
    x = X.clone()
    assert torch.equal(fn(torch.tensor(0), x), X + 5)
    assert torch.equal(x, X)


def test_integer_and_complex_operands():
    ints = torch.arange(6)
    fn = torch.compile(lambda i, x: switch(i, [lambda x: x + 0, lambda x: x * 2, lambda x: x - 1], x) * 3,
                       fullgraph=True)  # fmt: skip
    assert torch.equal(fn(torch.tensor(0), ints), ints * 3) and torch.equal(ints, torch.arange(6))
    z = torch.tensor([1 + 2j, float("inf") + 0j, complex(0.0, float("-inf"))], dtype=torch.complex64)
    before = z.clone()
    fn = torch.compile(lambda i, z: switch(i, [lambda z: z + 0, lambda z: z * 2], z), fullgraph=True)
    out = fn(torch.tensor(0), z)
    assert torch.equal(out, before)  # infinite parts stay infinite (no nan from a product with 1+0j)
    out.mul_(0)
    assert torch.equal(z, before)


def test_gradients_through_a_neutral_branch_with_a_residual():
    branches = _branches(NEUTRAL["x * 1 + 0"], 3)

    def f(i, x):
        y = switch(i, branches, x)
        return (y * y + x).sum()

    fn = torch.compile(f, fullgraph=True)
    for i in (0, 1):
        xg = X.clone().requires_grad_()
        (got,) = torch.autograd.grad(fn(torch.tensor(i), xg), xg)
        xe = X.clone().requires_grad_()
        (want,) = torch.autograd.grad((branches[i](xe) ** 2 + xe).sum(), xe)
        assert torch.equal(got, want), f"index {i}"


@pytest.mark.parametrize("strict", [True, False])
def test_an_exported_program_compiled_by_inductor(strict):
    ep = torch.export.export(program(_branches(NEUTRAL["x * 1 + 0"], 3)), (torch.tensor(0), X), strict=strict)
    module = ep.module()
    fn = torch.compile(lambda i, x: (lambda y: (y * 10, y))(module(i, x)))
    _run_and_check(fn, torch.tensor(0), X.clone(), X)
