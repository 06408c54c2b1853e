"""Capture through the CPU simulator: replay equals eager, the loops really run in the
graph (WHILE iterations counted by the graph), host reads during capture raise."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ptc.cudagraph import SimGraph, Support
from ptc.cudagraph.executor import _write_back
from ptc.demos import cudagraph_programs as P
from ptc.errors import CaptureError

from .conftest import T, captured


def _single_graph(cf):
    (g,) = cf.graphs
    return g


@pytest.mark.parametrize("n", [0, 1, 3, 100])
def test_counted_loop_replay_equals_eager(counted_sim, x4, n):
    got = counted_sim(x4, T(n))
    torch.testing.assert_close(got, P.counted(x4, T(n)))
    g = _single_graph(counted_sim)
    assert g.counts()["while"] == 1
    # the WHILE node, not the host, iterated: exactly n trips in this replay
    assert g.iterations.get(0, 0) == n


@pytest.mark.parametrize("n", [0, 1, 3, 100])
def test_cond_inside_while(cond_in_while_sim, x4, n):
    torch.testing.assert_close(cond_in_while_sim(x4, T(n)), P.cond_in_while(x4, T(n)))
    counts = _single_graph(cond_in_while_sim).counts()
    assert counts["while"] == 1 and counts["if"] == 1  # IF with an ELSE body


@pytest.mark.parametrize("n,k", [(0, 0), (1, 2), (3, 0), (4, -3), (7, 9), (100, 1)])
def test_switch_inside_while(switch_in_while_sim, x4, n, k):
    torch.testing.assert_close(switch_in_while_sim(x4, T(n), T(k)), P.switch_in_while(x4, T(n), T(k)))
    counts = _single_graph(switch_in_while_sim).counts()
    # ptc.switch's cond tree (3 branches, depth 2) becomes one SWITCH node
    assert counts["switch"] == 1 and counts["if"] == 0


def test_switch_as_if_tree_without_switch_nodes(x4):
    """CUDA < 12.8 (and torch's binding): no SWITCH node, the cond tree stays IF/ELSE nodes."""
    no_switch = Support(while_nodes=True, if_nodes=True, if_else_nodes=True, switch_nodes=False)
    cf = captured(P.switch_in_while, x4, T(4), T(0), support=no_switch)
    for n, k in [(0, 0), (4, -3), (7, 9), (5, 1)]:
        torch.testing.assert_close(cf(x4, T(n), T(k)), P.switch_in_while(x4, T(n), T(k)))
    counts = _single_graph(cf).counts()
    assert counts["switch"] == 0 and counts["if"] == 2


def test_five_way_switch_with_reordered_operands(x4):
    """Tracing reorders a nested cond's operands; the SWITCH leaves still get theirs."""
    from ptc.control_flow import switch

    branches = [
        lambda x, y: x.sin() + y,
        lambda x, y: x.cos() * y,
        lambda x, y: x * 2,
        lambda x, y: x - y,
        lambda x, y: (x * y).relu(),
    ]

    def f(i, x, y):
        return switch(i, branches, x, y)

    y = x4.flip(0) + 0.5
    cf = captured(f, T(0), x4, y)
    for i in range(-2, 8):
        torch.testing.assert_close(cf(T(i), x4, y), f(T(i), x4, y))
    counts = _single_graph(cf).counts()
    assert counts["switch"] == 1 and counts["if"] == 0


@pytest.mark.parametrize("a,b", [(0, 0), (0, 5), (1, 0), (1, 1), (2, 3), (3, 100)])
def test_nested_loops(nested_sim, x4, a, b):
    torch.testing.assert_close(nested_sim(x4, T(a), T(b)), P.nested(x4, T(a), T(b)))
    g = _single_graph(nested_sim)
    assert g.counts()["while"] == 2
    assert g.iterations.get(0, 0) == a and g.iterations.get(1, 0) == a * b


def test_two_if_nodes_without_if_else(x4):
    """CUDA < 12.8 (and torch's binding) has no IF/ELSE: a cond becomes two IF nodes."""
    cf = captured(P.cond_in_while, x4, T(3), support=Support(while_nodes=True, if_nodes=True))
    for n in (0, 1, 4, 9):
        torch.testing.assert_close(cf(x4, T(n)), P.cond_in_while(x4, T(n)))
    counts = _single_graph(cf).counts()
    assert counts["if"] == 2 and counts["set_handle"] == 4


def test_changing_inputs_between_replays(counted_sim):
    g = _single_graph(counted_sim)
    pool_size = len(g.pool)
    region = counted_sim.program.program.regions[0]
    addresses = [s.data_ptr() for s in region.static_inputs]
    for seed in range(4):
        x = torch.randn(4, generator=torch.Generator().manual_seed(seed))
        n = T(seed * 2)
        torch.testing.assert_close(counted_sim(x, n), P.counted(x, n))
    # same static buffers, no new graph memory, one graph
    assert [s.data_ptr() for s in region.static_inputs] == addresses
    assert len(g.pool) == pool_size and len(counted_sim.graphs) == 1


def test_outputs_are_not_overwritten_by_later_replays(counted_sim, x4):
    first = counted_sim(x4, T(1))
    keep = first.clone()
    counted_sim(x4, T(5))
    torch.testing.assert_close(first, keep)


def test_replay_writes_only_graph_memory(x4):
    """Every buffer a replayed kernel writes was allocated during capture (the
    graph's private pool) or is one of the static inputs."""
    cf = captured(P.cond_in_while, x4, T(3))
    cf(x4, T(3))
    g = _single_graph(cf)
    region = cf.program.program.regions[0]
    allowed = {t.untyped_storage().data_ptr() for t in g.pool + region.static_inputs}
    written = []

    def walk(nodes):
        for node in nodes:
            if hasattr(node, "outs"):
                written.extend(t for t in node.outs if t is not None)
                # in-place kernels write their first argument
                if any(r.alias_info is not None and r.alias_info.is_write for r in getattr(node.fn, "_schema", None).returns):
                    written.append(node.args[0])
            elif hasattr(node, "bodies"):
                for b in node.bodies:
                    walk(b)

    walk(g.nodes)
    assert written
    assert {t.untyped_storage().data_ptr() for t in written} <= allowed


def test_capture_executes_nothing_that_counts(x4):
    """Right after capture the graph's buffers are poisoned: results must come from replay."""
    g = SimGraph()
    x = x4.clone()
    with g.capture():
        y = x * 2 + 1
    assert torch.isnan(y).all()
    g.replay()
    torch.testing.assert_close(y, x4 * 2 + 1)
    x.copy_(torch.ones(4))
    g.replay()
    torch.testing.assert_close(y, torch.full((4,), 3.0))


@pytest.mark.parametrize(
    "read",
    [
        lambda t: t.sum().item(),
        lambda t: bool(t.sum() > 0),
        lambda t: t.nonzero(),
        lambda t: float(t[0]),
    ],
    ids=["item", "bool", "nonzero", "float"],
)
def test_host_read_during_capture_raises(read, x4):
    g = SimGraph()
    with pytest.raises(CaptureError, match="host|data-dependent"):
        with g.capture():
            read(x4.clone())


def test_host_read_outside_capture_is_fine(x4):
    assert isinstance(x4.sum().item(), float)


def test_rng_inside_conditional_body_raises(x4):
    g = SimGraph()
    pred = torch.tensor(True)
    with pytest.raises(CaptureError, match="RNG"):
        with g.capture():
            g.begin_while(pred)
            torch.rand(3)
    # RNG outside conditional nodes is fine (philox offsets on a GPU)
    g2 = SimGraph()
    with g2.capture():
        r = torch.rand(3)
    g2.replay()
    assert ((r >= 0) & (r < 1)).all()


def test_unbalanced_capture_raises():
    g = SimGraph()
    with pytest.raises(CaptureError, match="still open"):
        with g.capture():
            g.begin_if(torch.tensor(True))
    with pytest.raises(CaptureError, match="outside capture"):
        SimGraph().begin_while(torch.tensor(True))


def test_switch_node_clamps_index():
    """The SWITCH node (CUDA >= 12.8 semantics) with the set-handle kernel clamping."""
    g = SimGraph()
    idx = torch.tensor(0)
    out = torch.zeros(())
    with g.capture():
        g.begin_switch(idx, 3)
        for k in range(3):
            if k:
                g.next_body()
            out.fill_(10 * (k + 1))
        g.end_conditional()
    for i, want in [(0, 10), (1, 20), (2, 30), (-4, 10), (99, 30)]:
        idx.fill_(i)
        g.replay()
        assert out.item() == want


def test_write_back_handles_swapped_and_aliased_outputs():
    """A body whose outputs alias other carries must not clobber them mid write-back."""
    a, b = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])
    state = [a, b]
    _write_back(state, [b, a])  # (a, b) -> (b, a)
    assert state[0].tolist() == [3.0, 4.0] and state[1].tolist() == [1.0, 2.0]
    m = torch.arange(4.0).reshape(2, 2)
    state = [m]
    _write_back(state, [m.t()])  # a transposed view of the carry itself
    assert state[0].tolist() == [[0.0, 2.0], [1.0, 3.0]]


