"""Look inside what Inductor generated: which ATen kernels still run eagerly.

``generated_code(fn, *args)`` runs ``fn`` (a compiled function) once and
returns Inductor's output code (one string per compiled graph: forward,
backward). ``complex_fallbacks(code)`` lists the ATen calls in those wrappers
that are neither a zero-copy view (``view_as_real``, ``view.dtype``, ...) nor a
library kernel (BLAS, FFT, LAPACK): the eager fallbacks the benchmark and the
tests count.
"""

from __future__ import annotations

import re
from typing import Iterable, List, Tuple

from ptc.complex import rules as _rules

__all__ = ["generated_code", "aten_calls", "complex_fallbacks", "ZERO_COPY", "LIBRARY_NAMES"]

#: ATen calls that only make views (no data is read or written)
ZERO_COPY = {
    "view_as_real.default", "view_as_complex.default", "view.dtype", "_conj.default",
    "_neg_view.default", "alias.default", "as_strided.default", "select.int", "slice.Tensor",
    "permute.default", "reshape.default", "view.default", "expand.default", "squeeze.dim",
    "squeeze.default", "squeeze.dims", "unsqueeze.default", "t.default", "transpose.int",
    "diagonal.default", "unfold.default", "narrow.default", "_reshape_alias.default",
}

#: ATen calls to library kernels that ptc keeps on purpose (BLAS, LAPACK, FFT; the checks of
#: their error codes)
LIBRARY_NAMES = {str(op).replace("aten.", "", 1) for op in _rules.LIBRARY} | {"convolution.default"}

_CALL = re.compile(r"torch\.ops\.aten\.([A-Za-z0-9_]+)\.([A-Za-z0-9_]+)\(")
_EXTERN = re.compile(r"extern_kernels\.([A-Za-z0-9_]+)\(")


def generated_code(fn, *args, **kwargs) -> Tuple[object, List[str]]:
    """``(result, [code, ...])``: run ``fn(*args)`` once and capture Inductor's output code."""
    from torch._inductor.utils import run_and_get_code

    return run_and_get_code(fn, *args, **kwargs)


def _call_body(code: str) -> str:
    """The runtime part of a wrapper (``def call`` onwards), without the kernels' C++ sources."""
    idx = code.find("def call(")
    return code[idx:] if idx >= 0 else code


def aten_calls(codes: Iterable[str]) -> List[str]:
    """Every ``torch.ops.aten.OP.OVERLOAD`` and ``extern_kernels.OP`` call in the wrappers, in order."""
    if isinstance(codes, str):
        codes = [codes]
    found = []
    for code in codes:
        body = _call_body(code)
        found += [f"{m.group(1)}.{m.group(2)}" for m in _CALL.finditer(body)]
        found += [f"extern_kernels.{m.group(1)}" for m in _EXTERN.finditer(body)]
    return found


def complex_fallbacks(codes: Iterable[str]) -> List[str]:
    """ATen calls that do arithmetic or move data eagerly (not views, not library kernels)."""
    return [
        c
        for c in aten_calls(codes)
        if c not in ZERO_COPY and c not in LIBRARY_NAMES and not c.startswith("extern_kernels.")
    ]
