"""A graph ptc cannot compile is compiled the stock way: same results, the reason logged and reported."""

from __future__ import annotations

import importlib
import logging

import pytest
import torch

import ptc.complex as pc
from ptc.complex import rules

pcb = importlib.import_module("ptc.complex.backend")  # the module (ptc.complex.backend is also a function)

aten = torch.ops.aten


def _inputs():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(64, dtype=torch.complex64, generator=g)
    w = torch.randn(64, dtype=torch.complex64, generator=g)
    return z, w


def f(z, w):
    return (z * w + 1j).exp()


@pytest.fixture
def broken_mul(monkeypatch):
    """ptc's complex ``mul`` rule raises, as a rule with a bug would."""

    def broken(ctx, a, b):
        raise RuntimeError("a rule with a bug")

    monkeypatch.setitem(rules.RULES, aten.mul.Tensor, rules.Rule(aten.mul.Tensor, broken, "elementwise"))


def test_a_failing_rewrite_compiles_the_graph_the_stock_way(broken_mul, caplog):
    torch._dynamo.reset()
    z, w = _inputs()
    backend = pc.backend()
    with caplog.at_level(logging.WARNING, logger="ptc.complex"):
        out = torch.compile(f, backend=backend)(z, w)
    torch.testing.assert_close(out, f(z, w))
    assert len(backend.report.stock_graphs) == 1
    assert "an AOT graph: RuntimeError: a rule with a bug" in backend.report.stock_graphs[0]
    assert "compiled by stock Inductor instead" in caplog.text and "a rule with a bug" in caplog.text
    assert "compiled by stock Inductor instead: 1" in str(backend.report)


def test_strict_raises_instead(broken_mul):
    torch._dynamo.reset()
    z, w = _inputs()
    with pytest.raises(Exception, match="a rule with a bug"):
        torch.compile(f, backend=pc.backend(strict=True))(z, w)


def _exp_decomposition_raising(monkeypatch, error):
    """ptc's decomposition table with ``aten.exp`` raising ``error``, as a decomposition with a bug would."""

    def refuse(*args, **kwargs):
        raise error

    table = dict(pcb.decompositions())
    table[aten.exp.default] = refuse
    monkeypatch.setattr(pcb, "decompositions", lambda: table)


def test_a_failing_trace_falls_back_for_the_whole_dynamo_graph(monkeypatch):
    _exp_decomposition_raising(monkeypatch, NotImplementedError("a decomposition with a bug"))
    torch._dynamo.reset()
    z, w = _inputs()
    backend = pc.backend()
    out = torch.compile(f, backend=backend)(z, w)
    torch.testing.assert_close(out, f(z, w))
    assert [r.split(":")[0] for r in backend.report.stock_graphs] == ["a Dynamo graph"]
    assert "a decomposition with a bug" in backend.report.stock_graphs[0]


def test_backward_graph_falls_back_alone(monkeypatch):
    """The forward keeps ptc's rewrite; only the backward, whose rewrite fails, is compiled the stock way."""
    real_rewrite = pcb.rewrite

    def rewrite_forward_only(gm, *args, **kwargs):
        if any(n.op == "placeholder" and n.name.startswith("tangents") for n in gm.graph.nodes):
            raise RuntimeError("no backward today")
        return real_rewrite(gm, *args, **kwargs)

    monkeypatch.setattr(pcb, "rewrite", rewrite_forward_only)
    torch._dynamo.reset()
    z, w = _inputs()

    def loss(z, w):
        return (z * w).abs().sum()

    zc, ze = z.clone().requires_grad_(), z.clone().requires_grad_()
    backend = pc.backend()
    torch.compile(loss, backend=backend)(zc, w).backward()
    loss(ze, w).backward()
    torch.testing.assert_close(zc.grad, ze.grad)
    assert backend.report.graphs == 1  # the forward, rewritten
    assert len(backend.report.stock_graphs) == 1 and "no backward today" in backend.report.stock_graphs[0]


def _narrow_at(z, start):  # a tensor start: its value decides the output, so tracing cannot see it
    return torch.narrow(z, 0, start, 8) * 2j


def test_a_graph_stock_inductor_hands_back_to_eager_runs_eagerly_as_under_stock():
    """Stock Inductor raises DataDependentOutputException on this graph and Dynamo runs the frame
    eagerly; ptc raised the same, compiled the graph the stock way (a second compile, raising again)
    and counted it as its own failure."""
    from torch._dynamo.utils import counters

    z, _ = _inputs()
    start = torch.tensor(3)
    runs = {}
    for name, backend in (("stock", "inductor"), ("ptc", pc.backend())):
        torch._dynamo.reset()
        counters.clear()
        torch.testing.assert_close(torch.compile(_narrow_at, backend=backend)(z, start), _narrow_at(z, start))
        runs[name] = sum(counters["unimplemented"].values())
    assert runs == {"stock": 1, "ptc": 1}  # the frame ran eagerly, in both
    assert backend.report.stock_graphs == []


