"""Conditional nodes through cuda-python: WHILE, IF, IF/ELSE and SWITCH on any torch.

torch exposes conditional-node capture only in part (2.13: IF; 2.14: IF and
WHILE; neither has IF/ELSE or SWITCH). ``ConditionalNodes`` adds them to a
``torch.cuda.graph`` capture in progress with the CUDA driver API
(``cuda.bindings.driver``) and two one-thread kernels that NVRTC compiles once.
Opening a node does what torch 2.14's C++ ``begin_capture_to_conditional_node``
does, i.e. is equivalent to::

    set_kernel<<<1, 1, 0, parent>>>(handle, value)   # captured into the parent graph
    node = cuGraphAddNode(parent_graph, deps, CONDITIONAL{handle, type, size})
    cuStreamUpdateCaptureDependencies(parent, [node]) # later work waits for the node
    cuStreamBeginCaptureToGraph(child, node.bodies[0]) and make ``child`` torch's stream

``next_body`` ends that capture and starts the next body (IF/ELSE, SWITCH);
``set_handle`` (the last thing a WHILE body does) launches the set kernel in the
body; ``end`` ends the capture and gives the parent stream back. The value is
read on the device: a bool for WHILE/IF, an index for SWITCH, clamped into ``[0, size - 1]`` as
``jax.lax.switch`` does (CUDA itself runs no body for an index >= size).

While any body is captured, every allocation of this thread goes to a private
pool of the graph (torch routes only the parent stream's capture to the graph's
pool, and a pool can be routed once at a time), so no body tensor ever comes
from, or goes back to, the eager pool. A failed capture calls ``abort``.

The driver-API signatures differ between cuda-bindings 12.x and 13.x (edge data);
``DriverApi`` hides that. GPU-only: the logic is tested on the CPU against a
recording fake of ``cuda.bindings.driver``; the kernels compile on the CPU.
"""

from __future__ import annotations

import ctypes
import functools
import weakref
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from ptc import _compat
from ptc.errors import CaptureError, FeatureUnavailable

__all__ = ["ConditionalNodes", "DriverApi", "compile_set_kernels", "driver_capabilities", "SET_KERNELS_SOURCE"]

SET_KERNELS_SOURCE = r"""
typedef __device_builtin__ unsigned long long cudaGraphConditionalHandle;
extern "C" __device__ __cudart_builtin__ void cudaGraphSetConditional(
    cudaGraphConditionalHandle handle, unsigned int value);

// WHILE / IF: the handle becomes *pred (0 or 1).
extern "C" __global__ void ptc_set_bool(cudaGraphConditionalHandle h, const bool* pred) {
  cudaGraphSetConditional(h, *pred ? 1u : 0u);
}

// SWITCH: the handle becomes *index clamped into [0, n - 1].
extern "C" __global__ void ptc_set_index(cudaGraphConditionalHandle h, const int* index, int n) {
  int v = *index;
  v = v < 0 ? 0 : (v >= n ? n - 1 : v);
  cudaGraphSetConditional(h, (unsigned int)v);
}
"""

KINDS = ("while", "if", "switch")
# driver binding -> device -> set-handle kernels; weak in the binding, so a binding that is gone
# (a test's fake driver) cannot hand its kernels to a new one that reuses its id()
_LOADED: "weakref.WeakKeyDictionary[Any, Dict[int, Dict[str, Any]]]" = weakref.WeakKeyDictionary()
WHILE_IF_DRIVER = 12040  # CUDA 12.4: IF and WHILE nodes
IF_ELSE_SWITCH_DRIVER = 12080  # CUDA 12.8: IF with an ELSE body, SWITCH


def _bindings() -> Tuple[Any, Any]:
    if not _compat.CUDA_PYTHON_BINDINGS:
        raise FeatureUnavailable(
            "ptc's conditional nodes need cuda-python (pip install cuda-bindings)",
            requirement="CUDA_PYTHON_BINDINGS",
        )
    from cuda.bindings import driver, nvrtc

    return driver, nvrtc


