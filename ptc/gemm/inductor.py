"""The switch: ptc's CuTeDSL candidates inside Inductor's max-autotune, on torch 2.13 and 2.14.

Inductor calls every registered *preprocessing function* with the choice list
of each autotuned op before it benchmarks them (``select_algorithm.
add_preprocessing_fn``, in both releases). ptc's function recognises
``mm``/``addmm``/``bmm``/``_scaled_mm`` by their ATen choice, describes the problem
(:class:`GemmProblem`), plans CuTeDSL candidates for the target
(:func:`ptc.gemm.plan`) and appends one extern choice per candidate. Inductor
then benchmarks them next to ATen and Triton and keeps the fastest. A candidate
that fails to compile or launch raises inside its benchmark, which Inductor
scores as ``inf``; an error while *planning* is logged and leaves the choice
list untouched, so compilation never breaks because of ptc.

A *feedback saver* (same API, both releases) receives the measured times; ptc
keeps them for ``ptc gemm explain`` and records them in the optional
:class:`AutotuneDB`. When the database already names a winner for this GPU,
software and problem, the choice list is pruned to it and nothing is benchmarked.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import torch

from ptc import _compat
from ptc.errors import FeatureUnavailable, PtcTypeError, PtcValueError
from ptc.gemm import blockscale, policy, runtime
from ptc.gemm.candidates import Plan, plan
from ptc.gemm.db import AutotuneDB, Key
from ptc.gemm.problem import GemmProblem, dtype_name
from ptc.gemm.targets import Target, detect, target as _target

__all__ = ["enable", "GemmSession", "OpReport", "active_session"]

log = logging.getLogger("ptc.gemm")

_ATEN_NAMES = {
    "mm": "mm", "mm_dtype": "mm",
    "addmm": "addmm", "bias_addmm": "addmm",
    "bmm": "bmm", "bmm_dtype": "bmm",
    "_scaled_mm": "scaled_mm",
}


@dataclass
class OpReport:
    """What happened to one autotuned op (what ``ptc gemm explain`` prints).

    Attributes:
      op: ``mm``/``addmm``/``bmm``.
      problem: the problem (None when it could not be described).
      plan: ptc's plan (None when none was made).
      note: why no ptc candidate was added (empty otherwise).
      timings_us: measured time per choice name (``inf`` = failed).
      inductor_winner: the choice Inductor kept: the tie rule's pick where Inductor
        decides at once; the fastest measured where it defers the pick to its
        fusion benchmarks (GPU, Triton templates, ``benchmark_epilogue_fusion``).
      ptc_winner: the choice the tie rule picks (:func:`ptc.gemm.policy.pick`).
      from_db: the choice list was pruned to a database winner.
    """

    op: str
    problem: Optional[GemmProblem] = None
    plan: Optional[Plan] = None
    note: str = ""
    choice_names: List[str] = field(default_factory=list)
    timings_us: Dict[str, float] = field(default_factory=dict)
    inductor_winner: Optional[str] = None
    ptc_winner: Optional[str] = None
    from_db: Optional[str] = None
    candidate_of: Dict[str, str] = field(default_factory=dict)  # choice name -> operator name


def _extern_choice(op: str, prefix: str = "ptc_nvgemm_"):
    from torch._inductor.select_algorithm import ExternKernelChoice

    name = f"{prefix}{op}"
    existing = _compat.inductor_extern_kernel(name)
    if existing is not None:
        return existing
    fn = getattr(runtime, name)
    return ExternKernelChoice(fn, None, name=name, has_out_variant=True)


def _hints(exprs) -> List[int]:
    from torch._inductor.virtualized import V

    return [int(V.graph.sizevars.optimization_hint(e)) for e in exprs]


def _static(*nodes) -> bool:
    """Every size and stride of ``nodes`` is a constant (ptc's kernels are chosen per shape)."""
    import sympy

    return all(
        isinstance(e, (int, sympy.Integer)) for n in nodes for e in (*n.get_size(), *n.get_stride())
    )


def _aligned(*nodes) -> bool:
    """No input is a graph input Inductor found unaligned, and none starts at an element
    offset that breaks CuTeDSL's 16-byte base alignment (TMA needs it).

    Inductor marks every CPU graph input unaligned (it tracks alignment for GPU
    inputs only, cloning misaligned ones at run time), so that list is consulted
    for GPU inputs only.
    """
    from torch._inductor.virtualized import V

    unaligned = _compat.inductor_unaligned_buffers()
    for n in nodes:
        try:
            if n.get_device().type != "cpu" and n.get_name() in unaligned:
                return False
        except (AttributeError, NotImplementedError):
            pass
        layout = n.get_layout() if hasattr(n, "get_layout") else None
        offset = getattr(layout, "offset", 0)
        itemsize = n.get_dtype().itemsize
        if int(V.graph.sizevars.optimization_hint(offset)) * itemsize % 16:
            return False
    return True


def _k_major_letter(node, operand: str) -> str:
    """BLAS letter of an operand: A 't' (K contiguous) / 'n'; B 'n' (K contiguous) / 't'."""
    stride = _hints(node.get_stride())
    if operand == "A":
        return "t" if stride[-1] == 1 else "n"
    return "n" if stride[-2] == 1 else "t"


def _scale_mode(a, b, s_a, s_b):
    """``(mode, "")`` for ``torch._scaled_mm(a, b, s_a, s_b)``'s scales, one of
    :data:`ptc.gemm.problem.SCALE_MODES`; ``(None, why)`` for scales ptc leaves to ATen.

    Per tensor / per row: float32 scales of one element each, or (M, 1) and (1, N). Block
    scales: ATen's own test (``is_blockwise_1x32_scaling`` / ``_1x16_``): an MXFP8 or NVFP4
    dtype pair (:func:`ptc.gemm.blockscale.mode_of`) and exactly the tiled layout's count of
    scales for A (M rows) and B (N rows), contiguous. Block scales only for ``aten._scaled_mm``
    itself, whose block scales are always in the tiled layout; ``_scaled_mm_v2`` names its
    scales' layout, and Inductor's lowering of it hands ATen's kernel the untiled ones.
    """
    from torch._inductor.ir import is_contiguous_strides_for_shape

    size_a, size_b = _hints(a.get_size()), _hints(b.get_size())
    m, n = size_a[0], size_b[1]
    sizes = (_hints(s_a.get_size()), _hints(s_b.get_size()))
    numel = [math.prod(sz) for sz in sizes]
    dtypes = (s_a.get_dtype(), s_b.get_dtype())
    if dtypes == (torch.float32, torch.float32):
        if numel == [1, 1]:
            return "tensor", ""
        if sizes == ([m, 1], [1, n]):
            return "row", ""
        return None, f"scale shapes {sizes[0]} x {sizes[1]}: ptc handles per-tensor, per-row and block scales"
    mode = blockscale.mode_of(a.get_dtype(), dtypes[0])
    if mode is None or blockscale.mode_of(b.get_dtype(), dtypes[1]) != mode:
        return None, (f"{a.get_dtype()} x {b.get_dtype()} with {dtypes[0]} x {dtypes[1]} scales: ptc handles "
                      "float32 scales and MXFP8 / NVFP4 block scales")
    target = _compat.inductor_current_target()
    if target is not torch.ops.aten._scaled_mm.default:
        return None, f"{mode} scales of {target}: ptc takes block scales from aten._scaled_mm only"
    block = blockscale.MODES[mode][0]
    k = blockscale.logical_k(size_a[1], a.get_dtype())
    want = [blockscale.scale_count(m, k, block), blockscale.scale_count(n, k, block)]
    if numel != want or not all(is_contiguous_strides_for_shape(s.get_stride(), s.get_size()) for s in (s_a, s_b)):
        return None, (f"{mode} scales of {numel[0]} and {numel[1]} elements: the tiled layout for "
                      f"m={m}, n={n}, k={k} holds {want[0]} and {want[1]}, contiguous")
    return mode, ""


def _device_note(device_type: str, device_types: Sequence[str]) -> str:
    """Why an op on ``device_type`` tensors gets no ptc candidates."""
    note = (f"the op's tensors are on {device_type}, and this session serves GEMMs on "
            f"{', '.join(device_types)} tensors (device_types=): ptc.gemm's kernels are CUDA GEMMs")
    if "cuda" in device_types and not torch.cuda.is_available():
        note += "; no CUDA device is available here"
    return note


def _require_cuda(device_types: Sequence[str]) -> None:
    """FeatureUnavailable when every device ``device_types`` names is CUDA and there is none."""
    if set(device_types) - {"cuda"} or _compat.CUDA_AVAILABLE:
        return
    if not _compat.CUDA_BUILD:
        missing, requirement = "this torch is a CPU-only build (torch.version.cuda is None)", "CUDA_BUILD"
    else:
        missing, requirement = ("no CUDA device is available (torch.cuda.is_available() is False: "
                                "no NVIDIA driver or no visible GPU)"), "CUDA_AVAILABLE"
    raise FeatureUnavailable(
        f"ptc.gemm.enable: {missing}, and ptc.gemm's kernels are CUDA GEMMs. Planning needs no GPU "
        "(ptc.gemm.plan, ptc gemm explain); device_types=('cpu',) runs the hook on CPU tensors, "
        "where its candidates cannot launch",
        requirement,
    )


class GemmSession:
    """An enabled ptc.gemm; use :func:`enable` to make one. Also a context manager.

    Attributes:
      reports: one :class:`OpReport` per autotuned GEMM since enabling.
    """

    def __init__(
        self,
        backends: Sequence[str],
        target: Optional[Target],
        db: Optional[AutotuneDB],
        max_candidates: int,
        tolerance: float,
        device_types: Sequence[str],
        fuse_epilogues: bool = True,
    ) -> None:
        self.fuse_epilogues = fuse_epilogues
        self.backends = tuple(backends)
        self.target = target
        self.db = db
        self.max_candidates = max_candidates
        self.tolerance = tolerance
        self.device_types = tuple(device_types)
        self.reports: List[OpReport] = []
        self._by_choice: Dict[int, OpReport] = {}
        self._config_patch = None
        self.active = False

    # -- lifecycle -----------------------------------------------------------

    def _install(self) -> "GemmSession":
        from torch._inductor import config
        from torch._inductor import select_algorithm as sa

        inductor_backends = [b for b in ("ATEN", "TRITON") if b in self.backends] or ["ATEN"]
        current = [b.strip().upper() for b in config.max_autotune_gemm_backends.split(",")]
        extra = [b for b in current if b not in ("ATEN", "TRITON", "NVGEMM") and b]
        patches = {"max_autotune_gemm_backends": ",".join(inductor_backends + extra)}
        if "NVGEMM" in self.backends:
            from ptc.gemm.fusion import EpiloguePass, register_lowering

            if self.fuse_epilogues:
                register_lowering()
            # Always installed: its uuid puts ptc into the FX graph cache key, so a graph
            # compiled with ptc's kernels is never reused by a process without ptc.
            mine = EpiloguePass(self._target_name(), self.device_types, self.fuse_epilogues)
            existing = config.pre_grad_custom_pass
            if existing is None:
                patches["pre_grad_custom_pass"] = mine
            else:  # keep the user's passes; ptc's runs after them
                patches["pre_grad_custom_pass"] = [*(existing if isinstance(existing, (list, tuple)) else [existing]), mine]
            # cached graphs call these by name: register them before any lowering runs
            for op in ("mm", "addmm", "bmm", "scaled_mm", "block_scaled_mm", "fused"):
                _extern_choice(op)
            _extern_choice("reference_mm", prefix="ptc_")
        self._config_patch = config.patch(patches)
        self._config_patch.__enter__()
        self._thread = threading.get_ident()  # torch's config patches belong to a thread
        sa.add_preprocessing_fn(self._preprocess)
        sa.add_feedback_saver(self._feedback)
        self._choices_ctx = _install_tie_break(self)
        self.active = True
        return self

    def _target_name(self) -> str:
        return self.target.name if self.target is not None else "auto"

    def disable(self) -> None:
        """Remove ptc's hooks and restore Inductor's backend setting (idempotent). Call it
        from the thread that called ``enable()``: torch's config patches are per thread, so
        from another one nothing is changed and ``PtcValueError`` says so."""
        global _ACTIVE
        if not self.active:
            return
        if threading.get_ident() != self._thread:
            raise PtcValueError(
                "ptc.gemm: disable() from another thread than the one that called enable(); "
                "torch's Inductor config patch it undoes belongs to that thread (nothing was changed)"
            )
        from torch._inductor import select_algorithm as sa

        cache = sa.get_algorithm_selector_cache()
        if self._preprocess in cache.preprocessing_fns:
            cache.preprocessing_fns.remove(self._preprocess)
        if self._feedback in cache.feedback_saver_fns:
            cache.feedback_saver_fns.remove(self._feedback)
        self._config_patch.__exit__(None, None, None)
        self._choices_ctx.__exit__(None, None, None)
        self.active = False
        if _ACTIVE is self:
            _ACTIVE = None

    def __enter__(self) -> "GemmSession":
        return self

    def __exit__(self, *exc) -> None:
        self.disable()

    # -- the preprocessing hook ----------------------------------------------

    def _preprocess(self, choices: list) -> list:
        try:
            return self._add_candidates(choices)
        except Exception as e:  # noqa: BLE001 - planning must never break compilation
            log.warning("ptc.gemm: no CuTeDSL candidates for this op (%s: %s)", type(e).__name__, e)
            return choices

    def _add_candidates(self, choices: list) -> list:
        from torch._inductor.select_algorithm import ExternKernelCaller

        if not choices:
            return choices
        externs = [c for c in choices if isinstance(c, ExternKernelCaller)]
        ops = {_ATEN_NAMES.get(c.choice.name) for c in externs} - {None}
        if len(ops) != 1:
            return choices
        op = ops.pop()
        report = OpReport(op)
        self.reports.append(report)
        new = self._plan_choices(op, choices, report)
        result = [c for c in choices if self._backend_allowed(c)] + new
        if not result:  # never leave Inductor without a choice
            result = list(choices)
            report.note = (report.note + "; " if report.note else "") + "kept Inductor's choices: no other exists"
        report.choice_names = [c.name for c in result]
        if self.db is not None and report.problem is not None:
            winner = self.db.winner(self._key(op, report.problem))
            match = [c for c in result if c.name == winner]
            if match:
                report.from_db = winner
                result = match
        for c in result:
            self._by_choice[id(c)] = report
        return result

    def _backend_allowed(self, choice) -> bool:
        from torch._inductor.select_algorithm import ExternKernelCaller

        backend = "ATEN" if isinstance(choice, ExternKernelCaller) else "TRITON"
        return backend in self.backends

    def _target_for(self, device) -> Optional[Target]:
        if self.target is not None:
            return self.target
        if device.type == "cuda" and torch.cuda.is_available():
            idx = device.index or 0
            return detect(torch.cuda.get_device_name(idx), torch.cuda.get_device_capability(idx))
        return None

    def _plan_choices(self, op: str, choices: list, report: OpReport) -> list:
        if "NVGEMM" not in self.backends:
            report.note = "NVGEMM not in backends"
            return []
        first = choices[0]
        nodes, layout = first.input_nodes, first.layout
        if layout.device.type not in self.device_types:
            report.note = _device_note(layout.device.type, self.device_types)
            return []
        tgt = self._target_for(layout.device)
        if tgt is None:
            report.note = "no Hopper/Blackwell target (pass target= to enable())"
            return []
        epilogue = None
        scale = None
        if op == "scaled_mm":
            a, b, s_a, s_b = nodes[:4]
            aten = next(c for c in choices if getattr(getattr(c, "choice", None), "name", "") == "_scaled_mm")
            scale, why = _scale_mode(a, b, s_a, s_b)
            if scale is None:
                report.note = why
                return []
            if aten.kwargs.get("use_fast_accum", False) and scale in ("tensor", "row"):
                report.note = "use_fast_accum=True is left to ATen/Triton"
                return []
            if scale in ("block32", "block16"):
                if len(nodes) > 4:
                    report.note = f"{scale} scales with a bias are left to ATen (no fused bias in block-scaled kernels)"
                    return []
                op = "block_scaled_mm"
            else:
                epilogue = "rowscale,bias" if len(nodes) > 4 else "rowscale"
        elif op == "addmm":
            bias, a, b = nodes[:3]
            aten = next(c for c in choices if getattr(getattr(c, "choice", None), "name", "") in ("addmm", "bias_addmm"))
            if aten.kwargs.get("alpha", 1) != 1 or aten.kwargs.get("beta", 1) != 1:
                report.note = "addmm with alpha/beta != 1 is left to ATen/Triton"
                return []
            bias_stride = _hints(bias.get_stride())
            epilogue = "bias" if len(bias_stride) == 1 or bias_stride[0] == 0 else "residual"
        else:
            a, b = nodes[:2]
        if not _static(*nodes[:2 if op in ("mm", "bmm") else 3]):
            report.note = "dynamic shapes: ptc picks kernels per static shape"
            return []
        if not _aligned(*nodes):
            report.note = "an input is not 16-byte aligned (CuTeDSL kernels need it)"
            return []
        try:
            a_dt = dtype_name(a.get_dtype())
            out_dt = dtype_name(layout.dtype)
        except PtcValueError as e:
            report.note = str(e)
            return []
        allowed = {"scaled_mm": ("e4m3",), "block_scaled_mm": ("e4m3", "e2m1x2")}.get(op, ("bf16", "f16"))
        if a_dt not in allowed:
            report.note = f"dtype {a_dt}: ptc plans bf16/f16 GEMMs, e4m3 scaled GEMMs and MXFP8/NVFP4 here"
            return []
        size_a, size_b = _hints(a.get_size()), _hints(b.get_size())
        batch = size_a[0] if op == "bmm" else 1
        problem = GemmProblem(
            "scaled_mm" if op == "block_scaled_mm" else op, size_a[-2], size_b[-1],
            blockscale.logical_k(size_a[-1], a.get_dtype()), batch, a_dt, dtype_name(b.get_dtype()), out_dt,
            _k_major_letter(a, "A") + _k_major_letter(b, "B"), scale,
        )
        if op == "block_scaled_mm" and problem.layout != "tn":
            report.note = f"{scale} operands must both be K-major (layout 'tn'), got {problem.layout!r}"
            return []
        report.problem = problem
        p = plan(problem, tgt, epilogue, max_candidates=self.max_candidates)
        report.plan = p
        if op in ("addmm", "scaled_mm") and not p.fusion.fused:
            report.note = p.note or f"{epilogue} epilogue not fused ({p.fusion.reason})"
            return []
        if p.note:
            report.note = p.note
        extern = _extern_choice(op)
        out = []
        for c in p.selected:
            kw = {"operator": c.name, "arch": tgt.arch}
            if op == "addmm":
                kw["source"] = p.fusion.source
                kw["name"] = epilogue
            elif op == "scaled_mm":
                kw["source"] = p.fusion.source
                kw["names"] = ",".join(p.epilogue.operand_names())
            caller = extern.bind(nodes, layout, **kw)
            caller.name = "ptc_nvgemm_" + c.label.replace(" ", "_")
            report.candidate_of[caller.name] = c.name
            out.append(caller)
        return out

    def _key(self, op: str, problem: GemmProblem, epilogue: str = "") -> Key:
        gpu = self.target.name if self.target is not None and not torch.cuda.is_available() else None
        sig = problem.signature() + (f":epi={epilogue}" if epilogue else "")
        return Key.current(op, sig, gpu=gpu)

    # -- fused epilogues (called by ptc.gemm.fusion) ----------------------------

    def _note_unfused(self, problem: GemmProblem, epi, reason: str) -> None:
        report = OpReport("mm+epilogue", problem, note=f"epilogue {epi.spec()!r} not fused: {reason}")
        self.reports.append(report)

    def _fused_choice(self, a, b, operands, epi):
        """Autotune fused CuTeDSL EFC kernels against ATen's GEMM alone; the winning
        fused node, or None (the caller then lowers the chain unfused)."""
        from torch._inductor import ir
        from torch._inductor.select_algorithm import autotune_select_algorithm, realize_inputs

        device = a.get_device()
        tgt = self._target_for(device) if device.type in self.device_types else None
        if tgt is None or not _static(a, b, *operands) or not _aligned(a, b, *operands):
            return None
        m, k = _hints(a.get_size())
        n = _hints(b.get_size())[1]
        dt = dtype_name(a.get_dtype())
        problem = GemmProblem("mm", m, n, k, 1, dt, dt, dt, _k_major_letter(a, "A") + _k_major_letter(b, "B"))
        report = OpReport("mm+epilogue", problem)
        self.reports.append(report)
        p = plan(problem, tgt, epi, max_candidates=self.max_candidates)
        report.plan = p
        if not p.fusion.fused or not p.selected:
            report.note = p.note or f"epilogue not fused: {p.fusion.reason}"
            return None
        inputs = list(realize_inputs(a, b, *operands))
        layout = ir.FixedLayout(device, a.get_dtype(), [m, n])
        ref = _extern_choice("reference_mm", prefix="ptc_").bind(inputs, layout)
        choices = [ref]
        fused = _extern_choice("fused")
        for c in p.selected:
            caller = fused.bind(
                inputs, layout, operator=c.name, arch=tgt.arch, source=p.fusion.source,
                names=",".join(epi.operand_names()),
            )
            caller.name = "ptc_nvgemm_" + c.label.replace(" ", "_")
            report.candidate_of[caller.name] = c.name
            choices.append(caller)
        report.choice_names = [c.name for c in choices]
        if self.db is not None:
            winner = self.db.winner(self._key("mm+epilogue", problem, epi.spec()))
            match = [c for c in choices if c.name == winner]
            if match:
                report.from_db = winner
                if match[0] is ref:
                    return None
                choices = match
        for c in choices:
            self._by_choice[id(c)] = report
        node, choice = autotune_select_algorithm(
            "ptc_gemm_epilogue", choices, inputs, layout, return_multi_template=False
        )
        if choice is ref:
            report.note = "ATen's GEMM alone beat every fused kernel: lowered unfused"
            return None
        return node

    # -- the feedback hook -----------------------------------------------------

    def _feedback(self, timings, name, input_nodes, choices, *rest) -> None:
        try:
            report = next((self._by_choice[id(c)] for c in timings if id(c) in self._by_choice), None)
            if report is None:
                return
            report.timings_us = {c.name: float(t) * 1000.0 for c, t in timings.items()}
            finite = {k: v for k, v in report.timings_us.items() if math.isfinite(v)}
            if finite:
                report.inductor_winner = min(finite, key=finite.__getitem__)
                report.ptc_winner = policy.pick(finite, self.tolerance)
            if self.db is not None and report.problem is not None:
                epi = report.plan.epilogue.spec() if (report.plan is not None and report.op == "mm+epilogue") else ""
                self.db.record(self._key(report.op, report.problem, epi), report.timings_us)
                self.db.save()
        except Exception as e:  # noqa: BLE001 - observing must never break compilation
            log.warning("ptc.gemm: could not record autotune timings (%s: %s)", type(e).__name__, e)


def _install_tie_break(session: GemmSession):
    """Make Inductor's winner for the ops ptc touched follow :func:`ptc.gemm.policy.pick`.

    Uses ``InductorChoices.override_best_choice`` (both releases) on a copy of the
    thread's current choices handler, installed with ``V.set_choices_handler``;
    every other heuristic of that handler is kept. Returns the context whose exit
    restores the previous handler.
    """
    import copy

    from torch._inductor.virtualized import V

    current = V.choices
    base = type(current)

    def override_best_choice(self, best_choice, timings):
        best_choice = base.override_best_choice(self, best_choice, timings)
        if not any(id(c) in session._by_choice for c in timings):
            return best_choice
        times = {c.name: float(t) for c, t in timings.items()}
        try:
            name = policy.pick(times, session.tolerance)
        except policy.NoValidChoice:
            return best_choice
        chosen = next((c for c in timings if c.name == name), best_choice)
        report = next(session._by_choice[id(c)] for c in timings if id(c) in session._by_choice)
        report.inductor_winner = chosen.name
        return chosen

    wrapped = copy.copy(current)
    wrapped.__class__ = type(f"Ptc{base.__name__}", (base,), {"override_best_choice": override_best_choice})
    return _compat.install_choices_handler(wrapped)


_ACTIVE: Optional[GemmSession] = None


def active_session() -> Optional[GemmSession]:
    """The session :func:`enable` made and :meth:`GemmSession.disable` has not ended, or None."""
    return _ACTIVE


def enable(
    backends: Sequence[str] = ("NVGEMM", "ATEN", "TRITON"),
    *,
    target: "Target | str | None" = None,
    db: "AutotuneDB | str | None" = None,
    max_candidates: int = 8,
    tolerance: float = 0.02,
    device_types: Sequence[str] = ("cuda",),
    fuse_epilogues: bool = True,
) -> GemmSession:
    """Add ptc's CuTeDSL GEMM candidates to Inductor's max-autotune until disabled.

    Use with ``torch.compile(..., mode="max-autotune")``. Works as a call or a
    context manager::

        with ptc.gemm.enable(db="gemm_autotune.json"):
            y = torch.compile(model, mode="max-autotune")(x)

    Args:
      backends: which of ``"NVGEMM"`` (ptc's CuTeDSL kernels), ``"ATEN"``,
        ``"TRITON"`` compete. ATen stays as a fallback when nothing else exists.
        While enabled, Inductor's ``max_autotune_gemm_backends`` is set to the
        ATEN/TRITON part (plus other backends it had, except torch's own
        ``NVGEMM``, which ptc's candidates replace).
      target: the GPU to plan for; default: the current CUDA device.
      db: an :class:`AutotuneDB` or a path; known winners skip benchmarking and
        new measurements are saved to it.
      max_candidates: CuTeDSL kernels benchmarked per op.
      tolerance: tie band for the database's winner (see :mod:`ptc.gemm.policy`).
      device_types: devices whose GEMMs get candidates (``("cuda",)``; adding
        ``"cpu"`` exercises the hook on CPU, where candidates fail to launch).
        An op on other tensors keeps Inductor's choices; its report's note says
        so.
      fuse_epilogues: rewrite GEMM + pointwise chains so fused CuTeDSL kernels
        compete (see :mod:`ptc.gemm.fusion`).

    Raises:
      PtcValueError / PtcTypeError: a bad argument (named in the message).
      PtcValueError: another session is active (disable it first).
      FeatureUnavailable: this torch has no autotune preprocessing hook, or
        ``device_types`` names CUDA only and there is no CUDA device (a CPU-only
        torch build, no driver, no visible GPU): the message names which.
    """
    global _ACTIVE
    if not _compat.INDUCTOR_CHOICE_PREPROCESSING:
        raise FeatureUnavailable(
            "ptc.gemm.enable needs Inductor's select_algorithm.add_preprocessing_fn, which this torch lacks",
            "INDUCTOR_CHOICE_PREPROCESSING",
        )
    if fuse_epilogues and not _compat.INDUCTOR_PRE_GRAD_CUSTOM_PASS:
        log.warning("ptc.gemm: this torch has no config.pre_grad_custom_pass; epilogues will not be fused")
        fuse_epilogues = False
    if isinstance(backends, str):
        raise PtcTypeError(f"backends must be a sequence of names like ('NVGEMM', 'ATEN'), got the string {backends!r}")
    names = tuple(str(b).upper() for b in backends)
    bad = [b for b in names if b not in policy.BACKENDS]
    if bad or not names:
        raise PtcValueError(f"backends={tuple(backends)!r}: each must be one of {', '.join(policy.BACKENDS)}")
    if not isinstance(max_candidates, int) or max_candidates < 1:
        raise PtcValueError(f"max_candidates must be an int >= 1, got {max_candidates!r}")
    if not isinstance(tolerance, (int, float)) or tolerance < 0:
        raise PtcValueError(f"tolerance must be a number >= 0, got {tolerance!r}")
    if isinstance(device_types, str) or not device_types:
        raise PtcTypeError(f"device_types must be a sequence of device types like ('cuda',), got {device_types!r}")
    if _ACTIVE is not None and _ACTIVE.active:
        raise PtcValueError("ptc.gemm is already enabled; call disable() on the active session first")
    tgt = _target(target) if target is not None else None
    if isinstance(db, (str,)) or hasattr(db, "__fspath__"):
        db = AutotuneDB(db, tolerance=tolerance)
    elif db is not None and not isinstance(db, AutotuneDB):
        raise PtcTypeError(f"db must be a path or an AutotuneDB, got {type(db).__name__}")
    _require_cuda(device_types)
    _ACTIVE = GemmSession(names, tgt, db, max_candidates, tolerance, device_types, fuse_epilogues)._install()
    return _ACTIVE
