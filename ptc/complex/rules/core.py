"""Shared pieces of the rules: the table, the context a rule gets, helpers on (re, im) parts."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import torch

from ptc import _compat
from ptc.complex.codegen import inline_hypot as _inline_hypot
from ptc.complex.pair import Pair, complex_dtype, real_dtype

aten = torch.ops.aten
prims = torch.ops.prims

__all__ = ["Rule", "RULES", "Ctx", "rule", "lookup", "parts", "cmul", "cdiv", "chypot"]


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
    return _compat.aten_overloads(*names)


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


