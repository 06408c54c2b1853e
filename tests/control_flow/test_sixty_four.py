"""Every consumer of switch at 64 branches (the MoE-sized case), bounded for CI: each consumer
once, a few indices per call (the first, both sides of the top splits, the last, out of range).
Compiling a backward, and compiling branches of differing sizes, are the slowest at 64 (the
tree's front end grows as N log N, and a backward has a tree of its own): CI runs those two at
16. Smaller N run every consumer on every index in test_traced.py and test_autograd_vmap.py; the
compiled N = 64 forward is in test_index_read_once.py."""

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from ptc.control_flow import cond_depth, switch, tree_depth

from .helpers import affine_branches, check_against_reference, check_gradients, program, reference, save_load

pytestmark = pytest.mark.slow

N = 64
INDICES = [-3, 0, 1, 31, 32, 63, 64, 500]
X = torch.arange(8.0) - 3.0
BRANCHES = affine_branches(N)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()


def _check(fn, branches=BRANCHES):
    check_against_reference(fn, branches, X, INDICES)


@pytest.mark.parametrize("strict", [False, True], ids=["nonstrict", "strict"])
def test_export_round_trips(strict):
    ep = torch.export.export(program(BRANCHES), (torch.tensor(0), X), strict=strict)
    assert cond_depth(ep.graph_module) == tree_depth(N)
    _check(ep.module())
    _check(save_load(ep).module())


def test_make_fx_symbolic():
    gm = make_fx(lambda i, x: switch(i, BRANCHES, x), tracing_mode="symbolic")(torch.tensor(0), X)
    assert cond_depth(gm) == tree_depth(N)
    _check(gm)


def _differing(n):
    # 16 different output sizes among the branches
    return [(lambda k: lambda x: torch.cat([x, x])[: k % 16 + 1] * 2)(k) for k in range(n)]


def test_differing_sizes_export():
    branches = _differing(N)
    ep = torch.export.export(program(branches), (torch.tensor(0), X))
    _check(ep.module(), branches)
    _check(save_load(ep).module(), branches)


def test_differing_sizes_compile_at_sixteen():
    branches = _differing(16)
    _check(torch.compile(lambda i, x: switch(i, branches, x), fullgraph=True, backend="aot_eager"), branches)


def _sine_branches(n):
    return [(lambda k: lambda x: (x * (k + 1)).sin())(k) for k in range(n)]


def test_gradients_eager():
    branches = _sine_branches(N)
    check_gradients(lambda i, x: switch(i, branches, x).sum(), branches, X, INDICES)


def test_gradients_compiled_at_sixteen():
    branches = _sine_branches(16)
    compiled = torch.compile(lambda i, x: switch(i, branches, x).sum(), fullgraph=True, backend="aot_eager")
    check_gradients(compiled, branches, X, [0, 7, 8, 15])


def test_vmap_over_a_batched_index():
    index = torch.tensor(INDICES)
    xs = torch.randn(len(INDICES), 8)
    got = torch.vmap(lambda i, x: switch(i, BRANCHES, x))(index, xs)
    want = torch.stack([reference(BRANCHES, i, x) for i, x in zip(INDICES, xs)])
    assert torch.equal(got, want)
