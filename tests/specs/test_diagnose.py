"""A model's own shape constraints, reported in its spec's terms (SpecConstraintError, explain)."""

import inspect

import pytest
import sympy
import torch

import ptc
from ptc import _compat
from ptc.specs import Var, diagnose, dynamic_spec, explain, export, tensor

B = Var("B", min=2, max=64)
A = Var("A", min=2, max=64)
T = Var("T", min=16, max=512)
H = Var("H", min=2, max=16)


@dynamic_spec(x=tensor(B, T, H))
def heads(x):
    b, t, h = x.shape
    return x.view(b, t // 8, 8, h)  # needs T % 8 == 0


@dynamic_spec(x=tensor(B, T))
def branch(x):
    if x.shape[1] == 16:  # fixes T to the example's 16
        return x + 1
    return x - 1


@dynamic_spec(x=tensor(B, T))
def fixed_reshape(x):
    return x.reshape(x.shape[0], 4, 4)  # only T == 16 fits


@dynamic_spec(x=tensor(B, T), y=tensor(A, T))
def add(x, y):
    return x + y  # needs A == B


@dynamic_spec(x=tensor(B, T))
def long_only(x):
    if x.shape[1] > 100:  # the example takes this side: T >= 101
        return x + 1
    return x - 1


Q = Var("Q", min=2, max=64)


@dynamic_spec(x=tensor(B, Q), y=tensor(B, T))
def shorter(x, y):
    if x.shape[1] <= y.shape[1]:  # the example takes this side: Q <= T
        return y[:, : x.shape[1]] + x
    return y


C = Var("C", choices=(64, 128, 256))


@dynamic_spec(x=tensor(B, C))
def square(x):
    return x.reshape(x.shape[0], 8, 8)  # only C == 64 fits


@dynamic_spec({"x": tensor(B, T, H)}, assumptions=[B <= T])
def heads_related(x):
    b, t, h = x.shape
    return x.view(b, t // 8, 8, h)


@dynamic_spec({"x": tensor(B, T, H)}, assumptions=[sympy.Eq(T % 8, 0)])
def heads_stated(x):
    b, t, h = x.shape
    return x.view(b, t // 8, 8, h)


def where(fn, marker):
    """``test_diagnose.py:<line> (<code>)`` for the line of ``fn`` that holds ``marker``."""
    lines, start = inspect.getsourcelines(fn)
    (i,) = [i for i, line in enumerate(lines) if marker in line]
    return f"test_diagnose.py:{start + i} ({lines[i].strip()})"


CASES = {
    "divisibility": (
        heads,
        (torch.ones(2, 32, 4),),
        ("T",),
        "T must be a multiple of 8",
        where(heads, "x.view"),
        "assumptions=[Eq(T % 8, 0)]",
    ),
    "branch": (
        branch,
        (torch.ones(2, 16),),
        ("T",),
        "T must equal 16 (the model specialises it)",
        where(branch, "== 16"),
        "make T the fixed size 16 (or STATIC) in the spec",
    ),
    "reshape": (
        fixed_reshape,
        (torch.ones(2, 16),),
        ("T",),
        "T must equal 16 (the model specialises it)",
        where(fixed_reshape, "x.reshape("),
        "make T the fixed size 16 (or STATIC) in the spec",
    ),
    "equal vars": (
        add,
        (torch.ones(3, 16), torch.ones(3, 16)),
        ("B", "A"),
        "A must equal B (the model requires it)",
        where(add, "x + y"),
        "y.shape[0]: use B instead of A",
    ),
    "specialised choice": (
        square,
        (torch.ones(2, 64),),
        ("C",),
        "C must equal 64 (the model specialises it)",
        where(square, "x.reshape("),
        "make C the fixed size 64 (or STATIC) in the spec",
    ),
    "lower bound": (
        long_only,
        (torch.ones(2, 200),),
        ("T",),
        "T must be at least 101",
        where(long_only, "> 100"),
        "Var('T', min=101, max=512)",
    ),
}


@pytest.mark.parametrize("strict", [False, True], ids=["nonstrict", "strict"])
@pytest.mark.parametrize("case", list(CASES))
def test_export_names_the_constraint_its_source_line_and_the_fix(case, strict):
    fn, args, names, rule, line, fix = CASES[case]
    with pytest.raises(ptc.SpecConstraintError) as info:
        export(fn, args, strict=strict)
    error = info.value
    assert isinstance(error, ptc.SpecError) and isinstance(error, ValueError)
    assert diagnose.violation(error.__cause__) is not None  # torch's error, chained
    assert [(c.vars, c.rule, c.fix) for c in error.constraints] == [(names, rule, fix)]
    assert error.constraints[0].where.endswith(line)
    assert str(error).startswith(f"ptc.specs.export({fn.__qualname__}): the model's code constrains")
    assert f"  - {rule}, imposed at " in str(error) and f"{line}; fix: {fix}" in str(error)


def test_a_spec_that_states_the_constraint_exports_and_explains_nothing():
    example = torch.ones(2, 32, 4)
    assert explain(heads_stated, example) == []
    program = export(heads_stated, (example,)).module()
    assert program(torch.ones(3, 48, 2)).shape == (3, 6, 8, 2)


def test_explain_lists_the_constraints_without_raising():
    (found,) = explain(heads, torch.ones(2, 32, 4))
    assert (found.vars, found.rule, found.fix) == (("T",), "T must be a multiple of 8", "assumptions=[Eq(T % 8, 0)]")
    assert str(found) == f"T must be a multiple of 8, imposed at {found.where}; fix: assumptions=[Eq(T % 8, 0)]"
    assert found.where.endswith(where(heads, "x.view"))
    with pytest.raises(ptc.SpecViolation):  # the example is checked first
        explain(heads, torch.ones(2, 32))


@pytest.mark.parametrize("strict", [False, True], ids=["nonstrict", "strict"])
def test_explain_names_a_relation_export_accepts_as_a_guard(strict):
    example = (torch.ones(2, 4), torch.ones(2, 32))
    program = export(shorter, example, strict=strict).module()  # torch accepts it, with a guard:
    with pytest.raises(Exception, match=r"<= y.size\(\)\[1\]"):
        program(torch.ones(2, 40), torch.ones(2, 32))
    (found,) = explain(shorter, *example)
    assert (found.vars, found.rule, found.fix) == (("T", "Q"), "Q < T must hold", "assumptions=[Q < T]")
    assert found.where.endswith(where(shorter, "<= y.shape[1]"))


def test_explain_names_a_constraint_export_turns_into_a_runtime_assertion():
    example = torch.ones(2, 32, 4)
    program = export(heads_related, (example,)).module()  # B <= T: runtime assertions, the model's too
    with pytest.raises(RuntimeError, match="Runtime assertion failed"):
        program(torch.ones(2, 36, 4))
    (found,) = explain(heads_related, example)
    assert (found.rule, found.fix) == ("T must be a multiple of 8", "assumptions=[Eq(T % 8, 0)]")
    assert found.where.endswith(where(heads_related, "x.view"))


def test_compiled_call_falls_back_to_torchs_path_and_names_the_constraint(caplog):
    """The model fixes T under torch.compile: stock compile runs it (specialising T), so
    ptc does too, from then on, and logs the constraint in spec terms with its line."""
    from ptc.specs import spec_of

    bound = spec_of(branch)
    bound.softened.clear()
    bound.soften_pending.clear()
    torch._dynamo.reset()
    compiled = torch.compile(branch, backend="eager")
    try:
        x = torch.ones(2, 16)
        with caplog.at_level("WARNING", logger="ptc.specs.api"):
            torch.testing.assert_close(compiled(x), x + 1)
        assert "torch.compile(branch): the model's code constrains T beyond the spec" in caplog.text
        assert "T must equal 16 (the model specialises it), imposed at " in caplog.text
        assert where(branch, "== 16") in caplog.text
        assert set(bound.softened) == {"T"}
        y = torch.ones(3, 32)
        torch.testing.assert_close(compiled(y), y - 1)  # another T: torch's own recompile
        assert not [k for k in vars(x) if k.startswith("_dynamo")]  # marks undone
        with pytest.raises(ptc.SpecViolation):  # the spec still holds at the call
            compiled(torch.ones(2, 8))
    finally:
        bound.softened.clear()


def test_compiled_module_falls_back_to_torchs_path(caplog):
    @dynamic_spec(x=tensor(B, T))
    class Branch(torch.nn.Module):
        def forward(self, x):
            if x.shape[1] == 16:
                return x + 1
            return x - 1

    torch._dynamo.reset()
    x = torch.ones(2, 16)
    with caplog.at_level("WARNING", logger="ptc.specs.api"):
        torch.testing.assert_close(torch.compile(Branch(), backend="eager")(x), x + 1)
    assert "T must equal 16" in caplog.text and where(Branch.forward, "== 16") in caplog.text


def test_a_violation_with_nothing_left_to_soften_is_named(monkeypatch):
    """Where softening cannot help (every variable already is), the compiled call raises
    SpecConstraintError in spec terms, torch's error chained."""
    from ptc.specs import spec_of

    bound = spec_of(branch)
    monkeypatch.setattr(bound, "softened", {"B": "maybe", "T": "maybe"})
    monkeypatch.setattr(ptc.specs.lowering, "apply_marks", _mark_everything_dynamic)
    torch._dynamo.reset()
    with pytest.raises(ptc.SpecConstraintError) as info:
        torch.compile(branch, backend="eager")(torch.ones(2, 16))
    assert diagnose.violation(info.value.__cause__) is info.value.__cause__
    assert info.value.constraints[0].rule == "T must equal 16 (the model specialises it)"


@dynamic_spec(x=tensor(B, T))
def formats_its_size(x):
    name = f"width {x.shape[1]}"  # Dynamo specialises a backed size it formats into a string
    return x * len(name)


def test_a_size_the_model_only_formats_stays_dynamic_as_unbacked(caplog):
    """torch.compile specialises a backed size formatted into a string: ptc's first
    fallback, unbacked sizes, keeps one graph for every T."""
    from ptc.specs import spec_of

    bound = spec_of(formats_its_size)
    torch._dynamo.reset()
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    compiled = torch.compile(formats_its_size, backend=counter)
    with caplog.at_level("WARNING", logger="ptc.specs.api"):
        compiled(torch.ones(2, 16))
        first = counter.frame_count
        for t in (17, 18, 20, 32, 100):
            x = torch.ones(2, t)
            torch.testing.assert_close(compiled(x), formats_its_size(x))
    assert "constrains T beyond the spec" in caplog.text
    assert bound.softened == {"T": "unbacked"}
    assert counter.frame_count == first  # no recompile for a new T


def _fixed_positions():
    """A module whose spec says T is any multiple of 8 while its table needs T == 16 (a class
    of its own each time: what ptc softens is kept per class)."""
    t = Var("T", min=8, max=128)

    @dynamic_spec(x=tensor(Var("B", min=1, max=16), t, 4), assumptions=[sympy.Eq(t % 8, 0)])
    class FixedPositions(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.pos = torch.nn.Parameter(torch.randn(16, 4, generator=torch.Generator().manual_seed(0)))

        def forward(self, x):
            return x + self.pos

    return FixedPositions()


@pytest.mark.parametrize("fullgraph", [False, True])
def test_a_compiled_call_after_softening_is_compiled_and_a_size_the_model_refuses_raises_as_eager(caplog, fullgraph):
    """The call made again after ptc softens a variable ran with Dynamo's callback uninstalled
    (a compile that raises leaves it so): eagerly, and under fullgraph=True (torch 2.14) "found
    no compiled frames". A later size the model refuses (T = 24) raised Dynamo's internal
    "Guard failed on the same frame it was created" where eager and stock compile raise the
    model's RuntimeError."""
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    model, counter = _fixed_positions(), CompileCounter()
    compiled = torch.compile(model, backend=counter, fullgraph=fullgraph)
    x = torch.randn(2, 16, 4)
    with caplog.at_level("WARNING", logger="ptc.specs.api"):
        torch.testing.assert_close(compiled(x), model(x))
        assert "constrains T beyond the spec" in caplog.text
        first = counter.frame_count
        torch.testing.assert_close(compiled(x), model(x))
        assert counter.frame_count == first  # the first call was compiled: the second compiles nothing
        with pytest.raises(RuntimeError) as info:
            compiled(torch.randn(2, 24, 4))
    assert "Guard failed on the same frame" not in str(info.value)
    with pytest.raises(RuntimeError):
        model(torch.randn(2, 24, 4))  # eager raises too
    torch.testing.assert_close(compiled(x), model(x))


def _mark_everything_dynamic(bound, tensors, unmentioned):
    for t in tensors:
        for dim in range(t.dim()):
            torch._dynamo.mark_dynamic(t, dim)


def test_torch_error_stands_where_ptc_finds_nothing_to_name(monkeypatch):
    monkeypatch.setattr(diagnose, "constraints", lambda *a, **k: [])
    with pytest.raises(Exception) as info:
        export(branch, (torch.ones(2, 16),))
    assert not isinstance(info.value, ptc.PtcError)
    assert diagnose.violation(info.value) is not None


def test_without_guard_stacks_the_constraint_is_named_without_a_line(monkeypatch):
    name = "SHAPE_GUARD_STACKS"
    monkeypatch.setitem(_compat._PROBES, name, _compat.Probe(name, "", lambda: False))
    (found,) = explain(heads, torch.ones(2, 32, 4))
    assert (found.rule, found.where) == ("T must be a multiple of 8", None)
    assert str(found) == "T must be a multiple of 8; fix: assumptions=[Eq(T % 8, 0)]"


N = Var("N", min=1, max=8)


@dynamic_spec(x=tensor(N, 4))
def one_row_apart(x):
    if x.shape[0] > 1:  # the same value either way: sizes of 1 take their own branch
        return x * 2
    return x + x


@dynamic_spec(x=tensor(N, 4))
def one_row_differs(x):
    if x.shape[0] > 1:
        return x * 2
    return x - 1  # a size of 1 really computes something else


def test_a_branch_on_size_one_exports_as_torch_does_and_says_so(caplog):
    """The model treats N=1 apart: the size-oblivious program would refuse N=1 (a raw
    'Guard failed' at the call), so ptc exports as torch.export does and logs why."""
    with caplog.at_level("WARNING", logger="ptc.specs.api"):
        program = export(one_row_apart, (torch.randn(3, 4),))
    assert "treats sizes 0 and 1 apart (N must be at least 2)" in caplog.text
    for n in (1, 2, 5):
        x = torch.randn(n, 4)
        torch.testing.assert_close(program.module()(x), one_row_apart(x))
    (found,) = explain(one_row_apart, torch.randn(3, 4))
    assert found.small_sizes and found.rule == "N must be at least 2"


@dynamic_spec(x=tensor(N, 4))
def one_row_unequal(x):
    if x.shape[0] != 1:  # GPT-2's masking compares the batch size so: the size-oblivious trace raises
        return x * 2
    return x + x


@pytest.mark.parametrize("strict", [False, True])
def test_a_size_oblivious_trace_that_raises_on_size_one_exports_as_torch_does(caplog, strict):
    """Where the size-oblivious trace itself fails on a branch on N != 1 (it succeeded with a
    guard for N > 1, above), ptc raised SpecConstraintError where torch.export with the same
    Dim (min=1) exports: it now exports as torch does, saying why."""
    with caplog.at_level("WARNING", logger="ptc.specs.api"):
        program = export(one_row_unequal, (torch.randn(3, 4),), strict=strict)
    assert "treats sizes 0 and 1 apart (N must be at least 2)" in caplog.text
    for n in (1, 2, 5):
        x = torch.randn(n, 4)
        torch.testing.assert_close(program.module()(x), one_row_unequal(x))


def test_the_fallback_is_torchs_own_program():
    """Where size 1 really differs, the fallback program answers as torch.export's does
    (the larger sizes' branch): ptc is no worse than torch there, and said why."""
    program = export(one_row_differs, (torch.randn(3, 4),))
    stock = torch.export.export(_Wrap(one_row_differs.__wrapped__), (torch.randn(3, 4),),
                                dynamic_shapes={"x": {0: torch.export.Dim("N", min=1, max=8)}})
    x = torch.randn(1, 4)
    torch.testing.assert_close(program.module()(x), stock.module()(x))


class _Wrap(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def test_a_constraint_beyond_small_sizes_is_not_a_small_size_one():
    (found,) = explain(heads, torch.randn(2, 32, 4))
    assert not found.small_sizes
