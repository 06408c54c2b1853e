"""Per-loop (and per-cond) eligibility for capture into CUDA conditional nodes.

Each ``Loop`` / ``Branch`` of a plan gets a list of reasons; an empty list means
"capture it". A reason is ``"<category>: <detail>"`` with one of the categories
in ``CATEGORIES``. Ineligible steps are never an error: the executor runs them
on the host (the un-graphed path) and the report counts them.

The checks are static, on the FX graphs, so they run the same on CPU and GPU:

* input mutation: ``mutated_arg_indices`` on the node, or an in-place/out op in
  a body, cond or branch that writes one of its graph inputs;
* RNG in the body: an op tagged ``nondeterministic_seeded`` (CUDA refuses RNG
  inside conditional nodes: "RNG within data-dependent conditional nodes is not
  supported yet");
* collectives: c10d / functional collective ops (event waits are not allowed
  in conditional bodies);
* data-dependent host reads: ``.item()``, ``bool(t)``, data-dependent output
  shapes (``nonzero``) anywhere inside;
* unsupported carries: non-tensor or symbolically shaped carries, a predicate
  that is not a one-element bool tensor, carries on different devices,
  unknown higher-order ops inside;
* what the graph backend supports: a CUDA device and a CUDA build of torch, CUDA
  >= 12.4 for conditional nodes, and a WHILE (for loops) or IF (for conds)
  binding; each reason names what this backend really lacks;
* a nested loop or cond that is itself ineligible makes its parent ineligible.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, List, Optional, Sequence, Tuple

import torch
import torch.fx as fx

from ptc import _compat
from ptc.cudagraph.plan import Block, Branch, Loop, Segment, is_cond, is_while_loop, meta_val

__all__ = ["Support", "CATEGORIES", "annotate", "node_reasons"]

CATEGORIES = (
    "input mutation",
    "RNG in body",
    "collective",
    "host read",
    "unsupported carry",
    "no CUDA",
    "CUDA < 12.4",
    "no binding",
    "nested",
)


@dataclass(frozen=True)
class Support:
    """What a graph backend can capture.

    ``cuda_version`` is ``(major, minor)`` of the CUDA runtime torch was built
    with (``None``: not a CUDA graph, e.g. the simulator emulating a given one).
    ``missing`` says what keeps the backend from capturing anything (no CUDA
    device, a CPU-only torch build); ``nodes_detail`` says where its conditional
    nodes come from and why the kinds it lacks are missing. Both are filled in
    for the real CUDA graph (``ptc.cudagraph.cuda_graph.cuda_support``) and are
    empty for a backend emulated from the flags alone.
    """

    while_nodes: bool
    if_nodes: bool
    if_else_nodes: bool = False  # one IF node with two bodies (CUDA >= 12.8)
    switch_nodes: bool = False  # SWITCH nodes (CUDA >= 12.8)
    cuda_version: Optional[Tuple[int, int]] = None
    device: Optional[str] = None  # device type a graph replays ("cuda"); None: any (simulator)
    missing: str = ""
    nodes_detail: str = ""

    @property
    def conditional_nodes(self) -> bool:
        return self.cuda_version is None or self.cuda_version >= (12, 4)


_HOST_READ_OPS = {"aten::_local_scalar_dense", "aten::item", "aten::is_nonzero", "aten::equal"}


def _op_name(target: Any) -> str:
    schema = getattr(target, "_schema", None)
    if schema is not None:
        return schema.name
    return str(getattr(target, "__name__", target))


def _tags(target: Any) -> Tuple[Any, ...]:
    return tuple(getattr(target, "tags", ()) or ())


def _is_collective(target: Any) -> bool:
    ns = getattr(target, "namespace", "")
    name = _op_name(target)
    return ns in ("_c10d_functional", "c10d", "c10d_functional", "_dtensor") or "all_reduce" in name


def _mutated_inputs(target: Any, node: fx.Node, graph_inputs: set) -> List[str]:
    """Graph inputs that ``node`` writes (through an in-place/out argument)."""
    schema = getattr(target, "_schema", None)
    if schema is None:
        return []
    hits = []
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
        root = _view_root(value)
        if root is not None and root in graph_inputs:
            hits.append(root.name)
    return hits


def _view_root(value: Any) -> Optional[fx.Node]:
    """Follow view ops back to the node that owns the storage."""
    seen = 0
    while isinstance(value, fx.Node) and seen < 64:
        target = value.target
        schema = getattr(target, "_schema", None)
        if value.op != "call_function" or schema is None or not schema.returns:
            return value
        alias = schema.returns[0].alias_info
        if alias is None or alias.is_write or not value.args:
            return value
        value = value.args[0]
        seen += 1
    return value if isinstance(value, fx.Node) else None


def node_reasons(gm: fx.GraphModule, where: str, device: Optional[str] = None) -> List[str]:
    """Reasons found in the ops of ``gm`` (nested loops and conds are checked as steps).

    With ``device`` (e.g. "cuda"), a value on another device is a reason too: a
    graph replays only that device's work, CPU ops would run once, at capture."""
    reasons: List[str] = []
    graph_inputs = {n for n in gm.graph.nodes if n.op == "placeholder"}
    for n in gm.graph.nodes:
        if device is not None and n.op in ("placeholder", "call_function"):
            val = n.meta.get("val")
            if isinstance(val, torch.Tensor) and val.device.type != device:
                reasons.append(
                    f"unsupported carry: {where} has {n.name} on {val.device}; a {device} graph "
                    f"replays only {device} work (move it to {device})"
                )
        if n.op in ("call_function", "call_method") and _compat.has_unbacked_symbols(n.meta.get("val")):
            # Dynamo's graph reads a tensor with Tensor.item() (a call_method) and computes on the
            # result in Python (``u0 < 3``): a graph would replay the value read at capture
            reasons.append(f"host read: {where} computes {n.name} on the host from a device value")
            continue
        if n.op != "call_function":
            continue
        target = n.target
        if is_while_loop(n) or is_cond(n):
            continue  # planned as nested steps, checked there
        if isinstance(target, torch._ops.HigherOrderOperator):
            reasons.append(f"unsupported carry: {where} contains higher-order op {target.name()}")
            continue
        name = _op_name(target)
        tags = _tags(target)
        if name in _HOST_READ_OPS or torch.Tag.data_dependent_output in tags:
            reasons.append(f"host read: {where} reads a device value on the host ({name})")
        elif torch.Tag.dynamic_output_shape in tags and not integer_indexing(target, n.args, meta_val):
            reasons.append(f"host read: {where} has a data-dependent output shape ({name})")
        if torch.Tag.nondeterministic_seeded in tags:
            reasons.append(f"RNG in body: {where} draws random numbers ({name})")
        if _is_collective(target):
            reasons.append(f"collective: {where} calls {name}")
        for inp in _mutated_inputs(target, n, graph_inputs):
            reasons.append(f"input mutation: {where} writes its input {inp} ({name})")
    return _dedupe(reasons)


