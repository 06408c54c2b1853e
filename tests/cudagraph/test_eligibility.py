"""Eligibility: each reason category is detected, and an ineligible loop falls back to
the un-graphed path (correct results, logged, counted), never an error."""

import logging

import pytest
import torch
from torch._higher_order_ops.while_loop import while_loop
from torch.fx.experimental.proxy_tensor import make_fx

import ptc.cudagraph as cg
from ptc.cudagraph import CapturedProgram, Support
from ptc.demos import cudagraph_programs as P

from .conftest import T, captured


def _counted_graph():
    with torch.no_grad():
        return make_fx(P.counted)(torch.randn(4), T(3))


def _insert_in_body(gm, make_node):
    body = gm.while_loop_body_graph_0
    placeholders = [n for n in body.graph.nodes if n.op == "placeholder"]
    out = next(n for n in body.graph.nodes if n.op == "output")
    with body.graph.inserting_before(out):
        make_node(body.graph, placeholders)
    body.recompile()
    return gm


def _reasons(gm, **options):
    options.setdefault("executor", "sim")
    program = CapturedProgram(gm, **options)
    return program, program.report.fallbacks.get("loop0", [])


def test_eligible_loop_has_no_reasons():
    program, reasons = _reasons(_counted_graph())
    assert reasons == [] and program.report.counts["loops_captured"] == 1


@pytest.mark.parametrize(
    "category,make_node",
    [
        ("input mutation", lambda g, ph: g.call_function(torch.ops.aten.add_.Tensor, (ph[1], 1.0))),
        ("host read", lambda g, ph: g.call_function(torch.ops.aten._local_scalar_dense.default, (ph[0],))),
        ("host read", lambda g, ph: g.call_function(torch.ops.aten.nonzero.default, (ph[1],))),
        ("RNG in body", lambda g, ph: g.call_function(torch.ops.aten.rand_like.default, (ph[1],))),
        (
            "collective",
            lambda g, ph: g.call_function(torch.ops._c10d_functional.all_reduce.default, (ph[1], "sum", "0")),
        ),
    ],
    ids=["mutation", "item", "nonzero", "rng", "collective"],
)
def test_each_category_is_detected(category, make_node):
    gm = _insert_in_body(_counted_graph(), make_node)
    program, reasons = _reasons(gm)
    assert reasons and all(r.split(":")[0] in cg.CATEGORIES for r in reasons)
    assert any(r.startswith(category + ":") for r in reasons), reasons
    assert program.report.counts == {
        "loops_captured": 0,
        "loops_fallback": 1,
        "conds_captured": 0,
        "conds_fallback": 0,
    }


def test_mutated_arg_indices_kwarg_is_input_mutation():
    gm = _counted_graph()
    loop = next(n for n in gm.graph.nodes if n.target is torch.ops.higher_order.while_loop)
    loop.kwargs = {"mutated_arg_indices": "1"}
    _, reasons = _reasons(gm)
    assert any(r.startswith("input mutation:") and "mutated_arg_indices" in r for r in reasons)


def test_non_bool_predicate_is_an_unsupported_carry():
    gm = _counted_graph()
    cond = gm.while_loop_cond_graph_0
    out = next(n for n in cond.graph.nodes if n.op == "output")
    pred = out.args[0][0] if isinstance(out.args[0], (list, tuple)) else out.args[0]
    pred.meta["val"] = torch.empty((), dtype=torch.int64)
    _, reasons = _reasons(gm)
    assert any(r.startswith("unsupported carry:") and "bool" in r for r in reasons), reasons


def test_old_cuda_makes_every_conditional_ineligible(x4):
    old = Support(while_nodes=True, if_nodes=True, cuda_version=(12, 3))
    cf = captured(P.cond_in_while, x4, T(3), support=old)
    assert cf.report.counts == {"loops_captured": 0, "loops_fallback": 1, "conds_captured": 0, "conds_fallback": 1}
    assert all(r[0].startswith("CUDA < 12.4") for r in cf.report.fallbacks.values())
    for n in (0, 3):
        torch.testing.assert_close(cf(x4, T(n)), P.cond_in_while(x4, T(n)))
    assert all(g.counts()["while"] == g.counts()["if"] == 0 for g in cf.graphs)


def test_an_emulated_backend_without_while_nodes_is_named_as_such(x4):
    """The reason describes the Support it was given, not the installed torch (2.14 has WHILE)."""
    cf = captured(P.cond_in_while, x4, T(3), support=Support(while_nodes=False, if_nodes=True))
    assert cf.report.fallbacks == {
        "loop0": ["no binding: no WHILE nodes here: the emulated graph backend has none (Support(while_nodes=False))"]
    }


def _cuda_reasons(monkeypatch, build, device, while_nodes, if_nodes):
    """The first reason of loop0 for executor='cuda', with this install's CUDA facts replaced."""
    from ptc import _compat
    from ptc.cudagraph import cuda_graph

    for name, value in (("CUDA_BUILD", build), ("CUDA_AVAILABLE", device),
                        ("CUDA_GRAPH_WHILE_NODES", while_nodes), ("CUDA_GRAPH_IF_NODES", if_nodes)):
        monkeypatch.setattr(_compat, name, value, raising=False)
    no_cuda_python = {"while_if": False, "if_else_switch": False, "reason": "cuda-python (cuda.bindings) is not installed"}
    monkeypatch.setattr(cuda_graph, "_ptc_node_capabilities", lambda: no_cuda_python)
    monkeypatch.setattr(cuda_graph, "cuda_version", lambda: (12, 8) if build else None)
    _, reasons = _reasons(_counted_graph(), executor="cuda", segments="eager")
    return reasons[0]


