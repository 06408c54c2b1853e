"""ptc.complex over torch's own OpInfo database: never worse than stock ``torch.compile``.

The full sweep is ``benchmarks/complex_opinfo.py`` (every complex64 OpInfo,
forward and backward, stock and ptc). Here: the ops ptc once failed or got
wrong, each checked against eager through ptc's backend, and a bounded,
fixed slice of the whole database checked against stock compile.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def _sweep():
    spec = importlib.util.spec_from_file_location("ptc_complex_opinfo", ROOT / "benchmarks" / "complex_opinfo.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


sweep = _sweep()
OPS = {sweep.op_name(op): op for op in sweep.complex_ops(torch.complex64)}

#: ops ptc once failed to compile or answered wrong where stock compile is right (or, for
#: pinv/pinverse, where stock is wrong too), with what went wrong
REGRESSIONS = {
    "index_add": "a scatter into the int64 view of complex64: wrong sums (2.14) / make_reindexer NYI (2.13)",
    "index_copy": "the same scatter into a dtype view",
    "index_fill": "the same scatter into a dtype view",
    "index_put": "the same scatter into a dtype view",
    "put": "the same scatter into a dtype view (a C++ compile error on 2.14)",
    "diagonal_scatter": "the same scatter into a dtype view",
    "as_strided_scatter": "scattered through strided planes, whose strides are not self's",
    "isclose": "a 0-d operand made Inductor's scalar fallback look for ptc's inline hypot by the wrong name",
    "constant_pad_nd": "a complex fill value reached Inductor as a Python complex",
    "nn.functional.pad.constant": "a real fill value was written into the imaginary part too",
    "atanh": "log1p lost every digit near z = -1",
    "masked.sum": "a complex constant tensor in the graph met the fake tensors of the rewrite",
    "masked.cumprod": "the same constant",
    "linalg.pinv": "torch's complex pinv kernel is wrong under the dispatch mode of a compiled first call",
    "pinverse": "the same pinv kernel",
    "linalg.matrix_sqrth": "the same, for the matrix square root kernel (torch 2.14)",
    "linalg.polar": "the same, for the polar decomposition kernel (torch 2.14)",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(n for n in REGRESSIONS if n in OPS))
def test_op_that_ptc_once_failed_now_runs_and_equals_eager(name):
    res = sweep.run_op(OPS[name], samples=2, backward=False, dtype=torch.complex64, modes=("ptc",))
    assert not res.excluded and res.samples > 0, res
    assert res.ran["ptc"], f"{name} ({REGRESSIONS[name]}): {res.error.get('ptc')}"
    assert res.equal["ptc"], f"{name} ({REGRESSIONS[name]}): {res.error.get('ptc')}"
    assert not res.fallbacks, f"{name} was compiled the stock way: {res.fallbacks}"


#: ops whose gradient ptc once got wrong where stock compile is right
BACKWARD_REGRESSIONS = {
    "index_copy": "the scatter's destination aliased the tangent, which Inductor then wrote into in place",
    "chalf": "a complex32 value converted back to complex64 lost its imaginary part",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BACKWARD_REGRESSIONS))
def test_gradient_that_ptc_once_got_wrong_now_equals_eager(name):
    res = sweep.run_op(OPS[name], samples=2, backward=True, dtype=torch.complex64, modes=("ptc",))
    assert not res.excluded and res.samples > 0, res
    assert res.ran["ptc"] and res.equal["ptc"], f"{name} ({BACKWARD_REGRESSIONS[name]}): {res.error.get('ptc')}"
    assert not res.fallbacks, f"{name} was compiled the stock way: {res.fallbacks}"


def _slice(step: int, offset: int):
    known = set(REGRESSIONS) | set(BACKWARD_REGRESSIONS)
    names = sorted(n for n in OPS if n not in known and not sweep.excluded_by_name(OPS[n]))
    return names[offset::step]


@pytest.mark.slow
@pytest.mark.parametrize("name", _slice(12, 5))
def test_forward_never_worse_than_stock(name):
    """A fixed slice of the database (every 12th op): ptc runs and is right wherever stock compile is."""
    res = sweep.run_op(OPS[name], samples=1, backward=False, dtype=torch.complex64)
    assert not res.excluded, res.excluded
    assert sweep.worse_than_stock([res]) == [], res.error


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in _slice(24, 7) if OPS[n].supports_autograd])
def test_backward_never_worse_than_stock(name):
    """The gradient of a real loss through each op: ptc's equals eager's wherever stock's does."""
    res = sweep.run_op(OPS[name], samples=1, backward=True, dtype=torch.complex64)
    assert not res.excluded, res.excluded
    assert sweep.worse_than_stock([res]) == [], res.error


