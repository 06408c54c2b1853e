"""Three scoped changes to Inductor's C++ vector code (register bitcasts, direct integer loads, inline sin/cos), and their cache key.

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

Sine and cosine (:func:`vector_sincos`). Inductor writes ``x.sin()`` and
``x.cos()`` of a float32 vector, two out-of-line calls into Sleef; every call
also spills the kernel's live vector registers (all are caller-saved). The
complex decompositions need both of one angle wherever a complex exponential,
sine or cosine is taken (``exp(1j*theta)`` is ``cos(theta) + 1j*sin(theta)``).
Within :func:`vector_sincos`, on x86 (AVX2 and AVX-512, where ``fmadd`` is
fused), each is written inline, equivalent to::

    if any(abs(x) > SINCOS_LIMIT):       # rare; inf too; nan stays on the fast path
        return x.sin()                   # Inductor's own (Sleef) for the whole vector
    q = rint(x * 2/pi)                   # the quadrant
    r = x - q*P1 - q*P2 - q*P3           # fused multiply-adds; P1 + P2 + P3 = pi/2 to 72 bits
    s, c = sin_poly(r), cos_poly(r)      # |r| <= pi/4: Cephes' sinf/cosf minimax polynomials
    sin(x) = [s, c, -s, -c][q mod 4]     # and x itself where x is +-0 (sin(-0) = -0)
    cos(x) = [c, -s, -c, s][q mod 4]

The reduction and both polynomials of ``sin(x)`` and ``cos(x)`` of one ``x`` are
the same expressions, which the C++ compiler computes once. Checked against
float64 over every float32 in [1e-6, 32768): at most 1.53 ulp (sin) and 1.53
ulp (cos); Sleef's ``u35`` functions Inductor calls promise 3.5. Measured on a
2-core AMD EPYC (Zen 3, AVX2), one process per variant: the benchmark's
workload (a) 4.5-4.6 ms with Sleef's calls, 3.3-3.9 ms inline. float64 and
other ISAs keep Inductor's code.

Each override is in place only while ptc's backend compiles a graph
(:class:`ptc.complex.backend.ComplexBackend`); code generated meanwhile by
another thread differs only in being faster. Where this Inductor lacks the
hook (``_compat.INDUCTOR_CPP_VEC_BITCAST``, ``_compat.INDUCTOR_CPP_VEC_LOAD_LINE``,
``_compat.INDUCTOR_CPP_VEC_SINCOS``), nothing is changed.

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

__all__ = ["SINCOS_LIMIT", "cache_key", "full_width_loads", "vector_bitcasts", "vector_sincos"]

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


#: |x| above which the inline sin/cos hand the whole vector to Inductor's own (Sleef's) functions
SINCOS_LIMIT = 32768.0

_FLOAT = "at::vec::Vectorized<float>"
_INT = "at::vec::Vectorized<int32_t>"


def _sincos_line(x: str, which: str) -> str:
    """C++: ``sin`` or ``cos`` of the float32 vector ``x``, inline (see the module docstring)."""
    f = lambda c: f"{_FLOAT}({c!r}f)"  # noqa: E731 - a float32 constant, broadcast
    i = lambda c: f"{_INT}({c})"  # noqa: E731
    fma = "at::vec::fmadd"
    if which == "sin":
        pick = (
            f"auto v = {_FLOAT}::blendv(s, c, odd) ^ at::vec::cast<float>((qi & {i(2)}) << {i(30)}); "
            f"return {_FLOAT}::blendv(v, x, x == {f(0.0)}); "
        )
    else:
        pick = f"return {_FLOAT}::blendv(c, s, odd) ^ at::vec::cast<float>(((qi + {i(1)}) & {i(2)}) << {i(30)}); "
    return (
        f"[](const {_FLOAT}& x) -> {_FLOAT} {{ "
        f"if (!at::vec::VecMask<float,1>(x.abs() > {f(SINCOS_LIMIT)}).all_zero()) return x.{which}(); "
        f"auto q = (x * {f(0.6366197723675814)}).round(); "
        f"auto r = {fma}(q, {f(-1.5707963705062866)}, x); "
        f"r = {fma}(q, {f(4.371138828673793e-08)}, r); "
        f"r = {fma}(q, {f(1.7151245100058819e-15)}, r); "
        f"auto z = r * r; "
        f"auto s = {fma}({fma}({fma}({f(-1.9515295891e-4)}, z, {f(8.3321608736e-3)}), z, {f(-1.6666654611e-1)}), z * r, r); "
        f"auto c = {fma}({fma}({fma}({fma}({f(2.443315711809948e-05)}, z, {f(-1.388731625493765e-03)}), z, "
        f"{f(4.166664568298827e-02)}), z, {f(-0.5)}), z, {f(1.0)}); "
        f"auto qi = at::vec::convert<int32_t>(q); "
        f"auto odd = at::vec::cast<float>((qi & {i(1)}) == {i(1)}); "
        f"{pick}}}({x})"
    )


def _inline_sincos(which: str, original):
    from torch._inductor import cpu_vec_isa
    from torch._inductor.codegen import cpp as cpp_codegen

    def sincos(x):
        kernel = cpp_codegen.V.kernel
        if (
            isinstance(kernel, cpp_codegen.CppVecKernel)
            and isinstance(kernel.vec_isa, (cpu_vec_isa.VecAVX2, cpu_vec_isa.VecAVX512))
            and getattr(x, "is_vec", False)
            and getattr(x, "dtype", None) == torch.float32
            and kernel._get_num_vectors(torch.float32) == 1
        ):
            return _sincos_line(x, which)
        return original(x)

    return sincos


@contextlib.contextmanager
def vector_sincos() -> Iterator[bool]:
    """Within this block, Inductor's float32 vector ``sin`` and ``cos`` are inline (see the module docstring).

    Yields whether the override is in place (False where this torch lacks the hook).
    """
    if not _compat.INDUCTOR_CPP_VEC_SINCOS:
        yield False
        return
    from torch._inductor.codegen import cpp as cpp_codegen

    def replace(which):
        def replace_method(original):  # inherited or of another kind: leave Inductor's code alone
            if not isinstance(original, staticmethod):
                return None
            return staticmethod(_inline_sincos(which, original.__func__))

        return replace_method

    with _replaced(cpp_codegen.CppVecOverrides, "sin", replace("sin")) as sin:
        with _replaced(cpp_codegen.CppVecOverrides, "cos", replace("cos")) as cos:
            yield sin and cos


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
