"""Feature probes for the torch ptc runs on: the one place that knows versions differ.

Every probe is a small function that looks for a *feature* (an attribute, a
parameter, a module that imports) and never at ``torch.__version__``.  The
module attribute of the same name in upper case is the probe's cached boolean::

    from ptc import _compat
    if _compat.NATIVE_RECONFIGURE:      # torch.distributed._reconfigure exists
        ...

Probes run lazily on first access (``import cutlass`` or CUDA initialisation
cost real time) and are cached for the life of the process.  ``probes()``
lists them all with their docstrings; ``ptc env`` prints that list.

Code elsewhere in ptc must take version differences from here, never from a
version string.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import inspect
import logging
import sys
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple

import torch

__all__ = ["Probe", "probes", "probe_values"]


class Probe(NamedTuple):
    name: str
    doc: str
    check: Callable[[], bool]


_PROBES: Dict[str, Probe] = {}


def _probe(fn: Callable[[], bool]) -> Callable[[], bool]:
    """Register ``fn`` as the probe named ``fn.__name__.upper()``."""
    name = fn.__name__.upper()
    doc = inspect.cleandoc(fn.__doc__ or "").splitlines()[0]
    cached = functools.cache(fn)
    _PROBES[name] = Probe(name, doc, cached)
    return cached


@contextlib.contextmanager
def excepthook_kept() -> Iterator[None]:
    """Put ``sys.excepthook`` back after the block. Importing ``cutlass`` (CUTLASS's DSL)
    replaces it with a hook that cuts frames out of every uncaught exception's traceback, the
    user's own included; ptc imports it (and finds submodules, which imports the package)
    inside this."""
    hook = sys.excepthook
    try:
        yield
    finally:
        sys.excepthook = hook


def _module_exists(name: str) -> bool:
    try:
        with excepthook_kept():  # finding a submodule imports its package
            return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package is missing or broken
        return False


def _imports(name: str) -> bool:
    try:
        with excepthook_kept():
            importlib.import_module(name)
    except Exception:  # noqa: BLE001 - any failure means "not importable here"
        return False
    return True


def _accepts(fn: Callable, parameter: str) -> bool:
    try:
        return parameter in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


# --- tracing -----------------------------------------------------------------


def is_tracing(value: Any = None) -> bool:
    """Whether the code running now is being traced rather than run on real values.

    True while Dynamo compiles it (``torch.compile``, ``torch.export``), while a
    torch dispatch mode is active (make_fx's proxy mode, ``FakeTensorMode``,
    functionalization), or when ``value`` is a ``FakeTensor``. Dynamo never
    compiles this function's own frame (see :func:`skip_frame`): callers that
    Dynamo runs as plain Python may call it.
    """
    if torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() > 0:
        return True
    return isinstance(value, torch._subclasses.fake_tensor.FakeTensor)


def unwrap_functorch(t: Any) -> Tuple[Any, bool]:
    """``(inner, batched)``: ``t`` under its ``torch.func`` wrappers (vmap and grad
    levels, outermost first) and whether one of them is a vmap batch. Unwrapping
    stops at the first batched level, which ``inner`` then is."""
    functorch = torch._C._functorch
    while functorch.is_functorch_wrapped_tensor(t):
        if functorch.is_batchedtensor(t):
            return t, True
        t = functorch.get_unwrapped(t)
    return t, False


# --- control flow -----------------------------------------------------------


@_probe
def native_switch_hop() -> bool:
    """torch ships the prototype N-way switch HOP (torch._higher_order_ops.switch)."""
    if not _module_exists("torch._higher_order_ops.switch"):
        return False
    mod = importlib.import_module("torch._higher_order_ops.switch")
    return hasattr(mod, "switch")


def dynamo_reads_scalars() -> bool:
    """Whether the Dynamo trace running now may read a tensor's value into an unbacked
    ``SymInt`` with ``Tensor.item()`` in the graph it builds, rather than break the graph.

    True under ``fullgraph=True``, strict ``torch.export`` and
    ``capture_scalar_outputs``, at the outermost level of the trace: not inside a
    higher-order op's body (a ``torch.cond`` branch, a ``torch.func`` transform),
    where an unbacked symbol cannot leave the body, and not for a backend that says
    it wants predicates on the device (``ptc_device_predicates = True``, as
    ``ptc.cudagraph``'s: it captures them in CUDA graphs). Dynamo calls this for real
    (see :func:`ptc.control_flow.switch`); False wherever it cannot tell.
    """
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator
        from torch._guards import TracingContext

        context = TracingContext.try_get()
        tx = InstructionTranslator.current_tx()
        if context is None or tx is None or context.fake_mode is None or context.fake_mode.shape_env is None:
            return False
        if tx.output.current_tracer.parent is not None:  # inside a higher-order op's body
            return False
        if torch._C._functorch.peek_interpreter_stack() is not None:  # vmap / grad levels active
            return False
        if getattr(_dynamo_backend(tx.output.compiler_fn), "ptc_device_predicates", False):
            return False  # the backend captures tensor predicates (ptc.cudagraph's conditional nodes)
        return bool(context.fake_mode.shape_env.allow_scalar_outputs)
    except Exception:  # noqa: BLE001 - an internal API that moved: fall back to the tensor predicates
        return False


def _dynamo_backend(fn: Any) -> Any:
    """The backend the user gave ``torch.compile``, from Dynamo's wrappers around it."""
    for _ in range(8):
        inner = getattr(fn, "_torchdynamo_orig_backend", None) or getattr(fn, "compiler_fn", None)
        if inner is None or inner is fn:
            break
        fn = inner
    return fn


def has_unbacked_symbols(value: Any) -> bool:
    """``value`` is a ``SymInt``, ``SymBool`` or ``SymFloat`` with a data-dependent (unbacked)
    symbol in it: a number read from a tensor's value (``Tensor.item()``) or computed from one."""
    if not isinstance(value, (torch.SymInt, torch.SymBool, torch.SymFloat)):
        return False
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    return bool(free_unbacked_symbols(value))


def native_switch_op():
    """torch's prototype switch HOP (``torch.ops.higher_order.switch``), or None."""
    if not native_switch_hop():
        return None
    return importlib.import_module("torch._higher_order_ops.switch").switch_op


def skip_frame(code) -> None:
    """Make Dynamo run frames of ``code`` as plain Python while still compiling
    the frames they call (how ptc checks arguments outside a compiled graph)."""
    from torch._dynamo.eval_frame import skip_code

    skip_code(code)


skip_frame(is_tracing.__code__)  # a helper, not user code: never a frame of its own to compile


def dynamo_callback_getter():
    """A C function returning Dynamo's installed frame callback (None when nothing
    compiles). A builtin, so calling it from a skipped frame creates no frame
    that Dynamo would try to compile."""
    from torch._C._dynamo import eval_frame

    return eval_frame.get_eval_frame_callback


def dynamo_callback_setter():
    """The C function that installs Dynamo's frame callback (returns the one it replaces):
    a builtin, callable from a skipped frame as :func:`dynamo_callback_getter`."""
    from torch._C._dynamo import eval_frame

    return eval_frame.set_eval_frame


@torch.compiler.assume_constant_result
def dynamo_may_break_graph() -> bool:
    """Whether the Dynamo trace running now may end its graph at the current call
    and run that call in Python (a graph break).

    False outside Dynamo and wherever Dynamo may not break the graph there:
    ``fullgraph=True``, ``error_on_graph_break``, ``torch.export``, inside a
    higher-order op's body, a ``try`` block or a context manager Dynamo cannot
    resume. Dynamo runs this once while it traces (``assume_constant_result``)
    and bakes the answer into that trace. It asks the tracer itself
    (``InstructionTranslator.current_tx().should_compile_partial_graph()``);
    where this torch lacks that, the answer is False.
    """
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator
        from torch._dynamo.utils import _get_error_on_graph_break

        tx = InstructionTranslator.current_tx()
        return bool(
            tx is not None
            and not tx.one_graph
            and not _get_error_on_graph_break()
            and tx.should_compile_partial_graph()
        )
    except (ImportError, AttributeError):  # not tracing (no current tx), or another tracer API
        return False


@_probe
def compile_source_lists() -> bool:
    """torch.compile takes lists of sources to make dynamic or unbacked (torch.compiler.config.dynamic_sources, unbacked_sources)."""
    config = torch.compiler.config
    return hasattr(config, "dynamic_sources") and hasattr(config, "unbacked_sources")


class _SourceLists:
    """Appends entries to ``torch.compiler.config`` source lists on enter, puts the old values back on exit."""

    def __init__(self, changes) -> None:
        self.changes = changes  # {config name: entries to append}
        self.prior = {}

    def __enter__(self) -> None:
        config = torch.compiler.config
        for name, extra in self.changes.items():
            self.prior[name] = old = getattr(config, name)
            setattr(config, name, ",".join(([old] if old else []) + list(extra)))

    def __exit__(self, *exc) -> None:
        config = torch.compiler.config
        for name, old in self.prior.items():
            setattr(config, name, old)
        self.prior = {}


def symbolic_int_sources(*, dynamic=(), unbacked=()):
    """A context in which Dynamo makes the ints at the given sources (regexes of
    source names such as ``L\\['n'\\]$``) backed-dynamic or unbacked symbols from
    the first compile, appended to whatever ``torch.compiler.config`` lists
    already hold and restored on exit. A no-op without sources, or where torch
    has no such lists (those ints then follow torch's automatic dynamic)."""
    import contextlib

    changes = {name: list(extra) for name, extra in (("dynamic_sources", dynamic), ("unbacked_sources", unbacked)) if extra}
    if not changes or not compile_source_lists():
        return contextlib.nullcontext()
    return _SourceLists(changes)


def size_oblivious_tracing():
    """A context in which tracers treat backed sizes without assuming they are >= 2
    (torch.fx.experimental._config.backed_size_oblivious), so an exported program
    accepts sizes 0 and 1 when its ranges do."""
    import contextlib

    import torch.fx.experimental._config as fx_config

    if not hasattr(fx_config, "backed_size_oblivious"):
        return contextlib.nullcontext()
    return fx_config.patch(backed_size_oblivious=True)


# --- shape specs ------------------------------------------------------------


@_probe
def mark_dynamic_specialize_on() -> bool:
    """mark_dynamic takes specialize_on= (one Dynamo trace, one backend compile per predicate a call matches)."""
    return _accepts(torch._dynamo.mark_dynamic, "specialize_on")


@_probe
def shape_guard_stacks() -> bool:
    """ShapeEnv reports each guard it adds, with the Python and user stacks, as a structured trace event."""
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    try:
        return "guard_added_fast" in inspect.getsource(ShapeEnv._log_guard)
    except (AttributeError, OSError, TypeError):
        return False


@contextlib.contextmanager
def guard_stacks():
    """A context collecting each shape guard torch adds while it is active.

    It yields a list that fills with ``(guard text, frames)`` pairs, ``frames``
    being ``(filename, lineno, function, line)`` tuples, innermost last: the
    user code Dynamo was tracing where Dynamo traces, else the Python stack.
    The list stays empty where :func:`shape_guard_stacks` is False. It listens
    to torch's structured trace log (``torch.__trace``), which makes torch
    format all its structured events while it is active: a slow path.
    """
    events: list = []
    if not _PROBES["SHAPE_GUARD_STACKS"].check():
        yield events
        return
    from torch._logging import structured

    class Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            meta = getattr(record, "metadata", None)
            event = meta.get("guard_added_fast") if isinstance(meta, dict) else None
            if event is None:
                return
            names = {i: name for name, i in structured.INTERN_TABLE.items()}
            frames = event.get("user_stack") or event.get("stack") or []
            events.append((event.get("expr"), [
                (names.get(f["filename"], str(f["filename"])), f["line"], f["name"], f.get("loc") or "")
                for f in frames
            ]))

    logger = logging.getLogger("torch.__trace")
    handler, level = Handler(logging.DEBUG), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield events
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@_probe
def native_shapes_spec() -> bool:
    """torch has the declarative spec types (torch.fx.experimental.dynamic_spec.ShapesSpec)."""
    if not _module_exists("torch.fx.experimental.dynamic_spec"):
        return False
    mod = importlib.import_module("torch.fx.experimental.dynamic_spec")
    return hasattr(mod, "ShapesSpec")


@_probe
def native_dynamic_spec_decorator() -> bool:
    """torch has the @dynamic_spec decorator (torch.fx.experimental.dynamic_spec.dynamic_spec)."""
    if not native_shapes_spec():
        return False
    mod = importlib.import_module("torch.fx.experimental.dynamic_spec")
    return callable(getattr(mod, "dynamic_spec", None))


@_probe
def native_dynamic_spec_export() -> bool:
    """torch.export.export and make_fx accept a ShapesSpec as dynamic_shapes."""
    from torch.fx.experimental.proxy_tensor import make_fx

    if not native_shapes_spec():
        return False
    mod = importlib.import_module("torch.fx.experimental.dynamic_spec")
    return hasattr(mod, "_resolve_dynamic_shapes") and _accepts(make_fx, "dynamic_shapes")


@_probe
def compile_shapes_spec_kwarg() -> bool:
    """torch.compile takes the spec as `shapes_spec=` (the older spelling)."""
    return _accepts(torch.compile, "shapes_spec")


@_probe
def compile_dynamic_shapes_kwarg() -> bool:
    """torch.compile takes the spec as `dynamic_shapes=` (the newer spelling)."""
    return _accepts(torch.compile, "dynamic_shapes")


# --- CUDA and CUDA graphs ---------------------------------------------------


@_probe
def cuda_build() -> bool:
    """this torch binary was built with CUDA (torch.version.cuda is set)."""
    return torch.version.cuda is not None


@_probe
def onednn_linear() -> bool:
    """this torch has oneDNN's real GEMM as an op on dense tensors (torch.ops.mkldnn._linear_pointwise)."""
    return bool(torch.backends.mkldnn.is_available()) and hasattr(torch.ops.mkldnn, "_linear_pointwise")


@_probe
def cuda_available() -> bool:
    """a CUDA device can be used now (torch.cuda.is_available())."""
    return bool(torch.cuda.is_available())


@_probe
def cuda_graph_if_nodes() -> bool:
    """torch.cuda.CUDAGraph can capture into IF conditional nodes."""
    return hasattr(torch.cuda.CUDAGraph, "begin_capture_to_if_node")


@_probe
def cuda_graph_while_nodes() -> bool:
    """torch.cuda.CUDAGraph can capture into WHILE conditional nodes."""
    return hasattr(torch.cuda.CUDAGraph, "begin_capture_to_while_node")


@_probe
def cuda_thread_pool_routing() -> bool:
    """the caching allocator can route one thread's allocations to a graph pool (torch._C._cuda_beginAllocateCurrentThreadToPool)."""
    return all(hasattr(torch._C, n) for n in (
        "_cuda_beginAllocateCurrentThreadToPool", "_cuda_endAllocateToPool", "_cuda_releasePool"))


def begin_thread_pool_routing(device: int, pool) -> None:
    """Route this thread's CUDA allocations on ``device`` to graph pool ``pool`` (needs :func:`cuda_thread_pool_routing`)."""
    torch._C._cuda_beginAllocateCurrentThreadToPool(device, pool)


def end_pool_routing(device: int, pool) -> None:
    """Stop routing allocations on ``device`` to graph pool ``pool`` (needs :func:`cuda_thread_pool_routing`)."""
    torch._C._cuda_endAllocateToPool(device, pool)


def release_graph_pool(device: int, pool) -> None:
    """Give graph pool ``pool`` on ``device`` back to the allocator (needs :func:`cuda_thread_pool_routing`)."""
    torch._C._cuda_releasePool(device, pool)


@_probe
def cuda_python_bindings() -> bool:
    """cuda-python's low-level bindings (cuda.bindings) import."""
    return _module_exists("cuda") and _imports("cuda.bindings.driver")


# --- complex ----------------------------------------------------------------


@_probe
def native_complex_wrapper() -> bool:
    """AOTAutograd has the opt-in complex wrapper (torch._functorch.config.enable_complex_wrapper)."""
    import torch._functorch.config as functorch_config

    return hasattr(functorch_config, "enable_complex_wrapper")


def aten_overloads(*names: str) -> List["torch._ops.OpOverload"]:
    """The ATen overloads named ``"packet.overload"`` (``"add.Tensor"``; a bare ``"neg"``
    is its ``default``) that this torch has, in order; the others are left out
    (some exist in one release only)."""
    aten = torch.ops.aten
    found = []
    for name in names:
        packet, _, overload = name.partition(".")
        pk = getattr(aten, packet, None)
        if pk is None:
            continue
        op = getattr(pk, overload or "default", None)
        if op is not None:
            found.append(op)
    return found


@_probe
def inductor_cpp_vec_bitcast() -> bool:
    """Inductor's C++ vector codegen has a to_dtype_bitcast override and per-dtype vector counts ptc can scope."""
    try:
        from torch._inductor.codegen import cpp as cpp_codegen
    except Exception:  # noqa: BLE001 - no C++ backend here
        return False
    return (
        hasattr(cpp_codegen, "CppVecOverrides")
        and hasattr(cpp_codegen.CppVecOverrides, "to_dtype_bitcast")
        and hasattr(getattr(cpp_codegen, "CppVecKernel", None), "_get_num_vectors")
        and hasattr(cpp_codegen, "CppCSEVariable")
        and isinstance(getattr(cpp_codegen, "DTYPE_TO_CPP", None), dict)
    )


@_probe
def inductor_cpp_vec_load_line() -> bool:
    """Inductor's C++ vector kernels write each load in one method (_get_vec_load_line) ptc can scope."""
    try:
        from torch._inductor.codegen import cpp as cpp_codegen
    except Exception:  # noqa: BLE001 - no C++ backend here
        return False
    kernel = getattr(cpp_codegen, "CppVecKernel", None)
    method = getattr(kernel, "_get_vec_load_line", None)
    if method is None or not hasattr(kernel, "_get_num_vectors") or not hasattr(cpp_codegen, "cexpr_index"):
        return False
    params = list(inspect.signature(method).parameters)
    init = inspect.getsource(kernel.__init__)
    return params == ["self", "var", "index", "dtype", "load_mask"] and all(
        f"self.{name} =" in init for name in ("num_elems", "vec_isa")
    )


def _x86_vec_kernels(cpu_vec_isa, kernel) -> bool:
    """Inductor has its AVX2 and AVX-512 ISA classes, and each vector kernel names its ISA (``self.vec_isa``)."""
    return (
        hasattr(cpu_vec_isa, "VecAVX2")
        and hasattr(cpu_vec_isa, "VecAVX512")
        and "self.vec_isa =" in inspect.getsource(kernel.__init__)
    )


@_probe
def inductor_cpp_vec_math() -> bool:
    """Inductor's C++ vector sin/cos/hypot are staticmethods of CppVecOverrides, its kernels name their vector ISA."""
    try:
        from torch._inductor import cpu_vec_isa
        from torch._inductor.codegen import cpp as cpp_codegen
    except Exception:  # noqa: BLE001 - no C++ backend here
        return False
    overrides = getattr(cpp_codegen, "CppVecOverrides", None)
    kernel = getattr(cpp_codegen, "CppVecKernel", None)
    if overrides is None or kernel is None or not hasattr(kernel, "_get_num_vectors"):
        return False
    methods = [overrides.__dict__.get(name) for name in ("sin", "cos", "hypot")]
    return (
        all(isinstance(m, staticmethod) for m in methods)
        and callable(getattr(cpu_vec_isa, "pick_vec_isa", None))
        and _x86_vec_kernels(cpu_vec_isa, kernel)
    )


@_probe
def inductor_cpp_vec_narrowing() -> bool:
    """Inductor's C++ vector kernels write dtype conversions in one method and right shifts in a staticmethod.

    Also: its CSE looks a variable up by expression (``try_get``), and its kernels name their vector ISA.
    """
    try:
        from torch._inductor import cpu_vec_isa
        from torch._inductor.codegen import common
        from torch._inductor.codegen import cpp as cpp_codegen
    except Exception:  # noqa: BLE001 - no C++ backend here
        return False
    overrides = getattr(cpp_codegen, "CppVecOverrides", None)
    kernel = getattr(cpp_codegen, "CppVecKernel", None)
    method = getattr(kernel, "get_to_dtype_expr", None)
    if overrides is None or method is None or not hasattr(kernel, "_get_num_vectors"):
        return False
    return (
        list(inspect.signature(method).parameters) == ["self", "src", "dtype", "src_dtype", "rounding"]
        and isinstance(overrides.__dict__.get("bitwise_right_shift"), staticmethod)
        and callable(getattr(getattr(common, "CSE", None), "try_get", None))
        and _x86_vec_kernels(cpu_vec_isa, kernel)
    )


@_probe
def inductor_realize_on_reuse() -> bool:
    """Inductor asks ``StorageBox.should_realize_on_reuse(users, *, graph_reuse)`` whether to store a reused value.

    Also: the value's ``inner_fn_opcount().used_ops`` names its ops, and ``ir.is_cpu`` tells its device.
    """
    try:
        from torch._inductor import ir
    except Exception:  # noqa: BLE001 - no Inductor here
        return False
    box = getattr(ir, "StorageBox", None)
    method = None if box is None else box.__dict__.get("should_realize_on_reuse")
    pointwise = getattr(ir, "Pointwise", None)
    if not callable(method) or pointwise is None or not callable(getattr(ir, "is_cpu", None)):
        return False
    params = inspect.signature(method).parameters
    return (
        list(params) == ["self", "users", "graph_reuse"]
        and params["graph_reuse"].kind is inspect.Parameter.KEYWORD_ONLY
        and callable(getattr(pointwise, "inner_fn_opcount", None))
        and "used_ops" in inspect.getsource(method)
    )


@_probe
def inductor_custom_pass_lists() -> bool:
    """Inductor takes a list of CustomGraphPass objects as its post-grad pass, each one's uuid in its cache key."""
    try:
        from torch._inductor import config as inductor_config
        from torch._inductor import custom_graph_pass
    except Exception:  # noqa: BLE001 - no Inductor here
        return False
    return (
        hasattr(custom_graph_pass, "CustomPassBase")
        and hasattr(custom_graph_pass, "get_custom_graph_passes")
        and hasattr(inductor_config, "post_grad_custom_post_pass")
    )


# --- GEMM -------------------------------------------------------------------


@_probe
def cutlass_dsl() -> bool:
    """CUTLASS's Python DSL imports (`import cutlass.cute`, from nvidia-cutlass-dsl)."""
    return _module_exists("cutlass") and _imports("cutlass.cute")


@_probe
def cutlass_operators() -> bool:
    """cutlass.operators (nvidia-cutlass-operators) is installed."""
    return _module_exists("cutlass") and _module_exists("cutlass.operators")


@_probe
def native_nvgemm() -> bool:
    """Inductor's own NVGEMM backend is usable with the installed packages."""
    from torch._inductor import utils as inductor_utils

    check = getattr(inductor_utils, "ensure_nv_universal_gemm_available", None)
    if check is None:
        return False
    try:
        return bool(check())
    except Exception:  # noqa: BLE001 - a broken optional package means "no"
        return False


@_probe
def inductor_choice_preprocessing() -> bool:
    """Inductor runs registered functions on each autotune choice list (select_algorithm.add_preprocessing_fn)."""
    from torch._inductor import select_algorithm

    return hasattr(select_algorithm, "add_preprocessing_fn") and hasattr(select_algorithm, "add_feedback_saver")


@_probe
def inductor_pre_grad_custom_pass() -> bool:
    """Inductor runs a user pass on the pre-grad graph (config.pre_grad_custom_pass)."""
    import torch._inductor.config as inductor_config

    return hasattr(inductor_config, "pre_grad_custom_pass")


@_probe
def native_nvgemm_epilogue_fusion() -> bool:
    """Inductor's NVGEMM fuses epilogues (nv_universal_gemm scheduling has the EFC capability check)."""
    name = "torch._inductor.codegen.nv_universal_gemm.nv_universal_gemm_scheduling"
    if not _module_exists(name):
        return False
    mod = importlib.import_module(name)
    cls = getattr(mod, "NVUniversalGemmScheduling", None)
    return cls is not None and hasattr(cls, "_can_fuse_epilogue_impl")


@_probe
def inductor_choices_hook() -> bool:
    """Inductor lets a library replace its choice heuristics (config.inductor_choices_class)."""
    import torch._inductor.config as inductor_config

    return hasattr(inductor_config, "inductor_choices_class")


@_probe
def fp4_dtype() -> bool:
    """torch has the packed FP4 dtype NVFP4 GEMMs take (torch.float4_e2m1fn_x2)."""
    return torch_dtype("float4_e2m1fn_x2") is not None


def torch_dtype(name: str) -> Optional[torch.dtype]:
    """The torch dtype called ``name`` (``"float8_e8m0fnu"``), or None where this torch has none."""
    dtype = getattr(torch, name, None)
    return dtype if isinstance(dtype, torch.dtype) else None


@_probe
def inductor_extern_kernel_registry() -> bool:
    """Inductor keeps its extern kernel choices by name (select_algorithm.ExternKernelChoice._registry)."""
    from torch._inductor.select_algorithm import ExternKernelChoice

    return isinstance(getattr(ExternKernelChoice, "_registry", None), dict)


def inductor_extern_kernel(name: str):
    """Inductor's ``ExternKernelChoice`` registered as ``name``, or None (also where
    Inductor keeps no registry: :func:`inductor_extern_kernel_registry`)."""
    from torch._inductor.select_algorithm import ExternKernelChoice

    registry = getattr(ExternKernelChoice, "_registry", None)
    return None if registry is None else registry.get(name)


def inductor_unaligned_buffers():
    """The names of the graph inputs Inductor found unaligned in the graph it lowers
    now (``V.graph.unaligned_buffers``); empty where it keeps no such list."""
    from torch._inductor.virtualized import V

    return getattr(V.graph, "unaligned_buffers", ())


def inductor_current_target():
    """The target of the FX node Inductor lowers now (``V.graph.current_node``), or None."""
    from torch._inductor.virtualized import V

    return getattr(getattr(V.graph, "current_node", None), "target", None)


class _RestoreChoices:
    def __init__(self, V, prior) -> None:
        self.V, self.prior = V, prior

    def __exit__(self, *exc) -> None:
        self.V.set_choices_handler(self.prior)


def install_choices_handler(handler):
    """Make ``handler`` this thread's Inductor choices handler (``V.set_choices_handler``) now.

    Returns a context whose ``__exit__`` puts the previous handler back: the one
    ``set_choices_handler`` returns where it returns a context manager (entered
    here), else one of ptc's own."""
    from torch._inductor.virtualized import V

    prior = V.choices
    ctx = V.set_choices_handler(handler)
    if hasattr(ctx, "__enter__"):
        ctx.__enter__()  # the handler is already set; exiting restores the prior one
        return ctx
    return _RestoreChoices(V, prior)


# --- distributed ------------------------------------------------------------


@_probe
def distributed() -> bool:
    """torch.distributed is built in (c10d, gloo)."""
    return bool(torch.distributed.is_available())


@_probe
def native_reconfigure() -> bool:
    """process groups can be reconfigured in place (torch.distributed._reconfigure)."""
    return distributed() and hasattr(torch.distributed, "_reconfigure")


@_probe
def gloo_reconfigure() -> bool:
    """gloo process groups can be created unconnected and reconfigured (ProcessGroupGloo.reconfigure)."""
    if not distributed():
        return False
    from torch._C._distributed_c10d import ProcessGroupGloo

    return hasattr(ProcessGroupGloo, "reconfigure") and hasattr(ProcessGroupGloo, "get_reconfigure_handle")


def gloo_process_group(store, rank: int, size: int, timeout, *, reconfigurable: bool = False):
    """A ``ProcessGroup`` with one gloo backend, built without touching c10d's
    registry of groups (so it is never the default group and ``new_group``
    counters are untouched).

    ``reconfigurable=True`` (needs :func:`gloo_reconfigure`) creates it
    unconnected: it must be ``reconfigure``d before its first collective.
    Otherwise it connects to its ``size - 1`` peers through ``store`` now.
    """
    from torch._C._distributed_c10d import ProcessGroup, ProcessGroupGloo

    if reconfigurable:
        backend = ProcessGroupGloo(store, rank, size, timeout, enable_reconfigure=True)
    else:
        backend = ProcessGroupGloo(store, rank, size, timeout)
    pg = ProcessGroup(store, rank, size)
    pg._register_backend(torch.device("cpu"), ProcessGroup.BackendType.GLOO, backend)
    pg._set_default_backend(ProcessGroup.BackendType.GLOO)
    return pg


@_probe
def process_group_hooks() -> bool:
    """process groups take Python pre/post collective hooks (ProcessGroup.register_pre_hook)."""
    if not distributed():
        return False
    return hasattr(torch.distributed.ProcessGroup, "register_pre_hook")


# --- access -----------------------------------------------------------------


def probes() -> Dict[str, Probe]:
    """All probes by name, in definition order."""
    return dict(_PROBES)


def probe_values() -> Dict[str, bool]:
    """Evaluate every probe: ``{name: bool}``."""
    return {name: p.check() for name, p in _PROBES.items()}


def __getattr__(name: str) -> bool:
    probe = _PROBES.get(name)
    if probe is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return probe.check()


def __dir__():
    return sorted(list(globals()) + list(_PROBES))
