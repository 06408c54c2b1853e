"""The ``torch.compile`` backend: ``torch.compile(fn, backend="ptc_cudagraphs")``.

Registered through the ``torch_dynamo_backends`` entry point (pyproject.toml),
so the name works without importing ptc first. Dynamo's graph goes through
AOTAutograd; the forward graph (aten ops, ``while_loop`` / ``cond`` kept as
higher-order ops) becomes a ``CapturedProgram``: Inductor compiles its
straight-line segments and, on CUDA inputs, the whole program is captured into
one CUDA graph with conditional nodes. On CPU inputs the plan runs un-graphed
(logged), so the backend is usable and testable everywhere.

``make_backend(executor=..., segments=...)`` returns a configured backend,
e.g. ``torch.compile(fn, backend=make_backend(executor="sim"))``. The last
``keep`` (default 32) ``CapturedProgram`` s the backend built are in
``backend.programs`` (newest last) for inspection, and the last ``keep`` forward
graphs it compiled in ``backend.forwards``; older ones are dropped from these
lists, so they never pin graphs and their memory forever.
"""

from __future__ import annotations

import collections
import logging
from typing import Any, Callable, List, Optional, Sequence  # noqa: F401

import torch

from ptc.cudagraph.api import CapturedProgram, resolve_executor
from ptc.cudagraph.eligibility import Support

__all__ = ["ptc_cudagraphs", "make_backend", "PtcCudagraphsBackend"]

log = logging.getLogger("ptc.cudagraph")


#: graphs kept per compiled forward graph, one per input signature (see ``input_signature``)
SIGNATURES_KEPT = 8

#: a forward graph with dynamic sizes whose calls bring this many new input signatures in a row
#: (a cache that grows every step) stops capturing one graph per signature
NEW_SIGNATURES_IN_A_ROW = 3


def input_signature(args: Sequence[Any]) -> tuple:
    """What a captured graph is specialised to: each tensor's sizes, strides, dtype and
    device, and each other input's value (a ``SymInt`` arrives as a Python int)."""
    return tuple(
        (tuple(a.shape), a.stride(), a.dtype, a.device) if isinstance(a, torch.Tensor) else (type(a), a)
        for a in args
    )


class PtcCudagraphsBackend:
    """A Dynamo backend (a callable ``(gm, example_inputs) -> compiled``)."""

    #: ``ptc.switch`` keeps its cond predicates as tensors for this backend (instead of one
    #: host read of the index): a tensor predicate is captured in a CUDA conditional node
    ptc_device_predicates = True

    def __init__(
        self,
        executor: str = "auto",
        segments: str = "inductor",
        support: Optional[Support] = None,
        warmup: int = 1,
        keep: int = 32,
    ) -> None:
        resolve_executor(executor, [])  # validates the name
        self.executor = executor
        self.segments = segments
        self.support = support
        self.warmup = warmup
        self.programs: "collections.deque[CapturedProgram]" = collections.deque(maxlen=keep)
        #: the last ``keep`` forward graphs compiled, each with its programs per input signature
        self.forwards: "collections.deque[_PerSignature]" = collections.deque(maxlen=keep)

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
        from torch._functorch.aot_autograd import aot_module_simplified

        executor = resolve_executor(self.executor, example_inputs)
        if self.executor == "auto" and executor == "eager":
            log.info("ptc_cudagraphs: inputs are not on a CUDA device; the plan runs un-graphed")

        def forward_compiler(fw: torch.fx.GraphModule, inputs: Sequence[Any]) -> Callable[..., Any]:
            compiled = _PerSignature(self, fw, executor, _shared_dynamic(fw, inputs, self.segments))
            self.forwards.append(compiled)
            return compiled

        def backward_compiler(bw: torch.fx.GraphModule, inputs: Sequence[Any]) -> Callable[..., Any]:
            return make_boxed_func(bw)  # backward runs as plain aten ops

        # min-cut, as aot_eager and inductor use: the default partitioner copies dead random
        # ops (a dropout whose inputs are saved for backward) into the backward graph, where
        # they draw random numbers eager never draws (the RNG stream then drifts from eager)
        return aot_module_simplified(
            gm,
            example_inputs,
            fw_compiler=forward_compiler,
            bw_compiler=backward_compiler,
            partition_fn=min_cut_rematerialization_partition,
        )