def integer_indexing(target: Any, args: Sequence[Any], value_of: Any = None) -> bool:
    """Whether ``target(*args)`` is ``aten.index.Tensor`` (``x[i]``, a gather) with integer
    index tensors only: tagged ``dynamic_output_shape`` for the boolean-mask form, but its
    output shape is static and it reads nothing on the host when no index is bool / uint8.
    ``value_of`` maps an argument to its tensor (``meta_val`` for FX nodes)."""
    if _op_name(target) not in ("aten::index", "aten::_unsafe_index"):
        return False
    if len(args) < 2 or not isinstance(args[1], (list, tuple)):
        return False
    for idx in args[1]:
        if idx is None:
            continue
        val = value_of(idx) if value_of is not None else idx
        if not isinstance(val, torch.Tensor) or val.dtype in (torch.bool, torch.uint8):
            return False
    return True


def _dedupe(items: Iterable[str]) -> List[str]:
    out: List[str] = []
    for x in items:
        if x not in out:
            out.append(x)
    return out


def _symbolic(val: Any) -> bool:
    if not isinstance(val, torch.Tensor):
        return False
    return any(not isinstance(s, int) for s in val.shape)


def _carry_reasons(loop: Loop) -> List[str]:
    reasons = []
    devices = set()
    for i, c in enumerate(loop.carried):
        val = meta_val(c)
        if not isinstance(c, fx.Node) or (val is not None and not isinstance(val, torch.Tensor)):
            reasons.append(f"unsupported carry: carried input {i} is not a tensor ({type(val or c).__name__})")
        elif _symbolic(val):
            reasons.append(f"unsupported carry: carried input {i} has a symbolic shape {tuple(val.shape)}")
        elif val is not None:
            devices.add(val.device)
    if len(devices) > 1:
        reasons.append(f"unsupported carry: carries live on several devices {sorted(map(str, devices))}")
    pred = loop.cond.output[0] if loop.cond.output else None
    reasons += _pred_reasons(pred, f"{loop.name} cond")
    return reasons


