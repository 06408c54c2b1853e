"""Rules for the backward formulas that appear as their own ops."""

from __future__ import annotations


import torch

from ptc.complex.pair import Pair, real_dtype
from ptc.complex.rules.core import _ops, cmul, parts, rule
from ptc.complex.rules.movement import _componentwise

aten = torch.ops.aten
prims = torch.ops.prims

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