INPLACE = sorted(n for n in OPS if OPS[n].inplace_variant is not None and not sweep.excluded_by_name(OPS[n]))


@pytest.mark.slow
@pytest.mark.parametrize("name", INPLACE[1::4])
def test_inplace_variant_never_worse_than_stock(name):
    """Every 4th in-place variant (``x.add_(y)``): ptc runs and updates the input as eager does
    wherever stock compile does."""
    res = sweep.run_op(OPS[name], samples=1, backward=False, dtype=torch.complex64, inplace=True)
    assert sweep.worse_than_stock([res]) == [], res.error


@pytest.mark.parametrize("name", ["addcmul", "exp", "index_add", "masked_fill", "sqrt", "tril"])
def test_inplace_variant_is_stored_by_the_fused_kernel(name):
    """In-place variants ptc fuses forward are fused in place too: the input's new values are
    stored by the kernel (no complex ``copy_`` on ATen), equal to eager's."""
    res = sweep.run_op(OPS[name], samples=2, backward=False, dtype=torch.complex64, modes=("ptc",), inplace=True)
    assert res.samples and res.equal["ptc"], res.error
    assert res.fused["ptc"], res.unfused


def test_sweep_counts_a_wrong_answer_and_a_failure():
    """The harness itself: a wrong result and a raising compile are each what the table counts."""
    r_ok = sweep.OpResult("a", "forward", samples=1, ran={"stock": True, "ptc": True}, equal={"stock": True, "ptc": True})
    r_wrong = sweep.OpResult("b", "forward", samples=1, ran={"stock": True, "ptc": True}, equal={"stock": True, "ptc": False})
    r_fail = sweep.OpResult("c", "forward", samples=1, ran={"stock": True, "ptc": False}, equal={"stock": True, "ptc": False})
    r_out = sweep.OpResult("d", "forward", excluded="no sample eager runs")
    table = sweep.summary([r_ok, r_wrong, r_fail, r_out])
    assert table["ops"] == {"counted": 3, "excluded": 1}
    assert table["ptc"]["ran"] == 2 and table["ptc"]["equal"] == 1
    assert [w.split(":")[0] for w in sweep.worse_than_stock([r_ok, r_wrong, r_fail, r_out])] == ["b", "c"]
    assert sweep._equal(torch.tensor([1.0 + 1j]), torch.tensor([1.0 + 1.1j])) is not None
    assert sweep._equal(torch.tensor([1.0 + 1j]), torch.tensor([1.0 + 1j])) is None
    assert sweep._equal((torch.tensor([True]),), (torch.tensor([False]),)) is not None


def test_sweep_counts_a_frame_dynamo_ran_eagerly_as_not_fused():
    """``narrow`` with a tensor start: stock Inductor raises a data-dependent exception and Dynamo
    runs the frame eagerly (counted under "unimplemented", not "graph_break"): not fused, for
    stock (the harness called it fused) and for ptc, which lets stock's exception through
    instead of compiling the graph a second time and reporting a fallback of its own."""
    res = sweep.run_op(OPS["narrow"], samples=2, backward=False, dtype=torch.complex64)
    assert res.ran == {"stock": True, "ptc": True} and res.equal == {"stock": True, "ptc": True}, res.error
    assert res.fused == {"stock": False, "ptc": False}, res.unfused
    assert res.fallbacks == []
