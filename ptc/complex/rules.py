"""The rule table: each complex ATen op as real arithmetic on ``Pair``s.

A rule takes the op's arguments with every complex tensor replaced by a
:class:`~ptc.complex.pair.Pair` (real tensors and Python numbers as they are)
and returns the op's result the same way. It may return ``NotImplemented`` for
an argument combination it does not handle; the op then runs on its ATen
kernel (see :mod:`ptc.complex.rewrite`). Rules are grouped as in the issue:

* ``boundary``: views, conj/neg bits, construction, casts, constants;
* ``elementwise``: arithmetic, exponentials, trigonometry, predicates;
* ``movement``: cat, pad, flip, roll, gather/scatter/index (applied to both parts);
* ``reduction``: sum, mean, prod, cumsum, cumprod, var/std, norms, dot, vdot;
* ``backward``: the formulas autograd emits (tanh_backward, ...).

Ops in :data:`LIBRARY` (GEMM, GEMV, linalg, FFT) deliberately keep their ATen
kernels (GEMV as a one-column GEMM, :data:`LIBRARY_RULES`); ops in
:data:`RAISES` raise for complex in eager and keep doing so.

Formulas follow the scalar ``c10::complex`` / C99 Annex G definitions eager
uses, including the scaled (Smith) division and the overflow-safe ``abs``
(``hypot``), ``sqrt``, ``log1p`` and ``tanh``.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import torch

from ptc.complex import gemv as _gemv
from ptc.complex.codegen import inline_hypot as _inline_hypot
from ptc.complex.pair import Pair, complex_dtype, is_paired, join, real_dtype

aten = torch.ops.aten
prims = torch.ops.prims

__all__ = ["Rule", "RULES", "LIBRARY", "LIBRARY_RULES", "RAISES", "Ctx", "lookup"]


@dataclass(frozen=True)
class Rule:
    op: torch._ops.OpOverload
    fn: Callable
    group: str
    note: str = ""


@dataclass
class Ctx:
    """What a rule may know besides its arguments: the op's original output (a fake tensor)."""

    op: torch._ops.OpOverload
    out: object  # the traced output value of the original node (FakeTensor, tuple, or None)

    @property
    def out_dtype(self) -> Optional[torch.dtype]:
        out = self.out
        if isinstance(out, (tuple, list)) and out:
            out = out[0]
        return out.dtype if isinstance(out, torch.Tensor) else None


RULES: Dict[torch._ops.OpOverload, Rule] = {}


def _overloads(*ops):
    for op in ops:
        if isinstance(op, torch._ops.OpOverloadPacket):
            for name in op.overloads():
                yield getattr(op, name)
        else:
            yield op


def rule(*ops, group: str, note: str = ""):
    def deco(fn):
        for op in _overloads(*ops):
            RULES[op] = Rule(op, fn, group, note)
        return fn

    return deco


def lookup(op) -> Optional[Rule]:
    return RULES.get(op)


def _ops(*names) -> List[torch._ops.OpOverload]:
    """Overloads by "name.overload" that exist in this torch (some differ by release)."""
    found = []
    for name in names:
        packet, _, overload = name.partition(".")
        pk = getattr(aten, packet, None)
        if pk is None:
            continue
        op = getattr(pk, overload or "default", None)
        if op is not None:
            found.append(op)
    return found


# ---------------------------------------------------------------------------
# helpers on (re, im) tuples whose parts are tensors or Python floats
# ---------------------------------------------------------------------------


def _is_num(x) -> bool:
    return isinstance(x, numbers.Number) and not isinstance(x, bool) or isinstance(x, bool)


def parts(x, rdt: torch.dtype) -> Tuple[object, object]:
    """``x`` (Pair, real tensor, Python number) as (re, im) in real dtype ``rdt``."""
    if isinstance(x, Pair):
        re, im = x.re, x.im
        if re.dtype != rdt:
            re, im = re.to(rdt), im.to(rdt)
        return re, im
    if isinstance(x, torch.Tensor):
        if x.is_complex():  # a complex dtype the rewrite does not pair (complex32): both parts
            p = Pair.of(x.to(complex_dtype(rdt)))
            return p.re, p.im
        if x.dtype != rdt:
            x = x.to(rdt)
        return x, torch.zeros_like(x)
    c = complex(x)
    return c.real, c.imag


def _out_dtype(ctx: Ctx, *xs) -> torch.dtype:
    dt = ctx.out_dtype
    if dt is not None and dt.is_complex:
        return dt
    dts = [x.dtype if isinstance(x, (Pair, torch.Tensor)) else None for x in xs]
    dt = None
    for d in dts:
        if d is not None:
            dt = d if dt is None else torch.promote_types(dt, d)
    return complex_dtype(dt or torch.float32)


def _mk(re, im, dtype, like=None) -> Pair:
    if not isinstance(re, torch.Tensor):
        re = torch.full_like(im, re) if isinstance(im, torch.Tensor) else torch.scalar_tensor(re, dtype=real_dtype(dtype), device=like.device)
    if not isinstance(im, torch.Tensor):
        im = torch.full_like(re, im)
    return Pair(re, im, dtype)


def cmul(a, b):
    ar, ai = a
    br, bi = b
    return ar * br - ai * bi, ar * bi + ai * br


