"""switch under torch.compile, torch.export (strict and non-strict) and make_fx."""

import io

import expecttest
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import ptc
from ptc.control_flow import cond_depth, fix_export_metadata, render_cond_tree, switch, tree_depth

from .helpers import affine_branches, prefix_branches, reference, save_load

X = torch.arange(8.0) - 3.0
NS = range(1, 10)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    # every test compiles the same lambda code object with new branches
    torch._dynamo.reset()


def _program(branches):
    class Program(torch.nn.Module):
        def forward(self, index, x):
            return switch(index, branches, x)

    return Program()


def _indices(n):
    return range(-2, n + 2)


def _check(run, branches):
    for i in _indices(len(branches)):
        got = run(torch.tensor(i), X)
        want = reference(branches, i, X)
        assert got.shape == want.shape and torch.equal(got, want), f"index {i}"




@pytest.mark.parametrize("n", NS)
def test_compile_fullgraph_matches_eager(n):
    branches = affine_branches(n)
    compiled = torch.compile(lambda i, x: switch(i, branches, x), fullgraph=True, backend="eager")
    _check(compiled, branches)


@pytest.mark.parametrize("strict", [False, True], ids=["nonstrict", "strict"])
@pytest.mark.parametrize("n", NS)
def test_export_is_a_balanced_tree_and_round_trips(n, strict):
    branches = affine_branches(n)
    ep = torch.export.export(_program(branches), (torch.tensor(0), X), strict=strict)
    assert cond_depth(ep.graph_module) == tree_depth(n)
    _check(ep.module(), branches)
    _check(save_load(ep).module(), branches)


@pytest.mark.parametrize("n", NS)
def test_make_fx_symbolic_matches_eager(n):
    branches = affine_branches(n)
    gm = make_fx(lambda i, x: switch(i, branches, x), tracing_mode="symbolic")(torch.tensor(0), X)
    assert cond_depth(gm) == tree_depth(n)
    _check(gm, branches)


def test_python_int_index_specializes_to_one_branch():
    branches = affine_branches(5)
    gm = make_fx(lambda x: switch(7, branches, x))(X)
    assert cond_depth(gm) == 0
    assert torch.equal(gm(X), branches[4](X))


def test_symint_index_under_dynamic_compile():
    branches = affine_branches(4)
    compiled = torch.compile(lambda k, x: switch(k, branches, x), fullgraph=True, backend="eager", dynamic=True)
    for k in [0, 1, 2, 3, 9, 5]:
        assert torch.equal(compiled(k, X), reference(branches, k, X))


def test_inductor_compiles_the_tree():
    branches = affine_branches(4)
    compiled = torch.compile(lambda i, x: switch(i, branches, x), fullgraph=True)
    _check(compiled, branches)


@pytest.mark.parametrize("n", [3, 5])
def test_differing_sizes_compile(n):
    branches = prefix_branches(n)
    compiled = torch.compile(lambda i, x: switch(i, branches, x), fullgraph=True, backend="aot_eager")
    _check(compiled, branches)


@pytest.mark.parametrize("n", [3, 5])
def test_differing_sizes_export_has_one_merged_size(n):
    branches = prefix_branches(n)
    ep = torch.export.export(_program(branches), (torch.tensor(0), X))
    out = next(iter(ep.graph.find_nodes(op="output"))).args[0][0]
    size = out.meta["val"].shape[0]
    assert isinstance(size, torch.SymInt)
    (symbol,) = size.node.expr.free_symbols
    assert str(symbol).startswith("u")
    bounds = ep.range_constraints[symbol]
    assert (int(bounds.lower), int(bounds.upper)) == (1, n)
    _check(ep.module(), branches)
    _check(save_load(ep).module(), branches)


@pytest.mark.parametrize("n", [3, 5])
def test_differing_sizes_strict_export_round_trips(n):
    branches = prefix_branches(n)
    ep = torch.export.export(_program(branches), (torch.tensor(0), X), strict=True)
    _check(ep.module(), branches)
    _check(save_load(fix_export_metadata(ep)).module(), branches)


def test_fix_export_metadata_repairs_torch_strict_nesting_bug():
    """torch's own nested cond (3 deep, differing sizes) fails to save after strict
    export; fix_export_metadata makes it save. If this starts passing without the
    fix, torch fixed the bug and the docstring should say from which release."""
    leaf = [(lambda k: lambda i, x: x[: k + 1] * 2)(k) for k in range(5)]

    def inner(i, x):
        return torch.cond(i < 1, leaf[0], leaf[1], (i, x))

    def left(i, x):
        return torch.cond(i < 2, inner, leaf[2], (i, x))

    def right(i, x):
        return torch.cond(i < 4, leaf[3], leaf[4], (i, x))

    class Nested(torch.nn.Module):
        def forward(self, i, x):
            return torch.cond(i < 3, left, right, (i, x))

    ep = torch.export.export(Nested(), (torch.tensor(1), X), strict=True)
    with pytest.raises(Exception, match="expected ty to be str"):
        torch.export.save(ep, io.BytesIO())
    loaded = save_load(fix_export_metadata(ep))
    for i in range(5):
        assert torch.equal(loaded.module()(torch.tensor(i), X), X[: i + 1] * 2)


def test_branch_dtype_mismatch_is_an_error_when_traced():
    branches = [lambda x: x * 2, lambda x: (x * 2).long()]
    with pytest.raises(Exception, match="dtype"):
        torch.compile(lambda i, x: switch(i, branches, x), fullgraph=True, backend="eager")(
            torch.tensor(0), X
        )


def test_bad_index_is_rejected_while_tracing_too():
    branches = affine_branches(3)
    with pytest.raises(ptc.PtcTypeError, match="integer dtype"):
        make_fx(lambda i, x: switch(i, branches, x))(torch.tensor(1.0), X)


class TestGoldenGraphs(expecttest.TestCase):
    def _tree(self, n):
        ep = torch.export.export(_program(affine_branches(n)), (torch.tensor(0), X))
        return render_cond_tree(ep.graph_module)

    def test_three_branches(self):
        self.assertExpectedInline(self._tree(3), """\
clamp(0, 2)
cond(index < 2)
  true:
    cond(index < 1)
      true:
        mul(1,)
        add(0,)
      false:
        mul(2,)
        add(1,)
  false:
    mul(3,)
    add(2,)""")

    def test_eight_branches(self):
        self.assertExpectedInline(self._tree(8), """\
clamp(0, 7)
cond(index < 4)
  true:
    cond(index < 2)
      true:
        cond(index < 1)
          true:
            mul(1,)
            add(0,)
          false:
            mul(2,)
            add(1,)
      false:
        cond(index < 3)
          true:
            mul(3,)
            add(2,)
          false:
            mul(4,)
            add(3,)
  false:
    cond(index < 6)
      true:
        cond(index < 5)
          true:
            mul(5,)
            add(4,)
          false:
            mul(6,)
            add(5,)
      false:
        cond(index < 7)
          true:
            mul(7,)
            add(6,)
          false:
            mul(8,)
            add(7,)""")
