"""Candidate CuTeDSL kernels for a problem on a target: enumerate, estimate, dedupe, diversify, cap.

:func:`plan` is the whole pipeline, CPU-only::

    p = plan(GemmProblem("mm", 128, 4096, 4096), "B200", epilogue="bias,relu")
    p.selected      # the few kernels worth benchmarking, best estimate first
    p.dropped       # every other compatible kernel with the rule that dropped it

Ranking uses :func:`estimate_us`, an analytical model of the *target* (its SM
count, tensor-core peak and bandwidth), so it needs neither the GPU nor
nvMatmulHeuristics' device detection. Selection fixes two faults of torch
2.14.1's top-N list (duplicates of one tile/cluster key, 2-CTA pair tiles
compared as per-CTA tiles):

1. **key**: kernels are grouped by ``(tile_m, tile_n, cluster_m, cluster_n,
   2cta)`` where ``tile_m`` is the *pair* tile for 2-CTA kernels; one kernel per
   key survives (best estimate, then name), and the rules below may still drop
   it, in which case its key has no kernel selected;
2. **diversity**: at most ``per_tile`` keys share a ``(tile_m, tile_n, 2cta)``
   output tile, so the benchmark budget spans tile shapes, not cluster variants;
3. **cap**: the best ``max_candidates`` keys remain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, List, Tuple

from ptc.errors import FeatureUnavailable, PtcValueError
from ptc.gemm import catalog
from ptc.gemm.epilogue import Epilogue, FusionDecision, check_fusible
from ptc.gemm.problem import GemmProblem
from ptc.gemm.targets import Target, target as _target

__all__ = ["Candidate", "Plan", "plan", "estimate_us", "candidates_from_operators"]

_LAUNCH_US = 3.0


@dataclass(frozen=True)
class Candidate:
    """One CuTeDSL kernel (a ``cutlass.operators`` operator) for a problem.

    Attributes:
      name: the operator name (unique; what the runtime looks up).
      tile: ``(tile_m, tile_n, tile_k)``; for 2-CTA kernels ``tile_m`` spans the pair.
      cluster: ``(cluster_m, cluster_n)``.
      two_cta: the MMA spans two CTAs.
      efc: an epilogue-fusion-capable kernel.
      scheduler: tile scheduler ("clc", "static", "-").
      estimate_us: the cost model's estimate on the plan's target.
    """

    name: str
    tile: Tuple[int, int, int]
    cluster: Tuple[int, int]
    two_cta: bool
    efc: bool
    scheduler: str
    estimate_us: float = 0.0

    @property
    def key(self) -> Tuple[int, int, int, int, bool]:
        """Dedupe key: ``(tile_m, tile_n, cluster_m, cluster_n, two_cta)``."""
        return (self.tile[0], self.tile[1], self.cluster[0], self.cluster[1], self.two_cta)

    @property
    def label(self) -> str:
        """Short readable name: ``t128x256x64 c2x1 2cta efc clc``."""
        parts = [f"t{self.tile[0]}x{self.tile[1]}x{self.tile[2]}", f"c{self.cluster[0]}x{self.cluster[1]}"]
        parts.append("2cta" if self.two_cta else "1cta")
        if self.efc:
            parts.append("efc")
        parts.append(self.scheduler)
        return " ".join(parts)


@dataclass
class Plan:
    """The result of :func:`plan`.

    Attributes:
      problem, target, epilogue: what was planned for.
      fusion: the epilogue decision (``fusion.fused`` selects EFC kernels).
      selected: candidates to benchmark, best estimate first.
      dropped: ``(candidate, reason)`` for every other compatible kernel.
      note: why there are no candidates at all (empty otherwise).
    """

    problem: GemmProblem
    target: Target
    epilogue: Epilogue
    fusion: FusionDecision
    selected: List[Candidate] = field(default_factory=list)
    dropped: List[Tuple[Candidate, str]] = field(default_factory=list)
    note: str = ""

    @property
    def considered(self) -> int:
        return len(self.selected) + len(self.dropped)


def _bytes(problem: GemmProblem) -> float:
    return problem.bits / 8.0


def estimate_us(c: Candidate, problem: GemmProblem, tgt: Target) -> float:
    """Analytical runtime estimate of kernel ``c`` for ``problem`` on ``tgt``, in µs.

    Model: output tiles are scheduled in waves over the SMs a cluster layout can
    occupy; a tile costs the max of its MMA time (peak per SM scaled by a tile
    efficiency that favours large per-CTA tiles) and its operand traffic (A/B
    panels, shared across a cluster by multicast); the whole problem is bounded
    below by its compulsory DRAM traffic. Plus a fixed launch cost. It ranks; it
    does not replace measurement.
    """
    tm, tn, _ = c.tile
    ctas_per_tile = 2 if c.two_cta else 1
    cluster_ctas = c.cluster[0] * c.cluster[1]
    tiles = math.ceil(problem.m / tm) * math.ceil(problem.n / tn) * problem.batch
    usable_sms = (tgt.sms // cluster_ctas) * cluster_ctas
    slots = max(1, usable_sms // ctas_per_tile)
    waves = math.ceil(tiles / slots)
    per_cta_m = tm / ctas_per_tile
    eff = min(1.0, (per_cta_m * tn) / (128.0 * 256.0)) ** 0.3
    peak_per_sm = tgt.peak_tflops(problem.bits) * 1e12 / tgt.sms  # flop/s
    compute_s = 2.0 * tm * tn * problem.k / (peak_per_sm * ctas_per_tile * eff)
    eb = _bytes(problem)
    panel = (tm * problem.k / max(1, c.cluster[1]) + tn * problem.k / max(1, c.cluster[0])) * eb
    bw_per_sm = tgt.hbm_tbps * 1e12 / tgt.sms * 2.0  # L2 hits double the DRAM share
    mem_s = panel / (bw_per_sm * ctas_per_tile)
    # padding waste of partial tiles is already in `tiles`; tail-wave imbalance in `waves`
    body = waves * max(compute_s, mem_s)
    dram = ((problem.m * problem.k + problem.n * problem.k) * eb + problem.m * problem.n * 2) * problem.batch
    floor = dram / (tgt.hbm_tbps * 1e12)
    return (max(body, floor)) * 1e6 + _LAUNCH_US


def _scheduler(design: Any) -> str:
    sched = getattr(design, "tile_scheduler", None)
    if sched is None:
        return "static"
    name = type(sched).__name__.lower()
    return "clc" if "clc" in name else ("static" if "static" in name else name.replace("metadata", ""))


def candidates_from_operators(ops, problem: GemmProblem, tgt: Target) -> List[Candidate]:
    """Wrap ``cutlass.operators`` operators as :class:`Candidate` with estimates."""
    out = []
    for op in ops:
        md = op.metadata
        d = md.design
        tile = tuple(int(x) for x in d.tile_shape)
        cluster = tuple(int(x) for x in d.cluster_shape[:2])
        c = Candidate(
            name=md.operator_name,
            tile=tile,  # type: ignore[arg-type]
            cluster=cluster,  # type: ignore[arg-type]
            two_cta=bool(getattr(d, "use_2cta_mma", False)),
            efc="EFC" in md.operator_class.__name__,
            scheduler=_scheduler(d),
        )
        out.append(_with_estimate(c, problem, tgt))
    return out


def _with_estimate(c: Candidate, problem: GemmProblem, tgt: Target) -> Candidate:
    from dataclasses import replace

    return replace(c, estimate_us=round(estimate_us(c, problem, tgt), 3))


def select(
    cands: List[Candidate],
    *,
    max_candidates: int = 8,
    per_tile: int = 2,
    efc: bool = False,
    max_cluster: int = 8,
) -> Tuple[List[Candidate], List[Tuple[Candidate, str]]]:
    """Apply the key / diversity / cap rules (module docstring); returns ``(selected, dropped)``.

    Before them, kernels that cannot serve the plan are dropped: EFC kernels when
    no epilogue is fused (and plain ones when it is), clusters larger than the
    portable ``max_cluster``, and EFC kernels with ``tile_m < 128``.
    Deterministic: ordering is by ``(estimate_us, cluster size, 2cta, name)``.
    """
    if max_candidates < 1:
        raise PtcValueError(f"max_candidates must be >= 1, got {max_candidates}")
    if per_tile < 1:
        raise PtcValueError(f"per_tile must be >= 1, got {per_tile}")
    dropped: List[Tuple[Candidate, str]] = []
    ordered = sorted(
        cands, key=lambda c: (c.estimate_us, c.cluster[0] * c.cluster[1], c.two_cta, c.name)
    )
    best_per_key: dict = {}
    survivors = []
    duplicates = []  # (index in dropped, kernel, the key's kept kernel)
    for c in ordered:
        if c.efc != efc:
            why = "efc: EFC variant, but no epilogue is fused" if c.efc else "efc: not EFC, but the epilogue is fused"
            dropped.append((c, why))
            continue
        if c.cluster[0] * c.cluster[1] > max_cluster:
            dropped.append((c, f"cluster: {c.cluster[0]}x{c.cluster[1]} exceeds the portable maximum of {max_cluster} CTAs"))
            continue
        if efc and c.tile[0] < 128:
            dropped.append((c, "efc-tile: EFC kernel with tile_M < 128 (row-broadcast bug, pytorch #181901)"))
            continue
        kept = best_per_key.get(c.key)
        if kept is not None:
            duplicates.append((len(dropped), c, kept))
            dropped.append((c, ""))  # worded below, once the kept kernel's fate is known
            continue
        best_per_key[c.key] = c
        survivors.append(c)
    per_tile_count: dict = {}
    selected = []
    rule_of: dict = {}  # a survivor the later rules dropped -> that rule
    for c in survivors:
        tkey = (c.tile[0], c.tile[1], c.two_cta)
        if per_tile_count.get(tkey, 0) >= per_tile:
            rule_of[c.name] = "diversity"
            dropped.append((c, f"diversity: {per_tile} keys with tile {c.tile[0]}x{c.tile[1]} already selected"))
            continue
        if len(selected) >= max_candidates:
            rule_of[c.name] = "cap"
            dropped.append((c, f"cap: {max_candidates} candidates already selected"))
            continue
        per_tile_count[tkey] = per_tile_count.get(tkey, 0) + 1
        selected.append(c)
    for i, c, kept in duplicates:
        if kept.name in rule_of:
            why = f"duplicate: same key as {kept.label!r}, the key's best kernel, itself dropped by {rule_of[kept.name]}"
        else:
            why = f"duplicate: same key as selected {kept.label!r}"
        dropped[i] = (c, why)
    return selected, dropped


def plan(
    problem: GemmProblem,
    target: "Target | str",
    epilogue: "Epilogue | str | None" = None,
    *,
    max_candidates: int = 8,
    per_tile: int = 2,
) -> Plan:
    """Enumerate, rank and select CuTeDSL candidates for ``problem`` on ``target``.

    With an epilogue that :func:`check_fusible` accepts, candidates are the EFC
    kernels that take the whole chain (they compete against Inductor's fused
    Triton/ATen path); otherwise plain kernels for the GEMM alone.

    Raises:
      FeatureUnavailable: ``cutlass.operators`` is not installed (extra ``ptc[gemm]``).
    """
    tgt = _target(target)
    epi = Epilogue.parse(epilogue)
    if not catalog.available():
        raise FeatureUnavailable(
            "ptc.gemm.plan needs nvidia-cutlass-operators: pip install 'ptc[gemm]'", "ptc[gemm]"
        )
    fusion = check_fusible(epi, problem, tgt) if epi else FusionDecision(False, "no epilogue")
    result = Plan(problem, tgt, epi, fusion)
    if problem.op == "scaled_mm" and problem.scale in ("tensor", "row"):
        if not fusion.fused:
            result.note = (
                f"{problem.scale}-scaled FP8 needs the dequant epilogue (rowscale) fused, "
                f"and {fusion.reason or 'it is not'}"
            )
            return result
    if problem.op == "scaled_mm" and problem.scale in ("block32", "block16") and tgt.family != "blackwell":
        result.note = f"{problem.scale} block scales need Blackwell block-scaled MMA; {tgt.name} has none"
        return result
    try:
        if fusion.fused:
            ops = catalog.operators(problem, tgt, fusion.source, epi)
        else:
            ops = catalog.operators(problem, tgt)
    except Exception as e:  # noqa: BLE001 - no candidates, with the library's reason
        result.note = f"cutlass.operators found no kernels: {type(e).__name__}: {e}"
        return result
    cands = candidates_from_operators(ops, problem, tgt)
    if not cands:
        result.note = f"cutlass.operators has no kernel for {problem.signature()} on sm_{tgt.arch}"
        return result
    result.selected, result.dropped = select(
        cands, max_candidates=max_candidates, per_tile=per_tile, efc=fusion.fused, max_cluster=tgt.max_cluster
    )
    return result
