"""One spec, every consumer: torch.compile, torch.export (strict and non-strict), make_fx."""

import re

import expecttest
import pytest
import sympy
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import ptc
from ptc.specs import Var, dynamic_spec, export, export_dynamic_shapes, tensor

from .helpers import Graphs, save_load



def make_model(kind):
    B = Var("B", min=0, max=64, kind=kind)
    T = Var("T", min=8, max=4096, kind=kind)

    @dynamic_spec({"x": tensor(B, T), "y": tensor(2 * B)}, assumptions=[sympy.Eq(T % 8, 0)])
    def model(x, y):
        return x.sum(1) * 2 + y.view(-1, 2).sum(1)

    return model


SHAPES = [(4, 16), (5, 24), (0, 8), (1, 32), (2, 64), (64, 4096), (3, 8)]
VIOLATIONS = [((4, 16), 9), ((4, 12), 8), ((65, 16), 130), ((1, 16), 3)]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()


@pytest.mark.parametrize("kind, graphs", [("unbacked", 1), ("backed", 3)])
def test_compile_one_graph_and_no_recompile_on_violation(kind, graphs):
    """unbacked: one graph for every in-spec shape, 0 and 1 included; backed: torch
    specialises sizes 0 and 1 (two more graphs). Violations never reach Dynamo."""
    model = make_model(kind)
    backend = Graphs()
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    for b, t in SHAPES:
        x, y = torch.randn(b, t), torch.randn(2 * b)
        assert torch.allclose(compiled(x, y), model(x, y))
    assert len(backend.graphs) == graphs
    for (b, t), ny in VIOLATIONS:
        with pytest.raises(ptc.SpecViolation):
            compiled(torch.randn(b, t), torch.randn(ny))
    assert len(backend.graphs) == graphs


def test_compile_marks_are_removed_after_the_call():
    model = make_model("unbacked")
    compiled = torch.compile(model, fullgraph=True, backend=Graphs())
    x, y = torch.randn(3, 8), torch.randn(6)
    compiled(x, y)
    assert not [k for k in vars(x) if k.startswith("_dynamo_")]


def test_unbacked_graph_knows_the_relation():
    model = make_model("unbacked")
    backend = Graphs()
    torch.compile(model, fullgraph=True, backend=backend)(torch.randn(3, 8), torch.randn(6))
    (gm,) = backend.graphs
    shapes = [n.meta["example_value"].shape for n in gm.graph.nodes if n.op == "placeholder" and isinstance(n.meta.get("example_value"), torch.Tensor)]
    (b, _), (two_b,) = shapes
    assert str(two_b) == f"2*{b}"


def test_inductor_compiles_the_spec():
    model = make_model("unbacked")
    compiled = torch.compile(model, fullgraph=True)
    for b, t in [(3, 8), (0, 16), (7, 24)]:
        x, y = torch.randn(b, t), torch.randn(2 * b)
        assert torch.allclose(compiled(x, y), model(x, y), atol=1e-5)


def test_compiled_module_checks_and_compiles_once():
    D = Var("D", min=2, max=64)

    @dynamic_spec(x=tensor(D, 4))
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 3)

        def forward(self, x):
            return self.lin(x).relu()

    net = Net()
    backend = Graphs()
    compiled = torch.compile(net, fullgraph=True, backend=backend)
    for d in [2, 3, 9, 64]:
        x = torch.randn(d, 4)
        assert torch.allclose(compiled(x), net(x))
    assert len(backend.graphs) == 1
    with pytest.raises(ptc.SpecViolation, match=r"x.shape\[1\]=5 violates x.shape\[1\] == 4"):
        compiled(torch.randn(3, 5))
    assert len(backend.graphs) == 1


def test_make_fx_symbolic_applies_the_facts():
    model = make_model("backed")
    gm = make_fx(model, tracing_mode="symbolic")(torch.randn(3, 8), torch.randn(6))
    placeholders = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    assert str(placeholders[1].shape[0]) == f"2*{placeholders[0].shape[0]}"
    x, y = torch.randn(5, 24), torch.randn(10)
    assert torch.allclose(gm(x, y), model(x, y))


B = Var("B", min=1, max=64)
T = Var("T", min=8, max=4096)
H = Var("H", min=1, max=16)


@dynamic_spec({"x": tensor(B, T, H), "y": tensor(2 * B, T), "z": tensor(B * H)}, assumptions=[sympy.Eq(T % 8, 0), B <= T])
def three_inputs(x, y, z):
    return x.sum() + y.sum() + z.sum()


