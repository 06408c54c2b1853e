"""Readable reports: a plan (``ptc gemm explain``) and what autotuning did for one op."""

from __future__ import annotations

import math
from pathlib import Path
from typing import List, Optional

from ptc.errors import PtcValueError
from ptc.gemm.candidates import Plan, plan as _plan
from ptc.gemm.db import AutotuneDB
from ptc.gemm.problem import GemmProblem
from ptc.gemm.targets import detect

__all__ = ["format_plan", "format_report", "explain"]


def _fmt_t(t: Optional[float]) -> str:
    if t is None:
        return "-"
    return "failed" if not math.isfinite(t) else f"{t:.1f}"


def format_plan(p: Plan, measured_us: Optional[dict] = None, show_dropped: Optional[int] = 12,
                winner: Optional[str] = None) -> str:
    """A plan as text: the problem, the fusion decision, every selected candidate
    with its estimate (and measured time when known), then the dropped kernels with
    their reasons: the first ``show_dropped`` (None: all of them), then one line
    counting the rest per rule and saying how to list them."""
    measured_us = measured_us or {}
    lines = [
        f"problem  {p.problem.signature()}   target {p.target.name} (sm_{p.target.arch}, {p.target.sms} SMs)",
        f"epilogue {p.epilogue.spec() or '-'}: {p.fusion.describe() if p.epilogue else 'none'}",
        f"kernels  {p.considered} compatible, {len(p.selected)} selected, {len(p.dropped)} dropped",
    ]
    if p.note:
        lines.append(f"note     {p.note}")
    if measured_us:
        lines.append("")
        lines.append(f"  {'choice':40} {'est us':>8} {'meas us':>8}")
        est = {"ptc_nvgemm_" + c.label.replace(" ", "_"): c.estimate_us for c in p.selected}
        for name in sorted(measured_us, key=lambda n: (not math.isfinite(measured_us[n]), measured_us[n], n)):
            mark = "  <- winner" if name == winner else ""
            lines.append(f"  {name:40} {_fmt_t(est.get(name)):>8} {_fmt_t(measured_us[name]):>8}{mark}")
        unmeasured = [c for c in p.selected if "ptc_nvgemm_" + c.label.replace(" ", "_") not in measured_us]
        for c in unmeasured:
            lines.append(f"  {'ptc_nvgemm_' + c.label.replace(' ', '_'):40} {c.estimate_us:8.1f} {'-':>8}")
    else:
        lines.append("")
        lines.append(f"  {'rank':>4}  {'candidate':34} {'est us':>8}")
        for i, c in enumerate(p.selected, 1):
            lines.append(f"  {i:>4}  {c.label:34} {c.estimate_us:8.1f}")
    if p.dropped:
        shown = p.dropped if show_dropped is None else p.dropped[:show_dropped]
        lines.append("")
        lines.append("  dropped:")
        for c, reason in shown:
            lines.append(f"    {c.label:34} {c.estimate_us:8.1f}  {reason}")
        rest = p.dropped[len(shown):]
        if rest:
            counts: dict = {}
            for _, reason in rest:
                rule = reason.split(":")[0]
                counts[rule] = counts.get(rule, 0) + 1
            per_rule = ", ".join(f"{rule} {n}" for rule, n in sorted(counts.items()))
            lines.append(f"    ... {len(rest)} more ({per_rule}); `ptc gemm explain --all` (show_dropped=None) lists them")
    return "\n".join(lines)


def format_report(r) -> str:
    """One :class:`ptc.gemm.OpReport` as text."""
    head = f"== {r.op}: " + (r.problem.signature() if r.problem else "no ptc candidates")
    lines: List[str] = [head]
    if r.note:
        lines.append(f"note     {r.note}")
    if r.from_db:
        lines.append(f"database winner {r.from_db}: not benchmarked")
    if r.plan is not None:
        lines.append(format_plan(r.plan, r.timings_us, winner=r.inductor_winner))
    elif r.timings_us:
        for n, t in sorted(r.timings_us.items(), key=lambda kv: kv[1]):
            lines.append(f"  {n:40} {_fmt_t(t):>8}")
    if r.timings_us:
        lines.append(f"winner   {r.inductor_winner} (kept by Inductor); tie rule picks {r.ptc_winner}")
    return "\n".join(lines)


def explain(
    problem: GemmProblem,
    target,
    epilogue=None,
    *,
    db: "AutotuneDB | str | None" = None,
    gpu: Optional[str] = None,
    max_candidates: int = 8,
    show_dropped: Optional[int] = 12,
) -> str:
    """``ptc gemm explain``: the plan for ``problem`` on ``target`` and, when ``db``
    holds measurements for it, the measured times next to the estimates and the
    recorded winner.

    Measurements match when they were taken on GPU ``gpu`` (a database key's GPU
    name), or, without ``gpu``, on any GPU that is ``target`` (the target's name, or
    a device name such as ``NVIDIA H100 80GB HBM3``), for ``problem`` with
    ``epilogue`` fused (what ``enable`` records for a GEMM + epilogue chain) or for
    ``problem`` alone.

    Raises:
      PtcValueError: ``db`` names a file that does not exist (explain only reads a
        database; ``ptc.gemm.enable(db=...)`` writes one).
    """
    p = _plan(problem, target, epilogue, max_candidates=max_candidates)
    measured = None
    winner = None
    if db is not None:
        if not isinstance(db, AutotuneDB):
            if not Path(db).exists():
                raise PtcValueError(
                    f"db (--db) names {str(db)!r}, which does not exist: explain reads the measurements "
                    "of an existing autotune database; ptc.gemm.enable(db=...) writes one"
                )
            db = AutotuneDB(db)
        sigs = [problem.signature()]
        if p.epilogue:
            sigs.insert(0, f"{problem.signature()}:epi={p.epilogue.spec()}")
        keys = [k for k in db.keys() if k.signature in sigs and _same_gpu(k.gpu, gpu, p.target)]
        keys.sort(key=lambda k: sigs.index(k.signature))
        if keys:
            measured = db.timings(keys[0])
            winner = db.winner(keys[0])
    text = format_plan(p, measured, winner=winner, show_dropped=show_dropped)
    if db is not None:
        text += "\n\n" + (f"database winner: {winner}" if winner else "database: no measurement for this problem on " + (gpu or p.target.name))
    return text


def _same_gpu(recorded: str, gpu: Optional[str], tgt) -> bool:
    if gpu is not None:
        return recorded == gpu
    return recorded == tgt.name or detect(recorded, (0,)) is tgt
