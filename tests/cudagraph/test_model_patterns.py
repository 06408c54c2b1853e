"""Patterns from transformers models (BERT, GPT-2, Llama, T5, ViT, ConvNeXt) that broke
the compile backend or capture() where eager and stock torch.compile run: dropout in
training, an expanded compiled output, the user's Inductor settings, a segment Inductor
cannot compile, integer indexing, a host read in straight-line code, and an index that
only the branch eager takes may read."""

import copy

import pytest
import torch
from torch._higher_order_ops.while_loop import while_loop

import ptc.cudagraph as cg
from training_steps import DropoutAfterNorm, train_steps

T = torch.tensor


@pytest.mark.parametrize("fallback_random", [False, True])
@pytest.mark.parametrize("executor", ["sim", "eager"])
def test_dropout_in_training_draws_what_eager_draws(executor, fallback_random):
    """AOTAutograd's default partitioner copied the dead dropout into the backward graph,
    where it drew numbers eager never draws: every later mask, output and gradient differed
    (seen with Inductor's fallback_random, which keeps dropout an eager random op)."""
    torch.manual_seed(0)
    base = DropoutAfterNorm().train()
    xs = [torch.randn(2, 4, 16, generator=torch.Generator().manual_seed(k)) for k in range(3)]
    want = train_steps(copy.deepcopy(base), xs)
    torch._dynamo.reset()
    backend = cg.make_backend(executor=executor, segments="eager")
    with torch._inductor.config.patch(fallback_random=fallback_random):
        got = train_steps(torch.compile(copy.deepcopy(base), backend=backend), xs)
    for k, ((y1, g1, r1), (y2, g2, r2)) in enumerate(zip(want, got)):
        torch.testing.assert_close(y2, y1, msg=f"call {k}: output")
        torch.testing.assert_close(g2, g1, msg=f"call {k}: gradients")
        assert torch.equal(r1, r2), f"call {k}: generator state after forward and backward"


def test_the_callers_inductor_settings_reach_the_compiled_segments():
    """Segments are compiled in a thread of their own, where torch's thread-local config
    overrides were not visible: fallback_random (compiled dropout draws eager's numbers)
    was dropped."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5)).train()
    xs = [torch.randn(4, 8, generator=torch.Generator().manual_seed(k)) for k in range(3)]

    def run(f):
        torch.manual_seed(7)
        with torch.no_grad():
            return [f(x) for x in xs]

    want = run(model)
    torch._dynamo.reset()
    with torch._inductor.config.patch(fallback_random=True):
        got = run(torch.compile(model, backend=cg.make_backend(executor="sim", segments="inductor")))
    for k, (a, b) in enumerate(zip(want, got)):
        torch.testing.assert_close(b, a, msg=f"call {k}")


def _expanded(x):
    s = x.sum(0, keepdim=True) * 2  # a buffer the segment allocates
    return s.expand(4, 8), x + 1  # returned as a stride-0 view of it (BERT's token_type_ids)


def test_an_expanded_output_of_a_compiled_segment_replays():
    """The simulator's replay copied into the stride-0 result: 'more than one element of
    the written-to tensor refers to a single memory location'."""
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    cf = cg.capture(_expanded, x, executor="sim", segments="inductor")
    for k in range(3):
        for got, want in zip(cf(x + k), _expanded(x + k)):
            torch.testing.assert_close(got, want, msg=f"call {k}")
    assert cf.graphs


def _attention_with_empty_cache(q, k_new):
    past = torch.zeros(2, 2, 0, 16)  # GPT-2's DynamicCache before the first step
    k = torch.cat([past, k_new.transpose(1, 2)], dim=-2)
    return torch.matmul(q, k.transpose(-1, -2) * 0.5)


def test_a_segment_inductor_cannot_compile_runs_as_aten_ops(caplog):
    """Inductor's cat drops the empty input and keeps the transposed layout, so the traced
    ``view`` is invalid for it (ValueError at the first call): the segment runs its aten ops."""
    q, k = torch.randn(2, 2, 8, 16), torch.randn(2, 8, 2, 16)
    with caplog.at_level("INFO", logger="ptc.cudagraph"):
        cf = cg.capture(_attention_with_empty_cache, q, k, executor="sim", segments="inductor")
        for j in range(3):
            torch.testing.assert_close(cf(q + j, k - j), _attention_with_empty_cache(q + j, k - j), atol=1e-5, rtol=1e-5)
    assert "runs as aten ops" in caplog.text


