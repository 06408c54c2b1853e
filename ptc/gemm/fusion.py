"""Epilogue fusion inside ``torch.compile``: GEMM + pointwise chain -> one choice set.

Inductor cannot fuse an epilogue into an extern (library) kernel, so ptc moves
the decision earlier. While :func:`ptc.gemm.enable` is active, a pre-grad graph
pass finds ``linear``/``matmul`` nodes followed by a chain of supported
pointwise ops (bias or residual add, scalar scale, relu/gelu/silu/sigmoid/tanh)
and, when :func:`check_fusible` accepts the chain for the target, replaces the
whole chain by one ``ptc::gemm_epilogue`` op. Its Inductor lowering then:

1. benchmarks the fused CuTeDSL EFC candidates against ``ptc_reference_mm``
   (ATen's GEMM *without* the epilogue, a lower bound for any unfused path);
2. keeps the fused kernel only if it wins; otherwise
3. lowers exactly what the graph meant, unfused: Inductor's own ``mm``
   (autotuned ATen/Triton/ptc) followed by one fused pointwise kernel.

An unfusible chain is never rewritten (its reason goes to the ``ptc.gemm``
logger). Only inference graphs are rewritten (no input of the chain requires
grad), with static shapes and bf16/fp16 GEMMs on ``enable(device_types=...)``.
Outside ``torch.compile`` the op computes ``epilogue(a @ b)`` with ATen.
"""

from __future__ import annotations

import logging
import operator
from typing import List

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass

from ptc.gemm.epilogue import Epilogue, check_fusible
from ptc.gemm.problem import GemmProblem, dtype_name

__all__ = ["gemm_epilogue", "EpiloguePass", "register_lowering"]

log = logging.getLogger("ptc.gemm")


@torch.library.custom_op("ptc::gemm_epilogue", mutates_args=())
def gemm_epilogue(a: torch.Tensor, b: torch.Tensor, operands: List[torch.Tensor], spec: str, alpha: float) -> torch.Tensor:
    """``Epilogue.parse(spec, alpha).apply(a @ b)`` with operands in ``operand_names()`` order.

    ``a`` is (M, K), ``b`` is (K, N); the result is (M, N) in ``a.dtype``.
    """
    epi = Epilogue.parse(spec, alpha)
    return epi.apply(a @ b, a.dtype, **dict(zip(epi.operand_names(), operands)))


@gemm_epilogue.register_fake
def _(a, b, operands, spec, alpha):
    return a.new_empty((a.shape[0], b.shape[1]))


# --- the pre-grad pass ---------------------------------------------------------

_LINEAR = {torch._C._nn.linear, torch.nn.functional.linear}
_MATMUL = {operator.matmul, torch.matmul, torch.mm}
_UNARY = {
    torch.relu: "relu", torch.nn.functional.relu: "relu",
    torch.sigmoid: "sigmoid", torch.tanh: "tanh",
    torch.nn.functional.silu: "silu",
}
_UNARY_METHODS = {"relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh"}
_GELU = {torch._C._nn.gelu, torch.nn.functional.gelu}
_ADD = {operator.add, torch.add}
_MUL = {operator.mul, torch.mul}


def _val(node):
    return node.meta.get("example_value", node.meta.get("val")) if hasattr(node, "meta") else None


def _static(shape) -> bool:
    return all(isinstance(s, int) for s in shape)


