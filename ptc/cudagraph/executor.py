"""Running a plan: warm up, capture into graphs with conditional nodes, replay.

``BlockProgram`` runs one planned block. Its steps are cut into *regions*:
maximal runs of capturable steps (segments, eligible loops and conds) become
one graph each; an ineligible step runs on the host between them (the
un-graphed path: a Python ``while`` on the predicate, one host sync per
iteration). A host-run loop's cond and body are ``BlockProgram`` s again, so an
eligible loop nested in an ineligible one still gets its own graph.

Per call, a ``BlockProgram``:

1. ``warmup`` calls (default 1) run every step on the host, compiling
   segments and also running untaken cond branches and zero-trip loop bodies
   once (lazy initialisation must not happen during capture);
2. the next call captures each region into a new graph (``graph_factory()``):
   region inputs are copied into static buffers allocated before capture; a
   loop becomes SetHandle + WHILE node whose body ends with a write-back into
   the static carries and a re-evaluated predicate (with Inductor segments, a
   straight-line loop's body, write-back and predicate are one compiled step,
   compiled and run once during warmup, that writes the carries in place); a tree of conds on
   ``index < m`` (``ptc.switch``) becomes one SWITCH node where the graph has
   them (index counted on the device); another cond becomes one IF/ELSE node
   where the graph has it, else two IF nodes on ``pred`` / ``not pred``; all
   branches write one set of output buffers allocated before the node;
3. later calls copy the new inputs into the static buffers and replay.

After each replay, a region input that the region updates in place (an
in-place op or ``out=`` on it or on a view of it) is copied from its static
buffer back into the caller's tensor, as eager would have updated it.

The graph is anything with the ``SimGraph`` / ``CudaGraph`` interface.
"""

from __future__ import annotations

import logging
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx as fx

from ptc.cudagraph.eligibility import segment_reasons
from ptc.cudagraph.plan import (
    Block,
    Branch,
    Constant,
    Loop,
    Segment,
    Step,
    aliased_argument,
    copy_into_expanded,
    expanded_dims,
    meta_val,
    switch_tree,
    written_arguments,
)
from ptc.errors import CaptureError

__all__ = ["BlockProgram", "Region", "compile_segments"]

log = logging.getLogger("ptc.cudagraph")


def _get(env: Dict[fx.Node, Any], a: Any) -> Any:
    return env[a] if isinstance(a, fx.Node) else a


def _as_list(result: Any) -> List[Any]:
    return list(result) if isinstance(result, (list, tuple)) else [result]


# --- one step, in each mode ------------------------------------------------------


