"""Shape variables: named sympy symbols with a range, a kind and an optional hint."""

from __future__ import annotations

import itertools
from typing import Optional

import sympy

from ptc.errors import SpecError

__all__ = ["Var", "STATIC", "KINDS"]

KINDS = ("backed", "unbacked", "auto")
_ids = itertools.count()


class Var(sympy.Symbol):
    """A shape variable: a sympy integer symbol with a range, a kind and a hint.

    ``Var("B", min=1, max=64)`` is a symbol, so ``2*B``, ``B + 1``, ``B*H``,
    ``T // 2``, ``B % 8``, ``sympy.Eq(T % 8, 0)`` and ``B <= T`` are ordinary sympy
    expressions and relations. Two ``Var`` objects are different variables even
    when they share a name; one ``Var`` used in several places means "equal".

    Args:
        name: what error messages and graphs call it.
        min, max: the inclusive range (``max=None``: unbounded above).
        kind: how traced code sees it.
            ``"backed"`` (default): a symbol with a concrete hint from the first
            compiled call; code may branch on it (guard, recompile); tensor sizes
            0 and 1 get their own graph, as in torch (a scalar int does not).
            ``"unbacked"``: one graph for every value including 0 and 1; code
            may not branch on it. ``"auto"``: torch's automatic dynamic (static
            first, dynamic once it changes). ptc checks ranges and relations for
            every kind before the call. Tensor strides are guarded as torch
            models them: the stride of a dim of a contiguous tensor is the
            product of the sizes after it, except where one of those is 0 (the
            real stride is then ``max(1, ...)``). So a call in which some dims
            after the first are unbacked and 0 compiles one more graph for that
            set of zero dims, which later calls with the same zero dims reuse;
            leading dims of 0 and sizes of 1 stay in the one graph.
        hint: a typical value, used where a tracer needs an example size.

    The attributes are ``name``, ``min``, ``max``, ``shape_kind`` (sympy owns
    ``kind``) and ``hint``.
    """

    is_integer = True
    is_Integer = False

    def __new__(
        cls,
        name: str,
        min: int = 0,
        max: Optional[int] = None,
        *,
        kind: str = "backed",
        hint: Optional[int] = None,
    ) -> "Var":
        if not isinstance(name, str) or not name.isidentifier():
            raise SpecError(f"Var: name must be a Python identifier, got {name!r}")
        if isinstance(min, bool) or not isinstance(min, int):
            raise SpecError(f"Var {name}: min must be an int, got {min!r}")
        if max is not None and (isinstance(max, bool) or not isinstance(max, int)):
            raise SpecError(f"Var {name}: max must be an int or None, got {max!r}")
        if min < 0:
            raise SpecError(f"Var {name}: min={min} is negative; sizes and counts start at 0")
        if max is not None and max < min:
            raise SpecError(f"Var {name}: max={max} is below min={min}")
        if kind not in KINDS:
            raise SpecError(f"Var {name}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if hint is not None and not (min <= hint and (max is None or hint <= max)):
            raise SpecError(f"Var {name}: hint={hint} is outside [{min}, {max}]")
        obj = sympy.Symbol.__xnew__(cls, name, integer=True, nonnegative=True)
        obj.uid = next(_ids)
        obj.min = min
        obj.max = max
        obj.shape_kind = kind  # sympy owns `.kind`
        obj.hint = hint
        return obj

    def __getnewargs_ex__(self):
        return (self.name,), {"min": self.min, "max": self.max, "kind": self.shape_kind, "hint": self.hint}

    def _hashable_content(self):
        return sympy.Symbol._hashable_content(self) + (self.uid,)

    def contains(self, value: int) -> bool:
        return self.min <= value and (self.max is None or value <= self.max)

    def range_text(self) -> str:
        upper = "inf" if self.max is None else str(self.max)
        return f"{self.min} <= {self.name} <= {upper}"

    def describe(self) -> str:
        """``Var('B', min=1, max=64, kind='backed')``."""
        extra = f", hint={self.hint}" if self.hint is not None else ""
        return f"Var({self.name!r}, min={self.min}, max={self.max}, kind={self.shape_kind!r}{extra})"


class _Static:
    """A dimension that is static: any size, specialised in traced code."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "STATIC"

    def __reduce__(self):
        return "STATIC"


STATIC = _Static()
