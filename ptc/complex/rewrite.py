"""The graph pass: an ATen graph with complex values in, the same function in real arithmetic out.

It runs on each graph AOTAutograd hands to Inductor (forward, backward or
inference; functional, already decomposed), before Inductor lowers it. The
graph is re-traced with ``make_fx`` while an interpreter carries every complex
value as a :class:`~ptc.complex.pair.Pair`:

* complex graph inputs are read from their own interleaved memory, no copy
  (:func:`~ptc.complex.pair.split`: the int64 bits of each complex64 element
  on the CPU, else two strided views of ``view_as_real(input)``; conj/neg bits
  folded into signs);
* each complex op runs its rule from :mod:`ptc.complex.rules`, which emits
  real ATen ops that Inductor fuses like any real code;
* ops without a rule, library ops (GEMM, FFT, linalg; GEMV as a one-column
  GEMM, :mod:`ptc.complex.gemv`) and ops that raise for complex in eager run
  on their ATen kernel: pairs with a source pass the source tensor itself,
  others are interleaved once, and complex results come back as views;
* complex graph outputs are the source tensor when there is one, else one
  interleaving store (:func:`~ptc.complex.pair.join`) fused into the kernel
  that computes them, laid out
  like the original output (strides, conj bit).

The signature of the graph (inputs, outputs, dtypes, shapes) is unchanged.
"""

from __future__ import annotations

import collections
import contextlib
import operator
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence

import torch
import torch.fx as fx
import torch.fx.traceback as fx_traceback
import torch.utils._pytree as pytree
from torch.fx.experimental.proxy_tensor import make_fx

from ptc.complex import realgemm as _realgemm
from ptc.complex import rules as _rules
from ptc.complex.pair import Pair, from_storage, is_paired, join, real_dtype, store
from torch._subclasses.fake_tensor import FakeTensor

aten = torch.ops.aten

__all__ = ["Report", "rewrite", "has_complex"]


@dataclass
class Report:
    """What one rewrite did: ops rewritten, ops left on their ATen kernels."""

    rewritten: collections.Counter = field(default_factory=collections.Counter)
    library: collections.Counter = field(default_factory=collections.Counter)
    #: of those, the complex64 GEMMs computed as one real GEMM on oneDNN (:mod:`ptc.complex.realgemm`)
    real_gemm: collections.Counter = field(default_factory=collections.Counter)
    fallback: collections.Counter = field(default_factory=collections.Counter)
    graphs: int = 0
    #: library-bound Dynamo graphs run as they are (``ptc.complex.backend.library_bound``)
    library_graphs: int = 0
    #: the ops besides library kernels that those graphs ran on their eager kernels
    library_graph_ops: collections.Counter = field(default_factory=collections.Counter)
    #: why each graph that ptc could not compile was compiled the stock way instead
    stock_graphs: List[str] = field(default_factory=list)

    def merge(self, other: "Report") -> None:
        self.rewritten.update(other.rewritten)
        self.library.update(other.library)
        self.real_gemm.update(other.real_gemm)
        self.fallback.update(other.fallback)
        self.graphs += other.graphs
        self.library_graphs += other.library_graphs
        self.library_graph_ops.update(other.library_graph_ops)
        self.stock_graphs += other.stock_graphs

    def __str__(self) -> str:
        def fmt(c):
            return ", ".join(f"{k} x{v}" if v > 1 else k for k, v in sorted(c.items())) or "-"

        return (
            f"{self.graphs} graph(s); rewritten: {fmt(self.rewritten)}; "
            f"library kernels: {fmt(self.library)}; ATen fallbacks: {fmt(self.fallback)}"
            + (f"; of the GEMMs, real GEMMs on oneDNN: {fmt(self.real_gemm)}" if self.real_gemm else "")
            + (f"; library-bound graphs run as they are: {self.library_graphs}" if self.library_graphs else "")
            + (f"; compiled by stock Inductor instead: {len(self.stock_graphs)}" if self.stock_graphs else "")
        )


def _name(op) -> str:
    return str(op).replace("aten.", "", 1) if isinstance(op, torch._ops.OpOverload) else str(op)