class _Runner:
    """Executes steps; shared by host execution, warmup and capture."""

    def __init__(self, segment_compiler: Optional[Callable[[Segment, Sequence[Any]], None]]) -> None:
        self.segment_compiler = segment_compiler

    def call_segment(self, seg: Segment, args: Sequence[Any], graph: Any = None) -> List[Any]:
        if graph is not None:
            return _as_list(
                graph.launch(seg.fn, args, opaque=seg.compiled, reads=_held_tensors(seg.module), shape_fn=seg.module)
            )
        if self.segment_compiler is not None and not seg.compiled and not seg.compile_note:
            self.segment_compiler(seg, args)
        return _as_list(seg.fn(*args))

    # host -----------------------------------------------------------------
    def host_block(self, block: Block, args: Sequence[Any], warmup: bool) -> List[Any]:
        env = dict(zip(block.placeholders, args))
        for step in block.steps:
            self.host_step(step, env, warmup)
        return [_get(env, o) for o in block.output]

    def host_step(self, step: Step, env: Dict[fx.Node, Any], warmup: bool) -> None:
        if isinstance(step, Segment):
            outs = self.call_segment(step, [_get(env, a) for a in step.inputs])
            env.update(zip(step.outputs, outs))
        elif isinstance(step, Loop):
            _bind(step, env, self.host_loop(step, env, warmup))
        else:
            _bind(step, env, self.host_branch(step, env, warmup))

    def host_loop(self, loop: Loop, env: Dict[fx.Node, Any], warmup: bool) -> List[Any]:
        vals = [_get(env, c) for c in loop.carried]
        extra = [_get(env, a) for a in loop.additional]
        trips = 0
        while bool(self.host_block(loop.cond, vals + extra, warmup)[0]):  # host sync
            vals = self.host_block(loop.body, vals + extra, warmup)
            trips += 1
        if warmup and trips == 0:  # initialise the body's kernels once anyway
            _speculative(loop.body.name, lambda: self.host_block(loop.body, _clone_all(vals) + extra, warmup))
        fuse = getattr(self.segment_compiler, "loop_step", None)
        if warmup and fuse is not None and loop.step is None and not loop.step_note:
            fuse(loop, _clone_all(vals) + extra)
        return vals

    def host_branch(self, br: Branch, env: Dict[fx.Node, Any], warmup: bool) -> List[Any]:
        ops = [_get(env, o) for o in br.operands]
        taken = bool(_get(env, br.pred))  # host sync
        out = self.host_block(br.true if taken else br.false, ops, warmup)
        if warmup:
            other = br.false if taken else br.true
            _speculative(other.name, lambda: self.host_block(other, _clone_all(ops), warmup))
        return out

    # capture --------------------------------------------------------------
    def capture_block(self, block: Block, args: Sequence[Any], graph: Any) -> List[Any]:
        env = dict(zip(block.placeholders, args))
        for step in block.steps:
            self.capture_step(step, env, graph)
        return [_get(env, o) for o in block.output]

    def capture_step(self, step: Step, env: Dict[fx.Node, Any], graph: Any) -> None:
        if isinstance(step, Segment):
            outs = self.call_segment(step, [_get(env, a) for a in step.inputs], graph)
            env.update(zip(step.outputs, outs))
        elif isinstance(step, Loop):
            _bind(step, env, self.capture_loop(step, env, graph))
        else:
            _bind(step, env, self.capture_branch(step, env, graph))

    def capture_loop(self, loop: Loop, env: Dict[fx.Node, Any], graph: Any) -> List[Any]:
        if not loop.eligible:  # planning keeps these out of graphs; a bug if reached
            raise CaptureError(f"{loop.name} is ineligible for capture: {loop.reasons[0]}")
        extra = [_get(env, a) for a in loop.additional]
        # Static loop state, re-initialised from the inputs on every replay.
        state = [_get(env, c).clone() for c in loop.carried]
        pred = self.capture_block(loop.cond, state + extra, graph)[0]
        graph.begin_while(pred)
        try:
            if loop.step is not None:  # body + write-back + next predicate, one compiled call
                pred = _as_list(
                    graph.launch(loop.step, state + extra, opaque=True, shape_fn=_loop_step_function(loop))
                )[0]
            else:
                out = self.capture_block(loop.body, state + extra, graph)
                _write_back(state, out)
                pred = self.capture_block(loop.cond, state + extra, graph)[0]
            graph.set_handle(pred)
        finally:
            graph.end_conditional()
        return state

    def capture_branch(self, br: Branch, env: Dict[fx.Node, Any], graph: Any) -> List[Any]:
        if not br.eligible:
            raise CaptureError(f"{br.name} is ineligible for capture: {br.reasons[0]}")
        pred = _get(env, br.pred)
        ops = [_get(env, o) for o in br.operands]
        # One set of output buffers, allocated before the node, written by either branch.
        outs = [torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=v.device) for v in meta_val(br.node)]

        def body(block: Block, args: Sequence[Any] = ops) -> None:
            for o, r in zip(outs, self.capture_block(block, args, graph)):
                if o is not r:
                    o.copy_(r)

        tree = switch_tree(br) if graph.support.switch_nodes else None
        if tree is not None:
            # One SWITCH node over the tree's leaves; the index is counted on the device.
            index = ops[tree.position]
            flat_index = sum((index >= m).to(torch.int32) for m in tree.thresholds)
            graph.begin_switch(flat_index, len(tree.leaves))
            try:
                for k, (leaf, positions) in enumerate(zip(tree.leaves, tree.args)):
                    if k:
                        graph.next_body()
                    body(leaf, [p.value if isinstance(p, Constant) else ops[p] for p in positions])
            finally:
                graph.end_conditional()
        elif graph.support.if_else_nodes:
            graph.begin_if(pred, with_else=True)
            try:
                body(br.true)
                graph.next_body()
                body(br.false)
            finally:
                graph.end_conditional()
        else:
            not_pred = torch.logical_not(pred)  # before either body runs
            for p, block in ((pred, br.true), (not_pred, br.false)):
                graph.begin_if(p)
                try:
                    body(block)
                finally:
                    graph.end_conditional()
        return outs


