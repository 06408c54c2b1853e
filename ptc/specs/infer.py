"""Infer a Spec from example calls or from an ExportedProgram.

From examples, each dimension (and each int argument) that changes between
calls gets a variable, unless it equals an earlier one (same variable), is a
linear function ``a*V + b`` of one (an expression), the product of two, or
the sum of two plus a constant. A dim that an earlier variable turns out to
be the sum of (an attention mask's length ``P + T`` seen before the cache
length ``P`` and the token count ``T``) is stated as that sum, so a variable
stands for each length and the mask for their sum. Its range is what the
examples showed, and a common divisor ``g > 1`` of all its values becomes
the assumption ``Eq(V % g, 0)``. Dimensions that never change become fixed
ints. Arguments are followed into containers and into the attributes of
other objects (a KV-cache object's layers). Read the result
(``print(spec)``) and widen the ranges to what the model really accepts.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import sympy
import torch

from ptc.errors import PtcTypeError, SpecError
from ptc.specs.spec import Spec, TensorSpec
from ptc.specs.variables import Var

__all__ = ["infer_spec", "spec_from_exported"]


def infer_spec(fn: Callable, examples: Sequence[Any], *, kind: str = "backed") -> Spec:
    """A Spec that every example satisfies, with the relations the examples show.

    ``examples`` holds calls as ``(args, kwargs)`` pairs or as plain ``args``
    tuples; at least two are needed to tell dynamic dims from static ones.
    For an ``nn.Module`` (instance or class) the keys are the parameters of its
    ``forward`` (without ``self``), as ``@dynamic_spec`` on the class reads them.
    """
    if len(examples) < 2:
        raise SpecError("infer_spec: give at least two example calls")
    sig = _signature(fn)
    calls = []
    for ex in examples:
        args, kwargs = ex if (isinstance(ex, tuple) and len(ex) == 2 and isinstance(ex[1], dict)) else (ex, {})
        bound = sig.bind(*args, **kwargs)
        calls.append(bound.arguments)
    # slots: ordered (path, kind) -> values across examples
    structures = [_structure(call) for call in calls]
    if any(s[0] != structures[0][0] for s in structures[1:]):
        raise SpecError("infer_spec: the examples differ in structure (which arguments are tensors, their ranks)")
    slot_names = [name for name, _ in structures[0][1]]
    values = {name: [dict(s[1])[name] for s in structures] for name in slot_names}

    assigned: Dict[str, Any] = {}
    roots: List[Tuple[Var, List[int]]] = []
    assumptions = []
    for name in slot_names:
        vals = values[name]
        if len(set(vals)) == 1:
            assigned[name] = vals[0]
            continue
        expr = _relate(vals, roots)
        if expr is None:
            v = Var(_var_name(name, len(roots)), min=min(vals), max=max(vals), kind=kind)
            split = _difference(vals, roots)
            if split is not None:  # an earlier root x is v + z + c: state x that way
                x, z, c = split
                total = v + z + c
                assigned = {k: _substitute(e, x, total) for k, e in assigned.items()}
                assumptions = [a.xreplace({x: total}) for a in assumptions]
                roots = [(r, rv) for r, rv in roots if r is not x]
            roots.append((v, vals))
            g = math.gcd(*vals)
            if g > 1:
                assumptions.append(sympy.Eq(v % g, 0))
            expr = v
        assigned[name] = expr
    params = {p: _rebuild(structures[0][0][p], p, assigned) for p in structures[0][0]}
    params = {k: v for k, v in params.items() if v is not None}
    return Spec(params, assumptions=assumptions)


def _signature(fn: Callable) -> inspect.Signature:
    """The signature calls bind to: a module's ``forward`` (``self`` dropped for a class)."""
    if isinstance(fn, torch.nn.Module):
        return inspect.signature(fn.forward)
    if isinstance(fn, type) and issubclass(fn, torch.nn.Module):
        params = list(inspect.signature(fn.forward).parameters.values())[1:]
        return inspect.Signature(params)
    return inspect.signature(fn)


