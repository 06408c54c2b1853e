"""What a decorated call leaves behind, and where its contract holds.

A compiled call marks its tensors and names its ints for Dynamo only for the
call's duration; scalar int Vars follow their kind; a decorated function called
inside a larger compiled function is checked at the call.
"""

import functools

import pytest
import torch
from torch._dynamo.utils import counters
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

import ptc
from ptc.specs import Var, dynamic_spec, export, tensor

from .helpers import Graphs


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()


def _attributes(t):
    """A copy of ``vars(t)`` that later in-place changes to its sets and dicts do not reach."""
    return {k: v.copy() if isinstance(v, (set, dict, list)) else v for k, v in vars(t).items()}


def _placeholder_values(gm):
    return [n.meta["example_value"] for n in gm.graph.nodes if n.op == "placeholder"]


def test_decorated_calls_leave_every_input_tensor_as_it_was():
    """Compiled calls (valid, violating, raising, with a nested decorated call) and an
    export leave each input tensor's ``__dict__`` equal to what it was, the user's own
    attributes and marks included; another compiled function then takes the tensors
    as if ptc had never seen them."""
    B = Var("B", min=1, max=64)  # backed, min 1: maybe_mark_dynamic, which updates an existing set in place
    C = Var("C", min=1, max=64, kind="unbacked")

    @dynamic_spec({"x": tensor(C)})
    def inner(x):
        return x + 1

    @dynamic_spec({"x": tensor(B, 3), "y": tensor(B)})
    def f(x, y, fail=False):
        if fail:
            raise KeyError("raised inside")
        return inner(x.sum(1)) * y

    x, y = torch.randn(8, 3), torch.randn(8)
    x.note = "mine"
    torch._dynamo.maybe_mark_dynamic(x, 1)  # the user's own mark on a dim the spec does not vary
    before = [_attributes(x), _attributes(y)]

    compiled = torch.compile(f, backend="eager")
    assert torch.allclose(compiled(x, y), f(x, y))
    with pytest.raises(ptc.SpecViolation):
        compiled(x, torch.randn(7))
    with pytest.raises(KeyError, match="raised inside"):
        compiled(x, y, True)
    export(f, (x, y), {"fail": False})
    assert [vars(x), vars(y)] == before

    a, b = torch.randn(8, 3), torch.randn(8)
    compiled(a, b)
    assert vars(a) == vars(b) == {}
    other = torch.compile(lambda t: t + 1, backend="eager")
    for t in [a, b, x, y]:  # torch: "Guard failed on the same frame it was created" on a leftover mark
        assert torch.equal(other(t), t + 1)


@pytest.mark.parametrize("kind, graphs", [("unbacked", 1), ("backed", 1), ("auto", 2)])
def test_scalar_int_follows_its_kind(kind, graphs):
    """unbacked: one graph with an unbacked symbol; backed: one graph with a backed
    symbol from the first call; auto: torch's automatic dynamic (a constant first).
    torch.compiler.config is as it was after each call."""
    N = Var("N", min=0, max=64, kind=kind)

    @dynamic_spec({"x": tensor(4), "n": N})
    def f(x, n):
        return x * n

    backend = Graphs()
    compiled = torch.compile(f, backend=backend)
    config = torch.compiler.config
    lists = (config.dynamic_sources, config.unbacked_sources)
    for n in [5, 7, 0, 1]:
        assert torch.equal(compiled(torch.ones(4), n), torch.full((4,), float(n)))
        assert (config.dynamic_sources, config.unbacked_sources) == lists
    assert len(backend.graphs) == graphs
    (n_value,) = [v for v in _placeholder_values(backend.graphs[-1]) if isinstance(v, torch.SymInt)]
    assert bool(free_unbacked_symbols(n_value)) == (kind == "unbacked")


def test_unbacked_zero_dims_after_the_first_cost_one_graph_per_set_of_zero_dims():
    """The documented stride rule of ``Var(kind="unbacked")``: sizes 0 (leading) and 1
    share the first graph; a call whose dims after the first are 0 compiles one graph
    for that set of zero dims, reused by the next call with the same set."""
    B, T, H = (Var(name, min=0, max=64, kind="unbacked") for name in "BTH")

    @dynamic_spec({"x": tensor(B, T, H)})
    def f(x):
        return x * 2

    backend = Graphs()
    compiled = torch.compile(f, fullgraph=True, backend=backend)
    counts = []
    for shape in [(2, 3, 4), (0, 3, 4), (1, 1, 1), (5, 6, 7), (2, 0, 4), (3, 0, 5), (2, 3, 0), (3, 5, 0)]:
        assert compiled(torch.ones(shape)).shape == shape
        counts.append(len(backend.graphs))
    assert counts == [1, 1, 1, 1, 2, 2, 3, 3]


