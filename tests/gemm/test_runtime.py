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


class ScaledOperator(FakeOperator):
    def run(self, args, artifact, stream, workspace, assume_supported_args):
        self.launched.append(tuple(x.tensor.runtime_tensor for op in (args.A, args.B) for x in (op.quantized, op.scale)))


@pytest.mark.parametrize("mode", ["block32", "block16"])
def test_block_scaled_arguments_are_built_for_every_call_not_rebound(monkeypatch, mode):
    """Rebinding swaps A, B and out only: a block-scaled template would keep the first call's scales."""
    from ptc.gemm import blockscale

    op = ScaledOperator()
    monkeypatch.setattr(runtime, "find_operator", lambda name, arch, args: op)
    for name in ("_ops", "_artifacts", "_templates"):
        monkeypatch.setattr(runtime, name, {})
    calls = [blockscale.random_operands(mode, 64, 96, 128, generator=torch.Generator().manual_seed(s)) for s in range(2)]
    for a, b, sa, sb in calls:
        operands = dict(zip(runtime.BLOCK_SCALES, (sa, sb)))
        runtime.run_cutlass("op", "100a", a, b, torch.empty(64, 96, dtype=torch.bfloat16), None, operands, stream=None)
    assert op.compiles == 1 and not runtime._templates
    for launched, (a, b, sa, sb) in zip(op.launched, calls):
        assert all(x is y for x, y in zip(launched, (a, sa, b, sb)))


# --- the direct call: from the second call on, ptc calls the compiled function itself -----------


class Artifact:
    def __init__(self, fn):
        self.compiled_obj = fn


class CallingOperator(FakeOperator):
    """Like cutlass.operators' GEMM operators: ``run`` calls the compiled function with the
    arguments' runtime tensors and the stream (``view_b``: passes a view it made of B instead)."""

    def __init__(self, view_b=False):
        super().__init__()
        self.view_b, self.runs, self.fn_calls = view_b, 0, []

    def compile(self, args, target_sm):
        self.compiles += 1

        def compiled(a, b, out, stream, *, mode="tn"):
            self.fn_calls.append((a, b, out, stream, mode))
            out.copy_((a.float() @ b.float()).to(out.dtype))

        return Artifact(compiled)

    def run(self, args, artifact, stream, workspace, assume_supported_args):
        self.runs += 1
        b = args.B.tensor.runtime_tensor
        artifact.compiled_obj(args.A.tensor.runtime_tensor, b[:] if self.view_b else b, args.out.tensor.runtime_tensor,
                              stream, mode="tn")


@pytest.fixture
def fresh_runtime(monkeypatch):
    for name in ("_ops", "_artifacts", "_templates", "_direct", "_direct_refused"):
        monkeypatch.setattr(runtime, name, {})

    def use(op):
        monkeypatch.setattr(runtime, "find_operator", lambda name, arch, args: op)
        return op

    return use


def test_later_calls_go_straight_to_the_compiled_function(fresh_runtime):
    op = fresh_runtime(CallingOperator())
    calls = [_tensors(s) for s in range(4)]
    streams = [object() for _ in calls]
    for (a, b, out), stream in zip(calls, streams):
        runtime.run_cutlass("op", "90a", a, b, out, None, {}, stream=stream)
        torch.testing.assert_close(out, (a.float() @ b.float()).bfloat16())
    assert op.runs == 1 and op.compiles == 1  # only the first call went through the operator
    for (a, b, out, stream, mode), (a_, b_, out_), stream_ in zip(op.fn_calls, calls, streams):
        assert a is a_ and b is b_ and out is out_ and stream is stream_ and mode == "tn"
    (direct,) = runtime._direct.values()
    assert direct.checked and direct.roles == ["a", "b", "out", "stream"] and direct.kwroles == {"mode": ("const", "tn")}


def test_a_call_through_the_real_launcher_computes_its_key_once(fresh_runtime, monkeypatch):
    """ptc_nvgemm_mm -> launch_cutlass -> run_cutlass -> the direct call, on the CPU (only the CUDA
    stream is stood in for): the launch key (~3 us of host time) is built once per call."""
    op = fresh_runtime(CallingOperator())
    monkeypatch.setattr(runtime, "_stream_of", lambda operator, out: "stream")
    keys = []
    real = runtime._key
    monkeypatch.setattr(runtime, "_key", lambda *args: keys.append(args[0]) or real(*args))
    monkeypatch.setattr(runtime, "_verdicts", {})
    for s in range(3):
        a, b, out = _tensors(s)
        runtime.ptc_nvgemm_mm(a, b, out=out, operator="op", arch="90a")
        torch.testing.assert_close(out, (a.float() @ b.float()).bfloat16())
    assert keys == ["op"] * 3 and op.runs == 1 and len(op.fn_calls) == 3


