"""From a bound spec to what each consumer needs.

* ``torch.compile``: ``mark_dynamic`` / ``mark_unbacked`` / ``maybe_mark_dynamic``
  / ``mark_static`` on the real tensors of the call, and the spec's backed and
  unbacked scalar ints named in ``torch.compiler.config``'s
  ``dynamic_sources`` / ``unbacked_sources``, applied just before the compiled
  frame runs and undone right after, raising or not: every input tensor's
  ``__dict__`` and the config are then exactly as before, so other functions
  that later see the same tensors never see a trace of ptc. The facts function
  states the relations inside the graph.
* ``torch.export``: a ``dynamic_shapes`` structure (one ``Dim`` per variable
  with its range, derived ``Dim``s for increasing linear expressions,
  ``Dim.AUTO`` for the rest), exported with deferred runtime asserts so the
  relations ``Dim`` cannot express become assertions in the graph.
* torch 2.14's native ``ShapesSpec``, where that torch has it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping as MappingABC
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import sympy
import torch
import torch.utils._pytree as pytree

from ptc import _compat
from ptc.errors import FeatureUnavailable, SpecError
from ptc.specs.binding import BoundSpec
from ptc.specs.expr import solve_linear, to_python
from ptc.specs.spec import Leaf, TensorSpec, _vars_of
from ptc.specs.variables import STATIC, Var

__all__ = [
    "begin_compiled_call",
    "end_compiled_call",
    "apply_marks",
    "snapshot_attributes",
    "restore_attributes",
    "dynamic_shapes",
    "needs_runtime_asserts",
    "to_native",
]


def begin_compiled_call(bound: BoundSpec, args: Sequence[Any], kwargs: Dict[str, Any]) -> tuple:
    """Check a call, then prepare its compiled frame; ``end_compiled_call`` undoes it.

    Raises ``SpecViolation`` before changing anything. Then it snapshots every
    input tensor (``snapshot_attributes``), marks the tensors per the spec's
    kinds and names the spec's backed and unbacked scalar ints to Dynamo for
    the body frame (``BoundSpec.int_sources``, whose names are unique to this
    spec, so no other frame matches them).
    """
    tensors, unmentioned = bound.checker(*args, **kwargs)
    # the unmentioned parameters include defaults the caller did not pass (``y=torch.ones(3)``),
    # which apply_marks marks static too: they are the caller's tensors as much as the arguments
    saved = snapshot_attributes(
        list(tensors) + pytree.tree_leaves((list(args), kwargs)) + pytree.tree_leaves(list(unmentioned))
    )
    sources = _compat.symbolic_int_sources(
        dynamic=[s for s, kind in bound.int_sources if kind == "backed"],
        unbacked=[s for s, kind in bound.int_sources if kind == "unbacked"],
    )
    try:
        apply_marks(bound, tensors, unmentioned)
        marked = snapshot_attributes([t for t, _, _ in saved])
        sources.__enter__()
    except BaseException:
        restore_attributes(saved)
        raise
    return saved, marked, sources


def end_compiled_call(state: tuple) -> None:
    """Undo ``begin_compiled_call``: the config as it was, every input tensor's marks as they were."""
    saved, marked, sources = state
    try:
        sources.__exit__(None, None, None)
    finally:
        restore_attributes(saved, marked)


def apply_marks(bound: BoundSpec, tensors: Sequence[Any], unmentioned: Sequence[Any]) -> None:
    """Mark the call's tensors for Dynamo per the spec's kinds (and policy for unmentioned ones)."""
    from torch._dynamo import decorators as d

    for (leaf_index, dim, action, hint), names in zip(bound.marks, bound.mark_vars):
        if action == "auto":
            continue
        soft = [bound.softened[n] for n in names if n in bound.softened] if action in ("dynamic", "unbacked") else []
        if soft:  # the model constrains it beyond the spec under torch.compile (ptc.specs.api)
            action = "maybe" if "maybe" in soft else "unbacked"
        t = tensors[leaf_index]
        hinted = {} if hint is None else {"hint_override": hint}
        choices = None if soft else bound.specialize.get((leaf_index, dim))
        if choices is not None:
            d.mark_dynamic(t, dim, specialize_on=_equal_to(choices), **hinted)
        elif action == "unbacked":
            d.mark_unbacked(t, dim, **hinted)
        elif action == "dynamic":
            d.mark_dynamic(t, dim, **hinted)
        elif action == "maybe":
            d.maybe_mark_dynamic(t, dim)
        else:
            d.mark_static(t, dim)
    if bound.spec.unspecified == "static":
        for t in pytree.tree_leaves(list(unmentioned)):
            if isinstance(t, torch.Tensor):
                for dim in range(t.dim()):
                    d.mark_static(t, dim)


