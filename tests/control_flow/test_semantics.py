"""switch's contract in eager: clamping, index types, argument errors, pytrees."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import ptc
from ptc.control_flow import switch, tree_depth

from .helpers import affine_branches, reference

X = torch.arange(4.0)


@pytest.mark.parametrize("raw", [-100, -1, 0, 1, 2, 3, 4, 99])
@pytest.mark.parametrize(
    "make_index",
    [
        pytest.param(int, id="int"),
        pytest.param(lambda i: torch.tensor(i), id="int64-0d"),
        pytest.param(lambda i: torch.tensor([i], dtype=torch.int32), id="int32-1elem"),
        pytest.param(lambda i: torch.tensor(max(min(i, 127), -128), dtype=torch.int8), id="int8"),
        pytest.param(lambda i: torch.tensor(max(min(i, 255), 0), dtype=torch.uint8), id="uint8"),
    ],
)
def test_index_is_clamped(raw, make_index):
    branches = affine_branches(4)
    index = make_index(raw)
    expected = branches[min(max(int(index), 0), 3)](X)
    assert torch.equal(switch(index, branches, X), expected)


@pytest.mark.parametrize(
    "index, match",
    [
        (torch.tensor(1.0), "integer dtype, got torch.float32"),
        (torch.tensor(1.7, dtype=torch.float64), "integer dtype, got torch.float64"),
        (torch.tensor(True), "integer dtype, got torch.bool"),
        (torch.tensor(1 + 0j), "integer dtype, got torch.complex64"),
        (1.0, "got float"),
        (True, "got a bool"),
        (None, "got NoneType"),
        ("1", "got str"),
    ],
)
def test_non_integer_index_is_a_type_error(index, match):
    with pytest.raises(ptc.PtcTypeError, match=match) as info:
        switch(index, affine_branches(3), X)
    assert isinstance(info.value, TypeError)
    assert "switch: index" in str(info.value)


@pytest.mark.parametrize("shape", [(2,), (1, 1), (0,), (2, 3)])
def test_non_scalar_index_is_a_value_error(shape):
    with pytest.raises(ValueError, match=r"index must be a scalar .*got a tensor of shape"):
        switch(torch.zeros(shape, dtype=torch.int64), affine_branches(3), X)


def test_no_branches_is_a_value_error():
    with pytest.raises(ptc.PtcValueError, match="branches is empty"):
        switch(0, [], X)
    with pytest.raises(ValueError):
        switch(torch.tensor(0), (), X)


def test_branches_must_be_a_list_of_callables():
    with pytest.raises(TypeError, match=r"branches\[1\] must be callable, got int"):
        switch(0, [torch.sin, 3], X)
    with pytest.raises(TypeError, match="must be a list or tuple of callables, got function"):
        switch(0, lambda x: x, X)


def test_pytree_operands_and_outputs():
    def add(d, scale):
        return {"sum": d["a"] + d["b"] * scale, "parts": [d["a"], d["b"]]}

    def sub(d, scale):
        return {"sum": d["a"] - d["b"] * scale, "parts": [d["b"], d["a"]]}

    d = {"a": torch.ones(3), "b": torch.arange(3.0)}
    out = switch(torch.tensor(1), [add, sub], d, 2.0)
    assert torch.equal(out["sum"], d["a"] - d["b"] * 2.0)
    assert out["parts"][0] is d["b"]


def test_single_branch_ignores_index():
    assert torch.equal(switch(torch.tensor(7), [torch.cos], X), torch.cos(X))


def test_only_the_chosen_branch_runs():
    calls = []
    branches = [(lambda k: lambda x: calls.append(k) or x)(k) for k in range(5)]
    switch(torch.tensor(3), branches, X)
    assert calls == [3]


@pytest.mark.parametrize("n, depth", [(1, 0), (2, 1), (3, 2), (4, 2), (5, 3), (8, 3), (9, 4), (16, 4)])
def test_tree_depth_is_ceil_log2(n, depth):
    assert tree_depth(n) == depth


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 12), raw=st.integers(-(2**40), 2**40), as_tensor=st.booleans())
def test_any_index_matches_reference(n, raw, as_tensor):
    branches = affine_branches(n)
    index = torch.tensor(raw) if as_tensor else raw
    assert torch.equal(switch(index, branches, X), reference(branches, raw, X))
