"""sympy expressions as Python source with integer semantics, and linear solving.

ptc never evaluates sympy on the hot path: each expression of a spec is turned
once into Python source (``2*B + 1``, ``T // 2``, ``T % 8 == 0``) that the
generated checker and the traced facts function evaluate on plain ints (or
SymInts while tracing).
"""

from __future__ import annotations

from typing import Callable, Optional, Tuple

import sympy

from ptc.errors import SpecError

__all__ = ["to_python", "solve_linear", "free_vars"]

_RELATIONS = {
    sympy.Eq: "==",
    sympy.Ne: "!=",
    sympy.Lt: "<",
    sympy.Le: "<=",
    sympy.Gt: ">",
    sympy.Ge: ">=",
}


def free_vars(expr) -> set:
    return set(sympy.sympify(expr).free_symbols)


def to_python(expr, name: Callable[[sympy.Symbol], str] = str) -> str:
    """Python source for ``expr`` over integers; symbols are rendered by ``name``.

    Supports integers, +, -, *, integer powers, ``floor``/``ceiling`` of
    rational expressions (``T // 2``), ``Mod`` (``%``), ``Max``/``Min``,
    relations (==, !=, <, <=, >, >=) and ``And``/``Or``/``Not``.
    """
    return _py(sympy.sympify(expr), name)


def _py(e, name) -> str:
    if isinstance(e, sympy.Symbol):
        return name(e)
    if e is sympy.true:
        return "True"
    if e is sympy.false:
        return "False"
    if isinstance(e, sympy.Integer):
        return str(int(e))
    if isinstance(e, sympy.Rational):
        raise SpecError(f"spec expression {e} is not an integer; use // for division")
    for rel, op in _RELATIONS.items():
        if isinstance(e, rel):
            return f"{_py(e.lhs, name)} {op} {_py(e.rhs, name)}"
    if isinstance(e, sympy.And):
        return " and ".join(f"({_py(a, name)})" for a in e.args)
    if isinstance(e, sympy.Or):
        return " or ".join(f"({_py(a, name)})" for a in e.args)
    if isinstance(e, sympy.Not):
        return f"not ({_py(e.args[0], name)})"
    if isinstance(e, sympy.Add):
        terms = [_py(a, name) for a in _ordered(e.args)]
        out = terms[0]
        for t in terms[1:]:
            out += f" - {t[1:]}" if t.startswith("-") else f" + {t}"
        return f"({out})" if len(terms) > 1 else out
    if isinstance(e, sympy.Mul):
        coeff, rest = e.as_coeff_Mul()
        if not isinstance(coeff, sympy.Integer):
            raise SpecError(f"spec expression {e} has a fractional coefficient; use // for division")
        factors = [_py(a, name) for a in _ordered(sympy.Mul.make_args(rest))]
        body = "*".join(factors)
        if coeff == 1:
            return body
        if coeff == -1:
            return f"-{body}"
        return f"{int(coeff)}*{body}"
    if isinstance(e, sympy.Pow):
        base, exp = e.args
        if not (isinstance(exp, sympy.Integer) and exp > 0):
            raise SpecError(f"spec expression {e}: only positive integer powers are allowed")
        return f"{_py(base, name)}**{int(exp)}"
    if isinstance(e, sympy.Mod):
        return f"({_py(e.args[0], name)} % {_py(e.args[1], name)})"
    if isinstance(e, (sympy.floor, sympy.ceiling)):
        num, den = sympy.fraction(sympy.cancel(sympy.together(e.args[0])))
        if not isinstance(den, sympy.Integer):
            raise SpecError(f"spec expression {e}: can only divide by an integer constant")
        n, d = _py(sympy.expand(num), name), int(den)
        if isinstance(e, sympy.floor):
            return f"({n} // {d})" if d != 1 else n
        return f"(-((-{n}) // {d}))" if d != 1 else n
    if isinstance(e, (sympy.Max, sympy.Min)):
        fn = "max" if isinstance(e, sympy.Max) else "min"
        return f"{fn}({', '.join(_py(a, name) for a in e.args)})"
    raise SpecError(f"spec expression {e}: {type(e).__name__} is not supported")


def _ordered(args):
    """A stable, readable order: symbols and products first, constants last."""
    return sorted(args, key=lambda a: (a.is_Number, sympy.default_sort_key(a)))


def solve_linear(expr, unknown: sympy.Symbol) -> Optional[Tuple[object, object]]:
    """``(a, b)`` with ``expr == a*unknown + b`` and ``a, b`` free of ``unknown``,
    or None when ``expr`` is not linear in ``unknown`` (e.g. ``A*A``, ``A // 2``)."""
    expr = sympy.expand(sympy.sympify(expr))
    if any(unknown in f.free_symbols for f in expr.atoms(sympy.floor, sympy.ceiling, sympy.Mod, sympy.Max, sympy.Min)):
        return None
    a = sympy.expand(expr.coeff(unknown, 1))
    b = sympy.expand(expr - a * unknown)
    if a == 0 or unknown in a.free_symbols or unknown in b.free_symbols:
        return None
    return a, b