def test_call_inside_a_compiled_function_is_checked_at_the_call():
    """The decorated function's graph is dynamic from the first valid call; a violation
    raises the eager SpecViolation and compiles nothing. The wrapper's own frame guards
    ``x`` as any frame that breaks its graph at a call does: a size outside what it has
    seen (here 0 or 1, which torch specialises) gets it an entry with an empty graph."""
    B = Var("B", min=2, max=64)

    @dynamic_spec({"x": tensor(B, 3)})
    def f(x):
        return x * 2

    @functools.wraps(f)
    def wrapper(x):
        return f(x) + 1

    backend = Graphs()
    compiled = torch.compile(wrapper, backend=backend)
    assert torch.equal(compiled(torch.ones(5, 3)), torch.full((5, 3), 3.0))
    (f_graph,) = [gm for gm in backend.graphs if "* 2" in gm.code]
    (x_value,) = [v for v in _placeholder_values(f_graph) if isinstance(v, torch.Tensor)]
    assert isinstance(x_value.shape[0], torch.SymInt)  # dynamic from the first valid call
    compiled(torch.ones(6, 3))

    graphs, frames = len(backend.graphs), counters["frames"]["total"]
    for size in [65, 100]:
        with pytest.raises(ptc.SpecViolation, match=rf"x.shape\[0\]={size} violates 2 <= B <= 64"):
            compiled(torch.ones(size, 3))
    assert (len(backend.graphs), counters["frames"]["total"]) == (graphs, frames)
    for size in [1, 0]:
        with pytest.raises(ptc.SpecViolation) as eager:
            f(torch.ones(size, 3))
        with pytest.raises(ptc.SpecViolation) as inlined:
            compiled(torch.ones(size, 3))
        assert str(inlined.value) == str(eager.value) == f"x.shape[0]={size} violates 2 <= B <= 64 (B from x.shape[0])"
    assert torch.equal(compiled(torch.ones(9, 3)), torch.full((9, 3), 3.0))
    assert len(backend.graphs) == graphs


def test_module_call_inside_a_compiled_function_is_checked_at_the_call():
    """A spec'd module called from a compiled function: its forward compiles as its own
    graph with the int unbacked from the first call, and a violation compiles nothing."""
    D = Var("D", min=2, max=64)
    N = Var("N", min=0, max=9, kind="unbacked")

    @dynamic_spec(x=tensor(D, 4), n=N)
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x, n):
            return self.lin(x) * n

    net = Net()
    backend = Graphs()
    compiled = torch.compile(lambda x, n: net(x, n) + 1, backend=backend)
    for d, n in [(2, 3), (3, 0), (5, 1)]:
        x = torch.randn(d, 4)
        assert torch.allclose(compiled(x, n), net(x, n) + 1)
    unbacked = [gm for gm in backend.graphs if any(isinstance(v, torch.SymInt) and free_unbacked_symbols(v) for v in _placeholder_values(gm))]
    assert len(unbacked) == 1  # the module's own graph: n unbacked, from the first call
    graphs = len(backend.graphs)
    with pytest.raises(ptc.SpecViolation, match=r"n=10 violates 0 <= N <= 9"):
        compiled(torch.randn(3, 4), 10)
    assert len(backend.graphs) == graphs


def test_call_inside_a_fullgraph_function_is_inlined_with_its_facts():
    """fullgraph=True forbids the graph break: the call is inlined into the caller's
    graph with its facts, so that graph knows the spec's relation (its sizes follow
    torch's automatic dynamic: nothing marks the caller's inputs)."""
    B = Var("B", min=2, max=64)

    @dynamic_spec({"x": tensor(B), "y": tensor(2 * B)})
    def f(x, y):
        return x.sum() + y.sum()

    backend = Graphs()
    compiled = torch.compile(lambda x, y: f(x, y) * 2, fullgraph=True, backend=backend)
    for b in [3, 4, 5]:
        assert compiled(torch.ones(b), torch.ones(2 * b)).item() == 6 * b
    assert len(backend.graphs) == 2  # static first, then automatic dynamic
    x_value, y_value = [v for v in _placeholder_values(backend.graphs[-1]) if isinstance(v, torch.Tensor)]
    assert str(y_value.shape[0]) == f"2*{x_value.shape[0]}"


def test_attributes_the_function_sets_on_its_input_stay_as_in_eager():
    """Only ptc's marks and torch's own stamps are undone: what the user's code sets stays."""
    B = Var("B", min=2, max=64)

    @dynamic_spec({"x": tensor(B)})
    def f(x):
        x.seen = True
        return x * 2

    eager_x, compiled_x = torch.randn(8), torch.randn(8)
    f(eager_x)
    torch.compile(f, backend="eager")(compiled_x)
    assert vars(compiled_x) == vars(eager_x) == {"seen": True}


def test_an_input_returned_by_an_in_place_op_keeps_no_stamp_of_the_compile():
    """AOTAutograd stamps ``_dynamo_propagated_dynamic_indices`` on an input it returns; ptc undoes it."""
    B = Var("B", min=2, max=64)

    @dynamic_spec({"x": tensor(B)})
    def f(x):
        return x.mul_(2)

    x = torch.ones(8)
    out = torch.compile(f, backend="aot_eager")(x)
    assert torch.equal(x, torch.full((8,), 2.0)) and out is x
    assert vars(x) == {}