def test_an_argument_ptc_cannot_supply_keeps_the_operator_path(fresh_runtime):
    op = fresh_runtime(CallingOperator(view_b=True))
    for s in range(3):
        a, b, out = _tensors(s)
        runtime.run_cutlass("op", "90a", a, b, out, None, {}, stream=None)
        torch.testing.assert_close(out, (a.float() @ b.float()).bfloat16())
    assert op.runs == 3 and not runtime._direct
    assert "cannot supply" in next(iter(runtime._direct_refused.values()))


@pytest.mark.parametrize("broken", ["wrong result", "raises"])
def test_a_direct_call_that_fails_its_check_is_dropped_and_the_call_still_right(fresh_runtime, broken):
    op = fresh_runtime(CallingOperator())
    a, b, out = _tensors(0)
    runtime.run_cutlass("op", "90a", a, b, out, None, {}, stream=None)
    (key,) = runtime._direct

    def bad(a, b, out, stream, mode):
        if broken == "raises":
            raise TypeError("expected a CUstream")
        out.zero_()

    runtime._direct[key].fn = bad
    a, b, out = _tensors(1)
    runtime.run_cutlass("op", "90a", a, b, out, None, {}, stream=None)
    torch.testing.assert_close(out, (a.float() @ b.float()).bfloat16())  # relaunched through the operator
    assert op.runs == 2 and key not in runtime._direct
    assert ("disagrees" if broken == "wrong result" else "TypeError") in runtime._direct_refused[key]
    runtime.run_cutlass("op", "90a", a, b, out, None, {}, stream=None)
    assert op.runs == 3  # never tried again for these shapes


class Pointer:
    """What ``cute.runtime.make_ptr`` returns, as far as ptc reads it (a real one: the slow test below)."""

    def __init__(self, pointer, dtype, mem_space, assumed_align=None):
        assert pointer % assumed_align == 0
        self._pointer, self._dtype, self._addr_space, self._assumed_align = pointer, dtype, mem_space, assumed_align


class PointerOperator(FakeOperator):
    """Like cutlass.operators' block-scaled operators: ``run`` calls the compiled function with
    pointers made from the arguments' addresses, the problem shape and the stream (``extra``:
    also a pointer to memory of its own, e.g. a workspace)."""

    def __init__(self, extra=False):
        super().__init__()
        self.extra, self.runs, self.fn_calls, self.memory = extra, 0, [], {}

    def compile(self, args, target_sm):
        def compiled(a_ptr, b_ptr, out_ptr, *rest):
            shape, stream = rest[-2:]
            self.fn_calls.append((a_ptr, b_ptr, out_ptr, shape))
            a, b, out = (self.memory[p._pointer] for p in (a_ptr, b_ptr, out_ptr))
            out.copy_((a.float() @ b.float()).to(out.dtype))

        return Artifact(compiled)

    def run(self, args, artifact, stream, workspace, assume_supported_args):
        self.runs += 1
        ptrs = []
        for t in (args.A.tensor.runtime_tensor, args.B.tensor.runtime_tensor, args.out.tensor.runtime_tensor):
            self.memory[t.data_ptr()] = t
            ptrs.append(Pointer(t.data_ptr(), "bf16", "gmem", assumed_align=16))
        if self.extra:
            ptrs.append(Pointer(4096, "i8", "gmem", assumed_align=16))
        artifact.compiled_obj(*ptrs, tuple(args.out.shape) + (1,), stream)


def test_pointers_to_the_calls_tensors_are_rebuilt_for_each_later_call(fresh_runtime):
    op = fresh_runtime(PointerOperator())
    calls = [_tensors(s) for s in range(3)]
    stream = object()
    for a, b, out in calls:
        for t in (a, b, out):
            op.memory[t.data_ptr()] = t  # the fake kernel reads memory by address
        runtime.run_cutlass("op", "100a", a, b, out, None, {}, stream=stream)
        torch.testing.assert_close(out, (a.float() @ b.float()).bfloat16())
    assert op.runs == 1  # later calls went straight to the compiled function, with new pointers
    for (a_ptr, b_ptr, out_ptr, shape), (a, b, out) in zip(op.fn_calls, calls):
        assert (a_ptr._pointer, b_ptr._pointer, out_ptr._pointer) == (a.data_ptr(), b.data_ptr(), out.data_ptr())
        assert a_ptr._assumed_align == 16 and a_ptr._addr_space == "gmem" and shape == (64, 96, 1)
    (direct,) = runtime._direct.values()
    assert direct.checked and [r[:2] for r in direct.roles[:3]] == [("ptr", "a"), ("ptr", "b"), ("ptr", "out")]
    assert direct.roles[3:] == [("const", (64, 96, 1)), "stream"]


