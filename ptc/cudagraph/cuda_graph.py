"""The real graph backend: ``torch.cuda.CUDAGraph`` with conditional nodes.

Implements the interface ``SimGraph`` simulates (``capture``, ``launch``,
``begin_while``, ``begin_if``, ``begin_switch``, ``next_body``, ``set_handle``,
``end_conditional``, ``replay``). The conditional nodes come from one of two
sources (``nodes=``):

* ``"ptc"``: ptc's own, through cuda-python (``ptc.cudagraph.cuda_nodes``):
  WHILE and IF on a CUDA 12.4 driver, IF/ELSE and SWITCH on 12.8, on every torch.
* ``"torch"``: the methods torch's ``CUDAGraph`` has (2.13: IF; 2.14: IF and
  WHILE; never IF/ELSE or SWITCH, so a cond is two IF nodes, ``pred`` and
  ``not pred``, as torch's own ``if_else_node`` does).

``"auto"`` takes ``"ptc"`` where cuda-python and the driver allow it, else
``"torch"``. Whatever neither offers is reported ineligible ("no binding", saying
which source lacks what) and runs un-graphed; without a CUDA device or a CUDA
build of torch every loop and cond is ("no CUDA", saying which).

GPU-only: nothing here can run without a CUDA device; the logic above it is
exercised on CPU through the simulator, and both node sources are driven on the
CPU through stand-ins (tests/cudagraph/test_cuda_adapter.py, test_cuda_nodes.py).
"""

from __future__ import annotations

import contextlib
import functools
import sys
from typing import Any, Callable, Iterator, Optional, Sequence, Tuple

import torch

from ptc import _compat
from ptc.cudagraph.eligibility import Support
from ptc.errors import CaptureError, FeatureUnavailable, PtcValueError

__all__ = ["CudaGraph", "NODE_SOURCES", "cuda_support", "cuda_version", "node_source"]

NODE_SOURCES = ("auto", "ptc", "torch")


def cuda_version() -> Optional[Tuple[int, int]]:
    """``(major, minor)`` of the CUDA torch was built with, or None for a CPU build."""
    v = torch.version.cuda
    if not v:
        return None
    parts = v.split(".")
    return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0


@functools.lru_cache(maxsize=None)
def _ptc_node_capabilities() -> dict:
    """The driver's conditional-node capabilities, or why ptc's nodes are unusable here."""
    if not _compat.CUDA_PYTHON_BINDINGS:
        return {"while_if": False, "if_else_switch": False, "reason": "cuda-python (cuda.bindings) is not installed"}
    if not _compat.CUDA_THREAD_POOL_ROUTING:
        return {"while_if": False, "if_else_switch": False, "reason": "this torch cannot route a thread to a graph pool"}
    from ptc.cudagraph.cuda_nodes import driver_capabilities

    return driver_capabilities()


def node_source(nodes: str = "auto") -> str:
    """``"ptc"`` or ``"torch"``: where conditional nodes come from for ``nodes``."""
    if nodes not in NODE_SOURCES:
        raise PtcValueError(f"nodes must be one of {', '.join(map(repr, NODE_SOURCES))}, got {nodes!r}")
    if nodes != "auto":
        return nodes
    return "ptc" if _ptc_node_capabilities()["while_if"] else "torch"


def cuda_support(nodes: str = "auto") -> Support:
    """What a ``CudaGraph(nodes=nodes)`` can capture here, and what it lacks."""
    missing = _missing_cuda()
    if node_source(nodes) == "ptc":
        caps = _ptc_node_capabilities()
        detail = "ptc's own nodes (cuda-python)"
        if not caps["while_if"]:
            detail += f" are unavailable: {caps.get('reason') or 'the driver has no WHILE/IF nodes (CUDA 12.4)'}"
        return Support(
            while_nodes=caps["while_if"],
            if_nodes=caps["while_if"],
            if_else_nodes=caps["if_else_switch"],
            switch_nodes=caps["if_else_switch"],
            cuda_version=caps.get("version") or (0, 0),
            device="cuda",
            missing=missing,
            nodes_detail=detail,
        )
    kinds = [k for k, has in (("WHILE", _compat.CUDA_GRAPH_WHILE_NODES), ("IF", _compat.CUDA_GRAPH_IF_NODES)) if has]
    detail = f"torch.cuda.CUDAGraph offers {' and '.join(kinds) + ' nodes' if kinds else 'no conditional nodes'} in this torch"
    if nodes == "auto":
        reason = _ptc_node_capabilities().get("reason") or "the driver has no WHILE/IF nodes (CUDA 12.4)"
        detail += f", and ptc's own nodes are unavailable ({reason})"
    return Support(
        while_nodes=_compat.CUDA_GRAPH_WHILE_NODES,
        if_nodes=_compat.CUDA_GRAPH_IF_NODES,
        if_else_nodes=False,
        switch_nodes=False,
        cuda_version=cuda_version() or (0, 0),
        device="cuda",
        missing=missing,
        nodes_detail=detail,
    )