def cdiv(a, b):
    """Smith's scaled division, as ``c10::complex::operator/=`` (numpy's algorithm)."""
    ar, ai = a
    br, bi = b
    if not isinstance(br, torch.Tensor) and not isinstance(bi, torch.Tensor):
        # constant divisor: eager computes the same scaled formula; fold it in Python.
        abs_c, abs_d = abs(br), abs(bi)
        if abs_c == 0 and abs_d == 0:
            return ar / abs_c if abs_c else ar * math.inf, ai * math.inf  # complex inf/nan
        if abs_c >= abs_d:
            rat = bi / br
            scl = 1.0 / (br + bi * rat)
            return (ar + ai * rat) * scl, (ai - ar * rat) * scl
        rat = br / bi
        scl = 1.0 / (bi + br * rat)
        return (ar * rat + ai) * scl, (ai * rat - ar) * scl
    if not isinstance(br, torch.Tensor):
        br = torch.full_like(bi, br)
    if not isinstance(bi, torch.Tensor):
        bi = torch.full_like(br, bi)
    abs_c, abs_d = br.abs(), bi.abs()
    c_big = abs_c >= abs_d
    # rat = small/large component; the 0/0 case (both zero) yields nan here and is patched below
    num = torch.where(c_big, bi, br)
    den = torch.where(c_big, br, bi)
    rat = num / den
    scl = 1.0 / (den + num * rat)
    re_big = (ar + ai * rat) * scl
    im_big = (ai - ar * rat) * scl
    re_small = (ar * rat + ai) * scl
    im_small = (ai * rat - ar) * scl
    re = torch.where(c_big, re_big, re_small)
    im = torch.where(c_big, im_big, im_small)
    zero = (abs_c == 0) & (abs_d == 0)
    re = torch.where(zero, ar / abs_c, re)
    im = torch.where(zero, ai / abs_d, im)
    return re, im


def _isinf(x):
    """isinf as a compare (Inductor's vectorised isinf is a scalar loop)."""
    return x.abs() == math.inf


def _isnan(x):
    return x != x


def _isfinite(x):
    return x.abs() < math.inf


def _t(x, like):
    return x if isinstance(x, torch.Tensor) else torch.full_like(like, x)


def chypot(re, im):
    """|re + i im| without overflow or underflow, as hypot, at the cost of one division.

    ``m*sqrt(1 + (n/m)^2)`` with ``m = max(|re|, |im|)``, ``n = min``; C99's
    special values: ``inf`` if either part is infinite (even with a nan), 0 at 0.
    Much cheaper than the vectorised ``hypot`` (Sleef) Inductor would call,
    except where ptc writes that inline (float32 on x86,
    :func:`ptc.complex.codegen.inline_hypot`): there this is ``torch.hypot``.
    """
    if _inline_hypot(re.dtype):
        return torch.hypot(re, im)
    ar, ai = re.abs(), im.abs()
    m = torch.maximum(ar, ai)
    n = torch.minimum(ar, ai)
    r = n / m
    out = m * torch.sqrt(1.0 + r * r)
    out = torch.where(m == 0, m, out)
    return torch.where((ar == math.inf) | (ai == math.inf), math.inf, out)


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


@rule(aten.view_as_complex.default, group="boundary", note="pairs of the float view, no copy")
def _view_as_complex(ctx, t):
    # handled in the interpreter when t came from view_as_real/stack; here t is a real tensor
    re, im = aten.select(t, -1, 0), aten.select(t, -1, 1)
    return Pair(re, im, complex_dtype(t.dtype), source=lambda: aten.view_as_complex(t))


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


# ---------------------------------------------------------------------------
# elementwise arithmetic
# ---------------------------------------------------------------------------


def _binary(ctx, a, b):
    dt = _out_dtype(ctx, a, b)
    rdt = real_dtype(dt)
    return parts(a, rdt), parts(b, rdt), dt


def _out(re, im, dt, *refs) -> Pair:
    like = next((r for r in refs if isinstance(r, torch.Tensor)), None)
    return _mk(re, im, dt, like)


def _scaled(b, alpha):
    if alpha is None or alpha == 1:
        return b
    return cmul(b, parts(alpha, None if not isinstance(b[0], torch.Tensor) else b[0].dtype))


def _alpha_times(pb, alpha, sign=1.0):
    """``(sign*alpha + 0j) * b`` with every product eager's kernel forms.

    Eager's complex add is ``fmadd(b, alpha, a)`` with ``alpha = 1 + 0j`` even
    for a plain ``a + b``, so an infinite part of ``b`` meets ``0 * inf = nan``
    exactly as there (``0+0j + (inf+0j)`` is ``inf+nanj`` in eager).
    """
    c = complex(alpha) * sign
    return cmul(pb, (c.real, c.imag))


@rule(aten.add.Tensor, aten.add.Scalar, group="elementwise", note="a + alpha*b as eager's fmadd")
def _add(ctx, a, b, alpha=1):
    pa, pb, dt = _binary(ctx, a, b)
    pb = _alpha_times(pb, alpha)
    return _out(pa[0] + pb[0], pa[1] + pb[1], dt, *pa, *pb)


@rule(aten.sub.Tensor, aten.sub.Scalar, group="elementwise", note="a + (-alpha)*b as eager")
def _sub(ctx, a, b, alpha=1):
    pa, pb, dt = _binary(ctx, a, b)
    pb = _alpha_times(pb, alpha, -1.0)
    return _out(pa[0] + pb[0], pa[1] + pb[1], dt, *pa, *pb)