class _PerSignature:
    """A compiled forward graph: one ``CapturedProgram`` per input signature (its graph is
    specialised to the inputs' sizes, strides and Python numbers; the last ``SIGNATURES_KEPT``
    kept, least recently used dropped).

    Where the graph's sizes are dynamic, ``shared`` is one compile of it for every size
    (Inductor's, or its aten ops with ``segments="eager"``), run un-graphed: it serves every
    call when there are no graphs to capture (executor ``"eager"``), and every new signature
    once ``NEW_SIGNATURES_IN_A_ROW`` calls in a row brought one (a program per signature would
    cost a compile per call, with nothing replayed); signatures already captured keep replaying.
    """

    _boxed_call = True

    def __init__(self, backend: "PtcCudagraphsBackend", fw: torch.fx.GraphModule, executor: str,
                 shared: Optional[Callable[[List[Any]], Any]]) -> None:  # fmt: skip
        self.backend, self.fw, self.executor, self.shared = backend, fw, executor, shared
        self.programs: "collections.OrderedDict[tuple, CapturedProgram]" = collections.OrderedDict()
        self.new_in_a_row = 0
        #: whether a signature without a program runs through ``shared`` (no new program)
        self.ungraphed = shared is not None and executor == "eager"
        if self.ungraphed:
            log.info("ptc_cudagraphs: no graphs to capture and dynamic sizes; one compile serves every size")

    def __call__(self, args: List[Any]) -> Any:
        key = input_signature(args)
        program = self.programs.get(key)
        if program is None:
            if self.ungraphed:
                return self.shared(args)
            if self.programs:
                self.new_in_a_row += 1
                if self.shared is not None and self.new_in_a_row >= NEW_SIGNATURES_IN_A_ROW:
                    self.ungraphed = True
                    log.info("ptc_cudagraphs: %d calls in a row brought new input sizes, strides or numbers; "
                             "new ones run un-graphed through one compile for every size, the %d captured "
                             "replay", self.new_in_a_row, len(self.programs))  # fmt: skip
                    return self.shared(args)
                log.info("ptc_cudagraphs: new input sizes, strides or numbers; capturing a new graph")
            b = self.backend
            program = CapturedProgram(self.fw, self.executor, b.segments, b.support, b.warmup, clone_outputs=True)
            b.programs.append(program)
            self.programs[key] = program
            if len(self.programs) > SIGNATURES_KEPT:
                self.programs.popitem(last=False)
        else:
            self.new_in_a_row = 0
        self.programs.move_to_end(key)
        outs = program(*args)
        args.clear()
        return outs


def _shared_dynamic(fw: torch.fx.GraphModule, inputs: Sequence[Any], segments: str) -> Optional[Callable[..., Any]]:
    """One compile of ``fw`` for all its sizes (boxed), where its inputs have symbolic sizes or
    numbers; else None. Compiled now, from the fake inputs that carry the symbols (Inductor's
    compile is unavailable later); a graph Inductor cannot compile gets None (logged)."""
    from torch.fx.experimental.symbolic_shapes import free_symbols

    if not any(free_symbols(x) for x in inputs if isinstance(x, (torch.Tensor, torch.SymInt, torch.SymFloat))):
        return None
    if segments == "eager":
        from functorch.compile import make_boxed_func

        return make_boxed_func(fw)
    import copy

    from torch._inductor import compile as inductor_compile

    try:
        compiled = inductor_compile(copy.deepcopy(fw), list(inputs))
    except Exception as e:  # noqa: BLE001 - the per-signature programs compute the same
        log.info("ptc_cudagraphs: no compile for every size (%s: %s); one program per signature",
                 type(e).__name__, str(e)[:200])  # fmt: skip
        return None

    def run(args: List[Any]) -> Any:
        outs = compiled(*args)
        args.clear()
        return outs

    return run


def make_backend(**options: Any) -> PtcCudagraphsBackend:
    """A backend with options (``executor``, ``segments``, ``support``, ``warmup``, ``keep``)."""
    return PtcCudagraphsBackend(**options)


#: The default backend object behind ``backend="ptc_cudagraphs"``.
ptc_cudagraphs = PtcCudagraphsBackend()