def _speculative(name: str, run: Callable[[], Any]) -> None:
    """Run a block that eager would not run (an untaken branch, a zero-trip loop body) for
    its lazy initialisation only. Its operands may be values the predicate guards against
    (an index out of range): an error there is not the program's, so it is logged, not raised.
    (On a GPU such a run can also hit a device-side assert; a safer warm-up compiles these
    blocks without running them.)"""
    try:
        run()
    except Exception as e:  # noqa: BLE001
        log.info("ptc.cudagraph: warm-up run of %s (not run by eager) failed, skipped: %s: %s",
                 name, type(e).__name__, e)


def _bind(step: Any, env: Dict[fx.Node, Any], values: List[Any]) -> None:
    env[step.node] = tuple(values)
    for i, g in step.results.items():
        env[g] = values[i]


def _clone_all(vals: Sequence[Any]) -> List[Any]:
    return [v.clone() if isinstance(v, torch.Tensor) else v for v in vals]


def _write_back(state: List[torch.Tensor], out: Sequence[Any]) -> None:
    """Copy a loop body's outputs into the static carries.

    An output that *is* its own carry needs nothing. An output that shares
    storage with another carry (a body returning ``(b, a)``, or a view of a
    carry) is first copied aside, otherwise writing one carry would clobber the
    source of another."""
    storages = {s.untyped_storage().data_ptr() for s in state}
    staged = []
    for s, o in zip(state, out):
        if not isinstance(o, torch.Tensor):
            raise CaptureError(f"while_loop body returned {type(o).__name__}, a tensor was expected")
        same = o.data_ptr() == s.data_ptr() and o.stride() == s.stride() and o.shape == s.shape
        if same:
            staged.append(None)
        elif o.untyped_storage().data_ptr() in storages:
            staged.append(o.clone())
        else:
            staged.append(o)
    for s, o in zip(state, staged):
        if o is not None:
            s.copy_(o)


# --- regions ----------------------------------------------------------------------


def _step_uses(step: Step) -> List[fx.Node]:
    if isinstance(step, Segment):
        return list(step.inputs)
    if isinstance(step, Loop):
        vals = list(step.carried) + list(step.additional)
    else:
        vals = [step.pred] + list(step.operands)
    return [v for v in vals if isinstance(v, fx.Node)]


def _step_defs(step: Step) -> List[fx.Node]:
    if isinstance(step, Segment):
        return list(step.nodes)
    return [step.node] + list(step.results.values())


def capturable(step: Step, support: Any = None) -> Tuple[bool, List[str]]:
    if isinstance(step, Segment):
        reasons = segment_reasons(step, support)
        return not reasons, reasons
    return step.eligible, list(step.reasons)


@dataclass
class Region:
    """Steps captured together into one graph (``host`` is None) or one step run on
    the host (``host`` is that step's sub-programs)."""

    steps: List[Step]
    inputs: List[fx.Node] = field(default_factory=list)
    outputs: List[fx.Node] = field(default_factory=list)
    graphed: bool = True
    host: Optional[Dict[str, "BlockProgram"]] = None
    graph: Any = None
    static_inputs: List[torch.Tensor] = field(default_factory=list)
    static_outputs: List[Any] = field(default_factory=list)
    updated: List[int] = field(default_factory=list)  # positions in ``inputs`` written in place
    addresses: List[Optional[int]] = field(default_factory=list)  # a parameter's data_ptr at capture