@rule(aten.rsub.Tensor, aten.rsub.Scalar, group="elementwise")
def _rsub(ctx, a, b, alpha=1):
    return _sub(ctx, b, a, alpha) if alpha == 1 else NotImplemented


@rule(aten.neg.default, group="elementwise")
def _neg(ctx, a):
    return Pair(-a.re, -a.im, a.dtype)


@rule(aten.mul.Tensor, aten.mul.Scalar, group="elementwise", note="includes real x complex and theta*1j")
def _mul(ctx, a, b):
    pa, pb, dt = _binary(ctx, a, b)
    re, im = cmul(pa, pb)
    out = _out(re, im, dt, *pa, *pb)
    # a complex Python scalar may arrive as itself or as a 0-d constant pair (Tensor schema slot)
    a, b = (x.value if isinstance(x, Pair) and x.value is not None else x for x in (a, b))
    if isinstance(a, numbers.Number) and not isinstance(b, Pair):
        a, b = b, a
    if (
        isinstance(a, torch.Tensor)
        and not a.is_complex()
        and isinstance(b, complex)
        and b.real == 0
        and b.imag != 0
        and math.isfinite(b.imag)
    ):
        out.imag_only = True  # real tensor times a pure imaginary constant (theta * 1j)
    return out


@rule(aten.div.Tensor, aten.div.Scalar, group="elementwise", note="Smith's scaled division, as c10")
def _div(ctx, a, b):
    pa, pb, dt = _binary(ctx, a, b)
    if not isinstance(b, Pair) and not (isinstance(b, numbers.Number) and isinstance(b, complex)):
        # real divisor: eager still divides complex by (b + 0j); the scaled formula reduces to this
        br = pb[0]
        re, im = pa[0] / br, pa[1] / br
        return _out(re, im, dt, *pa, br)
    re, im = cdiv(pa, pb)
    return _out(re, im, dt, *pa, *pb)


@rule(aten.reciprocal.default, group="elementwise")
def _reciprocal(ctx, a):
    rdt = real_dtype(a.dtype)
    re, im = cdiv((1.0, 0.0), (a.re, a.im))
    return _out(re, im, a.dtype, a.re)


@rule(aten.square.default, group="elementwise")
def _square(ctx, a):
    re, im = cmul((a.re, a.im), (a.re, a.im))
    return Pair(re, im, a.dtype)


def _exp_parts(re, im):
    """exp(re) * (cos im, sin im); on the real axis exp(x + 0j) = exp(x) + 0j exactly (C99, eager)."""
    e = torch.exp(re)
    on_axis = im == 0
    return torch.where(on_axis, e, e * torch.cos(im)), torch.where(on_axis, im, e * torch.sin(im))


def _log_parts(re, im):
    return torch.log(chypot(re, im)), torch.atan2(im, re)


@rule(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar, group="elementwise",
      note="integer exponents by multiplication, 0.5 as sqrt, else exp(b*log(a))")
def _pow(ctx, a, b):
    dt = _out_dtype(ctx, a, b)
    rdt = real_dtype(dt)
    pa = parts(a, rdt)
    if isinstance(b, numbers.Number) and not isinstance(b, bool) and isinstance(a, (Pair, torch.Tensor)):
        c = complex(b)
        if c.imag == 0 and float(c.real).is_integer() and abs(c.real) <= 4:
            n = int(c.real)
            if n == 0:
                like = pa[0]
                return Pair(torch.ones_like(like), torch.zeros_like(like), dt)
            acc = pa
            for _ in range(abs(n) - 1):
                acc = cmul(acc, pa)
            if n < 0:
                acc = cdiv((1.0, 0.0), acc)
            return _out(acc[0], acc[1], dt, *pa)
        if c == 0.5:
            re, im = _sqrt_parts(*pa)
            return Pair(re, im, dt)
    pb = parts(b, rdt)
    lr, li = _log_parts(*(_t(p, pa[0] if isinstance(pa[0], torch.Tensor) else pb[0]) for p in pa))
    er, ei = cmul((lr, li), pb)
    re, im = _exp_parts(er, ei)
    # 0 ** b with b != 0 is 0 in eager (std::pow); exp(b*log(0)) gives nan for complex b
    return Pair(re, im, dt)


@rule(aten.abs.default, group="elementwise", note="hypot (no overflow)")
def _abs(ctx, a):
    return chypot(a.re, a.im)


@rule(aten.angle.default, group="elementwise", note="atan2(im, re)")
def _angle(ctx, a):
    return torch.atan2(a.im, a.re)


@rule(aten.sgn.default, group="elementwise", note="z/|z|, 0 at 0")
def _sgn(ctx, a):
    mag = chypot(a.re, a.im)
    zero = mag == 0
    re = torch.where(zero, 0.0, a.re / mag)
    im = torch.where(zero, 0.0, a.im / mag)
    return Pair(re, im, a.dtype)


@rule(aten.exp.default, group="elementwise", note="exp(i*theta) as cos, sin")
def _exp(ctx, a):
    if getattr(a, "imag_only", False):
        # a = theta * (i c): its real part is 0 wherever theta is finite, nan elsewhere, and so
        # exp(a) = cos(im) + i sin(im) exactly (for non-finite im both are nan, as eager's)
        return Pair(torch.cos(a.im), torch.sin(a.im), a.dtype)
    re, im = _exp_parts(a.re, a.im)
    return Pair(re, im, a.dtype)


