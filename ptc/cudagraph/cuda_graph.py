"""The real graph backend: ``torch.cuda.CUDAGraph`` with conditional nodes.

Implements the interface ``SimGraph`` simulates (``capture``, ``launch``,
``begin_while``, ``begin_if``, ``next_body``, ``set_handle``,
``end_conditional``, ``replay``) on top of the conditional-node methods torch
exposes where it has them (``ptc._compat.CUDA_GRAPH_WHILE_NODES`` /
``CUDA_GRAPH_IF_NODES``). torch has no IF/ELSE or SWITCH binding, so
``support`` reports them absent and the executor uses two IF nodes per cond
(``pred`` and ``not pred``), as torch's own ``if_else_node`` does.

Where torch lacks the WHILE binding (2.13), loops are reported ineligible
("no binding") and run un-graphed; ptc's planned cuda-python
(``cuda.bindings`` + an NVRTC set-handle kernel) path is not written yet.

GPU-only: nothing here can run without a CUDA device; the logic above it is
exercised on CPU through the simulator.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Optional, Sequence, Tuple

import torch

from ptc import _compat
from ptc.cudagraph.eligibility import Support
from ptc.errors import CaptureError, FeatureUnavailable

__all__ = ["CudaGraph", "cuda_support", "cuda_version"]


def cuda_version() -> Optional[Tuple[int, int]]:
    """``(major, minor)`` of the CUDA torch was built with, or None for a CPU build."""
    v = torch.version.cuda
    if not v:
        return None
    parts = v.split(".")
    return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0


def cuda_support() -> Support:
    """What this torch build can capture with its own CUDAGraph bindings."""
    return Support(
        while_nodes=_compat.CUDA_GRAPH_WHILE_NODES,
        if_nodes=_compat.CUDA_GRAPH_IF_NODES,
        if_else_nodes=False,
        switch_nodes=False,
        cuda_version=cuda_version() or (0, 0),
        device="cuda",
    )


class CudaGraph:
    """A ``torch.cuda.CUDAGraph`` captured on a side stream into a private pool."""

    kind = "cuda"

    def __init__(self, pool: Any = None, stream: Optional["torch.cuda.Stream"] = None) -> None:
        if not _compat.CUDA_AVAILABLE:
            raise FeatureUnavailable(
                "CudaGraph needs a CUDA device (ptc._compat.CUDA_AVAILABLE is False); "
                "use executor='sim' to run the capture logic on the CPU",
                requirement="CUDA_AVAILABLE",
            )
        self.support = cuda_support()
        self.graph = torch.cuda.CUDAGraph()
        self.pool = pool if pool is not None else torch.cuda.graph_pool_handle()
        self.stream = stream or torch.cuda.Stream()
        self._depth = 0
        self.replays = 0

    @property
    def depth(self) -> int:
        return self._depth

    @contextlib.contextmanager
    def capture(self) -> Iterator["CudaGraph"]:
        try:
            with torch.cuda.graph(self.graph, pool=self.pool, stream=self.stream):
                yield self
        except RuntimeError as e:
            if "capture" in str(e).lower() and "not permitted" in str(e).lower():
                raise CaptureError(
                    f"CUDA graph capture failed: {e}. A host read of a device value "
                    "(.item(), bool(t)) or a sync happened during capture"
                ) from e
            raise

    def launch(self, fn: Callable[..., Any], args: Sequence[Any], opaque: bool = False) -> Any:
        return fn(*args)

    def begin_while(self, pred: torch.Tensor) -> None:
        if not self.support.while_nodes:
            raise CaptureError("this torch has no WHILE-node binding")
        self.graph.begin_capture_to_while_node(pred.reshape(()))
        self._depth += 1

    def begin_if(self, pred: torch.Tensor, with_else: bool = False) -> None:
        if with_else:
            raise CaptureError("torch has no IF/ELSE binding; the executor uses two IF nodes")
        self.graph.begin_capture_to_if_node(pred.reshape(()))
        self._depth += 1

    def begin_switch(self, index: torch.Tensor, n: int) -> None:
        raise CaptureError("torch has no SWITCH binding; the executor uses IF nodes")

    def next_body(self) -> None:
        raise CaptureError("torch has no multi-body conditional nodes")

    def set_handle(self, pred: torch.Tensor) -> None:
        self.graph.set_conditional_handle_for_current_node(pred.reshape(()))

    def end_conditional(self) -> None:
        self.graph.end_capture_to_conditional_node()
        self._depth -= 1

    def replay(self) -> None:
        self.graph.replay()
        self.replays += 1
