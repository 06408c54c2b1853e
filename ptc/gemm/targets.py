"""Target GPUs described by numbers, so planning and ranking run without the GPU.

A :class:`Target` holds what the cost model and the kernel catalogue need: the
compute capability suffix CuTeDSL compiles for (``"90a"``, ``"100a"``), the SM
count, the dense tensor-core peak per input width, the memory bandwidth, the
largest cluster, and whether 2-CTA MMA exists. Figures are the vendors'
published dense (no sparsity) peaks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

from ptc.errors import PtcValueError

__all__ = ["Target", "TARGETS", "target", "detect"]


@dataclass(frozen=True)
class Target:
    """A GPU model as the planner sees it.

    Attributes:
      name: canonical name (``"H100_SXM"``, ``"B200"``, ...).
      arch: CuTeDSL target suffix, ``"90a"`` (Hopper) or ``"100a"`` (Blackwell).
      sms: number of streaming multiprocessors.
      tflops_16: dense bf16/fp16 tensor-core peak, TFLOP/s.
      tflops_8: dense fp8 peak, TFLOP/s.
      tflops_4: dense fp4 peak, TFLOP/s (0 where the GPU has no fp4 MMA).
      hbm_tbps: DRAM bandwidth, TB/s.
      l2_mb: L2 cache size, MB.
      max_cluster: largest portable thread-block cluster (CTAs).
      two_cta: the MMA can span a CTA pair (Blackwell ``tcgen05.mma.cta_group::2``).
      nvmmh_name: the SKU name nvMatmulHeuristics knows, if any.
    """

    name: str
    arch: str
    sms: int
    tflops_16: float
    tflops_8: float
    tflops_4: float
    hbm_tbps: float
    l2_mb: int
    max_cluster: int
    two_cta: bool
    nvmmh_name: Optional[str] = None

    @property
    def cc(self) -> int:
        """Compute capability as an integer (90, 100)."""
        return int(self.arch.rstrip("a"))

    @property
    def family(self) -> str:
        """``"hopper"`` or ``"blackwell"``."""
        return "hopper" if self.cc == 90 else "blackwell"

    def peak_tflops(self, bits: int) -> float:
        """Dense tensor-core peak for inputs of ``bits`` width (16, 8 or 4)."""
        peak = {16: self.tflops_16, 8: self.tflops_8, 4: self.tflops_4}.get(bits, 0.0)
        if peak <= 0:
            raise PtcValueError(f"target {self.name} has no {bits}-bit tensor-core MMA")
        return peak


TARGETS: Dict[str, Target] = {
    t.name: t
    for t in (
        Target("H100_SXM", "90a", 132, 989.0, 1979.0, 0.0, 3.35, 50, 8, False, "H100_SXM"),
        Target("H200_SXM", "90a", 132, 989.0, 1979.0, 0.0, 4.8, 50, 8, False, "H200_SXM"),
        Target("B200", "100a", 148, 2250.0, 4500.0, 9000.0, 8.0, 126, 8, True, "B200"),
        Target("GB200", "100a", 148, 2500.0, 5000.0, 10000.0, 8.0, 126, 8, True, "GB200"),
    )
}

_ALIASES = {"H100": "H100_SXM", "H200": "H200_SXM", "HOPPER": "H100_SXM", "BLACKWELL": "B200"}


def target(name: str | Target) -> Target:
    """The :class:`Target` named ``name`` (case-insensitive; ``"H100"`` means the SXM part).

    Raises:
      PtcValueError: ``name`` is not a known target; the message lists the known ones.
    """
    if isinstance(name, Target):
        return name
    if not isinstance(name, str):
        raise PtcValueError(f"target must be a target name or ptc.gemm.Target, got {type(name).__name__}")
    key = name.strip().upper().replace("-", "_").replace(" ", "_")
    key = _ALIASES.get(key, key)
    if key not in TARGETS:
        raise PtcValueError(
            f"target={name!r} is not a known GPU; choose one of {', '.join(TARGETS)} "
            "(or pass a ptc.gemm.Target)"
        )
    return TARGETS[key]


def detect(device_name: str, capability: tuple) -> Optional[Target]:
    """The target matching a device name and compute capability, or None.

    ``detect(torch.cuda.get_device_name(), torch.cuda.get_device_capability())``.
    Unknown Hopper/Blackwell parts map to the family's reference model
    (H100_SXM / B200); anything older than Hopper gives None.
    """
    upper = device_name.upper()
    for key in ("GB200", "B200", "H200", "H100"):
        if key in upper:
            return target(key)
    major = capability[0]
    if major == 9:
        return TARGETS["H100_SXM"]
    if major == 10:
        return TARGETS["B200"]
    return None
