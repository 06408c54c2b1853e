"""Captured programs shared by the cudagraph tests (capture once per module)."""

import pytest
import torch

from ptc.cudagraph import capture
from ptc.demos import cudagraph_programs as P

T = torch.tensor


def captured(fn, *args, **options):
    """``fn`` captured through the simulator; the warmup call is already done, so the
    next call captures and later calls replay."""
    options.setdefault("executor", "sim")
    options.setdefault("segments", "eager")
    cf = capture(fn, *args, **options)
    cf(*args)
    return cf


@pytest.fixture(scope="module")
def x4():
    return torch.randn(4, generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def counted_sim(x4):
    cf = captured(P.counted, x4, T(3))
    cf(x4, T(3))  # capture
    return cf


@pytest.fixture(scope="module")
def cond_in_while_sim(x4):
    return captured(P.cond_in_while, x4, T(3))


@pytest.fixture(scope="module")
def switch_in_while_sim(x4):
    return captured(P.switch_in_while, x4, T(4), T(0))


@pytest.fixture(scope="module")
def nested_sim(x4):
    return captured(P.nested, x4, T(2), T(3))
