"""The switch: a ``torch.compile`` backend that is Inductor plus ptc's complex rewrite.

``torch.compile(f, backend=ptc.complex.backend())`` runs Inductor's own
``compile_fx`` with four things scoped to that compile and nothing else:

1. a decomposition table: Inductor's, except that for complex arguments it keeps
   whole the ops ptc has better rules for (Inductor's complex ``add`` trick,
   ``sgn``, ``angle``, ``lerp``, dot/vdot/norm) and the library ops it must not
   rewrite (``mv -> mul + sum``, small ``mm``/``bmm`` -> ``mul + sum``);
2. an ``inner_compile`` that rewrites each forward, backward and inference
   graph with :func:`ptc.complex.rewrite.rewrite` before Inductor lowers it;
3. Inductor config patches, only for the graphs that profit and only during
   their compile: ``cpp.enable_tiling_heuristics=False`` so transcendental-heavy
   kernels that read interleaved (stride-2) memory are vectorised
   (``vectorize=False`` never patches; see :func:`wants_vectorization`);
4. while a graph compiles, five changes to Inductor's CPU code
   (:mod:`ptc.complex.codegen`): bitcasts are register casts
   (:func:`~ptc.complex.codegen.vector_bitcasts`; complex64 is read and written
   through each element's int64 bits), full-width integer loads read directly
   (:func:`~ptc.complex.codegen.full_width_loads`), float32 ``sin``, ``cos``
   and ``hypot`` are inline (:func:`~ptc.complex.codegen.vector_math`), and on
   AVX2 the int64 -> int32 narrowing that takes each half is two shuffles
   (:func:`~ptc.complex.codegen.narrowing_shuffles`); a reused value computed
   with ``sin`` or ``cos`` (a phase broadcast over a batch) is stored once
   rather than recomputed for every reader (:func:`~ptc.complex.codegen.trig_reuse`).

A Dynamo graph that is *library-bound* (complex values, at least one library
kernel: GEMM/GEMV, FFT, linalg; and at most one other op that computes, e.g.
the spectrum product of an FFT convolution; views do not count) is not
compiled at all: the backend returns the graph's own ``forward``, so every op
runs on its eager kernel and results are eager's bit for bit. There is nothing
to fuse in such a graph, and AOTAutograd's runtime wrappers plus Inductor's
wrapper cost more than they save; a lone complex elementwise op is also faster
on ATen's hand-vectorised kernel than as a fused kernel that has to interleave
its output (see :func:`library_bound`). ``library_graphs="compile"`` turns
this off.

The AOTAutograd cache is bypassed for these compiles (its key does not cover
the rewrite). Inductor's FX-graph cache serves them, keyed on the rewritten
graphs, on ptc's decomposition table (by the digest of ptc.complex's sources,
see :class:`_DecompTable`) and on the code overrides in place
(:func:`ptc.complex.codegen.cache_key`): a new process with a warm cache compiles
in a fraction of the cold time (``benchmarks/RESULTS.md``). Nothing changes for any other ``torch.compile`` call.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import operator
import warnings
from typing import Any, Callable, Dict, Optional

import torch

from ptc.complex import rules as _rules
from ptc.complex import workarounds as _workarounds
from ptc.complex.codegen import (
    cache_key,
    full_width_loads,
    narrowing_shuffles,
    sources_digest,
    trig_reuse,
    vector_bitcasts,
    vector_math,
)
from ptc.complex.pair import is_paired, storage_view
from ptc.complex.realgemm import GEMM_MODES, planned as realgemm_planned
from ptc.complex.rewrite import Report, conj_inputs, resolved_inputs, rewrite, stored_inputs

aten = torch.ops.aten
log = logging.getLogger("ptc.complex")

__all__ = ["ComplexBackend", "backend", "compile", "decompositions", "config_patches"]


def _any_complex(args, kwargs) -> bool:
    return any(
        (isinstance(a, torch.Tensor) and a.is_complex()) or isinstance(a, complex)
        for a in torch.utils._pytree.tree_leaves((args, kwargs))
    )


def _keep_for_complex(decomp: Callable) -> Callable:
    """``decomp``, except that it declines (``NotImplemented``) when a complex value is involved."""

    @functools.wraps(decomp)
    def wrapped(*args, **kwargs):
        if _any_complex(args, kwargs):
            return NotImplemented
        return decomp(*args, **kwargs)

    wrapped.__ptc_keeps_complex__ = True
    return wrapped


#: ops whose Inductor decomposition is bypassed for complex arguments
KEEP_WHOLE = [
    op
    for op in [
        aten.add.Tensor, aten.add.Scalar, aten.sgn.default, aten.angle.default, aten.lerp.Scalar,
        aten.lerp.Tensor, aten.dot.default, aten.vdot.default, aten.linalg_vector_norm.default,
        aten.reciprocal.default, aten.rsqrt.default, aten.square.default, aten.addcmul.default,
        aten.addcdiv.default, aten.nan_to_num.default, aten.var_mean.correction, aten.std.correction,
        aten.var.correction, aten.prod.default, aten.prod.dim_int, aten.cumprod.default,
        aten.sigmoid.default, aten.tanh_backward.default, aten.sigmoid_backward.default,
        aten.exp2.default, aten.log2.default, aten.log10.default, aten.expm1.default,
        aten.log1p.default, aten.logical_not.default, aten.isinf.default, aten.isnan.default,
        aten.isfinite.default,
    ]
] + list(_rules.LIBRARY)


class _DecompTable(dict):
    """ptc's decomposition table, which pickles as a reference to itself.

    Many of its functions do not pickle (wrapped or bound in C++), and
    Inductor's FX-graph cache hashes the table it is given by pickling it: it
    would bypass the cache for every ptc compile. This table pickles as a call
    to :func:`_decompositions_for` with the digest of ptc.complex's sources,
    equivalent to ``pickle((decompositions, sources_digest()))``: the same for
    the same ptc, different after any change to it.
    """

    def __init__(self, table: Dict, selection: tuple) -> None:
        super().__init__(table)
        self.selection = selection  # the Inductor settings that chose it (see ``_table``)

    def __reduce__(self):
        return (_decompositions_for, (sources_digest(), *self.selection))


def _decompositions_for(digest: str, *selection: bool) -> Dict:
    return _table(*selection)


@functools.lru_cache(maxsize=None)
def _table(fallback_random: bool, fallback_byte_unpack: bool) -> Dict:
    """Inductor's table as it selects it under these two settings (``select_decomp_table``:
    ``fallback_random=False`` decomposes random ops into Inductor's own generator)."""
    from torch._inductor import config as inductor_config
    from torch._inductor.decomposition import select_decomp_table

    with inductor_config.patch(
        fallback_random=fallback_random, fallback_embedding_bag_byte_unpack=fallback_byte_unpack
    ):
        table = _DecompTable(select_decomp_table(), (fallback_random, fallback_byte_unpack))
    for op in KEEP_WHOLE:
        if op in table:
            table[op] = _keep_for_complex(table[op])
    table.update(_workarounds.DECOMPOSITIONS)
    return table