class BlockProgram:
    """One block, as graphs and host steps (see the module docstring)."""

    def __init__(
        self,
        block: Block,
        graph_factory: Optional[Callable[[], Any]],
        segment_compiler: Optional[Callable[[Segment, Sequence[Any]], None]] = None,
        warmup: int = 1,
        runner: Optional[_Runner] = None,
        support: Any = None,
    ) -> None:
        self.block = block
        self.support = support
        self.graph_factory = graph_factory
        self.warmup = warmup
        self.runner = runner or _Runner(segment_compiler)
        self.calls = 0
        self.regions = self._regions()
        #: why every call runs on the host (an update the static buffers cannot express), or ""
        self.ungraphed = _update_through_outside_view(self.regions)
        if self.ungraphed and self.graph_factory is not None:
            log.info("ptc.cudagraph: %s runs un-graphed: %s", block.name, self.ungraphed)
            self.graph_factory = None
            self.regions = self._regions()
        self._updates_inputs = any(r.updated for r in self.regions) or bool(
            _written_roots(self.block.steps) & set(self.block.placeholders)
        )

    def _regions(self) -> List[Region]:
        regions: List[Region] = []
        for step in self.block.steps:
            ok, reasons = capturable(step, self.support)
            if self.graph_factory is None:
                ok = False
            if ok and regions and regions[-1].graphed:
                regions[-1].steps.append(step)
            elif ok:
                regions.append(Region([step]))
            else:
                if isinstance(step, Segment) and reasons:
                    log.info("ptc.cudagraph: %s runs outside the graph: %s", step.name, "; ".join(reasons))
                regions.append(Region([step], graphed=False, host=self._host_programs(step)))
        later_uses: List[set] = []
        used_after: set = {o for o in self.block.output if isinstance(o, fx.Node)}
        for region in reversed(regions):
            later_uses.append(set(used_after))
            for step in region.steps:
                used_after.update(_step_uses(step))
        later_uses.reverse()
        for region, after in zip(regions, later_uses):
            defined: List[fx.Node] = []
            for step in region.steps:
                for u in _step_uses(step):
                    if u not in defined and u not in region.inputs:
                        region.inputs.append(u)
                defined += _step_defs(step)
            region.outputs = [d for d in defined if d in after]
            written = _written_roots(region.steps)
            region.updated = [k for k, node in enumerate(region.inputs) if node in written]
        return regions

    def _host_programs(self, step: Step) -> Optional[Dict[str, "BlockProgram"]]:
        def sub(block: Block) -> "BlockProgram":
            return BlockProgram(
                block, self.graph_factory, warmup=self.warmup, runner=self.runner, support=self.support
            )

        if isinstance(step, Loop):
            return {"cond": sub(step.cond), "body": sub(step.body)}
        if isinstance(step, Branch):
            return {"true": sub(step.true), "false": sub(step.false)}
        return None

    @property
    def graphs(self) -> List[Any]:
        """The graphs captured so far (this block's and nested host programs')."""
        out = []
        for r in self.regions:
            if r.graph is not None:
                out.append(r.graph)
            for p in (r.host or {}).values():
                out += p.graphs
        return out

    def __call__(self, *args: Any) -> List[Any]:
        phase = "warmup" if self.calls < self.warmup else "run"
        self.calls += 1
        env: Dict[fx.Node, Any] = dict(zip(self.block.placeholders, args))
        if phase == "run" and self._updates_inputs and _overlapping(args):
            # one static buffer per input would split memory the update must share
            log.info(
                "ptc.cudagraph: %s: inputs share memory and one is updated in place; this call runs on the host",
                self.block.name,
            )
            for region in self.regions:
                for step in region.steps:
                    self.runner.host_step(step, env, warmup=False)
            return [_get(env, o) for o in self.block.output]
        for region in self.regions:
            if not region.graphed:
                self._host(region, env, warmup=phase == "warmup")
            elif phase == "warmup":
                for step in region.steps:
                    self.runner.host_step(step, env, warmup=True)
            elif region.graph is None:
                self._capture(region, env)
            else:
                self._replay(region, env)
        return [_get(env, o) for o in self.block.output]

    def _host(self, region: Region, env: Dict[fx.Node, Any], warmup: bool) -> None:
        (step,) = region.steps
        progs = region.host
        if isinstance(step, Segment):
            self.runner.host_step(step, env, warmup)
        elif isinstance(step, Loop):
            vals = [_get(env, c) for c in step.carried]
            extra = [_get(env, a) for a in step.additional]
            while bool(progs["cond"](*vals, *extra)[0]):  # host sync per iteration
                vals = progs["body"](*vals, *extra)
            _bind(step, env, list(vals))
        else:
            ops = [_get(env, o) for o in step.operands]
            taken = bool(_get(env, step.pred))  # host sync
            _bind(step, env, progs["true" if taken else "false"](*ops))

    def _capture(self, region: Region, env: Dict[fx.Node, Any]) -> None:
        graph = self.graph_factory()
        # Parameters (and buffers marked static) are read where they live, like
        # cudagraph trees do: copying weights on every replay would cost more than
        # the graph saves. Everything else gets a static buffer the replay copies into.
        region.static_inputs = [_static_copy(env[i]) for i in region.inputs]
        region.addresses = [s.data_ptr() if _is_static_by_address(s) else None for s in region.static_inputs]
        local = dict(zip(region.inputs, region.static_inputs))
        with graph.capture():
            for step in region.steps:
                self.runner.capture_step(step, local, graph)
        region.graph = graph
        region.static_outputs = [local[o] for o in region.outputs]
        graph.replay()  # capture executes nothing that counts: run it now
        _update_callers_inputs(region, env)
        env.update(zip(region.outputs, region.static_outputs))

    def _replay(self, region: Region, env: Dict[fx.Node, Any]) -> None:
        for node, static, address in zip(region.inputs, region.static_inputs, region.addresses):
            value = env[node]
            if _is_static_by_address(static):
                # a new parameter object, or new memory behind the same one (``p.data = t``)
                if value is not static or value.data_ptr() != address:
                    log.info("ptc.cudagraph: parameter %s was replaced; capturing again", node.name)
                    region.graph = None
                    self._capture(region, env)
                    return
            elif isinstance(static, torch.Tensor):
                _check_same_meta(node, static, value)
                if value is not static:
                    _copy_into(static, value)
        region.graph.replay()
        _update_callers_inputs(region, env)
        env.update(zip(region.outputs, region.static_outputs))