def test_a_pointer_to_memory_that_is_not_the_calls_keeps_the_operator_path(fresh_runtime):
    op = fresh_runtime(PointerOperator(extra=True))
    for s in range(2):
        a, b, out = _tensors(s)
        runtime.run_cutlass("op", "100a", a, b, out, None, {}, stream=None)
    assert op.runs == 2 and not runtime._direct
    a, b, out = _tensors(0)
    twins = {"a": a, "b": a}  # one address, two names: ambiguous
    assert runtime._pointer_role(Pointer(a.data_ptr(), "bf16", "gmem", 16), list(twins.items())) is None
    assert runtime._pointer_role(Pointer(a.data_ptr(), "bf16", "gmem", 16), [("a", a)])[:2] == ("ptr", "a")
    assert runtime._pointer_role(object(), [("a", a)]) is None


# --- the first-run check: a kernel whose result disagrees with its definition is refused ---------

BIAS_SILU = "def epilogue(accum, bias):\n    v1 = accum + bias\n    v2 = sigmoid(v1)\n    D = v1 * v2\n    return D\n"


def _right(operator, arch, a, b, out, source, operands):
    out.copy_(runtime.reference(a, b, source, operands).to(out.dtype))


@pytest.mark.parametrize(
    "wrong, why",
    [
        (lambda a, b, bias, ref: (a.float() @ b.float()), "the epilogue dropped"),
        (lambda a, b, bias, ref: ref.flip(0), "rows swapped"),
        (lambda a, b, bias, ref: torch.where(ref > 3, torch.nan, ref), "nan where the result is finite"),
        (lambda a, b, bias, ref: ref * (1 + 2**-4), "a 6 % scale error"),
    ],
)
def test_check_result_names_what_disagrees(wrong, why):
    a, b, out = _tensors(0)
    bias = torch.randn(96).bfloat16()
    ref = runtime.reference(a, b, BIAS_SILU, {"bias": bias})
    assert runtime.check_result("k", a, b, ref.bfloat16(), BIAS_SILU, {"bias": bias}) == ""  # bf16 rounding passes
    reason = runtime.check_result("k", a, b, wrong(a, b, bias, ref).bfloat16(), BIAS_SILU, {"bias": bias})
    assert reason.startswith("k disagrees with epilogue(a @ b) at ") and "refused for these shapes" in reason, why


def test_reference_is_the_epilogue_of_the_fp32_product():
    a, b, _ = _tensors(0)
    bias = torch.randn(96).bfloat16()
    acc = a.float() @ b.float()
    torch.testing.assert_close(runtime.reference(a, b, BIAS_SILU, {"bias": bias}),
                               torch.nn.functional.silu(acc + bias.float()))
    torch.testing.assert_close(runtime.reference(a, b, None, {}), acc)


def test_a_wrong_kernel_is_refused_on_its_first_run_and_never_launched_again():
    from ptc import WrongResult

    a, b, out = _tensors(0)
    launched = []

    def transposed_tiles(operator, arch, a, b, out, source, operands):  # a plausible layout bug
        launched.append(operator)
        out.copy_((a.float() @ b.float()).reshape(96, 64).t().to(out.dtype))

    with runtime.launcher(transposed_tiles):
        with pytest.raises(WrongResult, match="op1 disagrees with a @ b"):
            runtime.ptc_nvgemm_mm(a, b, out=out, operator="op1", arch="90a")
        with pytest.raises(WrongResult, match="op1 disagrees"):
            runtime.ptc_nvgemm_mm(a, b, out=out, operator="op1", arch="90a")
        assert launched == ["op1"]  # the second call did not launch it
        with pytest.raises(WrongResult):  # each kernel is judged on its own
            runtime.ptc_nvgemm_mm(a, b, out=out, operator="op2", arch="90a")
    with runtime.launcher(_right):  # verdicts belong to the launcher that earned them
        runtime.ptc_nvgemm_mm(a, b, out=out, operator="op1", arch="90a")
    torch.testing.assert_close(out, (a.float() @ b.float()).bfloat16())


def test_a_right_kernel_is_checked_once_per_shape(monkeypatch):
    checks = []
    real = runtime.check_result
    monkeypatch.setattr(runtime, "check_result", lambda *args: checks.append(args[0]) or real(*args))
    a, b, out = _tensors(0)
    with runtime.launcher(_right):
        for _ in range(3):
            runtime.ptc_nvgemm_mm(a, b, out=out, operator="op", arch="90a")
        a2, b2, out2 = a[:32], b, torch.empty(32, 96, dtype=torch.bfloat16)  # a new shape is checked again
        runtime.ptc_nvgemm_mm(a2, b2, out=out2, operator="op", arch="90a")
    assert checks == ["op", "op"]


