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
        f(torch.ones(2), torch.tensor(1), k)
    assert len(backend.programs) >= backend_module.SIGNATURES_KEPT  # one program per new k


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
