"""Two scoped changes to Inductor's C++ vector code: register bitcasts, direct integer loads.

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
3.9-4.0 ms without; ``z * w + z.conj()`` 5.8-6.0 ms and 1.4 ms. Within the
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
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from ptc import _compat

__all__ = ["full_width_loads", "vector_bitcasts"]

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
def vector_bitcasts() -> Iterator[bool]:
    """Within this block, Inductor's vectorised C++ bitcasts are register casts (see the module docstring).

    Yields whether the override is in place (False where this torch lacks the hook).
    """
    if not _compat.INDUCTOR_CPP_VEC_BITCAST:
        yield False
        return
    from torch._inductor.codegen import cpp as cpp_codegen

    cls = cpp_codegen.CppVecOverrides
    original = cls.__dict__.get("to_dtype_bitcast")
    if not isinstance(original, staticmethod):  # inherited or of another kind: leave Inductor's code alone
        yield False
        return
    cls.to_dtype_bitcast = staticmethod(_register_bitcast(original.__func__))
    try:
        yield True
    finally:
        cls.to_dtype_bitcast = original


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


@contextlib.contextmanager
def full_width_loads() -> Iterator[bool]:
    """Within this block, Inductor's full-width integer vector loads read directly (see the module docstring).

    Yields whether the override is in place (False where this torch lacks the hook).
    """
    if not _compat.INDUCTOR_CPP_VEC_LOAD_LINE:
        yield False
        return
    from torch._inductor.codegen import cpp as cpp_codegen

    cls = cpp_codegen.CppVecKernel
    original = cls.__dict__.get("_get_vec_load_line")
    if original is None or not callable(original):
        yield False
        return
    cls._get_vec_load_line = _direct_load_line(original)
    try:
        yield True
    finally:
        cls._get_vec_load_line = original
