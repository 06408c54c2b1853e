"""User-facing entry points: ``capture`` (a function API) and ``CapturedProgram``.

``capture(fn, *example_inputs)`` traces ``fn`` to an aten graph (``make_fx``),
plans it, decides eligibility and returns a ``CapturedProgram``: call it like
``fn``. The torch.compile backend (:mod:`ptc.cudagraph.backend`) builds the
same ``CapturedProgram`` from AOTAutograd's forward graph.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import random
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from ptc import _compat
from ptc.cudagraph.eligibility import Support, annotate
from ptc.cudagraph.executor import BlockProgram, compile_segments
from ptc.cudagraph.plan import Block, Branch, Loop, build_plan
from ptc.errors import PtcTypeError, PtcValueError

__all__ = ["capture", "CapturedProgram", "Report", "counters", "resolve_executor", "EXECUTORS"]

log = logging.getLogger("ptc.cudagraph")

#: Process-wide tallies, like ``torch._dynamo.utils.counters``:
#: loops_captured, loops_fallback, conds_captured, conds_fallback, programs.
counters: "collections.Counter[str]" = collections.Counter()

EXECUTORS = ("auto", "cuda", "sim", "eager")


@dataclass
class StepReport:
    name: str
    kind: str  # "while" or "cond"
    captured: bool
    reasons: List[str]


@dataclass
class Report:
    """What the planner decided: per loop/cond whether it is captured, and why not."""

    executor: str
    support: Optional[Support]
    segments: int
    steps: List[StepReport] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)

    @property
    def counts(self) -> Dict[str, int]:
        c = {"loops_captured": 0, "loops_fallback": 0, "conds_captured": 0, "conds_fallback": 0}
        for s in self.steps:
            key = ("loops_" if s.kind == "while" else "conds_") + ("captured" if s.captured else "fallback")
            c[key] += 1
        return c

    @property
    def fallbacks(self) -> Dict[str, List[str]]:
        """``{step name: reasons}`` for every step that runs un-graphed."""
        return {s.name: s.reasons for s in self.steps if not s.captured}

    def format(self) -> str:
        lines = [f"executor: {self.executor}; straight-line segments: {self.segments}"]
        lines += [f"note: {n}" for n in self.notes]
        for s in self.steps:
            verdict = "captured" if s.captured else "host (un-graphed)"
            lines.append(f"  {s.name:12} {s.kind:5} {verdict}")
            for r in s.reasons:
                lines.append(f"      reason: {r}")
        lines.append("  counts: " + ", ".join(f"{k}={v}" for k, v in self.counts.items()))
        return "\n".join(lines)


def resolve_executor(executor: str, example_inputs: Sequence[Any]) -> str:
    """``"auto"``: ``"cuda"`` when the inputs live on a usable GPU, else ``"eager"``."""
    if executor not in EXECUTORS:
        raise PtcValueError(f"executor must be one of {', '.join(map(repr, EXECUTORS))}, got {executor!r}")
    if executor != "auto":
        return executor
    on_cuda = any(isinstance(x, torch.Tensor) and x.is_cuda for x in pytree.tree_leaves(list(example_inputs)))
    return "cuda" if (on_cuda and _compat.CUDA_AVAILABLE) else "eager"


def _graph_factory(executor: str, support: Optional[Support]) -> Optional[Callable[[], Any]]:
    if executor == "eager":
        return None
    if executor == "sim":
        from ptc.cudagraph.simulator import SimGraph

        return lambda: SimGraph(support)
    from ptc.cudagraph.cuda_graph import CudaGraph

    return CudaGraph


def _support(executor: str, support: Optional[Support]) -> Optional[Support]:
    if support is not None:
        if not isinstance(support, Support):
            raise PtcTypeError(f"support must be a ptc.cudagraph.Support, got {type(support).__name__}")
        if executor == "cuda":
            raise PtcValueError("support= emulates a CUDA for executor='sim'; the real one is probed")
        return support
    if executor == "sim":
        from ptc.cudagraph.simulator import SimGraph

        return SimGraph().support
    if executor == "cuda":
        from ptc.cudagraph.cuda_graph import cuda_support

        return cuda_support()
    return None


class CapturedProgram:
    """An aten graph planned for capture; call it with the graph's flat inputs.

    The first ``warmup`` calls run on the host (compiling segments), the next
    one captures, later ones replay. ``plan`` is the planned ``Block``,
    ``report`` the eligibility report and ``graphs`` the captured graphs.
    """

    def __init__(
        self,
        gm: fx.GraphModule,
        executor: str = "sim",
        segments: str = "eager",
        support: Optional[Support] = None,
        warmup: int = 1,
        clone_outputs: bool = True,
        name: str = "main",
    ) -> None:
        if executor not in EXECUTORS or executor == "auto":
            raise PtcValueError(
                f"executor must be 'cuda', 'sim' or 'eager' here (resolve 'auto' first), got {executor!r}"
            )
        if not isinstance(warmup, int) or warmup < 0:
            raise PtcValueError(f"warmup must be an int >= 0, got {warmup!r}")
        self.executor = executor
        self.support = _support(executor, support)
        self.plan: Block = build_plan(gm, name)
        if self.support is not None:
            annotate(self.plan, self.support)
        else:  # no graphs at all: report the static reasons, nothing is captured
            from ptc.cudagraph.simulator import SimGraph

            annotate(self.plan, SimGraph().support)
        self.clone_outputs = clone_outputs
        self.program = BlockProgram(
            self.plan,
            _graph_factory(executor, self.support),
            compile_segments(segments),
            warmup=warmup,
            support=self.support,
        )
        self.report = self._report()
        counters["programs"] += 1
        for key, value in self.report.counts.items():
            counters[key] += value
        for name_, reasons in self.report.fallbacks.items():
            log.info("ptc.cudagraph: %s runs un-graphed: %s", name_, "; ".join(reasons))

    def _report(self) -> Report:
        notes = []
        ungraphed = self.program.ungraphed
        if self.executor == "eager":
            notes.append("executor 'eager': no graphs; every loop runs on the host")
        elif ungraphed:
            notes.append(f"no graphs: {ungraphed}")
        rep = Report(self.executor, self.support, len(self.plan.segments), notes=notes)
        for step in self.plan.walk():
            if isinstance(step, (Loop, Branch)):
                captured = step.eligible and self.executor != "eager" and not ungraphed
                reasons = list(step.reasons)
                if ungraphed and self.executor != "eager":
                    reasons.append(ungraphed)
                if self.executor == "eager" and not reasons:
                    reasons = ["executor 'eager' (inputs not on a CUDA device)"]
                kind = "while" if isinstance(step, Loop) else "cond"
                rep.steps.append(StepReport(step.name, kind, captured, reasons))
        return rep

    @property
    def graphs(self) -> List[Any]:
        return self.program.graphs

    def __call__(self, *args: Any) -> Any:
        outs = self.program(*args)
        if self.clone_outputs:
            outs = [o.clone() if isinstance(o, torch.Tensor) else o for o in outs]
        return outs


def capture(
    fn: Callable[..., Any],
    *example_inputs: Any,
    executor: str = "auto",
    segments: str = "inductor",
    support: Optional[Support] = None,
    warmup: int = 1,
) -> "CapturedFunction":
    """Trace ``fn`` on ``example_inputs`` and return it as a captured program.

    ``fn`` takes and returns tensors (pytrees of them); ``while_loop``, ``cond``
    and ``ptc.switch`` inside it become conditional nodes of one graph.

    Args:
        executor: ``"cuda"`` (a real CUDA graph), ``"sim"`` (the CPU capture
            simulator), ``"eager"`` (no graphs) or ``"auto"`` (``"cuda"`` when
            the inputs are on a GPU, else ``"eager"``).
        segments: ``"inductor"`` compiles straight-line code with Inductor;
            ``"eager"`` runs it op by op (what the simulator records per op).
        support: with ``executor="sim"``, the CUDA features to emulate
            (e.g. ``Support(while_nodes=False, if_nodes=True)`` for torch 2.13).
        warmup: host-run calls before capture.

    Returns a ``CapturedFunction``: call it like ``fn`` (same argument structure,
    same shapes, dtypes and devices). The first ``warmup`` calls run on the host,
    the next captures (and replays once), later calls replay. ``.report`` says
    what is captured and why anything is not, ``.plan`` is the planned graph,
    ``.graphs`` the captured graphs.
    """
    if not callable(fn):
        raise PtcTypeError(f"capture: fn must be callable, got {type(fn).__name__}")
    from torch.fx.experimental.proxy_tensor import make_fx

    flat, spec = pytree.tree_flatten(list(example_inputs))
    for i, x in enumerate(flat):
        if not isinstance(x, torch.Tensor):
            raise PtcTypeError(f"capture: example_inputs leaf {i} must be a tensor, got {type(x).__name__}")
    resolved = resolve_executor(executor, flat)
    compile_segments(segments)  # validates the name before tracing

    out_spec_box: List[Any] = []

    def spec_fn(*leaves: torch.Tensor) -> List[torch.Tensor]:
        args = pytree.tree_unflatten(list(leaves), spec)
        out, out_spec = pytree.tree_flatten(fn(*args))
        out_spec_box[:] = [out_spec]
        return out

    def trace(mode: str) -> fx.GraphModule:
        # make_fx in real mode runs ``fn`` for real: on copies of the inputs; the random numbers
        # it draws and the parameters and buffers of the module it is (or is a method of) are put
        # back. In fake mode it runs nothing (tensors ``fn`` holds become the graph's constants).
        with torch.no_grad(), _state_kept(fn):
            if mode == "real":
                return make_fx(spec_fn)(*[x.clone() for x in flat])
            return make_fx(spec_fn, tracing_mode="fake", _allow_non_fake_inputs=True)(*flat)

    try:
        gm = trace("real")
    except Exception as e:  # noqa: BLE001 - re-raised below unless a fake trace succeeds
        if isinstance(e, RuntimeError) and ("_local_scalar_dense" in str(e) or "data-dependent" in str(e)):
            # make_fx cannot trace a host read in straight-line code (``if mask.all():``,
            # ``.item()``): the graph would bake in one outcome. Run ``fn`` on the host instead.
            reason = f"host read: fn reads a device value on the host while tracing ({str(e).splitlines()[0][:160]})"
            log.info("ptc.cudagraph: capture: %s; fn runs un-graphed", reason)
            counters["programs_host"] += 1
            return HostFunction(fn, reason, resolved, support)
        # a real trace runs both sides of every cond on the examples, and the side not taken can
        # fail on them (an index only its predicate guards) where eager never runs it
        try:
            gm = trace("fake")
        except Exception:  # noqa: BLE001 - the real trace's error is the one that explains
            raise e from None
        log.info("ptc.cudagraph: capture: traced on fake tensors (the real trace raised %s: %s)",
                 type(e).__name__, str(e)[:160])  # fmt: skip
    program = CapturedProgram(gm, resolved, segments, support, warmup)
    return CapturedFunction(program, spec, out_spec_box[0], len(flat))


class HostFunction:
    """``capture``'s result for a function it cannot trace: calls ``fn`` as is (un-graphed);
    ``report`` says why, ``graphs`` is empty."""

    def __init__(self, fn: Callable[..., Any], reason: str, executor: str, support: Optional[Support]) -> None:
        self.fn = fn
        self.report = Report(executor, support, 0, notes=[f"no graphs: {reason}"])
        self.graphs: List[Any] = []
        self.plan = None

    def __call__(self, *args: Any) -> Any:
        with torch.no_grad():
            return self.fn(*args)


@contextlib.contextmanager
def _state_kept(fn: Callable[..., Any]) -> Iterator[None]:
    """Put back, after the block, the random number generators' states (torch's CPU and, where
    initialised, CUDA generators, Python's ``random``, NumPy's global one) and the values and
    version counters of the parameters and buffers of ``fn``'s module (``fn`` itself, or the
    object of a bound method), e.g. BatchNorm's running statistics in training mode: a tensor
    that autograd saved before the block can still be used for backward after it."""
    module = fn if isinstance(fn, torch.nn.Module) else getattr(fn, "__self__", None)
    state = []
    if isinstance(module, torch.nn.Module):
        state = [(t, t.detach().clone(), t._version) for t in itertools.chain(module.parameters(), module.buffers())]
    rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    py_rng = random.getstate()
    numpy = sys.modules.get("numpy")
    np_rng = numpy.random.get_state() if numpy is not None else None
    try:
        yield
    finally:
        torch.set_rng_state(rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
        random.setstate(py_rng)
        if np_rng is not None:
            numpy.random.set_state(np_rng)
        with torch.no_grad():
            for t, old, version in state:
                if not torch.equal(t, old):
                    t.copy_(old)
                if t._version != version:
                    torch._C._autograd._unsafe_set_version_counter((t,), (version,))


class CapturedFunction:
    """``capture``'s result: call it with ``fn``'s arguments (same structure)."""

    def __init__(self, program: CapturedProgram, in_spec: Any, out_spec: Any, n_inputs: int) -> None:
        self.program = program
        self._in_spec = in_spec
        self._out_spec = out_spec
        self._n = n_inputs

    @property
    def plan(self) -> Block:
        return self.program.plan

    @property
    def report(self) -> Report:
        return self.program.report

    @property
    def graphs(self) -> List[Any]:
        return self.program.graphs

    def __call__(self, *args: Any) -> Any:
        flat, spec = pytree.tree_flatten(list(args))
        if spec != self._in_spec:
            raise PtcValueError(
                f"captured function called with arguments of structure {spec}, "
                f"but it was captured for {self._in_spec}"
            )
        with torch.no_grad():
            outs = self.program(*flat)
        return pytree.tree_unflatten(outs, self._out_spec)
