"""Rewrite torch's prototype switch HOP into ``ptc.switch``'s ``torch.cond`` tree,
and repair export metadata that ``torch.export.save`` chokes on.

torch 2.14 ships ``torch.ops.higher_order.switch``; programs that contain it
cannot be saved (``SerializeError``). :func:`lower_native_switch` re-traces such
a program with every switch node replaced by ``ptc.switch``, so the result holds
only ``torch.cond`` and saves, loads and runs to the same results.
"""

from __future__ import annotations

import inspect
from typing import Any, Dict, Optional, Tuple

import torch
import torch.utils._pytree as pytree
from torch.export import Dim, ExportedProgram
from torch.fx import GraphModule, Interpreter

from ptc import _compat
from ptc.control_flow.switch import switch
from ptc.errors import PtcTypeError, PtcValueError

__all__ = ["lower_native_switch", "count_native_switch", "fix_export_metadata"]


def count_native_switch(program: Any) -> int:
    """Number of native switch HOP calls in ``program`` and all its subgraphs."""
    op = _compat.native_switch_op()
    if op is None:
        return 0
    gm = program.graph_module if isinstance(program, ExportedProgram) else program
    return sum(
        node.target is op
        for m in gm.modules()
        if isinstance(m, GraphModule)
        for node in m.graph.nodes
    )


def lower_native_switch(program: Any, *example_inputs: Any) -> Any:
    """Return ``program`` with each native switch HOP rewritten as a ``torch.cond`` tree.

    ``program`` is an ``ExportedProgram`` (re-exported non-strict, from its own
    example inputs and with its dynamic dimensions and their ranges) or an FX
    ``GraphModule`` (re-traced with ``make_fx(tracing_mode="symbolic")`` on
    ``example_inputs``). A program without native switch is returned as is.

    The native switch truncates float and bool indices (1.7 picks branch 1);
    the rewrite keeps that meaning by converting such an index with
    ``index.long()`` before ``ptc.switch`` (which itself accepts integers only).
    """
    if not isinstance(program, (ExportedProgram, GraphModule)):
        raise PtcTypeError(
            "lower_native_switch: program must be a torch.export.ExportedProgram or a "
            f"torch.fx.GraphModule, got {type(program).__name__}"
        )
    if count_native_switch(program) == 0:
        return program
    if isinstance(program, ExportedProgram):
        return _lower_exported(program)
    if not example_inputs:
        raise PtcValueError(
            "lower_native_switch: a GraphModule needs example inputs to re-trace, e.g. "
            "lower_native_switch(gm, index, x)"
        )
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(_SwitchToCond(program).run, tracing_mode="symbolic")(*example_inputs)


def fix_export_metadata(ep: ExportedProgram) -> ExportedProgram:
    """Make ``ep`` serializable when strict export left module *classes* in metadata.

    torch 2.13 and 2.14 strict export (``strict=True``) of ``torch.cond`` nested
    three deep, with branch outputs of differing sizes, leaves
    ``nn_module_stack`` entries that hold a class instead of its qualified name
    in the innermost graphs, and ``torch.export.save`` then fails with
    ``SerializeError ... expected ty to be str``. This replaces each such class
    by ``"module.QualName"``, as torch does for the outer graphs. It edits ``ep``
    in place and returns it. Non-strict export (the default) does not need it.
    """
    for module in ep.graph_module.modules():
        if not isinstance(module, GraphModule):
            continue
        for node in module.graph.nodes:
            stack = node.meta.get("nn_module_stack")
            if stack:
                node.meta["nn_module_stack"] = {
                    key: (path, _qualified_name(ty)) for key, (path, ty) in stack.items()
                }
    return ep


def _qualified_name(ty: Any) -> Any:
    return f"{ty.__module__}.{ty.__qualname__}" if inspect.isclass(ty) else ty


class _SwitchToCond(Interpreter):
    """Runs a graph, calling ``ptc.switch`` wherever the graph calls the native HOP."""

    def call_function(self, target, args, kwargs):
        if target is not _compat.native_switch_op():
            return super().call_function(target, args, kwargs)
        index, branches, operands = args
        if isinstance(index, torch.Tensor) and (
            index.dtype == torch.bool or index.dtype.is_floating_point
        ):
            index = index.long()
        return tuple(switch(index, [_GraphCall(g) for g in branches], *operands))


