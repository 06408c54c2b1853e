"""ptc's launch path for CuTeDSL kernels, on the CPU: arguments are built once per shape
signature and rebound to each call's tensors (building them costs about 0.4 ms of host time
per call in cutlass.operators 0.3.0, which on an H200 made every ptc kernel lose to cuBLAS for
M <= 128). The kernel launch itself is a stand-in here; tests/gemm/test_cuda.py runs it."""

import pytest
import torch

from ptc.gemm import runtime

from .conftest import needs_ops

pytestmark = needs_ops


def _tensors(seed):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(64, 128, generator=g).to(torch.bfloat16)
    w = torch.randn(96, 128, generator=g).to(torch.bfloat16)
    return a, w.t(), torch.empty(64, 96, dtype=torch.bfloat16)


def test_rebound_arguments_carry_the_new_tensors_and_leave_the_template_alone():
    a, b, out = _tensors(0)
    template = runtime.gemm_arguments(a, b, out)
    a2, b2, out2 = _tensors(1)
    new = runtime.rebind_arguments(template, a2, b2, out2)
    for name, t, old in (("A", a2, a), ("B", b2, b), ("out", out2, out)):
        assert getattr(new, name).tensor.runtime_tensor is t
        assert getattr(new, name).tensor.data_ptr == t.data_ptr()
        assert getattr(template, name).tensor.runtime_tensor is old
    assert new.accumulator_type is template.accumulator_type


def test_rebinding_refuses_arguments_it_cannot_vouch_for():
    a, b, out = _tensors(0)
    template = runtime.gemm_arguments(a, b, out)
    template.A.tensor._runtime_tensor = object()  # e.g. a cute tensor: the non-TVM-FFI path
    assert runtime.rebind_arguments(template, a, b, out) is None


class FakeOperator:
    """Records what each launch passes; compiles once."""

    def __init__(self):
        self.compiles, self.launched = 0, []

    def compile(self, args, target_sm):
        self.compiles += 1
        return "artifact"

    def get_workspace_size(self, args):
        return type("Req", (), {"size_bytes": 0})()

    def run(self, args, artifact, stream, workspace, assume_supported_args):
        self.launched.append((args.A.tensor.runtime_tensor, args.B.tensor.runtime_tensor, args.out.tensor.runtime_tensor))


def test_second_call_rebinds_instead_of_building(monkeypatch):
    op = FakeOperator()
    monkeypatch.setattr(runtime, "find_operator", lambda name, arch, args: op)
    monkeypatch.setattr(runtime, "_ops", {})
    monkeypatch.setattr(runtime, "_artifacts", {})
    monkeypatch.setattr(runtime, "_templates", {})
    built = []
    real = runtime.gemm_arguments
    monkeypatch.setattr(runtime, "gemm_arguments", lambda *a, **k: built.append(1) or real(*a, **k))
    calls = [_tensors(s) for s in range(3)]
    for a, b, out in calls:
        runtime.run_cutlass("op", "90a", a, b, out, None, {}, stream=None)
    assert len(built) == 1 and op.compiles == 1
    assert all(got[0] is a and got[1] is b and got[2] is out for got, (a, b, out) in zip(op.launched, calls))
    (template,) = runtime._templates.values()
    assert template.A.tensor.runtime_tensor.device.type == "meta"  # no call's tensor is kept alive
    # another shape signature builds its own arguments
    a, b, out = torch.randn(32, 128).to(torch.bfloat16), calls[0][1], torch.empty(32, 96, dtype=torch.bfloat16)
    runtime.run_cutlass("op", "90a", a, b, out, None, {}, stream=None)
    assert len(built) == 2 and op.launched[-1][0] is a