class EpiloguePass(CustomGraphPass):
    """The pre-grad pass (a ``CustomGraphPass``-compatible callable).

    It holds only plain data (Inductor deep-copies its config); the session it
    serves is looked up when it runs, and it does nothing when none is active or
    ``fuse`` is False (it is still installed then: its ``uuid`` keeps graphs
    compiled with ptc apart from others in the FX graph cache).
    """

    def __init__(self, target_name: str, device_types, fuse: bool = True) -> None:
        self.target_name = target_name
        self.device_types = tuple(device_types)
        self.fuse = fuse

    def uuid(self) -> bytes:
        return f"ptc.gemm.EpiloguePass/1:{self.target_name}:{self.device_types}:fuse={self.fuse}".encode()

    def __deepcopy__(self, memo):
        return EpiloguePass(self.target_name, self.device_types, self.fuse)

    def __call__(self, graph) -> None:
        from ptc.gemm.inductor import active_session

        session = active_session()
        if not self.fuse or session is None or not session.active:
            return
        graph = getattr(graph, "graph", graph)
        for node in list(graph.nodes):
            if node.op == "call_function" and (node.target in _LINEAR or node.target in _MATMUL):
                try:
                    self._rewrite(session, graph, node)
                except Exception as e:  # noqa: BLE001 - a pass failure must not break compile
                    log.warning("ptc.gemm: epilogue pass skipped %s (%s: %s)", node.name, type(e).__name__, e)

    def _step(self, node, cur, steps, operands, alpha):
        """Classify ``node`` (the only user of ``cur``) as an epilogue step, or None."""
        t = node.target
        if node.op == "call_function" and t in _UNARY and node.args[0] is cur and not node.kwargs.get("inplace", False) and len(node.args) == 1:
            return _UNARY[t], None, alpha
        if node.op == "call_method" and t in _UNARY_METHODS and node.args[0] is cur and len(node.args) == 1:
            return _UNARY_METHODS[t], None, alpha
        if node.op == "call_function" and t in _GELU and node.args[0] is cur and len(node.args) == 1:
            approx = node.kwargs.get("approximate", "none")
            return ("gelu_tanh" if approx == "tanh" else "gelu"), None, alpha
        if node.op == "call_function" and t in _MUL and len(node.args) == 2 and not node.kwargs and "scale" not in steps:
            other = node.args[1] if node.args[0] is cur else node.args[0]
            if isinstance(other, (int, float)) and not isinstance(other, bool):
                return "scale", None, float(other)
        if node.op == "call_function" and t in _ADD and len(node.args) == 2 and not node.kwargs:
            other = node.args[1] if node.args[0] is cur else node.args[0]
            ov, cv = _val(other), _val(cur)
            if ov is not None and cv is not None and isinstance(ov, torch.Tensor) and ov.dtype == cv.dtype and not ov.requires_grad:
                if tuple(ov.shape) == (cv.shape[-1],) and "bias" not in steps:
                    return "bias", other, alpha
                if tuple(ov.shape) == tuple(cv.shape) and "residual" not in steps:
                    return "residual", other, alpha
        return None

    def _rewrite(self, s, graph, head) -> None:
        out_val = _val(head)
        if out_val is None or out_val.dtype not in (torch.bfloat16, torch.float16):
            return
        if out_val.device.type not in s.device_types or not _static(out_val.shape):
            return
        if head.target in _LINEAR:
            x, w = head.args[0], head.args[1]
            bias = head.args[2] if len(head.args) > 2 else head.kwargs.get("bias")
            wv = _val(w)
            if wv is None or wv.dim() != 2:
                return
            steps, operands = (["bias"], [bias]) if bias is not None else ([], [])
            b_kind = "weight"
        else:
            if head.kwargs:
                return
            x, w = head.args
            wv = _val(w)
            if not isinstance(w, torch.fx.Node) or wv is None or wv.dim() != 2:
                return
            steps, operands, b_kind = [], [], "mat2"
        xv = _val(x)
        if xv is None or xv.dim() < 2 or not _static(xv.shape) or xv.dtype != out_val.dtype:
            return
        if any(v.requires_grad for v in (xv, wv)) or any(_val(o).requires_grad for o in operands):
            return
        alpha = 1.0
        chain = [head]
        cur = head
        while len(cur.users) == 1:
            user = next(iter(cur.users))
            step = self._step(user, cur, steps, operands, alpha)
            if step is None:
                break
            name, operand, alpha = step
            steps.append(name)
            if operand is not None:
                operands.append(operand)
            chain.append(user)
            cur = user
        if not steps:
            return  # a plain GEMM: the preprocessing hook adds its candidates
        epi = Epilogue(tuple(steps), alpha)
        k = xv.shape[-1]
        n = wv.shape[0] if b_kind == "weight" else wv.shape[1]
        m = 1
        for d in xv.shape[:-1]:
            m *= d
        tgt = s._target_for(out_val.device)
        if tgt is None:
            return
        problem = GemmProblem("mm", m, n, k, 1, dtype_name(xv.dtype), dtype_name(xv.dtype), dtype_name(out_val.dtype), "tn")
        decision = check_fusible(epi, problem, tgt)
        if not decision.fused:
            s._note_unfused(problem, epi, decision.reason)
            return
        last = chain[-1]
        lead = tuple(xv.shape[:-1])
        with graph.inserting_before(last):
            a2 = x if xv.dim() == 2 else graph.call_function(torch.reshape, (x, (m, k)))
            b2 = graph.call_method("t", (w,)) if b_kind == "weight" else w
            ops2 = []
            for name, o in zip(epi.operand_names(), operands):
                ov = _val(o)
                ops2.append(graph.call_function(torch.reshape, (o, (m, n))) if name == "residual" and ov.dim() != 2 else o)
            new = graph.call_function(torch.ops.ptc.gemm_epilogue.default, (a2, b2, ops2, epi.spec(), alpha))
            out = new if len(lead) == 1 else graph.call_function(torch.reshape, (new, lead + (n,)))
        for nd in (new, out):
            nd.meta["example_value"] = out_val.new_empty(lead + (n,)) if nd is out else out_val.new_empty((m, n))
        last.replace_all_uses_with(out)
        for nd in reversed(chain):
            if not nd.users:
                graph.erase_node(nd)
        log.info("ptc.gemm: %s + %s -> ptc::gemm_epilogue (%s)", head.name, epi.spec(), problem.signature())


