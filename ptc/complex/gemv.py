"""Complex matrix-vector products as one-column complex GEMMs.

ATen's complex ``mv`` is slow on the CPU: the same product as
``mm(A, x[:, None])`` is faster, and for a conjugate-transposed matrix
(``A.mH @ x``) so is ``conj(mm(A.T, conj(x)[:, None]))`` (figures in
``benchmarks/RESULTS.md``). The product stays a BLAS call on the
complex values (no rewrite of ``mv`` into mul+sum), with BLAS's own
arithmetic; the matrix is read where it lies (no copy for a row- or
column-major matrix, with or without a conj bit).
"""

from __future__ import annotations

import torch

from ptc.complex.pair import Pair

aten = torch.ops.aten

__all__ = ["mv", "addmv", "scaled_sum"]


def mv(ctx, a, x):
    """``mv(a, x)`` for complex ``a`` (``m x n``) and ``x`` (``n``) as a GEMM with one column.

    Equivalent to the following, where ``b`` is ``a``'s memory without its
    conj bit (``a == conj(b)`` when the bit is set) and likewise for the neg bit::

        if a has the conj bit:  y = conj(mm(b, conj(x)[:, None]))[:, 0]
        else:                   y = mm(b, x[:, None])[:, 0]
        if a has the neg bit:   y = -y

    (``conj(b) @ x == conj(b @ conj(x))``: the bit moves to two ``n``- and
    ``m``-element vectors, which Inductor fuses into their neighbours.)
    """
    if not isinstance(a, Pair) or not isinstance(x, Pair) or a.dtype != x.dtype or a.ndim != 2 or x.ndim != 1:
        return NotImplemented
    z = a.readable()
    conj = z.is_conj()
    base = aten._conj(z) if conj else z
    neg = base.is_neg()
    if neg:
        base = aten._neg_view(base)
    m, n = base.shape
    vec = Pair(x.re, -x.im, x.dtype) if conj else x
    column = aten.view(vec.complex(), [n, 1])
    y = Pair.of(aten.view(aten.mm(base, column), [m]))
    if not conj and not neg:
        return y  # the GEMM's own output: a graph output needs no copy
    re, im = y.re, y.im
    if conj:
        im = -im
    if neg:
        re, im = -re, -im
    return Pair(re, im, a.dtype)


def _scaled(pair: Pair, factor):
    """``factor * pair`` for a Python number ``factor`` (a real one scales both parts, as eager's ``mul``)."""
    from ptc.complex.rules import cmul  # (rules imports this module)

    f = complex(factor)
    if f == 1:
        return pair.re, pair.im
    if f.imag == 0:
        return pair.re * f.real, pair.im * f.real
    return cmul((pair.re, pair.im), (f.real, f.imag))


def scaled_sum(product: Pair, self_, beta, alpha) -> Pair:
    """``beta * self_ + alpha * product`` for Python numbers ``beta`` and ``alpha`` (the epilogue
    of ``addmv``/``addmm``). As in eager, ``beta == 0`` ignores ``self_`` (its nan and inf do
    not propagate); ``self_`` may be a pair or a real tensor (broadcast to the product)."""
    re, im = _scaled(product, alpha)
    if complex(beta) != 0:
        s_re, s_im = _scaled(Pair.promote(self_, product.dtype, like=product.re), beta)
        re, im = re + s_re, im + s_im
    return Pair(re, im, product.dtype)


def addmv(ctx, self_, mat, vec, *, beta=1, alpha=1):
    """``addmv``, i.e. ``beta * self + alpha * (mat @ vec)``, with the product from :func:`mv`
    (:func:`scaled_sum`)."""
    if not isinstance(self_, Pair) or isinstance(beta, torch.Tensor) or isinstance(alpha, torch.Tensor):
        return NotImplemented
    y = mv(ctx, mat, vec)
    return NotImplemented if y is NotImplemented else scaled_sum(y, self_, beta, alpha)
