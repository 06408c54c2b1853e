"""``ptc.switch`` at the top level: the same object as ``ptc.control_flow.switch``, imported lazily."""

import subprocess
import sys

import torch

import ptc
import ptc.control_flow


def test_top_level_switch_is_control_flow_switch():
    from ptc import switch

    assert switch is ptc.control_flow.switch and ptc.switch is ptc.control_flow.switch
    assert "switch" in ptc.__all__ and "switch" in dir(ptc)


def test_top_level_switch_runs_eagerly():
    x = torch.randn(8)
    branches = [torch.sin, torch.cos, lambda t: t * 2]
    assert torch.equal(ptc.switch(torch.tensor(1), branches, x), torch.cos(x))
    assert torch.equal(ptc.switch(2, branches, x), x * 2)
    assert torch.equal(ptc.switch(torch.tensor(99), branches, x), x * 2)  # clamped to the last branch


def test_import_ptc_does_not_import_torch():
    code = "import sys, ptc; assert 'torch' not in sys.modules; ptc.switch; assert 'torch' in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_unknown_attribute_is_an_attribute_error():
    import pytest

    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        ptc.nonexistent  # noqa: B018