def _pred_reasons(pred: Any, where: str) -> List[str]:
    val = meta_val(pred)
    if not isinstance(pred, fx.Node):
        return [f"unsupported carry: {where} predicate is the constant {pred!r}, not a device tensor"]
    if val is None:
        return []
    if not isinstance(val, torch.Tensor) or val.dtype != torch.bool or val.numel() != 1:
        desc = f"{val.dtype}{list(val.shape)}" if isinstance(val, torch.Tensor) else type(val).__name__
        return [f"unsupported carry: {where} predicate must be a one-element bool tensor, got {desc}"]
    return []


def _output_reasons(branch: Branch) -> List[str]:
    reasons = []
    val = meta_val(branch.node)
    if val is None:
        return [f"unsupported carry: {branch.name} has no shape metadata for its outputs"]
    for i, v in enumerate(val):
        if not isinstance(v, torch.Tensor):
            reasons.append(f"unsupported carry: {branch.name} output {i} is not a tensor")
        elif _symbolic(v):
            reasons.append(f"unsupported carry: {branch.name} output {i} has a symbolic shape")
    return reasons


def annotate(block: Block, support: Support) -> Block:
    """Fill ``reasons`` on every loop and branch of ``block`` (innermost first)."""
    for step in block.steps:
        if isinstance(step, Loop):
            annotate(step.cond, support)
            annotate(step.body, support)
            r: List[str] = _support_reasons(support, "while")
            if step.node.kwargs:
                r.append(
                    f"input mutation: while_loop mutates its inputs "
                    f"({', '.join(f'{k}={v!r}' for k, v in step.node.kwargs.items())})"
                )
            r += _carry_reasons(step)
            r += _block_reasons(step.cond, f"{step.name} cond", support)
            r += _block_reasons(step.body, f"{step.name} body", support)
            step.reasons = _dedupe(r)
        elif isinstance(step, Branch):
            annotate(step.true, support)
            annotate(step.false, support)
            r = _support_reasons(support, "if")
            r += _pred_reasons(step.pred, step.name)
            r += _output_reasons(step)
            r += _block_reasons(step.true, f"{step.name} true branch", support)
            r += _block_reasons(step.false, f"{step.name} false branch", support)
            pred_val = meta_val(step.pred)
            if support.device and isinstance(pred_val, torch.Tensor) and pred_val.device.type != support.device:
                r.append(f"unsupported carry: {step.name} predicate is on {pred_val.device}, not {support.device}")
            step.reasons = _dedupe(r)
    return block


def _block_reasons(block: Block, where: str, support: Support) -> List[str]:
    reasons = node_reasons(block.gm, where, support.device)
    for step in block.steps:
        if isinstance(step, (Loop, Branch)) and not step.eligible:
            reasons.append(f"nested: {step.name} inside {where} is ineligible ({step.reasons[0]})")
    return reasons


def _support_reasons(support: Support, kind: str) -> List[str]:
    if support.missing:
        return [f"no CUDA: {support.missing}"]
    if not support.conditional_nodes:
        major, minor = support.cuda_version  # type: ignore[misc]
        return [f"CUDA < 12.4: conditional nodes need CUDA 12.4, this torch is built with {major}.{minor}"]
    if (support.while_nodes if kind == "while" else support.if_nodes):
        return []
    where = support.nodes_detail or f"the emulated graph backend has none (Support({kind}_nodes=False))"
    return [f"no binding: no {kind.upper()} nodes here: {where}"]


def segment_reasons(seg: Segment, support: Optional[Support] = None) -> List[str]:
    """Reasons a segment cannot go into a graph (host reads, unknown HOPs, other devices)."""
    device = support.device if support is not None else None
    return [
        r
        for r in node_reasons(seg.module, seg.name, device)
        if r.startswith("host read") or r.startswith("unsupported carry")
    ]
