"""Spec objects: what is dynamic about a function's inputs, stated once.

A ``Spec`` maps parameter names to specs of the values passed there:

* ``tensor(B, T, 64)``: a tensor whose dims are a variable, an expression of
  variables (``2*B``, ``T // 2``, ``B*H``), a fixed int, or ``STATIC``;
* a bare ``Var``, expression or int: a scalar int argument;
* a ``dict`` (matched against a mapping's keys or an object's attributes, so
  dataclasses work), a ``list``/``tuple`` (matched by position): containers;
* ``"*args"`` (a list/tuple, one entry per extra positional argument) and
  ``"**kwargs"`` (a dict); ``"self"`` (attributes of the module/object).

``assumptions`` are sympy relations between variables (``sympy.Eq(T % 8, 0)``,
``B <= T``). ``unspecified`` says what happens to tensors in parameters the
spec does not mention: ``"auto"`` (torch's default), ``"static"`` or
``"error"``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import sympy

from ptc.errors import SpecError
from ptc.specs.variables import STATIC, Var, _Static

__all__ = ["Spec", "TensorSpec", "tensor", "Leaf", "UNSPECIFIED_POLICIES"]

UNSPECIFIED_POLICIES = ("auto", "static", "error")
Dim = Union[Var, sympy.Expr, int, _Static]


class TensorSpec:
    """The dims of one tensor: each a ``Var``, an expression, an int or ``STATIC``."""

    def __init__(self, *dims: Dim) -> None:
        if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
            dims = tuple(dims[0])
        checked = []
        for i, d in enumerate(dims):
            if isinstance(d, bool):
                raise SpecError(f"tensor dim {i}: got a bool; use an int, a Var, an expression or STATIC")
            if isinstance(d, int):
                if d < 0:
                    raise SpecError(f"tensor dim {i}: fixed size {d} is negative")
                checked.append(d)
            elif d is STATIC or isinstance(d, Var):
                checked.append(d)
            elif isinstance(d, sympy.Expr):
                _check_expression(d, f"tensor dim {i}")
                checked.append(d)
            else:
                raise SpecError(
                    f"tensor dim {i}: expected a Var, an expression of Vars, an int or STATIC, "
                    f"got {type(d).__name__} {d!r}"
                )
        self.dims: Tuple[Dim, ...] = tuple(checked)

    def __repr__(self) -> str:
        return f"tensor({', '.join(map(str, self.dims))})"

    def __eq__(self, other) -> bool:
        return isinstance(other, TensorSpec) and self.dims == other.dims

    def __hash__(self) -> int:
        return hash(self.dims)


def tensor(*dims: Dim) -> TensorSpec:
    """Spec of a tensor argument: ``tensor(B, T, H*64)``."""
    return TensorSpec(*dims)


def _check_expression(e: sympy.Expr, where: str) -> None:
    if e.is_Integer:
        return
    stray = [s for s in e.free_symbols if not isinstance(s, Var)]
    if stray:
        raise SpecError(f"{where}: {e} uses {', '.join(map(str, stray))}, which are not ptc Vars")
    if not e.free_symbols:
        raise SpecError(f"{where}: {e} is not an integer")


def _is_scalar_spec(node: Any) -> bool:
    return (isinstance(node, (int, sympy.Expr)) and not isinstance(node, bool)) or isinstance(node, Var)


# --- paths ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Step:
    """One step from a parameter to a value: ``("key", "w")``, ``("index", 0)``."""

    kind: str  # "key" (mapping key or attribute) | "index"
    key: Any


@dataclasses.dataclass(frozen=True)
class Leaf:
    """A tensor or scalar spec and where its value lives in a call."""

    param: str  # the parameter it hangs off (the real name of *args/**kwargs)
    steps: Tuple[Step, ...]
    spec: Any  # TensorSpec or a scalar spec (Var, expression, int)
    text: str  # "x", "cfg.w", "xs[0]", "cfg['w']"

    @property
    def is_tensor(self) -> bool:
        return isinstance(self.spec, TensorSpec)


def _walk(node: Any, param: str, steps: Tuple[Step, ...], text: str) -> Iterator[Leaf]:
    if isinstance(node, TensorSpec) or _is_scalar_spec(node):
        yield Leaf(param, steps, node, text)
    elif node is None:
        return
    elif isinstance(node, Mapping):
        for key, child in node.items():
            if not isinstance(key, (str, int)):
                raise SpecError(f"{text}: container keys must be str or int, got {key!r}")
            sub = f"{text}.{key}" if isinstance(key, str) and key.isidentifier() else f"{text}[{key!r}]"
            yield from _walk(child, param, steps + (Step("key", key),), sub)
    elif isinstance(node, (list, tuple)):
        for i, child in enumerate(node):
            yield from _walk(child, param, steps + (Step("index", i),), f"{text}[{i}]")
    elif node is STATIC:
        raise SpecError(f"{text}: STATIC is a tensor dim; for a whole argument use tensor(STATIC, ...)")
    else:
        raise SpecError(
            f"{text}: expected tensor(...), a Var/expression/int (scalar), a dict, a list or a tuple, "
            f"got {type(node).__name__} {node!r}"
        )


# --- the spec -------------------------------------------------------------------


class Spec:
    """A whole-signature shape spec; see the module docstring."""

    def __init__(
        self,
        params: Optional[Mapping[str, Any]] = None,
        *,
        assumptions: Sequence[Any] = (),
        unspecified: str = "auto",
    ) -> None:
        if params is None:
            params = {}
        if isinstance(params, Spec):
            raise SpecError("Spec(...): pass the parameter mapping, not another Spec")
        if not isinstance(params, Mapping):
            raise SpecError(f"Spec: params must map parameter names to specs, got {type(params).__name__}")
        for key in params:
            if not isinstance(key, str):
                raise SpecError(f"Spec: parameter names must be str, got {key!r}")
        if unspecified not in UNSPECIFIED_POLICIES:
            raise SpecError(
                f"Spec: unspecified must be one of {', '.join(UNSPECIFIED_POLICIES)}, got {unspecified!r}"
            )
        self.params: Dict[str, Any] = dict(params)
        self.assumptions: List[sympy.Basic] = []
        for i, a in enumerate(assumptions):
            a = sympy.sympify(a)
            if not isinstance(a, sympy.logic.boolalg.Boolean) or a in (sympy.true, sympy.false):
                raise SpecError(
                    f"assumptions[{i}]: expected a relation such as sympy.Eq(T % 8, 0) or B <= T, got {a!r}"
                )
            stray = [s for s in a.free_symbols if not isinstance(s, Var)]
            if stray:
                raise SpecError(f"assumptions[{i}]: {a} uses {', '.join(map(str, stray))}, which are not ptc Vars")
            self.assumptions.append(a)
        self.unspecified = unspecified
        self.leaves: List[Leaf] = []
        for name, node in self.params.items():
            if name == "**kwargs" and not isinstance(node, Mapping):
                raise SpecError("'**kwargs' must map keyword names to specs")
            if name == "*args" and not isinstance(node, (list, tuple)):
                raise SpecError("'*args' must be a list or tuple of specs, one per extra positional argument")
            self.leaves.extend(_walk(node, name, (), name))

    # -- variables --

    @property
    def vars(self) -> List[Var]:
        """Every variable, in order of first appearance (dims, then assumptions)."""
        seen: Dict[Var, None] = {}
        for leaf in self.leaves:
            dims = leaf.spec.dims if leaf.is_tensor else (leaf.spec,)
            for d in dims:
                for v in _vars_of(d):
                    seen.setdefault(v, None)
        for a in self.assumptions:
            for v in sorted(a.free_symbols, key=lambda s: s.uid):
                seen.setdefault(v, None)
        return list(seen)

    def __repr__(self) -> str:
        parts = [f"{k!r}: {v!r}" for k, v in self.params.items()]
        extra = f", assumptions={self.assumptions!r}" if self.assumptions else ""
        return f"Spec({{{', '.join(parts)}}}{extra}, unspecified={self.unspecified!r})"

    def __eq__(self, other) -> bool:
        if not isinstance(other, Spec):
            return NotImplemented
        from ptc.specs.serialize import to_json

        return to_json(self) == to_json(other)

    __hash__ = None  # mutable-looking; compare with ==


def _vars_of(d: Any) -> List[Var]:
    if isinstance(d, Var):
        return [d]
    if isinstance(d, sympy.Basic):
        return sorted((s for s in d.free_symbols if isinstance(s, Var)), key=lambda s: s.uid)
    return []
