"""Rules for views, conj/neg bits, construction, casts and constants."""

from __future__ import annotations


import torch

from ptc.complex.pair import Pair, is_paired, join, real_dtype
from ptc.complex.rules.core import _ops, _t, parts, rule

aten = torch.ops.aten
prims = torch.ops.prims

# ---------------------------------------------------------------------------
# boundary and views
# ---------------------------------------------------------------------------

_VIEW_OPS = _ops(
    "view.default", "_unsafe_view.default", "reshape.default", "expand.default", "permute.default",
    "transpose.int", "t.default", "select.int", "slice.Tensor", "unsqueeze.default", "squeeze.default",
    "squeeze.dim", "squeeze.dims", "diagonal.default", "alias.default", "narrow.default",
    "unfold.default", "expand_copy.default", "permute_copy.default", "view_copy.default",
    "squeeze_copy.dim", "unsqueeze_copy.default", "transpose_copy.int", "slice_copy.Tensor",
    "select_copy.int", "diagonal_copy.default", "alias_copy.default", "movedim.int",
)
_RESHAPE_LIKE = {aten.view.default, aten._unsafe_view.default, aten.view_copy.default}


@rule(*_VIEW_OPS, group="boundary", note="applied to both parts; views of inputs stay views")
def _view(ctx, x, *args, **kwargs):
    op = ctx.op
    real_op = aten.reshape.default if op in _RESHAPE_LIKE else op
    is_view = op._schema.returns and op._schema.returns[0].alias_info is not None
    return x.map(
        lambda t: real_op(t, *args, **kwargs),
        (lambda z: op(z, *args, **kwargs)) if is_view else None,
    )


@rule(*_ops("split.Tensor", "split_with_sizes.default", "unbind.int", "chunk.default",
            "split_copy.Tensor", "split_with_sizes_copy.default", "unbind_copy.int"),
      group="boundary", note="applied to both parts")
def _split(ctx, x, *args, **kwargs):
    res = ctx.op(x.re, *args, **kwargs)
    ims = ctx.op(x.im, *args, **kwargs)
    return [Pair(r, i, x.dtype) for r, i in zip(res, ims)]


@rule(aten.as_strided.default, group="boundary", note="on the source's view_as_real (strides doubled)")
def _as_strided(ctx, x, size, stride, storage_offset=None):
    if not x.has_source:
        return NotImplemented
    z = x.complex()
    if z.is_conj() or z.is_neg():
        return NotImplemented
    base = aten.view_as_real(z)
    off = 2 * (storage_offset if storage_offset is not None else z.storage_offset())
    st = [2 * s for s in stride]
    re = aten.as_strided(base, size, st, off)
    im = aten.as_strided(base, size, st, off + 1)
    return Pair(re, im, x.dtype, source=lambda: aten.as_strided(z, size, stride, storage_offset))


@rule(aten.clone.default, aten.contiguous.default, aten.resolve_conj.default, aten.resolve_neg.default,
      aten.lift_fresh_copy.default, aten.detach.default,
      group="boundary", note="values unchanged; materialised only where needed")
def _same_values(ctx, x, *args, **kwargs):
    out = Pair(x.re, x.im, x.dtype)
    out.same_values = x._source if x.has_source else x.same_values
    return out


@rule(aten._conj.default, aten.conj.default, group="boundary", note="conj bit: negated imaginary part")
def _conj_view(ctx, x):
    out = Pair(x.re, -x.im, x.dtype)
    if x.has_source:
        src = x._source
        out.with_source(lambda: aten._conj(src()))
    return out


@rule(aten.conj_physical.default, aten._conj_physical.default, group="boundary")
def _conj_physical(ctx, x):
    return Pair(x.re, -x.im, x.dtype)


@rule(aten._neg_view.default, group="boundary", note="neg bit: both parts negated")
def _neg_view(ctx, x):
    out = Pair(-x.re, -x.im, x.dtype)
    if x.has_source:
        src = x._source
        out.with_source(lambda: aten._neg_view(src()))
    return out


@rule(aten.real.default, group="boundary")
def _real(ctx, x):
    return x.re


@rule(aten.imag.default, group="boundary")
def _imag(ctx, x):
    return x.im


@rule(aten.complex.default, group="boundary", note="complex(re, im): no interleaving pass")
def _complex(ctx, re, im):
    dt = ctx.out_dtype
    rdt = real_dtype(dt)
    shape = torch.broadcast_shapes(re.shape, im.shape)
    return Pair(re.to(rdt).expand(shape), im.to(rdt).expand(shape), dt)


@rule(aten.polar.default, group="boundary", note="abs*cos(angle), abs*sin(angle)")
def _polar(ctx, mag, ang):
    return Pair(mag * torch.cos(ang), mag * torch.sin(ang), ctx.out_dtype)


def _cast(ctx, x, dtype):
    if dtype is None or dtype == x.dtype:
        return Pair(x.re, x.im, x.dtype)
    if dtype in (torch.complex64, torch.complex128):
        return Pair(x.re, x.im, dtype)
    if dtype.is_floating_point:  # complex -> real keeps the real part, as eager (with its warning)
        return x.re.to(dtype)
    return NotImplemented


@rule(aten._to_copy.default, group="boundary", note="complex64 <-> complex128, complex -> real, real -> complex")
def _to_copy(ctx, x, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False, memory_format=None):
    if device is not None and torch.device(device) != x.device if isinstance(x, (Pair, torch.Tensor)) else False:
        return NotImplemented
    if isinstance(x, Pair):
        return _cast(ctx, x, dtype)
    if dtype in (torch.complex64, torch.complex128):
        return Pair.promote(x, dtype)
    return NotImplemented