EXAMPLE = (torch.ones(4, 16, 3), torch.ones(8, 16), torch.ones(12))




@pytest.mark.parametrize("strict", [False, True], ids=["nonstrict", "strict"])
def test_export_ranges_assertions_and_round_trip(strict):
    ep = export(three_inputs, EXAMPLE, strict=strict)
    ranges = {str(k): (int(v.lower), int(v.upper)) for k, v in ep.range_constraints.items()}
    assert (1, 64) in ranges.values() and (1, 16) in ranges.values()
    assert (8, 4096) in ranges.values()
    loaded = save_load(ep)
    good = (torch.ones(2, 24, 5), torch.ones(4, 24), torch.ones(10))
    assert loaded.module()(*good).item() == three_inputs(*good).item()
    with pytest.raises(Exception, match="Mod"):  # T % 8 == 0: a runtime assertion
        loaded.module()(torch.ones(2, 20, 5), torch.ones(4, 20), torch.ones(10))
    with pytest.raises(Exception, match=r"\*"):  # z == B*H: a runtime assertion
        loaded.module()(torch.ones(2, 24, 5), torch.ones(4, 24), torch.ones(11))
    with pytest.raises(Exception):  # y == 2*B: a guard on the derived Dim
        loaded.module()(torch.ones(2, 24, 5), torch.ones(5, 24), torch.ones(10))


def test_export_checks_the_example_first():
    with pytest.raises(ptc.SpecViolation, match=r"y.shape\[0\]=9"):
        export(three_inputs, (torch.ones(4, 16, 3), torch.ones(9, 16), torch.ones(12)))


def test_plain_torch_export_of_a_spec_module_is_refused_not_silently_static():
    @dynamic_spec(x=tensor(B, 4))
    class Net(torch.nn.Module):
        def forward(self, x):
            return x * 2

    with pytest.raises(ptc.SpecError, match=r"use ptc.specs.export"):
        torch.export.export(Net(), (torch.ones(3, 4),))
    shapes = export_dynamic_shapes(Net(), (torch.ones(3, 4),))
    ep = torch.export.export(Net(), (torch.ones(3, 4),), dynamic_shapes=shapes)
    assert [int(v.lower) for v in ep.range_constraints.values()] == [1]


def test_module_export_keeps_parameter_names():
    @dynamic_spec(x=tensor(B, 4))
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.lin(x)

    ep = export(Net(), (torch.ones(3, 4),))
    assert sorted(dict(ep.named_parameters())) == ["lin.bias", "lin.weight"]


def _normalized_graph(ep):
    """Graph code with symbols renamed by first appearance (s77 -> S0), so the
    golden text does not depend on torch's symbol numbering."""
    names = {}

    def rename(text):
        return re.sub(r"\b[su]\d+\b", lambda m: names.setdefault(m.group(0), f"S{len(names)}"), text)

    code = rename(ep.graph_module.code.strip())
    ranges = sorted(f"{rename(str(k))}: [{v.lower}, {v.upper}]" for k, v in ep.range_constraints.items())
    return code + "\n# range_constraints\n" + "\n".join(ranges)


class TestGoldenExports(expecttest.TestCase):
    def test_derived_and_divisible_dims(self):
        Bg = Var("B", min=1, max=64)
        Tg = Var("T", min=8, max=512)

        @dynamic_spec({"x": tensor(Bg, Tg), "y": tensor(2 * Bg)}, assumptions=[sympy.Eq(Tg % 8, 0)])
        def f(x, y):
            return x.sum(1) + y.view(-1, 2).sum(1)

        self.assertExpectedInline(_normalized_graph(export(f, (torch.ones(3, 16), torch.ones(6)))), """\
def forward(self, x, y):
    sum_1 = torch.ops.aten.sum.dim_IntList(x, [1]);  x = None
    view = torch.ops.aten.view.default(y, [-1, 2]);  y = None
    sum_2 = torch.ops.aten.sum.dim_IntList(view, [1]);  view = None
    add = torch.ops.aten.add.Tensor(sum_1, sum_2);  sum_1 = sum_2 = None
    return (add,)
# range_constraints
2*S0: [2, 128]
8*S1: [8, 512]
S0: [1, 64]
S1: [2, 64]""")

    def test_product_relation_becomes_an_assertion(self):
        Bg = Var("B", min=1, max=64)
        Hg = Var("H", min=1, max=8)

        @dynamic_spec({"x": tensor(Bg, Hg), "z": tensor(Bg * Hg)})
        def f(x, z):
            return x.reshape(-1) + z

        self.assertExpectedInline(_normalized_graph(export(f, (torch.ones(3, 2), torch.ones(6)))), """\
def forward(self, x, z):
    sym_size_int_3 = torch.ops.aten.sym_size.int(x, 0)
    sym_size_int_4 = torch.ops.aten.sym_size.int(x, 1)
    sym_size_int_5 = torch.ops.aten.sym_size.int(z, 0)
    reshape = torch.ops.aten.reshape.default(x, [-1]);  x = None
    mul_1 = sym_size_int_4 * sym_size_int_3;  sym_size_int_4 = sym_size_int_3 = None
    eq_1 = sym_size_int_5 == mul_1;  sym_size_int_5 = mul_1 = None
    _assert_scalar_default = torch.ops.aten._assert_scalar.default(eq_1, "Runtime assertion failed for expression Eq(S0, S1*S2) on node 'eq_1'");  eq_1 = _assert_scalar_default = None
    add = torch.ops.aten.add.Tensor(reshape, z);  reshape = z = None
    return (add,)
# range_constraints
S0: [1, 512]
S1: [1, 8]
S2: [1, 64]""")