def decompositions(eager_random: bool = False) -> Dict:
    """The decomposition table ptc compiles with: Inductor's as the current Inductor config
    selects it, minus complex-hostile entries. Random ops draw from Inductor's generator
    unless ``torch._inductor.config.fallback_random`` is set or ``eager_random`` (a graph
    run by aten ops, which draws what eager draws)."""
    from torch._inductor import config as inductor_config

    return _table(
        bool(eager_random or inductor_config.fallback_random),
        bool(getattr(inductor_config, "fallback_embedding_bag_byte_unpack", False)),
    )


_VECTORIZE = {"cpp.enable_tiling_heuristics": False}

#: real ops whose vectorised (Sleef) versions pay for gathered stride-2 loads
_EXPENSIVE = {
    "exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "sin", "cos", "tan", "sinh", "cosh", "tanh",
    "asin", "acos", "atan", "atan2", "sqrt", "rsqrt", "pow", "div", "reciprocal", "sigmoid", "hypot",
}


def wants_vectorization(gm: torch.fx.GraphModule) -> bool:
    """Whether a rewritten graph computes enough per element to beat the tiling heuristic.

    Inductor's CPU heuristic keeps kernels with many stride-2 (interleaved)
    loads scalar. For transcendental-heavy kernels vectorising anyway wins ~10x
    (anchors, section 4); for a few multiplies and adds the gathered vector
    loads cost more than they save (measured: complex mul 1.7x slower), so the
    heuristic is kept there.
    """
    for node in gm.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            if node.target.overloadpacket.__name__ in _EXPENSIVE:
                return True
    return False