def _relate(vals: List[int], roots: List[Tuple[Var, List[int]]]) -> Optional[Any]:
    for v, rv in roots:
        if rv == vals:
            return v
    for v, rv in roots:
        pairs = list(zip(rv, vals))
        distinct = [(x, y) for x, y in pairs if x != pairs[0][0]]
        if not distinct:
            continue
        (x0, y0), (x1, y1) = pairs[0], distinct[0]
        if (y1 - y0) % (x1 - x0):
            continue
        a = (y1 - y0) // (x1 - x0)
        b = y0 - a * x0
        if a > 0 and all(y == a * x + b for x, y in pairs):
            return a * v + b
    for i, (v, rv) in enumerate(roots):
        for w, rw in roots[i:]:
            if all(y == x * z for x, z, y in zip(rv, rw, vals)):
                return v * w
    for i, (v, rv) in enumerate(roots):
        for w, rw in roots[i + 1 :]:
            offsets = {y - x - z for x, z, y in zip(rv, rw, vals)}
            if len(offsets) == 1:
                return v + w + offsets.pop()
    return None


def _difference(vals: List[int], roots: List[Tuple[Var, List[int]]]) -> Optional[Tuple[Var, Var, int]]:
    """``(x, z, c)`` with roots ``x == vals + z + c`` in every example (a mask's
    length, seen before the cache length it adds to), or None."""
    for x, rx in roots:
        for z, rz in roots:
            if z is x:
                continue
            offsets = {a - y - b for a, y, b in zip(rx, vals, rz)}
            if len(offsets) == 1:
                return x, z, offsets.pop()
    return None


def _substitute(expr: Any, var: Var, value: Any) -> Any:
    return expr.xreplace({var: value}) if isinstance(expr, sympy.Basic) else expr


def _var_name(slot: str, index: int) -> str:
    cleaned = "".join(c if c.isalnum() else "_" for c in slot).strip("_")
    name = f"{cleaned}" if cleaned and cleaned[0].isalpha() else f"d{index}"
    return name if name.isidentifier() else f"d{index}"


_OBJECT_DEPTH = 6  # how deep attributes of objects are followed


def _structure(arguments: Mapping[str, Any]):
    """(shape tree, [(slot name, value)]) of one call.

    Tensors, ints, mappings, lists and tuples are followed, and so are the
    public attributes (``vars``) of other objects, such as a KV-cache object
    holding its layers' tensors (not of modules, classes or functions, and at
    most ``_OBJECT_DEPTH`` objects deep). The spec describes an object as a
    dict, which ``@dynamic_spec`` matches against its attributes.
    """
    slots: List[Tuple[str, int]] = []

    def walk(value: Any, path: str, depth: int = 0, active: frozenset = frozenset()) -> Any:
        if isinstance(value, torch.Tensor):
            for j, size in enumerate(value.shape):
                slots.append((f"{path}_{j}", int(size)))
            return ("tensor", value.dim())
        if isinstance(value, int) and not isinstance(value, bool):
            slots.append((path, value))
            return ("int",)
        if isinstance(value, Mapping):
            return ("dict", tuple((k, walk(v, f"{path}_{k}", depth, active)) for k, v in value.items()))
        if isinstance(value, (list, tuple)):
            return (type(value).__name__, tuple(walk(v, f"{path}_{i}", depth, active) for i, v in enumerate(value)))
        if _is_plain_object(value) and depth < _OBJECT_DEPTH and id(value) not in active:
            inner = active | {id(value)}
            attrs = tuple(
                (k, walk(v, f"{path}_{k}", depth + 1, inner))
                for k, v in vars(value).items()
                if isinstance(k, str) and not k.startswith("_")
            )
            return ("object", type(value).__qualname__, attrs)
        return ("other",)

    tree = {name: walk(value, name) for name, value in arguments.items()}
    return tree, slots