def _update_callers_inputs(region: Region, env: Dict[fx.Node, Any]) -> None:
    """Copy each input the region updated in place from its static buffer into the
    caller's tensor (a parameter is its own static buffer)."""
    for k in region.updated:
        static, value = region.static_inputs[k], env[region.inputs[k]]
        if value is not static:
            with torch.no_grad():
                value.copy_(static)


def _written_roots(steps: Sequence[Step]) -> set:
    """The nodes that ``steps`` update in place: the tensor an in-place or ``out=`` op
    writes, traced back through views and earlier in-place results to the node that
    made it. (Loop and cond bodies cannot update their operands.)"""
    return {
        _alias_root(value)
        for step in steps
        if isinstance(step, Segment)
        for node in step.nodes
        for value in _written_arguments(node)
    }


def _held_tensors(module: fx.GraphModule) -> List[torch.Tensor]:
    """The tensors a segment reads from its module (parameters, buffers, constants)."""
    held = []
    for node in module.graph.nodes:
        if node.op == "get_attr":
            value = operator.attrgetter(node.target)(module)
            if isinstance(value, torch.Tensor):
                held.append(value)
    return held


def _overlapping(args: Sequence[Any]) -> bool:
    """Whether two of the tensor ``args`` share memory (one storage)."""
    seen = set()
    for a in args:
        if isinstance(a, torch.Tensor):
            ptr = a.untyped_storage().data_ptr()
            if ptr in seen and ptr != 0:
                return True
            seen.add(ptr)
    return False


def _update_through_outside_view(regions: Sequence[Region]) -> str:
    """A region's in-place update of a view made outside the region (``v = x[1:]`` in one
    region, ``v.mul_(2)`` in a later one) lands in the region's static copy of ``v``, not
    in ``x``: the reason such a program runs on the host, or ""."""
    for region in regions:
        inputs = set(region.inputs)
        for step in region.steps:
            if not isinstance(step, Segment):
                continue
            for node in step.nodes:
                for value in _written_arguments(node):
                    while value not in inputs:
                        parent = _alias_parent(value)
                        if parent is None:
                            break
                        value = parent
                    if value in inputs and _alias_parent(value) is not None:
                        return (
                            f"{node.name} updates {value.name} in place, a view made in another part of the "
                            "graph; captured, the update would reach a copy of it only"
                        )
    return ""