def test_exported_program_accepts_every_in_spec_size_including_one():
    Bs = Var("B", min=1, max=64)
    Hs = Var("H", min=1, max=8)

    @dynamic_spec({"x": tensor(Bs, Hs), "z": tensor(Bs * Hs)})
    def f(x, z):
        return x.reshape(-1) + z

    program = save_load(export(f, (torch.ones(3, 2), torch.ones(6)))).module()
    for b, h in [(1, 1), (1, 2), (2, 1), (64, 8)]:
        assert program(torch.ones(b, h), torch.ones(b * h)).shape == (b * h,)
    with pytest.raises(Exception):
        program(torch.ones(2, 2), torch.ones(5))


@pytest.mark.parametrize("declared", ["variable", "static"])
def test_compile_leaves_no_marks_on_the_tensors_inside_a_subclass(declared):
    """torch's marking functions copy each mark onto the inner tensors of a wrapper subclass."""
    from torch.testing._internal.two_tensor import TwoTensor

    from ptc.specs import STATIC, Var, dynamic_spec, tensor

    rows = Var("B", min=2, max=64) if declared == "variable" else STATIC

    @dynamic_spec({"x": tensor(rows, 4)})
    def f(x):
        return x * 2

    a, b = torch.randn(3, 4), torch.randn(3, 4)
    x = TwoTensor(a, b)
    before = {name: dict(vars(t)) for name, t in (("x", x), ("x.a", a), ("x.b", b))}
    torch._dynamo.reset()
    torch.compile(f, backend="eager", fullgraph=True)(x)
    after = {name: dict(vars(t)) for name, t in (("x", x), ("x.a", a), ("x.b", b))}
    assert after == before


@pytest.mark.parametrize("kind", ["positional", "keyword-only"])
def test_compile_leaves_no_marks_on_a_default_argument(kind):
    """With unspecified="static", a parameter the spec does not mention is marked static,
    including a default the caller did not pass: the default tensor kept its marks after the
    call (stock compile leaves it clean)."""
    default = torch.ones(3)
    spec = {"x": tensor(Var("B", min=1, max=64), 4)}
    if kind == "positional":

        def f(x, y=default):
            return x.sum() + y.sum()

    else:

        def f(x, *, y=default):
            return x.sum() + y.sum()

    decorated = dynamic_spec(spec, unspecified="static")(f)
    torch._dynamo.reset()
    x = torch.randn(2, 4)
    torch.testing.assert_close(torch.compile(decorated, backend="eager")(x), f(x))
    assert vars(default) == {}


def test_a_compiled_call_that_specialises_a_variable_runs_the_model_once():
    """The model fixes T (a size formatted into a string): ptc softens T and compiles again.
    Its diagnosis exported the model non-strict, which ran the model's Python once more with
    symbolic sizes (a side effect happened twice, once with 's27' in it); stock compile runs it
    once."""
    seen = []

    @dynamic_spec({"x": tensor(Var("B", min=1, max=64), Var("T", min=8, max=4096))})
    def f(x):
        seen.append(f"{x.shape[1]}")
        return x * 2

    torch._dynamo.reset()
    x = torch.randn(4, 16)
    torch.testing.assert_close(torch.compile(f, backend="eager")(x), x * 2)
    assert seen == ["16"]