def _missing_cuda() -> str:
    """What this install lacks to run a CUDA graph at all ("" when nothing)."""
    if not _compat.CUDA_BUILD:
        return "this torch is a CPU-only build (torch.version.cuda is None)"
    if not _compat.CUDA_AVAILABLE:
        return "no CUDA device is available (torch.cuda.is_available() is False)"
    return ""


class CudaGraph:
    """A ``torch.cuda.CUDAGraph`` captured on a side stream into a private pool,
    its conditional nodes from ``nodes`` (``"auto"``, ``"ptc"``, ``"torch"``)."""

    kind = "cuda"

    def __init__(self, pool: Any = None, stream: Optional["torch.cuda.Stream"] = None, nodes: str = "auto") -> None:
        if not _compat.CUDA_AVAILABLE:
            raise FeatureUnavailable(
                "CudaGraph needs a CUDA device (ptc._compat.CUDA_AVAILABLE is False); "
                "use executor='sim' to run the capture logic on the CPU",
                requirement="CUDA_AVAILABLE",
            )
        self.nodes = node_source(nodes)
        self.support = cuda_support(self.nodes)
        self.graph = torch.cuda.CUDAGraph()
        self.pool = pool if pool is not None else torch.cuda.graph_pool_handle()
        self.stream = stream or torch.cuda.Stream()
        self._ptc = None
        if self.nodes == "ptc":
            from ptc.cudagraph.cuda_nodes import ConditionalNodes

            self._ptc = ConditionalNodes()  # loads its kernels now: not allowed during a capture
        self._depth = 0
        self.replays = 0

    def __del__(self) -> None:
        if getattr(self, "_ptc", None) is not None:
            self.graph.reset()
            self._ptc.release()

    @property
    def depth(self) -> int:
        return self._depth

    @contextlib.contextmanager
    def capture(self) -> Iterator["CudaGraph"]:
        try:
            with torch.cuda.graph(self.graph, pool=self.pool, stream=self.stream):
                try:
                    yield self
                except BaseException:
                    if self._ptc is not None:
                        self._ptc.abort()  # torch's capture ends on the stream it began on
                    raise
        except RuntimeError as e:
            if "capture" in str(e).lower() and "not permitted" in str(e).lower():
                raise CaptureError(
                    f"CUDA graph capture failed: {e}. A host read of a device value "
                    "(.item(), bool(t)) or a sync happened during capture"
                ) from e
            raise

    def launch(
        self,
        fn: Callable[..., Any],
        args: Sequence[Any],
        opaque: bool = False,
        reads: Sequence[Any] = (),
        shape_fn: Optional[Callable[..., Any]] = None,
    ) -> Any:
        return fn(*args)

    def begin_while(self, pred: torch.Tensor) -> None:
        if not self.support.while_nodes:
            raise CaptureError(f"no WHILE nodes from {self.nodes!r} here")
        if self._ptc is not None:
            self._ptc.begin("while", pred)
        else:
            self.graph.begin_capture_to_while_node(pred.reshape(()))
        self._depth += 1

    def begin_if(self, pred: torch.Tensor, with_else: bool = False) -> None:
        if with_else and not self.support.if_else_nodes:
            raise CaptureError(f"no IF/ELSE nodes from {self.nodes!r} here; the executor uses two IF nodes")
        if self._ptc is not None:
            self._ptc.begin("if", pred, 2 if with_else else 1)
        else:
            self.graph.begin_capture_to_if_node(pred.reshape(()))
        self._depth += 1

    def begin_switch(self, index: torch.Tensor, n: int) -> None:
        if not self.support.switch_nodes or self._ptc is None:
            raise CaptureError(f"no SWITCH nodes from {self.nodes!r} here; the executor uses IF nodes")
        self._ptc.begin("switch", index, n)
        self._depth += 1

    def next_body(self) -> None:
        if self._ptc is None:
            raise CaptureError("torch has no multi-body conditional nodes")
        self._ptc.next_body()

    def set_handle(self, pred: torch.Tensor) -> None:
        if self._ptc is not None:
            self._ptc.set_handle(pred)
        else:
            self.graph.set_conditional_handle_for_current_node(pred.reshape(()))

    def end_conditional(self) -> None:
        failed = sys.exc_info()[1] is not None  # called from the executor's `finally`
        try:
            if self._ptc is not None:
                self._ptc.end(failed=failed)
            else:
                self.graph.end_capture_to_conditional_node()
        finally:
            self._depth -= 1

    def replay(self) -> None:
        self.graph.replay()
        self.replays += 1
