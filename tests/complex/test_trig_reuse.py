"""ptc stores a reused CPU value computed with sin or cos (ptc.complex.codegen.trig_reuse).

A complex exponential broadcast over a batch, ``z * exp(1j * phase)`` with
``phase`` one row, becomes ``cos(phase)`` and ``sin(phase)`` read by every row.
Inductor's own heuristic recomputes them per element of the batch (it stores
reused exp, log, tanh ... but not sin/cos); within ptc's compile they are
computed once per row element and stored.
"""

import contextlib
import importlib
import re

import pytest
import torch

import ptc.complex as pc
from ptc import _compat

from .helpers import rel_close

ROWS, COLS = 16, 1027  # whole vectors and a tail


def phase_shift(z, freqs):
    return z * torch.exp(-0.1j * freqs)


def _compiled_code(fn, *args):
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=pc.backend(), dynamic=False)
    result, codes = pc.generated_code(compiled, *args)
    rel_close(result, fn(*args), torch.complex64)
    return "\n".join(codes)


def _float_buffers(code: str, numel: int) -> int:
    """How many float32 buffers of ``numel`` elements the wrapper allocates."""
    return len(re.findall(rf"empty_strided_cpu\(\({numel}, \), \(1, \), torch\.float32\)", code))


def _inputs():
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(ROWS, COLS, dtype=torch.complex64, generator=gen)
    return z, torch.randn(COLS, generator=gen) * 100


@pytest.fixture(scope="module")
def code():
    z, freqs = _inputs()
    return _compiled_code(phase_shift, z, freqs)


@pytest.fixture(scope="module")
def stock_heuristic_code():
    """The same compiles with Inductor's own reuse heuristic (the override switched off)."""
    z, freqs = _inputs()
    pc_backend = importlib.import_module("ptc.complex.backend")  # the module (pc.backend is the function)
    original = pc_backend.trig_reuse
    pc_backend.trig_reuse = lambda: contextlib.nullcontext(False)
    try:
        return _compiled_code(phase_shift, z, freqs)
    finally:
        pc_backend.trig_reuse = original


def test_a_broadcast_phase_is_computed_once_per_row_element(code, stock_heuristic_code):
    if not _compat.INDUCTOR_REALIZE_ON_REUSE:
        assert _float_buffers(code, COLS) == 0
        return
    # cos and sin of the phase: one row each, stored, then read by every row of z
    assert _float_buffers(code, COLS) == 2, code
    assert _float_buffers(stock_heuristic_code, COLS) == 0  # Inductor alone recomputes them
