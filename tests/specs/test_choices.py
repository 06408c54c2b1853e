"""Allowed-value sets: Var("H", choices=...) checked, compiled, exported, serialized and drawn."""

import pickle

import pytest
import sympy
import torch
from hypothesis import HealthCheck, find, given, settings

import ptc
from ptc import _compat
from ptc.specs import Spec, Var, dynamic_spec, export, native_spec, tensor
from ptc.specs.serialize import dumps, loads, to_json
from ptc.specs.strategies import invalid_calls, valid_calls

from .helpers import save_load

CHOICES = (64, 128, 256)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()


def heads(**var_kwargs):
    B = Var("B", min=2, max=8)
    H = Var("H", choices=CHOICES, **var_kwargs)

    @dynamic_spec(x=tensor(B, H))
    def f(x):
        return x.sum(1) * 2

    return f


class Compiles:
    """A backend that records, per compile, the sorted ints among its example
    inputs: none for the generic (symbolic) graph, the call's sizes for a graph
    specialised on them."""

    def __init__(self):
        self.compiles = []

    def __call__(self, gm, example_inputs):
        self.compiles.append(tuple(sorted(a for a in example_inputs if type(a) is int)))
        self.code = gm.code
        return gm


def test_var_with_choices_takes_their_range():
    H = Var("H", choices=(256, 64, 128, 64))
    assert (H.choices, H.min, H.max) == (CHOICES, 64, 256)
    assert H.range_text() == "H in {64, 128, 256}"
    assert H.contains(128) and not H.contains(96)
    again = pickle.loads(pickle.dumps(H))
    assert (again.choices, again.specialize) == (CHOICES, False)


def test_violation_names_the_argument_the_rule_and_the_choices():
    f = heads()
    f(torch.ones(2, 128))
    with pytest.raises(ptc.SpecViolation) as info:
        f(torch.ones(2, 96))
    assert str(info.value) == "x.shape[1]=96 violates H in {64, 128, 256} (H from x.shape[1])"


def test_a_solved_variable_and_a_scalar_are_checked_against_the_choices():
    H = Var("H", choices=CHOICES)
    K = Var("K", choices=(1, 3))

    @dynamic_spec(y=tensor(2 * H), k=K)
    def f(y, k):
        return y * k

    f(torch.ones(256), 3)
    with pytest.raises(ptc.SpecViolation, match=r"^H=48 \(from y.shape\[0\] == 2\*H\) violates H in \{64, 128, 256\}$"):
        f(torch.ones(96), 3)
    with pytest.raises(ptc.SpecViolation, match=r"^k=2 violates K in \{1, 3\} \(K from k\)$"):
        f(torch.ones(128), 2)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(choices=()), "Var H: choices is empty"),
        (dict(choices=(64, 96.0)), "Var H: choices must be ints, got 96.0"),
        (dict(choices=(64, True)), "Var H: choices must be ints, got True"),
        (dict(choices=64), "Var H: choices must be a collection of ints, got 64"),
        (dict(choices=(64, 512), max=256), r"Var H: choice 512 is outside \[0, 256\]"),
        (dict(choices=(8, 64), min=16), r"Var H: choice 8 is outside \[16, None\]"),
        (dict(choices=CHOICES, hint=100), "Var H: hint=100 is not one of the choices"),
        (dict(specialize=True), "Var H: specialize=True needs choices"),
        (dict(choices=CHOICES, specialize=True, kind="unbacked"), "Var H: specialize=True needs kind='backed'"),
        (dict(choices=(1, 64), specialize=True), "Var H: specialize=True with choice 1"),
    ],
)
def test_bad_choices_are_spec_errors_naming_the_var(kwargs, match):
    with pytest.raises(ptc.SpecError, match=match):
        Var("H", **kwargs)


def test_specialize_needs_the_var_as_a_bare_tensor_dim():
    H = Var("H", choices=CHOICES, specialize=True)
    with pytest.raises(ptc.SpecError, match="Var H: specialize=True applies to tensor dims"):

        @dynamic_spec(y=tensor(2 * H), n=H)
        def f(y, n):
            return y


def test_specialize_without_torch_support_is_a_clear_error(monkeypatch):
    name = "MARK_DYNAMIC_SPECIALIZE_ON"
    monkeypatch.setitem(_compat._PROBES, name, _compat.Probe(name, "", lambda: False))
    with pytest.raises(ptc.FeatureUnavailable, match="specialize_on") as info:
        Var("H", choices=CHOICES, specialize=True)
    assert info.value.requirement == name


