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




def save_load(ep):
    """``ep`` after a torch.export.save / load round trip through memory."""
    buffer = io.BytesIO()
    torch.export.save(ep, buffer)
    buffer.seek(0)
    return torch.export.load(buffer)
