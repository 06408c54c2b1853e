"""Hypothesis strategies that draw valid and invalid calls from a spec.

    from ptc.specs.strategies import valid_calls, invalid_calls

    @given(valid_calls(f))          # (args, kwargs) that satisfy f's spec
    def test_compiled_matches_eager(call): ...

Sizes are capped (``max_size``) so generated tensors stay small.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Dict, List, Tuple

import torch
from hypothesis import strategies as st

from ptc.errors import PtcTypeError, SpecViolation
from ptc.specs.api import spec_of
from ptc.specs.binding import BoundSpec
from ptc.specs.expr import to_python
from ptc.specs.lowering import divisors as lowering_divisors
from ptc.specs.spec import TensorSpec
from ptc.specs.variables import STATIC, Var

__all__ = ["bindings", "valid_calls", "invalid_calls"]


def _bound(obj: Any) -> BoundSpec:
    bound = obj if isinstance(obj, BoundSpec) else spec_of(obj)
    if bound is None:
        raise PtcTypeError(f"{obj!r} has no ptc spec")
    return bound


def bindings(obj: Any, *, max_size: int = 16) -> st.SearchStrategy:
    """Values for every variable that satisfy ranges, choices, relations and assumptions.

    A variable with choices draws one of them (``max_size`` does not cap it).
    """
    bound = _bound(obj)
    divisors = lowering_divisors(bound)
    roots = list(bound.sources)  # every variable, each bound somewhere

    def one(v: Var) -> st.SearchStrategy:
        if v.choices is not None:  # every choice, whatever max_size says
            allowed = [c for c in v.choices if c % divisors.get(v, 1) == 0]
            return st.sampled_from(allowed) if allowed else st.nothing()
        hi = v.max if v.max is not None else max(v.min, max_size)
        hi = max(v.min, min(hi, max(max_size, v.min)))
        k = divisors.get(v, 1)
        lo_m, hi_m = -(-v.min // k), hi // k
        if lo_m > hi_m:
            return st.nothing()
        return st.integers(lo_m, hi_m).map(lambda m, k=k: m * k)

    strategy = st.fixed_dictionaries({v.uid: one(v) for v in roots})
    return strategy.map(lambda d: {v: d[v.uid] for v in roots}).filter(lambda b: _consistent(bound, b))


def _value(expr: Any, b: Dict[Var, int]) -> int:
    if isinstance(expr, int):
        return expr
    return eval(to_python(expr, lambda s: f"V[{s.uid}]"), {"V": {v.uid: x for v, x in b.items()}, "max": max, "min": min})  # noqa: S307


def _consistent(bound: BoundSpec, b: Dict[Var, int]) -> bool:
    """Do these values make every spec'd dim a valid size and hold every assumption?"""
    for leaf in bound.leaves:
        dims = leaf.spec.dims if isinstance(leaf.spec, TensorSpec) else (leaf.spec,)
        for d in dims:
            if d is STATIC or isinstance(d, (int, Var)):
                continue
            if _value(d, b) < 0:
                return False
    return all(_value(a, b) for a in bound.spec.assumptions)


def _tensor(shape: List[int]) -> torch.Tensor:
    """A tensor of ``shape`` drawn from a generator of its own: strategies leave torch's global
    random number generator (which the user's test may have seeded) where it was."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(0))


def _build(bound: BoundSpec, b: Dict[Var, int], static_size: int) -> Tuple[tuple, dict]:
    values: Dict[str, Any] = {}
    for leaf in bound.leaves:
        if isinstance(leaf.spec, TensorSpec):
            shape = [static_size if d is STATIC else _value(d, b) for d in leaf.spec.dims]
            value: Any = _tensor(shape)
        else:
            value = _value(leaf.spec, b)
        param = bound.key_to_param[leaf.param]
        node = values
        key: Any = param
        for step in leaf.steps:
            if key not in node:
                node[key] = {} if step.kind == "key" else []
            container = node[key]
            if isinstance(container, list):
                while len(container) <= step.key:
                    container.append(None)
            node, key = container, step.key
        node[key] = value
    sig = bound.signature
    args, kwargs = [], {}
    names = list(sig.parameters)
    for name in names:
        p = sig.parameters[name]
        if name not in values:
            continue
        if p.kind is p.VAR_POSITIONAL:
            args.extend(values[name])
        elif p.kind is p.VAR_KEYWORD:
            kwargs.update(values[name])
        elif p.kind is p.POSITIONAL_ONLY:
            args.append(values[name])
        else:
            kwargs[name] = values[name]
    return tuple(args), kwargs


def valid_calls(obj: Any, *, max_size: int = 16) -> st.SearchStrategy:
    """``(args, kwargs)`` calls of ``obj`` (a decorated function) that satisfy its spec.

    Every parameter must be described by the spec (there is nothing to draw
    for the others); STATIC dims are drawn once per call from 1..3.
    """
    bound = _bound(obj)
    return st.tuples(bindings(bound, max_size=max_size), st.integers(1, 3)).map(
        lambda bs: _build(bound, bs[0], bs[1])
    )


def invalid_calls(obj: Any, *, max_size: int = 16) -> st.SearchStrategy:
    """Calls that break the spec in exactly one tensor dim or int argument.

    A valid call with one value moved by a small step (-2, -1, 1, 3 or 7) and
    kept only if the spec rejects it: a variable with choices gets a value
    outside them.
    """
    bound = _bound(obj)

    def corrupt(draw_args):
        (args, kwargs), which, delta = draw_args
        tensors = [(container, key) for container, key in _slots(args, kwargs)]
        if not tensors:
            return None
        container, key = tensors[which % len(tensors)]
        value = container[key]
        if isinstance(value, torch.Tensor):
            if value.dim() == 0:
                return None
            shape = list(value.shape)
            j = which % len(shape)
            shape[j] = max(shape[j] + delta, 0)
            container[key] = _tensor(shape)
        else:
            container[key] = max(value + delta, 0)
        try:
            bound.checker(*args, **kwargs)
        except SpecViolation:
            return (args, kwargs)
        return None

    return (
        st.tuples(valid_calls(bound, max_size=max_size), st.integers(0, 64), st.sampled_from([-2, -1, 1, 3, 7]))
        .map(corrupt)
        .filter(lambda c: c is not None)
    )


def _slots(args: tuple, kwargs: dict):
    """Mutable (container, key) pairs of every tensor or int in a call."""
    out = []

    def walk(container, key):
        value = container[key]
        if isinstance(value, (torch.Tensor, int)) and not isinstance(value, bool):
            out.append((container, key))
        elif isinstance(value, Mapping):
            for k in list(value):
                walk(value, k)
        elif isinstance(value, list):
            for i in range(len(value)):
                walk(value, i)

    for k in list(kwargs):
        walk(kwargs, k)
    return out
