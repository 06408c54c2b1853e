"""The switch: a ``torch.compile`` backend that is Inductor plus ptc's complex rewrite.

``torch.compile(f, backend=ptc.complex.backend())`` runs Inductor's own
``compile_fx`` with three things scoped to that compile and nothing else:

1. a decomposition table: Inductor's, except that for complex arguments it keeps
   whole the ops ptc has better rules for (Inductor's complex ``add`` trick,
   ``sgn``, ``angle``, ``lerp``, dot/vdot/norm) and the library ops it must not
   rewrite (``mv -> mul + sum``, small ``mm``/``bmm`` -> ``mul + sum``);
2. an ``inner_compile`` that rewrites each forward, backward and inference
   graph with :func:`ptc.complex.rewrite.rewrite` before Inductor lowers it;
3. Inductor config patches, only for the graphs that profit and only during
   their compile: ``cpp.enable_tiling_heuristics=False`` so transcendental-heavy
   kernels that read interleaved (stride-2) memory are vectorised
   (``vectorize=False`` never patches; see :func:`wants_vectorization`).

The AOTAutograd cache is bypassed for these compiles (its key does not cover
the rewrite); Inductor's FX-graph cache still works, keyed on the rewritten
graphs. Nothing changes for any other ``torch.compile`` call.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, Callable, Dict, Optional

import torch

from ptc.complex import rules as _rules
from ptc.complex.pair import is_paired
from ptc.complex.rewrite import Report, rewrite

aten = torch.ops.aten

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


@functools.lru_cache(maxsize=None)
def _table(version: int) -> Dict:
    from torch._inductor.decomposition import select_decomp_table

    table = dict(select_decomp_table())
    for op in KEEP_WHOLE:
        if op in table:
            table[op] = _keep_for_complex(table[op])
    return table


def decompositions() -> Dict:
    """The decomposition table ptc compiles with (Inductor's, minus complex-hostile entries)."""
    return _table(0)


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


class ComplexBackend:
    """A ``torch.compile`` backend: Inductor with complex values rewritten to real arithmetic.

    ``inductor=False`` runs the rewritten graphs eagerly (AOTAutograd only): a
    quick way to check results and see the rewritten code, no C++ compiler.
    ``report`` accumulates what each compile rewrote and what it left on ATen.
    """

    def __init__(self, *, vectorize: bool = True, inductor: bool = True, options: Optional[Dict[str, Any]] = None) -> None:
        self.vectorize = vectorize
        self.inductor = inductor
        self.options = dict(options or {})
        self.report = Report()

    def __repr__(self) -> str:
        return f"ptc.complex.backend(vectorize={self.vectorize}, inductor={self.inductor})"

    def _inner(self, inner_compile, gm, example_inputs, **kwargs):
        new_gm = rewrite(gm, example_inputs, decompositions=decompositions(), report=self.report)
        with warnings.catch_warnings():
            # complex graph inputs feed only zero-copy views now; Inductor's
            # "no code generation for complex operators" warning no longer applies
            warnings.filterwarnings("ignore", message="Torchinductor does not support code generation for complex")
            if self.vectorize and new_gm is not gm and wants_vectorization(new_gm):
                from torch._inductor import config as inductor_config

                with inductor_config.patch(_VECTORIZE):
                    return inner_compile(new_gm, example_inputs, **kwargs)
            return inner_compile(new_gm, example_inputs, **kwargs)

    def __call__(self, gm: torch.fx.GraphModule, example_inputs):
        import torch._functorch.config as functorch_config

        if not self.inductor:
            return self._aot_eager(gm, example_inputs)

        from torch._inductor.compile_fx import compile_fx, compile_fx_inner

        patches = config_patches(self.vectorize)
        patches.update(self.options)
        inner = functools.partial(self._inner, compile_fx_inner)
        with functorch_config.patch(enable_autograd_cache=False):
            return compile_fx(
                gm,
                example_inputs,
                inner_compile=inner,
                config_patches=patches,
                decompositions=decompositions(),
            )

    def _aot_eager(self, gm, example_inputs):
        from functorch.compile import make_boxed_func
        from torch._dynamo.backends.common import aot_autograd

        def compiler(g, inputs):
            return make_boxed_func(rewrite(g, inputs, decompositions=decompositions(), report=self.report))

        import torch._functorch.config as functorch_config

        with functorch_config.patch(enable_autograd_cache=False):
            return aot_autograd(fw_compiler=compiler, bw_compiler=compiler, decompositions=decompositions())(
                gm, example_inputs
            )


def backend(*, vectorize: bool = True, inductor: bool = True, options: Optional[Dict[str, Any]] = None) -> ComplexBackend:
    """A fresh :class:`ComplexBackend` for ``torch.compile(f, backend=...)``."""
    return ComplexBackend(vectorize=vectorize, inductor=inductor, options=options)


def compile(fn: Optional[Callable] = None, *, vectorize: bool = True, inductor: bool = True, **compile_kwargs):
    """``torch.compile(fn, backend=ptc.complex.backend(...), **compile_kwargs)``; usable as a decorator."""
    if fn is None:
        return functools.partial(compile, vectorize=vectorize, inductor=inductor, **compile_kwargs)
    if "backend" in compile_kwargs:
        from ptc.errors import PtcValueError

        raise PtcValueError(
            "ptc.complex.compile(fn, backend=...): the backend is ptc's; pass Inductor options as "
            "options={...} or call torch.compile(fn, backend=ptc.complex.backend()) yourself"
        )
    options = compile_kwargs.pop("options", None)
    return torch.compile(fn, backend=ComplexBackend(vectorize=vectorize, inductor=inductor, options=options), **compile_kwargs)