@rule(aten.exp2.default, group="elementwise")
def _exp2(ctx, a):
    ln2 = math.log(2.0)
    re, im = _exp_parts(a.re * ln2, a.im * ln2)
    return Pair(re, im, a.dtype)


@rule(aten.expm1.default, group="elementwise", note="expm1(x)cos(y) - 2 sin^2(y/2) for accuracy near 0")
def _expm1(ctx, a):
    x, y = a.re, a.im
    s = torch.sin(0.5 * y)
    re = torch.expm1(x) * torch.cos(y) - 2.0 * s * s
    im = torch.exp(x) * torch.sin(y)
    return Pair(re, im, a.dtype)


@rule(aten.log.default, group="elementwise")
def _log(ctx, a):
    re, im = _log_parts(a.re, a.im)
    return Pair(re, im, a.dtype)


@rule(aten.log2.default, aten.log10.default, group="elementwise")
def _log_base(ctx, a):
    re, im = _log_parts(a.re, a.im)
    k = 1.0 / math.log(2.0 if ctx.op is aten.log2.default else 10.0)
    return Pair(re * k, im * k, a.dtype)


@rule(aten.log1p.default, group="elementwise", note="0.5*log1p(2x+x^2+y^2) near 0")
def _log1p(ctx, a):
    x, y = a.re, a.im
    xp1 = x + 1.0
    mag = chypot(xp1, y)
    small = mag < 0.5
    # near -1 (|1+z| small) or far away: the plain log is accurate; near 0 use log1p
    re_far = torch.log(mag)
    re_near = 0.5 * torch.log1p(x * (2.0 + x) + y * y)
    big = (x.abs() > 0.5) | (y.abs() > 0.5) | small
    re = torch.where(big, re_far, re_near)
    im = torch.atan2(y, xp1)
    return Pair(re, im, a.dtype)


def _sqrt_parts(x, y):
    """Principal sqrt, overflow-safe (Kahan): t = sqrt((|x| + |z|)/2)."""
    ax = x.abs()
    mag = chypot(x, y)
    t = torch.sqrt(0.5 * (ax + mag))
    # huge inputs: (ax + mag) overflows; scale down by 4
    t = torch.where(_isinf(ax + mag) & _isfinite(mag), 2.0 * torch.sqrt(0.5 * (0.25 * ax + 0.25 * mag)), t)
    u = torch.where(t == 0, 0.0, y.abs() / (2.0 * t))
    re = torch.where(x >= 0, t, u)
    im = torch.where(x >= 0, torch.where(t == 0, y, y / (2.0 * t)), torch.copysign(t, y))
    # C99: sqrt(x + i inf) = inf + i inf for all x (including nan); sqrt(-inf + iy) = 0 + i inf
    yinf = _isinf(y)
    re = torch.where(yinf, math.inf, re)
    im = torch.where(yinf, y, im)
    return re, im


@rule(aten.sqrt.default, group="elementwise", note="overflow-safe principal root")
def _sqrt(ctx, a):
    re, im = _sqrt_parts(a.re, a.im)
    return Pair(re, im, a.dtype)


@rule(aten.rsqrt.default, group="elementwise")
def _rsqrt(ctx, a):
    sr, si = _sqrt_parts(a.re, a.im)
    re, im = cdiv((1.0, 0.0), (sr, si))
    return Pair(re, im, a.dtype)


@rule(aten.sin.default, group="elementwise")
def _sin(ctx, a):
    x, y = a.re, a.im
    return Pair(torch.sin(x) * torch.cosh(y), torch.cos(x) * torch.sinh(y), a.dtype)


@rule(aten.cos.default, group="elementwise")
def _cos(ctx, a):
    x, y = a.re, a.im
    return Pair(torch.cos(x) * torch.cosh(y), -(torch.sin(x) * torch.sinh(y)), a.dtype)


@rule(aten.sinh.default, group="elementwise")
def _sinh(ctx, a):
    x, y = a.re, a.im
    return Pair(torch.sinh(x) * torch.cos(y), torch.cosh(x) * torch.sin(y), a.dtype)


@rule(aten.cosh.default, group="elementwise")
def _cosh(ctx, a):
    x, y = a.re, a.im
    return Pair(torch.cosh(x) * torch.cos(y), torch.sinh(x) * torch.sin(y), a.dtype)


def _tanh_parts(x, y):
    """Kahan's tanh (as FreeBSD/glibc ctanh): accurate near poles, no overflow for large |x|."""
    t = torch.tan(y)
    beta = 1.0 + t * t
    s = torch.sinh(x)
    rho = torch.sqrt(1.0 + s * s)
    den = 1.0 + beta * s * s
    re = beta * rho * s / den
    im = t / den
    big = x.abs() >= 22.0 if x.dtype == torch.float64 else x.abs() >= 11.0
    exp_m2x = torch.exp(-2.0 * x.abs())
    re = torch.where(big, torch.copysign(torch.ones_like(x), x), re)
    im = torch.where(big, 4.0 * torch.sin(y) * torch.cos(y) * exp_m2x, im)
    # tanh(x + i0) stays real; tanh(nan + i0) = nan + i0 (C99)
    im = torch.where(y == 0, y, im)
    return re, im


