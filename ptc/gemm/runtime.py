"""What Inductor's generated code calls when a ptc CuTeDSL candidate runs (or is benchmarked).

``extern_kernels.ptc_nvgemm_mm(a, b, out=buf, operator=NAME, arch="100a")`` and
its ``addmm``/``bmm`` siblings find the ``cutlass.operators`` operator by name
(an args-filtered query, memoized), compile it once per shape signature, and
launch it on the current stream. Everything before the launch also runs on
CPU; the launch needs a CUDA tensor and raises :class:`FeatureUnavailable`
(a ``RuntimeError``, which Inductor's autotuner scores as an infinitely slow
choice) where there is none.

The first run of each kernel on each shape signature (and epilogue) is checked
against its definition, ``epilogue(a @ b)`` computed in fp32 by ATen with the
epilogue's own EVT source, before the result is used: a kernel that disagrees is
refused from then on (:class:`ptc.WrongResult`, also a ``RuntimeError``), so the
autotuner never picks it and a compiled graph that calls it raises instead of
returning a wrong tensor. This covers picks that skip benchmarking too (a
database winner, a graph from Inductor's cache).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Callable, Dict, Optional, Tuple

import torch

from ptc.errors import FeatureUnavailable, PtcValueError, WrongResult
from ptc.gemm import catalog

__all__ = [
    "ptc_nvgemm_mm", "ptc_nvgemm_addmm", "ptc_nvgemm_bmm", "ptc_nvgemm_scaled_mm", "ptc_nvgemm_block_scaled_mm",
    "ptc_nvgemm_fused", "ptc_reference_mm", "launcher", "launch_cutlass", "check_result",
]

log = logging.getLogger("ptc.gemm")

_lock = threading.Lock()
_ops: Dict[Tuple, object] = {}
_artifacts: Dict[Tuple, object] = {}
_templates: Dict[Tuple, object] = {}  # the first GemmArguments per key, rebound for later calls
_verdicts: Dict[Tuple, str] = {}  # launch key -> "" (checked: right) or why the kernel was refused

#: operand names of a block-scaled GEMM's scales (MXFP8/NVFP4, see ptc.gemm.blockscale): with
#: these, ``a`` and ``b`` are quantized and there is no epilogue
BLOCK_SCALES = ("block_scale_a", "block_scale_b")
#: the address alignment (bytes) cutlass.operators' block-scaled kernels assume for scales
SCALE_ALIGN = 32


def _sig(*tensors) -> Tuple:
    return tuple([(t.shape, t.stride(), t.dtype) for t in tensors])  # torch.Size is a tuple: no copy


def find_operator(operator: str, arch: str, args):
    """The ``cutlass.operators`` operator named ``operator`` that supports ``args`` on ``arch``.

    Raises:
      FeatureUnavailable: no such operator supports these arguments.
    """
    co = catalog.cutlass_operators_module()

    for op in co.get_operators(args=args, target_sm=arch):
        if op.metadata.operator_name == operator:
            return op
    raise FeatureUnavailable(f"cutlass.operators has no operator {operator} for these tensors on sm_{arch}")


def launch_cutlass(operator: str, arch: str, a, b, out, epilogue_source: Optional[str], operands, key=None) -> None:
    """Compile (once) and launch ``cutlass.operators`` operator ``operator`` for these tensors
    (``key``: this call's :func:`_key`, where the caller has it already)."""
    run_cutlass(operator, arch, a, b, out, epilogue_source, operands, _stream_of(operator, out), key)


def _stream_of(operator: str, out):
    """The current CUDA stream, for a kernel writing ``out``; FeatureUnavailable off CUDA."""
    if out.device.type != "cuda":
        raise FeatureUnavailable(
            f"ptc CuTeDSL kernel {operator} needs CUDA tensors, got {out.device}", "CUDA_AVAILABLE"
        )
    return torch.cuda.current_stream()


def _key(operator: str, arch: str, a, b, out, source: Optional[str], operands: dict) -> Tuple:
    """A launch's key: the kernel, its shapes, strides and dtypes, its epilogue (~3 us here)."""
    return (operator, arch, _sig(a, b, out, *operands.values()), source)


def run_cutlass(operator: str, arch: str, a, b, out, epilogue_source: Optional[str], operands, stream, key=None) -> None:
    """``launch_cutlass`` past its device check.

    The operator, its compiled artifact and (without an epilogue) its arguments are built
    once per shape signature; later calls rebind the arguments to their tensors
    (``rebind_arguments``) instead of building them again. The first call also records how
    the operator calls its compiled function (:class:`DirectCall`); from the second call on,
    ptc calls that function itself with the call's tensors, skipping the arguments
    altogether, once that direct call's first result has matched :func:`reference` (else the
    direct call is dropped for these shapes and the arguments stay in use).
    """
    key = key or _key(operator, arch, a, b, out, epilogue_source, operands)
    direct = _direct.get(key)
    if direct is not None:
        if direct.checked:
            direct(a, b, out, operands, stream)
            return
        if _try_direct(key, direct, a, b, out, epilogue_source, operands, stream):
            return
    template = _templates.get(key)
    args = rebind_arguments(template, a, b, out) if template is not None else None
    if args is None:
        args = gemm_arguments(a, b, out, epilogue_source, operands)
    with _lock:
        op = _ops.get(key)
        if op is None:
            op = _ops[key] = find_operator(operator, arch, args)
        artifact = _artifacts.get(key)
        if artifact is None:
            artifact = _artifacts[key] = op.compile(args, target_sm=arch)
        if epilogue_source is None and not operands and key not in _templates:
            meta = torch.empty(0, device="meta")
            stripped = rebind_arguments(args, meta, meta, meta)  # keeps no tensor of this call alive
            if stripped is not None:
                _templates[key] = stripped
    workspace = None
    size = op.get_workspace_size(args).size_bytes
    if size:
        workspace = torch.empty(size, dtype=torch.int8, device=out.device)
        op.initialize_workspace(args, workspace)
    recorder = None
    if not size and key not in _direct and key not in _direct_refused and hasattr(artifact, "compiled_obj"):
        recorder = _Recorder(artifact)
    op.run(args, recorder.artifact if recorder else artifact, stream=stream, workspace=workspace,
           assume_supported_args=True)
    if recorder is not None:
        call = DirectCall.from_recorded(recorder, a, b, out, operands, stream)
        if call is None:
            _direct_refused[key] = "the compiled function takes an argument ptc cannot supply itself"
        else:
            _direct[key] = call


_direct: Dict[Tuple, "DirectCall"] = {}
_direct_refused: Dict[Tuple, str] = {}  # key -> why ptc does not call the compiled function itself


class _Recorder:
    """A copy of ``artifact`` whose compiled function records the arguments it is called with."""

    def __init__(self, artifact) -> None:
        import copy

        self.calls = []
        real = artifact.compiled_obj

        def recording(*args, **kwargs):
            self.calls.append((args, kwargs))
            return real(*args, **kwargs)

        self.real = real
        self.artifact = copy.copy(artifact)
        self.artifact.compiled_obj = recording


class DirectCall:
    """How an operator calls its compiled function, by role: each argument is one of the call's
    tensors (``a``, ``b``, ``out``, an epilogue operand, matched by identity), a CuTe pointer to
    one of them (matched by address: ``("ptr", name, make)``, ``make(address)`` builds the same
    kind of pointer to another address), its stream, or a constant (a number, a string, None, a
    tuple of those: ``("const", value)``). Calling it passes this call's tensors in those places."""

    _CONSTANTS = (int, float, bool, str, type(None))

    def __init__(self, fn, roles, kwroles) -> None:
        self.fn, self.roles, self.kwroles = fn, roles, kwroles
        self.checked = False

    @classmethod
    def from_recorded(cls, recorder: _Recorder, a, b, out, operands: dict, stream) -> "Optional[DirectCall]":
        """The roles of the one recorded call, or None (no call, several, or an argument that is
        none of the above: a workspace, a struct, a view the operator made)."""
        if len(recorder.calls) != 1:
            return None
        named = [("a", a), ("b", b), ("out", out), *((f"operand:{k}", v) for k, v in operands.items())]
        if stream is not None:
            named.append(("stream", stream))

        def role(x):
            for name, t in named:
                if x is t:
                    return name
            if isinstance(x, cls._CONSTANTS) or (
                isinstance(x, tuple) and all(isinstance(v, cls._CONSTANTS) for v in x)
            ):
                return ("const", x)
            pointer = _pointer_role(x, named)
            if pointer is None:
                raise LookupError
            return pointer

        args, kwargs = recorder.calls[0]
        try:
            return cls(recorder.real, [role(x) for x in args], {k: role(v) for k, v in kwargs.items()})
        except LookupError:
            return None

    def __call__(self, a, b, out, operands: dict, stream):
        have = {"a": a, "b": b, "out": out, "stream": stream, **{f"operand:{k}": v for k, v in operands.items()}}

        def value(r):
            if isinstance(r, str):
                return have[r]
            return r[1] if r[0] == "const" else r[2](have[r[1]].data_ptr())

        return self.fn(*[value(r) for r in self.roles], **{k: value(r) for k, r in self.kwroles.items()})


def _pointer_role(x, named) -> Optional[tuple]:
    """``("ptr", name, make)`` when ``x`` is a CuTe runtime pointer (``cute.runtime.make_ptr``) to
    exactly one of the ``named`` tensors and ``make`` rebuilds it exactly from its address; else None."""
    fields = ("_pointer", "_dtype", "_addr_space", "_assumed_align")
    try:
        address, dtype, space, align = (getattr(x, f) for f in fields)
    except AttributeError:
        return None
    owners = [n for n, t in named if isinstance(t, torch.Tensor) and t.data_ptr() == address]
    if not isinstance(address, int) or len(owners) != 1:
        return None

    def make(addr, _cls=type(x)):
        return _cls(addr, dtype, space, assumed_align=align)

    try:
        again = make(address)
    except Exception:  # noqa: BLE001 - not a pointer type ptc knows how to build
        return None
    if tuple(getattr(again, f) for f in fields) != (address, dtype, space, align):
        return None
    return ("ptr", owners[0], make)


def _try_direct(key, direct: DirectCall, a, b, out, source, operands, stream) -> bool:
    """The direct call's first run, checked against :func:`reference`; False (and the direct
    call dropped for ``key``) when it fails or disagrees: the caller then launches as before."""
    if out.is_cuda and torch.cuda.is_current_stream_capturing():
        return False  # its result cannot be read now: keep the arguments path until a later call
    try:
        direct(a, b, out, operands, stream)
        verdict = check_result(key[0], a, b, out, source, operands)
    except Exception as e:  # noqa: BLE001 - the arguments path still works
        verdict = f"{type(e).__name__}: {e}"
    if verdict:
        _direct.pop(key, None)
        _direct_refused[key] = verdict
        log.warning("ptc.gemm: calling %s's compiled function directly failed (%s); launching it "
                    "through its arguments instead", key[0], verdict)
        return False
    direct.checked = True
    return True


def gemm_arguments(a, b, out, epilogue_source: Optional[str] = None, operands: Optional[dict] = None):
    """``cutlass.operators.GemmArguments`` for these tensors, built from scratch (about 0.4 ms of
    host time per call in cutlass.operators 0.3.0: it derives a symbolic layout per tensor).
    With :data:`BLOCK_SCALES` operands, A and B are block-scaled operands (128 x 4 tiled scales)."""
    co = catalog.cutlass_operators_module()

    if operands and BLOCK_SCALES[0] in operands:
        from ptc.gemm.blockscale import block_of

        sa, sb = (operands[k] for k in BLOCK_SCALES)
        mode = co.ScaleMode.Blockwise1x32 if block_of(a.dtype, sa.dtype) == 32 else co.ScaleMode.Blockwise1x16
        tiled = co.ScaleSwizzleMode.Swizzle32x4x4
        return co.GemmArguments(
            A=co.ScaledOperand(a, sa, mode, tiled), B=co.ScaledOperand(b, sb, mode, tiled), out=out,
            accumulator_type=torch.float32,
        )
    epi = None
    if epilogue_source is not None:
        epi = co.EpilogueArguments(epilogue_source, D=out, **(operands or {}))
    return co.GemmArguments(A=a, B=b, out=out, accumulator_type=torch.float32, epilogue=epi)


def rebind_arguments(template, a, b, out):
    """``template`` (arguments built for tensors of the same shapes, strides and dtypes) with
    ``a``, ``b``, ``out`` in place of its tensors, in a few microseconds; None where that is not
    possible here (then build them from scratch).

    Valid because with TVM-FFI a ``TensorWrapper``'s runtime tensor *is* the torch tensor and
    its compile-time tensor is symbolic: only the runtime tensor and its address change. Every
    rebound wrapper is checked to hold exactly the new tensor, so a change in the package's
    internals makes this return None instead of launching on stale addresses."""
    import copy

    new = copy.copy(template)
    for name, t in (("A", a), ("B", b), ("out", out)):
        dense = getattr(template, name, None)
        wrapper = getattr(dense, "tensor", None)
        if wrapper is None or getattr(wrapper, "_runtime_tensor", None) is None or not hasattr(wrapper, "_data_ptr"):
            return None
        if not isinstance(wrapper._runtime_tensor, torch.Tensor):  # not the TVM-FFI path
            return None
        wrapper = copy.copy(wrapper)
        wrapper._runtime_tensor = t
        wrapper._data_ptr = t.data_ptr()
        dense = copy.copy(dense)
        dense.tensor = wrapper
        setattr(new, name, dense)
        rebound = getattr(new, name).tensor
        if rebound.runtime_tensor is not t or rebound.data_ptr != t.data_ptr():
            return None
    return new


_launcher: Callable = launch_cutlass

#: a checked element passes when ``|out - ref| <= RTOL * |ref| + ATOL * max|ref|``: RTOL is 4x a
#: bf16 rounding (fp16 and fp32 outputs round finer), ATOL covers values that cancel to near zero
RTOL, ATOL = 2.0**-6, 2.0**-10

_EVT_FUNCTIONS = {
    "relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
    "max": lambda x, dim: x.amax(dim=dim, keepdim=True), "min": lambda x, dim: x.amin(dim=dim, keepdim=True),
}


def reference(a, b, source: Optional[str], operands: dict) -> torch.Tensor:
    """What a kernel computes by definition, in fp32: ``a @ b`` (batched for 3-D operands), then
    the EVT function ``source`` (``def epilogue(accum, ...)``) run on it with ``operands``.
    With :data:`BLOCK_SCALES` operands, ``a`` and ``b`` are dequantized first
    (:func:`ptc.gemm.blockscale.dequantize`)."""
    if BLOCK_SCALES[0] in operands:
        from ptc.gemm.blockscale import dequantize

        sa, sb = (operands[k] for k in BLOCK_SCALES)
        return dequantize(a, sa) @ dequantize(b.t(), sb).t()
    acc = torch.matmul(a.float(), b.float())
    if source is None:
        return acc
    scope: dict = dict(_EVT_FUNCTIONS)
    exec(compile(source, "<ptc epilogue>", "exec"), scope)  # noqa: S102 - ptc's own generated source
    d = scope["epilogue"](acc, **{k: v.float() for k, v in operands.items()})
    return d[0] if isinstance(d, tuple) else d


def check_result(operator: str, a, b, out, source: Optional[str], operands: dict) -> str:
    """"" when ``out`` (what ``operator`` wrote) matches :func:`reference`, else why not."""
    want = reference(a, b, source, operands)
    got = out.float()
    if got.shape != want.shape:
        return f"{operator} wrote shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    scale = float(want.abs().max()) if want.numel() else 0.0
    bad = ~((got - want).abs() <= RTOL * want.abs() + ATOL * scale) | (got.isnan() & ~want.isnan())
    if not bool(bad.any()):
        return ""
    i = int(bad.reshape(-1).nonzero()[0])
    return (f"{operator} disagrees with {_what(source, operands)} at {int(bad.sum())} of "
            f"{bad.numel()} elements (first at flat index {i}: {got.reshape(-1)[i].item():.6g} vs "
            f"{want.reshape(-1)[i].item():.6g}); refused for these shapes")


def _what(source: Optional[str], operands: dict) -> str:
    if BLOCK_SCALES[0] in operands:
        return "dequantize(a) @ dequantize(b)"
    return "epilogue(a @ b)" if source else "a @ b"


def _launch(operator: str, arch: str, a, b, out, source: Optional[str], operands: dict) -> None:
    """``_launcher`` for one call; the first call per kernel, shapes and epilogue is checked."""
    key = _key(operator, arch, a, b, out, source, operands)
    verdict = _verdicts.get(key)
    if verdict:
        raise WrongResult(verdict)
    if _launcher is launch_cutlass:  # the key once per call, not twice
        launch_cutlass(operator, arch, a, b, out, source, operands, key)
    else:
        _launcher(operator, arch, a, b, out, source, operands)
    if verdict is not None:
        return
    if out.is_cuda and torch.cuda.is_current_stream_capturing():
        return  # a graph capture cannot read results: checked at the next call outside one
    verdict = check_result(operator, a, b, out, source, operands)
    _verdicts[key] = verdict
    if verdict:
        log.warning("ptc.gemm: %s", verdict)
        raise WrongResult(verdict)


def _require_epilogue(source: Optional[str], operands: dict, what: str) -> None:
    """A kernel without its epilogue would drop ``operands`` and return a wrong result."""
    if source is None and operands:
        raise PtcValueError(
            f"{what}: operands {sorted(operands)} need an epilogue, but source is None "
            "(the plan did not fuse it: ptc.gemm.plan(...).fusion.reason says why)"
        )


@contextlib.contextmanager
def launcher(fn: Callable):
    """Route ptc kernel launches to ``fn(operator, arch, a, b, out, epilogue_source, operands)``
    inside the block (for tracing calls, or for exercising the dispatch on CPU). ``fn`` must
    write ``out``: its first result per kernel and shapes is checked like a real launch's,
    with verdicts of its own (dropped at the block's end)."""
    global _launcher, _verdicts
    old, _launcher = _launcher, fn
    old_verdicts, _verdicts = _verdicts, {}  # a verdict is about what this launcher ran
    try:
        yield
    finally:
        _launcher, _verdicts = old, old_verdicts


def ptc_nvgemm_mm(a, b, *, out, operator: str, arch: str):
    """``out = a @ b`` with CuTeDSL operator ``operator`` (an Inductor extern kernel)."""
    _launch(operator, arch, a, b, out, None, {})
    return out


def ptc_nvgemm_bmm(a, b, *, out, operator: str, arch: str):
    """``out = torch.bmm(a, b)`` with CuTeDSL operator ``operator``."""
    _launch(operator, arch, a, b, out, None, {})
    return out


def ptc_nvgemm_addmm(bias, a, b, *, out, operator: str, arch: str, source: str, name: str):
    """``out = bias + a @ b`` (alpha = beta = 1) with the add fused into an EFC epilogue.

    ``name`` is ``"bias"`` for a row-broadcast bias (an (N,) tensor, or Inductor's
    expanded (M, N) view with stride 0 along M, passed as its row) and
    ``"residual"`` for a full (M, N) input.
    """
    if name == "bias" and bias.dim() == 2:
        bias = bias[0]
    _require_epilogue(source, {name: bias}, "ptc_nvgemm_addmm")
    _launch(operator, arch, a, b, out, source, {name: bias})
    return out


def ptc_reference_mm(a, b, *operands, out):
    """``out = a @ b`` with ATen, ignoring ``operands``: the timing reference a fused
    candidate must beat (the GEMM alone, without its epilogue)."""
    return torch.mm(a, b, out=out)


def ptc_nvgemm_fused(a, b, *operands, out, operator: str, arch: str, source: str, names: str):
    """``out = epilogue(a @ b)`` with the epilogue (EVT ``source``) fused into CuTeDSL
    EFC operator ``operator``; ``names`` lists the operands' EVT names, comma-separated."""
    keys = [n for n in names.split(",") if n]
    ops = {}
    for k, t in zip(keys, operands):
        ops[k] = t
    _require_epilogue(source, ops, "ptc_nvgemm_fused")
    _launch(operator, arch, a, b, out, source, ops)
    return out


def ptc_nvgemm_scaled_mm(a, b, scale_a, scale_b, *bias, out, operator: str, arch: str, source: str, names: str):
    """``out = (a @ b) * scale_a * scale_b (+ bias)`` for FP8 ``a``/``b``: the dequantisation
    (and bias) fused into an EFC epilogue.

    Scales are float32, per tensor (one element each) or per row/column
    (``scale_a`` (M, 1), ``scale_b`` (1, N)); they are passed as the (M, 1)
    column-major and (N,) operands the epilogue reads.
    """
    m, n = out.shape
    if scale_a.numel() == 1:
        scale_a = scale_a.reshape(1, 1).expand(m, 1)
    col = torch.empty_strided((m, 1), (1, m), dtype=torch.float32, device=out.device)
    col.copy_(scale_a.reshape(m, 1))
    row = scale_b.reshape(-1).expand(n).contiguous() if scale_b.numel() == 1 else scale_b.reshape(n)
    ops = {"scale_a": col, "scale_b": row}
    if bias:
        ops["bias"] = bias[0]
    keys = [k for k in names.split(",") if k]
    _require_epilogue(source, {k: ops[k] for k in keys}, "ptc_nvgemm_scaled_mm")
    _launch(operator, arch, a, b, out, source, {k: ops[k] for k in keys})
    return out


def ptc_nvgemm_block_scaled_mm(a, b, scale_a, scale_b, *, out, operator: str, arch: str):
    """``out = torch._scaled_mm(a, b, scale_a, scale_b)`` for MXFP8 or NVFP4 ``a``/``b`` with
    block scales in the 128 x 4 tiled layout, on Blackwell's block-scaled MMA (the layouts and
    the meaning are in :mod:`ptc.gemm.blockscale`). The kernels read scales at 32-byte aligned
    addresses: a scale tensor that starts elsewhere (a view into a larger buffer) is copied first."""
    scales = [s if s.data_ptr() % SCALE_ALIGN == 0 else s.clone() for s in (scale_a, scale_b)]
    _launch(operator, arch, a, b, out, None, dict(zip(BLOCK_SCALES, scales)))
    return out
