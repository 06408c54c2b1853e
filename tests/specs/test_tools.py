"""JSON round trip, inference, hypothesis strategies and torch 2.14's native ShapesSpec."""

import json

import pytest
import sympy
import torch
from hypothesis import HealthCheck, given, settings

import ptc
from ptc import _compat
from ptc.specs import STATIC, Spec, Var, dynamic_spec, export, native_spec, spec_of, tensor
from ptc.specs.infer import infer_spec, spec_from_exported
from ptc.specs.serialize import dumps, from_json, loads, to_json
from ptc.specs.strategies import invalid_calls, valid_calls


def rich_spec():
    B = Var("B", 1, 64, hint=8)
    T = Var("T", 8, 4096, kind="unbacked")
    A = Var("A", 0, 9, kind="auto")
    return Spec(
        {
            "x": tensor(B, T, STATIC, 3),
            "y": tensor(2 * B + 1, T // 2),
            "n": A,
            "cfg": {"w": [tensor(B * A)], "pair": (tensor(B), 4)},
        },
        assumptions=[sympy.Eq(T % 8, 0), B <= T],
        unspecified="static",
    )


def test_json_round_trip_keeps_identity_expressions_and_policy():
    spec = rich_spec()
    text = dumps(spec)
    json.loads(text)  # plain JSON, derived dims included
    again = loads(text)
    assert to_json(again) == to_json(spec)
    assert again == spec
    b = again.params["x"].dims[0]
    assert again.params["y"].dims[0] == 2 * b + 1  # the same Var object in both places
    assert again.params["cfg"]["pair"] == (tensor(b), 4)
    assert (b.min, b.max, b.shape_kind, b.hint) == (1, 64, "backed", 8)
    assert again.unspecified == "static"


def test_json_rejects_foreign_data():
    with pytest.raises(ptc.SpecError, match="ptc_spec=1"):
        from_json({"version": 3})
    data = to_json(rich_spec())
    data["assumptions"] = ["v0 <= )"]
    with pytest.raises(ptc.SpecError, match="bad expression"):
        from_json(data)


def test_infer_from_examples_finds_equalities_linear_relations_products_and_divisors():
    def f(x, y, z, n):
        return x

    examples = [
        (torch.ones(4, 16, 3), torch.ones(8, 48), torch.ones(64), 2),
        (torch.ones(2, 24, 3), torch.ones(4, 72), torch.ones(48), 5),
        ((torch.ones(6, 8, 3), torch.ones(12, 24), torch.ones(48), 2), {}),
    ]
    spec = infer_spec(f, examples)
    x0, x1 = spec.params["x"].dims[:2]
    assert spec.params["x"].dims[2] == 3
    assert spec.params["y"].dims == (2 * x0, 3 * x1)
    assert spec.params["z"].dims == (x0 * x1,)
    assert isinstance(spec.params["n"], Var) and (spec.params["n"].min, spec.params["n"].max) == (2, 5)
    assert sympy.Eq(x1 % 8, 0) in spec.assumptions
    # every example satisfies the inferred spec
    checked = dynamic_spec(spec)(f)
    for ex in examples:
        args = ex[0] if isinstance(ex[1], dict) else ex
        checked(*args)


def test_infer_needs_two_examples_of_one_structure():
    with pytest.raises(ptc.SpecError, match="at least two"):
        infer_spec(lambda x: x, [(torch.ones(2),)])
    with pytest.raises(ptc.SpecError, match="differ in structure"):
        infer_spec(lambda x: x, [(torch.ones(2),), (torch.ones(2, 2),)])


def test_spec_from_exported_program_recovers_ranges_and_relations():
    B = Var("B", min=1, max=64)
    T = Var("T", min=8, max=4096)
    H = Var("H", min=1, max=16)

    @dynamic_spec({"x": tensor(B, T, H), "z": tensor(B * H)}, assumptions=[B <= T])
    def f(x, z):
        return x.sum() + z.sum()

    ep = export(f, (torch.ones(4, 16, 3), torch.ones(12)))
    recovered = spec_from_exported(ep)
    xb, xt, xh = recovered.params["x"].dims
    assert [(v.min, v.max) for v in (xb, xt, xh)] == [(1, 64), (8, 4096), (1, 16)]
    relations = {str(a) for a in recovered.assumptions}
    assert any("*" in r for r in relations)  # z == B*H came back as an assumption
    checked = dynamic_spec(recovered)(lambda x, z: None)
    checked(torch.ones(2, 8, 5), torch.ones(10))
    with pytest.raises(ptc.SpecViolation):
        checked(torch.ones(2, 8, 5), torch.ones(11))


B = Var("B", 1, 64, kind="unbacked")
T = Var("T", 8, 4096, kind="unbacked")
H = Var("H", 1, 16, kind="unbacked")


@dynamic_spec({"x": tensor(B, T, H), "y": tensor(2 * B, T), "z": tensor(B * H)}, assumptions=[sympy.Eq(T % 8, 0), B <= T])
def model(x, y, z):
    return (x.sum(2) * 2).sum(0) + y.sum(0) + z.sum()


@pytest.fixture(scope="module")
def compiled_model():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm

    torch._dynamo.reset()
    return torch.compile(model, fullgraph=True, backend=backend), graphs


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])
@given(call=valid_calls(model, max_size=24))
def test_property_valid_draws_share_one_graph_and_match_eager(compiled_model, call):
    compiled, graphs = compiled_model
    args, kwargs = call
    assert torch.allclose(compiled(*args, **kwargs), model(*args, **kwargs), atol=1e-4)
    assert len(graphs) == 1  # unbacked variables: one graph for every valid draw


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])
@given(call=invalid_calls(model, max_size=24))
def test_property_invalid_draws_raise_and_compile_nothing(compiled_model, call):
    compiled, graphs = compiled_model
    before = len(graphs)
    args, kwargs = call
    with pytest.raises(ptc.SpecViolation):
        compiled(*args, **kwargs)
    assert len(graphs) == before


@pytest.mark.skipif(not _compat.NATIVE_DYNAMIC_SPEC_DECORATOR, reason="this torch has no native ShapesSpec to convert to")
def test_native_shapes_spec_equivalent_accepts_and_rejects_the_same_calls():
    from torch.fx.experimental.dynamic_spec import ShapesSpec

    native = native_spec(model)
    assert isinstance(native, ShapesSpec)
    key = "dynamic_shapes" if _compat.COMPILE_DYNAMIC_SHAPES_KWARG else "shapes_spec"
    torch._dynamo.reset()
    compiled = torch.compile(model.__wrapped__, fullgraph=True, backend="eager", **{key: native})
    for b, t, h in [(2, 8, 3), (5, 16, 1)]:
        args = (torch.ones(b, t, h), torch.ones(2 * b, t), torch.ones(b * h))
        assert torch.allclose(compiled(*args), model(*args))
    with pytest.raises(Exception):  # torch's own (unclear) errors, but it does reject
        compiled(torch.ones(2, 12, 3), torch.ones(4, 12), torch.ones(6))


@pytest.mark.skipif(_compat.NATIVE_DYNAMIC_SPEC_DECORATOR, reason="this torch has a native ShapesSpec")
def test_native_conversion_is_a_clear_error_without_native_support():
    with pytest.raises(ptc.FeatureUnavailable, match="NATIVE_DYNAMIC_SPEC_DECORATOR"):
        native_spec(model)


def test_spec_of_finds_the_bound_spec():
    assert spec_of(model).spec.vars == [B, T, H]
    assert spec_of(lambda x: x) is None
