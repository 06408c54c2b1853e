"""Rewriting torch's native switch HOP (torch 2.14+) into ptc's cond tree."""

import io

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import ptc
from ptc import _compat
from ptc.control_flow import cond_depth, count_native_switch, lower_native_switch, switch

from .helpers import reference, save_load

BRANCHES = [lambda x: x.sin(), lambda x: x * 2, lambda x: x + 1, lambda x: x - 3, lambda x: -x]
needs_native = pytest.mark.skipif(
    not _compat.NATIVE_SWITCH_HOP, reason="this torch has no native switch HOP to lower"
)


def _native_switch():
    from torch._higher_order_ops.switch import switch as native

    return native




class UsesPtc(torch.nn.Module):
    def forward(self, i, x):
        return switch(i, BRANCHES, x)


def test_program_without_native_switch_is_returned_unchanged():
    """Runs on every torch: the pass leaves ptc's own trees (and anything else) alone."""
    x = torch.randn(4)
    ep = torch.export.export(UsesPtc(), (torch.tensor(1), x))
    assert count_native_switch(ep) == 0
    assert lower_native_switch(ep) is ep
    gm = make_fx(lambda i, x: switch(i, BRANCHES, x))(torch.tensor(1), x)
    assert lower_native_switch(gm) is gm


def test_lowering_rejects_other_objects():
    with pytest.raises(ptc.PtcTypeError, match="ExportedProgram or a torch.fx.GraphModule, got function"):
        lower_native_switch(lambda x: x)


@needs_native
def test_native_switch_program_does_not_save_but_lowered_one_does():
    class UsesNative(torch.nn.Module):
        def forward(self, i, x):
            return _native_switch()(i, BRANCHES, (x,))

    n = torch.export.Dim("n", min=2, max=64)
    ep = torch.export.export(
        UsesNative(), (torch.tensor(1), torch.randn(6)), dynamic_shapes=({}, {0: n})
    )
    assert count_native_switch(ep) == 1
    with pytest.raises(Exception, match="(?i)serializ"):
        torch.export.save(ep, io.BytesIO())

    lowered = lower_native_switch(ep)
    assert count_native_switch(lowered) == 0
    assert cond_depth(lowered.graph_module) == 3
    assert lowered.graph_signature.user_inputs == ep.graph_signature.user_inputs
    (size_range,) = lowered.range_constraints.values()
    assert (int(size_range.lower), int(size_range.upper)) == (2, 64)

    loaded = save_load(lowered)
    x = torch.randn(9)  # a size the example did not have
    for i in range(-2, 8):
        assert torch.allclose(loaded.module()(torch.tensor(i), x), reference(BRANCHES, i, x))


@needs_native
def test_lowering_keeps_native_float_index_truncation():
    """The native HOP accepts a float index and truncates it (1.7 picks branch 1)."""
    def program(i, x):
        return _native_switch()(i, BRANCHES, (x,))

    x = torch.randn(4)
    gm = make_fx(program, tracing_mode="symbolic")(torch.tensor(1.5), x)
    assert count_native_switch(gm) == 1
    lowered = lower_native_switch(gm, torch.tensor(1.5), x)
    assert count_native_switch(lowered) == 0
    for raw in [-1.0, 0.2, 1.7, 2.0, 3.9, 9.5]:
        got = lowered(torch.tensor(raw), x)
        assert torch.allclose(got, BRANCHES[min(max(int(raw), 0), 4)](x))


@needs_native
def test_graph_module_lowering_needs_example_inputs():
    gm = make_fx(lambda i, x: _native_switch()(i, BRANCHES, (x,)))(torch.tensor(1), torch.randn(3))
    with pytest.raises(ptc.PtcValueError, match="needs example inputs"):
        lower_native_switch(gm)