@rule(aten.tanh.default, group="elementwise", note="Kahan's formula")
def _tanh(ctx, a):
    re, im = _tanh_parts(a.re, a.im)
    return Pair(re, im, a.dtype)


@rule(aten.tan.default, group="elementwise", note="-i tanh(i z)")
def _tan(ctx, a):
    re, im = _tanh_parts(-a.im, a.re)  # tanh(i z) with i z = -y + i x
    return Pair(im, -re, a.dtype)


@rule(aten.sigmoid.default, group="elementwise", note="1 / (1 + exp(-z))")
def _sigmoid(ctx, a):
    er, ei = _exp_parts(-a.re, -a.im)
    re, im = cdiv((1.0, 0.0), (1.0 + er, ei))
    return Pair(re, im, a.dtype)


def _asinh_parts(x, y):
    """asinh(z) = log(z + sqrt(z^2 + 1)), evaluated for Re z >= 0 and mirrored (odd function)."""
    sgn = torch.where(x < 0, -1.0, 1.0)
    ax = x * sgn
    ay = y * sgn
    # z^2 + 1 = (ax^2 - ay^2 + 1) + i 2 ax ay ; computed as (ax - ay)(ax + ay) + 1 for accuracy
    wr = (ax - ay) * (ax + ay) + 1.0
    wi = 2.0 * ax * ay
    sr, si = _sqrt_parts(wr, wi)
    ur, ui = ax + sr, ay + si
    mag = chypot(ur, ui)
    re = torch.log(mag)
    # near 0, log(|z + sqrt(z^2+1)|) loses digits; use log1p of (|u| - 1)
    re = torch.where(mag < 2.0, torch.log1p(mag - 1.0), re)
    im = torch.atan2(ui, ur)
    return re * sgn, im * sgn


@rule(aten.asinh.default, group="elementwise")
def _asinh(ctx, a):
    re, im = _asinh_parts(a.re, a.im)
    return Pair(re, im, a.dtype)


@rule(aten.asin.default, group="elementwise", note="-i asinh(i z)")
def _asin(ctx, a):
    re, im = _asinh_parts(-a.im, a.re)
    return Pair(im, -re, a.dtype)


@rule(aten.acos.default, group="elementwise", note="pi/2 - asin(z)")
def _acos(ctx, a):
    re, im = _asinh_parts(-a.im, a.re)
    return Pair(math.pi / 2 - im, re, a.dtype)


@rule(aten.acosh.default, group="elementwise", note="i*acos(z) with the branch of Im >= 0... (+/-)")
def _acosh(ctx, a):
    re, im = _asinh_parts(-a.im, a.re)
    ar, ai = math.pi / 2 - im, re  # acos(z)
    # acosh(z) = +-i acos(z), choosing Re >= 0
    out_re, out_im = -ai, ar
    flip = out_re < 0
    return Pair(torch.where(flip, -out_re, out_re), torch.where(flip, -out_im, out_im), a.dtype)


def _atanh_parts(x, y):
    """atanh(z) = 0.25*log1p(4x / ((1-x)^2 + y^2)) + 0.5i*atan2(2y, (1-x)(1+x) - y^2).

    The real part is odd in x and evaluated at |x| (``log1p`` of a non-negative
    argument): for x near -1 the argument 4x/(...) would approach -1 and
    ``log1p`` would lose every digit of the result's magnitude.
    """
    ax = x.abs()
    omx = 1.0 - ax
    den = omx * omx + y * y
    re = torch.copysign(0.25 * torch.log1p(4.0 * ax / den), x)
    im = 0.5 * torch.atan2(2.0 * y, omx * (1.0 + ax) - y * y)
    return re, im


@rule(aten.atanh.default, group="elementwise")
def _atanh(ctx, a):
    re, im = _atanh_parts(a.re, a.im)
    return Pair(re, im, a.dtype)


@rule(aten.atan.default, group="elementwise", note="-i atanh(i z)")
def _atan(ctx, a):
    re, im = _atanh_parts(-a.im, a.re)
    return Pair(im, -re, a.dtype)


@rule(aten.addcmul.default, group="elementwise")
def _addcmul(ctx, s, t1, t2, value=1):
    dt = _out_dtype(ctx, s, t1, t2)
    rdt = real_dtype(dt)
    prod = cmul(parts(t1, rdt), parts(t2, rdt))
    if value != 1:
        prod = cmul(prod, parts(value, rdt))
    ps = parts(s, rdt)
    return _out(ps[0] + prod[0], ps[1] + prod[1], dt, *ps, *prod)


@rule(aten.addcdiv.default, group="elementwise")
def _addcdiv(ctx, s, t1, t2, value=1):
    dt = _out_dtype(ctx, s, t1, t2)
    rdt = real_dtype(dt)
    q = cdiv(parts(t1, rdt), parts(t2, rdt))
    if value != 1:
        q = cmul(q, parts(value, rdt))
    ps = parts(s, rdt)
    return _out(ps[0] + q[0], ps[1] + q[1], dt, *ps, *q)


