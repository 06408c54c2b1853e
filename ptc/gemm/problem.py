"""A GEMM problem as data: what is multiplied, how it is laid out, how it is scaled.

``GemmProblem`` is the key everything else shares: candidate enumeration, the
cost model, fusibility checks, the autotune database and ``ptc gemm explain``.
Its :meth:`GemmProblem.signature` is a short stable string (the database key's
problem part)::

    >>> GemmProblem("mm", 128, 4096, 4096).signature()
    'mm:bf16xbf16->bf16:m128n4096k4096:tn'
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

import torch

from ptc import _compat
from ptc.errors import PtcTypeError, PtcValueError

__all__ = ["GemmProblem", "OPS", "SCALE_MODES", "dtype_name", "parse_dtype"]

#: the Inductor GEMM ops ptc adds candidates for
OPS = ("mm", "addmm", "bmm", "scaled_mm")

#: scale modes of scaled_mm: per-tensor and per-row (FP8, Hopper and newer),
#: block scales of 32 (MXFP8, e8m0 scales) and 16 (NVFP4, e4m3 scales) elements
#: along K (Blackwell)
SCALE_MODES = ("tensor", "row", "block32", "block16")

_SHORT = {
    torch.bfloat16: "bf16",
    torch.float16: "f16",
    torch.float32: "f32",
    torch.float8_e4m3fn: "e4m3",
    torch.float8_e5m2: "e5m2",
}
if _compat.FP4_DTYPE:
    _SHORT[_compat.torch_dtype("float4_e2m1fn_x2")] = "e2m1x2"
_LONG = {v: k for k, v in _SHORT.items()}

#: bits per logical element of each input dtype (fp4 is packed two per byte)
_BITS = {"bf16": 16, "f16": 16, "f32": 32, "e4m3": 8, "e5m2": 8, "e2m1x2": 4}


def dtype_name(dtype: torch.dtype) -> str:
    """Short name ptc uses in signatures (``torch.bfloat16`` -> ``"bf16"``)."""
    try:
        return _SHORT[dtype]
    except KeyError:
        raise PtcValueError(f"dtype {dtype} is not a GEMM input/output dtype ptc plans for") from None


def parse_dtype(name: "str | torch.dtype") -> str:
    """Accept ``torch.bfloat16``, ``"bfloat16"`` or ``"bf16"``; return the short name."""
    if isinstance(name, torch.dtype):
        return dtype_name(name)
    if not isinstance(name, str):
        raise PtcTypeError(f"dtype must be a torch.dtype or a string, got {type(name).__name__}")
    if name in _BITS:
        return name
    dt = _compat.torch_dtype(name)
    if dt is not None:
        return dtype_name(dt)
    raise PtcValueError(f"dtype {name!r} is not one of {', '.join(_BITS)} (or a torch dtype name)")


@dataclass(frozen=True)
class GemmProblem:
    """``out[b] = epilogue(A[b] @ B[b])`` with ``A[b]: (m, k)``, ``B[b]: (k, n)``.

    Attributes:
      op: one of :data:`OPS`. ``addmm`` adds a bias; ``bmm`` has ``batch > 1``
        allowed; ``scaled_mm`` needs ``scale``.
      m, n, k: problem sizes (>= 1).
      batch: number of independent GEMMs (``bmm``), 1 otherwise.
      a_dtype, b_dtype, out_dtype: short dtype names (see :func:`parse_dtype`).
      layout: BLAS letters for A and B as row-major views: A ``t`` = K contiguous
        (row-major (m, k)), ``n`` = M contiguous; B ``n`` = K contiguous (``B = W.T``
        with ``W`` a row-major (n, k) weight), ``t`` = N contiguous. ``"tn"`` is a
        Linear layer's ``x @ W.T``.
      scale: for ``scaled_mm``, one of :data:`SCALE_MODES`.
    """

    op: str
    m: int
    n: int
    k: int
    batch: int = 1
    a_dtype: str = "bf16"
    b_dtype: str = "bf16"
    out_dtype: str = "bf16"
    layout: str = "tn"
    scale: Optional[str] = None

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise PtcValueError(f"op={self.op!r} is not one of {', '.join(OPS)}")
        for dim in ("m", "n", "k", "batch"):
            value = getattr(self, dim)
            if not isinstance(value, int) or isinstance(value, bool):
                raise PtcTypeError(f"{dim} must be an int, got {type(value).__name__}")
            if value < 1:
                raise PtcValueError(f"{dim} must be >= 1, got {dim}={value}")
        if self.batch != 1 and self.op != "bmm":
            raise PtcValueError(f"batch={self.batch} needs op='bmm', got op={self.op!r}")
        for name in ("a_dtype", "b_dtype", "out_dtype"):
            value = getattr(self, name)
            try:
                object.__setattr__(self, name, parse_dtype(value))
            except PtcValueError:
                raise PtcValueError(
                    f"{name}={str(value)!r} is not a GEMM dtype ptc plans for; use one of {', '.join(_BITS)}"
                ) from None
        if len(self.layout) != 2 or set(self.layout) - {"t", "n"}:
            raise PtcValueError(f"layout={self.layout!r} must be two of 't'/'n' (A then B), e.g. 'tn'")
        if self.op == "scaled_mm":
            if self.scale not in SCALE_MODES:
                raise PtcValueError(
                    f"op='scaled_mm' needs scale= one of {', '.join(SCALE_MODES)}, got scale={self.scale!r}"
                )
            expected = {"tensor": 8, "row": 8, "block32": 8, "block16": 4}[self.scale]
            if self.bits != expected:
                raise PtcValueError(
                    f"scale={self.scale!r} needs {expected}-bit inputs, got a_dtype={self.a_dtype!r}"
                )
        elif self.scale is not None:
            raise PtcValueError(f"scale={self.scale!r} is only meaningful with op='scaled_mm'")
        elif self.bits < 16:
            raise PtcValueError(f"{self.a_dtype} inputs need op='scaled_mm' with a scale mode")
        if self.a_dtype != self.b_dtype:
            raise PtcValueError(
                f"a_dtype={self.a_dtype!r} and b_dtype={self.b_dtype!r} differ; mixed-input GEMM is not planned"
            )

    @property
    def bits(self) -> int:
        """Width of one input element in bits."""
        return _BITS[self.a_dtype]

    @property
    def flops(self) -> int:
        """``2 * batch * m * n * k``."""
        return 2 * self.batch * self.m * self.n * self.k

    def with_(self, **changes) -> "GemmProblem":
        """A copy with fields replaced (validated again)."""
        return replace(self, **changes)

    def signature(self) -> str:
        """Stable short string naming the problem (database and report key)."""
        b = f"b{self.batch}" if self.batch != 1 else ""
        s = f":{self.scale}" if self.scale else ""
        return (
            f"{self.op}:{self.a_dtype}x{self.b_dtype}->{self.out_dtype}:"
            f"{b}m{self.m}n{self.n}k{self.k}:{self.layout}{s}"
        )

    @classmethod
    def from_signature(cls, sig: str) -> "GemmProblem":
        """Inverse of :meth:`signature`."""
        try:
            parts = sig.split(":")
            op, dts, dims, layout = parts[:4]
            scale = parts[4] if len(parts) > 4 else None
            ab, out = dts.split("->")
            a, b = next((x, ab[len(x) + 1:]) for x in _BITS if ab.startswith(x + "x") and ab[len(x) + 1:] in _BITS)
            batch = 1
            if dims.startswith("b"):
                bstr, dims = dims[1:].split("m", 1)
                batch, dims = int(bstr), "m" + dims
            m, rest = dims[1:].split("n")
            n, k = rest.split("k")
            return cls(op, int(m), int(n), int(k), batch, a, b, out, layout, scale)
        except PtcValueError:
            raise
        except Exception:
            raise PtcValueError(f"{sig!r} is not a GEMM problem signature (e.g. 'mm:bf16xbf16->bf16:m128n4096k4096:tn')") from None