def config_patches(vectorize: bool = True) -> Dict[str, Any]:
    """Inductor config patched for the whole of ptc's compile (and only it).

    The vectorisation patch (``cpp.enable_tiling_heuristics=False``) is not
    here: it is applied per graph, where :func:`wants_vectorization` says so.
    """
    return {}


#: ATen ops that only make views, alias or query metadata: free at run time
_FREE = {
    "view", "_unsafe_view", "reshape", "expand", "permute", "transpose", "t", "select", "slice", "squeeze",
    "unsqueeze", "alias", "view_as_real", "view_as_complex", "_conj", "_neg_view", "conj", "detach",
    "resolve_conj", "resolve_neg", "real", "imag", "diagonal", "unflatten", "flatten", "as_strided",
    "split", "split_with_sizes", "unbind", "chunk", "narrow", "movedim", "mT", "mH", "adjoint",
    "expand_as", "view_as", "contiguous", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
    "_assert_tensor_metadata", "lift_fresh", "lift_fresh_copy",
}


def _aten_graph(gm: torch.fx.GraphModule, example_inputs) -> Optional[torch.fx.GraphModule]:
    """``gm`` (a Dynamo graph) traced to ATen on fresh fake tensors, or None when that is not possible."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    if not all(
        (isinstance(x, torch.Tensor) and not isinstance(x, FakeTensor) and type(x) in (torch.Tensor, torch.nn.Parameter))
        or type(x) in (int, float, bool)
        for x in example_inputs
    ):
        return None  # symbolic sizes, subclasses, fake inputs: leave these to the compile path
    if any(n.op == "call_module" for n in gm.graph.nodes):
        return None
    try:
        mode = FakeTensorMode(allow_non_fake_inputs=False)
        args = [mode.from_tensor(x, static_shapes=True) if isinstance(x, torch.Tensor) else x for x in example_inputs]
        # the graph's own tensors (an optimizer's parameters and state, lifted by Dynamo as attributes) are
        # traced as fake copies too: an op whose tensors are all real runs for real even under a fake mode,
        # and an in-place one (the momentum buffer's mul_) would change the user's tensor at compile time
        attributes = {}
        for n in gm.graph.nodes:
            if n.op == "get_attr":
                value = operator.attrgetter(n.target)(gm)
                if isinstance(value, torch.Tensor):
                    value = mode.from_tensor(value, static_shapes=True)
                attributes[n.target] = value
        traced_gm = gm
        if attributes:  # a module of the same graph (copied: a graph belongs to one module) over the fakes
            graph = torch.fx.Graph()
            graph.output(graph.graph_copy(gm.graph, {}))
            traced_gm = torch.fx.GraphModule(attributes, graph)
        with torch._guards.tracing(None), mode, torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return make_fx(traced_gm, tracing_mode="real")(*args)
    except Exception:  # noqa: BLE001 - anything Dynamo can run but make_fx cannot: compile it
        return None


def library_bound(gm: torch.fx.GraphModule, example_inputs, gemm: str = "aten") -> bool:
    """Whether a Dynamo graph is only library kernels plus at most one op that computes.

    True when the graph has a complex value, calls at least one library kernel
    (:data:`ptc.complex.rules.LIBRARY`) and, besides views and metadata
    queries, at most one other op. Compiling such a graph buys no fusion:
    every byte is read and written once by the library kernels and the one
    op, exactly as in eager; the compiled graph only adds AOTAutograd's and
    Inductor's per-call wrappers (and, for a lone complex elementwise op, a
    kernel that interleaves its output more slowly than ATen's vectorised
    one). A graph with a library op that ptc calls in a faster form
    (:data:`ptc.complex.rules.LIBRARY_RULES`: GEMV; under ``gemm``, a GEMM
    computed as a real GEMM on oneDNN, :func:`ptc.complex.realgemm.planned`) is not library-bound.
    Graphs without complex values are never library-bound here: they
    compile exactly as with stock Inductor.
    """
    return library_bound_compute(gm, example_inputs, gemm) is not None


def library_bound_compute(gm: torch.fx.GraphModule, example_inputs, gemm: str = "aten") -> Optional[list]:
    """The ATen ops besides library kernels and views (at most one) of a library-bound graph; None if it is not one.

    See :func:`library_bound`.
    """
    if not any(
        isinstance(v, torch.Tensor) and v.is_complex()
        for n in gm.graph.nodes
        for v in torch.utils._pytree.tree_leaves(n.meta.get("example_value"))
    ):
        return None
    traced = _aten_graph(gm, example_inputs)
    if traced is None:
        return None
    library = 0
    compute = []
    has_complex = False
    for node in traced.graph.nodes:
        val = node.meta.get("val")
        if any(is_paired(v) for v in torch.utils._pytree.tree_leaves(val)):
            has_complex = True
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if node.target in _rules.LIBRARY_RULES:
            return None  # ptc runs it faster than eager does (a GEMV as a one-column GEMM)
        if node.target in _LIBRARY_SET:
            library += 1
        elif node.target.overloadpacket.__name__ not in _FREE:
            compute.append(str(node.target).replace("aten.", "", 1))
    if not (has_complex and library >= 1 and len(compute) <= 1):
        return None
    if realgemm_planned(traced, gemm):
        return None  # ptc runs a GEMM of it faster than eager does (as a real GEMM on oneDNN)
    return compute


_LIBRARY_SET = set(_rules.LIBRARY)


def _control_flow_exceptions():
    from torch._dynamo import exc

    return tuple(getattr(exc, name) for name in ("RestartAnalysis", "SkipFrame") if hasattr(exc, name))


#: exceptions Dynamo uses as signals, raised through a backend on purpose: never a reason to fall back
_CONTROL_FLOW = _control_flow_exceptions()


def _eager_fallback_exceptions():
    from torch._dynamo import exc

    return tuple(getattr(exc, "exceptions_allowed_to_be_fallback", ()))


#: exceptions a backend may raise for Dynamo to run the frame eagerly instead (a data-dependent
#: output shape met while tracing, an operator fake tensors cannot run): where stock Inductor raises
#: one of them on the same graph, ptc lets stock's go through, so the frame runs as it would under
#: stock compile, not counted as a failure of ptc
_EAGER_FALLBACK = _eager_fallback_exceptions()


class ComplexBackend:
    """A ``torch.compile`` backend: Inductor with complex values rewritten to real arithmetic.

    ``inductor=False`` runs the rewritten graphs eagerly (AOTAutograd only): a
    quick way to check results and see the rewritten code, no C++ compiler.
    ``report`` accumulates what each compile rewrote and what it left on ATen.
    ``library_graphs="eager"`` (the default) runs library-bound Dynamo graphs
    (:func:`library_bound`) as they are, on their eager kernels;
    ``"compile"`` sends them through AOTAutograd and Inductor like any other.

    A graph ptc fails to compile (a rule, the rewrite, or Inductor on the
    rewritten graph raises) is compiled by stock Inductor instead, exactly as
    ``torch.compile(f)`` would: per AOT graph (forward, backward) where the
    failure is in that graph's compile, else per Dynamo graph. Each time the
    reason goes to the ``ptc.complex`` logger (a warning) and to
    ``report.stock_graphs``. ``strict=True`` raises instead (for tests of ptc itself).

    ``gemm`` picks how complex64 GEMMs (``mm``, ``addmm``) of static shapes
    on the CPU are computed in compiled graphs: ``"auto"`` (the default) times
    ATen's complex GEMM against the same product as one real GEMM on oneDNN
    (:mod:`ptc.complex.realgemm`) once per shape and takes the faster;
    ``"onednn"`` always takes the real GEMM, ``"aten"`` never does.
    """

    def __init__(
        self,
        *,
        vectorize: bool = True,
        inductor: bool = True,
        options: Optional[Dict[str, Any]] = None,
        library_graphs: str = "eager",
        strict: bool = False,
        gemm: str = "auto",
    ) -> None:
        from ptc.errors import PtcValueError

        if library_graphs not in ("eager", "compile"):
            raise PtcValueError(f"library_graphs must be 'eager' or 'compile', not {library_graphs!r}")
        if gemm not in GEMM_MODES:
            raise PtcValueError(f"gemm must be one of {', '.join(map(repr, GEMM_MODES))}, not {gemm!r}")
        self.gemm = gemm
        self.vectorize = vectorize
        self.inductor = inductor
        self.options = dict(options or {})
        self.library_graphs = library_graphs
        self.strict = strict
        self.report = Report()

    def __repr__(self) -> str:
        return f"ptc.complex.backend(vectorize={self.vectorize}, inductor={self.inductor})"

    def _inner(self, inner_compile, gm, example_inputs, **kwargs):
        """Inductor's ``inner_compile`` of one AOT graph, rewritten; the graph as it is where that fails."""
        try:
            return self._inner_rewritten(inner_compile, gm, example_inputs, **kwargs)
        except _CONTROL_FLOW:
            raise  # Dynamo's signals (restart tracing, skip the frame): not failures of ptc's compile
        except Exception as e:  # noqa: BLE001 - any failure of ptc's compile: compile the stock way
            if self.strict:
                raise
            self._fell_back("an AOT graph", e)
        return inner_compile(gm, example_inputs, **kwargs)

    def _fell_back(self, what: str, error: BaseException) -> None:
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        reason = f"{what}: {type(error).__name__}: {first}"[:500]
        self.report.stock_graphs.append(reason)
        log.warning("ptc.complex could not compile %s; compiled by stock Inductor instead", reason)

    def _inner_rewritten(self, inner_compile, gm, example_inputs, **kwargs):
        stored = stored_inputs(gm)
        inputs = _storage_views(example_inputs, stored) if stored else example_inputs
        resolved = conj_inputs(gm, inputs)
        inputs = resolved_inputs(inputs, resolved) if resolved else inputs
        new_gm = rewrite(
            gm, inputs, decompositions=decompositions(), report=self.report, stored=stored, gemm=self.gemm
        )
        rewritten = new_gm is not gm  # else nothing complex in it (then nothing is stored or resolved either)
        compiled = self._compile(inner_compile, new_gm, inputs, rewritten, **kwargs)
        return _TakingStorageViews(compiled, stored, resolved) if stored or resolved else compiled

    def _compile(self, inner_compile, new_gm, example_inputs, rewritten: bool, **kwargs):
        """Inductor's compile of one AOT graph, with ptc's code generation (and, for a graph the
        rewrite changed, its vectorization settings)."""
        with (
            vector_bitcasts() as bitcasts,
            full_width_loads() as loads,
            vector_math() as inline_math,
            narrowing_shuffles() as narrowing,
            trig_reuse() as trig,
            cache_key(bitcasts=bitcasts, loads=loads, math=inline_math, narrowing=narrowing, trig_reuse=trig),
        ):
            if self.vectorize and rewritten and wants_vectorization(new_gm):
                from torch._inductor import config as inductor_config

                with inductor_config.patch(_VECTORIZE):
                    return inner_compile(new_gm, example_inputs, **kwargs)
            return inner_compile(new_gm, example_inputs, **kwargs)

    def __call__(self, gm: torch.fx.GraphModule, example_inputs):
        import torch._functorch.config as functorch_config

        if not self.inductor:
            return self._aot_eager(gm, example_inputs)
        if self.library_graphs == "eager":
            eager_ops = library_bound_compute(gm, example_inputs, self.gemm)
            if eager_ops is not None:
                self.report.library_graphs += 1
                self.report.library_graph_ops.update(eager_ops)
                return gm.forward

        from torch._inductor.compile_fx import compile_fx, compile_fx_inner

        patches = config_patches(self.vectorize)
        patches.update(self.options)
        inner = functools.partial(self._inner, compile_fx_inner)
        try:
            with functorch_config.patch(enable_autograd_cache=False), warnings.catch_warnings():
                # Inductor's "no code generation for complex operators" does not apply: the graphs it
                # lowers read complex values through real views (its joint-graph passes, which run on
                # the graph before ptc's rewrite, would say it otherwise)
                warnings.filterwarnings("ignore", message="Torchinductor does not support code generation for complex")
                return fresh_outputs(
                    compile_fx(
                        gm,
                        example_inputs,
                        inner_compile=inner,
                        config_patches=patches,
                        decompositions=decompositions(),
                    ),
                    gm,
                )
        except _CONTROL_FLOW:
            # e.g. TensorifyScalarRestartAnalysis (AOTAutograd's tensorify pass, a SymFloat that was
            # specialised while tracing): Dynamo restarts with the float specialised and calls this
            # backend again; stock compile lets it through too
            raise
        except Exception as e:  # noqa: BLE001 - any failure of ptc's compile: compile the stock way
            if self.strict:
                raise
            if isinstance(e, _EAGER_FALLBACK):
                return self._stock_or_eager(gm, example_inputs, e)
            self._fell_back("a Dynamo graph", e)
        return fresh_outputs(compile_fx(gm, example_inputs, config_patches=dict(self.options)), gm)

    def _stock_or_eager(self, gm, example_inputs, error: BaseException):
        """Stock Inductor's compile of a graph whose ptc compile raised ``error``, one of the
        exceptions that make Dynamo run the frame eagerly: where stock raises one of them too, that
        one goes to Dynamo (as under ``torch.compile(f)``), and ptc records no fallback of its own."""
        from torch._inductor.compile_fx import compile_fx

        try:
            compiled = compile_fx(gm, example_inputs, config_patches=dict(self.options))
        except _EAGER_FALLBACK as stock_error:
            log.debug("ptc.complex: stock Inductor raises %s on this graph too: Dynamo runs it eagerly", type(stock_error).__name__)
            raise
        self._fell_back("a Dynamo graph", error)
        return fresh_outputs(compiled, gm)

    def _aot_eager(self, gm, example_inputs):
        from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
        from torch._dynamo.backends.common import aot_autograd

        # run by aten ops, as aot_eager: random ops draw what eager draws, and the forward and
        # backward are split as aot_eager splits them (the default partitioner re-runs a
        # dropout in the backward graph, drawing numbers eager never draws)
        table = decompositions(eager_random=True)

        def compiler(g, inputs):
            compiled = make_boxed_func(rewrite(g, inputs, decompositions=table, report=self.report, gemm=self.gemm))
            resolved = conj_inputs(g, inputs)  # the rewritten graph takes these without their bits
            return _TakingStorageViews(compiled, (), resolved) if resolved else compiled

        import torch._functorch.config as functorch_config

        with functorch_config.patch(enable_autograd_cache=False):
            return aot_autograd(
                fw_compiler=compiler,
                bw_compiler=compiler,
                decompositions=table,
                partition_fn=min_cut_rematerialization_partition,
            )(gm, example_inputs)


