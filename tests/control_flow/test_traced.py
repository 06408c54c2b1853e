"""switch under torch.compile, torch.export (strict and non-strict) and make_fx."""

import io

import expecttest
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import ptc
from ptc.control_flow import cond_depth, fix_export_metadata, render_cond_tree, switch, tree_depth

from .helpers import affine_branches, check_against_reference, prefix_branches, program, reference, save_load

X = torch.arange(8.0) - 3.0
NS = range(1, 10)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    # every test compiles the same lambda code object with new branches
    torch._dynamo.reset()


def _check(run, branches):
    check_against_reference(run, branches, X)


@pytest.mark.parametrize("n", NS)
def test_compile_fullgraph_matches_eager(n):
    branches = affine_branches(n)
    compiled = torch.compile(lambda i, x: switch(i, branches, x), fullgraph=True, backend="eager")
    _check(compiled, branches)


@pytest.mark.parametrize("strict", [False, True], ids=["nonstrict", "strict"])
@pytest.mark.parametrize("n", NS)
def test_export_is_a_balanced_tree_and_round_trips(n, strict):
    branches = affine_branches(n)
    ep = torch.export.export(program(branches), (torch.tensor(0), X), strict=strict)
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
    ep = torch.export.export(program(branches), (torch.tensor(0), X))
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
    ep = torch.export.export(program(branches), (torch.tensor(0), X), strict=True)
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


def _consumers():
    """Every consumer that traces switch: name -> run(fn, index, x)."""

    def export(strict):
        def run(fn, i, x):
            class Program(torch.nn.Module):
                def forward(self, index, x):
                    return fn(index, x)

            return torch.export.export(Program(), (i, x), strict=strict)

        return run

    return {
        "compile-fullgraph": lambda fn, i, x: torch.compile(fn, fullgraph=True, backend="eager")(i, x),
        "compile": lambda fn, i, x: torch.compile(fn, backend="eager")(i, x),
        "export-strict": export(True),
        "export-nonstrict": export(False),
        "make_fx": lambda fn, i, x: make_fx(fn, tracing_mode="symbolic")(i, x),
        "vmap": lambda fn, i, x: torch.vmap(fn)(i.expand(2), x.expand(2, *x.shape)),
    }


CONSUMERS = _consumers()


def _pair(dtype=torch.float32):
    return lambda x: (x * 2, (x * 3).to(dtype))


@pytest.mark.parametrize("consumer", CONSUMERS)
@pytest.mark.parametrize(
    "bad, match",
    [
        pytest.param(
            _pair(torch.float64),
            r"branches\[2\] returns a different dtype than branches\[0\]: output\[1\] is "
            r"torch.float64 in branches\[2\] but torch.float32 in branches\[0\]",
            id="dtype",
        ),
        pytest.param(
            lambda x: [x * 2, x * 3],
            r"branches\[2\] returns a different structure than branches\[0\]: output is a list "
            r"of 2 in branches\[2\] but a tuple of 2 in branches\[0\]",
            id="structure",
        ),
        pytest.param(
            lambda x: (x * 2, (x * 3).unsqueeze(0)),
            r"branches\[2\] returns a different number of dimensions than branches\[0\]: "
            r"output\[1\] is 2-d in branches\[2\] but 1-d in branches\[0\]",
            id="ndim",
        ),
    ],
)
def test_branch_mismatch_is_raised_by_every_tracing_consumer(consumer, bad, match):
    branches = [_pair(), _pair(), bad]
    with pytest.raises(ptc.BranchMismatch, match=match) as info:
        CONSUMERS[consumer](lambda i, x: switch(i, branches, x), torch.tensor(0), X)
    assert isinstance(info.value, TypeError)


@pytest.mark.parametrize("consumer", CONSUMERS)
@pytest.mark.parametrize("index", [torch.tensor(1.0), torch.tensor(True)], ids=["float", "bool"])
def test_non_integer_index_is_a_ptc_type_error_in_every_consumer(consumer, index):
    branches = affine_branches(3)
    with pytest.raises(ptc.PtcTypeError, match=r"switch: index must be a Python int or a tensor of integer dtype"):
        CONSUMERS[consumer](lambda i, x: switch(i, branches, x), index, X)


def test_non_scalar_index_is_a_ptc_value_error_under_fullgraph():
    compiled = torch.compile(lambda i, x: switch(i, affine_branches(3), x), fullgraph=True, backend="eager")
    with pytest.raises(ptc.PtcValueError, match=r"index must be a scalar"):
        compiled(torch.zeros(2, dtype=torch.int64), X)


def test_nested_switches_are_checked_separately():
    inner = [lambda x: (x * 2).double(), lambda x: (x * 3).double()]
    outer = [lambda i, x: switch(i, inner, x), lambda i, x: switch(i, inner, x) + 1, lambda i, x: x.double()]
    compiled = torch.compile(lambda i, x: switch(i, outer, i, x), fullgraph=True, backend="eager")
    for i in range(3):
        assert torch.equal(compiled(torch.tensor(i), X), outer[i](torch.tensor(i), X))

    bad = [lambda x: x * 2, lambda x: x.double()]
    outer = [lambda i, x: (x * 2).double(), lambda i, x: switch(i, bad, x)]
    with pytest.raises(ptc.BranchMismatch, match=r"branches\[1\] returns a different dtype than branches\[0\]"):
        torch.compile(lambda i, x: switch(i, outer, i, x), fullgraph=True, backend="eager")(torch.tensor(0), X)


def test_eager_runs_only_the_chosen_branch_and_does_not_compare_outputs():
    # documented: eager does not run (so does not check) the other branches
    branches = [lambda x: x * 2, lambda x: (x * 2).long()]
    assert switch(torch.tensor(0), branches, X).dtype == torch.float32
    assert switch(torch.tensor(1), branches, X).dtype == torch.int64


def test_bad_index_is_rejected_while_tracing_too():
    branches = affine_branches(3)
    with pytest.raises(ptc.PtcTypeError, match="integer dtype"):
        make_fx(lambda i, x: switch(i, branches, x))(torch.tensor(1.0), X)


class TestGoldenGraphs(expecttest.TestCase):
    def _tree(self, n):
        ep = torch.export.export(program(affine_branches(n)), (torch.tensor(0), X))
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
        eq
        where
      false:
        mul(2,)
        add(1,)
        eq
        where
  false:
    mul(3,)
    add(2,)
    eq
    where""")

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
            eq
            where
          false:
            mul(2,)
            add(1,)
            eq
            where
      false:
        cond(index < 3)
          true:
            mul(3,)
            add(2,)
            eq
            where
          false:
            mul(4,)
            add(3,)
            eq
            where
  false:
    cond(index < 6)
      true:
        cond(index < 5)
          true:
            mul(5,)
            add(4,)
            eq
            where
          false:
            mul(6,)
            add(5,)
            eq
            where
      false:
        cond(index < 7)
          true:
            mul(7,)
            add(6,)
            eq
            where
          false:
            mul(8,)
            add(7,)
            eq
            where""")
