"""Vars, tensor specs and Spec validation: bad specs fail at definition, naming the problem."""

import functools

import pytest
import sympy
import torch

import ptc
from ptc.specs import STATIC, Spec, Var, dynamic_spec, tensor


def test_var_is_a_sympy_integer_symbol_with_identity():
    b1, b2 = Var("B", 1, 8), Var("B", 1, 8)
    assert b1 != b2 and b1 == b1
    expr = 2 * b1 + 1
    assert expr.free_symbols == {b1}
    assert sympy.Eq(b1 % 8, 0).subs(b1, 16) is sympy.true
    assert (b1 // 2).subs(b1, 9) == 4


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(name="B", min=-1), "negative"),
        (dict(name="B", min=4, max=2), "below min"),
        (dict(name="B", kind="dynamic"), "kind must be one of backed, unbacked, auto"),
        (dict(name="2B"), "identifier"),
        (dict(name="B", min=1, max=4, hint=9), "hint=9 is outside"),
        (dict(name="B", min=1.5), "min must be an int"),
    ],
)
def test_bad_var_is_a_spec_error(kwargs, match):
    with pytest.raises(ptc.SpecError, match=match):
        Var(**kwargs)


def test_bad_tensor_dims_are_spec_errors():
    with pytest.raises(ValueError, match="tensor dim 1: fixed size -3 is negative"):
        tensor(4, -3)
    with pytest.raises(ptc.SpecError, match="tensor dim 0: expected a Var"):
        tensor("B")
    with pytest.raises(ptc.SpecError, match="not ptc Vars"):
        tensor(sympy.Symbol("n") * 2)
    with pytest.raises(ptc.SpecError, match="got a bool"):
        tensor(True)


def test_misspelled_key_fails_at_decoration_with_a_suggestion():
    B = Var("B")
    with pytest.raises(ptc.SpecError, match=r"spec key 'xx' does not match any parameter .*did you mean 'x'"):

        @dynamic_spec(xx=tensor(B))
        def f(x):
            return x


def test_star_keys_need_star_parameters():
    B = Var("B")
    with pytest.raises(ptc.SpecError, match=r"'\*args'"):

        @dynamic_spec({"*args": [tensor(B)]})
        def f(x):
            return x


def test_unsolvable_expression_is_reported():
    A = Var("A", 1, 8)
    with pytest.raises(ptc.SpecError, match=r"y.shape\[0\] == A\*\*2: ptc cannot solve for A"):

        @dynamic_spec(y=tensor(A * A))
        def f(y):
            return y


def test_assumption_on_an_unbound_variable_is_reported():
    B, C = Var("B"), Var("C")
    with pytest.raises(ptc.SpecError, match="uses C, which no input of the spec binds"):

        @dynamic_spec({"x": tensor(B)}, assumptions=[C <= B])
        def f(x):
            return x


def test_assumption_must_be_a_relation():
    B = Var("B")
    with pytest.raises(ptc.SpecError, match=r"assumptions\[0\]: expected a relation"):
        Spec({"x": tensor(B)}, assumptions=[B + 1])


def test_unspecified_policy_is_validated():
    with pytest.raises(ptc.SpecError, match="unspecified must be one of auto, static, error"):
        Spec({}, unspecified="dynamic")


def test_spec_lists_its_vars_in_order():
    B, T, A = Var("B"), Var("T"), Var("A")
    spec = Spec({"x": tensor(B, T), "y": tensor(2 * A)}, assumptions=[B <= T])
    assert spec.vars == [B, T, A]


def test_cannot_decorate_twice():
    B = Var("B")

    @dynamic_spec(x=tensor(B))
    def f(x):
        return x

    with pytest.raises(ptc.SpecError, match="already has a ptc spec"):
        dynamic_spec(x=tensor(B))(f)


def test_wrapped_function_binds_through_functools_wraps():
    B = Var("B", 1, 8)

    def log_calls(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs)

        return wrapper

    @dynamic_spec(x=tensor(B), y=tensor(B))
    @log_calls
    def f(x, y):
        return x + y

    assert torch.equal(f(torch.ones(3), torch.ones(3)), torch.full((3,), 2.0))
    with pytest.raises(ptc.SpecViolation, match=r"y.shape\[0\]=4 violates y.shape\[0\] == B where B=3 from x.shape\[0\]"):
        f(torch.ones(3), torch.ones(4))
    _ = STATIC
