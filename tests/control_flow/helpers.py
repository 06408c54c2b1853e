"""Branch families and helpers shared by the control-flow tests."""

import io

import torch


def affine_branches(n):
    """n branches of equal output shape: branch k computes x * (k + 1) + k."""
    return [(lambda k: lambda x: x * (k + 1) + k)(k) for k in range(n)]


def prefix_branches(n):
    """n branches whose outputs differ in size: branch k returns (x[: k + 1] * 2)."""
    return [(lambda k: lambda x: x[: k + 1] * 2)(k) for k in range(n)]


def reference(branches, index, *operands):
    """The semantics, in plain Python."""
    index = min(max(int(index), 0), len(branches) - 1)
    return branches[index](*operands)




def program(branches):
    """A module whose forward is ``switch(index, branches, x)`` (what export takes)."""
    from ptc.control_flow import switch

    class Program(torch.nn.Module):
        def forward(self, index, x):
            return switch(index, branches, x)

    return Program()


def check_against_reference(fn, branches, x, indices=None):
    """``fn(torch.tensor(i), x)`` equals the plain-Python semantics, shape and values, for each
    index (by default every in-range index and two beyond each end)."""
    for i in indices if indices is not None else range(-2, len(branches) + 2):
        got, want = fn(torch.tensor(i), x), reference(branches, i, x)
        assert got.shape == want.shape and torch.equal(got, want), f"index {i}"


def check_gradients(fn, branches, x, indices):
    """The gradient of ``fn(torch.tensor(i), x)`` (a scalar) w.r.t. ``x`` equals that of
    ``reference(...).sum()``, for each index."""
    for i in indices:
        xg = x.clone().requires_grad_()
        (got,) = torch.autograd.grad(fn(torch.tensor(i), xg), xg)
        xg = x.clone().requires_grad_()
        (want,) = torch.autograd.grad(reference(branches, i, xg).sum(), xg)
        assert torch.allclose(got, want), f"index {i}"


def save_load(ep):
    """``ep`` after a torch.export.save / load round trip through memory."""
    buffer = io.BytesIO()
    torch.export.save(ep, buffer)
    buffer.seek(0)
    return torch.export.load(buffer)