@rule(prims.convert_element_type.default, group="boundary")
def _convert(ctx, x, dtype):
    if isinstance(x, Pair):
        return _cast(ctx, x, dtype)
    if dtype in (torch.complex64, torch.complex128):
        return Pair.promote(x, dtype)
    return NotImplemented


@rule(aten.view_as_complex.default, group="boundary", note="read as the complex tensor it is, no copy")
def _view_as_complex(ctx, t):
    # handled in the interpreter when t came from view_as_real/stack; here t is a real tensor, read
    # like a complex input (through each element's 64 bits where that applies: contiguous vector
    # loads, where the two planes of t would be stride-2 gathers)
    return Pair.of(aten.view_as_complex(t))


@rule(aten.view.dtype, group="boundary", note="complex <-> its float dtype")
def _view_dtype(ctx, x, dtype):
    if isinstance(x, Pair):
        if dtype != real_dtype(x.dtype) or x.ndim == 0:
            return NotImplemented
        if x.has_source:
            z = x.complex()
            if not z.is_conj() and not z.is_neg():
                return aten.view.dtype(z, dtype)
        return aten.view_as_real(join(x.re, x.im, x.dtype)).flatten(-2)
    if dtype not in (torch.complex64, torch.complex128) or x.dtype != real_dtype(dtype) or x.dim() == 0:
        return NotImplemented
    re = x[..., 0::2]
    im = x[..., 1::2]
    return Pair(re, im, dtype, source=lambda: aten.view.dtype(x, dtype))


def _fill_value(value, dtype, like_shape_fn):
    c = complex(value)
    return c.real, c.imag


@rule(aten.full.default, group="boundary", note="complex fill values")
def _full(ctx, size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    dt = ctx.out_dtype
    c = complex(fill_value)
    rdt = real_dtype(dt)
    re = torch.full(size, c.real, dtype=rdt, device=device)
    im = torch.full(size, c.imag, dtype=rdt, device=device)
    return Pair(re, im, dt)


@rule(aten.scalar_tensor.default, group="boundary")
def _scalar_tensor(ctx, s, *, dtype=None, layout=None, device=None, pin_memory=None):
    dt = ctx.out_dtype
    c = complex(s)
    rdt = real_dtype(dt)
    return Pair(torch.scalar_tensor(c.real, dtype=rdt, device=device),
                torch.scalar_tensor(c.imag, dtype=rdt, device=device), dt)


def _like_factory(fill):
    def fn(ctx, x, *args, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
        dt = ctx.out_dtype
        rdt = real_dtype(dt)
        shape = x.shape
        dev = device if device is not None else x.device
        value = fill if fill is not None else (args[0] if args else 0)
        c = complex(value)
        return Pair(torch.full(shape, c.real, dtype=rdt, device=dev),
                    torch.full(shape, c.imag, dtype=rdt, device=dev), dt)

    return fn


rule(aten.zeros_like.default, aten.empty_like.default, group="boundary")(_like_factory(0))
rule(aten.ones_like.default, group="boundary")(_like_factory(1))
rule(aten.full_like.default, group="boundary")(_like_factory(None))


@rule(*_ops("new_zeros.default", "new_empty.default", "new_ones.default", "new_full.default",
            "empty_strided.default", "empty.memory_format", "zeros.default", "ones.default"),
      group="boundary")
def _new_factory(ctx, *args, **kwargs):
    out = ctx.out
    if not isinstance(out, torch.Tensor) or not is_paired(out):
        return NotImplemented
    name = ctx.op.overloadpacket.__name__
    value = 0
    if "ones" in name:
        value = 1
    elif name == "new_full":
        value = args[2] if len(args) > 2 else kwargs["fill_value"]
    c = complex(value)
    rdt = real_dtype(out.dtype)
    return Pair(torch.full(tuple(out.shape), c.real, dtype=rdt, device=out.device),
                torch.full(tuple(out.shape), c.imag, dtype=rdt, device=out.device), out.dtype)


@rule(aten.fill.Scalar, aten.fill.Tensor, group="boundary")
def _fill(ctx, x, value):
    if isinstance(value, Pair):
        return Pair(torch.zeros_like(x.re) + value.re, torch.zeros_like(x.im) + value.im, x.dtype)
    if isinstance(value, torch.Tensor):
        return Pair(torch.zeros_like(x.re) + value.to(x.re.dtype), torch.zeros_like(x.im), x.dtype)
    c = complex(value)
    return Pair(torch.full_like(x.re, c.real), torch.full_like(x.im, c.imag), x.dtype)


@rule(aten.copy.default, group="boundary", note="functional copy: src broadcast into self's shape and dtype")
def _copy(ctx, self, src, non_blocking=False):
    dt = ctx.out_dtype
    if not dt.is_complex:
        if isinstance(src, Pair):
            return src.re.to(dt).expand(self.shape).clone()
        return NotImplemented
    rdt = real_dtype(dt)
    re, im = parts(src, rdt)
    shape = self.shape
    re = _t(re, self.re if isinstance(self, Pair) else self).expand(shape)
    im = _t(im, self.re if isinstance(self, Pair) else self).expand(shape)
    return Pair(re.clone(), im.clone(), dt)