@rule(aten.lerp.Scalar, aten.lerp.Tensor, group="elementwise", note="a + w*(b - a)")
def _lerp(ctx, a, b, w):
    dt = _out_dtype(ctx, a, b)
    rdt = real_dtype(dt)
    pa, pb, pw = parts(a, rdt), parts(b, rdt), parts(w, rdt)
    d = (pb[0] - pa[0], pb[1] - pa[1])
    # eager uses a + w*(b-a) for |w| < 0.5 and b - (b-a)*(1-w) otherwise
    s = cmul(pw, d)
    return _out(pa[0] + s[0], pa[1] + s[1], dt, *pa, *pb)


# --- predicates and selection ---


@rule(aten.isnan.default, group="elementwise")
def _isnan_rule(ctx, a):
    return _isnan(a.re) | _isnan(a.im)


@rule(aten.isinf.default, group="elementwise")
def _isinf_rule(ctx, a):
    return _isinf(a.re) | _isinf(a.im)


@rule(aten.isfinite.default, group="elementwise")
def _isfinite_rule(ctx, a):
    return _isfinite(a.re) & _isfinite(a.im)


@rule(aten.eq.Tensor, aten.eq.Scalar, aten.ne.Tensor, aten.ne.Scalar, group="elementwise")
def _eq(ctx, a, b):
    dt = _out_dtype(ctx, a, b) if not isinstance(ctx.out_dtype, torch.dtype) or not ctx.out_dtype == torch.bool else None
    dt = complex_dtype(torch.promote_types(*(x.dtype if isinstance(x, (Pair, torch.Tensor)) else torch.float32 for x in (a, b))))
    rdt = real_dtype(dt)
    pa, pb = parts(a, rdt), parts(b, rdt)
    eq = (pa[0] == pb[0]) & (pa[1] == pb[1]) if isinstance(pa[0], torch.Tensor) or isinstance(pb[0], torch.Tensor) else None
    if eq is None:
        return NotImplemented
    if ctx.op.overloadpacket is aten.ne:
        return ~eq
    return eq


@rule(aten.logical_not.default, group="elementwise")
def _logical_not(ctx, a):
    return (a.re == 0) & (a.im == 0)


def _truth(x):
    """``x != 0`` for a Pair, a real tensor or a Python number (complex: either part nonzero)."""
    if isinstance(x, Pair):
        return (x.re != 0) | (x.im != 0)
    if isinstance(x, torch.Tensor):
        return x != 0
    return bool(x)


@rule(aten.logical_and.default, aten.logical_or.default, aten.logical_xor.default, group="elementwise",
      note="on (re != 0) | (im != 0)")
def _logical_binary(ctx, a, b):
    ta, tb = _truth(a), _truth(b)
    if not isinstance(ta, torch.Tensor) and not isinstance(tb, torch.Tensor):
        return NotImplemented
    fn = {"logical_and": torch.logical_and, "logical_or": torch.logical_or, "logical_xor": torch.logical_xor}
    return fn[ctx.op.overloadpacket.__name__](ta, tb)


@rule(*_ops("any.default", "any.dim", "any.dims", "all.default", "all.dim", "all.dims"), group="reduction",
      note="on (re != 0) | (im != 0)")
def _any_all(ctx, a, *args, **kwargs):
    return ctx.op(_truth(a), *args, **kwargs)


@rule(aten.ldexp.Tensor, group="elementwise", note="self * 2**other, per part")
def _ldexp(ctx, a, other):
    dt = _out_dtype(ctx, a)
    rdt = real_dtype(dt)
    if isinstance(other, Pair):
        return NotImplemented  # a complex exponent: eager computes exp2 of it
    scale = torch.exp2(other.to(rdt)) if isinstance(other, torch.Tensor) else 2.0 ** other
    re, im = parts(a, rdt)
    return Pair(re * scale, im * scale, dt)


@rule(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar, group="elementwise")
def _where(ctx, cond, a, b):
    dt = ctx.out_dtype
    rdt = real_dtype(dt)
    pa, pb = parts(a, rdt), parts(b, rdt)
    re = torch.where(cond, pa[0], pb[0])
    im = torch.where(cond, pa[1], pb[1])
    return Pair(re, im, dt)


@rule(aten.masked_fill.Scalar, aten.masked_fill.Tensor, group="movement")
def _masked_fill(ctx, a, mask, value):
    rdt = real_dtype(a.dtype)
    pv = parts(value, rdt)
    return Pair(torch.masked_fill(a.re, mask, pv[0]), torch.masked_fill(a.im, mask, pv[1]), a.dtype)


@rule(aten.nan_to_num.default, group="elementwise", note="per part, as eager")
def _nan_to_num(ctx, a, nan=None, posinf=None, neginf=None):
    return Pair(torch.nan_to_num(a.re, nan, posinf, neginf), torch.nan_to_num(a.im, nan, posinf, neginf), a.dtype)


# ---------------------------------------------------------------------------
# data movement: the same op on both parts
# ---------------------------------------------------------------------------


def _is_scalar_type(typ) -> bool:
    """Whether a schema argument type is ATen's ``Scalar`` (printed ``number``), optional or not."""
    ts = str(typ)
    return ts in ("number", "Optional[number]", "number?") or ts.startswith("Scalar")


