"""Rules for arithmetic, exponentials, trigonometry, predicates and selection."""

from __future__ import annotations

import math
import numbers

import torch

from ptc.complex.pair import Pair, complex_dtype, real_dtype
from ptc.complex.rules.core import _isfinite, _isinf, _isnan, _mk, _ops, _out_dtype, _t, cdiv, chypot, cmul, parts, rule

aten = torch.ops.aten
prims = torch.ops.prims

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
    like = pa[0] if isinstance(pa[0], torch.Tensor) else pb[0]
    ar, ai = (_t(p, like) for p in pa)
    lr, li = _log_parts(ar, ai)
    er, ei = cmul((lr, li), pb)
    re, im = _exp_parts(er, ei)
    # 0 ** b: exp(b * log(0)) is nan (-inf * 0); eager gives 0 for Re b > 0, inf + nan i for
    # Re b < 0 and nan + nan i for Re b == 0
    zero = (ar == 0) & (ai == 0)
    br = _t(pb[0], like)
    nan = float("nan")
    re = torch.where(zero, torch.where(br > 0, 0.0, torch.where(br < 0, float("inf"), nan)), re)
    im = torch.where(zero, torch.where(br > 0, 0.0, nan), im)
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
    return Pair(_times(torch.cosh(y), torch.sin(x)), torch.cos(x) * torch.sinh(y), a.dtype)


def _times(big, small):
    """``big * small`` where ``small`` may be an exact zero (the sine of a zero part) and
    ``big`` overflow to inf (cosh, sinh of a large part): that product is the zero, signed as
    the product (C99 and eager: ``sinh(100 + 0j)`` has Im 0, not inf * 0 = nan)."""
    zero = torch.where(torch.signbit(big) ^ torch.signbit(small), -0.0, 0.0)
    return torch.where(small == 0, zero, big * small)


@rule(aten.cos.default, group="elementwise")
def _cos(ctx, a):
    x, y = a.re, a.im
    return Pair(torch.cos(x) * torch.cosh(y), -_times(torch.sinh(y), torch.sin(x)), a.dtype)


@rule(aten.sinh.default, group="elementwise")
def _sinh(ctx, a):
    x, y = a.re, a.im
    return Pair(torch.sinh(x) * torch.cos(y), _times(torch.cosh(x), torch.sin(y)), a.dtype)


@rule(aten.cosh.default, group="elementwise")
def _cosh(ctx, a):
    x, y = a.re, a.im
    return Pair(torch.cosh(x) * torch.cos(y), _times(torch.sinh(x), torch.sin(y)), a.dtype)


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
    """asinh(z) = log(z + sqrt(z^2 + 1)), evaluated for Re z >= +0 and mirrored (odd function).

    ``Re z = -0.0`` is mirrored too (its sign bit): ``asin`` / ``acos`` of a real number pass
    ``-Im z = -0.0``, and unmirrored it put the square root on the other side of the branch
    cut, where ``ay + si`` cancels (digits lost, ``-inf`` for large ``|y|``)."""
    sgn = torch.where(torch.signbit(x), -1.0, 1.0)
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
    # acosh(z) = +-i acos(z) with Re >= 0, and Im of the sign of Im z (its sign bit: a real z
    # in (-1, 1) with -0.0 as Im has a negative Im). Choosing the sign from Re's computed sign
    # flipped at random there, where Re is a rounding residue around 0
    return Pair(ai.abs(), torch.copysign(ar, a.im), a.dtype)


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


