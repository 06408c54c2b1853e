"""The torch 2.14 dynamic_spec bugs listed in ../shared/anchors/dynamic_spec.md, passing on ptc."""

import pytest
import torch

import ptc
from ptc.specs import Var, dynamic_spec, tensor

from .helpers import Graphs



@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()


def test_ten_violations_raise_spec_violation_and_never_recompile():
    """torch 2.14: each bad call recompiles, then 'Guard failed on the same frame ... This is a bug'."""
    B = Var("B", min=2, max=16, kind="unbacked")

    @dynamic_spec(x=tensor(B, 3))
    def f(x):
        return x.sum(0)

    backend = Graphs()
    compiled = torch.compile(f, fullgraph=True, backend=backend)
    compiled(torch.ones(8, 3))
    for size in [1, 17, 0, 40, 1, 17, 20, 1, 33, 18]:
        with pytest.raises(ptc.SpecViolation, match="2 <= B <= 16"):
            compiled(torch.ones(size, 3))
    assert len(backend.graphs) == 1


def test_graph_break_does_not_recompile_for_every_size():
    """torch 2.14: after a graph break the resume frame is static and recompiles for
    every size. With ptc the entry graph is dynamic from the start and the resumed
    frame (which sees an intermediate tensor no one marked) turns dynamic through
    torch's automatic dynamic after one recompile: the count stays bounded."""
    B = Var("B", min=2, max=64, kind="unbacked")

    @dynamic_spec(x=tensor(B, 3))
    def f(x):
        y = x * 2
        torch._dynamo.graph_break()
        return y.sum(1)

    backend = Graphs()
    compiled = torch.compile(f, backend=backend)
    for size in range(4, 14):
        assert torch.equal(compiled(torch.ones(size, 3)), torch.full((size,), 6.0))
    assert len(backend.graphs) <= 4


def test_spec_does_not_leak_into_helpers():
    """torch 2.14 binds by local name in every frame: 'TensorSpec has 2 dims but tensor L['x'] has 3 dims'."""
    B = Var("B", min=2, max=64)

    def helper(x):  # a different function whose own `x` is 3-D
        torch._dynamo.graph_break()
        return x.sum()

    @dynamic_spec(x=tensor(B, 3))
    def outer(x):
        return helper(x.reshape(1, -1, 3)) + x.sum()

    compiled = torch.compile(outer, backend=Graphs())
    for size in [2, 3, 4]:
        assert compiled(torch.ones(size, 3)).item() == 6 * size


def test_unspecified_inputs_follow_automatic_dynamic_by_default():
    """torch 2.14 makes every unspecified input static: 12 sizes hit the recompile limit."""
    B = Var("B", min=2, max=64)

    @dynamic_spec(x=tensor(B))
    def f(x, y):
        return x.sum() + y.sum()

    backend = Graphs()
    compiled = torch.compile(f, fullgraph=True, backend=backend)
    for size in range(2, 14):
        assert compiled(torch.ones(4), torch.ones(size)).item() == 4 + size
    assert len(backend.graphs) <= 2


def test_unspecified_static_policy_pins_other_inputs():
    B = Var("B", min=2, max=64)

    @dynamic_spec({"x": tensor(B)}, unspecified="static")
    def f(x, y):
        return x.sum() + y.sum()

    backend = Graphs()
    compiled = torch.compile(f, fullgraph=True, backend=backend)
    for size in [2, 3, 4]:
        compiled(torch.ones(5), torch.ones(size))
    shapes = [
        [tuple(n.meta["example_value"].shape) for n in gm.graph.nodes if n.op == "placeholder" and isinstance(n.meta.get("example_value"), torch.Tensor)]
        for gm in backend.graphs
    ]
    assert len(backend.graphs) == 3  # one per size of y: it stayed static
    assert all(isinstance(s[-1][0], int) for s in shapes)


def test_phantom_variable_is_solved_not_an_error():
    """torch 2.14: 'pending check(s) reference unbound IntVar(s) [A]' when A only appears in 2*A."""
    A = Var("A", min=1, max=32, kind="unbacked")

    @dynamic_spec(y=tensor(2 * A))
    def f(y):
        return y.view(2, -1).sum(0)

    backend = Graphs()
    compiled = torch.compile(f, fullgraph=True, backend=backend)
    for n in [2, 4, 10, 64]:
        assert compiled(torch.ones(n)).shape == (n // 2,)
    assert len(backend.graphs) == 1
    with pytest.raises(ptc.SpecViolation, match="no integer A gives 7"):
        compiled(torch.ones(7))
