"""The rule table: each complex ATen op as real arithmetic on ``Pair``s.

A rule takes the op's arguments with every complex tensor replaced by a
:class:`~ptc.complex.pair.Pair` (real tensors and Python numbers as they are)
and returns the op's result the same way. It may return ``NotImplemented`` for
an argument combination it does not handle; the op then runs on its ATen
kernel (see :mod:`ptc.complex.rewrite`). One module per group of rules:

* :mod:`~ptc.complex.rules.boundary`: views, conj/neg bits, construction, casts, constants;
* :mod:`~ptc.complex.rules.elementwise`: arithmetic, exponentials, trigonometry, predicates;
* :mod:`~ptc.complex.rules.movement`: cat, pad, flip, roll, gather/scatter/index (applied
  to both parts), and the reductions that are linear (sum, mean, cumsum);
* :mod:`~ptc.complex.rules.reduction`: prod, cumprod, var/std, norms, dot, vdot;
* :mod:`~ptc.complex.rules.backward`: the formulas autograd emits (tanh_backward, ...);
* :mod:`~ptc.complex.rules.core`: the table itself and the helpers on (re, im) parts.

Ops in :data:`LIBRARY` (GEMM, GEMV, linalg, FFT) deliberately keep their ATen
kernels (GEMV as a one-column GEMM, :data:`LIBRARY_RULES`); ops in
:data:`RAISES` raise for complex in eager and keep doing so
(:mod:`~ptc.complex.rules.policy`).

Formulas follow the scalar ``c10::complex`` / C99 Annex G definitions eager
uses, including the scaled (Smith) division and the overflow-safe ``abs``
(``hypot``), ``sqrt``, ``log1p`` and ``tanh``.
"""

from ptc.complex.rules import backward, boundary, elementwise, movement, reduction  # noqa: F401 - they register
from ptc.complex.rules.core import RULES, Ctx, Rule, cdiv, chypot, cmul, lookup, parts, rule
from ptc.complex.rules.policy import LIBRARY, LIBRARY_NOTES, LIBRARY_RULES, RAISES

__all__ = [
    "Rule", "RULES", "LIBRARY", "LIBRARY_RULES", "LIBRARY_NOTES", "RAISES", "Ctx", "lookup", "rule",
    "parts", "cmul", "cdiv", "chypot",
]
