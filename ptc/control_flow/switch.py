"""``switch``: pick one of N branch functions by an integer index.

Eager calls run the chosen branch directly. Under ``torch.compile``,
``torch.export`` (strict and non-strict) and ``make_fx`` the switch becomes a
balanced binary tree of ``torch.cond`` of depth ``ceil(log2 N)``, which every
torch consumer (Inductor, ``torch.export.save``/``load``) already understands.
Under ``torch.vmap`` with a batched index every branch runs and each sample
selects its own result.
"""

from __future__ import annotations

from typing import Any, Callable, List, Sequence

import torch
import torch.utils._pytree as pytree

from ptc.errors import BranchMismatch, PtcTypeError, PtcValueError

__all__ = ["switch", "tree_depth"]


def switch(index: Any, branches: Sequence[Callable[..., Any]], *operands: Any) -> Any:
    """Apply exactly one of ``branches`` to ``operands``, chosen by ``index``.

    Equivalent to the following Python::

        def switch(index, branches, *operands):
            index = min(max(int(index), 0), len(branches) - 1)
            return branches[index](*operands)

    Args:
        index: an integer scalar: a Python ``int``, a ``SymInt``, or an integer
            tensor with one element (shape ``()`` or ``(1,)``). Out-of-range
            values are clamped to ``[0, len(branches) - 1]``, so ``-5`` picks the
            first branch and ``99`` the last, as in ``jax.lax.switch``. Floating,
            complex and bool indices are a ``TypeError``.
        branches: a non-empty list or tuple of callables. Each takes
            ``*operands`` and returns a pytree of tensors; all branches must
            return the same pytree structure and dtypes. Sizes may differ
            between branches (traced code then gets one size symbol per
            differing dimension).
        operands: pytrees passed unchanged to the chosen branch.

    Behaviour per consumer:
        * eager: validates the arguments, reads the index (one host sync for a
          tensor index) and calls ``branches[index](*operands)``. Only the chosen
          branch runs, so branches that disagree in structure are not detected.
        * ``torch.compile`` / ``torch.export`` / ``make_fx``: a tensor or
          ``SymInt`` index becomes a balanced tree of ``torch.cond`` on
          ``index < mid``; a Python ``int`` index selects its branch at trace
          time (the graph holds that branch only).
        * ``torch.vmap`` over a batched index: every branch runs on every
          sample and each sample takes its branch's output. Operands reach a
          branch's gradient only for the samples that selected it, so a NaN or
          inf in the backward of an unselected branch does not leak into the
          gradient. (Values a branch captures by closure are not guarded: pass
          them as operands for that guarantee.) All branches must then return
          the same shapes.
        * autograd: first-order gradients flow through the chosen branch in
          eager and compiled code. Higher orders follow ``torch.cond``, which
          does not support double backward in traced code.
    """
    n = _check_branches(branches)
    if isinstance(index, bool):
        raise PtcTypeError(
            "switch: index must be an integer scalar, got a bool; "
            "use int(flag) to choose between two branches"
        )
    if isinstance(index, int):
        return branches[_clamp(index, n)](*operands)
    if isinstance(index, torch.SymInt):
        index = torch.scalar_tensor(index, dtype=torch.int64)
    elif not isinstance(index, torch.Tensor):
        raise PtcTypeError(
            "switch: index must be a Python int, a SymInt or an integer tensor with one "
            f"element, got {type(index).__name__}"
        )
    _check_tensor_index(index)

    mode = _mode(index)
    if mode == "eager":
        return branches[_clamp(int(index), n)](*operands)
    if n == 1:
        return branches[0](*operands)
    if index.dim() == 1:
        index = index.reshape(())
    index = index.clamp(0, n - 1)
    if mode == "vmap":
        return _select_all(index, branches, operands)
    return _cond_tree(index, branches, operands)


def tree_depth(n: int) -> int:
    """Depth of the ``torch.cond`` tree ``switch`` emits for ``n`` branches: ceil(log2 n)."""
    return (n - 1).bit_length()


# --- validation ---------------------------------------------------------------


def _check_branches(branches: Any) -> int:
    if not isinstance(branches, (list, tuple)):
        raise PtcTypeError(
            f"switch: branches must be a list or tuple of callables, got {type(branches).__name__}"
        )
    if len(branches) == 0:
        raise PtcValueError("switch: branches is empty; give at least one branch function")
    for i, branch in enumerate(branches):
        if not callable(branch):
            raise PtcTypeError(
                f"switch: branches[{i}] must be callable, got {type(branch).__name__}"
            )
    return len(branches)


