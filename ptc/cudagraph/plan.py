"""The capture plan: an FX graph cut into straight-line segments and control-flow steps.

``build_plan(gm)`` walks an aten-level FX graph (what AOTAutograd hands a
forward compiler, or what ``make_fx`` returns) and keeps the structure the
CUDA-graph capture needs:

* ``Segment``: a maximal run of ordinary ops between control-flow nodes, made
  into its own ``GraphModule`` and later compiled (Inductor) or run as is.
* ``Loop``: a ``higher_order.while_loop`` node; its cond and body graphs are
  planned recursively (``Block``), so a loop inside a loop is a ``Loop`` in the
  body's steps.
* ``Branch``: a ``higher_order.cond`` node with its two branches planned the
  same way (``ptc.switch`` traces to a tree of these).

Every ``Loop`` and ``Branch`` carries an eligibility verdict
(:mod:`ptc.cudagraph.eligibility`). The executor captures eligible steps as
conditional nodes and runs ineligible ones on the host (the un-graphed path).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import torch
import torch.fx as fx

from ptc.errors import PtcTypeError

__all__ = ["Segment", "Loop", "Branch", "Block", "Step", "build_plan", "is_while_loop", "is_cond"]


def written_arguments(schema: Any, args: Sequence[Any], kwargs: Dict[str, Any]) -> List[Any]:
    """The values an op writes, by its schema: ``self`` of an in-place op, ``out=``
    (``args`` / ``kwargs`` as the op is called, or as an FX node holds them)."""
    written = []
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            written.append(kwargs.get(arg.name, args[i] if i < len(args) and not arg.kwarg_only else None))
    return written


def aliased_argument(schema: Any, args: Sequence[Any], kwargs: Dict[str, Any]) -> Any:
    """The argument whose memory the op's first result is (a view's base, an in-place op's
    ``self``, an ``out=`` argument), or None when the result is new memory."""
    if not schema.returns or schema.returns[0].alias_info is None:
        return None
    sets = schema.returns[0].alias_info.before_set
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is not None and arg.alias_info.before_set & sets:
            return kwargs.get(arg.name, args[i] if i < len(args) and not arg.kwarg_only else None)
    return None


def is_while_loop(node: fx.Node) -> bool:
    return node.op == "call_function" and node.target is torch.ops.higher_order.while_loop


def is_cond(node: fx.Node) -> bool:
    return node.op == "call_function" and node.target is torch.ops.higher_order.cond


def _is_control(node: fx.Node) -> bool:
    return is_while_loop(node) or is_cond(node)


@dataclass
class Segment:
    """Straight-line ops between control-flow nodes.

    ``module`` takes ``inputs`` (values from outside the segment, in order) and
    returns the tuple of ``outputs`` (values used after it). ``fn`` is what runs:
    the module itself, or its Inductor-compiled form once compiled.
    """

    name: str
    nodes: List[fx.Node]
    inputs: List[fx.Node]
    outputs: List[fx.Node]
    module: fx.GraphModule
    fn: Callable[..., Any] = None  # type: ignore[assignment]
    compiled: bool = False
    compile_note: str = ""  # why the segment compiler left it as aten ops ("" if not tried/failed)

    @property
    def ops(self) -> List[str]:
        return [str(n.target) for n in self.nodes if n.op == "call_function"]


@dataclass
class Loop:
    """A ``while_loop``: ``carried`` and ``additional`` name the node's operands
    (fx.Node or constants); ``results`` maps output index -> getitem node."""

    name: str
    node: fx.Node
    cond: "Block"
    body: "Block"
    carried: List[Any]
    additional: List[Any]
    results: Dict[int, fx.Node]
    reasons: List[str] = field(default_factory=list)
    # One compiled step (body, write-back into the carries, next predicate) used in
    # capture instead of the three; ``step_note`` says why there is none.
    step: Optional[Callable[..., Any]] = None
    step_note: str = ""

    @property
    def eligible(self) -> bool:
        return not self.reasons


@dataclass
class Branch:
    """A ``cond``: ``pred`` and ``operands`` as in the node; ``results`` as for Loop."""

    name: str
    node: fx.Node
    pred: Any
    true: "Block"
    false: "Block"
    operands: List[Any]
    results: Dict[int, fx.Node]
    reasons: List[str] = field(default_factory=list)

    @property
    def eligible(self) -> bool:
        return not self.reasons


Step = Union[Segment, Loop, Branch]


@dataclass
class Block:
    """A planned graph: ``placeholders`` in order, ``steps`` in program order and
    ``output`` (the output node's arguments, flattened: nodes or constants)."""

    name: str
    gm: fx.GraphModule
    placeholders: List[fx.Node]
    steps: List[Step]
    output: List[Any]

    def walk(self):
        """Every step of this block and of the blocks nested in it, depth first."""
        for step in self.steps:
            yield step
            for sub in _sub_blocks(step):
                yield from sub.walk()

    @property
    def loops(self) -> List[Loop]:
        return [s for s in self.walk() if isinstance(s, Loop)]

    @property
    def branches(self) -> List[Branch]:
        return [s for s in self.walk() if isinstance(s, Branch)]

    @property
    def segments(self) -> List[Segment]:
        return [s for s in self.walk() if isinstance(s, Segment)]


def _sub_blocks(step: Step) -> List[Block]:
    if isinstance(step, Loop):
        return [step.cond, step.body]
    if isinstance(step, Branch):
        return [step.true, step.false]
    return []


def _flat_output(gm: fx.GraphModule) -> List[Any]:
    out = next(n for n in gm.graph.nodes if n.op == "output")
    arg = out.args[0]
    if isinstance(arg, (list, tuple)):
        return list(arg)
    return [arg]


class _Counter:
    def __init__(self) -> None:
        self.n: Dict[str, int] = {}

    def __call__(self, kind: str) -> str:
        i = self.n.get(kind, 0)
        self.n[kind] = i + 1
        return f"{kind}{i}"


def build_plan(gm: fx.GraphModule, name: str = "main") -> Block:
    """Plan ``gm`` (an aten-level ``GraphModule``): segments, loops and branches.

    Eligibility is not decided here (see ``eligibility.annotate``)."""
    if not isinstance(gm, fx.GraphModule):
        raise PtcTypeError(
            f"build_plan: gm must be a torch.fx.GraphModule (an aten-level graph from "
            f"make_fx or AOTAutograd), got {type(gm).__name__}"
        )
    return _plan_block(gm, name, _Counter())


def _plan_block(gm: fx.GraphModule, name: str, counter: _Counter) -> Block:
    nodes = list(gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    body = [n for n in nodes if n.op not in ("placeholder", "output")]
    control_users = set()
    for n in body:
        if _is_control(n):
            control_users.add(n)
    # getitem nodes that unpack a control-flow result belong to that step
    owned_getitems: Dict[fx.Node, Dict[int, fx.Node]] = {n: {} for n in control_users}
    for n in body:
        if (
            n.op == "call_function"
            and n.target is operator.getitem
            and isinstance(n.args[0], fx.Node)
            and n.args[0] in control_users
        ):
            owned_getitems[n.args[0]][n.args[1]] = n
    owned = {g for d in owned_getitems.values() for g in d.values()}
    subgraph_attrs = set()
    for n in control_users:
        for a in n.args:
            if isinstance(a, fx.Node) and a.op == "get_attr":
                subgraph_attrs.add(a)

    steps: List[Step] = []
    run: List[fx.Node] = []

    def flush() -> None:
        if any(n.op == "call_function" or n.op == "get_attr" for n in run):
            steps.append(_make_segment(gm, list(run), counter(f"{name}.seg")))
        run.clear()

    for n in body:
        if n in owned or n in subgraph_attrs:
            continue
        if is_while_loop(n):
            flush()
            steps.append(_make_loop(gm, n, owned_getitems[n], counter))
        elif is_cond(n):
            flush()
            steps.append(_make_branch(gm, n, owned_getitems[n], counter))
        else:
            run.append(n)
    flush()
    return Block(name, gm, placeholders, steps, _flat_output(gm))


def _submodule(gm: fx.GraphModule, node: Any) -> fx.GraphModule:
    if not (isinstance(node, fx.Node) and node.op == "get_attr"):
        raise PtcTypeError(f"expected a subgraph get_attr node, got {node!r}")
    mod = gm
    for part in str(node.target).split("."):
        mod = getattr(mod, part)
    return mod


def _make_loop(gm: fx.GraphModule, n: fx.Node, results: Dict[int, fx.Node], counter: _Counter) -> Loop:
    cond_node, body_node, carried, additional = n.args[:4]
    name = counter("loop")
    return Loop(
        name=name,
        node=n,
        cond=_plan_block(_submodule(gm, cond_node), f"{name}.cond", counter),
        body=_plan_block(_submodule(gm, body_node), f"{name}.body", counter),
        carried=list(carried),
        additional=list(additional),
        results=results,
    )


def _make_branch(gm: fx.GraphModule, n: fx.Node, results: Dict[int, fx.Node], counter: _Counter) -> Branch:
    pred, true_node, false_node, operands = n.args[:4]
    name = counter("cond")
    return Branch(
        name=name,
        node=n,
        pred=pred,
        true=_plan_block(_submodule(gm, true_node), f"{name}.true", counter),
        false=_plan_block(_submodule(gm, false_node), f"{name}.false", counter),
        operands=list(operands),
        results=results,
    )


def _make_segment(gm: fx.GraphModule, nodes: Sequence[fx.Node], name: str) -> Segment:
    inside = set(nodes)
    inputs: List[fx.Node] = []
    for n in nodes:
        for a in n.all_input_nodes:
            if a not in inside and a not in inputs:
                inputs.append(a)
    outputs = [n for n in nodes if any(u not in inside for u in n.users)]
    graph = fx.Graph()
    env: Dict[fx.Node, fx.Node] = {}
    for a in inputs:
        p = graph.placeholder(a.name)
        p.meta.update(a.meta)
        env[a] = p
    for n in nodes:
        env[n] = graph.node_copy(n, lambda a: env[a])
    graph.output(tuple(env[o] for o in outputs))
    module = fx.GraphModule(gm, graph, class_name=name.replace(".", "_"))
    return Segment(name, list(nodes), inputs, outputs, module, fn=module)


def meta_val(arg: Any) -> Optional[Any]:
    """The fake value an FX node carries (``node.meta['val']``), or None."""
    if isinstance(arg, fx.Node):
        return arg.meta.get("val")
    return None


@dataclass
class SwitchTree:
    """A tree of conds on ``index < m`` (what ``ptc.switch`` traces to), flattened:
    ``leaves[k]`` runs when exactly ``k`` of the ``thresholds`` are ``<= index``.
    ``position`` is the index's place among the root cond's operands; leaf ``k``
    takes the root operands ``args[k]`` (positions; tracing may reorder them)."""

    position: int
    thresholds: List[int]
    leaves: List[Block]
    args: List[List[Any]]  # a position, or a Constant an inner cond passes (a size traced as a number)


@dataclass(frozen=True)
class Constant:
    """A number an inner cond of a switch tree passes to its branches as an operand."""

    value: Any


def switch_tree(branch: Branch) -> Optional[SwitchTree]:
    """Recognise ``branch`` as the root of an index-threshold cond tree, or None.

    Conservative: an inner cond must be all its block does (one ``lt`` on the
    block's copy of the index, then the cond on the block's inputs, its results
    returned unchanged), so one SWITCH node over the leaves runs the same code."""
    first = _threshold(branch.pred)
    if first is None or first[0] not in branch.operands:
        return None
    position = branch.operands.index(first[0])
    identity = list(range(len(branch.operands)))
    flat = _flatten(branch, identity, position, first[1])
    if flat is None:
        return None
    thresholds, leaves = flat
    if len(leaves) < 3 or any(a >= b for a, b in zip(thresholds, thresholds[1:])):
        return None  # a plain if/else, or not a search tree
    return SwitchTree(position, thresholds, [b for b, _ in leaves], [m for _, m in leaves])


def _threshold(pred: Any) -> Optional[tuple]:
    if (
        isinstance(pred, fx.Node)
        and pred.op == "call_function"
        and pred.target is torch.ops.aten.lt.Scalar
        and isinstance(pred.args[1], int)
        and not isinstance(pred.args[1], bool)
    ):
        return pred.args[0], pred.args[1]
    return None


def _flatten(branch: Branch, mapping: List[int], position: int, m: int) -> Optional[tuple]:
    """``(thresholds, [(leaf block, root operand positions)])`` in index order.
    ``mapping[j]``: the root operand that ``branch.operands[j]`` is."""
    thresholds: List[int] = []
    leaves: List[tuple] = []
    for side, block in enumerate((branch.true, branch.false)):
        # block.placeholders[j] is branch.operands[j], i.e. root operand mapping[j]
        inner = _inner_switch(block, mapping, position)
        if inner is None:
            leaves.append((block, list(mapping)))
        else:
            sub = _flatten(*inner, position, _threshold(inner[0].pred)[1])
            if sub is None:
                return None
            thresholds += sub[0]
            leaves += sub[1]
        if side == 0:
            thresholds.append(m)
    return thresholds, leaves


def _inner_switch(block: Block, mapping: List[int], position: int) -> Optional[tuple]:
    """``(inner branch, its operand mapping)`` when ``block`` is just
    ``cond(index < m, ..., inputs)`` on the block's copy of the root index."""
    if len(block.steps) != 2 or not isinstance(block.steps[0], Segment) or not isinstance(block.steps[1], Branch):
        return None
    seg, inner = block.steps
    calls = [n for n in seg.nodes if n.op == "call_function"]
    t = _threshold(inner.pred)
    if len(calls) != 1 or t is None or calls[0] is not inner.pred:
        return None
    where = {p: mapping[j] for j, p in enumerate(block.placeholders)}
    if where.get(t[0]) != position or any(isinstance(o, fx.Node) and o not in where for o in inner.operands):
        return None
    n_out = len(block.output)
    if sorted(inner.results) != list(range(n_out)) or [inner.results[i] for i in range(n_out)] != block.output:
        return None
    return inner, [where[o] if isinstance(o, fx.Node) else Constant(o) for o in inner.operands]


def expanded_dims(t: torch.Tensor) -> List[int]:
    """The dimensions ``t`` expands (stride 0, more than one element): one element of memory."""
    return [d for d, (n, st) in enumerate(zip(t.shape, t.stride())) if st == 0 and n > 1]


def copy_into_expanded(dst: torch.Tensor, src: torch.Tensor, expanded: Sequence[int]) -> None:
    """``dst.copy_(src)`` for a ``dst`` that expands ``expanded``: only their first element
    is written (writing them all would write one memory location many times)."""
    part = tuple(slice(0, 1) if d in expanded else slice(None) for d in range(dst.dim()))
    dst[part].copy_(src[part])
