"""Rules for data movement (the same op on both parts) and the reductions that are linear."""

from __future__ import annotations

import numbers

import torch

from ptc.complex.pair import Pair, join, real_dtype
from ptc.complex.rules.core import RULES, Rule, _ops, parts, rule

aten = torch.ops.aten
prims = torch.ops.prims

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


@rule(aten.as_strided_scatter.default, group="movement", note="on the interleaved (re, im) storage")
def _as_strided_scatter(ctx, x, src, size, stride, storage_offset=None):
    """Its size, strides and offset address the storage of ``x.clone()`` (applied to each
    part, they addressed the planes' storage instead: wrong values, and Inductor wrote a
    one-element input in place). Where that clone is contiguous, its storage is the
    interleaved pairs ``stack((re, im), -1)``, a tensor of its own, addressed with doubled
    strides and offset; other layouts run on ATen."""
    out = ctx.out
    if not (isinstance(out, torch.Tensor) and out.is_contiguous()):
        return NotImplemented
    rdt = real_dtype(out.dtype)
    pairs = torch.stack(parts(x, rdt), -1)
    values = torch.stack(parts(src, rdt), -1)
    offset = 0 if storage_offset is None else storage_offset  # a clone starts its storage
    y = torch.as_strided_scatter(pairs, values, [*size, 2], [*(2 * s for s in stride), 1], 2 * offset)
    return Pair(y[..., 0], y[..., 1], out.dtype)


#: data-movement ops whose first argument is the tensor written into (functional scatters);
#: not ``as_strided_scatter``, whose strides address the whole of ``self``'s storage (above)
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
    "select_scatter.default", "diagonal_scatter.default", "repeat.default",
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