def _written_arguments(node: fx.Node) -> List[fx.Node]:
    """The nodes an in-place or ``out=`` op ``node`` writes."""
    schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
    if schema is None:
        return []
    return [v for v in written_arguments(schema, node.args, node.kwargs) if isinstance(v, fx.Node)]


def _alias_parent(node: fx.Node) -> Optional[fx.Node]:
    """The node whose memory ``node`` aliases (a view's base, an in-place op's ``self``,
    an ``out=`` argument), or None."""
    schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
    source = aliased_argument(schema, node.args, node.kwargs) if schema is not None else None
    return source if isinstance(source, fx.Node) else None


def _alias_root(node: fx.Node) -> fx.Node:
    """The node whose memory ``node`` is: through views (``select``, ``slice``,
    ``view``) and the results of in-place / ``out=`` ops, to the node that allocated it."""
    parent = _alias_parent(node)
    while parent is not None:
        node, parent = parent, _alias_parent(parent)
    return node


def _is_static_by_address(value: Any) -> bool:
    return isinstance(value, torch.nn.Parameter)


def _static_copy(value: Any) -> Any:
    """The buffer a graph reads ``value`` from: a copy with ``value``'s strides (the
    graph's compiled segments were built for them), a stride-0 (expanded) dimension
    kept as one; a parameter is read where it lives."""
    if _is_static_by_address(value) or not isinstance(value, torch.Tensor):
        return value
    static = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=value.device)
    _copy_into(static, value)
    return static


def _copy_into(static: torch.Tensor, value: torch.Tensor) -> None:
    """``static.copy_(value)``; along a dimension ``static`` expands (stride 0) only the
    first element is written (its memory is one element), so ``value`` must be expanded
    there too."""
    expanded = expanded_dims(static)
    if not expanded:
        static.copy_(value)
        return
    if any(value.stride(d) != 0 for d in expanded):
        from ptc.errors import PtcValueError

        raise PtcValueError(
            f"captured graph input was captured expanded (stride 0) along dims {expanded}, got a "
            f"tensor with strides {value.stride()}; a captured program is specialised to its "
            "inputs' layouts (capture again, or pass an expanded tensor)"
        )
    copy_into_expanded(static, value, expanded)


def _check_same_meta(node: fx.Node, static: torch.Tensor, value: Any) -> None:
    if (
        not isinstance(value, torch.Tensor)
        or value.shape != static.shape
        or value.dtype != static.dtype
        or value.device != static.device
    ):
        from ptc.errors import PtcValueError

        got = f"{value.dtype}{list(value.shape)} on {value.device}" if isinstance(value, torch.Tensor) else type(value).__name__
        raise PtcValueError(
            f"captured graph input {node.name} was captured as {static.dtype}{list(static.shape)} on "
            f"{static.device}, got {got}; a captured program is specialised to its input "
            "shapes, dtypes and devices (capture again for new ones)"
        )


