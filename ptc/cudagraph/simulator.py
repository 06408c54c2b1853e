"""A CPU stand-in for a CUDA graph with conditional nodes.

``SimGraph`` implements the same interface as ``CudaGraph``
(:mod:`ptc.cudagraph.cuda_graph`), so the executor's capture logic runs
unchanged in CI:

* ``capture()``: a context in which every aten op is *recorded* as a kernel
  with its argument tensors fixed (the static addresses of a real graph). Any
  read of a device value on the host (``.item()``, ``bool(t)``, ``nonzero``)
  raises ``ptc.CaptureError``, as ``cudaErrorStreamCaptureUnsupported`` would
  on a GPU. RNG inside a conditional body raises too, as CUDA does.
* ``begin_while(pred)`` / ``begin_if(pred)`` / ``begin_switch(index, n)``:
  record a ``SetHandle`` node (the one-thread kernel that calls
  ``cudaGraphSetConditional(handle, *pred)``) in the current graph, then a
  ``Conditional`` node whose bodies capture what follows; ``next_body()``
  moves to the next body (IF/ELSE, SWITCH); ``set_handle(pred)`` records a
  ``SetHandle`` inside a body (a WHILE body re-evaluates its predicate);
  ``end_conditional()`` closes the node.
* ``replay()``: runs the recorded program with real tensor math. Kernels write
  into the buffers captured for them; conditional nodes read their handle.

Ops run for real during capture (the simulator needs their output shapes), but
right after capture every buffer the graph allocated is *poisoned* (NaN, or
-7777 for integers), so a result that was not recomputed by ``replay()`` shows
up as wrong, and every tensor that existed before the capture and was written
during it (an input updated in place) gets its old values back: a CUDA capture
executes nothing, so only ``replay()`` may change them. Buffers allocated during capture form the graph's private pool
(``pool``); ``replay()`` allocates nothing that outlives it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from ptc.cudagraph.eligibility import Support, integer_indexing
from ptc.cudagraph.plan import copy_into_expanded, expanded_dims, written_arguments
from ptc.errors import CaptureError

__all__ = ["SimGraph", "Kernel", "SetHandle", "Conditional", "StreamCaptureSim", "WriteJournal"]

_HOST_READS = {
    "aten::_local_scalar_dense",
    "aten::item",
    "aten::is_nonzero",
    "aten::equal",
    "aten::allclose",
}


@dataclass
class Kernel:
    """One captured kernel: ``fn(*args, **kwargs)`` whose fresh results are copied
    into ``outs`` at replay (``outs[i] is None``: that result aliases an input)."""

    name: str
    fn: Callable[..., Any]
    args: tuple
    kwargs: dict
    outs: List[Optional[torch.Tensor]]

    def replay(self, graph: "SimGraph") -> None:
        result = self.fn(*self.args, **self.kwargs)
        flat = [r for r in pytree.tree_leaves(result)]
        for captured, new in zip(self.outs, flat):
            if captured is not None:
                _copy_result(captured, new)
        graph.kernel_launches += 1


def _copy_result(captured: torch.Tensor, new: torch.Tensor) -> None:
    """``captured.copy_(new)`` for a kernel result that may be an expanded (stride-0) view of
    its buffer (Inductor returns ``buf.expand(...)`` as is): along an expanded dimension the
    memory is one element, so only that element is written."""
    expanded = expanded_dims(captured)
    if expanded:
        copy_into_expanded(captured, new, expanded)
    else:
        captured.copy_(new)


@dataclass
class SetHandle:
    """Device code setting conditional ``handle`` from the scalar tensor ``src``."""

    handle: int
    src: torch.Tensor
    clamp: Optional[int] = None  # SWITCH: clamp the index into [0, clamp - 1]

    @property
    def name(self) -> str:
        return f"set_handle[{self.handle}]"

    def replay(self, graph: "SimGraph") -> None:
        value = int(self.src.reshape(()).item())  # on a GPU this read happens on the device
        if self.clamp is not None:
            value = min(max(value, 0), self.clamp - 1)
        graph.handles[self.handle] = value
        graph.kernel_launches += 1


@dataclass
class Conditional:
    """A conditional node: ``kind`` in {"while", "if", "switch"}; ``bodies`` are
    child programs. IF runs ``bodies[0]`` when the handle is non-zero and
    ``bodies[1]`` (if present, CUDA >= 12.8) when it is zero; SWITCH runs
    ``bodies[h]`` for ``0 <= h < len(bodies)``; WHILE repeats ``bodies[0]`` while
    the handle is non-zero."""

    kind: str
    handle: int
    bodies: List[List[Any]] = field(default_factory=lambda: [[]])

    @property
    def name(self) -> str:
        return f"{self.kind}[{self.handle}]"

    def replay(self, graph: "SimGraph") -> None:
        h = self.handle
        if self.kind == "while":
            while graph.handles[h]:
                graph.iterations[h] = graph.iterations.get(h, 0) + 1
                graph._run(self.bodies[0])
        elif self.kind == "if":
            if graph.handles[h]:
                graph._run(self.bodies[0])
            elif len(self.bodies) > 1:
                graph._run(self.bodies[1])
        elif self.kind == "switch":
            if 0 <= graph.handles[h] < len(self.bodies):
                graph._run(self.bodies[graph.handles[h]])
        else:  # pragma: no cover - constructed only here
            raise AssertionError(self.kind)


def _is_view_or_inplace(func: torch._ops.OpOverload) -> List[bool]:
    """Per return: True when it aliases an argument (a view, or in-place/out)."""
    return [r.alias_info is not None for r in func._schema.returns]


def _written_tensors(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> List[torch.Tensor]:
    """The tensors ``func`` writes (``self`` of an in-place op, ``out=``)."""
    values = written_arguments(func._schema, args, kwargs)
    return [t for v in values for t in pytree.tree_leaves(v) if isinstance(t, torch.Tensor)]


#: ops that write into arguments their schema does not mark as written: (op, positions)
_UNMARKED_WRITES = {
    "aten::native_batch_norm": (3, 4),  # running_mean, running_var in training
    "aten::cudnn_batch_norm": (3, 4),
    "aten::miopen_batch_norm": (3, 4),
}


def _poison(t: torch.Tensor) -> None:
    with torch.no_grad():
        if t.dtype.is_floating_point or t.dtype.is_complex:
            t.fill_(float("nan"))
        elif t.dtype == torch.bool:
            t.fill_(True)
        else:  # -7777 where it fits (int16 and wider), else the type's extreme
            info = torch.iinfo(t.dtype)
            t.fill_(-7777 if info.min <= -7777 else (info.min if info.min < 0 else info.max))


class WriteJournal:
    """Remembers the values of tensors that existed before a capture started, as ops first
    write into them, so ``restore()`` can put them back: a CUDA capture executes nothing.
    A tensor whose storage ``made`` holds (allocated during the capture) is not remembered."""

    def __init__(self) -> None:
        self.made: set = set()  # storage data_ptrs allocated since the journal started
        self._kept: List[Any] = []  # (tensor, its values before the first write)

    def before_op(self, func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> None:
        """Remember every tensor ``func`` is about to write."""
        for t in _written_tensors(func, args, kwargs):
            self.keep(t)
        for i in _UNMARKED_WRITES.get(func._schema.name, ()):
            if i < len(args) and isinstance(args[i], torch.Tensor):
                self.keep(args[i])

    def keep(self, t: torch.Tensor) -> None:
        if not _is_real(t):
            return  # a fake tensor of a trace inside the block: no memory to restore
        if expanded_dims(t):
            return  # expanded: nothing can write into it
        if t.untyped_storage().data_ptr() in self.made or any(k is t for k, _ in self._kept):
            return
        from torch.utils._python_dispatch import _disable_current_modes

        with _disable_current_modes():
            self._kept.append((t, t.clone()))

    def restore(self) -> None:
        from torch.utils._python_dispatch import _disable_current_modes

        with torch.no_grad(), _disable_current_modes():
            for t, old in reversed(self._kept):
                t.copy_(old)
        self._kept = []


def _is_real(t: Any) -> bool:
    from torch._subclasses.fake_tensor import is_fake

    return isinstance(t, torch.Tensor) and not is_fake(t) and not t.is_meta


def _meta_result(func: Any, args: tuple, kwargs: dict) -> Any:
    """``func``'s results as uninitialised real tensors, their layout computed on ``meta``."""
    devices = [t.device for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
    to_meta = lambda t: t.to("meta") if isinstance(t, torch.Tensor) else t  # noqa: E731
    out = func(*pytree.tree_map(to_meta, args), **pytree.tree_map(to_meta, kwargs))
    device = devices[0] if devices else torch.device("cpu")
    return pytree.tree_map(
        lambda m: torch.empty_strided(m.shape, m.stride(), dtype=m.dtype, device=device)
        if isinstance(m, torch.Tensor) else m,
        out,
    )


class StreamCaptureSim(TorchDispatchMode):
    """Plays "the capturing stream": records aten ops into ``graph``'s current
    body, forbids host reads, and forbids RNG inside conditional bodies."""

    def __init__(self, graph: "SimGraph") -> None:
        super().__init__()
        self.graph = graph

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        g = self.graph
        name = func._schema.name
        if name in _HOST_READS or torch.Tag.data_dependent_output in func.tags:
            raise CaptureError(
                f"{func} reads a device value on the host during graph capture "
                "(on a GPU: cudaErrorStreamCaptureUnsupported); keep the value on the device, "
                "e.g. use torch.where instead of `if tensor:` and a while_loop predicate "
                "instead of `.item()`"
            )
        if torch.Tag.dynamic_output_shape in func.tags and not integer_indexing(func, args):
            raise CaptureError(
                f"{func} has a data-dependent output shape, which needs a host sync during graph capture"
            )
        if torch.Tag.nondeterministic_seeded in func.tags and g.depth > 0:
            raise CaptureError(
                f"{func} draws random numbers inside a conditional node: RNG within "
                "data-dependent conditional nodes is not supported by CUDA graphs"
            )
        g.journal.before_op(func, args, kwargs)
        try:
            result = func(*args, **kwargs)
        except Exception:  # noqa: BLE001
            if g.depth == 0:
                raise
            # inside a conditional body the capture runs on values the predicate may guard
            # against (an out-of-range index): a CUDA capture executes nothing, so only the
            # result's shape is needed: take it from meta tensors, allocate, record as usual
            result = _meta_result(func, args, kwargs)
        if torch.Tag.inplace_view in func.tags:
            return result  # squeeze_, unsqueeze_, t_: metadata on the host, no kernel
        flat = pytree.tree_leaves(result)
        aliases = _is_view_or_inplace(func)
        if all(aliases) and not any(
            r.alias_info is not None and r.alias_info.is_write for r in func._schema.returns
        ):
            return result  # a pure view: metadata only, no kernel
        outs: List[Optional[torch.Tensor]] = []
        for i, t in enumerate(flat):
            aliased = aliases[i] if i < len(aliases) else False
            if isinstance(t, torch.Tensor) and not aliased:
                # its own view: a later squeeze_ / unsqueeze_ of ``t`` must not change where,
                # and in which shape, the replay writes this kernel's result
                outs.append(t.as_strided(t.size(), t.stride(), t.storage_offset()))
                g._allocated(t)
            else:
                outs.append(None)
        g._record(Kernel(str(func), func, args, kwargs, outs))
        return result


class SimGraph:
    """A recording "CUDA graph" on the CPU (see the module docstring).

    ``support`` says which conditional nodes the simulated CUDA offers, so the
    planner's decisions for e.g. CUDA 12.2 or torch 2.13 (IF only) can be
    exercised on any machine. Default: everything (WHILE, IF/ELSE, SWITCH).
    """

    kind = "sim"

    def __init__(self, support: Optional[Support] = None) -> None:
        self.support = support or Support(
            while_nodes=True, if_nodes=True, if_else_nodes=True, switch_nodes=True, cuda_version=(12, 8)
        )
        self.nodes: List[Any] = []
        self._stack: List[List[Any]] = []  # bodies being captured, innermost last
        self._open: List[Conditional] = []
        self.handles: Dict[int, int] = {}
        self.iterations: Dict[int, int] = {}
        self.pool: List[torch.Tensor] = []
        self.kernel_launches = 0
        self.replays = 0
        self._mode: Optional[StreamCaptureSim] = None
        self._captured = False
        self.journal = WriteJournal()  # what the capture wrote into tensors it did not allocate

    # --- capture ---------------------------------------------------------------
    @property
    def depth(self) -> int:
        return len(self._open)

    @property
    def capturing(self) -> bool:
        return self._mode is not None

    @contextlib.contextmanager
    def capture(self) -> Iterator["SimGraph"]:
        if self._captured:
            raise CaptureError("SimGraph.capture: this graph was already captured; make a new one")
        self._stack = [self.nodes]
        self._mode = StreamCaptureSim(self)
        rng = torch.get_rng_state()  # a CUDA capture draws no numbers; the replays do
        try:
            with self._mode:
                yield self
            if self._open:
                raise CaptureError(
                    f"capture ended with {len(self._open)} conditional node(s) still open; "
                    "call end_conditional() for each begin_*()"
                )
        finally:
            self._mode = None
            self._stack = []
            self._captured = True
            self.journal.restore()
            torch.set_rng_state(rng)
        for t in self.pool:
            _poison(t)

    def _allocated(self, t: torch.Tensor) -> None:
        """``t`` was allocated during the capture: a buffer of the graph's pool."""
        self.pool.append(t)
        self.journal.made.add(t.untyped_storage().data_ptr())

    def _require_capture(self, what: str) -> None:
        if not self.capturing:
            raise CaptureError(f"SimGraph.{what} called outside capture()")

    def _record(self, node: Any) -> None:
        self._stack[-1].append(node)

    @contextlib.contextmanager
    def _paused(self) -> Iterator[None]:
        """Run Python-level work (an opaque compiled segment) without per-op recording."""
        from torch.utils._python_dispatch import _disable_current_modes

        with _disable_current_modes():
            yield

    def launch(
        self,
        fn: Callable[..., Any],
        args: Sequence[Any],
        opaque: bool = False,
        reads: Sequence[torch.Tensor] = (),
        shape_fn: Optional[Callable[..., Any]] = None,
    ) -> Any:
        """Run a segment. Eager segments are recorded op by op; ``opaque`` ones
        (Inductor-compiled code, whose kernels bypass the dispatcher) as one kernel.
        ``reads``: tensors the segment holds besides its arguments (a module's buffers)."""
        if not self.capturing or not opaque:
            return fn(*args)
        held = [a for a in list(args) + list(reads) if isinstance(a, torch.Tensor)]
        for a in held:  # compiled code may write into any of them, unseen by the dispatcher
            self.journal.keep(a)
        with self._paused():
            try:
                result = fn(*args)
            except Exception:  # noqa: BLE001
                if self.depth == 0 or shape_fn is None:
                    raise
                # as for one op in __torch_dispatch__: a guarded value inside a conditional
                # body; ``shape_fn`` (the segment's aten graph) gives the results' layout
                result = _meta_result(shape_fn, tuple(args), {})
        in_storages = {a.untyped_storage().data_ptr() for a in held}
        outs: List[Optional[torch.Tensor]] = []
        for t in pytree.tree_leaves(result):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in in_storages:
                outs.append(t)
                self._allocated(t)
            else:
                outs.append(None)
        self._record(Kernel(getattr(fn, "__name__", "segment"), fn, tuple(args), {}, outs))
        return result

    def _begin(self, kind: str, src: torch.Tensor, bodies: int = 1, clamp: Optional[int] = None) -> None:
        self._require_capture(f"begin_{kind}")
        if not isinstance(src, torch.Tensor) or src.numel() != 1:
            raise CaptureError(
                f"begin_{kind}: the {'index' if kind == 'switch' else 'predicate'} must be a one-element "
                f"device tensor, got {type(src).__name__}"
            )
        handle = len(self.handles)
        self.handles[handle] = 0
        self._record(SetHandle(handle, src, clamp))
        node = Conditional(kind, handle, [[] for _ in range(bodies)])
        self._record(node)
        self._open.append(node)
        self._stack.append(node.bodies[0])

    def begin_while(self, pred: torch.Tensor) -> None:
        if not self.support.while_nodes:
            raise CaptureError("this graph has no WHILE conditional nodes (Support.while_nodes=False)")
        self._begin("while", pred)

    def begin_if(self, pred: torch.Tensor, with_else: bool = False) -> None:
        if with_else and not self.support.if_else_nodes:
            raise CaptureError("this graph has no IF/ELSE nodes (CUDA >= 12.8); use two IF nodes")
        self._begin("if", pred, 2 if with_else else 1)

    def begin_switch(self, index: torch.Tensor, n: int) -> None:
        if not self.support.switch_nodes:
            raise CaptureError("this graph has no SWITCH nodes (CUDA >= 12.8)")
        self._begin("switch", index, n, clamp=n)

    def next_body(self) -> None:
        """Move capture to the next body of the open IF/ELSE or SWITCH node."""
        self._require_capture("next_body")
        node = self._open[-1]
        current = self._stack[-1]
        i = next(k for k, b in enumerate(node.bodies) if b is current)
        if i + 1 >= len(node.bodies):
            raise CaptureError(f"{node.name} has only {len(node.bodies)} bodies")
        self._stack[-1] = node.bodies[i + 1]

    def set_handle(self, pred: torch.Tensor) -> None:
        """Record, inside the open node's body, a kernel re-setting its handle."""
        self._require_capture("set_handle")
        if not self._open:
            raise CaptureError("set_handle: no conditional node is open")
        self._record(SetHandle(self._open[-1].handle, pred))

    def end_conditional(self) -> None:
        self._require_capture("end_conditional")
        if not self._open:
            raise CaptureError("end_conditional: no conditional node is open")
        self._open.pop()
        self._stack.pop()

    # --- replay ----------------------------------------------------------------
    def replay(self) -> None:
        if not self._captured:
            raise CaptureError("SimGraph.replay: nothing was captured")
        self.iterations = {}
        self.replays += 1
        with torch.no_grad():
            self._run(self.nodes)

    def _run(self, nodes: Sequence[Any]) -> None:
        for node in nodes:
            node.replay(self)

    # --- inspection ------------------------------------------------------------
    def counts(self) -> Dict[str, int]:
        """How many nodes of each kind the captured program has (all bodies included)."""
        counts = {"kernel": 0, "set_handle": 0, "while": 0, "if": 0, "switch": 0}

        def walk(nodes: Sequence[Any]) -> None:
            for n in nodes:
                if isinstance(n, Kernel):
                    counts["kernel"] += 1
                elif isinstance(n, SetHandle):
                    counts["set_handle"] += 1
                else:
                    counts[n.kind] += 1
                    for b in n.bodies:
                        walk(b)

        walk(self.nodes)
        return counts

    def render(self, max_kernels: int = 3) -> str:
        """The captured program as an indented tree (runs of kernels abbreviated)."""
        lines: List[str] = []

        def walk(nodes: Sequence[Any], indent: str) -> None:
            run: List[str] = []

            def flush() -> None:
                if run:
                    shown = ", ".join(run[:max_kernels]) + (f", ... (+{len(run) - max_kernels})" if len(run) > max_kernels else "")
                    lines.append(f"{indent}kernels x{len(run)}: {shown}")
                    run.clear()

            for n in nodes:
                if isinstance(n, Kernel):
                    run.append(n.name.replace("aten.", ""))
                    continue
                flush()
                if isinstance(n, SetHandle):
                    lines.append(f"{indent}{n.name}" + (f" (clamped to [0, {n.clamp - 1}])" if n.clamp else ""))
                else:
                    for i, b in enumerate(n.bodies):
                        label = n.name if len(n.bodies) == 1 else f"{n.name} body {i}"
                        lines.append(f"{indent}{label}:")
                        walk(b, indent + "  ")
            flush()

        walk(self.nodes, "")
        return "\n".join(lines)
