"""The CUDA adapter (``CudaGraph``) driven on the CPU: torch's ``CUDAGraph`` and
``torch.cuda.graph`` are replaced, for the test only, by stand-ins that forward
torch's conditional-node method names to the simulator. This checks that the adapter
calls torch's API by its real names, with bool scalars, in the right order, and
that the executor's capture through it replays correctly: the CPU twin of the
adapter code that the ``cuda`` tests run on a GPU."""

import contextlib
import dataclasses

import pytest
import torch

from ptc import _compat
from ptc.cudagraph import Support, capture
from ptc.cudagraph import cuda_graph as cuda_graph_mod
from ptc.cudagraph.simulator import SimGraph
from ptc.demos import cudagraph_programs as P

from .conftest import T

# the methods of torch.cuda.CUDAGraph the adapter may call (torch 2.14 names)
TORCH_METHODS = {
    "begin_capture_to_while_node",
    "begin_capture_to_if_node",
    "set_conditional_handle_for_current_node",
    "end_capture_to_conditional_node",
    "replay",
}


TORCH_SUPPORT = Support(while_nodes=True, if_nodes=True, cuda_version=(12, 4))
# what ptc's own nodes offer on a CUDA 12.8 driver
PTC_SUPPORT = Support(while_nodes=True, if_nodes=True, if_else_nodes=True, switch_nodes=True, cuda_version=(12, 8))


class FakeTorchCUDAGraph:
    """Has exactly the torch methods above; records calls and forwards to a SimGraph."""

    support = TORCH_SUPPORT

    def __init__(self):
        self.sim = SimGraph(self.support)
        self.calls = []

    def _pred(self, name, pred):
        assert pred.dtype == torch.bool and pred.shape == (), f"{name} got {pred.dtype}{list(pred.shape)}"
        self.calls.append(name)

    def begin_capture_to_while_node(self, pred):
        self._pred("while", pred)
        self.sim.begin_while(pred)

    def begin_capture_to_if_node(self, pred):
        self._pred("if", pred)
        self.sim.begin_if(pred)

    def set_conditional_handle_for_current_node(self, pred):
        self._pred("set", pred)
        self.sim.set_handle(pred)

    def end_capture_to_conditional_node(self):
        self.calls.append("end")
        self.sim.end_conditional()

    def replay(self):
        self.sim.replay()

    def reset(self):
        self.calls.append("reset")


class FakeConditionalNodes:
    """``cuda_nodes.ConditionalNodes``'s interface, forwarded to the graph's SimGraph."""

    def __init__(self, graph):
        self.sim, self.calls = graph.sim, graph.calls

    def begin(self, kind, value, size=1):
        self.calls.append((kind, size))
        if kind == "while":
            self.sim.begin_while(value)
        elif kind == "if":
            self.sim.begin_if(value, with_else=size == 2)
        else:
            self.sim.begin_switch(value, size)

    def next_body(self):
        self.calls.append("next")
        self.sim.next_body()

    def set_handle(self, value):
        self.calls.append("set")
        self.sim.set_handle(value)

    def end(self, failed=False):
        self.calls.append("end")
        self.sim.end_conditional()

    def release(self):
        pass


def _fake_cuda(monkeypatch, source):
    made = []
    support = PTC_SUPPORT if source == "ptc" else TORCH_SUPPORT

    def make_graph():
        g = FakeTorchCUDAGraph()
        g.sim = SimGraph(support)
        made.append(g)
        return g

    @contextlib.contextmanager
    def graph(g, pool=None, stream=None):
        assert pool == "pool" and stream == "stream"
        with g.sim.capture():
            yield

    monkeypatch.setattr(_compat, "CUDA_AVAILABLE", True, raising=False)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", make_graph)
    monkeypatch.setattr(torch.cuda, "graph", graph)
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: "pool")
    monkeypatch.setattr(torch.cuda, "Stream", lambda: "stream")
    monkeypatch.setattr(cuda_graph_mod, "node_source", lambda nodes="auto": source)
    # the real adapter's support, minus the device check (the stand-in runs on the CPU)
    monkeypatch.setattr(cuda_graph_mod, "cuda_support", lambda nodes="auto": dataclasses.replace(support, device=None))
    from ptc.cudagraph import cuda_nodes

    monkeypatch.setattr(cuda_nodes, "ConditionalNodes", lambda: FakeConditionalNodes(made[-1]))
    return made


