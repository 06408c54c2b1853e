"""Two scoped changes to Inductor's C++ vector code (register bitcasts, direct integer loads), and their cache key.

Bitcasts (:func:`vector_bitcasts`).

Inductor emits a bitcast (``x.view(torch.float32)`` of an int32 value, and
back) inside a vectorised C++ kernel as a store of the vector to a stack
buffer, a scalar ``c10::bit_cast`` loop into a second buffer and a reload.
ptc reads and writes complex64 through the int64 bits of each element
(:func:`ptc.complex.pair.split` and :func:`~ptc.complex.pair.join`), so every
complex input and output of a kernel costs two such bitcasts. Within
:func:`vector_bitcasts` the same bitcast is one ``at::vec::cast`` (a register
reinterpretation, e.g. ``_mm512_castsi512_ps``), equivalent to::

    out = Vectorized<dst>::loadu(bytes_of(x))   # the same bits, another type

Measured on a 2-core AVX-512 CPU, 1M complex64: ``z.real.sum()`` 0.92 ms ->
0.54 ms, ``z.real + z.imag`` 1.56 ms -> 0.74 ms.

Only vectors of one register each, of the same element width, are rewritten;
everything else keeps Inductor's own code.

Integer loads (:func:`full_width_loads`). Inductor loads every vector with a
lane count, ``VectorizedN<int64_t,2>::loadu(p, 8)``, even where the count is
the full width. For float and double, and for every type on AVX-512, that
count is checked and the load is direct; for 64- and 32-bit integers on AVX2,
ATen copies the lanes into a stack buffer and reloads it, whatever the count:
two 16-byte stores then one 32-byte load, a failed store-to-load forwarding
per register. Measured on a 2-core AMD EPYC (Zen 3, AVX2), 1M complex64, one
process per variant: the benchmark's workload (a) 7.8-8.0 ms with the copy,
3.9-4.0 ms without; (e) 7.4-7.6 and 1.5-2.1 ms; (f) 4.2-4.6 and 1.4-1.9 ms;
``z * w + z.conj()`` 5.8-6.0 and 1.4 ms. Within the
block an integer load whose count fills its vectors exactly is written
without the count, ``VectorizedN<int64_t,2>::loadu(p)``, which is equivalent
to the following (the same lanes, read directly)::

    out = Vectorized<int64_t>::loadu(p, Vectorized<int64_t>::size())

Tail loads (fewer lanes) and masked loads keep Inductor's code.

Each override is in place only while ptc's backend compiles a graph
(:class:`ptc.complex.backend.ComplexBackend`); code generated meanwhile by
another thread differs only in being faster. Where this Inductor lacks the
hook (``_compat.INDUCTOR_CPP_VEC_BITCAST``, ``_compat.INDUCTOR_CPP_VEC_LOAD_LINE``),
nothing is changed.

Inductor's FX-graph cache does not know about either override: without more,
it would serve code generated under other overrides (an older ptc's, or none)
for the same graph. :func:`cache_key` adds them to the key (see there).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from pathlib import Path
from typing import Iterator

import torch

from ptc import _compat

__all__ = ["cache_key", "full_width_loads", "vector_bitcasts"]

#: (destination, source) dtype pairs whose vectors are reinterpreted in place
_SAME_WIDTH = {
    (torch.float32, torch.int32), (torch.int32, torch.float32),
    (torch.float64, torch.int64), (torch.int64, torch.float64),
}

#: integer dtypes whose counted AVX2 load always goes through a stack buffer
_COPIED_LOADS = (torch.int64, torch.int32)


def _register_bitcast(original):
    from torch._inductor.codegen import cpp as cpp_codegen

    def to_dtype_bitcast(x, dtype, src_dtype):
        kernel = cpp_codegen.V.kernel
        if (
            (dtype, src_dtype) in _SAME_WIDTH
            and isinstance(kernel, cpp_codegen.CppVecKernel)
            and isinstance(x, cpp_codegen.CppCSEVariable)
            and getattr(x, "is_vec", False)
            and kernel._get_num_vectors(dtype) == 1
            and kernel._get_num_vectors(src_dtype) == 1
        ):
            return f"at::vec::cast<{cpp_codegen.DTYPE_TO_CPP[dtype]}>({x})"
        return original(x, dtype, src_dtype)

    return to_dtype_bitcast


@contextlib.contextmanager
def _replaced(cls, name: str, replace) -> Iterator[bool]:
    """Within the block ``cls.<name>`` is ``replace(original)``, restored on exit and on error.

    ``replace`` returns None to leave the attribute alone (then this yields False).
    """
    original = cls.__dict__.get(name)
    replacement = None if original is None else replace(original)
    if replacement is None:
        yield False
        return
    setattr(cls, name, replacement)
    try:
        yield True
    finally:
        setattr(cls, name, original)


def vector_bitcasts() -> contextlib.AbstractContextManager[bool]:
    """Within this block, Inductor's vectorised C++ bitcasts are register casts (see the module docstring).

    Yields whether the override is in place (False where this torch lacks the hook).
    """
    if not _compat.INDUCTOR_CPP_VEC_BITCAST:
        return contextlib.nullcontext(False)
    from torch._inductor.codegen import cpp as cpp_codegen

    def replace(original):  # inherited or of another kind: leave Inductor's code alone
        return staticmethod(_register_bitcast(original.__func__)) if isinstance(original, staticmethod) else None

    return _replaced(cpp_codegen.CppVecOverrides, "to_dtype_bitcast", replace)


def _direct_load_line(original):
    from torch._inductor.codegen import cpp as cpp_codegen

    def _get_vec_load_line(self, var, index, dtype, load_mask=None):
        if load_mask is None and dtype in _COPIED_LOADS:
            bits = self.num_elems * dtype.itemsize * 8
            if bits == self._get_num_vectors(dtype) * self.vec_isa.bit_width():  # the count fills every lane
                loadbuf = f"{var} + {cpp_codegen.cexpr_index(index)}" if index != 0 else var
                return f"{self._get_vec_type(dtype)}::loadu({loadbuf})"
        return original(self, var, index, dtype, load_mask)

    return _get_vec_load_line


def full_width_loads() -> contextlib.AbstractContextManager[bool]:
    """Within this block, Inductor's full-width integer vector loads read directly (see the module docstring).

    Yields whether the override is in place (False where this torch lacks the hook).
    """
    if not _compat.INDUCTOR_CPP_VEC_LOAD_LINE:
        return contextlib.nullcontext(False)
    from torch._inductor.codegen import cpp as cpp_codegen

    def replace(original):  # not a function: leave Inductor's code alone
        return _direct_load_line(original) if callable(original) else None

    return _replaced(cpp_codegen.CppVecKernel, "_get_vec_load_line", replace)


@functools.lru_cache(maxsize=None)
def sources_digest() -> str:
    """sha256 over the sources of ``ptc.complex`` (every ``.py`` of the package, in name order)."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


