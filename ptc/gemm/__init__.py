"""CuTeDSL GEMM kernels autotuned against ATen and Triton inside Inductor, on torch 2.13 and 2.14.

::

    import ptc.gemm
    with ptc.gemm.enable(db="gemm_autotune.json"):          # mm, addmm, bmm
        y = torch.compile(model, mode="max-autotune")(x)

    ptc.gemm.plan(ptc.gemm.GemmProblem("mm", 128, 4096, 4096), "B200", "bias,silu")

Planning (enumeration through ``cutlass.operators`` on meta tensors, an
analytical ranking for a named target, deduplication and diversity), epilogue
fusibility, PTX compilation and the choice policy all run on a CPU; only
launching and timing kernels needs the GPU. Nothing happens on import.
"""

from ptc.gemm.candidates import Candidate, Plan, estimate_us, plan
from ptc.gemm.db import AutotuneDB, Key
from ptc.gemm.epilogue import Epilogue, FusionDecision, check_fusible
from ptc.gemm.explain import explain, format_plan, format_report
from ptc.gemm.inductor import GemmSession, OpReport, active_session, enable
from ptc.gemm.policy import pick
from ptc.gemm.problem import GemmProblem
from ptc.gemm.targets import TARGETS, Target, target

__all__ = [
    "enable",
    "GemmSession",
    "OpReport",
    "active_session",
    "plan",
    "Plan",
    "Candidate",
    "estimate_us",
    "GemmProblem",
    "Epilogue",
    "FusionDecision",
    "check_fusible",
    "AutotuneDB",
    "Key",
    "pick",
    "Target",
    "TARGETS",
    "target",
    "explain",
    "format_plan",
    "format_report",
    "capability",
]


def capability(feature: str) -> str:
    """Status line for ``ptc env``."""
    from ptc import _compat

    if not _compat.CUTLASS_OPERATORS:
        return "enable(): not usable here (pip install 'ptc[gemm]' for CuTeDSL planning/kernels)"
    where = "launch on this GPU" if _compat.CUDA_AVAILABLE else "plan/compile only (no GPU)"
    return f"enable(): CuTeDSL mm/addmm/bmm/scaled_mm (FP8, MXFP8, NVFP4) candidates in max-autotune, fused epilogues, DB; {where}"