def test_swap_carries(x4):
    cf = captured(P.swap, x4, x4 + 1, T(3))
    for n in (0, 1, 2, 5):
        torch.testing.assert_close(cf(x4, x4 * 3, T(n)), P.swap(x4, x4 * 3, T(n)))


@settings(max_examples=25, deadline=None)
@given(
    a=st.integers(0, 6),
    b=st.integers(0, 6),
    values=st.lists(st.floats(-4, 4), min_size=4, max_size=4),
)
def test_nested_property(nested_sim, a, b, values):
    x = torch.tensor(values)
    torch.testing.assert_close(nested_sim(x, T(a), T(b)), P.nested(x, T(a), T(b)))


def test_cond_tree_on_two_indices_is_not_a_switch(x4):
    """Nested conds on *different* index tensors must stay IF nodes."""

    def f(i, j, x):
        def inner(i, j, x):
            return torch.cond(j < 1, lambda i, j, x: x + i + j, lambda i, j, x: x * 5 + i, (i, j, x))

        return torch.cond(i < 2, inner, lambda i, j, x: x * 3 + j, (i, j, x))

    cf = captured(f, T(0), T(0), x4)
    for i in (0, 1, 2, 3):
        for j in (0, 1, 2):
            torch.testing.assert_close(cf(T(i), T(j), x4), f(T(i), T(j), x4))
    counts = _single_graph(cf).counts()
    assert counts["switch"] == 0 and counts["if"] == 2


def test_switch_node_after_an_eager_while_loop(x4):
    """torch runs an eager while_loop through Dynamo; a later trace of ptc.switch then passes
    a size to the inner conds as a number operand: still one SWITCH node."""
    torch._dynamo.reset()
    P.counted(x4, T(2))  # an eager while_loop call
    cf = captured(P.switch_in_while, x4, T(3), T(0))
    for n, k in [(3, 0), (4, -3), (2, 1)]:
        torch.testing.assert_close(cf(x4, T(n), T(k)), P.switch_in_while(x4, T(n), T(k)))
    counts = _single_graph(cf).counts()
    assert counts["switch"] == 1 and counts["if"] == 0
    torch._dynamo.reset()
