"""Complex ops whose ATen kernel is wrong inside compiled code, decomposed into ops that are right.

AOTAutograd runs a compiled function's first call under a
``TorchDispatchMode`` (its custom-op aliasing check). Under any such mode the
complex kernels of ``linalg_pinv`` (2.13 and 2.14), ``linalg_matrix_sqrth``
and ``linalg_polar`` (2.14) return wrong matrices; outside a mode they are
right. So stock ``torch.compile`` answers wrong on the first call of a
function with ``torch.linalg.pinv``, ``torch.pinverse``,
``torch.linalg.matrix_sqrth`` or ``torch.linalg.polar`` of a complex matrix.
ptc's decomposition table computes each from the SVD or the
eigendecomposition (library kernels that are right under the mode) and
elementwise ops, exactly as the kernels define them::

    # pinv
    U, S, Vh = linalg.svd(A, full_matrices=False)
    atol = 0 if atol is None else atol
    rtol = (eps * max(m, n) if atol is None or atol <= 0 else 0) if rtol is None else rtol
    tol = max(atol, rtol * S[..., :1])
    pinv = (Vh.mH * where(S > tol, 1 / S, 0)[..., None, :]) @ U.mH
    # matrix_sqrth (negative eigenvalues count as 0, as in the kernel)
    L, V = linalg.eigh(A)
    sqrth = (V * sqrt(clamp_min(L, 0))[..., None, :]) @ V.mH
    # polar
    W, S, Vh = linalg.svd(A, full_matrices=False)
    U, H = W @ Vh, (Vh.mH * S[..., None, :]) @ Vh

Real inputs keep Inductor's own path (each decomposition declines them). One
more entry is about compile time, not results: :func:`keep_long_unfold_backward`.
"""

from __future__ import annotations

from typing import Callable, Dict

import torch

aten = torch.ops.aten

__all__ = ["DECOMPOSITIONS", "linalg_pinv", "linalg_matrix_sqrth", "linalg_polar", "keep_long_unfold_backward"]


def _atol_rtol(a: torch.Tensor, atol, rtol):
    real = a.real.dtype
    zero = torch.zeros((), dtype=real, device=a.device)
    atol_t = zero if atol is None else torch.as_tensor(atol, dtype=real, device=a.device)
    if rtol is not None:
        return atol_t, torch.as_tensor(rtol, dtype=real, device=a.device)
    default = torch.full((), torch.finfo(real).eps * max(a.shape[-1], a.shape[-2]), dtype=real, device=a.device)
    if atol is None:
        return atol_t, default
    return atol_t, torch.where(atol_t > 0, zero, default)


def linalg_pinv(a: torch.Tensor, *, atol=None, rtol=None, hermitian: bool = False):
    """``aten.linalg_pinv.atol_rtol_tensor`` for complex ``a`` (see the module docstring); NotImplemented otherwise."""
    if not a.is_complex():
        return NotImplemented
    if a.numel() == 0:  # as the kernel: an empty (..., n, m) result
        return a.new_zeros(a.shape[:-2] + (a.shape[-1], a.shape[-2]))
    atol_t, rtol_t = _atol_rtol(a, atol, rtol)
    if hermitian:
        s, u = torch.linalg.eigh(a)
        s_abs = s.abs()
        tol = torch.maximum(atol_t.unsqueeze(-1), rtol_t.unsqueeze(-1) * s_abs.amax(dim=-1, keepdim=True))
        s_pinv = torch.where(s_abs > tol, s.reciprocal(), torch.zeros((), dtype=s.dtype, device=s.device)).to(a.dtype)
        return torch.matmul(u * s_pinv.unsqueeze(-2), u.mH)
    u, s, vh = torch.linalg.svd(a, full_matrices=False)
    tol = torch.maximum(atol_t.unsqueeze(-1), rtol_t.unsqueeze(-1) * s.narrow(-1, 0, 1))
    s_pinv = torch.where(s > tol, s.reciprocal(), torch.zeros((), dtype=s.dtype, device=s.device)).to(a.dtype)
    return torch.matmul(vh.mH * s_pinv.unsqueeze(-2), u.mH)


def linalg_matrix_sqrth(a: torch.Tensor):
    """``aten.linalg_matrix_sqrth`` for complex ``a`` (see the module docstring); NotImplemented otherwise."""
    if not a.is_complex():
        return NotImplemented
    if a.numel() == 0:
        return a.new_zeros(a.shape)
    l, v = torch.linalg.eigh(a)
    root = l.clamp_min(0).sqrt().to(a.dtype)
    return torch.matmul(v * root.unsqueeze(-2), v.mH)


def linalg_polar(a: torch.Tensor):
    """``aten.linalg_polar`` for complex ``a`` (see the module docstring); NotImplemented otherwise."""
    if not a.is_complex():
        return NotImplemented
    if a.numel() == 0:
        return a.new_zeros(a.shape), a.new_zeros(a.shape[:-2] + (a.shape[-1], a.shape[-1]))
    w, s, vh = torch.linalg.svd(a, full_matrices=False)
    return torch.matmul(w, vh), torch.matmul(vh.mH * s.to(a.dtype).unsqueeze(-2), vh)


#: the longest window whose ``unfold_backward`` ptc lets torch's decomposition unroll
UNROLL_LIMIT = 16


def keep_long_unfold_backward(decomposition: Callable) -> Callable:
    """torch's ``unfold_backward`` decomposition, with a broadcast gradient expanded first.

    For a gradient in the canonical unfolded shape (``input_size`` with the
    unfolded dim replaced by the number of windows, plus the window) torch's
    decomposition is one vectorised ``index_put``; for any other shape it
    emits one ``index_put`` per window position: 512 of them, each with its own
    index arithmetic, for the overlap-add of a 512-point ``istft``, whose
    window envelope is a gradient of batch size 1 broadcast over the batch.
    Compiling that takes minutes. Where the window is longer than
    :data:`UNROLL_LIMIT` and the gradient broadcasts to the canonical shape,
    it is expanded to that shape first (the same values: each window's values
    are the same whichever batch element reads them), which takes torch's
    vectorised path.
    """

    def decompose(grad, input_size, dimension, size, step):
        if isinstance(size, int) and size > UNROLL_LIMIT and step < size and len(input_size) > 0:
            dim = dimension % len(input_size)
            canonical = list(input_size)
            canonical[dim] = (input_size[dim] - size) // step + 1
            canonical.append(size)
            if grad.dim() == len(canonical) and list(grad.shape) != canonical:
                try:
                    if list(torch.broadcast_shapes(tuple(grad.shape), tuple(canonical))) == canonical:
                        grad = grad.expand(canonical)
                except RuntimeError:
                    pass
        return decomposition(grad, input_size, dimension, size, step)

    return decompose


def _decompositions() -> Dict[torch._ops.OpOverload, Callable]:
    table = {aten.linalg_pinv.atol_rtol_tensor: linalg_pinv}
    from torch._decomp import decomposition_table

    if aten.unfold_backward.default in decomposition_table:
        table[aten.unfold_backward.default] = keep_long_unfold_backward(decomposition_table[aten.unfold_backward.default])
    for name, fn in (("linalg_matrix_sqrth", linalg_matrix_sqrth), ("linalg_polar", linalg_polar)):
        packet = getattr(aten, name, None)  # torch 2.14 onwards
        if packet is not None:
            table[packet.default] = fn
    return table


#: entries ptc adds to its decomposition table
DECOMPOSITIONS: Dict[torch._ops.OpOverload, Callable] = _decompositions()
