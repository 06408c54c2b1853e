"""The kernels CuTeDSL offers for a problem: ``cutlass.operators`` queried on meta tensors.

Nothing here needs a GPU. Arguments are built from ``device="meta"`` tensors
with the problem's shapes, strides and dtypes, and ``get_operators(args=...,
target_sm=...)`` returns the operators whose ``supports(args)`` holds for the
target (about 0.05 s per dense problem). Results are memoized per
(signature, target, epilogue).
"""

from __future__ import annotations

import functools
from typing import Dict, List, Optional, Tuple

import torch

from ptc import _compat
from ptc.gemm.problem import GemmProblem
from ptc.gemm.targets import Target

__all__ = ["CatalogUnavailable", "available", "operators", "count_efc_operators", "meta_arguments", "versions"]


class CatalogUnavailable(Exception):
    """``cutlass.operators`` is not installed (the message names the extra)."""


def available() -> bool:
    """True when ``cutlass.operators`` (extra ``ptc[gemm]``) can be used."""
    return bool(_compat.CUTLASS_OPERATORS)


def _co():
    if not available():
        raise CatalogUnavailable("nvidia-cutlass-operators (pip install 'ptc[gemm]')")
    return cutlass_operators_module()


def cutlass_operators_module():
    """``import cutlass.operators``, keeping ``sys.excepthook`` (CUTLASS's DSL replaces it
    when first imported: :func:`ptc._compat.excepthook_kept`)."""
    with _compat.excepthook_kept():
        import cutlass.operators as co

    return co


@functools.lru_cache(maxsize=1)
def versions() -> Dict[str, str]:
    """Installed versions that change which kernels exist: ``{"cutlass_dsl", "cutlass_operators"}``."""
    from importlib import metadata

    out = {}
    for key, dist in (("cutlass_dsl", "nvidia-cutlass-dsl"), ("cutlass_operators", "nvidia-cutlass-operators")):
        try:
            out[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[key] = "absent"
    return out


_TORCH_DTYPES = {
    "bf16": torch.bfloat16,
    "f16": torch.float16,
    "f32": torch.float32,
    "e4m3": torch.float8_e4m3fn,
    "e5m2": torch.float8_e5m2,
}


def _tensor(shape, dtype, device, strides=None):
    if strides is None:
        return torch.empty(shape, dtype=dtype, device=device)
    return torch.empty_strided(shape, strides, dtype=dtype, device=device)


def _operand(rows: int, cols: int, k_major: bool, batch: int, dtype, device):
    """A (batch,) rows x cols operand; k_major means K (cols) is the contiguous dim."""
    if k_major:
        t = _tensor((batch, rows, cols), dtype, device)
    else:
        t = _tensor((batch, cols, rows), dtype, device).transpose(-1, -2)
    return t[0] if batch == 1 else t


def meta_arguments(problem: GemmProblem, epilogue_source: Optional[str] = None, epilogue=None, device="meta"):
    """``cutlass.operators`` runtime arguments describing ``problem`` (meta tensors by default).

    A is (m, k) and B is (k, n) with the strides ``problem.layout`` names (see
    :class:`GemmProblem`); out is (m, n) row-major; with ``batch > 1`` each gains
    a leading batch dim. Epilogue operands get the layouts the EVT expects:
    row vectors (N,), column vectors (M, 1) column-major, full (M, N) row-major.
    """
    co = _co()
    if problem.op == "scaled_mm" and problem.scale in ("block32", "block16"):
        return _blockscaled_arguments(problem, device)
    in_dt = _TORCH_DTYPES[problem.a_dtype]
    out_dt = _TORCH_DTYPES[problem.out_dtype]
    b = problem.batch
    a = _operand(problem.m, problem.k, problem.layout[0] == "t", b, in_dt, device)
    bt = _operand(problem.n, problem.k, problem.layout[1] == "n", b, in_dt, device).transpose(-1, -2)
    out = _tensor((b, problem.m, problem.n) if b > 1 else (problem.m, problem.n), out_dt, device)
    epi = None
    if epilogue_source is not None:
        kwargs = {"D": out}
        for name, (shape, kind) in epilogue.operands(problem).items():
            dt = torch.float32 if name.startswith("scale") else out_dt
            if kind == "col":
                kwargs[name] = _tensor(shape, dt, device, strides=(1, shape[0]))
            else:
                kwargs[name] = _tensor(shape, dt, device)
        if "rmax" in epilogue_source:
            for name in ("rmax", "rmin"):
                kwargs[name] = _tensor((problem.m, 1), torch.float32, device, strides=(1, problem.m))
        epi = co.EpilogueArguments(epilogue_source, **kwargs)
    return co.GemmArguments(A=a, B=bt, out=out, accumulator_type=torch.float32, epilogue=epi)


def _blockscaled_arguments(problem: GemmProblem, device):
    """A (m, k) and B (k, n) block-scaled as ``torch._scaled_mm`` takes them (both K-major,
    fp4 packed two per byte, scales 1-D in the 128 x 4 tiled layout; see ptc.gemm.blockscale)."""
    from ptc.gemm import blockscale, runtime

    block, scale_dt, (q_dt,) = blockscale.MODES[problem.scale]
    q_dt, scale_dt = getattr(torch, q_dt), getattr(torch, scale_dt)
    kq = problem.k // 2 if problem.scale == "block16" else problem.k
    a = _tensor((problem.m, kq), q_dt, device)
    b = _tensor((problem.n, kq), q_dt, device).t()
    scales = [_tensor((blockscale.scale_count(rows, problem.k, block),), scale_dt, device) for rows in (problem.m, problem.n)]
    out = _tensor((problem.m, problem.n), _TORCH_DTYPES[problem.out_dtype], device)
    return runtime.gemm_arguments(a, b, out, None, dict(zip(runtime.BLOCK_SCALES, scales)))


_CACHE: Dict[Tuple, List] = {}


def operators(problem: GemmProblem, target: Target, epilogue_source: Optional[str] = None, epilogue=None) -> List:
    """Every ``cutlass.operators`` operator that supports ``problem`` on ``target``.

    With ``epilogue_source`` only epilogue-fusion (EFC) operators that accept that
    EVT are returned. Raises whatever ``cutlass.operators`` raises for an epilogue
    it rejects (``check_fusible`` turns that into a reason).
    """
    co = _co()
    key = (problem.signature(), target.arch, epilogue_source)
    if key not in _CACHE:
        args = meta_arguments(problem, epilogue_source, epilogue)
        _CACHE[key] = list(co.get_operators(args=args, target_sm=target.arch))
    return list(_CACHE[key])


def count_efc_operators(problem: GemmProblem, target: Target, source: str, epilogue) -> int:
    """How many EFC operators accept ``source`` for ``problem`` on ``target``."""
    return len(operators(problem, target, source, epilogue))
