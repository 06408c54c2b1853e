"""Module state, random numbers and the simulator's own bookkeeping: a captured module
updates its buffers once per call as eager does, capture() leaves them (and the random
number generator) as they were, and the simulator replays integer buffers, metadata ops
and compiled segments that write a module's buffers."""

import pytest
import torch
from torch._higher_order_ops.while_loop import while_loop

from ptc.cudagraph import capture, make_backend

T = torch.tensor


def _loop(x, n):
    i0 = torch.zeros((), dtype=torch.int64)
    return while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y + 1), (i0, x))[1]


class Counting(torch.nn.Module):
    """A buffer updated in place in forward, and BatchNorm in training mode."""

    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))
        self.bn = torch.nn.BatchNorm1d(2)

    def forward(self, x, n):
        self.count.add_(1)
        return _loop(self.bn(x), n) + self.count


def _same_state(a, b):
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        torch.testing.assert_close(x, y, msg=name)


@pytest.mark.parametrize("segments", ["eager", "inductor"])
def test_captured_module_updates_its_buffers_once_per_call(segments):
    torch.manual_seed(0)
    mine = Counting()
    ref = Counting()
    ref.load_state_dict(mine.state_dict())
    cf = capture(mine, torch.randn(3, 2), T(1), executor="sim", segments=segments)
    _same_state(mine, ref)  # capture() ran forward once, and put the buffers back
    for k in range(4):
        x = torch.randn(3, 2)
        with torch.no_grad():
            torch.testing.assert_close(cf(x, T(k)), ref(x, T(k)), msg=f"call {k}")
        _same_state(mine, ref)


def noisy(a):
    return a * torch.rand_like(a)


@pytest.mark.parametrize("how", ["capture", "backend"])
def test_random_numbers_are_drawn_once_per_call(how):
    torch._dynamo.reset()
    torch.manual_seed(0)
    if how == "capture":
        f = capture(noisy, torch.ones(4), executor="sim", segments="eager")
    else:
        f = torch.compile(noisy, backend=make_backend(executor="sim", segments="eager"))
    torch.manual_seed(1)
    got = [f(torch.ones(4)) for _ in range(4)]
    torch.manual_seed(1)
    want = [noisy(torch.ones(4)) for _ in range(4)]
    for k, (g, w) in enumerate(zip(got, want)):
        torch.testing.assert_close(g, w, msg=f"call {k}")


def test_capture_draws_no_random_numbers():
    torch.manual_seed(0)
    before = torch.get_rng_state()
    capture(noisy, torch.ones(4), executor="sim", segments="eager")
    assert torch.equal(before, torch.get_rng_state())


def test_capture_leaves_pythons_and_numpys_generators_and_saved_buffers_usable():
    """capture() ran fn for real and put torch's generator back, not Python's or NumPy's; and
    it put a buffer's values back with an in-place copy, so a graph that had saved the buffer
    for backward raised "modified by an inplace operation"."""
    import random

    import numpy

    def jittered(x):
        return x * (1 + random.random() + float(numpy.random.rand()))

    random.seed(0), numpy.random.seed(0)
    py, np_ = random.getstate(), numpy.random.get_state()
    capture(jittered, torch.ones(2), executor="sim", segments="eager")
    assert random.getstate() == py
    assert all(numpy.array_equal(a, b) if isinstance(a, numpy.ndarray) else a == b
               for a, b in zip(numpy.random.get_state(), np_))  # fmt: skip

    model = Counting().train()
    w = torch.ones(2, requires_grad=True)
    loss = (model.bn.running_mean * w).sum()  # saves running_mean for backward
    capture(model, torch.randn(3, 2), T(1), executor="sim", segments="eager")
    loss.backward()
    assert torch.equal(w.grad, model.bn.running_mean)


def test_small_integer_buffers_made_during_capture():
    def f(x, n):
        return _loop(x.to(torch.uint8), n) + _loop(x.to(torch.int8), n).to(torch.uint8)

    cf = capture(f, torch.ones(3), T(1), executor="sim", segments="eager")
    for k in range(4):
        x = torch.full((3,), float(k))
        torch.testing.assert_close(cf(x, T(2)), f(x, T(2)))


def test_metadata_ops_in_place_are_not_replayed_as_kernels():
    lin = torch.nn.Linear(2, 2, bias=False)  # on a 1-D input: unsqueeze, mm, squeeze_

    def f(x, n):
        return _loop(lin(x), n) + _loop((x * 2).unsqueeze_(0), n)

    cf = capture(f, torch.ones(2), T(1), executor="sim", segments="eager")
    for k in range(4):
        x = torch.full((2,), float(k))
        with torch.no_grad():
            torch.testing.assert_close(cf(x, T(1)), f(x, T(1)), msg=f"call {k}")
