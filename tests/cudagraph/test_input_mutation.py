"""A captured function that updates its inputs in place behaves as eager: the
caller's tensors hold the update after every call (warmup, capture, replay), the
update is applied once per call, and capture() leaves the example inputs as they
were."""

import pytest
import torch
from torch._higher_order_ops.while_loop import while_loop

from ptc.cudagraph import capture, make_backend

T = torch.tensor


def bump(x):
    x.add_(1)
    return x * 2


def bump_view(x, y):
    x[1:].mul_(2)  # an update through a view of the input
    return x.sum() + y


def bump_then_loop(x, n):
    x.add_(0.5)

    def cond(i, acc):
        return i < n

    def body(i, acc):
        return i + 1, acc * 1.5

    _, acc = while_loop(cond, body, (torch.zeros((), dtype=torch.int64), x.clone()))
    return acc


def scale_out(x, out):
    torch.mul(x, 3, out=out)  # an out= argument is updated too
    return x + 1


CASES = {
    "add_": (bump, lambda: (torch.zeros(4),)),
    "view": (bump_view, lambda: (torch.arange(4.0), torch.ones(()))),
    "before_loop": (bump_then_loop, lambda: (torch.ones(3), T(2))),
    "out=": (scale_out, lambda: (torch.arange(3.0), torch.zeros(3))),
}


def _clones(args):
    return tuple(a.clone() for a in args)


@pytest.mark.parametrize("executor", ["sim", "eager"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_updates_reach_the_callers_tensors_once_per_call(case, executor):
    fn, make = CASES[case]
    example = make()
    before = _clones(example)
    cf = capture(fn, *example, executor=executor, segments="eager")
    for a, b in zip(example, before):
        torch.testing.assert_close(a, b, rtol=0, atol=0)  # capture ran nothing on them

    mine, ref = make(), make()
    for call in range(4):  # warmup, capture (+ first replay), replays
        got = cf(*mine)
        want = fn(*ref)
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=f"call {call}: output")
        for j, (a, b) in enumerate(zip(mine, ref)):
            torch.testing.assert_close(a, b, rtol=0, atol=0, msg=f"call {call}: input {j}")
    if executor == "sim":
        assert cf.graphs and cf.graphs[0].replays >= 3


def test_inductor_segments_write_the_update_back():
    x = torch.zeros(5)
    cf = capture(bump, x.clone(), executor="sim", segments="inductor")
    ref = torch.zeros(5)
    for _ in range(3):
        torch.testing.assert_close(cf(x), bump(ref))
        torch.testing.assert_close(x, ref)


def test_backend_under_compile_writes_the_update_back():
    torch._dynamo.reset()
    backend = make_backend(executor="sim", segments="eager")
    f = torch.compile(bump, backend=backend, fullgraph=True)
    x, ref = torch.zeros(4), torch.zeros(4)
    for _ in range(4):
        torch.testing.assert_close(f(x), bump(ref))
        torch.testing.assert_close(x, ref)
    assert backend.programs[-1].graphs


def test_simulated_capture_runs_nothing_on_tensors_it_did_not_allocate():
    """A CUDA capture executes no kernel; the simulator runs ops for their shapes,
    so it must put back whatever they wrote into tensors that existed before."""
    from ptc.cudagraph.simulator import SimGraph

    g = SimGraph()
    a = torch.ones(3)
    with g.capture():
        a.add_(1)
        b = a * 2
    torch.testing.assert_close(a, torch.ones(3))
    g.replay()
    torch.testing.assert_close(a, torch.full((3,), 2.0))
    torch.testing.assert_close(b, torch.full((3,), 4.0))


def bump_first_read_second(a, b, n):
    a.add_(1)
    i0 = torch.zeros((), dtype=torch.int64)
    return while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y * 2), (i0, b.clone()))[1]


@pytest.mark.parametrize("segments", ["eager", "inductor"])
@pytest.mark.parametrize("shared", ["same tensor", "overlapping views"])
def test_inputs_sharing_memory_see_each_others_updates(shared, segments):
    def args(k):
        x = torch.full((4,), float(k))
        return (x, x) if shared == "same tensor" else (x[:3], x[1:])

    cf = capture(bump_first_read_second, *args(0), T(1), executor="sim", segments=segments)
    for k in range(4):
        mine, ref = args(k), args(k)
        torch.testing.assert_close(cf(*mine, T(1)), bump_first_read_second(*ref, T(1)), msg=f"call {k}")
        torch.testing.assert_close(mine[0], ref[0])


def update_view_after_host_loop(x, n):
    v = x[1:]
    i0 = torch.zeros((), dtype=torch.int64)
    # RNG in the body keeps this loop on the host, so v is made in another graph than its update
    y = while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y + torch.rand(()) * 0), (i0, v * 1))[1]
    v.mul_(2)
    return y + x.sum()


def test_an_update_through_a_view_made_in_another_graph_runs_on_the_host():
    cf = capture(update_view_after_host_loop, torch.ones(3), T(1), executor="sim", segments="eager")
    for k in range(4):
        a, b = torch.full((3,), k + 1.0), torch.full((3,), k + 1.0)
        torch.testing.assert_close(cf(a, T(1)), update_view_after_host_loop(b, T(1)))
        torch.testing.assert_close(a, b)
    assert cf.graphs == []
    assert "a view made in another part of the graph" in cf.report.format()