def _componentwise(ctx, *args, **kwargs):
    """Run the op on the real parts, then on the imaginary parts.

    Complex tensors and values in ``Scalar`` positions split into their parts;
    real floating tensors in data positions are promoted (imaginary part 0);
    indices, masks, dims and sizes are shared.
    """
    dt = ctx.out_dtype
    if dt is None or dt not in (torch.complex64, torch.complex128):
        return NotImplemented
    rdt = real_dtype(dt)
    schema = ctx.op._schema
    arg_types = {a.name: a.type for a in schema.arguments}
    names = [a.name for a in schema.arguments]

    def split(value, typ):
        ts = str(typ)
        if isinstance(value, Pair):
            re, im = parts(value, rdt)
            return re, im
        if isinstance(value, torch.Tensor):
            if value.dtype.is_floating_point or value.dtype.is_complex:
                re, im = parts(value, rdt)
                return re, im
            return value, value
        if isinstance(value, (list, tuple)):
            if any(isinstance(v, (Pair, torch.Tensor)) for v in value):
                pieces = [split(v, "Tensor") if v is not None else (None, None) for v in value]
                return type(value)(p[0] for p in pieces), type(value)(p[1] for p in pieces)
            return value, value
        if _is_scalar_type(typ) and isinstance(value, numbers.Number) and not isinstance(value, bool):
            c = complex(value)
            return c.real, c.imag
        if isinstance(value, torch.dtype) and value.is_complex:
            return rdt, rdt
        return value, value

    if ctx.op in _WRITES_INTO_SELF and args and isinstance(args[0], Pair):
        args = (_as_destination(args[0]),) + tuple(args[1:])
    re_args, im_args = [], []
    for i, v in enumerate(args):
        r, m = split(v, arg_types.get(names[i], "") if i < len(names) else "")
        re_args.append(r)
        im_args.append(m)
    re_kw, im_kw = {}, {}
    for k, v in kwargs.items():
        r, m = split(v, arg_types.get(k, ""))
        re_kw[k], im_kw[k] = r, m
    re = ctx.op(*re_args, **re_kw)
    im = ctx.op(*im_args, **im_kw)
    if isinstance(re, (tuple, list)):
        return type(re)(Pair(r, m, dt) for r, m in zip(re, im))
    return Pair(re, im, dt)


def _as_destination(pair: Pair) -> Pair:
    """``pair`` with parts that a scatter may write into: values of their own, not views.

    Parts read from a complex tensor are views of it: through a complex64's
    int64 bits (:func:`ptc.complex.pair.split`) they are dtype views of an
    int32 buffer, which Inductor scatters into as if it were that buffer
    (float values added to, or stored over, int32 bits: wrong results on one
    torch, ``make_reindexer NYI on DtypeView`` on the other); as planes of
    ``view_as_real`` they alias the tensor, and Inductor may scatter into a
    graph input's planes in place while later code still reads the input.
    ``part * 1`` (exact for every float, signed zeros and NaN included) is a
    computed value Inductor gives a buffer of its own. A pair that is
    computed already (no source, nothing it copies) is returned as it is.
    """
    if not pair.has_source and pair.same_values is None:
        return pair
    return Pair(pair.re * 1.0, pair.im * 1.0, pair.dtype)


#: data-movement ops whose first argument is the tensor written into (functional scatters);
#: not ``as_strided_scatter``, whose strides address the whole of ``self``'s storage
_WRITES_INTO_SELF = set(_ops(
    "scatter.src", "scatter.value", "scatter_add.default", "scatter_reduce.two", "index_put.default",
    "_unsafe_index_put.default", "index_add.default", "masked_scatter.default", "slice_scatter.default",
    "select_scatter.default", "diagonal_scatter.default", "index_fill.int_Scalar", "index_fill.int_Tensor", "index_copy.default", "put.default",
))

_MOVEMENT = _ops(
    "cat.default", "stack.default", "constant_pad_nd.default", "flip.default", "roll.default",
    "index.Tensor", "_unsafe_index.Tensor", "index_select.default", "gather.default", "scatter.src",
    "scatter.value", "scatter_add.default", "scatter_reduce.two", "index_put.default",
    "_unsafe_index_put.default", "index_add.default", "masked_scatter.default", "slice_scatter.default",
    "select_scatter.default", "diagonal_scatter.default", "as_strided_scatter.default", "repeat.default",
    "index_fill.int_Scalar", "index_fill.int_Tensor", "index_copy.default", "tril.default",
    "triu.default", "take.default", "reflection_pad1d.default", "replication_pad1d.default",
    "zero.default", "rot90.default", "roll.default", "clone.default",
)
_MOVEMENT += _ops("_unsafe_masked_index.default", "_unsafe_masked_index_put_accumulate.default")
_MOVEMENT.append(prims.rev.default)
for _op in _MOVEMENT:
    if _op in RULES:
        continue
    if _op is aten.scatter_reduce.two:
        continue  # 'prod'/'amax' reductions are not linear per part
    RULES[_op] = Rule(_op, _componentwise, "movement", "applied to both parts")

@rule(*_ops("scatter.reduce", "scatter.value_reduce"), group="movement", note="reduce='add': applied to both parts")
def _scatter_reduce_add(ctx, *args, reduce=None, **kwargs):
    if reduce != "add":
        return NotImplemented  # 'multiply' mixes the parts
    return _componentwise(ctx, *args, reduce=reduce, **kwargs)