class _GraphCall:
    """A branch subgraph as a callable returning a tuple (what the HOP returns)."""

    def __init__(self, graph_module: GraphModule) -> None:
        self.graph_module = graph_module

    def __call__(self, *operands):
        return tuple(self.graph_module(*operands))


class _Rewritten(torch.nn.Module):
    def __init__(self, unlifted: GraphModule) -> None:
        super().__init__()
        self.unlifted = unlifted

    def forward(self, *args, **kwargs):
        return _SwitchToCond(self.unlifted).run(*pytree.tree_leaves((args, kwargs)))


def _lower_exported(ep: ExportedProgram) -> ExportedProgram:
    example = getattr(ep, "example_inputs", None)
    if example is None:
        raise PtcValueError(
            "lower_native_switch: this ExportedProgram carries no example inputs to re-export "
            "from; re-export the original module with ptc.switch instead"
        )
    args, kwargs = example
    dynamic_shapes = _dynamic_shapes_of(ep, args, kwargs)
    module = _Rewritten(ep.module())
    names = ep.graph_signature.user_inputs
    if not kwargs and len(names) == len(args) == len(pytree.tree_leaves(args)):
        # one tensor per argument: keep the argument names in the new program
        module = _with_argument_names(module, names)
        if dynamic_shapes is not None:
            dynamic_shapes = tuple(dynamic_shapes["args"])
    lowered = torch.export.export(
        module, tuple(args), dict(kwargs), dynamic_shapes=dynamic_shapes, strict=False
    )
    return fix_export_metadata(lowered)


def _with_argument_names(module: "_Rewritten", names) -> "_Rewritten":
    """``module`` with a ``forward(self, <names>)`` signature, which export reads."""

    def forward(self, *args):
        return _Rewritten.forward(self, *args)

    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
    forward.__signature__ = inspect.Signature(params)
    module.__class__ = type("Rewritten", (_Rewritten,), {"forward": forward})
    return module


def _dynamic_shapes_of(
    ep: ExportedProgram, args: Tuple[Any, ...], kwargs: Dict[str, Any]
) -> Optional[Dict[str, Any]]:
    """The ``dynamic_shapes`` that reproduce ``ep``'s symbolic input dimensions.

    A dimension whose size is a plain symbol becomes a ``Dim`` with that
    symbol's range (one ``Dim`` per symbol, so equal dimensions stay equal);
    a dimension given by a derived expression becomes ``Dim.AUTO``.
    """
    user_inputs = set(ep.graph_signature.user_inputs)
    vals = [
        node.meta.get("val")
        for node in ep.graph.nodes
        if node.op == "placeholder" and node.name in user_inputs
    ]
    dims: Dict[Any, Dim] = {}

    def dim_for(size: Any) -> Any:
        expr = size.node.expr
        if not expr.is_symbol:
            return Dim.AUTO
        if expr not in dims:
            vr = ep.range_constraints.get(expr)
            bounds = {}
            if vr is not None:
                bounds["min"] = int(vr.lower)
                if vr.upper.is_finite:
                    bounds["max"] = int(vr.upper)
            dims[expr] = Dim(str(expr), **bounds)
        return dims[expr]

    def spec_for(val: Any) -> Any:
        if not isinstance(val, torch.Tensor):
            return None
        spec = {i: dim_for(s) for i, s in enumerate(val.shape) if isinstance(s, torch.SymInt)}
        return spec or None

    leaves, treespec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    if len(leaves) != len(vals):
        return None
    spec_args, spec_kwargs = pytree.tree_unflatten([spec_for(v) for v in vals], treespec)
    if not dims and not any(s is Dim.AUTO for s in pytree.tree_leaves((spec_args, spec_kwargs))):
        return None
    shapes: Dict[str, Any] = {"args": spec_args}
    if kwargs:
        shapes["kwargs"] = spec_kwargs
    return shapes
