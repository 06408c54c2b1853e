"""The checker: every violation is a SpecViolation naming path, rule, value and bindings."""

import dataclasses

import pytest
import sympy
import torch

import ptc
from ptc.specs import STATIC, Var, check, dynamic_spec, tensor

B = Var("B", min=1, max=64)
T = Var("T", min=8, max=4096)
H = Var("H", min=1, max=16)
A = Var("A", min=1, max=100)


@dynamic_spec(
    {"x": tensor(B, T, STATIC), "y": tensor(2 * B, T), "z": tensor(B * H), "w": tensor(2 * A + 1), "n": H},
    assumptions=[sympy.Eq(T % 8, 0), B <= T],
)
def model(x, y, z, w, n):
    return x.sum() + y.sum() + z.sum() + w.sum() + n


def good(**over):
    call = dict(x=torch.ones(4, 16, 5), y=torch.ones(8, 16), z=torch.ones(12), w=torch.ones(7), n=3)
    call.update(over)
    return call


def test_valid_call_runs():
    assert model(**good()).item() == 4 * 16 * 5 + 8 * 16 + 12 + 7 + 3


@pytest.mark.parametrize(
    "override, message",
    [
        (dict(y=torch.ones(9, 16)), "y.shape[0]=9 violates y.shape[0] == 2*B where B=4 from x.shape[0]"),
        (dict(y=torch.ones(8, 24)), "y.shape[1]=24 violates y.shape[1] == T where T=16 from x.shape[1]"),
        (dict(x=torch.ones(65, 72, 1), y=torch.ones(130, 72)), "x.shape[0]=65 violates 1 <= B <= 64 (B from x.shape[0])"),
        (dict(x=torch.ones(4, 20, 5), y=torch.ones(8, 20)), "assumption (T % 8) == 0 does not hold where T=20 from x.shape[1]"),
        (dict(z=torch.ones(13)), "z.shape[0]=13 violates z.shape[0] == B*H where B=4 from x.shape[0], H=3 from n"),
        (dict(w=torch.ones(8)), "w.shape[0]=8 violates w.shape[0] == 2*A + 1: no integer A gives 8"),
        (dict(w=torch.ones(203)), "A=101 (from w.shape[0] == 2*A + 1) violates 1 <= A <= 100"),
        (dict(x=torch.ones(4, 16)), "x must have 3 dims [B, T, STATIC], got 2: shape (4, 16)"),
        (dict(x=[1, 2]), "x must be a tensor with dims [B, T, STATIC], got list"),
        (dict(n=3.0), "n must be an int (spec H), got float"),
        (dict(n=True), "n must be an int (spec H), got bool"),
        (dict(n=0, z=torch.ones(0)), "n=0 violates 1 <= H <= 16 (H from n)"),
    ],
)
def test_violation_messages(override, message):
    with pytest.raises(ptc.SpecViolation) as info:
        model(**good(**override))
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)


def test_inequality_between_variables():
    small_t = Var("T", min=1, max=64)

    @dynamic_spec({"x": tensor(B, small_t)}, assumptions=[B <= small_t])
    def f(x):
        return x

    f(torch.ones(2, 3))
    with pytest.raises(ptc.SpecViolation, match=r"assumption B <= T does not hold where B=5 from x.shape\[0\], T=3"):
        f(torch.ones(5, 3))


