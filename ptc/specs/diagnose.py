"""Name, in a spec's terms, the shape constraints a model's own code imposes.

When traced code needs more than the spec states (``x.view(B, T // 8, 8, H)``
needs ``T % 8 == 0``; ``if x.shape[1] == 16`` fixes ``T``; ``x + y`` makes two
variables equal), torch raises a ``ConstraintViolationError`` in terms of its
own symbols, or export quietly turns the need into a guard or runtime assertion
of the program. ptc reads the trace's ``ShapeEnv`` (its replacements, guards and
runtime assertions), maps each symbol back to the spec's variables through the
names of the export ``Dim`` objects ptc made, keeps the facts that some valid
call of the spec breaks, and states each as a :class:`Constraint`: the rule,
where the model imposes it (from the guard's stack, see
``_compat.guard_stacks``) and the spec change that states it.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import re
import sysconfig
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import sympy
import torch

import ptc
from ptc.errors import SpecConstraintError, SpecError
from ptc.specs.binding import BoundSpec, _display
from ptc.specs.expr import to_python
from ptc.specs.lowering import divisors
from ptc.specs.spec import _vars_of
from ptc.specs.variables import Var

__all__ = ["Constraint", "violation", "shape_env", "constraints", "constraint_error"]

_SAMPLES = 128  # values tried at each end of a variable's range
_PROBES = 16  # values of a variable tried when asking whether a relation depends on it alone


@dataclasses.dataclass(frozen=True)
class Constraint:
    """One constraint the model imposes and the spec does not state.

    ``vars``: the names of the spec's variables it involves; ``rule``: what it
    requires (``"T must be a multiple of 8"``); ``where``: the model's source
    line that imposes it (``"model.py:12 (return x.view(b, t // 8, 8, h))"``),
    or None where torch recorded none; ``fix``: the spec change that states it.
    """

    vars: Tuple[str, ...]
    rule: str
    where: Optional[str]
    fix: str
    small_sizes: bool = False  # it excludes only sizes 0 and 1 of its one variable (the model treats them apart)

    def __str__(self) -> str:
        at = f", imposed at {self.where}" if self.where else ""
        return f"{self.rule}{at}; fix: {self.fix}"


def violation(error: BaseException) -> Optional[BaseException]:
    """torch's ``ConstraintViolationError`` in ``error``'s chain (itself, its cause or context), or None."""
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError

    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, ConstraintViolationError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def constraint_error(what: str, found: Sequence[Constraint]) -> SpecConstraintError:
    lines = "\n".join(f"  - {c}" for c in found)
    return SpecConstraintError(
        f"{what}: the model's code constrains the spec's variables beyond what the spec states:\n{lines}",
        found,
    )


def shape_env(outcome: Any) -> Any:
    """The ``ShapeEnv`` of an export: of its ``ExportedProgram``, or the one that
    raised torch's ``ConstraintViolationError`` in an export error's chain (the
    innermost in that error's traceback); None where there is none."""
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    if isinstance(outcome, torch.export.ExportedProgram):
        for node in outcome.graph.find_nodes(op="placeholder"):
            mode = getattr(node.meta.get("val"), "fake_mode", None)
            if mode is not None and mode.shape_env is not None:
                return mode.shape_env
        return None
    cause = violation(outcome)
    found, tb = None, cause.__traceback__ if cause is not None else None
    while tb is not None:
        for name in ("self", "shape_env"):
            value = tb.tb_frame.f_locals.get(name)
            if isinstance(value, ShapeEnv):
                found = value
        tb = tb.tb_next
    return found


def constraints(
    bound: BoundSpec,
    dims: Dict[str, Any],
    env: Any,
    events: Sequence[Tuple[str, list]] = (),
) -> List[Constraint]:
    """The constraints that ``env``'s facts (:func:`_facts`) impose beyond the spec.

    ``env`` is an export's ``ShapeEnv`` (:func:`shape_env`); ``dims`` maps the
    names of the ``Dim`` objects of that export to the spec expressions they
    stand for (``T_over_8`` to ``T/8``); ``events`` are the ``(guard, frames)``
    pairs of ``_compat.guard_stacks`` from the same trace. A fact counts when
    some valid call of the spec breaks it (tried on both ends of each range,
    every choice). Empty when ``env`` is None or the spec states everything.
    """
    if env is None:
        return []
    values = _symbol_values(env, dims)
    facts: Dict[str, Tuple[Any, List[Var]]] = {}
    for fact in _facts(env):
        syms = fact.free_symbols
        if not syms or not syms <= values.keys() or str(fact) in facts:
            continue
        vs = sorted({v for s in syms for v in _vars_of(values[s])}, key=lambda v: v.uid)
        facts[str(fact)] = (fact, vs)
    ctx = _Context(bound, values)
    groups: Dict[Tuple[Var, ...], List[Tuple[str, Any]]] = {}
    for text, (fact, vs) in facts.items():
        if ctx.always(fact, vs):
            continue
        owner = next((v for v in vs if ctx.depends_only_on(fact, vs, v)), None)
        key = (owner,) if owner is not None else tuple(vs)
        groups.setdefault(key, []).append((text, fact))
    out = []
    for vs, group in groups.items():
        rule, fix = ctx.classify(vs, [f for _, f in group])
        small = len(vs) == 1 and ctx.excludes_only_small_sizes(vs[0], [f for _, f in group])
        out.append(Constraint(tuple(v.name for v in vs), rule, _where([t for t, _ in group], events), fix, small))
    return out


def _facts(env: Any) -> List[Any]:
    """What ``env`` requires of its symbols: replacements (``s0 == 16``,
    ``s1 == s0``), guards and runtime assertions."""
    out = [sympy.Eq(s, t) for s, t in env.replacements.items()] + [g.expr for g in env.guards]
    return out + [ra.expr for asserts in env.deferred_runtime_asserts.values() for ra in asserts]


def _symbol_values(env: Any, dims: Dict[str, Any]) -> Dict[sympy.Symbol, Any]:
    """torch symbol -> the spec expression it stands for, through the ``Dim`` names
    torch records for each input source (``T``, ``8*T_over_8``, a phantom root ``T_over_8``)."""
    out = {}
    for sym, sources in env.var_to_sources.items():
        for src in sources:
            text = env.source_name_to_debug_name.get(src.name) or src.name
            if set(re.findall(r"[A-Za-z_]\w*", text)) <= dims.keys():
                out[sym] = sympy.sympify(text, locals=dict(dims))
                break
    return out


class _Context:
    """Evaluates torch facts on valid values of the spec's variables."""

    def __init__(self, bound: BoundSpec, values: Dict[sympy.Symbol, Any]) -> None:
        from torch.utils._sympy.printers import PythonPrinter

        self.bound = bound
        self.values = values
        self.divisors = divisors(bound)
        self.printer = PythonPrinter()
        self._facts: Dict[Any, Callable[..., Any]] = {}
        self._symbols: Dict[sympy.Symbol, Tuple[List[Var], Callable[..., Any]]] = {}
        self._assumptions = [
            (set(_vars_of(a)), eval(f"lambda V: {to_python(a, _by_uid)}", {"max": max, "min": min}))  # noqa: S307
            for a in bound.spec.assumptions
        ]

    # -- values --

    def samples(self, v: Var, n: int) -> List[int]:
        """Up to ``2*n`` valid values of ``v``: its choices, or both ends of its range."""
        k = self.divisors.get(v, 1)
        if v.choices is not None:
            return [c for c in v.choices if c % k == 0]
        lo = -(-v.min // k) * k
        hi = v.max if v.max is not None else lo + 2 * n * k
        hi = hi // k * k
        low = list(range(lo, min(hi, lo + n * k) + 1, k))
        high = list(range(max(lo, hi - n * k), hi + 1, k))
        return sorted(set(low + high))

    def allows(self, v: Var, x: int) -> bool:
        return v.contains(x) and x % self.divisors.get(v, 1) == 0

    def few(self, v: Var) -> List[int]:
        """Four valid values of ``v``: both ends, the next-to-lowest and the middle."""
        s = self.samples(v, _SAMPLES)
        return sorted({s[0], s[1 % len(s)], s[len(s) // 2], s[-1]})

    def valid(self, assignment: Dict[Var, int]) -> bool:
        """Do the spec's assumptions over the assigned variables hold?"""
        by_uid = {v.uid: x for v, x in assignment.items()}
        return all(fn(by_uid) for vs, fn in self._assumptions if vs <= assignment.keys())

    def holds(self, fact: Any, assignment: Dict[Var, int]) -> bool:
        fn = self._facts.get(fact)
        if fn is None:
            syms = sorted(fact.free_symbols, key=str)
            fn = eval(f"lambda {', '.join(map(str, syms))}: {self.printer.doprint(fact)}", {"max": max, "min": min})  # noqa: S307
            self._facts[fact] = fn
        args = {}
        for s in fact.free_symbols:
            vs, value_fn = self._value_fn(s)
            value = value_fn(*(assignment[v] for v in vs))
            if value != int(value):
                return False  # e.g. T_over_8 for a T that is not a multiple of 8
            args[str(s)] = int(value)
        try:
            return bool(fn(**args))
        except (ZeroDivisionError, ValueError):
            return False

    def _value_fn(self, s: sympy.Symbol):
        """(variables, a Python function of them giving symbol ``s``'s value)."""
        if s not in self._symbols:
            vs = _vars_of(self.values[s])
            self._symbols[s] = (vs, sympy.lambdify(vs, self.values[s], modules="math"))
        return self._symbols[s]

    def assignments(self, vs: Sequence[Var], fixed: Optional[Dict[Var, int]] = None, *, few: bool = False):
        """Valid assignments of ``vs`` (with ``fixed`` set): every sample of a single
        free variable, or a few values of each (``few``, or several free variables)."""
        fixed = fixed or {}
        free = [v for v in vs if v not in fixed]
        pools = [self.samples(v, _SAMPLES) if len(free) == 1 and not few else self.few(v) for v in free]
        if len(free) == 2:  # where two variables meet: equal and adjacent values
            near = {x + d for pool in pools for x in pool for d in (-1, 0, 1)}
            pools = [sorted(set(pool) | {x for x in near if self.allows(v, x)}) for v, pool in zip(free, pools)]
        for combo in itertools.product(*pools):
            a = {**fixed, **dict(zip(free, combo))}
            if self.valid(a):
                yield a

    # -- questions --

    def always(self, fact: Any, vs: Sequence[Var]) -> bool:
        """Does ``fact`` hold for every valid value of ``vs``?"""
        return all(self.holds(fact, a) for a in self.assignments(vs))

    def depends_only_on(self, fact: Any, vs: Sequence[Var], v: Var) -> bool:
        """Is ``fact``'s truth, for each value of ``v``, the same whatever the other variables are?"""
        if len(vs) == 1:
            return True
        others = [u for u in vs if u is not v]
        for x in self.samples(v, _PROBES):
            seen = {self.holds(fact, a) for a in self.assignments(others, {v: x})}
            if len(seen) > 1:
                return False
        return True

    def classify(self, vs: Tuple[Var, ...], facts: List[Any]) -> Tuple[str, str]:
        """``(rule, fix)`` for the facts of one group of variables."""
        named = None
        if len(vs) == 1:
            named = self._one_var(vs[0], facts)
        elif len(facts) == 1 and isinstance(facts[0], sympy.Eq):
            named = self._equality(facts[0])
        if named is not None:
            return named
        terms = [_spec_terms(f, self.values) for f in facts]
        together = sympy.And(*terms).simplify()  # Q <= T and T != Q: Q < T
        shown = [_show(t) for t in (terms if together is sympy.false else sympy.And.make_args(together))]
        return f"{' and '.join(shown)} must hold", f"assumptions=[{', '.join(shown)}]"

    def _equality(self, fact: Any) -> Optional[Tuple[str, str]]:
        """The rule for ``V == expr``: use ``expr`` where the spec binds ``V``
        (the variable that comes later in the spec)."""
        lhs, rhs = (_spec_terms(x, self.values) for x in (fact.lhs, fact.rhs))
        order = {v: i for i, v in enumerate(self.bound.spec.vars)}
        bare = [x for x in (lhs, rhs) if isinstance(x, Var)]
        if not bare:
            return None
        later = max(bare, key=lambda x: order.get(x, -1))
        other = _show(rhs if later is lhs else lhs)
        at = self.bound.sources.get(later, later.name)
        return f"{later.name} must equal {other} (the model requires it)", f"{at}: use {other} instead of {later.name}"

    def _allowed(self, v: Var, facts: List[Any], values: Sequence[int]) -> List[int]:
        """The values of ``v`` among ``values`` for which ``facts`` can hold (others set to any valid value)."""
        every = sorted({u for f in facts for s in f.free_symbols for u in _vars_of(self.values[s])}, key=lambda u: u.uid)
        allowed = []
        for x in values:
            a = next(self.assignments(every, {v: x}, few=True), None)
            if a is not None and all(self.holds(f, a) for f in facts):
                allowed.append(x)
        return allowed

    def excludes_only_small_sizes(self, v: Var, facts: List[Any]) -> bool:
        """Do ``facts`` refuse some of ``v``'s valid sizes 0 and 1 and no larger one?"""
        if v.min > 1:
            return False
        values = self.samples(v, _SAMPLES)
        allowed = set(self._allowed(v, facts, values))
        return any(x not in allowed for x in values if x <= 1) and all(x in allowed for x in values if x > 1)

    def _one_var(self, v: Var, facts: List[Any]) -> Optional[Tuple[str, str]]:
        """The rule for facts whose truth depends on ``v`` alone (others set to any valid value)."""
        values = self.samples(v, _SAMPLES)
        allowed = self._allowed(v, facts, values)
        if not allowed or len(allowed) == len(values):
            return None
        if len(allowed) == 1:
            c = allowed[0]
            return (
                f"{v.name} must equal {c} (the model specialises it)",
                f"make {v.name} the fixed size {c} (or STATIC) in the spec",
            )
        if v.choices is not None:
            return (
                f"{v.name} must be one of {{{', '.join(map(str, allowed))}}}",
                f"Var({v.name!r}, choices={tuple(allowed)})",
            )
        k = math.gcd(*allowed)
        if allowed != [x for x in values if x % k == 0 and allowed[0] <= x <= allowed[-1]]:
            return None
        parts, fixes = [], []
        if k > self.divisors.get(v, 1):
            parts.append(f"a multiple of {k}")
            fixes.append(f"assumptions=[Eq({v.name} % {k}, 0)]")
        # a new bound only where the allowed run stops short of the first/last multiple of k
        lo = allowed[0] if allowed[0] > values[0] + k - 1 else v.min
        hi = allowed[-1] if allowed[-1] < values[-1] - k + 1 else v.max
        if lo != v.min and hi != v.max:
            parts.append(f"between {lo} and {hi}")
        elif lo != v.min or hi != v.max:
            parts.append(f"at least {lo}" if lo != v.min else f"at most {hi}")
        if lo != v.min or hi != v.max:
            fixes.append(f"Var({v.name!r}, min={lo}, max={hi})")
        return f"{v.name} must be {' and '.join(parts)}", " and ".join(fixes)


def _by_uid(v: Var) -> str:
    return f"V[{v.uid}]"


def _spec_terms(expr: Any, values: Dict[sympy.Symbol, Any]) -> Any:
    """``expr`` over the spec's variables, torch's integer functions as sympy's."""
    from torch.utils._sympy import functions as tf

    expr = expr.xreplace({s: values[s] for s in expr.free_symbols if s in values})
    expr = expr.replace(tf.FloorDiv, lambda a, b: sympy.floor(a / b))
    for mod in ("Mod", "PythonMod"):
        if hasattr(tf, mod):
            expr = expr.replace(getattr(tf, mod), sympy.Mod)
    return expr


def _show(expr: Any) -> str:
    """``expr`` (over the spec's variables) as ptc writes specs: ``Q <= T``, ``(T % 8) == 0``."""
    try:
        return _display(expr)
    except SpecError:  # something ptc's specs cannot say; sympy's spelling
        return str(expr)


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_PTC_DIR = os.path.dirname(ptc.__file__) + os.sep
_STDLIB_DIR = sysconfig.get_paths()["stdlib"] + os.sep


def _is_model_file(filename: str) -> bool:
    """A file of the user's model: not torch's, ptc's, generated code or the standard library."""
    if filename.startswith("<") or filename.startswith((_TORCH_DIR, _PTC_DIR)):
        return False
    if filename.startswith(_STDLIB_DIR):
        return "site-packages" in filename or "dist-packages" in filename
    return True


def _where(guards: Sequence[str], events: Sequence[Tuple[str, list]]) -> Optional[str]:
    """``file:line (code)`` of the model's innermost frame where torch added one of ``guards``."""
    for text, frames in events:
        if text not in guards:
            continue
        for filename, lineno, _, line in reversed(frames):
            if _is_model_file(filename):
                rel = os.path.relpath(filename)
                shown = filename if rel.startswith("..") else rel
                return f"{shown}:{lineno}" + (f" ({line.strip()})" if line.strip() else "")
    return None
