"""Branches that return None or Python constants beside their tensors (a layer's
``(hidden, None)``): ``torch.cond`` returns tensors only, so the tree carries such a
leaf through and puts it back; every branch must return the same value there."""

import collections

import pytest
import torch
import torch.utils._pytree as pytree

import ptc
from ptc.control_flow import switch

from .helpers import save_load
from .test_traced import CONSUMERS

X = torch.arange(6.0) - 2.0

Layer = collections.namedtuple("Layer", "hidden attention cache")
# torch.export.save needs a name for a namedtuple in the program's output spec
pytree._register_namedtuple(Layer, serialized_type_name="ptc_tests.Layer")

FAMILIES = {
    "none": [lambda x: (x * 2, None), lambda x: (x + 1, None), lambda x: (x - 1, None)],
    "int": [lambda x: (x * 2, 3), lambda x: (x[1:] + 1, 3), lambda x: (x - 1, 3)],
    "namedtuple": [
        lambda x: Layer(x * 2, None, 2),
        lambda x: Layer(x + 1, None, 2),
        lambda x: Layer(x.exp(), None, 2),
    ],
    "dict": [
        lambda x: {"out": x * 2, "aux": None, "scale": -0.0, "causal": True},
        lambda x: {"out": x + 1, "aux": None, "scale": -0.0, "causal": True},
        lambda x: {"out": x, "aux": None, "scale": -0.0, "causal": True},
    ],
    "only-none": [lambda x: None, lambda x: None, lambda x: None],
}


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()


def _same(got, want):
    got_leaves, got_spec = pytree.tree_flatten(got)
    want_leaves, want_spec = pytree.tree_flatten(want)
    return got_spec == want_spec and all(
        torch.equal(g, w) if isinstance(w, torch.Tensor) else (type(g) is type(w) and g == w)
        for g, w in zip(got_leaves, want_leaves)
    )


def _check(consumer, branches):
    fn = lambda i, x: switch(i, branches, x)
    run = CONSUMERS[consumer](fn, torch.tensor(0), X)
    if isinstance(run, torch.export.ExportedProgram):
        run = save_load(run).module()
    for i in range(len(branches)):
        got = run(torch.tensor(i), X) if callable(run) else CONSUMERS[consumer](fn, torch.tensor(i), X)
        want = branches[i](X)
        assert _same(got, want), f"index {i}: {got} != {want}"


TRACING = [c for c in CONSUMERS if c != "vmap"]  # torch.vmap returns tensors only


@pytest.mark.parametrize("consumer", TRACING)
@pytest.mark.parametrize("family", FAMILIES)
def test_constant_leaves_come_back_in_every_consumer(consumer, family):
    _check(consumer, FAMILIES[family])


def test_constant_leaves_under_vmap_with_out_dims():
    branches = FAMILIES["none"]
    index = torch.tensor([2, 0, 1])
    got = torch.vmap(lambda i, x: switch(i, branches, x), out_dims=(0, None))(index, X.expand(3, *X.shape))
    assert got[1] is None
    assert torch.equal(got[0], torch.stack([branches[i](X)[0] for i in index.tolist()]))


STRINGS = [lambda x: (x * 2, "causal"), lambda x: (x + 1, "causal"), lambda x: (x - 1, "causal")]


@pytest.mark.parametrize("consumer", ["compile-fullgraph", "export-strict", "make_fx"])
def test_string_leaves(consumer):
    # not through torch.export.save: torch cannot load a program that returns a string
    run = CONSUMERS[consumer](lambda i, x: switch(i, STRINGS, x), torch.tensor(0), X)
    if isinstance(run, torch.export.ExportedProgram):
        run = run.module()
        assert _same(run(torch.tensor(2), X), STRINGS[2](X))
    elif callable(run):
        assert _same(run(torch.tensor(2), X), STRINGS[2](X))
    else:
        assert _same(run, STRINGS[0](X))


@pytest.mark.parametrize("family", ["none", "namedtuple"])
def test_constant_leaves_under_inductor(family):
    branches = FAMILIES[family]
    compiled = torch.compile(lambda i, x: switch(i, branches, x), fullgraph=True)
    for i in range(len(branches)):
        assert _same(compiled(torch.tensor(i), X), branches[i](X)), f"index {i}"


@pytest.mark.parametrize("consumer", ["compile-fullgraph", "export-nonstrict", "make_fx", "vmap"])
def test_differing_constants_are_a_branch_mismatch(consumer):
    branches = [lambda x: (x * 2, 3), lambda x: (x + 1, 3), lambda x: (x - 1, 4)]
    with pytest.raises(
        ptc.BranchMismatch,
        match=r"branches\[2\] returns a different value than branches\[0\]: output\[1\] is 4 in "
        r"branches\[2\] but 3 in branches\[0\]",
    ):
        CONSUMERS[consumer](lambda i, x: switch(i, branches, x), torch.tensor(0), X)


def test_differing_constants_the_signature_does_not_see_are_a_branch_mismatch():
    # inside a container the signatures do not look into (a custom pytree node), the
    # constant leaves are compared by position
    from ptc.control_flow.switch import _check_traced_output, _close_check, _open_check

    call = _open_check()
    _check_traced_output(call, 0, ("Box",), ((1, "a"),))
    with pytest.raises(ptc.BranchMismatch, match=r"branches\[1\] returns other non-tensor values than branches\[0\]"):
        _check_traced_output(call, 1, ("Box",), ((1, "b"),))
    _close_check(call)


def test_none_against_a_tensor_is_a_structure_mismatch():
    branches = [lambda x: (x * 2, None), lambda x: (x + 1, x)]
    with pytest.raises(ptc.BranchMismatch, match=r"output\[1\] is a 1-d torch.float32 tensor in branches\[1\] but None"):
        torch.compile(lambda i, x: switch(i, branches, x), fullgraph=True, backend="eager")(torch.tensor(0), X)


def test_gradients_with_constant_leaves():
    from .helpers import check_gradients

    branches = [lambda x: (x * 2, None, 3), lambda x: (x.sin(), None, 3), lambda x: (x, None, 3)]
    compiled = torch.compile(lambda i, x: switch(i, branches, x)[0].sum(), fullgraph=True)
    check_gradients(compiled, [lambda x, b=b: b(x)[0] for b in branches], X, indices=[0, 1, 2])


def test_nan_constants_are_equal_and_types_tell_constants_apart():
    nan = float("nan")
    branches = [lambda x: (x * 2, nan), lambda x: (x + 1, nan)]
    got = torch.compile(lambda i, x: switch(i, branches, x), fullgraph=True, backend="eager")(torch.tensor(1), X)
    assert torch.equal(got[0], X + 1) and got[1] != got[1]
    torch._dynamo.reset()
    branches = [lambda x: (x * 2, 1), lambda x: (x + 1, True)]
    with pytest.raises(ptc.BranchMismatch, match=r"output\[1\] is True in branches\[1\] but 1 in branches\[0\]"):
        torch.compile(lambda i, x: switch(i, branches, x), fullgraph=True, backend="eager")(torch.tensor(0), X)