def test_floor_division_dim():
    @dynamic_spec(x=tensor(T), half=tensor(T // 2))
    def f(x, half):
        return half

    f(torch.ones(9), torch.ones(4))
    with pytest.raises(ptc.SpecViolation, match=r"half.shape\[0\]=5 violates half.shape\[0\] == T // 2 where T=9"):
        f(torch.ones(9), torch.ones(5))


@dataclasses.dataclass
class Batch:
    tokens: torch.Tensor
    lengths: torch.Tensor


def test_containers_dataclasses_star_args_and_kwargs():
    C = Var("C", 1, 32)

    @dynamic_spec(
        {
            "batch": {"tokens": tensor(B, T), "lengths": tensor(B)},
            "pair": (tensor(C), [tensor(C, 2)]),
            "*args": [tensor(B)],
            "**kwargs": {"bias": tensor(T)},
        }
    )
    def f(batch, pair, *args, **kwargs):
        return pair[0]

    ok = dict(bias=torch.ones(16))
    f(Batch(torch.ones(2, 16), torch.ones(2)), (torch.ones(3), [torch.ones(3, 2)]), torch.ones(2), **ok)
    f({"tokens": torch.ones(2, 16), "lengths": torch.ones(2)}, (torch.ones(3), [torch.ones(3, 2)]), torch.ones(2), **ok)
    with pytest.raises(ptc.SpecViolation, match=r"batch.lengths.shape\[0\]=3 violates batch.lengths.shape\[0\] == B"):
        f(Batch(torch.ones(2, 16), torch.ones(3)), (torch.ones(3), [torch.ones(3, 2)]), torch.ones(2), **ok)
    with pytest.raises(ptc.SpecViolation, match=r"pair\[1\]\[0\].shape\[0\]=4 violates pair\[1\]\[0\].shape\[0\] == C where C=3"):
        f(Batch(torch.ones(2, 16), torch.ones(2)), (torch.ones(3), [torch.ones(4, 2)]), torch.ones(2), **ok)
    with pytest.raises(ptc.SpecViolation, match=r"args\[0\] is missing"):
        f(Batch(torch.ones(2, 16), torch.ones(2)), (torch.ones(3), [torch.ones(3, 2)]), **ok)
    with pytest.raises(ptc.SpecViolation, match=r"kwargs has no key 'bias'"):
        f(Batch(torch.ones(2, 16), torch.ones(2)), (torch.ones(3), [torch.ones(3, 2)]), torch.ones(2))
    with pytest.raises(ptc.SpecViolation, match=r"batch \(dict\) has no attribute or key|batch has no key 'lengths'"):
        f({"tokens": torch.ones(2, 16)}, (torch.ones(3), [torch.ones(3, 2)]), torch.ones(2), **ok)


def test_self_describes_module_attributes_whatever_the_first_parameter_is_called():
    D = Var("D", 1, 64)

    @dynamic_spec({"self": {"weight": tensor(D, D)}, "x": tensor(B, D)})
    class Linear(torch.nn.Module):
        def __init__(self, d):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.eye(d))

        def forward(me, x):  # noqa: N805 - the point of the test
            return x @ me.weight

    m = Linear(4)
    assert torch.equal(m(torch.ones(2, 4)), torch.ones(2, 4))
    with pytest.raises(ptc.SpecViolation, match=r"x.shape\[1\]=5 violates x.shape\[1\] == D where D=4 from self.weight.shape\[0\]"):
        m(torch.ones(2, 5))
    check(m, torch.ones(3, 4))


def test_unspecified_policy_error_names_the_parameter():
    @dynamic_spec({"x": tensor(B)}, unspecified="error")
    def f(x, extra):
        return x

    f(torch.ones(2), 3)
    with pytest.raises(ptc.SpecError, match="extra holds a tensor the spec does not describe"):
        f(torch.ones(2), {"t": torch.ones(1)})


def test_defaults_and_keyword_only_parameters_bind():
    @dynamic_spec({"x": tensor(B), "scale": tensor(B)})
    def f(x, *, scale, eps=1e-5):
        return x * scale + eps

    f(torch.ones(2), scale=torch.ones(2))
    with pytest.raises(ptc.SpecViolation, match=r"scale.shape\[0\]=3"):
        f(torch.ones(2), scale=torch.ones(3))
    with pytest.raises(TypeError):  # Python's own binding error, as for the plain function
        f(torch.ones(2))
