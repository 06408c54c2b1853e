"""Post-GEMM epilogues: what they compute, and whether a CuTeDSL kernel can fuse them.

An :class:`Epilogue` is a chain of steps applied to the fp32 accumulator
``acc = A @ B`` before the result is stored::

    Epilogue.parse("bias,silu,residual")
    # D = silu(acc + bias) + residual     (bias: (N,), residual: (M, N))

Steps (the ``parse`` names):

==================  ==========================================  ==========================
step                meaning (``x`` is the running value)         extra operand
==================  ==========================================  ==========================
``bias``            ``x + bias``, bias broadcast over rows       ``bias`` (N,)
``colbias``         ``x + bias``, bias broadcast over columns    ``bias`` (M, 1)
``scale``           ``x * alpha``                                 ``alpha`` (python float)
``rowscale``        ``x * scale_a * scale_b`` (FP8 dequant)      ``scale_a`` (M,1), ``scale_b`` (N,)
``relu`` ...        ``relu/gelu/gelu_tanh/silu/sigmoid/tanh(x)``  -
``residual``        ``x + residual``                              ``residual`` (M, N)
``amax``            also returns ``max(abs(x))`` per row (fp32)   output ``amax`` (M, 1)
==================  ==========================================  ==========================

The stored dtype is the problem's ``out_dtype`` (the cast is part of the store).
``gelu`` is exact (erf); ``gelu_tanh`` is ``approximate="tanh"``.

:func:`check_fusible` decides, before any code is generated, whether the chain
can run inside a CuTeDSL epilogue-fusion (EFC) kernel for a problem and target.
It returns a :class:`FusionDecision` with the EVT source ptc would hand to
``cutlass.operators`` or the reason it will not (then Inductor's Triton/ATen
path computes the same chain unfused).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import torch

from ptc.errors import PtcTypeError, PtcValueError
from ptc.gemm.problem import GemmProblem
from ptc.gemm.targets import Target, target as _target

__all__ = ["Epilogue", "FusionDecision", "check_fusible", "ACTIVATIONS", "STEPS"]

log = logging.getLogger("ptc.gemm")

ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh")
STEPS = ("bias", "colbias", "scale", "rowscale", "residual", "amax") + ACTIVATIONS

_SQRT_2_OVER_PI_X2 = 2.0 * math.sqrt(2.0 / math.pi)  # gelu_tanh(x) = x * sigmoid(this * (x + c x^3))


@dataclass(frozen=True)
class Epilogue:
    """A chain of epilogue steps (see the module docstring for each step).

    Attributes:
      steps: step names in order of application.
      alpha: the factor of a ``scale`` step.
    """

    steps: Tuple[str, ...] = ()
    alpha: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.steps, tuple):
            raise PtcTypeError(f"Epilogue.steps must be a tuple of step names, got {type(self.steps).__name__}")
        for i, s in enumerate(self.steps):
            if s not in STEPS:
                raise PtcValueError(f"epilogue step {i} is {s!r}; known steps: {', '.join(STEPS)}")
        if "amax" in self.steps and self.steps[-1] != "amax":
            raise PtcValueError(f"'amax' must be the last epilogue step, got {','.join(self.steps)}")
        if self.steps.count("bias") + self.steps.count("colbias") > 1:
            raise PtcValueError("an epilogue takes at most one bias step")
        if self.steps.count("residual") > 1 or self.steps.count("rowscale") > 1:
            raise PtcValueError("an epilogue takes at most one 'residual' and one 'rowscale' step")

    @classmethod
    def parse(cls, spec: "str | Epilogue | None", alpha: float = 1.0) -> "Epilogue":
        """``"bias,relu"`` (commas or ``+``) -> ``Epilogue(("bias", "relu"))``; ``""``/None -> none."""
        if isinstance(spec, Epilogue):
            return spec
        if spec is None:
            return cls()
        if not isinstance(spec, str):
            raise PtcTypeError(f"epilogue must be a string like 'bias,relu', got {type(spec).__name__}")
        parts = [p.strip() for p in spec.replace("+", ",").split(",") if p.strip()]
        return cls(tuple(parts), alpha)

    def spec(self) -> str:
        """The ``parse`` string of this epilogue (``""`` for none)."""
        return ",".join(self.steps)

    def __bool__(self) -> bool:
        return bool(self.steps)

    # -- semantics -----------------------------------------------------------

    def operand_names(self) -> Tuple[str, ...]:
        """Names of the extra tensor inputs, in the order ptc passes them."""
        names: List[str] = []
        for s in self.steps:
            names += {"bias": ["bias"], "colbias": ["bias"], "rowscale": ["scale_a", "scale_b"], "residual": ["residual"]}.get(s, [])
        return tuple(names)

    def operands(self, problem: GemmProblem) -> Dict[str, Tuple[tuple, str]]:
        """Extra tensor inputs the chain reads: ``{name: (shape, kind)}``; kind is
        ``"row"`` ((N,) broadcast over rows), ``"col"`` ((M, 1)) or ``"full"`` ((M, N))."""
        m, n = problem.m, problem.n
        out: Dict[str, Tuple[tuple, str]] = {}
        for s in self.steps:
            if s == "bias":
                out["bias"] = ((n,), "row")
            elif s == "colbias":
                out["bias"] = ((m, 1), "col")
            elif s == "rowscale":
                out["scale_a"] = ((m, 1), "col")
                out["scale_b"] = ((n,), "row")
            elif s == "residual":
                out["residual"] = ((m, n), "full")
        return out

    def apply(self, acc: torch.Tensor, out_dtype: torch.dtype, **operands: torch.Tensor):
        """Reference semantics: run the chain on ``acc`` in fp32, store as ``out_dtype``.

        Returns ``D`` or, with an ``amax`` step, ``(D, amax)`` where ``amax`` is the
        fp32 per-row ``max(abs(x))`` of the value before the store, shape (M, 1).
        """
        x = acc.float()
        amax = None
        for s in self.steps:
            if s in ("bias", "colbias"):
                x = x + operands["bias"].float()
            elif s == "scale":
                x = x * self.alpha
            elif s == "rowscale":
                x = x * operands["scale_a"].float() * operands["scale_b"].float()
            elif s == "residual":
                x = x + operands["residual"].float()
            elif s == "relu":
                x = torch.relu(x)
            elif s == "gelu":
                x = torch.nn.functional.gelu(x)
            elif s == "gelu_tanh":
                x = torch.nn.functional.gelu(x, approximate="tanh")
            elif s == "silu":
                x = torch.nn.functional.silu(x)
            elif s == "sigmoid":
                x = torch.sigmoid(x)
            elif s == "tanh":
                x = torch.tanh(x)
            elif s == "amax":
                amax = x.abs().amax(dim=-1, keepdim=True)
        d = x.to(out_dtype)
        return d if amax is None else (d, amax)

    # -- EVT source ----------------------------------------------------------

    def evt_source(self) -> str:
        """The chain as a ``cutlass.operators`` EVT function (SSA, parsed not run).

        Rewrites keep results identical in exact arithmetic: ``silu(x)`` becomes
        ``x * sigmoid(x)`` and ``gelu_tanh(x)`` becomes
        ``x * sigmoid(2*sqrt(2/pi) * (x + 0.044715 x^3))`` because the installed
        vocabulary lacks both. ``amax`` becomes a per-row ``max`` and ``min`` of
        the pre-store value (``amax = max(rmax, -rmin)``, finished on the host side
        of the call). Raises :class:`Unfusible` for a step without an exact EVT
        form (``gelu``: erf).
        """
        params: List[str] = ["accum"]
        lines: List[str] = []
        outputs: List[str] = []
        counter = [0]

        def fresh() -> str:
            counter[0] += 1
            return f"v{counter[0]}"

        def emit(expr: str) -> str:
            name = fresh()
            lines.append(f"    {name} = {expr}")
            return name

        x = "accum"
        for s in self.steps:
            if s in ("bias", "colbias"):
                params.append("bias")
                x = emit(f"{x} + bias")
            elif s == "scale":
                x = emit(f"{x} * {float(self.alpha)!r}")
            elif s == "rowscale":
                params += ["scale_a", "scale_b"]
                x = emit(f"{x} * scale_a")
                x = emit(f"{x} * scale_b")
            elif s == "residual":
                params.append("residual")
                x = emit(f"{x} + residual")
            elif s in ("relu", "sigmoid", "tanh"):
                x = emit(f"{s}({x})")
            elif s == "silu":
                sig = emit(f"sigmoid({x})")
                x = emit(f"{x} * {sig}")
            elif s == "gelu_tanh":
                a = emit(f"{x} * 0.044715")
                b = emit(f"{a} * {x}")
                c = emit(f"{b} * {x}")
                d = emit(f"{x} + {c}")
                e = emit(f"{d} * {_SQRT_2_OVER_PI_X2!r}")
                sig = emit(f"sigmoid({e})")
                x = emit(f"{x} * {sig}")
            elif s == "gelu":
                raise Unfusible(
                    "exact GELU needs erf, which cutlass.operators 0.3.0 rejects (KeyError 'erf'); "
                    "gelu(approximate='tanh') fuses"
                )
            elif s == "amax":
                outputs += ["rmax", "rmin"]
                lines.append(f"    rmax = max({x}, dim=[1])")
                lines.append(f"    rmin = min({x}, dim=[1])")
        if "amax" in self.steps:
            # reductions read the pre-store value; D itself must have no users
            lines.append(f"    D = {x} * 1.0" if x != "accum" else "    D = accum * 1.0")
        elif x == "accum":
            lines.append("    D = accum")
        else:
            lines[-1] = lines[-1].replace(f"    {x} = ", "    D = ", 1)
        head = f"def epilogue({', '.join(params)}):"
        return "\n".join([head, *lines, f"    return {', '.join(['D', *outputs])}", ""])


#: epilogue features that pass cutlass.operators' argument checks but fail to
#: compile in a given release (checked by tests/gemm/test_ptx.py, which compiles them)
KNOWN_COMPILE_FAILURES = {
    "0.3.0": {
        "amax": "cutlass.operators 0.3.0 accepts reduction epilogues but fails to compile them "
        "(AttributeError: 'Parameter' object has no attribute 'rmax__remapped__...')",
    },
}


def _known_failure(epi: Epilogue) -> str:
    from ptc.gemm import catalog

    table = KNOWN_COMPILE_FAILURES.get(catalog.versions()["cutlass_operators"], {})
    for step in epi.steps:
        if step in table:
            return table[step]
    return ""


class Unfusible(Exception):
    """Internal: a step has no exact EVT form (carries the reason)."""


@dataclass(frozen=True)
class FusionDecision:
    """Whether an epilogue runs inside the CuTeDSL kernel.

    Attributes:
      fused: True when a CuTeDSL EFC kernel takes the whole chain.
      reason: why not (empty when fused).
      source: the EVT source handed to ``cutlass.operators`` (when it could be built).
      efc_operators: how many EFC operators accepted it (when validated).
    """

    fused: bool
    reason: str = ""
    source: Optional[str] = None
    efc_operators: int = 0

    def describe(self) -> str:
        if self.fused:
            return f"fused into CuTeDSL EFC kernels ({self.efc_operators} operators accept it)"
        return f"not fused: {self.reason}; Inductor's Triton/ATen path computes it"


def check_fusible(
    epilogue: "Epilogue | str",
    problem: GemmProblem,
    target: "Target | str",
    *,
    validate: bool = True,
) -> FusionDecision:
    """Decide whether ``epilogue`` can be fused into a CuTeDSL kernel for ``problem`` on ``target``.

    Rules, in order (the first that fails is the reason):
      1. there is an epilogue at all;
      2. the op is ``mm``, ``addmm`` or ``scaled_mm`` (no batched epilogues);
      3. the target has EFC kernels (cutlass.operators 0.3.0 has none for sm_90a);
      4. every step has an exact EVT form (:meth:`Epilogue.evt_source`);
      5. with ``validate``, ``cutlass.operators`` accepts the EVT on meta tensors
         (``EpilogueArguments`` + ``get_operators``): this catches what its
         documented vocabulary claims but the implementation rejects.

    A ``False`` decision is logged on the ``ptc.gemm`` logger; nothing raises
    for an unfusible chain.
    """
    epi = Epilogue.parse(epilogue)
    tgt = _target(target)
    decision = _decide(epi, problem, tgt, validate)
    if not decision.fused and epi:
        log.info("ptc.gemm: epilogue %r on %s (%s) %s", epi.spec(), problem.signature(), tgt.name, decision.describe())
    return decision


def _decide(epi: Epilogue, problem: GemmProblem, tgt: Target, validate: bool) -> FusionDecision:
    if not epi:
        return FusionDecision(False, "no epilogue")
    if problem.op == "bmm":
        return FusionDecision(False, "ptc fuses epilogues into 2-D GEMMs only (op is bmm)")
    if tgt.family == "hopper":
        return FusionDecision(
            False, f"cutlass.operators 0.3.0 has no epilogue-fusion kernels for sm_{tgt.arch} ({tgt.name})"
        )
    try:
        source = epi.evt_source()
    except Unfusible as e:
        return FusionDecision(False, str(e))
    known = _known_failure(epi)
    if known:
        return FusionDecision(False, known, source)
    if not validate:
        return FusionDecision(True, "", source)
    from ptc.gemm import catalog

    try:
        count = catalog.count_efc_operators(problem, tgt, source, epi)
    except catalog.CatalogUnavailable as e:
        return FusionDecision(False, f"cannot validate without {e}", source)
    except Exception as e:  # noqa: BLE001 - the library's own rejection is the reason
        return FusionDecision(False, f"cutlass.operators rejects it: {type(e).__name__}: {e}", source)
    if count == 0:
        return FusionDecision(False, "no EFC operator supports this problem with this epilogue", source)
    return FusionDecision(True, "", source, count)
