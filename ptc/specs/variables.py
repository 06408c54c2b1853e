"""Shape variables: named sympy symbols with a range (or a set of allowed values), a kind and an optional hint."""

from __future__ import annotations

import itertools
from typing import Iterable, Optional, Tuple

import sympy

from ptc import _compat
from ptc.errors import FeatureUnavailable, SpecError

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
        choices: the only values the variable may take, e.g. ``(64, 128, 256)``
            (ints within ``[min, max]``, in any order; ``min`` and ``max``
            become the smallest and largest choice).
            ``Var("H", choices=(64, 128, 256))`` is equivalent to
            ``Var("H", min=64, max=256)`` with the assumption
            ``(H == 64) | (H == 128) | (H == 256)``: a call is checked against
            the set before it runs (a ``SpecViolation`` otherwise); traced code
            (``torch.compile``, export, ``make_fx``) sees one symbol with the
            range of the choices and the membership as a ``torch._check``. So
            ``torch.compile`` builds one graph for all choices, with the
            membership a runtime assertion in it (as for any variable of the
            kind, a backed choice 0 or 1 gets a graph of its own and an
            ``"auto"`` variable starts static), and ``ptc.specs.export`` gives a
            ``Dim`` with that range and the membership as a runtime assertion
            of the program.
        specialize: with ``choices``, compile one graph per choice. Under
            ``torch.compile`` this is equivalent to
            ``mark_dynamic(t, dim, specialize_on=[lambda s: s == c for c in choices])``
            on every tensor dim that is exactly this variable: Dynamo traces
            once and the backend compiles that trace once per choice the calls
            use, plus once generically (torch compiles the generic graph when it
            traces; ptc never runs it, since every call has one of the choices).
            Needs ``kind="backed"``, every choice ``>= 2`` (torch gives sizes 0
            and 1 graphs of their own) and the variable as a bare tensor dim
            somewhere in the spec. Export and ``make_fx`` ignore it.

    The attributes are ``name``, ``min``, ``max``, ``shape_kind`` (sympy owns
    ``kind``), ``hint``, ``choices`` (a sorted tuple, or None) and ``specialize``.
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
        choices: Optional[Iterable[int]] = None,
        specialize: bool = False,
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
        if choices is not None:
            choices = _check_choices(name, choices, min, max, kind, hint, specialize)
            min, max = choices[0], choices[-1]
        elif specialize:
            raise SpecError(f"Var {name}: specialize=True needs choices (one graph per choice)")
        obj = sympy.Symbol.__xnew__(cls, name, integer=True, nonnegative=True)
        obj.uid = next(_ids)
        obj.min = min
        obj.max = max
        obj.shape_kind = kind  # sympy owns `.kind`
        obj.hint = hint
        obj.choices = choices
        obj.specialize = specialize
        return obj

    def __getnewargs_ex__(self):
        return (self.name,), {
            "min": self.min,
            "max": self.max,
            "kind": self.shape_kind,
            "hint": self.hint,
            "choices": self.choices,
            "specialize": self.specialize,
        }

    def _hashable_content(self):
        return sympy.Symbol._hashable_content(self) + (self.uid,)

    def contains(self, value: int) -> bool:
        if self.choices is not None:
            return value in self.choices
        return self.min <= value and (self.max is None or value <= self.max)

    def range_text(self) -> str:
        """``1 <= B <= 64``, or ``H in {64, 128, 256}`` for a variable with choices."""
        if self.choices is not None:
            return f"{self.name} in {{{', '.join(map(str, self.choices))}}}"
        upper = "inf" if self.max is None else str(self.max)
        return f"{self.min} <= {self.name} <= {upper}"

    def describe(self) -> str:
        """``Var('B', min=1, max=64, kind='backed')``."""
        extra = f", hint={self.hint}" if self.hint is not None else ""
        if self.choices is not None:
            extra += f", choices={self.choices}" + (", specialize=True" if self.specialize else "")
        return f"Var({self.name!r}, min={self.min}, max={self.max}, kind={self.shape_kind!r}{extra})"


def _check_choices(name, choices, min, max, kind, hint, specialize) -> Tuple[int, ...]:
    """The choices as a sorted tuple of distinct ints; a ``SpecError`` naming the problem otherwise."""
    if isinstance(choices, (str, bytes)) or not isinstance(choices, Iterable):
        raise SpecError(f"Var {name}: choices must be a collection of ints, got {choices!r}")
    choices = tuple(choices)
    if not choices:
        raise SpecError(f"Var {name}: choices is empty; give at least one allowed value")
    for c in choices:
        if isinstance(c, bool) or not isinstance(c, int):
            raise SpecError(f"Var {name}: choices must be ints, got {c!r}")
        if c < min or (max is not None and c > max):
            raise SpecError(f"Var {name}: choice {c} is outside [{min}, {max}]")
    choices = tuple(sorted(set(choices)))
    if hint is not None and hint not in choices:
        raise SpecError(f"Var {name}: hint={hint} is not one of the choices {choices}")
    if specialize:
        if kind != "backed":
            raise SpecError(
                f"Var {name}: specialize=True needs kind='backed' (torch specialises backed dims "
                f"only; a {kind} variable keeps one graph), got kind={kind!r}"
            )
        if choices[0] < 2:
            raise SpecError(
                f"Var {name}: specialize=True with choice {choices[0]}: torch gives backed sizes 0 and 1 "
                "graphs of their own; drop them from the choices or use specialize=False"
            )
        if not _compat.MARK_DYNAMIC_SPECIALIZE_ON:
            raise FeatureUnavailable(
                f"Var {name}: specialize=True needs torch's mark_dynamic(..., specialize_on=...), "
                "which this torch lacks",
                requirement="MARK_DYNAMIC_SPECIALIZE_ON",
            )
    return choices


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