def _storage_views(inputs, positions):
    """``inputs`` with those at ``positions`` (complex tensors) replaced by their real storage views."""
    from torch._guards import detect_fake_mode

    inputs = list(inputs)
    with detect_fake_mode(inputs) or contextlib.nullcontext():
        for i in positions:
            inputs[i] = storage_view(inputs[i])
    return inputs


def fresh_outputs(compiled: Callable, gm: torch.fx.GraphModule) -> Callable:
    """``compiled`` (a compiled Dynamo graph ``gm``), returning a fresh tensor wherever the
    traced program computes one (:class:`_FreshOutputs`); ``compiled`` itself when ``gm``
    computes no output."""
    computed = computed_outputs(gm)
    return _FreshOutputs(compiled, computed) if computed else compiled


def computed_outputs(gm: torch.fx.GraphModule) -> tuple:
    """Positions of the Dynamo graph ``gm``'s outputs that it computes: tensors that share
    memory with no input (an input or a view of one shares it)."""
    from torch.multiprocessing.reductions import StorageWeakRef

    def storage(node: Any) -> Any:
        if not isinstance(node, torch.fx.Node):
            return None
        val = node.meta.get("example_value", node.meta.get("val"))
        if not isinstance(val, torch.Tensor):
            return None
        try:
            return StorageWeakRef(val.untyped_storage())
        except (NotImplementedError, RuntimeError):  # a tensor subclass without storage
            return None

    inputs = {storage(n) for n in gm.graph.find_nodes(op="placeholder")} - {None}
    outputs = next(iter(reversed(gm.graph.nodes))).args[0]
    if not isinstance(outputs, (tuple, list)):
        return ()
    return tuple(
        i for i, node in enumerate(outputs)
        if isinstance(node, torch.fx.Node) and node.op != "placeholder"
        and storage(node) is not None and storage(node) not in inputs
    )  # fmt: skip