def has_complex(gm: fx.GraphModule) -> bool:
    """Whether any value in ``gm`` is complex64/complex128 (or a Python complex constant is used)."""
    for node in gm.graph.nodes:
        leaves = pytree.tree_leaves(node.meta.get("val"))
        if any(is_paired(v) for v in leaves):
            return True
        if node.op == "call_function" and any(isinstance(a, complex) for a in pytree.tree_leaves((node.args, node.kwargs))):
            return True
    return False


_LIBRARY = set(_rules.LIBRARY)


_STRIDED_VIEWS = (aten.view.default, aten._unsafe_view.default)


def _viewable(t: torch.Tensor, shape) -> bool:
    """Whether ``t.view(shape)`` is possible with ``t``'s strides (True where sizes or strides are
    symbolic: those are left to the view itself, no guard is added)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing

    sizes, strides, shape = list(t.shape), list(t.stride()), list(shape)
    if not all(type(v) is int for v in sizes + strides + shape):
        return True
    with unset_fake_temporarily(), disable_proxy_modes_tracing():
        try:
            torch.empty_strided(sizes, strides, device="meta").view(shape)
        except RuntimeError:
            return False
    return True


class _PairInterpreter(fx.Interpreter):
    def __init__(self, gm: fx.GraphModule, report: Report, fake_mode=None) -> None:
        super().__init__(gm, garbage_collect_values=False)
        self.report = report
        self.fake_mode = fake_mode
        # tensors made by view_as_real(pair): id -> (tensor, pair); select/unbind/view_as_complex
        # of them go straight back to the pair's parts
        self._planes: Dict[int, Any] = {}
        self._flat_planes: Dict[int, Any] = {}  # the same, flattened: [..., 2n] (see _componentwise)
        self._layouts = {"stacked": self._planes, "flat": self._flat_planes}
        self._node: Optional[fx.Node] = None
        #: placeholders passed as their real storage view: name -> the complex dtype they hold
        self.stored_dtypes: Dict[str, torch.dtype] = {}
        self._storage: Dict[str, torch.Tensor] = {}  # their views, as traced
        self._inputs: Dict[str, torch.Tensor] = {}  # complex placeholders (not stored) by name
        #: names of the GEMM nodes computed in the real form (:func:`ptc.complex.realgemm.planned`)
        self.real_gemms: set = set()

    def run_node(self, n: fx.Node) -> Any:
        self._node = n
        return super().run_node(n)

    # --- inputs -------------------------------------------------------------

    def placeholder(self, target, args, kwargs):
        value = super().placeholder(target, args, kwargs)
        dtype = self.stored_dtypes.get(self._node.name) if self._node is not None else None
        if dtype is not None:  # the real storage view of a complex input (see stored_inputs)
            self._storage[self._node.name] = value
            return from_storage(value, dtype)
        if is_paired(value) and self._node is not None:
            self._inputs[self._node.name] = value
        return Pair.of(value) if is_paired(value) else value

    def get_attr(self, target, args, kwargs):
        value = super().get_attr(target, args, kwargs)
        if isinstance(value, torch.Tensor) and self.fake_mode is not None and not isinstance(value, FakeTensor):
            return _traced_constant(value)
        return Pair.of(value) if is_paired(value) else value

    # --- ops ----------------------------------------------------------------

    def _planes_of(self, value, layout="stacked"):
        """The pair whose planes ``value`` holds in ``layout`` ("stacked": ``[..., n, 2]``,
        "flat": ``[..., 2n]``), or None."""
        if isinstance(value, torch.Tensor):
            hit = self._layouts[layout].get(id(value))
            if hit is not None and hit[0] is value:
                return hit[1]
        return None

    def _remember(self, value, pair, layout):
        self._layouts[layout][id(value)] = (value, pair)

    def call_function(self, target, args, kwargs):
        if not isinstance(target, torch._ops.OpOverload):
            return target(*args, **kwargs)
        if target in _STRIDED_VIEWS and isinstance(args[0], torch.Tensor) and not _viewable(args[0], args[1]):
            # the graph's inputs may come with other strides than it was traced with (a backward graph's
            # saved activations are laid out as Inductor's forward kernels wrote them): where the view
            # is not possible on them, reshape (a copy; Inductor lowers the view the same way)
            target = aten.reshape.default
        if target is aten.copy_.default:
            stored = self._store_into_input(args)
            if stored is not None:
                return stored
        shortcut = self._plane_shortcut(target, args, kwargs)
        if shortcut is not None:
            return shortcut
        componentwise = self._componentwise(target, args, kwargs)
        if componentwise is not None:
            return componentwise
        leaves = pytree.tree_leaves((args, kwargs))
        out_meta = self._node.meta.get("val") if self._node is not None else None
        involved = (
            any(isinstance(x, Pair) for x in leaves)
            or any(isinstance(x, complex) for x in leaves)
            or any(is_paired(v) for v in pytree.tree_leaves(out_meta))
        )
        if not involved:
            return target(*args, **kwargs)
        name = _name(target)
        args = self._numbers_as_tensors(target, args, out_meta)
        if target in _LIBRARY:
            self.report.library[name] += 1
            if self._node is not None and self._node.name in self.real_gemms:
                result = _realgemm.FORMS[target](_rules.Ctx(target, out_meta), *args, **kwargs)
                if result is not NotImplemented:
                    self.report.real_gemm[name] += 1
                    return result
            faster_form = _rules.LIBRARY_RULES.get(target)
            if faster_form is not None:
                result = faster_form(_rules.Ctx(target, out_meta), *args, **kwargs)
                if result is not NotImplemented:
                    return result
            return self._aten(target, args, kwargs)
        if target is aten.view_as_real.default and isinstance(args[0], Pair):
            self.report.rewritten[name] += 1
            return self._view_as_real(args[0])
        r = _rules.lookup(target)
        if r is not None:
            result = r.fn(_rules.Ctx(target, out_meta), *args, **kwargs)
            if result is not NotImplemented:
                self.report.rewritten[name] += 1
                return result
        self.report.fallback[name] += 1
        return self._aten(target, args, kwargs)

    # --- an input updated in place ---------------------------------------------

    def _store_into_input(self, args):
        """The write-back of an input mutation (``copy_(input, value)``, as AOTAutograd emits it)
        into an input the graph takes as its real storage view: the values are stored as real
        values, by the kernel that computes them. The result is the stored pair, with the input
        as its source. None for any other ``copy_``."""
        node = self._node
        if node is None or len(args) != 2:
            return None
        dst = node.args[0]
        view = self._storage.get(dst.name) if isinstance(dst, fx.Node) else None
        if view is None or not isinstance(args[1], (Pair, torch.Tensor, bool, int, float, complex)):
            return None
        dtype = args[0].dtype
        value = Pair.promote(args[1], dtype, like=view)
        stored = store(view, value)
        self.report.rewritten["copy_.default"] += 1
        return Pair(stored.re, stored.im, dtype, source=args[0].complex)

    @staticmethod
    def _numbers_as_tensors(target, args, out_meta):
        """Python complex numbers the graph passes where the schema wants a Tensor, as 0-d pairs.

        (Autograd's ``mul`` backward emits ``_conj(1j)`` for a complex scalar operand.)
        """
        schema_args = target._schema.arguments
        fixed = None
        for i, value in enumerate(args):
            if isinstance(value, complex) and i < len(schema_args) and str(schema_args[i].type) == "Tensor":
                dtype = out_meta.dtype if is_paired(out_meta) else torch.complex64
                device = out_meta.device if isinstance(out_meta, torch.Tensor) else torch.device("cpu")
                fixed = list(args) if fixed is None else fixed
                fixed[i] = Pair.constant(value, torch.empty(0, device=device), dtype)
        return tuple(fixed) if fixed is not None else args

    def _view_as_real(self, pair: Pair) -> torch.Tensor:
        planes = None
        if pair.has_source:
            z = pair.complex()
            if not z.is_conj() and not z.is_neg():
                planes = aten.view_as_real(z)
        if planes is None:
            planes = aten.view_as_real(join(pair.re, pair.im, pair.dtype))
        self._remember(planes, pair, "stacked")
        return planes

    def _plane_shortcut(self, target, args, kwargs):
        if not args:
            return None
        pair = self._planes_of(args[0])
        if pair is None and target is aten.view_as_complex.default and self._node is not None:
            return self._lift(self._node.args[0])
        if pair is None:
            return None
        planes = args[0]
        last = planes.dim() - 1
        if target is aten.select.int and args[1] in (-1, last) and args[2] in (0, 1, -1, -2):
            return pair.re if args[2] in (0, -2) else pair.im
        if target is aten.unbind.int and len(args) > 1 and args[1] in (-1, last):
            return [pair.re, pair.im]
        if target is aten.view_as_complex.default:
            return pair
        return None

    # --- real arithmetic on the planes of a pair -------------------------------
    #
    # A real tensor holding a pair's planes, interleaved (re, im, re, im, ...) along its last
    # dimension, either as ``[..., n, 2]`` (what view_as_real makes) or flattened to ``[..., 2n]``,
    # is computed as usual, and the interpreter also remembers the pair it holds. Componentwise
    # arithmetic on such tensors (and on graph inputs read the same way), reshapes between the two
    # layouts and a full sum then act on the pair's parts; view_as_complex of the result is the
    # pair again. The interleaved tensor is then never read, and Inductor drops its store: one
    # kernel where there were two (Llama's rotary embedding, forward and backward).

    _COMPONENTWISE = {
        aten.mul.Tensor: operator.mul, aten.add.Tensor: operator.add,
        aten.sub.Tensor: operator.sub, aten.div.Tensor: operator.truediv,
    }
    _RESHAPES = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)

    @staticmethod
    def _relayout(src_shape, out_shape):
        """The layout a reshape from ``src_shape`` to ``out_shape`` takes interleaved planes to:
        "flat" where it merges a last dim of 2 into the one before, "stacked" where it splits
        the last dim into pairs, else None."""
        src, out = tuple(src_shape), tuple(out_shape)
        if len(src) >= 2 and src[-1] == 2 and out == src[:-2] + (2 * src[-2],):
            return "flat"
        if src and src[-1] % 2 == 0 and out == src[:-1] + (src[-1] // 2, 2):
            return "stacked"
        return None

    def _componentwise(self, target, args, kwargs):
        if not args or not isinstance(args[0], torch.Tensor):
            return None
        if target in self._RESHAPES:
            return self._reshape_planes(target, args, kwargs)
        if target is aten.sum.default and not kwargs and len(args) == 1:
            pair = self._planes_of(args[0], "flat") or self._planes_of(args[0])
            if pair is None:
                return None
            return aten.sum.default(pair.re + pair.im)
        if target in self._COMPONENTWISE and not kwargs and len(args) == 2:
            return self._binary_planes(target, args)
        return None

    def _reshape_planes(self, target, args, kwargs):
        src = args[0]
        stacked, flat = self._planes_of(src), self._planes_of(src, "flat")
        if stacked is None and flat is None:
            return None
        out = target(*args, **kwargs)
        layout = self._relayout(src.shape, out.shape)
        pair = {"flat": stacked, "stacked": flat}.get(layout)  # from the other layout
        if pair is not None:
            self._remember(out, pair, layout)
        return out

    def _binary_planes(self, target, args):
        a, b = args
        layout, pair_a = "flat", self._planes_of(a, "flat")
        if pair_a is None and self._planes_of(b, "flat") is not None:
            return None  # keep the operand order simple: planes first
        if pair_a is None:
            layout, pair_a = "stacked", self._planes_of(a)
        if pair_a is None:
            return None
        node_b = self._node.args[1] if self._node is not None else None
        pair_b = self._as_pair(b, node_b, a, layout, pair_a.dtype)
        if pair_b is None:
            return None
        # pair_b is a number or has pair_a's dtype (see _as_pair): out keeps a's dtype
        fn = self._COMPONENTWISE[target]
        out = target(*args)
        self._remember(out, Pair(fn(pair_a.re, pair_b.re), fn(pair_a.im, pair_b.im), pair_a.dtype), layout)
        return out

    def _lift(self, node, layout="stacked"):
        """The pair whose planes the real tensor of ``node`` holds, computed from the parts of its
        inputs: ``node`` (used once) is componentwise arithmetic, a reshape between the two
        layouts, a broadcast scalar or a graph input, down to graph inputs and known planes.
        None where any step is something else."""
        if not isinstance(node, fx.Node) or node not in self.env:
            return None
        value = self.env[node]
        if not isinstance(value, torch.Tensor) or value.dtype not in (torch.float32, torch.float64):
            return None
        if value.dim() == 0 or value.shape[-1] % 2 or (layout == "stacked" and value.shape[-1] != 2):
            return None
        known = self._planes_of(value, layout)
        if known is not None:
            return known
        dtype = torch.complex64 if value.dtype == torch.float32 else torch.complex128
        if node.op == "placeholder":
            return self._as_pair(value, node, value, layout, dtype)
        if node.op != "call_function" or len(node.users) != 1:
            return None
        if node.target in self._RESHAPES:
            src = self.env.get(node.args[0])
            if not isinstance(src, torch.Tensor) or self._relayout(src.shape, value.shape) != layout:
                return None
            return self._lift(node.args[0], "flat" if layout == "stacked" else "stacked")
        if node.target is aten.expand.default:
            src = self.env.get(node.args[0])
            if isinstance(src, torch.Tensor) and src.numel() == 1 and src.dtype == value.dtype:
                shape = value.shape[:-2] if layout == "stacked" else value.shape[:-1]
                part = src.reshape(()).expand(*shape, value.shape[-2] if layout == "stacked" else value.shape[-1] // 2)
                return Pair(part, part, dtype)
            return None
        fn = self._COMPONENTWISE.get(node.target)
        if fn is None or node.kwargs or len(node.args) != 2:
            return None
        parts = []
        for arg in node.args:
            if isinstance(arg, (int, float)) and not isinstance(arg, bool):
                parts.append(self._as_pair(arg, None, value, layout, dtype))
                continue
            lifted = self._lift(arg, layout)
            if lifted is None or lifted.dtype != dtype:
                return None
            parts.append(lifted)
        a, b = parts
        return Pair(fn(a.re, b.re), fn(a.im, b.im), dtype)

    def _as_pair(self, value, node, like, layout, dtype):
        """``value`` (the other operand of componentwise arithmetic on ``like``'s planes) as the
        pair whose planes it holds, or None where it does not read as one without a copy."""
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return Pair(like.new_tensor(value), like.new_tensor(value), dtype)
        if not isinstance(value, torch.Tensor):
            return None
        known = self._planes_of(value, layout)
        if known is not None:
            return known if known.dtype == dtype else None
        if value.dtype != real_dtype(dtype) or tuple(value.shape) != tuple(like.shape):
            return None
        if not isinstance(node, fx.Node) or node.op != "placeholder" or not value.is_contiguous():
            return None
        stacked = value if layout == "stacked" else aten.view.default(
            value, [*value.shape[:-1], value.shape[-1] // 2, 2]
        )
        return Pair.of(aten.view_as_complex.default(stacked))

    def _aten(self, target, args, kwargs):
        """Run ``target`` on its ATen kernel: pairs in as complex tensors, complex results out as pairs."""

        def to_complex(x):
            return x.complex() if isinstance(x, Pair) else x

        args, kwargs = pytree.tree_map(to_complex, (args, kwargs))
        result = target(*args, **kwargs)
        return pytree.tree_map(lambda v: Pair.of(v) if is_paired(v) else v, result)

    # --- outputs ------------------------------------------------------------

    def output(self, target, args, kwargs):
        values = args[0]
        metas = pytree.tree_map(
            lambda a: a.meta.get("val") if isinstance(a, fx.Node) else None,
            self._node.args[0],
        )
        flat_values, spec = pytree.tree_flatten(values)
        flat_metas = pytree.tree_leaves(metas, is_leaf=lambda x: x is None or isinstance(x, torch.Tensor))
        if len(flat_metas) != len(flat_values):
            flat_metas = [None] * len(flat_values)
        flat_nodes = pytree.tree_leaves(self._node.args[0], is_leaf=lambda x: x is None or isinstance(x, fx.Node))
        if len(flat_nodes) != len(flat_values):
            flat_nodes = [None] * len(flat_values)
        out = [
            _leave_pair_form(v, m) if isinstance(v, Pair) else self._plane_view(v, n)
            for v, m, n in zip(flat_values, flat_metas, flat_nodes)
        ]
        return pytree.tree_unflatten(out, spec)

    def _plane_view(self, value: Any, node: Optional[fx.Node]) -> Any:
        """``value``, or for an output that is ``x.real``/``x.imag`` of a complex input ``x``
        (``select(view_as_real(x), -1, k)``: what a real layer reads of it, saved for its
        backward), that view of ``x``: the part the rewrite reads through the int64 bits would
        be a new buffer in the view's stride-2 layout, which Inductor cannot order under
        dynamic sizes (and would copy)."""
        if not (isinstance(node, fx.Node) and node.op == "call_function" and isinstance(value, torch.Tensor)):
            return value
        part = {aten.real.default: 0, aten.imag.default: 1}.get(node.target)
        source = node.args[0] if part is not None and node.args else None
        if node.target is aten.select.int and len(node.args) == 3:  # select(view_as_real(x), -1, k)
            planes, dim, k = node.args
            if isinstance(planes, fx.Node) and planes.target is aten.view_as_real.default and k in (0, 1):
                ndim = planes.meta["val"].dim() if isinstance(planes.meta.get("val"), torch.Tensor) else None
                if dim in (-1, ndim - 1 if ndim else -1):
                    part, source = k, planes.args[0]
        if not (isinstance(source, fx.Node) and source.op == "placeholder"):
            return value
        z = self._inputs.get(source.name)
        if z is None or z.is_conj() or z.is_neg() or z.dtype not in (torch.complex64, torch.complex128):
            return value
        return aten.select(aten.view_as_real(z), -1, part)


#: the most elements a constant tensor of the graph may have to be rebuilt in the rewritten one
MAX_CONSTANT_NUMEL = 1 << 16


def _traced_constant(value: torch.Tensor) -> torch.Tensor:
    """A real tensor constant of the graph (a ``get_attr``), rebuilt so the traced rewrite can compute with it.

    The rewrite runs on fake tensors, which refuse real ones as arguments; the
    constant is read once outside the fake mode and made again by
    ``torch.tensor`` (a constant of the new graph). Equivalent to ``value``
    itself, contiguous; a complex constant comes back as a :class:`Pair` of its parts.
    """
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    if value.numel() > MAX_CONSTANT_NUMEL:
        raise NotImplementedError(f"a {tuple(value.shape)} constant tensor in the graph is too large to rebuild")
    with unset_fake_temporarily():
        data = value.detach().cpu()
        if data.is_complex():
            parts = [data.real.tolist(), data.imag.tolist()]
        else:
            parts = [data.tolist()]
    if is_paired(value):
        rdt = real_dtype(value.dtype)
        re = torch.tensor(parts[0], dtype=rdt, device=value.device)
        im = torch.tensor(parts[1], dtype=rdt, device=value.device)
        return Pair(re, im, value.dtype)
    if value.is_complex():
        raise NotImplementedError(f"a {value.dtype} constant tensor in the graph")
    return torch.tensor(parts[0], dtype=value.dtype, device=value.device)


def _leave_pair_form(pair: Pair, meta: Optional[torch.Tensor]) -> torch.Tensor:
    """The complex tensor for a graph output: the original output's values and layout."""
    want_conj = bool(meta is not None and isinstance(meta, torch.Tensor) and meta.is_conj())
    like = meta if isinstance(meta, torch.Tensor) else None
    if pair.has_source and not want_conj:
        z = pair.complex()
        if not z.is_conj() and not z.is_neg():
            return z
    # an output eager returns as a conj view is returned as the values it stands for, without
    # the bit: the layout Inductor picks for the buffer under a conj view may not be the
    # output's, and Inductor restrides an output by copying it (torch 2.14: by copy_, which
    # drops the bit too; 2.13: by a kernel that also drops the conjugation, a wrong gradient
    # through einsum's saved conj operand). The values are eager's; a backward graph takes
    # its inputs without the bit, whatever they come with (see ptc.complex.backend).
    fresh = Pair(pair.re, pair.im, pair.dtype)
    return fresh.complex(like)


def stored_inputs(gm: fx.GraphModule) -> List[int]:
    """Positions of the complex inputs ``gm`` updates in place (a ``copy_`` into the input:
    AOTAutograd's write-back of an input mutation), without conj or neg bit.

    :func:`rewrite` can take these as their real storage views
    (:func:`~ptc.complex.pair.storage_view`), so the new values are stored by the
    kernel that computes them instead of by a complex ``copy_`` after it.
    """
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    written = {
        n.args[0]
        for n in gm.graph.nodes
        if n.op == "call_function" and n.target is aten.copy_.default and n.args
    }
    found = []
    for i, p in enumerate(placeholders):
        val = p.meta.get("val")
        if p in written and is_paired(val) and not val.is_conj() and not val.is_neg():
            found.append(i)
    return found


def conj_inputs(gm: torch.fx.GraphModule, inputs) -> List[int]:
    """Positions of a backward graph's complex inputs traced with a conj or neg bit.

    A backward graph's inputs (tangents, activations the forward saved) come with whatever
    bit they have at run time, not always the traced one: AOTAutograd guards none of them (the
    tangent of a conj output comes without the bit), and a forward output eager returns as a
    conj view is returned without it (by ptc, and by Inductor where it restrides the output).
    ptc's graph takes them without the bit (its caller resolves one that has it, as
    ``ptc.complex.backend`` does: a copy, where it is set), so it reads the same values either way.
    """
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if not any(n.name.startswith("tangents") for n in placeholders):
        return []  # a forward graph: Dynamo guards its inputs' conj bits
    return [
        i
        for i, x in enumerate(inputs)
        if isinstance(x, torch.Tensor) and x.is_complex() and (x.is_conj() or x.is_neg())
    ]


def resolved_inputs(inputs, positions):
    """``inputs`` with those at ``positions`` without their conj and neg bits (same values)."""
    from torch._guards import detect_fake_mode

    inputs = list(inputs)
    with detect_fake_mode(inputs) or contextlib.nullcontext():
        for i in positions:
            inputs[i] = inputs[i].resolve_conj().resolve_neg()
    return inputs


def rewrite(
    gm: fx.GraphModule,
    example_inputs,
    *,
    decompositions: Optional[Mapping] = None,
    report: Optional[Report] = None,
    stored: Sequence[int] = (),
    gemm: str = "aten",
) -> fx.GraphModule:
    """``gm`` with every complex op turned into real arithmetic (see the module docstring).

    ``example_inputs`` are the graph's inputs (fake or real tensors, SymInts);
    ``decompositions`` is applied to the real ops the rules emit (the table the
    graph itself was traced with). A graph without complex values is returned as is.
    ``stored`` (from :func:`stored_inputs`): inputs the new graph takes as their
    real storage view instead (``storage_view(z)`` where ``gm`` took ``z``); at those
    positions ``example_inputs`` already holds the views, and so will the caller's calls.
    ``gemm`` (``"aten"``, ``"auto"`` or ``"onednn"``): which complex64 GEMMs run as one real
    GEMM on oneDNN (:mod:`ptc.complex.realgemm`); ``"aten"`` keeps them all on ATen.
    A backward graph takes its complex inputs without conj and neg bits
    (:func:`conj_inputs`): where an example has one, the new graph expects
    ``x.resolve_conj().resolve_neg()`` (what a rewritten forward's outputs already are).
    """
    if not has_complex(gm):
        return gm
    resolved = conj_inputs(gm, example_inputs)
    if resolved:
        example_inputs = resolved_inputs(example_inputs, resolved)
    own = Report()
    from torch._guards import detect_fake_mode

    fake_mode = detect_fake_mode(example_inputs)
    interp = _PairInterpreter(gm, own, fake_mode)
    interp.real_gemms = _realgemm.planned(gm, gemm)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i in stored:
        interp.stored_dtypes[placeholders[i].name] = placeholders[i].meta["val"].dtype

    def run(*args):
        return interp.run(*args)

    tracing_mode = "real"
    with fx_traceback.preserve_node_meta(), (fake_mode or contextlib.nullcontext()):
        new_gm = make_fx(run, decomposition_table=dict(decompositions or {}), tracing_mode=tracing_mode)(
            *example_inputs
        )
    new_gm.graph.eliminate_dead_code()
    new_gm.recompile()
    new_gm.meta.update(getattr(gm, "meta", {}))
    own.graphs = 1
    if report is not None:
        report.merge(own)
    _LAST.merge(own)
    return new_gm


#: a running total of everything rewritten in this process (``ptc.complex.stats()``)
_LAST = Report()