@functools.lru_cache(maxsize=None)
def compile_set_kernels(arch: str) -> bytes:
    """The set-handle kernels as a cubin for ``arch`` (e.g. ``"sm_90"``), compiled by NVRTC.

    Needs no GPU. Raises ``FeatureUnavailable`` when NVRTC cannot be loaded and
    ``CaptureError`` (with NVRTC's log) when it rejects the source."""
    _, nvrtc = _bindings()
    try:
        err, prog = nvrtc.nvrtcCreateProgram(SET_KERNELS_SOURCE.encode(), b"ptc_conditional.cu", 0, [], [])
    except Exception as e:  # the library itself is missing  # noqa: BLE001
        raise FeatureUnavailable(f"NVRTC could not be loaded: {e}", requirement="NVRTC") from e
    _nvrtc_check(nvrtc, err, "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture={arch}".encode()]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, log)
            raise CaptureError(f"NVRTC could not compile ptc's set-handle kernels for {arch}: {log.decode(errors='replace')}")
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _nvrtc_check(nvrtc, err, "nvrtcGetCUBINSize")
        cubin = b" " * size
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        _nvrtc_check(nvrtc, err, "nvrtcGetCUBIN")
        return cubin
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _nvrtc_check(nvrtc: Any, err: Any, what: str) -> None:
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CaptureError(f"{what} failed: {err}")


class DriverApi:
    """The few driver calls ptc makes, the same on cuda-bindings 12.x and 13.x.

    Every failure raises ``CaptureError`` naming the call and the CUDA error.
    ``driver`` is ``cuda.bindings.driver`` (tests pass a recording fake)."""

    def __init__(self, driver: Any = None) -> None:
        self.d = driver if driver is not None else _bindings()[0]
        # 13.x added edge-data arguments (the 12.x spelling of these calls is ..._v2/_v3).
        self.edges = "dependencyData" in (self.d.cuGraphAddNode.__doc__ or "").splitlines()[0]
        self._version: Optional[int] = None

    def check(self, result: Any, what: str) -> Any:
        if not isinstance(result, tuple):
            result = (result,)
        err, rest = result[0], result[1:]
        if int(err) != 0:
            try:
                name = self.d.cuGetErrorName(err)[1].decode()
            except Exception:  # noqa: BLE001
                name = str(err)
            raise CaptureError(f"{what} failed with {name}")
        return rest[0] if len(rest) == 1 else rest

    def version(self) -> int:
        """The driver's CUDA version (12080 for 12.8), asked once."""
        if self._version is None:
            self._version = int(self.check(self.d.cuDriverGetVersion(), "cuDriverGetVersion"))
        return self._version

    def stream(self, s: "torch.cuda.Stream") -> Any:
        return self.d.CUstream(s.cuda_stream)

    def capture_info(self, stream: Any) -> Tuple[Any, List[Any]]:
        """``(graph, dependencies)`` of the capture under way on ``stream``."""
        out = self.check(self.d.cuStreamGetCaptureInfo(stream), "cuStreamGetCaptureInfo")
        status, graph, deps = out[0], out[2], out[3]
        n = int(out[-1])
        if status != self.d.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE:
            raise CaptureError(f"no stream capture is under way (status {status}); conditional nodes need one")
        return graph, list(deps or [])[:n]

    def context(self, stream: Any) -> Any:
        if self.version() >= 12050:
            return self.check(self.d.cuStreamGetCtx(stream), "cuStreamGetCtx")
        return self.check(self.d.cuCtxGetCurrent(), "cuCtxGetCurrent")

    def create_handle(self, graph: Any, ctx: Any) -> Any:
        return self.check(self.d.cuGraphConditionalHandleCreate(graph, ctx, 0, 0), "cuGraphConditionalHandleCreate")

    def add_conditional(self, graph: Any, deps: Sequence[Any], handle: Any, kind: str, size: int, ctx: Any) -> Tuple[Any, List[Any]]:
        """Adds the node after ``deps``; returns ``(node, body graphs)``."""
        params = self.d.CUgraphNodeParams()
        params.type = self.d.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
        params.conditional.handle = handle
        params.conditional.type = getattr(self.d.CUgraphConditionalNodeType, f"CU_GRAPH_COND_TYPE_{kind.upper()}")
        params.conditional.size = size
        params.conditional.ctx = ctx
        if self.edges:
            res = self.d.cuGraphAddNode(graph, deps, None, len(deps), params)
        else:
            res = self.d.cuGraphAddNode(graph, deps, len(deps), params)
        node = self.check(res, "cuGraphAddNode(CONDITIONAL)")
        return node, [params.conditional.phGraph_out[i] for i in range(size)]

    def set_dependencies(self, stream: Any, node: Any) -> None:
        flag = self.d.CUstreamUpdateCaptureDependencies_flags.CU_STREAM_SET_CAPTURE_DEPENDENCIES
        if self.edges:
            res = self.d.cuStreamUpdateCaptureDependencies(stream, [node], None, 1, flag)
        else:
            res = self.d.cuStreamUpdateCaptureDependencies(stream, [node], 1, flag)
        self.check(res, "cuStreamUpdateCaptureDependencies")

    def begin_capture_to(self, stream: Any, graph: Any) -> None:
        mode = self.d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
        self.check(self.d.cuStreamBeginCaptureToGraph(stream, graph, None, None, 0, mode), "cuStreamBeginCaptureToGraph")

    def end_capture(self, stream: Any) -> Any:
        return self.check(self.d.cuStreamEndCapture(stream), "cuStreamEndCapture")

    def load(self, image: bytes) -> Dict[str, Any]:
        module = self.check(self.d.cuModuleLoadData(image), "cuModuleLoadData")
        return {
            name: self.check(self.d.cuModuleGetFunction(module, name.encode()), f"cuModuleGetFunction({name})")
            for name in ("ptc_set_bool", "ptc_set_index")
        }

    def launch_one(self, function: Any, stream: Any, args: Sequence[Any]) -> None:
        """``function<<<1, 1, 0, stream>>>(*args)``; ``args`` are ctypes values."""
        pointers = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
        self.check(
            self.d.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, stream, ctypes.addressof(pointers), 0),
            "cuLaunchKernel(set handle)",
        )