@pytest.fixture
def fake_cuda(monkeypatch):
    """torch's own conditional nodes (IF and WHILE only)."""
    return _fake_cuda(monkeypatch, "torch")


@pytest.fixture
def fake_cuda_ptc(monkeypatch):
    """ptc's own conditional nodes on a CUDA 12.8 driver (IF/ELSE and SWITCH too)."""
    return _fake_cuda(monkeypatch, "ptc")


def test_adapter_uses_only_torch_method_names():
    used = {
        name
        for name in dir(cuda_graph_mod.CudaGraph)
        if not name.startswith("_")
    }
    src = open(cuda_graph_mod.__file__).read()
    called = {m for m in TORCH_METHODS if f"self.graph.{m}(" in src}
    assert called == TORCH_METHODS, called
    assert {"capture", "launch", "begin_while", "begin_if", "set_handle", "end_conditional", "replay"} <= used


@pytest.mark.parametrize("n", [0, 1, 3, 100])
def test_cond_in_while_through_the_cuda_adapter(fake_cuda, x4, n):
    cf = capture(P.cond_in_while, x4, T(3), executor="cuda", segments="eager")
    cf(x4, T(3))  # warmup
    torch.testing.assert_close(cf(x4, T(n)), P.cond_in_while(x4, T(n)))  # capture + replay
    torch.testing.assert_close(cf(x4, T(7)), P.cond_in_while(x4, T(7)))  # replay
    (g,) = fake_cuda
    # WHILE, then (no IF/ELSE binding) two IF nodes for the cond, the loop's handle re-set last
    assert g.calls == ["while", "if", "end", "if", "end", "set", "end"]


def test_switch_through_the_cuda_adapter_is_an_if_tree(fake_cuda, x4):
    cf = capture(P.switch_in_while, x4, T(4), T(0), executor="cuda", segments="eager")
    cf(x4, T(4), T(0))
    for n, k in [(4, -1), (6, 7), (0, 0)]:
        torch.testing.assert_close(cf(x4, T(n), T(k)), P.switch_in_while(x4, T(n), T(k)))
    (g,) = fake_cuda
    assert g.calls.count("while") == 1 and g.calls.count("if") == 4  # 2 conds x (pred, not pred)
    assert g.sim.counts()["switch"] == 0


def test_cond_in_while_through_ptc_nodes_is_one_if_else(fake_cuda_ptc, x4):
    cf = capture(P.cond_in_while, x4, T(3), executor="cuda", segments="eager")
    cf(x4, T(3))
    for n in (0, 1, 4, 100):
        torch.testing.assert_close(cf(x4, T(n)), P.cond_in_while(x4, T(n)))
    (g,) = fake_cuda_ptc
    assert g.calls == [("while", 1), ("if", 2), "next", "end", "set", "end"]


@pytest.mark.parametrize("n,k", [(0, 0), (3, 0), (4, -3), (7, 9), (100, 1)])
def test_switch_and_if_else_through_ptc_nodes(fake_cuda_ptc, x4, n, k):
    cf = capture(P.switch_in_while, x4, T(4), T(0), executor="cuda", segments="eager")
    cf(x4, T(4), T(0))
    torch.testing.assert_close(cf(x4, T(n), T(k)), P.switch_in_while(x4, T(n), T(k)))
    (g,) = fake_cuda_ptc
    assert ("switch", 3) in g.calls and g.sim.counts()["switch"] == 1
    assert not any(c == ("if", 1) for c in g.calls)  # no pair of IF nodes anywhere


def test_ptc_nodes_release_their_pool_with_the_graph(fake_cuda_ptc, x4):
    released = []
    cf = capture(P.counted, x4, T(3), executor="cuda", segments="eager")
    cf(x4, T(3))
    cf(x4, T(3))
    (g,) = fake_cuda_ptc
    cf.graphs[0]._ptc.release = lambda: released.append(True)
    cf.graphs.clear()
    del cf
    import gc

    gc.collect()
    assert released == [True] and g.calls[-1] == "reset"