# --- the Inductor lowering -------------------------------------------------------

_REGISTERED = False


def register_lowering() -> None:
    """Register the Inductor lowering of ``ptc::gemm_epilogue`` (once per process)."""
    global _REGISTERED
    if _REGISTERED:
        return
    from torch._inductor.lowering import register_lowering as _register

    _register(torch.ops.ptc.gemm_epilogue.default, type_promotion_kind=None)(_lower)
    _REGISTERED = True


def _lower(a, b, operands, spec, alpha):
    from ptc.gemm.inductor import active_session

    epi = Epilogue.parse(spec, alpha)
    session = active_session()
    if session is not None and session.active:
        node = session._fused_choice(a, b, list(operands), epi)
        if node is not None:
            return node
    return decomposed(a, b, list(operands), epi)


def decomposed(a, b, operands, epi: Epilogue):
    """The unfused lowering: Inductor's ``mm`` then one pointwise node for the chain."""
    from torch._inductor import ir
    from torch._inductor.lowering import lowerings
    from torch._inductor.virtualized import ops

    mm = lowerings[torch.ops.aten.mm.default](a, b)
    dtype = mm.get_dtype()
    loaders = {name: o.make_loader() for name, o in zip(epi.operand_names(), operands)}
    mm_load = mm.make_loader()
    f32 = torch.float32

    def inner(index):
        x = ops.to_dtype(mm_load(index), f32)
        for s in epi.steps:
            if s == "bias":
                x = ops.add(x, ops.to_dtype(loaders["bias"]([index[-1]]), f32))
            elif s == "residual":
                x = ops.add(x, ops.to_dtype(loaders["residual"](index), f32))
            elif s == "scale":
                x = ops.mul(x, ops.constant(epi.alpha, f32))
            elif s == "relu":
                x = ops.relu(x)
            elif s == "sigmoid":
                x = ops.sigmoid(x)
            elif s == "tanh":
                x = ops.tanh(x)
            elif s == "silu":
                x = ops.mul(x, ops.sigmoid(x))
            elif s == "gelu":
                half = ops.mul(x, ops.constant(0.5, f32))
                x = ops.mul(half, ops.add(ops.constant(1.0, f32), ops.erf(ops.mul(x, ops.constant(0.7071067811865476, f32)))))
            elif s == "gelu_tanh":
                cube = ops.mul(ops.mul(x, x), x)
                inner_ = ops.mul(ops.add(x, ops.mul(cube, ops.constant(0.044715, f32))), ops.constant(0.7978845608028654, f32))
                x = ops.mul(ops.mul(x, ops.constant(0.5, f32)), ops.add(ops.constant(1.0, f32), ops.tanh(inner_)))
            else:  # steps the pass never emits (colbias, rowscale, amax)
                raise NotImplementedError(f"ptc.gemm: no unfused lowering for epilogue step {s!r}")
        return ops.to_dtype(x, dtype)

    return ir.Pointwise.create(device=mm.get_device(), dtype=dtype, inner_fn=inner, ranges=list(mm.get_size()))