@rule(aten.cumsum.default, group="reduction", note="one real cumsum over the (..., 2) float view")
def _cumsum(ctx, a, dim, *, dtype=None):
    dt = ctx.out_dtype
    if a.ndim == 0:
        return Pair(a.re.to(real_dtype(dt)), a.im.to(real_dtype(dt)), dt)
    planes = None
    if a.has_source and a.dtype == dt:
        z = a.complex()
        if not z.is_conj() and not z.is_neg():
            planes = aten.view_as_real(z)
    if planes is None:
        re, im = parts(a, real_dtype(dt))
        planes = aten.view_as_real(join(re, im, dt))
    out = aten.cumsum(planes, dim % a.ndim)
    return Pair(out[..., 0], out[..., 1], dt, source=lambda: aten.view_as_complex(out))


_LINEAR_REDUCTIONS = _ops(
    "sum.default", "sum.dim_IntList", "mean.default", "mean.dim", "trace.default",
    "nansum.default", "sum.IntList_out",
)
for _op in _LINEAR_REDUCTIONS:
    RULES[_op] = Rule(_op, _componentwise, "reduction", "linear: applied to both parts")


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


# ---------------------------------------------------------------------------
# backward formulas that appear as their own ops
# ---------------------------------------------------------------------------


@rule(aten.tanh_backward.default, group="backward", note="grad * conj(1 - y^2)")
def _tanh_backward(ctx, grad, y):
    dt = ctx.out_dtype
    rdt = real_dtype(dt)
    py, pg = parts(y, rdt), parts(grad, rdt)
    sq = cmul(py, py)
    d = (1.0 - sq[0], -sq[1])
    re, im = cmul(pg, (d[0], -d[1]))
    return Pair(re, im, dt)


@rule(aten.sigmoid_backward.default, group="backward", note="grad * conj((1 - y) * y)")
def _sigmoid_backward(ctx, grad, y):
    dt = ctx.out_dtype
    rdt = real_dtype(dt)
    py, pg = parts(y, rdt), parts(grad, rdt)
    d = cmul((1.0 - py[0], -py[1]), py)
    re, im = cmul(pg, (d[0], -d[1]))
    return Pair(re, im, dt)


@rule(*_ops("select_backward.default", "slice_backward.default", "diagonal_backward.default",
            "expand_backward.default", "unfold_backward.default"),
      group="backward", note="applied to both parts")
def _view_backward(ctx, grad, *args):
    return _componentwise(ctx, grad, *args)


# ---------------------------------------------------------------------------
# policy lists
# ---------------------------------------------------------------------------

#: ops that keep their library (BLAS/LAPACK/FFT) kernels; inputs and outputs cross zero-copy
LIBRARY = [
    op
    for op in _ops(
        "mm.default", "bmm.default", "mv.default", "addmm.default", "addmv.default", "baddbmm.default",
        "addbmm.default", "addr.default", "matmul.default", "outer.default", "convolution.default",
        "_fft_c2c.default", "_fft_r2c.default", "_fft_c2r.default", "linalg_matrix_exp.default",
        "_linalg_solve_ex.default", "_linalg_eigh.default", "linalg_eig.default", "_linalg_svd.default",
        "linalg_qr.default", "_linalg_det.default", "linalg_inv_ex.default", "linalg_lu_factor_ex.default",
        "linalg_lu_solve.default", "linalg_solve_triangular.default", "cholesky.default",
        "linalg_cholesky_ex.default", "_linalg_slogdet.default", "linalg_householder_product.default",
        "triangular_solve.default", "_fft_c2c.out", "linalg_lu.default", "cholesky_inverse.default",
        "cholesky_solve.default", "_cholesky_solve_helper.default", "geqrf.default", "ormqr.default",
        "lu_unpack.default", "linalg_ldl_factor_ex.default", "linalg_ldl_solve.default", "linalg_eigvals.default",
        "_linalg_eigvals.default", "linalg_eigh.default", "_linalg_check_errors.default",
    )
]

#: library ops that ptc calls in a faster form (still a BLAS call on the complex values); each
#: returns NotImplemented where it does not apply, and the op then runs on its own kernel
LIBRARY_RULES: Dict[torch._ops.OpOverload, Callable] = {aten.mv.default: _gemv.mv, aten.addmv.default: _gemv.addmv}

#: what coverage() says of a library op that has one of those
LIBRARY_NOTES = {
    aten.mv.default: "one-column complex GEMM, conj bit moved to the vectors (ptc.complex.gemv)",
    aten.addmv.default: "beta * self + alpha * mv, mv as a one-column complex GEMM (ptc.complex.gemv)",
}

#: ops that raise for complex inputs in eager; under ptc they raise the same way (they run on ATen)
RAISES = [
    op
    for op in _ops(
        "lt.Tensor", "lt.Scalar", "le.Tensor", "le.Scalar", "gt.Tensor", "gt.Scalar", "ge.Tensor",
        "ge.Scalar", "clamp.default", "clamp.Tensor", "clamp_min.default", "clamp_max.default",
        "amin.default", "amax.default", "min.default", "max.default", "min.dim", "max.dim",
        "minimum.default", "maximum.default", "sort.default", "sort.stable", "topk.default",
        "argmax.default", "argmin.default", "floor.default", "ceil.default", "round.default",
        "round.decimals", "trunc.default", "sign.default", "fmod.Tensor", "fmod.Scalar",
        "remainder.Tensor", "remainder.Scalar", "heaviside.default", "atan2.default", "hypot.default",
    )
]