def _check_tensor_index(index: torch.Tensor) -> None:
    dtype = index.dtype
    if dtype == torch.bool or dtype.is_floating_point or dtype.is_complex:
        raise PtcTypeError(
            f"switch: index must have an integer dtype, got {dtype}; "
            "convert it explicitly, e.g. index.long(), if truncation is what you mean"
        )
    if index.dim() > 1 or index.numel() != 1:
        raise PtcValueError(
            "switch: index must be a scalar (shape () or (1,)), "
            f"got a tensor of shape {tuple(index.shape)}"
        )


def _clamp(i: int, n: int) -> int:
    return 0 if i < 0 else (n - 1 if i >= n else i)


def _mode(index: torch.Tensor) -> str:
    """How to run: "eager" (``index`` holds a real value we may read), "vmap" (the
    index is batched by ``torch.vmap`` at some level) or "trace" (Dynamo, export,
    make_fx)."""
    if torch.compiler.is_compiling():
        return "trace"
    functorch = torch._C._functorch
    t = index
    while functorch.is_functorch_wrapped_tensor(t):  # vmap / grad levels, outermost first
        if functorch.is_batchedtensor(t):
            return "vmap"
        t = functorch.get_unwrapped(t)
    if torch._C._len_torch_dispatch_stack() > 0:  # make_fx, fake and functional modes
        return "trace"
    if isinstance(t, torch._subclasses.fake_tensor.FakeTensor):
        return "trace"
    return "eager"


# --- traced: a balanced tree of torch.cond ------------------------------------


def _cond_tree(index: torch.Tensor, branches: Sequence[Callable], operands: tuple) -> Any:
    """``branches[index](*operands)`` as nested ``torch.cond`` on ``index < mid``.

    ``torch.cond`` operands must be tensors, so the operand pytree is split into
    its tensor leaves (passed through every cond, together with the index) and
    the rest (constants, closed over).
    """
    leaves, spec = pytree.tree_flatten(operands)
    is_tensor = [isinstance(leaf, torch.Tensor) for leaf in leaves]
    tensors = tuple(leaf for leaf, t in zip(leaves, is_tensor) if t)

    def rebuild(flat_tensors: Sequence[torch.Tensor]) -> tuple:
        it = iter(flat_tensors)
        full = [next(it) if t else leaf for leaf, t in zip(leaves, is_tensor)]
        return pytree.tree_unflatten(full, spec)

    def subtree(lo: int, hi: int) -> Callable:
        if hi - lo == 1:
            branch = branches[lo]
            return lambda idx, *flat: branch(*rebuild(flat))
        mid = lo + (hi - lo + 1) // 2
        left, right = subtree(lo, mid), subtree(mid, hi)
        return lambda idx, *flat: torch.cond(idx < mid, left, right, (idx, *flat))

    return subtree(0, len(branches))(index, *tensors)


# --- vmap over a batched index: run every branch, select per sample -------------


def _select_all(index: torch.Tensor, branches: Sequence[Callable], operands: tuple) -> Any:
    outputs: List[Any] = []
    for k, branch in enumerate(branches):
        chosen = index == k
        # Gradient reaches the operands only where this branch was chosen (jax#1052).
        guarded = pytree.tree_map_only(
            torch.Tensor, lambda x, c=chosen: torch.where(c, x, x.detach()), operands
        )
        outputs.append(branch(*guarded))

    flat0, spec0 = pytree.tree_flatten(outputs[0])
    flats = [flat0]
    for k, out in enumerate(outputs[1:], start=1):
        flat, spec = pytree.tree_flatten(out)
        if spec != spec0:
            raise BranchMismatch(
                f"switch: branches[{k}] returns a different structure than branches[0]: "
                f"{spec} vs {spec0}"
            )
        for j, (a, b) in enumerate(zip(flat0, flat)):
            if a.dtype != b.dtype or a.shape != b.shape:
                raise BranchMismatch(
                    f"switch under vmap with a batched index: output leaf {j} of branches[{k}] "
                    f"is {b.dtype}{list(b.shape)} but branches[0] gives {a.dtype}{list(a.shape)}; "
                    "all branches must agree in dtype and shape"
                )
        flats.append(flat)

    selected = []
    for j in range(len(flat0)):
        acc = flats[0][j]
        for k in range(1, len(branches)):
            acc = torch.where(index == k, flats[k][j], acc)
        selected.append(acc)
    return pytree.tree_unflatten(selected, spec0)