def _in_clean_thread(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` in a fresh thread: segments compile on their first call, which
    under ``torch.compile`` happens inside AOTAutograd's runtime wrapper, whose
    thread-local dispatch state (excluded keys, modes) would leak into Inductor's
    own AOTAutograd pass. A new thread starts with clean thread-local state."""
    import threading

    import torch._inductor.config as inductor_config

    box: Dict[str, Any] = {}
    # torch's config overrides are thread-local (ContextVars): the new thread would see the
    # defaults, not the caller's settings (fallback_random, cpp.*, ...); carry them over
    settings = inductor_config.get_config_copy()

    def target() -> None:
        try:
            with inductor_config.patch(settings):
                box["value"] = fn()
        except BaseException as e:  # re-raised in the caller's thread
            box["error"] = e

    t = threading.Thread(target=target, name="ptc-cudagraph-compile")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _clean_module(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy of ``gm`` without the outer trace's fake values (meta["val"]), which would
    drag that trace's fake mode into a new compile."""
    graph = fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))  # type: ignore[arg-type]
    for node in graph.nodes:
        node.meta = {}
    return fx.GraphModule(gm, graph)


def _loop_step_function(loop: Loop) -> Callable[..., Any]:
    """The loop's step as one function of ``carries + additional``: equivalent to ::

        outs = body(*carries, *additional)
        for c, o in zip(carries, outs):
            c.copy_(o)
        return cond(*outs, *additional)[0]
    """
    body, cond, k = loop.body.gm, loop.cond.gm, len(loop.carried)

    def step(*args: Any) -> Any:
        carries, extra = args[:k], args[k:]
        outs = _as_list(body(*carries, *extra))
        pred = _as_list(cond(*outs, *extra))[0]
        for c, o in zip(carries, outs):
            c.copy_(o)
        return (pred,)

    return step


def loop_step_obstacle(loop: Loop, args: Sequence[Any]) -> str:
    """Why ``loop`` cannot run as one compiled step ("" if it can)."""
    for name, block in (("cond", loop.cond), ("body", loop.body)):
        if not all(isinstance(s, Segment) for s in block.steps):
            return f"its {name} holds control flow"
    carries = args[: len(loop.carried)]
    if not all(isinstance(c, torch.Tensor) for c in carries):
        return "a carry is not a tensor"
    return ""


class InductorSegments:
    """The ``"inductor"`` segment compiler: compiles each segment with Inductor on its
    first call (real inputs as examples); ``loop_step`` also compiles an eligible
    loop's body, write-back and next predicate as one graph, so a captured iteration
    is a few fused kernels (the carries are written in place) instead of the body's,
    one copy per carry and the predicate's."""

    def __call__(self, seg: Segment, args: Sequence[Any]) -> None:
        import torch._inductor

        clean = _clean_module(seg.module)
        try:
            seg.fn = _in_clean_thread(lambda: torch._inductor.compile(clean, list(args)))
        except Exception as e:  # noqa: BLE001 - the aten graph computes the same
            # Inductor re-traces the aten graph with its own decompositions, whose strides can
            # differ from eager's (a ``view`` that was valid in eager no longer is): run the
            # segment's aten ops instead of failing where eager runs
            seg.fn, seg.compiled = seg.module, False
            seg.compile_note = f"not compiled: {type(e).__name__}: {e}"[:300]
            log.info("ptc.cudagraph: %s runs as aten ops (%s)", seg.name, seg.compile_note)
            return
        seg.compiled = True
        log.debug("ptc.cudagraph: compiled %s with Inductor (%d ops)", seg.name, len(seg.ops))

    def loop_step(self, loop: Loop, args: Sequence[Any]) -> None:
        """Compiles ``loop.step`` from example ``args`` (clobbered: pass copies) and runs it
        once, so no kernel is loaded during a capture. A loop that cannot be fused, or
        whose fused step fails, keeps the three-part step (``loop.step_note`` says why)."""
        import torch._inductor
        from torch.fx.experimental.proxy_tensor import make_fx

        loop.step_note = loop_step_obstacle(loop, args)
        if loop.step_note:
            return
        try:
            def build() -> Callable[..., Any]:
                traced = make_fx(_loop_step_function(loop), tracing_mode="fake")(*args)
                return torch._inductor.compile(traced, list(args))

            step = _in_clean_thread(build)
            step(*args)  # loads the kernels now
        except Exception as e:  # noqa: BLE001 - the unfused step computes the same
            loop.step_note = f"not fused: {type(e).__name__}: {e}"[:300]
            log.info("ptc.cudagraph: %s keeps body, write-back and predicate apart (%s)", loop.name, loop.step_note)
            return
        loop.step = step
        loop.step_note = "fused: body, write-back and predicate in one compiled step"


def compile_segments(kind: str) -> Optional[Callable[[Segment, Sequence[Any]], None]]:
    """A segment compiler: ``"inductor"`` (``InductorSegments``) or ``"eager"`` (None:
    run the aten graphs)."""
    if kind == "eager":
        return None
    if kind != "inductor":
        from ptc.errors import PtcValueError

        raise PtcValueError(f"segments must be 'inductor' or 'eager', got {kind!r}")
    return InductorSegments()
