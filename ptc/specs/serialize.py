"""Specs to and from JSON, keeping variable identity and exact expressions.

Format (version 1)::

    {"ptc_spec": 1,
     "vars": [{"id": 0, "name": "B", "min": 1, "max": 64, "kind": "backed", "hint": null},
              {"id": 2, "name": "H", "min": 64, "max": 256, "kind": "backed", "hint": null,
               "choices": [64, 128, 256], "specialize": false}, ...],
     "params": {"x": {"tensor": [{"var": 0}, {"expr": "2*v0"}, 64, "STATIC"]},
                "n": {"scalar": {"var": 1}},
                "cfg": {"dict": {"w": {...}}}, "xs": {"list": [...]}, "t": {"tuple": [...]}},
     "assumptions": ["Eq(Mod(v1, 8), 0)", "v0 <= v1"],
     "unspecified": "auto"}

Expressions are sympy source over the symbols ``v<id>``; loading maps each
id back to one ``Var`` object, so a variable shared by two tensors stays one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Dict

import sympy

from ptc.errors import SpecError
from ptc.specs.spec import Spec, TensorSpec, _vars_of
from ptc.specs.variables import STATIC, Var

__all__ = ["to_json", "from_json", "dumps", "loads"]

VERSION = 1


def to_json(spec: Spec) -> Dict[str, Any]:
    """The spec as JSON-compatible data (see the module docstring)."""
    ids = {v: i for i, v in enumerate(spec.vars)}

    def expr(e: Any) -> str:
        return sympy.sstr(sympy.sympify(e).xreplace({v: sympy.Symbol(f"v{ids[v]}", integer=True) for v in _vars_of(e)}))

    def dim(d: Any) -> Any:
        if d is STATIC:
            return "STATIC"
        if isinstance(d, int):
            return d
        if isinstance(d, Var):
            return {"var": ids[d]}
        return {"expr": expr(d)}

    def node(n: Any) -> Any:
        if isinstance(n, TensorSpec):
            return {"tensor": [dim(d) for d in n.dims]}
        if isinstance(n, (int, Var, sympy.Expr)) and not isinstance(n, bool):
            return {"scalar": dim(n)}
        if n is None:
            return None
        if isinstance(n, Mapping):
            return {"dict": {str(k): node(v) for k, v in n.items()}}
        if isinstance(n, tuple):
            return {"tuple": [node(v) for v in n]}
        return {"list": [node(v) for v in n]}

    return {
        "ptc_spec": VERSION,
        "vars": [_var_json(v, i) for v, i in ids.items()],
        "params": {k: node(v) for k, v in spec.params.items()},
        "assumptions": [expr(a) for a in spec.assumptions],
        "unspecified": spec.unspecified,
    }


def _var_json(v: Var, i: int) -> Dict[str, Any]:
    entry = {"id": i, "name": v.name, "min": v.min, "max": v.max, "kind": v.shape_kind, "hint": v.hint}
    if v.choices is not None:
        entry["choices"] = list(v.choices)
        entry["specialize"] = v.specialize
    return entry


def from_json(data: Mapping[str, Any]) -> Spec:
    """Rebuild a Spec from :func:`to_json` data."""
    if not isinstance(data, Mapping) or data.get("ptc_spec") != VERSION:
        raise SpecError(f"from_json: expected ptc spec data with ptc_spec={VERSION}")
    vars_by_id: Dict[int, Var] = {}
    for entry in data["vars"]:
        vars_by_id[entry["id"]] = Var(
            entry["name"],
            min=entry["min"],
            max=entry["max"],
            kind=entry["kind"],
            hint=entry.get("hint"),
            choices=entry.get("choices"),
            specialize=entry.get("specialize", False),
        )
    symbols = {f"v{i}": v for i, v in vars_by_id.items()}

    def expr(text: str) -> Any:
        try:
            return sympy.sympify(text, locals=dict(symbols))
        except (sympy.SympifyError, SyntaxError, TypeError) as e:
            raise SpecError(f"from_json: bad expression {text!r}: {e}") from None

    def dim(d: Any) -> Any:
        if d == "STATIC":
            return STATIC
        if isinstance(d, int):
            return d
        if "var" in d:
            return vars_by_id[d["var"]]
        return expr(d["expr"])

    def node(n: Any) -> Any:
        if n is None:
            return None
        (kind, value), = n.items()
        if kind == "tensor":
            return TensorSpec(*[dim(d) for d in value])
        if kind == "scalar":
            return dim(value)
        if kind == "dict":
            return {k: node(v) for k, v in value.items()}
        if kind == "tuple":
            return tuple(node(v) for v in value)
        if kind == "list":
            return [node(v) for v in value]
        raise SpecError(f"from_json: unknown node kind {kind!r}")

    return Spec(
        {k: node(v) for k, v in data["params"].items()},
        assumptions=[expr(a) for a in data.get("assumptions", [])],
        unspecified=data.get("unspecified", "auto"),
    )


def dumps(spec: Spec, **kwargs: Any) -> str:
    return json.dumps(to_json(spec), **kwargs)


def loads(text: str) -> Spec:
    return from_json(json.loads(text))