def driver_capabilities(api: Optional[DriverApi] = None) -> Dict[str, Any]:
    """What this driver offers: ``{"version": (12, 8), "while_if": bool, "if_else_switch": bool}``.

    A driver without cuda-python, or without a device, offers nothing (``reason`` says why)."""
    try:
        api = api or DriverApi()
        v = api.version()
    except (FeatureUnavailable, CaptureError, RuntimeError, OSError) as e:
        return {"version": (0, 0), "while_if": False, "if_else_switch": False, "reason": str(e)}
    has_switch = hasattr(api.d.CUgraphConditionalNodeType, "CU_GRAPH_COND_TYPE_SWITCH")
    return {
        "version": (v // 1000, (v % 1000) // 10),
        "while_if": v >= WHILE_IF_DRIVER,
        "if_else_switch": v >= IF_ELSE_SWITCH_DRIVER and has_switch,
        "reason": "" if v >= WHILE_IF_DRIVER else f"the driver supports CUDA {v // 1000}.{(v % 1000) // 10} < 12.4",
    }


@dataclass
class _Open:
    """One conditional node whose bodies are being captured."""

    kind: str
    handle: Any
    bodies: List[Any]
    parent: "torch.cuda.Stream"
    child: "torch.cuda.Stream"
    body: int = 0
    keep: List[torch.Tensor] = field(default_factory=list)


class ConditionalNodes:
    """Conditional nodes for one ``torch.cuda.graph`` capture on ``device``.

    Create it before the capture (it loads its kernels then: loading a module
    during a capture is not allowed); call ``begin`` / ``next_body`` /
    ``set_handle`` / ``end`` inside it, on the capturing thread."""

    def __init__(self, device: Optional[int] = None, api: Optional[DriverApi] = None) -> None:
        if not _compat.CUDA_THREAD_POOL_ROUTING:
            raise FeatureUnavailable(
                "this torch cannot route a thread's allocations to a graph pool "
                "(torch._C._cuda_beginAllocateCurrentThreadToPool is missing)",
                requirement="CUDA_THREAD_POOL_ROUTING",
            )
        self.api = api or DriverApi()
        self.device = torch.cuda.current_device() if device is None else device
        per_device = _LOADED.setdefault(self.api.d, {})
        if self.device not in per_device:  # one module per device and driver binding, kept while it lives
            major, minor = torch.cuda.get_device_capability(self.device)
            per_device[self.device] = self.api.load(compile_set_kernels(f"sm_{major}{minor}"))
        self.functions = per_device[self.device]
        self.body_pool = torch.cuda.graph_pool_handle()
        self._stack: List[_Open] = []
        self._released = False

    @property
    def depth(self) -> int:
        return len(self._stack)

    def begin(self, kind: str, value: torch.Tensor, size: int = 1) -> None:
        """Opens a ``kind`` node (``"while"``, ``"if"``, ``"switch"``) with ``size`` bodies and
        starts capturing its first body; ``value`` (on the device) decides at replay."""
        if kind not in KINDS:
            raise CaptureError(f"unknown conditional node kind {kind!r}; one of {KINDS}")
        if (kind == "while" and size != 1) or (kind == "if" and size not in (1, 2)) or size < 1:
            raise CaptureError(f"a {kind.upper()} node cannot have {size} bodies")
        parent = torch.cuda.current_stream(self.device)
        ps = self.api.stream(parent)
        graph, _ = self.api.capture_info(ps)
        ctx = self.api.context(ps)
        handle = self.api.create_handle(graph, ctx)
        keep = self._set(handle, value, kind, size, ps)
        _, deps = self.api.capture_info(ps)  # now: the set kernel
        node, bodies = self.api.add_conditional(graph, deps, handle, kind, size, ctx)
        self.api.set_dependencies(ps, node)
        frame = _Open(kind, handle, bodies, parent, torch.cuda.Stream(self.device), keep=keep)
        self._stack.append(frame)
        try:
            self._enter_body(frame)
        except BaseException:
            self._stack.pop()
            raise

    def next_body(self) -> None:
        """Ends the current body and starts capturing the next one."""
        frame = self._top("next_body")
        if frame.body + 1 >= len(frame.bodies):
            raise CaptureError(f"the {frame.kind.upper()} node has only {len(frame.bodies)} bodies")
        self._leave_body(frame)
        frame.body += 1
        self._enter_body(frame)

    def set_handle(self, value: torch.Tensor) -> None:
        """Sets the innermost node's handle from ``value``, in the body (a WHILE's next test)."""
        frame = self._top("set_handle")
        frame.keep += self._set(frame.handle, value, frame.kind, len(frame.bodies), self.api.stream(frame.child))

    def end(self, failed: bool = False) -> None:
        """Ends the innermost node; ``failed``: the body raised, end quietly so that the
        parent capture can report the first error."""
        frame = self._top("end")
        try:
            self._leave_body(frame)
        except CaptureError:
            if not failed:
                raise
        finally:
            self._stack.pop()
            if not self._stack:
                _compat.end_pool_routing(self.device, self.body_pool)

    def abort(self) -> None:
        """Ends every open node quietly (the capture failed): torch's stream and the
        allocator's routing are as they were before the first ``begin``."""
        while self._stack:
            self.end(failed=True)

    def release(self) -> None:
        """Gives the body pool back once the graph that replays it is gone."""
        if not self._released:
            self._released = True
            _compat.release_graph_pool(self.device, self.body_pool)

    # ------------------------------------------------------------------
    def _top(self, what: str) -> _Open:
        if not self._stack:
            raise CaptureError(f"{what}() outside a conditional node")
        return self._stack[-1]

    def _set(self, handle: Any, value: torch.Tensor, kind: str, size: int, stream: Any) -> List[torch.Tensor]:
        if kind == "switch":
            v = value.reshape(()).to(torch.int32)
            args = [ctypes.c_ulonglong(int(handle)), ctypes.c_void_p(v.data_ptr()), ctypes.c_int(size)]
            self.api.launch_one(self.functions["ptc_set_index"], stream, args)
        else:
            v = value.reshape(()).to(torch.bool)
            args = [ctypes.c_ulonglong(int(handle)), ctypes.c_void_p(v.data_ptr())]
            self.api.launch_one(self.functions["ptc_set_bool"], stream, args)
        return [v]

    def _enter_body(self, frame: _Open) -> None:
        """Captures into the current body on the child stream. The allocator routes a
        pool once per thread: the outermost body starts it, ``end`` of the last node stops it."""
        self.api.begin_capture_to(self.api.stream(frame.child), frame.bodies[frame.body])
        if len(self._stack) == 1 and frame.body == 0:
            try:
                _compat.begin_thread_pool_routing(self.device, self.body_pool)
            except BaseException:
                self.api.end_capture(self.api.stream(frame.child))
                raise
        torch.cuda.set_stream(frame.child)

    def _leave_body(self, frame: _Open) -> None:
        torch.cuda.set_stream(frame.parent)
        self.api.end_capture(self.api.stream(frame.child))
