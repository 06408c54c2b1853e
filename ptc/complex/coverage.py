"""``coverage()``: which complex ATen ops ptc rewrites, which keep library kernels, which fall back.

Statuses:

* ``decomposed``: a rule turns the op into real arithmetic that Inductor fuses;
* ``library``: the op keeps its BLAS/LAPACK/FFT kernel on purpose; complex
  inputs and outputs cross as zero-copy views;
* ``raises``: eager raises for complex inputs, and so does ptc (the op runs on
  its ATen kernel, which raises);
* ``fallback``: eager supports complex, ptc has no rule; the op runs on its
  ATen kernel (correct, not fused). Any op not listed at all behaves the same.
"""

from __future__ import annotations

from typing import List, NamedTuple

from ptc.complex import rules as _rules

__all__ = ["CoverageEntry", "coverage", "format_coverage", "KNOWN_FALLBACKS"]


class CoverageEntry(NamedTuple):
    op: str
    status: str  # decomposed | library | raises | fallback
    group: str
    note: str


#: complex-capable ops without a rule (they run on ATen, correct but unfused)
KNOWN_FALLBACKS = [
    ("scatter_reduce.two", "movement", "reduce='prod'/'amax' are not per-part"),
    ("sinc.default", "elementwise", ""),
    ("logaddexp.default", "elementwise", ""),
    ("logcumsumexp.default", "reduction", ""),
    ("float_power.Tensor_Scalar", "elementwise", ""),
    ("linalg_cross.default", "elementwise", ""),
    ("any complex op on complex32 / bcomplex32", "boundary", "only complex64/complex128 are paired"),
]


def _name(op) -> str:
    return str(op).replace("aten.", "", 1)


def coverage() -> List[CoverageEntry]:
    """Every op ptc knows about, with its status, group and a note, sorted by group then name."""
    entries = [CoverageEntry(_name(op), "decomposed", r.group, r.note) for op, r in _rules.RULES.items()]
    entries += [CoverageEntry("view_as_real.default", "decomposed", "boundary", "the pair's planes, no copy")]
    entries += [CoverageEntry("copy_.default", "decomposed", "boundary",
                              "an input updated in place: stored by the kernel (on ATen for a conj/neg-bit input)")]
    entries += [
        CoverageEntry(_name(op), "library", "linalg/fft", _rules.LIBRARY_NOTES.get(op, "ATen kernel, zero-copy boundary"))
        for op in _rules.LIBRARY
    ]
    entries += [CoverageEntry(_name(op), "raises", "raises", "raises for complex, as eager") for op in _rules.RAISES]
    entries += [CoverageEntry(n, "fallback", g, note) for n, g, note in KNOWN_FALLBACKS]
    order = {"boundary": 0, "elementwise": 1, "movement": 2, "reduction": 3, "backward": 4, "linalg/fft": 5, "raises": 6}
    seen, unique = set(), []
    for e in entries:
        if e.op not in seen:
            seen.add(e.op)
            unique.append(e)
    return sorted(unique, key=lambda e: (e.status != "decomposed", order.get(e.group, 9), e.op))


def format_coverage() -> str:
    """A table of :func:`coverage` for a terminal."""
    rows = coverage()
    counts = {}
    for e in rows:
        counts[e.status] = counts.get(e.status, 0) + 1
    lines = [
        "ptc.complex coverage: " + ", ".join(f"{v} {k}" for k, v in counts.items()),
    ]
    width = max(len(e.op) for e in rows)
    for e in rows:
        lines.append(f"  {e.status:10} {e.group:11} {e.op:{width}}  {e.note}")
    return "\n".join(lines)
