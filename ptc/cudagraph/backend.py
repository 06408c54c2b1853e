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
``backend.programs`` (newest last) for inspection; older ones are dropped from
that list, so it never pins graphs and their memory forever.
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

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
        from torch._functorch.aot_autograd import aot_module_simplified

        executor = resolve_executor(self.executor, example_inputs)
        if self.executor == "auto" and executor == "eager":
            log.info("ptc_cudagraphs: inputs are not on a CUDA device; the plan runs un-graphed")

        def forward_compiler(fw: torch.fx.GraphModule, inputs: Sequence[Any]) -> Callable[..., Any]:
            # A graph is specialised to its inputs' sizes, strides and Python numbers, which
            # vary between calls of a dynamic graph: one program per signature (LRU-bounded).
            programs: "collections.OrderedDict[tuple, CapturedProgram]" = collections.OrderedDict()

            def program_for(args: Sequence[Any]) -> CapturedProgram:
                key = input_signature(args)
                program = programs.get(key)
                if program is None:
                    if programs:
                        log.info("ptc_cudagraphs: new input sizes, strides or numbers; capturing a new graph")
                    program = CapturedProgram(
                        fw, executor, self.segments, self.support, self.warmup, clone_outputs=True
                    )
                    self.programs.append(program)
                    programs[key] = program
                    if len(programs) > SIGNATURES_KEPT:
                        programs.popitem(last=False)
                programs.move_to_end(key)
                return program

            def run(args: List[Any]) -> Any:
                outs = program_for(args)(*args)
                args.clear()
                return outs

            run._boxed_call = True  # type: ignore[attr-defined]
            return run

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


def make_backend(**options: Any) -> PtcCudagraphsBackend:
    """A backend with options (``executor``, ``segments``, ``support``, ``warmup``, ``keep``)."""
    return PtcCudagraphsBackend(**options)


#: The default backend object behind ``backend="ptc_cudagraphs"``.
ptc_cudagraphs = PtcCudagraphsBackend()
