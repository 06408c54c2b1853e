"""switch under Inductor reads its index once per call, at any number of branches.

Where Dynamo may read a tensor's value into the graph (``fullgraph=True``, strict export,
``capture_scalar_outputs``), the cond tree's predicates are SymBools of one unbacked read of
the index, which Inductor's generated code evaluates on the host: one ``.item()`` per call
instead of one per tree level. Elsewhere (a plain ``torch.compile`` that may break the graph,
inside another higher-order op's body, under ``torch.func`` transforms) the tree keeps its
tensor predicates; every case computes what eager computes.
"""

import importlib.util
from pathlib import Path

import pytest
import torch

from ptc.control_flow import switch

from .helpers import affine_branches, check_against_reference, check_gradients, prefix_branches, reference

X = torch.arange(8.0) - 3.0


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()


def _bench():
    """benchmarks/switch.py, whose host-read counters these tests use."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "switch.py"
    spec = importlib.util.spec_from_file_location("ptc_bench_switch", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BENCH = _bench()


def _reads_per_call(fn, indices, *operands):
    """Average number of ``Tensor.item()`` calls per call of ``fn`` (the host reads Inductor's
    generated code makes), over ``indices``."""
    return BENCH.host_syncs_per_call(fn, indices, *operands)


def _check(fn, branches, indices=None):
    check_against_reference(fn, branches, X, indices)


def _item_calls_in_code(fn):
    return BENCH.item_calls_in_code(fn, torch.tensor(0), X)


@pytest.mark.parametrize("n", [2, 3, 8])
def test_fullgraph_inductor_reads_the_index_once(n):
    branches = affine_branches(n)
    compiled = torch.compile(lambda i, x: switch(i, branches, x), fullgraph=True)
    assert _item_calls_in_code(compiled) == 1
    _check(compiled, branches)
    assert _reads_per_call(compiled, range(n), X) == 1  # was tree_depth(n) reads: one per level


def test_capture_scalar_outputs_reads_the_index_once_without_fullgraph():
    branches = affine_branches(5)
    compiled = torch.compile(lambda i, x: switch(i, branches, x))
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        _check(compiled, branches)
        assert _reads_per_call(compiled, range(5), X) == 1


def test_without_fullgraph_the_tree_keeps_tensor_predicates_and_one_graph():
    branches = affine_branches(5)
    fn = lambda i, x: switch(i, branches, x)  # noqa: E731
    explained = torch._dynamo.explain(fn)(torch.tensor(0), X)
    assert explained.graph_count == 1 and explained.graph_break_count == 0
    compiled = torch.compile(fn)
    _check(compiled, branches)
    assert _reads_per_call(compiled, range(5), X) > 1  # one per tree level on the chosen path


def test_differing_sizes_under_inductor_read_the_index_once():
    branches = prefix_branches(5)
    compiled = torch.compile(lambda i, x: switch(i, branches, x), fullgraph=True)
    _check(compiled, branches)
    assert _reads_per_call(compiled, range(5), X) == 1


def test_gradients_through_the_read_once_tree_match_eager():
    branches = [lambda x: x.sin() * 2, lambda x: x.cos() + x, lambda x: x * x, lambda x: x.exp(), lambda x: -x]
    compiled = torch.compile(lambda i, x: switch(i, branches, x).sum(), fullgraph=True)
    check_gradients(compiled, branches, X, range(-1, 6))


def test_a_switch_inside_a_branch_keeps_tensor_predicates():
    # no branch that Inductor simplifies to its input (x * 1 + 0): torch 2.14.1's Inductor then
    # lets the cond's output alias the input and writes the next op into it (stock torch.cond too)
    inner = [(lambda k: lambda x: x * (k + 2) + k + 1)(k) for k in range(3)]
    outer = [lambda j, x: x - 1, lambda j, x: switch(j, inner, x) * 10, lambda j, x: x + 100]
    compiled = torch.compile(lambda i, j, x: switch(i, outer, j, x), fullgraph=True)
    for i in range(3):
        for j in range(3):
            assert torch.equal(compiled(torch.tensor(i), torch.tensor(j), X), outer[i](torch.tensor(j), X)), (i, j)


def test_compiled_vmap_over_a_batched_index_keeps_selecting_per_sample():
    branches = affine_branches(4)
    index = torch.tensor([3, 0, 2, 1, 7])
    xs = torch.randn(5, 8)
    compiled = torch.compile(torch.vmap(lambda i, x: switch(i, branches, x)), fullgraph=True)
    got = compiled(index, xs)
    want = torch.stack([reference(branches, i, x) for i, x in zip(index.tolist(), xs)])
    assert torch.equal(got, want)


@pytest.mark.slow
def test_sixty_four_branches_compile_and_read_the_index_once():
    branches = affine_branches(64)
    compiled = torch.compile(lambda i, x: switch(i, branches, x), fullgraph=True)
    indices = [-1, 0, 1, 31, 32, 62, 63, 64, 99]
    _check(compiled, branches, indices)
    assert _reads_per_call(compiled, indices, X) == 1