def _record_real_call(monkeypatch, target, problem, epilogue, a, b, out, operands, stream):
    """Compile cutlass.operators' first selected operator for ``problem`` here, on the CPU, run it
    (the launch itself fails without a GPU) and return what it called its compiled function with."""
    import importlib

    import ptc.gemm as gemm
    from ptc.gemm.ptx import _OCCUPANCY_MODULES
    from ptc.gemm.targets import target as named

    for name in _OCCUPANCY_MODULES:  # compiling asks the driver for the occupancy: answer for it
        mod = importlib.import_module(name)
        if hasattr(mod, "get_max_active_clusters"):
            monkeypatch.setattr(mod, "get_max_active_clusters", lambda *a, **k: 8)
    tgt = named(target)
    p = gemm.plan(problem, tgt, epilogue)
    args = runtime.gemm_arguments(a, b, out, p.fusion.source if epilogue else None, operands)
    op = runtime.find_operator(p.selected[0].name, tgt.arch, args)
    assert op.get_workspace_size(args).size_bytes == 0
    recorder = runtime._Recorder(op.compile(args, target_sm=tgt.arch))
    with pytest.raises(Exception):  # the launch itself needs a GPU
        op.run(args, recorder.artifact, stream=stream, workspace=None, assume_supported_args=True)
    return recorder


@pytest.mark.slow
@pytest.mark.parametrize("target, epilogue", [("H200_SXM", None), ("B200", None), ("B200", "bias,silu")])
def test_real_operators_call_their_compiled_function_with_what_ptc_can_supply(monkeypatch, target, epilogue):
    """cutlass.operators' own operators (compiled here, on the CPU; only the launch fails) call
    their compiled function with the call's tensors and stream, nothing else: so on a GPU ptc's
    direct call takes over from the second call (the GPU test checks it launches right)."""
    from ptc.gemm import GemmProblem

    a, b, out = _tensors(0)
    operands = {"bias": torch.randn(96).bfloat16()} if epilogue else {}
    stream = object()
    recorder = _record_real_call(monkeypatch, target, GemmProblem("mm", 64, 96, 128), epilogue, a, b, out, operands, stream)
    direct = runtime.DirectCall.from_recorded(recorder, a, b, out, operands, stream)
    want = ["a", "b", "stream", "operand:bias", "out"] if epilogue else ["a", "b", "out", "stream"]
    assert direct is not None and direct.roles == want and direct.kwroles == {}


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["block32", "block16"])
def test_real_block_scaled_operators_take_pointers_ptc_rebuilds_for_new_tensors(monkeypatch, mode):
    """The block-scaled operators call their compiled function with CuTe pointers to A, B, the
    scales and out (plus the problem shape and stream): ptc's direct call rebuilds the same kind
    of pointer for each later call's tensors (instead of ~1 ms of arguments per call here)."""
    from ptc.gemm import GemmProblem, blockscale

    def tensors(seed):
        a, b, sa, sb = blockscale.random_operands(mode, 64, 96, 128, generator=torch.Generator().manual_seed(seed))
        return a, b, torch.empty(64, 96, dtype=torch.bfloat16), dict(zip(runtime.BLOCK_SCALES, (sa, sb)))

    a, b, out, operands = tensors(0)
    dt = {"block32": "e4m3", "block16": "e2m1x2"}[mode]
    problem = GemmProblem("scaled_mm", 64, 96, 128, a_dtype=dt, b_dtype=dt, scale=mode)
    stream = object()
    recorder = _record_real_call(monkeypatch, "B200", problem, None, a, b, out, operands, stream)
    direct = runtime.DirectCall.from_recorded(recorder, a, b, out, operands, stream)
    assert direct is not None
    assert [r[:2] if r[0] == "ptr" else r for r in direct.roles] == [
        ("ptr", "a"), ("ptr", "b"), ("ptr", "operand:block_scale_a"), ("ptr", "operand:block_scale_b"), ("ptr", "out"),
        ("const", (64, 96, 128, 1)), "stream",
    ]
    seen = []
    direct.fn = lambda *args: seen.append(args)
    a2, b2, out2, operands2 = tensors(1)
    direct(a2, b2, out2, operands2, stream)
    recorded, passed = recorder.calls[0][0][:5], seen[0][:5]
    assert [p._pointer for p in passed] == [t.data_ptr() for t in (a2, b2, *operands2.values(), out2)]
    for old, new in zip(recorded, passed):
        assert type(new) is type(old) and (new._dtype, new._addr_space, new._assumed_align) == (
            old._dtype, old._addr_space, old._assumed_align)