class _FreshOutputs:
    """A compiled Dynamo graph whose computed outputs (:func:`computed_outputs`) never share
    memory with its inputs.

    Inductor removes arithmetic it proves to be the identity (``x * 1``, ``x + 0``; torch 2.14
    for Python numbers, both torches for ``zeros_like``) and then returns the input's buffer
    where eager computes a new tensor: a caller writing into the result would change its input
    (stock ``torch.compile`` does so). Which outputs Inductor's code returns that way is fixed
    by the code, so the first call finds them (a computed output sharing memory with an input)
    and every call returns a copy of those; the others pass through. Equivalent to
    ``[o.clone() if i in found else o for i, o in enumerate(compiled(*args))]``.
    """

    def __init__(self, compiled: Callable, positions: tuple) -> None:
        self.compiled = compiled
        self.positions = positions
        self.found: Optional[tuple] = None

    def __call__(self, *args):  # as Dynamo calls a backend's compiled graph
        first = self.found is None
        if first:  # the inputs' memory, read before the call (which may release them)
            memory = {_storage_ptr(a) for a in args if isinstance(a, torch.Tensor)} - {0}
        outs = self.compiled(*args)
        if first:
            self.found = tuple(
                i for i in self.positions
                if i < len(outs) and isinstance(outs[i], torch.Tensor) and _storage_ptr(outs[i]) in memory
            )  # fmt: skip
        if not self.found:
            return outs
        fresh = list(outs)
        for i in self.found:
            fresh[i] = fresh[i].clone()
        return type(outs)(fresh) if isinstance(outs, tuple) else fresh

    def __getattr__(self, name: str) -> Any:  # what Dynamo or a caller reads off the compiled graph
        compiled = self.__dict__.get("compiled")
        if compiled is None:
            raise AttributeError(name)
        return getattr(compiled, name)


