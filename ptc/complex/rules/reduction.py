"""Rules for the reductions that mix the parts."""

from __future__ import annotations


import torch

from ptc.complex.pair import Pair, real_dtype
from ptc.complex.rules.core import _out_dtype, chypot, cmul, parts, rule

aten = torch.ops.aten
prims = torch.ops.prims

# ---------------------------------------------------------------------------
# reductions that mix the parts
# ---------------------------------------------------------------------------


def _norm_dims(dim, ndim):
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(ndim))
    if isinstance(dim, int):
        dim = [dim]
    return [d % ndim if ndim else 0 for d in dim]


@rule(aten.prod.default, aten.prod.dim_int, group="reduction", note="pairwise complex products (log2 n steps)")
def _prod(ctx, a, dim=None, keepdim=False, *, dtype=None):
    if dtype is not None and dtype != a.dtype:
        if dtype not in (torch.complex64, torch.complex128):
            return NotImplemented
    dt = ctx.out_dtype
    re, im = parts(a, real_dtype(dt))
    if dim is None:
        re, im, d, keep = re.reshape(-1), im.reshape(-1), 0, False
    else:
        d, keep = dim % max(a.ndim, 1), keepdim
        if a.ndim == 0:
            return Pair(re.clone(), im.clone(), dt)
    n = re.shape[d]
    if n == 0:
        shape = list(re.shape)
        if keep:
            shape[d] = 1
        else:
            shape.pop(d)
        return Pair(torch.ones(shape, dtype=re.dtype, device=re.device), torch.zeros(shape, dtype=re.dtype, device=re.device), dt)
    while n > 1:
        half = n // 2
        r0, r1 = re.narrow(d, 0, half), re.narrow(d, half, half)
        i0, i1 = im.narrow(d, 0, half), im.narrow(d, half, half)
        pr, pi = cmul((r0, i0), (r1, i1))
        if n % 2:
            pr = torch.cat([pr, re.narrow(d, 2 * half, 1)], d)
            pi = torch.cat([pi, im.narrow(d, 2 * half, 1)], d)
        re, im = pr, pi
        n = re.shape[d]
    if not keep:
        re, im = re.squeeze(d), im.squeeze(d)
    return Pair(re, im, dt)


@rule(aten.cumprod.default, group="reduction", note="Hillis-Steele scan of complex products (log2 n steps)")
def _cumprod(ctx, a, dim, *, dtype=None):
    dt = ctx.out_dtype
    re, im = parts(a, real_dtype(dt))
    if a.ndim == 0:
        return Pair(re.clone(), im.clone(), dt)
    d = dim % a.ndim
    n = re.shape[d]
    shift = 1
    while shift < n:
        head_r, head_i = re.narrow(d, 0, shift), im.narrow(d, 0, shift)
        pr, pi = cmul((re.narrow(d, shift, n - shift), im.narrow(d, shift, n - shift)),
                      (re.narrow(d, 0, n - shift), im.narrow(d, 0, n - shift)))
        re = torch.cat([head_r, pr], d)
        im = torch.cat([head_i, pi], d)
        shift *= 2
    return Pair(re, im, dt)


def _var_parts(a, dim, correction, keepdim):
    kw = dict(correction=correction, keepdim=keepdim)
    return torch.var(a.re, dim, **kw) + torch.var(a.im, dim, **kw)


@rule(aten.var.correction, group="reduction", note="var(re) + var(im)")
def _var(ctx, a, dim=None, *, correction=None, keepdim=False):
    return _var_parts(a, dim, correction, keepdim)


@rule(aten.std.correction, group="reduction", note="sqrt(var(re) + var(im))")
def _std(ctx, a, dim=None, *, correction=None, keepdim=False):
    return torch.sqrt(_var_parts(a, dim, correction, keepdim))


@rule(aten.var_mean.correction, group="reduction")
def _var_mean(ctx, a, dim=None, *, correction=None, keepdim=False):
    v = _var_parts(a, dim, correction, keepdim)
    dims = dim if dim is not None else list(range(a.ndim))
    m = Pair(torch.mean(a.re, dims, keepdim=keepdim), torch.mean(a.im, dims, keepdim=keepdim), a.dtype)
    return v, m


@rule(aten.linalg_vector_norm.default, group="reduction", note="on |z|; ord 2 as sqrt(sum(re^2+im^2))")
def _vector_norm(ctx, a, ord=2, dim=None, keepdim=False, *, dtype=None):
    rdt = real_dtype(dtype) if dtype is not None else real_dtype(a.dtype)
    re, im = a.re.to(rdt), a.im.to(rdt)
    dims = _norm_dims(dim, a.ndim)
    if ord == 2 and a.ndim > 0:
        return torch.sqrt(torch.sum(re * re + im * im, dims, keepdim=keepdim))
    return torch.linalg.vector_norm(chypot(re, im), ord, dim, keepdim)


@rule(aten.dot.default, group="reduction", note="sum of complex products (no BLAS call)")
def _dot(ctx, a, b):
    dt = _out_dtype(ctx, a, b)
    pa, pb = parts(a, real_dtype(dt)), parts(b, real_dtype(dt))
    re, im = cmul(pa, pb)
    return Pair(torch.sum(re), torch.sum(im), dt)


@rule(aten.vdot.default, group="reduction", note="sum(conj(a)*b)")
def _vdot(ctx, a, b):
    dt = _out_dtype(ctx, a, b)
    pa, pb = parts(a, real_dtype(dt)), parts(b, real_dtype(dt))
    re, im = cmul((pa[0], -pa[1]), pb)
    return Pair(torch.sum(re), torch.sum(im), dt)