def _is_plain_object(value: Any) -> bool:
    """An instance whose attributes may hold call inputs: not a module, class, function or other module-level thing."""
    import types

    if isinstance(value, (torch.nn.Module, type, types.ModuleType, types.FunctionType, types.MethodType)):
        return False
    if isinstance(value, (str, bytes, float, complex, bool, torch.dtype, torch.device)) or value is None:
        return False
    return hasattr(value, "__dict__")


def _rebuild(shape: Any, path: str, assigned: Dict[str, Any]) -> Any:
    kind = shape[0]
    if kind == "tensor":
        return TensorSpec(*[assigned[f"{path}_{j}"] for j in range(shape[1])])
    if kind == "int":
        return assigned[path]
    if kind in ("dict", "object"):
        children = {k: _rebuild(s, f"{path}_{k}", assigned) for k, s in shape[-1]}
        return {k: v for k, v in children.items() if v is not None} or None
    if kind in ("list", "tuple"):
        children = [_rebuild(s, f"{path}_{i}", assigned) for i, s in enumerate(shape[1])]
        return (tuple if kind == "tuple" else list)(children)
    return None


def spec_from_exported(ep: "torch.export.ExportedProgram", *, kind: str = "backed") -> Spec:
    """The Spec an ExportedProgram's inputs obey: its symbols become Vars with the
    program's ranges, its runtime assertions become assumptions.

    Keys are the program's user-input names (one tensor or int per input).
    """
    if not isinstance(ep, torch.export.ExportedProgram):
        raise PtcTypeError(f"spec_from_exported: expected an ExportedProgram, got {type(ep).__name__}")
    vars_by_symbol: Dict[sympy.Symbol, Var] = {}

    def var_for(sym: sympy.Symbol) -> Var:
        if sym not in vars_by_symbol:
            vr = ep.range_constraints.get(sym)
            lo = max(int(vr.lower), 0) if vr is not None and vr.lower.is_finite else 0
            hi = int(vr.upper) if vr is not None and vr.upper.is_finite else None
            vars_by_symbol[sym] = Var(str(sym), min=lo, max=hi, kind=kind)
        return vars_by_symbol[sym]

    def convert(size: Any) -> Any:
        if isinstance(size, torch.SymInt):
            expr = size.node.expr
            return expr.xreplace({s: var_for(s) for s in expr.free_symbols})
        return int(size)

    user_inputs = set(ep.graph_signature.user_inputs)
    params: Dict[str, Any] = {}
    for node in ep.graph.nodes:
        if node.op == "placeholder" and node.name in user_inputs:
            val = node.meta.get("val")
            if isinstance(val, torch.Tensor):
                params[node.name] = TensorSpec(*[convert(s) for s in val.shape])
            elif isinstance(val, (int, torch.SymInt)):
                params[node.name] = convert(val)
    assumptions = []
    for module in ep.graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            if node.op == "call_function" and node.target is torch.ops.aten._assert_scalar.default:
                cond = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
                if isinstance(cond, torch.SymBool):
                    expr = cond.node.expr
                    if all(s in vars_by_symbol for s in expr.free_symbols) and not _is_range(expr, vars_by_symbol):
                        fact = expr.xreplace(vars_by_symbol)
                        if fact not in (sympy.true, sympy.false) and fact not in assumptions:
                            assumptions.append(fact)
    return Spec(params, assumptions=assumptions)


def _is_range(expr: Any, vars_by_symbol: Dict[Any, Var]) -> bool:
    """Is ``expr`` just a bound of one variable's range (already in the Var)?"""
    if not isinstance(expr, (sympy.Le, sympy.Ge, sympy.Lt, sympy.Gt)):
        return False
    symbols = expr.free_symbols
    return len(symbols) == 1 and (expr.lhs.is_Number or expr.rhs.is_Number)