@pytest.mark.parametrize("kind", ["backed", "unbacked"])
def test_compile_one_graph_for_every_choice_with_the_membership_asserted(kind):
    f = heads(kind=kind)
    backend = Compiles()
    compiled = torch.compile(f, fullgraph=True, backend=backend)
    for h in CHOICES + CHOICES:
        x = torch.randn(3, h)
        assert torch.allclose(compiled(x), f(x))
    assert backend.compiles == [()]  # one generic graph, no recompile
    assert "_assert_scalar" in backend.code and "== 128" in backend.code  # (H == 64) | (H == 128) | ...
    with pytest.raises(ptc.SpecViolation, match=r"x.shape\[1\]=96 violates H in \{64, 128, 256\}"):
        compiled(torch.randn(3, 96))
    assert backend.compiles == [()]


def test_compile_specialize_builds_one_graph_per_choice_from_one_trace():
    f = heads(specialize=True)
    backend = Compiles()
    compiled = torch.compile(f, fullgraph=True, backend=backend)
    torch._dynamo.utils.counters.clear()
    for h in (128, 64, 256, 64, 128, 256):
        x = torch.randn(3, h)
        assert torch.allclose(compiled(x), f(x))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1  # one Dynamo trace
    assert backend.compiles == [(), (3, 128), (3, 64), (3, 256)]  # the generic graph, then one per choice used
    with pytest.raises(ptc.SpecViolation):
        compiled(torch.randn(3, 96))
    assert backend.compiles == [(), (3, 128), (3, 64), (3, 256)]
    x = torch.randn(3, 64)
    assert not [k for k in vars(x) if k.startswith("_dynamo") or k == "_specialize_on"]


@pytest.mark.parametrize("strict", [False, True], ids=["nonstrict", "strict"])
def test_export_states_the_range_and_asserts_the_membership(strict):
    f = heads()
    ep = export(f, (torch.ones(3, 64),), strict=strict)
    ranges = sorted((int(r.lower), int(r.upper)) for r in ep.range_constraints.values())
    assert ranges == [(2, 8), (64, 256)]
    program = save_load(ep).module()
    for h in CHOICES:
        assert torch.equal(program(torch.ones(3, h)), f(torch.ones(3, h)))
    with pytest.raises(RuntimeError, match=r"Eq\(\w+, 64\) \| Eq\(\w+, 128\) \| Eq\(\w+, 256\)"):
        program(torch.ones(3, 96))


def test_json_round_trip_keeps_choices_and_specialize():
    H = Var("H", choices=CHOICES, specialize=True)
    spec = Spec({"x": tensor(H)}, assumptions=[sympy.Eq(H % 64, 0)])
    data = to_json(spec)
    assert data["vars"][0]["choices"] == list(CHOICES) and data["vars"][0]["specialize"] is True
    again = loads(dumps(spec))
    assert again == spec
    (h,) = again.vars
    assert (h.choices, h.specialize, h.min, h.max) == (CHOICES, True, 64, 256)
    f = dynamic_spec(again)(lambda x: x)
    f(torch.ones(128))
    with pytest.raises(ptc.SpecViolation, match=r"violates H in \{64, 128, 256\}"):
        f(torch.ones(192))


H_ONLY = Var("H", choices=(5, 8, 32))


@dynamic_spec(x=tensor(H_ONLY))
def h_only(x):
    return x


@settings(max_examples=30, deadline=None)
@given(call=valid_calls(h_only, max_size=16))
def test_valid_draws_take_values_from_the_choices(call):
    (), kwargs = call
    assert kwargs["x"].shape[0] in (5, 8, 32)


def test_valid_draws_reach_every_choice_whatever_max_size():
    for h in (5, 8, 32):
        find(valid_calls(h_only, max_size=16), lambda call, h=h: call[1]["x"].shape[0] == h)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(call=invalid_calls(h_only, max_size=16))
def test_invalid_draws_fall_outside_the_choices(call):
    (), kwargs = call
    assert kwargs["x"].shape[0] not in (5, 8, 32)
    with pytest.raises(ptc.SpecViolation, match=r"violates H in \{5, 8, 32\}"):
        h_only(**kwargs)


def test_drawing_calls_leaves_torchs_generator_where_it_was():
    """The strategies made their tensors with torch.randn on the global generator: a
    hypothesis test that seeded torch saw its numbers shift with every draw."""
    torch.manual_seed(0)
    before = torch.get_rng_state()
    find(valid_calls(h_only, max_size=16), lambda call: call[1]["x"].shape[0] == 32)
    find(invalid_calls(h_only, max_size=16), lambda call: True)
    assert torch.equal(torch.get_rng_state(), before)


def test_native_spec_refuses_choices():
    with pytest.raises(ptc.SpecError, match="to_native: torch's ShapesSpec has no allowed-value sets, and H has choices"):
        native_spec(heads())