@functools.lru_cache(maxsize=None)
def _equal_to(choices: Tuple[int, ...]) -> List[Callable[[Any], Any]]:
    """``specialize_on`` predicates, one per choice (torch reads each one's source, so each is a lambda)."""
    return [(lambda size, c=c: size == c) for c in choices]


def snapshot_attributes(values: Sequence[Any]) -> List[tuple]:
    """The Python attributes (``vars(t)``) of every tensor in ``values``, for ``restore_attributes``.

    The whole ``__dict__`` is kept, not a list of names: torch's marking
    functions set ``_dynamo_*`` attributes, ``_has_dynamo_dim_marking`` and
    ``_specialize_on``, and update sets and dicts already there in place, and
    a compiled call may stamp more (AOTAutograd's propagated dynamic dims on an
    input returned as an output). The snapshot holds each value and, for a set,
    dict or list, a copy of its contents.
    """
    out, seen = [], set()
    for t in _with_inner_tensors(values):
        if id(t) in seen:
            continue
        seen.add(id(t))
        attrs = dict(getattr(t, "__dict__", {}))
        contents = {k: v.copy() for k, v in attrs.items() if isinstance(v, (set, dict, list))}
        out.append((t, attrs, contents))
    return out


def _with_inner_tensors(values: Sequence[Any]) -> List[torch.Tensor]:
    """The tensors in ``values`` and, for a tensor subclass that wraps others (``TwoTensor``,
    ``DTensor``: torch marks those too), the tensors inside it."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    found: List[torch.Tensor] = []
    stack = [v for v in values if isinstance(v, torch.Tensor)]
    while stack:
        t = stack.pop(0)
        found.append(t)
        if is_traceable_wrapper_subclass(t):
            names, _ = t.__tensor_flatten__()
            stack += [getattr(t, name) for name in names if isinstance(getattr(t, name, None), torch.Tensor)]
    return found


#: the attributes torch's marking functions and compiled calls set on tensors (besides ``_dynamo_*``)
TORCH_TENSOR_ATTRS = frozenset({"_has_dynamo_dim_marking", "_specialize_on"})


def _torch_owned(name: str) -> bool:
    return name.startswith("_dynamo_") or name in TORCH_TENSOR_ATTRS


def _changed(before: tuple, after: tuple, name: str) -> bool:
    """Whether attribute ``name`` differs between two snapshots of one tensor."""
    _, attrs0, contents0 = before
    _, attrs1, contents1 = after
    v0, v1 = attrs0.get(name, _MISSING), attrs1.get(name, _MISSING)
    return v0 is not v1 or contents0.get(name, _MISSING) != contents1.get(name, _MISSING)


def restore_attributes(saved: List[tuple], marked: Optional[List[tuple]] = None) -> None:
    """Make each tensor's ``__dict__`` equal to its snapshot again: attributes added
    since are removed, replaced ones put back (the same objects), and sets, dicts
    and lists changed in place get their old contents back.

    With ``marked`` (a snapshot taken right after ptc marked the tensors), only
    what ptc's marks changed and torch's own attributes (``_dynamo_*``,
    :data:`TORCH_TENSOR_ATTRS`) are restored: an attribute the user's function
    set on its input during the call stays, as it does in eager.
    """
    for i, (t, attrs, contents) in enumerate(saved):
        current = getattr(t, "__dict__", {})

        def ours(k, i=i):
            return marked is None or _torch_owned(k) or _changed(saved[i], marked[i], k)

        for k in [k for k in current if k not in attrs and ours(k)]:
            delattr(t, k)
        for k, v in attrs.items():
            if not ours(k):
                continue
            if current.get(k, _MISSING) is not v:
                setattr(t, k, v)
            if k in contents and v != contents[k]:
                if isinstance(v, list):
                    v[:] = contents[k]
                else:
                    v.clear()
                    v.update(contents[k])


_MISSING = object()


# --- export ---------------------------------------------------------------------


def _bounds(expr: Any):
    """``(lowest, highest or None)`` of ``expr`` over its variables' ranges.

    Exact for expressions increasing in every variable (positive coefficients;
    floor and ceiling of such); ``(0, None)`` otherwise.
    """
    vs = _vars_of(expr)
    inner = sympy.expand(expr.replace(sympy.floor, lambda a: a).replace(sympy.ceiling, lambda a: a))
    increasing = (
        not expr.atoms(sympy.Mod, sympy.Max, sympy.Min)
        and all(c > 0 for c in inner.as_coefficients_dict().values())
    )
    if not increasing:
        return 0, None
    lo = expr.subs({v: v.min for v in vs})
    hi = expr.subs({v: v.max for v in vs}) if all(v.max is not None for v in vs) else None
    return max(int(lo), 0), (int(hi) if hi is not None else None)


def divisors(bound: BoundSpec) -> Dict[Var, int]:
    """Variables with an ``Eq(V % k, 0)`` assumption, and their k."""
    out: Dict[Var, int] = {}
    for a in bound.spec.assumptions:
        if isinstance(a, sympy.Eq) and a.rhs == 0 and isinstance(a.lhs, sympy.Mod):
            v, k = a.lhs.args
            if isinstance(v, Var) and k.is_Integer and int(k) > 1:
                out[v] = int(k)
    return out


def needs_runtime_asserts(bound: BoundSpec) -> bool:
    """Does the spec hold relations export's ``Dim`` cannot express?

    Those (``B*H``, ``T // 2``, ``B <= T``, divisibility of an expression, a
    variable's choices) are stated as ``torch._check`` facts, which export must
    turn into runtime assertions rather than guards.
    """
    if any(v.choices is not None for v in bound.spec.vars):
        return True
    handled = set()
    for v, k in divisors(bound).items():
        handled.add(sympy.Eq(sympy.Mod(v, k), 0))
    if any(a not in handled for a in bound.spec.assumptions):
        return True
    for leaf in bound.leaves:
        dims = leaf.spec.dims if isinstance(leaf.spec, TensorSpec) else ()
        for d in dims:
            if d is STATIC or isinstance(d, (int, Var)):
                continue
            vs = _vars_of(d)
            linear = solve_linear(d, vs[0]) if len(vs) == 1 else None
            if linear is None or not (linear[0].is_Integer and linear[1].is_Integer and linear[0] > 0):
                return True
    return False


def dynamic_shapes(
    bound: BoundSpec,
    args: Sequence[Any],
    kwargs: Dict[str, Any],
    *,
    skip_first: bool = False,
    dim_names: Optional[Dict[str, Any]] = None,
) -> Dict[str, Any]:
    """``dynamic_shapes`` for ``torch.export.export`` from the spec and one example call.

    Keyed by parameter name (the form export reads for any signature). A
    variable with a divisibility assumption ``Eq(V % k, 0)`` becomes ``k*V_``
    over a phantom root ``V_``, so export knows the divisibility exactly.
    Tensors in parameters the spec does not mention are static, or
    ``Dim.AUTO`` in every dim under ``unspecified="auto"``. ``dim_names``, when
    given, is filled with each ``Dim``'s name and the spec expression it
    stands for (``T_over_8``: ``T/8``).

    The keys are the parameters the call passes (defaults left out), as
    ``torch.export`` requires. An object of a class registered with pytree
    (a KV-cache object, a model output) is given as the list of its flattened
    children, as ``torch.export`` reads it; a tensor among them that the spec
    describes (by attribute path, ``{"layers": [{"keys": tensor(...)}]}``) gets
    that description, found by identity with the tensor at the spec's path.
    """
    dim_names = {} if dim_names is None else dim_names
    from torch.export import Dim

    sig = bound.signature
    bound_args = sig.bind(*args, **kwargs)  # no defaults: export keys dynamic_shapes by the passed arguments
    dims: Dict[Var, Any] = {}
    used_names: Dict[str, int] = {}
    multiple_of = divisors(bound)

    def fresh(name: str, value: Any, **bounds: Any) -> Any:
        used_names[name] = used_names.get(name, 0) + 1
        if used_names[name] > 1:
            name = f"{name}_{used_names[name]}"
        dim_names[name] = value
        return Dim(name, **bounds)

    def dim_of(v: Var) -> Any:
        if v not in dims:
            if v.max is not None and v.max == v.min:
                dims[v] = v.min
            elif v in multiple_of:
                k = multiple_of[v]
                lo, hi = -(-v.min // k), (v.max // k if v.max is not None else None)
                bounds = {"min": lo} if hi is None else {"min": lo, "max": hi}
                dims[v] = k * fresh(f"{v.name}_over_{k}", v / k, **bounds)
            else:
                bounds = {"min": v.min}
                if v.max is not None:
                    bounds["max"] = v.max
                dims[v] = fresh(v.name, v, **bounds)
        return dims[v]

    def dim_spec(d: Any) -> Any:
        if d is STATIC or isinstance(d, int):
            return None
        if isinstance(d, Var):
            return dim_of(d)
        vs = _vars_of(d)
        if len(vs) == 1:
            linear = solve_linear(d, vs[0])
            if linear is not None:
                a, b = linear
                if a.is_Integer and b.is_Integer and a > 0:
                    root = dim_of(vs[0])
                    if isinstance(root, int):
                        return None
                    return int(a) * root + int(b) if int(b) else int(a) * root
        lo, hi = _bounds(d)
        bounds = {"min": lo} if hi is None else {"min": lo, "max": hi}
        if hi is not None and hi == lo:
            return None
        return fresh("_".join(v.name for v in vs) + "_expr", d, **bounds)

    leaf_of: Dict[tuple, Leaf] = {
        (bound.key_to_param[leaf.param], leaf.steps): leaf for leaf in bound.leaves
    }
    auto = bound.spec.unspecified == "auto"

    def tensor_shape(leaf: Leaf) -> Any:
        spec = {j: dim_spec(d) for j, d in enumerate(leaf.spec.dims)}
        spec = {j: s for j, s in spec.items() if s is not None}
        return spec or None

    def mirror(value: Any, param: str, steps: Optional[tuple]) -> Any:
        """``steps`` is None below a pytree-registered object, where paths no longer match the spec's."""
        leaf = leaf_of.get((param, steps)) if steps is not None else None
        if leaf is None and isinstance(value, torch.Tensor):
            leaf = leaf_by_id.get(id(value))
        if leaf is not None:
            return tensor_shape(leaf) if isinstance(leaf.spec, TensorSpec) else None  # ints: constants in export
        if isinstance(value, torch.Tensor):
            return {j: Dim.AUTO for j in range(value.dim())} if auto and value.dim() else None
        if isinstance(value, MappingABC):
            return {k: mirror(v, param, _step(steps, "key", k)) for k, v in value.items()}
        if isinstance(value, (list, tuple)) and pytree._get_node_type(value) in pytree.BUILTIN_TYPES:
            items = [mirror(v, param, _step(steps, "index", i)) for i, v in enumerate(value)]
            return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
        if pytree._get_node_type(value) in pytree.SUPPORTED_NODES:
            children, _ = pytree.SUPPORTED_NODES[pytree._get_node_type(value)].flatten_fn(value)
            return [mirror(v, param, None) for v in children]
        return None

    # Leaf.steps hold Step objects; compare on (kind, key) pairs
    leaf_of = {(p, tuple((s.kind, s.key) for s in steps)): leaf for (p, steps), leaf in leaf_of.items()}
    tensor_leaves = [leaf for leaf in bound.leaves if leaf.is_tensor]
    leaf_by_id = {id(t): leaf for t, leaf in zip(bound.traced_leaves(*args, **kwargs), tensor_leaves)}
    names = [n for n in sig.parameters if n in bound_args.arguments][1 if skip_first else 0 :]
    shapes = {}
    for name in names:
        value = bound_args.arguments[name]
        p = sig.parameters[name]
        if p.kind is p.VAR_KEYWORD:
            shapes[name] = {k: mirror(v, name, (("key", k),)) for k, v in (value or {}).items()}
        elif p.kind is p.VAR_POSITIONAL:
            shapes[name] = tuple(mirror(v, name, (("index", i),)) for i, v in enumerate(value or ()))
        else:
            shapes[name] = mirror(value, name, ())
    return shapes


def _step(steps: Optional[tuple], kind: str, key: Any) -> Optional[tuple]:
    return None if steps is None else steps + ((kind, key),)


# --- torch 2.14's native ShapesSpec -------------------------------------------------


def to_native(bound_or_spec: Any) -> Any:
    """The spec as torch's own ``ShapesSpec`` (torch 2.14+).

    torch's spec is unbacked-only and binds by parameter name, so kinds and the
    ``unspecified`` policy do not carry over; ranges, expressions and
    assumptions do; a variable with choices is a ``SpecError`` (the native
    spec has no allowed-value sets).
    """
    spec = bound_or_spec.spec if isinstance(bound_or_spec, BoundSpec) else bound_or_spec
    with_choices = [v.name for v in spec.vars if v.choices is not None]
    if with_choices:
        raise SpecError(f"to_native: torch's ShapesSpec has no allowed-value sets, and {with_choices[0]} has choices")
    if not _compat.NATIVE_SHAPES_SPEC or not _compat.NATIVE_DYNAMIC_SPEC_DECORATOR:
        raise FeatureUnavailable(
            "to_native: this torch has no native ShapesSpec with dynamic_spec support "
            "(needs the NATIVE_DYNAMIC_SPEC_DECORATOR feature, torch 2.14+)",
            requirement="NATIVE_DYNAMIC_SPEC_DECORATOR",
        )
    from torch.fx.experimental import dynamic_spec as native

    tensor_vars = {v for leaf in spec.leaves if isinstance(leaf.spec, TensorSpec) for d in leaf.spec.dims for v in _vars_of(d)}
    natives: Dict[Var, Any] = {}
    for v in spec.vars:
        cls = native.ShapeVar if v in tensor_vars else native.IntVar
        kwargs = {"min": v.min, "max": v.max}
        if v.hint is not None:
            kwargs["optimization_hint"] = v.hint
        natives[v] = cls(v.name, **kwargs)

    def value(expr: Any) -> Any:
        code = to_python(expr, lambda s: f"V[{s.uid}]")
        return eval(code, {"V": {v.uid: n for v, n in natives.items()}, "max": max, "min": min})  # noqa: S307

    def convert(node: Any) -> Any:
        if isinstance(node, TensorSpec):
            return native.TensorSpec([native.STATIC if d is STATIC else (d if isinstance(d, int) else value(d)) for d in node.dims])
        if isinstance(node, (Var, sympy.Expr)) and not isinstance(node, bool):
            return value(node)
        if isinstance(node, int):
            return node
        if isinstance(node, MappingABC):
            return native.DictSpec({k: convert(v) for k, v in node.items()})
        if isinstance(node, (list, tuple)):
            return native.SeqSpec([convert(v) for v in node])
        raise SpecError(f"to_native: cannot convert {node!r}")

    params = {}
    for key, node in spec.params.items():
        if key == "**kwargs":
            params[key] = {k: convert(v) for k, v in node.items()}
        elif key == "*args":
            params[key] = [convert(v) for v in node]
        else:
            params[key] = convert(node)
    return native.ShapesSpec(native.ParamsSpec(params), assumptions=[value(a) for a in spec.assumptions])
