"""Branches that return an operand, a view of one, or one tensor twice: what eager code
may well do (a skip path, ``x[1:]``, ``x.float()`` of a float ``x``), and what
``torch.cond`` refuses. ``switch`` copies such outputs in traced code, so every consumer
runs them and none of its outputs shares memory with the operands."""

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from ptc.control_flow import fix_export_metadata, switch

from .helpers import check_against_reference, check_gradients, program, save_load

X = torch.arange(6.0) - 2.0

SINGLE = [
    lambda x: x,  # a skip path
    lambda x: x[2:],  # a view, of another size
    lambda x: x.float(),  # returns x itself for a float x
    lambda x: x.contiguous(),  # same
    lambda x: x.view(3, 2).flatten(),  # a view of a view
    lambda x: x * 2 + 1,
]

PAIRS = [
    lambda x: (x, x),  # the operand twice
    lambda x: (lambda y: (y, y))(x * 3),  # a computed tensor twice
    lambda x: (lambda y: (y, y[1:]))(x - 1),  # a computed tensor and a view of it
    lambda x: (x * 2, x[:1]),
]


def _consumers():
    def compiled(backend, fullgraph):
        def run(fn):
            return torch.compile(fn, backend=backend, fullgraph=fullgraph)

        return run

    def exported(strict):
        def run(fn):
            class Program(torch.nn.Module):
                def forward(self, index, x):
                    return fn(index, x)

            ep = torch.export.export(Program(), (torch.tensor(0), X), strict=strict)
            # strict export of sizes that differ three conds deep needs this to save
            return save_load(fix_export_metadata(ep)).module()

        return run

    return {
        "compile-eager-fullgraph": compiled("eager", True),
        "compile-inductor": compiled("inductor", False),
        "compile-inductor-fullgraph": compiled("inductor", True),
        "export-strict": exported(True),
        "export-nonstrict": exported(False),
        "make_fx": lambda fn: make_fx(fn, tracing_mode="symbolic")(torch.tensor(0), X),
    }


CONSUMERS = _consumers()


def _shares_memory(a, b):
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()


@pytest.mark.parametrize("consumer", CONSUMERS)
def test_branches_returning_operands_or_their_views(consumer):
    run = CONSUMERS[consumer](lambda i, x: switch(i, SINGLE, x))
    x = X.clone()
    check_against_reference(run, SINGLE, x)
    assert torch.equal(x, X), "the operand was modified"
    for i in range(len(SINGLE)):
        assert not _shares_memory(run(torch.tensor(i), x), x), f"index {i}"


@pytest.mark.parametrize("consumer", ["compile-inductor-fullgraph", "export-nonstrict", "make_fx"])
def test_branches_returning_one_tensor_twice(consumer):
    run = CONSUMERS[consumer](lambda i, x: switch(i, PAIRS, x))
    x = X.clone()
    for i in range(len(PAIRS)):
        got, want = run(torch.tensor(i), x), PAIRS[i](x)
        assert all(torch.equal(g, w) for g, w in zip(got, want)), f"index {i}"
        assert not any(_shares_memory(g, x) for g in got), f"index {i}"
        assert not _shares_memory(got[0], got[1]), f"index {i}"
    assert torch.equal(x, X)


def test_gradients_through_a_skip_path():
    branches = [lambda x: x, lambda x: x * 3]
    compiled = torch.compile(lambda i, x: switch(i, branches, x).sum(), fullgraph=True)
    check_gradients(compiled, branches, X, indices=[0, 1])


def test_the_exported_graph_copies_only_the_aliasing_outputs():
    # the computed branches gain no copy: only the skip path's output is cloned
    ep = torch.export.export(program([lambda x: x, lambda x: x * 2, lambda x: x + 1]), (torch.tensor(0), X))
    clones = [
        node
        for gm in ep.graph_module.modules()
        if isinstance(gm, torch.fx.GraphModule)
        for node in gm.graph.nodes
        if node.target is torch.ops.aten.clone.default
    ]
    assert len(clones) == 1


def test_eager_keeps_the_aliasing_of_the_branch():
    # eager runs the branch itself: what it returns is returned, as in plain Python
    x = X.clone()
    assert switch(torch.tensor(0), SINGLE, x) is x


def test_two_views_of_one_intermediate_are_copied_apart():
    branches = [lambda x: (lambda y: (y[:3], y[3:]))(x * 2), lambda x: (x[:3] + 1, x[3:] + 1)]
    run = make_fx(lambda i, x: switch(i, branches, x), tracing_mode="symbolic")(torch.tensor(0), X)
    got = run(torch.tensor(0), X)
    assert torch.equal(got[0], X[:3] * 2) and torch.equal(got[1], X[3:] * 2)


class _LearnedDefault(torch.nn.Module):
    """A branch returns a parameter the model closes over (a learned default embedding), or a
    view of one; the other computes from the operand."""

    def __init__(self):
        super().__init__()
        self.null = torch.nn.Parameter(torch.arange(6.0) / 4)
        self.proj = torch.nn.Linear(6, 6)
        torch.nn.init.eye_(self.proj.weight)

    def forward(self, index, x):
        return switch(index, [lambda x: self.null, lambda x: self.null.view(2, 3).flatten(), self.proj], x)


@pytest.mark.parametrize("consumer", ["compile-eager-fullgraph", "compile-inductor", "export-strict", "export-nonstrict"])
def test_a_branch_returning_a_parameter_it_closes_over(consumer):
    """Traced code lifts the parameter as an input of the cond, which refused the branch
    ("Input-to-output aliasing detected"); it is copied like an operand."""
    model = _LearnedDefault()
    if consumer.startswith("compile"):
        backend, fullgraph = ("eager", True) if consumer.endswith("fullgraph") else ("inductor", False)
        run = torch.compile(model, backend=backend, fullgraph=fullgraph)
    else:
        ep = torch.export.export(model, (torch.tensor(0), X), strict=consumer == "export-strict")
        run = save_load(fix_export_metadata(ep)).module()
    for i in range(3):
        got = run(torch.tensor(i), X)
        torch.testing.assert_close(got, model(torch.tensor(i), X))
        assert not _shares_memory(got, model.null)
    null = model.null if consumer.startswith("compile") else run.get_parameter("null")  # an exported program's own
    loss = run(torch.tensor(1), X).sum()
    (grad,) = torch.autograd.grad(loss, null)  # the copy keeps the gradient path
    torch.testing.assert_close(grad, torch.ones(6))
