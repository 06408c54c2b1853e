"""The ops ptc leaves whole on purpose: library kernels, and ops that raise for complex in eager."""

from __future__ import annotations

from typing import Callable, Dict

import torch

from ptc.complex import gemv as _gemv
from ptc.complex.rules.core import _ops

aten = torch.ops.aten
prims = torch.ops.prims

# ---------------------------------------------------------------------------
# policy lists
# ---------------------------------------------------------------------------

#: ops that keep their library (BLAS/LAPACK/FFT) kernels; inputs and outputs cross zero-copy
LIBRARY = [
    op
    for op in _ops(
        "mm.default", "bmm.default", "mv.default", "addmm.default", "addmv.default", "baddbmm.default",
        "addbmm.default", "addr.default", "matmul.default", "outer.default", "convolution.default",
        "_fft_c2c.default", "_fft_r2c.default", "_fft_c2r.default", "linalg_matrix_exp.default",
        "_linalg_solve_ex.default", "_linalg_eigh.default", "linalg_eig.default", "_linalg_svd.default",
        "linalg_qr.default", "_linalg_det.default", "linalg_inv_ex.default", "linalg_lu_factor_ex.default",
        "linalg_lu_solve.default", "linalg_solve_triangular.default", "cholesky.default",
        "linalg_cholesky_ex.default", "_linalg_slogdet.default", "linalg_householder_product.default",
        "triangular_solve.default", "_fft_c2c.out", "linalg_lu.default", "cholesky_inverse.default",
        "cholesky_solve.default", "_cholesky_solve_helper.default", "geqrf.default", "ormqr.default",
        "lu_unpack.default", "linalg_ldl_factor_ex.default", "linalg_ldl_solve.default", "linalg_eigvals.default",
        "_linalg_eigvals.default", "linalg_eigh.default", "_linalg_check_errors.default",
    )
]

#: library ops that ptc calls in a faster form (still a BLAS call on the complex values); each
#: returns NotImplemented where it does not apply, and the op then runs on its own kernel
LIBRARY_RULES: Dict[torch._ops.OpOverload, Callable] = {aten.mv.default: _gemv.mv, aten.addmv.default: _gemv.addmv}

#: what coverage() says of a library op that has one of those
LIBRARY_NOTES = {
    aten.mv.default: "one-column complex GEMM, conj bit moved to the vectors (ptc.complex.gemv)",
    aten.addmv.default: "beta * self + alpha * mv, mv as a one-column complex GEMM (ptc.complex.gemv)",
}

#: ops that raise for complex inputs in eager; under ptc they raise the same way (they run on ATen)
RAISES = [
    op
    for op in _ops(
        "lt.Tensor", "lt.Scalar", "le.Tensor", "le.Scalar", "gt.Tensor", "gt.Scalar", "ge.Tensor",
        "ge.Scalar", "clamp.default", "clamp.Tensor", "clamp_min.default", "clamp_max.default",
        "amin.default", "amax.default", "min.default", "max.default", "min.dim", "max.dim",
        "minimum.default", "maximum.default", "sort.default", "sort.stable", "topk.default",
        "argmax.default", "argmin.default", "floor.default", "ceil.default", "round.default",
        "round.decimals", "trunc.default", "sign.default", "fmod.Tensor", "fmod.Scalar",
        "remainder.Tensor", "remainder.Scalar", "heaviside.default", "atan2.default", "hypot.default",
    )
]
