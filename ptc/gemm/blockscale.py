"""Block-scaled GEMM operands (MXFP8, NVFP4) as ``torch._scaled_mm`` takes them, and what they mean.

A block-scaled operand is a quantized matrix ``q`` of ``rows x K`` values plus one
scale per ``block`` consecutive values along K:

=========  =========================  ======================  =====
mode       q dtype                    scale dtype             block
=========  =========================  ======================  =====
block32    float8_e4m3fn (MXFP8)      float8_e8m0fnu          32
block16    float4_e2m1fn_x2 (NVFP4)   float8_e4m3fn           16
=========  =========================  ======================  =====

``float4_e2m1fn_x2`` packs two values per byte, the even-indexed one in the low
four bits, so an NVFP4 ``q`` of K values has K / 2 columns. The scales are one
contiguous tensor of ``round_up(rows, 128) * round_up(ceil(K / block), 4)``
elements in the 128 x 4 tiled ("32x4x4 swizzled") layout Blackwell's block-scaled
MMA reads (cuBLAS's 1D block scaling factors layout; ``ScaleSwizzleMode.
Swizzle32x4x4`` in ``cutlass.operators``). With these operands, on torch 2.13 and
2.14, ``torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=dt)`` is equivalent to::

    (dequantize(a, scale_a) @ dequantize(b.t(), scale_b).t()).to(dt)

with :func:`dequantize` below (``b`` is K x N with K contiguous, so ``b.t()`` is
the N x K quantized matrix its scales describe).
"""

from __future__ import annotations

from typing import Optional

import torch

from ptc import _compat

__all__ = [
    "MODES", "mode_of", "block_of", "logical_k", "scale_count", "swizzle", "unswizzle", "unpack_fp4", "dequantize",
    "random_operands",
]

#: mode -> (elements per scale, scale dtype name, quantized dtype names)
MODES = {
    "block32": (32, "float8_e8m0fnu", ("float8_e4m3fn",)),
    "block16": (16, "float8_e4m3fn", ("float4_e2m1fn_x2",)),
}

#: the 16 values of an e2m1 code (sign, 2 exponent bits, 1 mantissa bit)
_FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def _dtype(name: str) -> Optional[torch.dtype]:
    return _compat.torch_dtype(name)


def mode_of(q_dtype: torch.dtype, scale_dtype: torch.dtype) -> Optional[str]:
    """``"block32"`` / ``"block16"`` for a quantized dtype and scale dtype pair, else None."""
    for mode, (_, scale, quantized) in MODES.items():
        if scale_dtype == _dtype(scale) and any(q_dtype == _dtype(q) for q in quantized):
            return mode
    return None


def block_of(q_dtype: torch.dtype, scale_dtype: torch.dtype) -> int:
    """Elements per scale for this pair; ValueError when it is no block-scaled pair."""
    mode = mode_of(q_dtype, scale_dtype)
    if mode is None:
        raise ValueError(f"{q_dtype} values with {scale_dtype} scales are not MXFP8 or NVFP4")
    return MODES[mode][0]


def logical_k(cols: int, q_dtype: torch.dtype) -> int:
    """Values in a row of ``cols`` quantized elements of ``q_dtype`` (packed fp4: two per element)."""
    return cols * (2 if q_dtype == _dtype("float4_e2m1fn_x2") else 1)


def _tiled(rows: int, kb: int):
    """``(rows, kb)`` rounded up to whole 128 x 4 tiles."""
    return -(-rows // 128) * 128, -(-kb // 4) * 4


def scale_count(rows: int, k: int, block: int) -> int:
    """Number of scales of a ``rows x k`` operand: ``round_up(rows, 128) * round_up(ceil(k / block), 4)``."""
    r, c = _tiled(rows, -(-k // block))
    return r * c


def swizzle(scales: torch.Tensor) -> torch.Tensor:
    """The tiled layout of a ``rows x kb`` matrix of scales (one per block): a 1-D tensor of
    :func:`scale_count` elements, zero-padded to whole 128 x 4 tiles. Inverse: :func:`unswizzle`.

    Within a tile, the scale of row ``32 * i + j`` and column ``c`` sits at ``16 * j + 4 * i + c``;
    tiles follow each other row-tile-major."""
    rows, kb = scales.shape
    r, c = _tiled(rows, kb)
    padded = torch.zeros((r, c), dtype=scales.dtype, device=scales.device)
    padded[:rows, :kb] = scales
    tiles = padded.view(r // 128, 4, 32, c // 4, 4)  # row tile, i, j, column tile, c
    return tiles.permute(0, 3, 2, 1, 4).reshape(-1)  # row tile, column tile, j, i, c


def unswizzle(flat: torch.Tensor, rows: int, kb: int) -> torch.Tensor:
    """The ``rows x kb`` scales held in tiled layout ``flat`` (see :func:`swizzle`)."""
    r, c = _tiled(rows, kb)
    if flat.numel() != r * c:
        raise ValueError(f"{flat.numel()} scales for {rows} rows of {kb} blocks; the tiled layout holds {r * c}")
    tiles = flat.reshape(r // 128, c // 4, 32, 4, 4)  # row tile, column tile, j, i, c
    return tiles.permute(0, 3, 2, 1, 4).reshape(r, c)[:rows, :kb]


def unpack_fp4(q: torch.Tensor) -> torch.Tensor:
    """float32 values of packed ``float4_e2m1fn_x2`` ``q`` (``rows x K/2`` -> ``rows x K``)."""
    codes = q.view(torch.uint8)
    pairs = torch.stack((codes & 0xF, codes >> 4), dim=-1).reshape(*q.shape[:-1], 2 * q.shape[-1])
    table = torch.tensor(_FP4_VALUES, dtype=torch.float32, device=q.device)
    return table[pairs.long()]


def dequantize(q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """``q * scale`` in float32, each scale repeated over its block of K (``rows x K``)."""
    block = block_of(q.dtype, scales.dtype)
    rows, k = q.shape[0], logical_k(q.shape[-1], q.dtype)
    values = unpack_fp4(q) if q.dtype == _dtype("float4_e2m1fn_x2") else q.float()
    s = unswizzle(scales.reshape(-1), rows, -(-k // block)).float()
    return values * s.repeat_interleave(block, dim=1)[:, :k]


def random_operands(mode: str, m: int, n: int, k: int, device="cpu", generator=None):
    """Random ``(a, b, scale_a, scale_b)`` for ``torch._scaled_mm`` in ``mode`` (for checks and
    benchmarks): ``a`` (m x K) and ``b`` (K x n, K contiguous) quantized, every fp4 code possible,
    scales tiled: MXFP8 powers of two 2^-3 .. 2^2, NVFP4 e4m3 values in [0.25, 2.25]."""
    if mode not in MODES:
        raise ValueError(f"mode={mode!r} is not one of {', '.join(MODES)}")
    block = MODES[mode][0]
    kw = dict(device=device, generator=generator)
    if mode == "block32":
        a, w = (torch.randn(r, k, **kw).to(torch.float8_e4m3fn) for r in (m, n))

        def scales(rows):
            return torch.randint(124, 130, (rows, -(-k // block)), dtype=torch.uint8, **kw).view(torch.float8_e8m0fnu)
    else:
        a, w = (torch.randint(0, 256, (r, k // 2), dtype=torch.uint8, **kw).view(torch.float4_e2m1fn_x2) for r in (m, n))

        def scales(rows):
            return (torch.rand(rows, -(-k // block), **kw) * 2 + 0.25).to(torch.float8_e4m3fn)
    return a, w.t(), swizzle(scales(m)), swizzle(scales(n))