@functools.lru_cache(maxsize=None)
def _key_pass_class():
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class CodegenKey(CustomGraphPass):
        """A post-grad pass that changes no graph; its ``uuid`` puts ptc's code overrides in the cache key."""

        def __init__(self, overrides):
            self.overrides = tuple(overrides)

        def __call__(self, graph) -> None:
            return None

        def uuid(self):
            return ("ptc.complex.codegen", sources_digest(), self.overrides)

    return CodegenKey


@contextlib.contextmanager
def cache_key(**overrides: bool) -> Iterator[bool]:
    """Within this block, Inductor's FX-graph cache keys name ptc's code overrides.

    ``overrides`` says which are in place, e.g. ``cache_key(bitcasts=True,
    loads=False)``. Inductor's post-grad custom passes are part of its cache
    key; one more pass is appended that changes nothing, equivalent to::

        config.post_grad_custom_post_pass = [*user_passes, CodegenKey(overrides)]
        # CodegenKey(...)(graph) does nothing; its uuid() is
        # ("ptc.complex.codegen", sources_digest(), overrides)

    so a graph compiled under other overrides, or by another version of
    ptc.complex, is compiled again instead of being served from the cache. The
    user's own passes run as before. Yields whether the key was extended:
    False where a user pass is a plain callable (Inductor does not cache
    those compiles at all) or this Inductor lacks list-valued custom passes.
    """
    if not _compat.INDUCTOR_CUSTOM_PASS_LISTS:
        yield False
        return
    from torch._inductor import config as inductor_config
    from torch._inductor.custom_graph_pass import CustomPassBase, get_custom_graph_passes

    user = get_custom_graph_passes(inductor_config.post_grad_custom_post_pass)
    if not all(isinstance(p, CustomPassBase) for p in user):
        yield False
        return
    keyed = [*user, _key_pass_class()(sorted(overrides.items()))]
    with inductor_config.patch(post_grad_custom_post_pass=keyed):
        yield True