@pytest.mark.parametrize(
    "build, device, expected",
    [
        (False, False, "no CUDA: this torch is a CPU-only build (torch.version.cuda is None)"),
        (True, False, "no CUDA: no CUDA device is available (torch.cuda.is_available() is False)"),
    ],
    ids=["cpu-only-build", "no-device"],
)
def test_the_cuda_backend_names_what_is_really_missing(monkeypatch, build, device, expected):
    # a CPU-only 2.14.1 has no CUDAGraph node methods either; a CUDA build has both
    assert _cuda_reasons(monkeypatch, build, device, build, build) == expected


def test_the_cuda_backend_names_the_binding_it_lacks(monkeypatch):
    assert _cuda_reasons(monkeypatch, True, True, False, True) == (
        "no binding: no WHILE nodes here: torch.cuda.CUDAGraph offers IF nodes in this torch, and ptc's own "
        "nodes are unavailable (cuda-python (cuda.bindings) is not installed)"
    )


def test_ptc_env_line_names_what_the_gpu_path_lacks(monkeypatch):
    from ptc import _compat

    monkeypatch.setattr(_compat, "CUDA_BUILD", False, raising=False)
    monkeypatch.setattr(_compat, "CUDA_GRAPH_WHILE_NODES", False, raising=False)
    assert "GPU: none, this torch is a CPU-only build" in cg.capability("cudagraph")
    monkeypatch.setattr(_compat, "CUDA_BUILD", True, raising=False)
    monkeypatch.setattr(_compat, "CUDA_AVAILABLE", False, raising=False)
    monkeypatch.setattr(_compat, "CUDA_GRAPH_WHILE_NODES", True, raising=False)
    assert "GPU: WHILE+IF nodes via torch's binding; no CUDA device here" in cg.capability("cudagraph")


def test_torch_213_like_support_graphs_the_body_and_runs_the_loop_on_the_host(x4):
    """No WHILE binding (torch 2.13): the loop runs on the host, but the cond inside
    its body is still captured, as IF nodes in the body's own graph."""
    cf = captured(P.cond_in_while, x4, T(3), support=Support(while_nodes=False, if_nodes=True))
    assert cf.report.counts == {"loops_captured": 0, "loops_fallback": 1, "conds_captured": 1, "conds_fallback": 0}
    assert cf.report.fallbacks["loop0"][0].startswith("no binding:")
    for n in (0, 1, 5):
        torch.testing.assert_close(cf(x4, T(n)), P.cond_in_while(x4, T(n)))
    assert sum(g.counts()["if"] for g in cf.graphs) == 2
    assert sum(g.counts()["while"] for g in cf.graphs) == 0


def test_rng_loop_falls_back_with_correct_results(x4):
    cf = captured(P.rng_body, x4, T(3))
    assert cf.report.fallbacks["loop0"][0].startswith("RNG in body:")
    for n in (0, 2, 4):
        torch.manual_seed(1)
        got = cf(x4, T(n))
        torch.manual_seed(1)
        torch.testing.assert_close(got, P.rng_body(x4, T(n)))


def test_ineligible_inner_loop_makes_outer_loop_ineligible(x4):
    def f(x, a):
        def outer(i, x):
            return i + 1, P.rng_body(x, a)

        return while_loop(lambda i, x: i < a, outer, (torch.zeros((), dtype=torch.int64), x))[1]

    cf = captured(f, x4, T(2))
    fallbacks = cf.report.fallbacks
    assert set(fallbacks) == {"loop0", "loop1"}
    assert any(r.startswith("nested:") for r in fallbacks["loop0"])
    for a in (0, 1, 3):
        torch.manual_seed(2)
        got = cf(x4, T(a))
        torch.manual_seed(2)
        torch.testing.assert_close(got, f(x4, T(a)))


def test_fallback_is_logged_and_counted(x4):
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logger = logging.getLogger("ptc.cudagraph")
    handler, level = Keep(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    before = cg.counters["loops_fallback"]
    try:
        captured(P.rng_body, x4, T(3))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert cg.counters["loops_fallback"] == before + 1
    assert any("loop0 runs un-graphed" in m and "RNG" in m for m in records)


def test_values_on_another_device_keep_work_out_of_a_device_graph(x4):
    """For a CUDA graph, CPU work would run once at capture and never on replay: a loop
    computing on the CPU is ineligible and CPU segments stay outside graphs."""
    cuda_like = Support(while_nodes=True, if_nodes=True, cuda_version=(12, 8), device="cuda")
    cf = captured(P.counted, x4, T(3), support=cuda_like)
    reasons = cf.report.fallbacks["loop0"]
    assert any(r.startswith("unsupported carry:") and "on cpu" in r for r in reasons), reasons
    for n in (0, 2):
        torch.testing.assert_close(cf(x4, T(n)), P.counted(x4, T(n)))
    assert cf.graphs == []  # every segment computes on the CPU
