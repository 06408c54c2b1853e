"""Gradients through switch (eager and compiled) and vmap over index or operands."""

import pytest
import torch

import ptc
from ptc.control_flow import switch

BRANCHES = [
    lambda x: x.sin() * 3,
    lambda x: x * x,
    lambda x: torch.sqrt(x),  # NaN gradient for x < 0
    lambda x: x.exp(),
]


def _x():
    return torch.tensor([0.5, 1.5, 2.0, 3.0], dtype=torch.float64, requires_grad=True)


@pytest.mark.parametrize("index", [-1, 0, 1, 2, 3, 8])
def test_eager_gradient_matches_finite_differences(index):
    assert torch.autograd.gradcheck(lambda x: switch(torch.tensor(index), BRANCHES, x), (_x(),))


@pytest.fixture(scope="module")
def compiled_switch():
    torch._dynamo.reset()
    return torch.compile(lambda i, x: switch(i, BRANCHES, x), fullgraph=True, backend="aot_eager")


@pytest.mark.parametrize("index", [-1, 0, 1, 2, 3, 8])
def test_compiled_gradient_matches_finite_differences(compiled_switch, index):
    assert torch.autograd.gradcheck(lambda x: compiled_switch(torch.tensor(index), x), (_x(),))


def test_gradient_reaches_closure_parameters_of_the_chosen_branch_only():
    w0 = torch.ones(3, requires_grad=True)
    w1 = torch.ones(3, requires_grad=True)
    x = torch.arange(3.0)
    out = switch(torch.tensor(1), [lambda x: x * w0, lambda x: x * w1 * 2], x)
    out.sum().backward()
    assert w0.grad is None
    assert torch.equal(w1.grad, x * 2)


def test_vmap_over_batched_index_selects_per_sample():
    xs = torch.tensor([4.0, -1.0, 2.0, -3.0, 0.5])
    idx = torch.tensor([2, 0, 1, 3, 7])
    out = torch.vmap(lambda i, x: switch(i, BRANCHES, x))(idx, xs)
    want = torch.stack([BRANCHES[min(i, 3)](x) for i, x in zip(idx.tolist(), xs)])
    assert torch.allclose(out, want)


def test_vmap_batched_index_gradient_is_nan_safe():
    """sqrt (branch 2) has a NaN gradient at negative inputs; samples that did not
    pick branch 2 must not see it, and each sample's gradient is its branch's."""
    xs = torch.tensor([4.0, -1.0, 2.0, -3.0], requires_grad=True)
    idx = torch.tensor([2, 0, 1, 3])
    out = torch.vmap(lambda i, x: switch(i, BRANCHES, x))(idx, xs)
    (grad,) = torch.autograd.grad(out.sum(), xs)
    x = xs.detach()
    want = torch.stack([0.5 * x[0] ** -0.5, 3 * x[1].cos(), 2 * x[2], x[3].exp()])
    assert torch.isfinite(grad).all()
    assert torch.allclose(grad, want)


def test_vmap_batched_index_with_several_outputs():
    branches = [lambda x: (x + 1, x * 2), lambda x: (x - 1, x / 2)]
    a, b = torch.vmap(lambda i, x: switch(i, branches, x))(
        torch.tensor([0, 1, 1]), torch.tensor([1.0, 2.0, 3.0])
    )
    assert torch.equal(a, torch.tensor([2.0, 1.0, 2.0]))
    assert torch.equal(b, torch.tensor([2.0, 1.0, 1.5]))


def test_vmap_batched_index_with_differing_shapes_is_a_branch_mismatch():
    branches = [lambda x: x[:1], lambda x: x[:2]]
    with pytest.raises(ptc.BranchMismatch, match=r"branches\[1\] is torch.float32\[2\]"):
        torch.vmap(lambda i, x: switch(i, branches, x))(torch.tensor([0, 1]), torch.ones(2, 3))


def test_vmap_batched_index_with_differing_structure_is_a_branch_mismatch():
    branches = [lambda x: (x, x), lambda x: x]
    with pytest.raises(TypeError, match="different structure"):
        torch.vmap(lambda i, x: switch(i, branches, x))(torch.tensor([0, 1]), torch.ones(2, 3))


def test_vmap_over_operands_with_scalar_index():
    xs = torch.randn(5, 3)
    for index in range(4):
        out = torch.vmap(lambda x, k=index: switch(torch.tensor(k), BRANCHES, x))(xs)
        assert torch.allclose(out, BRANCHES[index](xs), equal_nan=True)


def test_jacrev_through_switch():
    x = torch.tensor([0.3, 0.7, 1.1])
    jac = torch.func.jacrev(lambda x: switch(torch.tensor(1), BRANCHES, x))(x)
    assert torch.allclose(jac, torch.diag(2 * x))


def test_nested_vmap_over_index_and_operands():
    xs = torch.rand(2, 3) + 0.1
    idx = torch.tensor([[0, 1, 2], [3, 2, 1]])
    out = torch.vmap(torch.vmap(lambda i, x: switch(i, BRANCHES, x)))(idx, xs)
    want = torch.tensor([[BRANCHES[i](x) for i, x in zip(r_i, r_x)] for r_i, r_x in zip(idx.tolist(), xs)])
    assert torch.allclose(out, want)
