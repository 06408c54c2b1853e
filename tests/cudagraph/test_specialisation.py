"""A captured graph is specialised to its inputs' sizes, strides and Python numbers,
and reads parameters where they live: what changes between calls must not leave a
replay with stale values (every call is compared with eager on fresh inputs)."""

import pytest
import torch
from torch._higher_order_ops.while_loop import while_loop

from ptc.cudagraph import capture, make_backend


def loop_scaled(x, n, k):
    i0 = torch.zeros((), dtype=torch.int64)
    return while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y + 1), (i0, x * k))[1]


def loop_doubling(x, n):
    i0 = torch.zeros((), dtype=torch.int64)
    return while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y * 2), (i0, x * 1))[1] + x


@pytest.mark.parametrize("segments", ["eager", "inductor"])
def test_backend_a_python_number_that_changes_is_not_frozen(segments):
    torch._dynamo.reset()
    backend = make_backend(executor="sim", segments=segments)
    f = torch.compile(loop_scaled, backend=backend)
    for k in range(2, 7):  # k becomes a SymInt input of the graph after the first recompile
        for call in range(3):  # warmup, capture, replay
            x, n = torch.ones(2), torch.tensor(call)
            torch.testing.assert_close(f(x, n, k), loop_scaled(x, n, k), msg=f"k={k}, call {call}")
    assert any(p.graphs for p in backend.programs)


def test_backend_new_sizes_of_a_dynamic_graph_get_their_own_graph():
    torch._dynamo.reset()
    backend = make_backend(executor="sim", segments="eager")
    f = torch.compile(loop_doubling, backend=backend)
    for size in (3, 4, 5, 6, 5, 4):
        for _ in range(3):  # warmup, capture, replay
            x, n = torch.randn(size), torch.tensor(2)
            torch.testing.assert_close(f(x, n), loop_doubling(x, n), msg=f"size {size}")


def test_backend_keeps_a_bounded_number_of_graphs_per_compiled_graph():
    from ptc.cudagraph import backend as backend_module

    torch._dynamo.reset()
    backend = make_backend(executor="sim", segments="eager")
    f = torch.compile(loop_scaled, backend=backend)
    for k in range(2, 4 + backend_module.SIGNATURES_KEPT):
        for _ in range(2):  # each k again at once: a number that repeats, not one that grows
            f(torch.ones(2), torch.tensor(1), k)
    assert len(backend.programs) >= backend_module.SIGNATURES_KEPT  # one program per new k
    dynamic = backend.forwards[-1]  # k a SymInt: the graph compiled after the first recompile
    assert len(dynamic.programs) == backend_module.SIGNATURES_KEPT and not dynamic.ungraphed


def grow(x, cache, n):
    """A decode step: the cache grows by a row each call, then a loop on it."""
    cache = torch.cat([cache, x], 0)
    i0 = torch.zeros((), dtype=torch.int64)
    return while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y * 0.5), (i0, cache.sum(0)))[1], cache


@pytest.mark.parametrize("segments", ["eager", "inductor"])
def test_sizes_that_grow_every_call_stop_costing_a_capture_per_call(segments):
    """A cache that grows every step brings a new signature each call: a program per signature
    recompiled every segment on every call (1.7 s a call with Inductor, against stock's one
    compile). After NEW_SIGNATURES_IN_A_ROW new ones in a row the graph's new sizes run through
    one compile for every size; the sizes already captured keep replaying."""
    from ptc.cudagraph import backend as backend_module

    torch._dynamo.reset()
    backend = make_backend(executor="sim", segments=segments)
    f = torch.compile(grow, backend=backend, dynamic=True)
    cache = torch.randn(2, 4)
    first = torch.randn(1, 4)
    for step in range(8):
        x, n = (first if step == 0 else torch.randn(1, 4)), torch.tensor(step % 3)
        got, new_cache = f(x, cache, n)
        want, want_cache = grow(x, cache, n)
        torch.testing.assert_close(got, want, msg=f"step {step}")
        torch.testing.assert_close(new_cache, want_cache)
        cache = new_cache
    assert len(backend.programs) == backend_module.NEW_SIGNATURES_IN_A_ROW  # the first, then 2 more
    for _ in range(3):  # a size captured before replays its graph
        got, _ = f(first, torch.randn(2, 4), torch.tensor(2))
    assert len(backend.programs) == backend_module.NEW_SIGNATURES_IN_A_ROW
    assert backend.programs[0].graphs and backend.forwards[-1].ungraphed


def test_no_graphs_and_dynamic_sizes_compile_once():
    """On CPU inputs (executor "eager": nothing is captured) a dynamic graph gets no program
    per signature at all: one compile serves every size."""
    torch._dynamo.reset()
    backend = make_backend(executor="eager", segments="inductor")
    f = torch.compile(grow, backend=backend, dynamic=True)
    cache = torch.randn(2, 4)
    for step in range(4):
        x, n = torch.randn(1, 4), torch.tensor(step)
        got, new_cache = f(x, cache, n)
        torch.testing.assert_close(got, grow(x, cache, n)[0], msg=f"step {step}")
        cache = new_cache
    assert len(backend.programs) == 0 and backend.forwards[-1].ungraphed


def test_backend_parameter_data_replaced_between_calls():
    torch._dynamo.reset()
    lin = torch.nn.Linear(2, 2, bias=False)

    def f(x, n):
        i0 = torch.zeros((), dtype=torch.int64)
        return while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y + 1), (i0, lin(x)))[1]

    cf = torch.compile(f, backend=make_backend(executor="sim", segments="eager"))
    for k in range(4):
        lin.weight.data = torch.full((2, 2), float(k))  # same Parameter, new memory
        with torch.no_grad():
            torch.testing.assert_close(cf(torch.ones(1, 2), torch.tensor(1)), f(torch.ones(1, 2), torch.tensor(1)))


LAYOUTS = {
    "expanded": lambda: torch.randn(1, 3).expand(2, 3),
    "strided": lambda: torch.randn(2, 6)[:, ::2],
}


@pytest.mark.parametrize("how", ["capture", "backend"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_inductor_segments_get_inputs_in_the_layout_they_were_built_for(layout, how):
    make = LAYOUTS[layout]
    torch._dynamo.reset()
    if how == "capture":
        f = capture(loop_doubling, make(), torch.tensor(1), executor="sim", segments="inductor")
    else:
        f = torch.compile(loop_doubling, backend=make_backend(executor="sim", segments="inductor"))
    for k in range(4):
        x = make()
        torch.testing.assert_close(f(x, torch.tensor(k)), loop_doubling(x, torch.tensor(k)), msg=f"call {k}")