def _storage_ptr(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except (NotImplementedError, RuntimeError):  # a tensor subclass without storage
        return 0


class _TakingStorageViews:
    """A compiled graph that takes some complex inputs as their real storage views (see
    :func:`ptc.complex.rewrite.stored_inputs`) and some without their conj and neg bits
    (:func:`~ptc.complex.rewrite.conj_inputs`), called with the complex tensors as they come.

    Equivalent to ``compiled([storage_view(a) if i in positions else a.resolve_conj().resolve_neg()
    if i in resolved else a for i, a in enumerate(args)])`` (boxed: ``args`` is a list the call
    consumes, as every AOT graph's).
    """

    _boxed_call = True

    def __init__(self, compiled: Callable, positions, resolved=()) -> None:
        self.compiled = compiled
        self.positions = tuple(positions)
        self.resolved = tuple(resolved)
        self.boxed = bool(getattr(compiled, "_boxed_call", False))
        self._boxed_call = True  # on the instance too: torch.compiler.disable's wrapper copies __dict__

    def __call__(self, args):
        for i in self.positions:
            args[i] = storage_view(args[i])
        for i in self.resolved:
            args[i] = args[i].resolve_conj().resolve_neg()
        if self.boxed:
            return self.compiled(args)
        flat = list(args)
        args.clear()
        return self.compiled(*flat)


def backend(
    *,
    vectorize: bool = True,
    inductor: bool = True,
    options: Optional[Dict[str, Any]] = None,
    library_graphs: str = "eager",
    strict: bool = False,
    gemm: str = "auto",
) -> ComplexBackend:
    """A fresh :class:`ComplexBackend` for ``torch.compile(f, backend=...)``."""
    return ComplexBackend(
        vectorize=vectorize, inductor=inductor, options=options, library_graphs=library_graphs, strict=strict,
        gemm=gemm,
    )


def compile(
    fn: Optional[Callable] = None,
    *,
    vectorize: bool = True,
    inductor: bool = True,
    library_graphs: str = "eager",
    strict: bool = False,
    gemm: str = "auto",
    **compile_kwargs,
):
    """``torch.compile(fn, backend=ptc.complex.backend(...), **compile_kwargs)``; usable as a decorator."""
    if fn is None:
        return functools.partial(
            compile, vectorize=vectorize, inductor=inductor, library_graphs=library_graphs, strict=strict,
            gemm=gemm, **compile_kwargs,
        )
    if not callable(fn):
        from ptc.errors import PtcTypeError

        raise PtcTypeError(f"ptc.complex.compile(fn): fn must be a callable (a function or module), not {type(fn).__name__}")
    if "backend" in compile_kwargs:
        from ptc.errors import PtcValueError

        raise PtcValueError(
            "ptc.complex.compile(fn, backend=...): the backend is ptc's; pass Inductor options as "
            "options={...} or call torch.compile(fn, backend=ptc.complex.backend()) yourself"
        )
    options = compile_kwargs.pop("options", None)
    b = ComplexBackend(
        vectorize=vectorize, inductor=inductor, options=options, library_graphs=library_graphs, strict=strict,
        gemm=gemm,
    )
    return torch.compile(fn, backend=b, **compile_kwargs)