def _gather_loop(table, idx, n):
    def body(i, acc):
        return i + 1, acc + table[idx + i]  # integer indices: a static output shape

    return while_loop(lambda i, acc: i < n, body, (torch.zeros((), dtype=torch.int64), torch.zeros(3, 4)))[1]


def test_integer_indexing_is_captured():
    """``x[idx]`` with integer indices was refused as a data-dependent output shape (only
    a boolean mask makes one): loops gathering rows ran on the host."""
    table, idx = torch.randn(10, 4), T([0, 2, 4])
    cf = cg.capture(_gather_loop, table, idx, T(3), executor="sim", segments="eager")
    for n in (3, 5, 0):
        torch.testing.assert_close(cf(table, idx, T(n)), _gather_loop(table, idx, T(n)))
    assert cf.report.counts["loops_captured"] == 1, cf.report.format()


def test_a_boolean_mask_still_counts_as_a_host_read():
    from ptc.cudagraph.eligibility import integer_indexing

    x = torch.randn(4)
    assert integer_indexing(torch.ops.aten.index.Tensor, (x, [T([0, 1])]))
    assert not integer_indexing(torch.ops.aten.index.Tensor, (x, [x > 0]))
    assert not integer_indexing(torch.ops.aten.index_put.default, (x, [T([0])], T([1.0])))


def _masked(x, mask):
    if mask.all():  # a host read in straight-line code (transformers' mask helpers)
        return x * 2
    return x * 2 * mask


def test_capture_of_a_function_with_a_host_read_runs_it_on_the_host():
    x, mask = torch.randn(4), torch.ones(4)
    cf = cg.capture(_masked, x, mask, executor="sim", segments="eager")
    for m in (mask, T([1.0, 0.0, 1.0, 1.0])):
        torch.testing.assert_close(cf(x, m), _masked(x, m))
    assert not cf.graphs and "host read" in cf.report.format()


TABLE = torch.randn(5, 4, generator=torch.Generator().manual_seed(3))


def _lookup(table, i):  # table[i] if i < 5 else zeros: only the taken side may index
    return torch.cond(
        i < 5,
        lambda t, i: t.index_select(0, i.reshape(1)) * 2,
        lambda t, i: torch.zeros(1, 4),
        (table, i),
    )


def _running_sum(table, i):  # rows i.. of table; no trip at all for i >= 5
    def body(j, acc):
        return j + 1, acc + table.index_select(0, j.reshape(1))

    return while_loop(lambda j, acc: j < 5, body, (i.clone(), torch.zeros(1, 4)))[1]


@pytest.mark.parametrize("example", [2, 7])
@pytest.mark.parametrize("fn", [_lookup, _running_sum])
@pytest.mark.parametrize("segments", ["eager", "inductor"])
def test_an_index_guarded_by_the_predicate_is_not_read_on_the_other_side(fn, segments, example):
    """The warm-up ran the untaken branch and a zero-trip loop body on the real values, and
    the simulator's capture ran both sides: IndexError where eager runs. capture()'s own trace
    (make_fx, real mode) ran both sides on the examples too (example 7: out of range)."""
    cf = cg.capture(fn, TABLE, T(example), executor="sim", segments=segments)
    for i in (5, 2, 9, 0):
        torch.testing.assert_close(cf(TABLE, T(i)), fn(TABLE, T(i)), msg=f"index {i}")


class _GuardedLookup(torch.nn.Module):
    """A module whose cond indexes its own parameter only on the side the predicate guards."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(5, 4, generator=torch.Generator().manual_seed(4)))
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, i):
        row = torch.cond(
            i < 5,
            lambda i: self.table.index_select(0, i.reshape(1)),
            lambda i: torch.zeros(1, 4),
            (i,),
        )
        return self.proj(row)


def test_capture_traced_on_fake_tensors_keeps_the_modules_tensors():
    """Where the real trace fails on the examples (7 is out of range on the side not taken),
    capture traces on fake tensors; the graph reads the module's parameters where they live."""
    model = _GuardedLookup()
    cf = cg.capture(model, T(7), executor="sim", segments="eager")
    with torch.no_grad():
        for i in (7, 3, 0, 9, 4):
            torch.testing.assert_close(cf(T(i)), model(T(i)), msg=f"index {i}")
        model.table.mul_(2)  # an update in place (an optimizer step) is seen by the replay
        torch.testing.assert_close(cf(T(3)), model(T(3)))