def test_a_data_dependent_failure_of_ptcs_own_compile_still_falls_back(monkeypatch):
    """Where only ptc's compile raises one of those exceptions, the graph is compiled the stock way."""
    from torch._subclasses.fake_tensor import DataDependentOutputException

    _exp_decomposition_raising(monkeypatch, DataDependentOutputException(aten.exp.default))
    torch._dynamo.reset()
    z, w = _inputs()
    backend = pc.backend()
    out = torch.compile(f, backend=backend, fullgraph=True)(z, w)
    torch.testing.assert_close(out, f(z, w))
    assert [r.split(":")[0] for r in backend.report.stock_graphs] == ["a Dynamo graph"]
    assert "DataDependentOutputException" in backend.report.stock_graphs[0]


def test_compile_refuses_what_is_not_callable():
    from ptc.errors import PtcTypeError

    with pytest.raises(PtcTypeError, match="fn must be a callable"):
        pc.compile(3)


def _branches_on_a_float(z, s):  # a Python float the graph branches on: AOT specialises it
    return torch.abs(z * z + 1j) if s > 0.5 else z


@pytest.mark.parametrize("strict", [False, True])
def test_dynamos_restart_signal_is_not_a_failure_of_ptcs_compile(strict):
    """Under dynamic=True AOTAutograd raises TensorifyScalarRestartAnalysis (trace again with the
    float specialised) through the backend on purpose; ptc took it for its own failure and
    compiled every such graph the stock way (complex ops unfused)."""
    z = torch.randn(64, dtype=torch.complex64, generator=torch.Generator().manual_seed(0))
    torch._dynamo.reset()
    backend = pc.backend(strict=strict)
    got = torch.compile(_branches_on_a_float, backend=backend, dynamic=True)(z, 2.0)
    torch.testing.assert_close(got, _branches_on_a_float(z, 2.0))
    assert backend.report.graphs and not backend.report.stock_graphs, backend.report.stock_graphs


def test_a_view_impossible_on_the_strides_a_graph_is_called_with_becomes_a_reshape():
    """A backward graph gets its saved activations with the strides Inductor's forward wrote,
    which may not be the traced ones: the rewrite re-ran the traced view on them (ValueError,
    the graph compiled the stock way). It reshapes instead, as Inductor's lowering copies."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from ptc.complex.rewrite import Report, rewrite

    def f(x, z):
        return x.view(2, 32) * 2, z * z

    x = torch.randn(2, 16, 2, generator=torch.Generator().manual_seed(1))
    z = torch.randn(8, dtype=torch.complex64, generator=torch.Generator().manual_seed(2))
    gm = make_fx(f)(x, z)  # traced on a contiguous x
    strided = torch.randn(2, 2, 16, generator=torch.Generator().manual_seed(3)).transpose(1, 2)  # strides (32, 1, 16)
    with pytest.raises(RuntimeError):
        strided.view(2, 32)
    report = Report()
    out = rewrite(gm, [strided, z], report=report)(strided, z)
    torch.testing.assert_close(out[0], strided.reshape(2, 32) * 2)
    torch.testing.assert_close(out[1], z * z)


def _complex_conv(x, w):  # complexPyTorch's complex convolution: a real conv on each part
    return torch.complex(
        torch.nn.functional.conv2d(x.real, w, padding=1), torch.nn.functional.conv2d(x.imag, w, padding=1)
    )


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_real_layer_on_a_complex_inputs_parts_is_compiled_by_ptc(dynamic):
    """The parts a real layer reads of a complex input are saved for its backward: computed
    through the int64 bits they were a new buffer in the views' stride-2 layout, which Inductor
    could not order under dynamic sizes (the graph was compiled the stock way). They are
    returned as the views they are."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 8, 8, dtype=torch.complex64, generator=g)
    w = torch.randn(4, 3, 3, 3, generator=g, requires_grad=True)
    expected = _complex_conv(x, w)
    (expected_grad,) = torch.autograd.grad(expected.abs().sum(), w)
    torch._dynamo.reset()
    backend = pc.backend()
    got = torch.compile(_complex_conv, backend=backend, dynamic=dynamic)(x, w)
    (grad,) = torch.autograd.grad(got.abs().sum(), w)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-5, atol=1e-4)
    assert backend.report.stock_graphs == []
