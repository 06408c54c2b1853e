"""Five scoped changes to Inductor's CPU code (register bitcasts, direct integer loads, inline math, narrowing, trig reuse), and their cache key.

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

Only vectors of one register each, of the same element width, are rewritten;
everything else keeps Inductor's own code.

Integer loads (:func:`full_width_loads`). Inductor loads every vector with a
lane count, ``VectorizedN<int64_t,2>::loadu(p, 8)``, even where the count is
the full width. For float and double, and for every type on AVX-512, that
count is checked and the load is direct; for 64- and 32-bit integers on AVX2,
ATen copies the lanes into a stack buffer and reloads it, whatever the count:
two 16-byte stores then one 32-byte load, a failed store-to-load forwarding
per register. Within the
block an integer load whose count fills its vectors exactly is written
without the count, ``VectorizedN<int64_t,2>::loadu(p)``, which is equivalent
to the following (the same lanes, read directly)::

    out = Vectorized<int64_t>::loadu(p, Vectorized<int64_t>::size())

Tail loads (fewer lanes) and masked loads keep Inductor's code.

Inline math (:func:`vector_math`). Inductor writes ``x.sin()``, ``x.cos()``
and ``x.hypot(y)`` of float32 vectors as out-of-line calls into Sleef; every
call also spills the kernel's live vector registers (all are caller-saved).
The complex decompositions need both of one angle wherever a complex
exponential, sine or cosine is taken (``exp(1j*theta)`` is ``cos(theta) +
1j*sin(theta)``) and a hypot for every ``abs``. Within :func:`vector_math`, on
x86 (AVX2 and AVX-512, where ``fmadd`` is fused), each is written inline with
a fast path for the common range, equivalent to::

    def sin(x):                          # cos(x) alike
        if any(abs(x) > SINCOS_LIMIT):   # rare; inf too; nan stays on the fast path
            return x.sin()               # Inductor's own (Sleef) for the whole vector
        q = rint(x * 2/pi)               # the quadrant
        r = x - q*P1 - q*P2 - q*P3       # fused multiply-adds; P1 + P2 + P3 = pi/2 to 72 bits
        s, c = sin_poly(r), cos_poly(r)  # |r| <= pi/4: Cephes' sinf/cosf minimax polynomials
        return [s, c, -s, -c][q mod 4]   # cos: [c, -s, -c, s]; sin(+-0) is x itself

    def hypot(x, y):
        h2 = fma(x, x, y*y)
        if any(not (2**-100 <= h2 <= 2**100)):  # would over- or underflow; inf, nan
            return x.hypot(y)            # Inductor's own (Sleef, C99's special values)
        return sqrt(h2)

The reduction and both polynomials of ``sin(x)`` and ``cos(x)`` of one ``x`` are
the same expressions, which the C++ compiler computes once. Checked against
float64 over every float32 in [1e-6, 32768): at most 1.53 ulp (sin and cos);
hypot's fast path: at most 1.19 ulp over 1e8 random pairs. Sleef's ``u35`` sin/cos Inductor calls
promise 3.5 ulp. float64 and other ISAs keep Inductor's code;
:func:`inline_hypot` says where ptc's ``abs`` decomposition writes ``hypot``.

Narrowing (:func:`narrowing_shuffles`). ptc takes a complex64's real and
imaginary parts from its int64 bits, ``bits.to(int32)`` (the low halves) and
``(bits >> 32).to(int32)`` (the high halves). On AVX2, which has neither a
64-bit arithmetic shift nor an int64 -> int32 narrowing, ATen writes the
narrowing as five shuffles per pair of registers and the shift as four
instructions per register: 18 for both parts of 8 complex64 values.
Within :func:`narrowing_shuffles` (AVX2 only) a narrowing of two int64
registers into one int32 register is two shuffles, and a narrowing of
``a >> b`` takes ``a``'s high halves directly, equivalent to::

    def to_int32(x):                     # x: 8 int64 lanes in two registers
        if x is a >> b and all(b == 32): # b is a constant: the C++ compiler folds the test
            return odd_int32_lanes(a)    # the high halves: shufps(a0, a1, 0xDD), vpermpd
        return even_int32_lanes(x)       # the low halves: shufps(x0, x1, 0x88), vpermpd

which is what the narrowing and the shift compute (the high half of an int64
is its arithmetic shift by 32, narrowed). Both parts of a complex64 register
pair: four instructions (GCC 12 folds the test and drops the unused shift).

Trig reuse (:func:`trig_reuse`). A complex exponential broadcast over a batch,
``spec * exp(-1j * w * freqs)`` with ``spec`` of shape (rows, n) and ``freqs``
of n, is ``cos`` and ``sin`` of one row, each read by every row. Inductor's CPU
heuristic stores a value read more than once when it is computed with ``exp``,
``log``, ``tanh`` and a few more, not ``sin`` or ``cos``: it recomputes both for
each of the rows * n elements. Within :func:`trig_reuse` the values whose
computation uses :data:`HEAVY_ON_REUSE` are stored like ``exp``'s, equivalent to::

    def should_realize_on_reuse(value, users):
        return inductor_heuristic(value, users) or (
            users > 1 and value is a CPU pointwise using sin or cos)

where ``users`` counts graph users or, for a broadcast, the elements reading
each value. The code Inductor writes for the six workloads of
``benchmarks/complex.py`` is byte for byte the same either way.

Each override is in place only while ptc's backend compiles a graph
(:class:`ptc.complex.backend.ComplexBackend`); code generated meanwhile by
another thread differs only in being faster. Where this Inductor lacks the
hook (``_compat.INDUCTOR_CPP_VEC_BITCAST``, ``_compat.INDUCTOR_CPP_VEC_LOAD_LINE``,
``_compat.INDUCTOR_CPP_VEC_MATH``, ``_compat.INDUCTOR_CPP_VEC_NARROWING``,
``_compat.INDUCTOR_REALIZE_ON_REUSE``), nothing is changed. What each override
gains, measured, is in ``benchmarks/RESULTS.md``.

Inductor's FX-graph cache does not know about these overrides: without more,
it would serve code generated under other overrides (an older ptc's, or none)
for the same graph. :func:`cache_key` adds them to the key (see there).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import math
import weakref
from pathlib import Path
from typing import Iterator

import torch

from ptc import _compat

__all__ = [
    "HEAVY_ON_REUSE", "SINCOS_LIMIT", "cache_key", "full_width_loads", "inline_hypot", "narrowing_shuffles", "trig_reuse",
    "vector_bitcasts", "vector_math",
]

#: (destination, source) dtype pairs whose vectors are reinterpreted in place
_SAME_WIDTH = {
    (torch.float32, torch.int32), (torch.int32, torch.float32),
    (torch.float64, torch.int64), (torch.int64, torch.float64),
}

#: integer dtypes whose counted AVX2 load always goes through a stack buffer
_COPIED_LOADS = (torch.int64, torch.int32)


def _one_register_kernel(*dtypes):
    """The vectorised C++ kernel being written, where a vector of each of ``dtypes`` is one register; else None."""
    from torch._inductor.codegen import cpp as cpp_codegen

    kernel = cpp_codegen.V.kernel
    if isinstance(kernel, cpp_codegen.CppVecKernel) and all(kernel._get_num_vectors(d) == 1 for d in dtypes):
        return kernel
    return None


def _register_bitcast(original):
    from torch._inductor.codegen import cpp as cpp_codegen

    def to_dtype_bitcast(x, dtype, src_dtype):
        if (
            (dtype, src_dtype) in _SAME_WIDTH
            and isinstance(x, cpp_codegen.CppCSEVariable)
            and getattr(x, "is_vec", False)
            and _one_register_kernel(dtype, src_dtype) is not None
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


def _replaced_function(cls, name: str, wrap) -> contextlib.AbstractContextManager[bool]:
    """:func:`_replaced` for a plain method: within the block ``cls.<name>`` is ``wrap(function)``.

    Inherited, or not callable: left alone (yields False).
    """
    return _replaced(cls, name, lambda original: wrap(original) if callable(original) else None)


def _replaced_staticmethod(cls, name: str, wrap) -> contextlib.AbstractContextManager[bool]:
    """:func:`_replaced` for a staticmethod: within the block ``cls.<name>`` calls ``wrap(function)``.

    Inherited, or of another kind: left alone (yields False).
    """

    def replace(original):
        if not isinstance(original, staticmethod):
            return None
        # named as the original: Inductor's per-kernel wrapper of these methods finds the scalar
        # version of an op by the function's __name__ (all-scalar arguments in a vector kernel)
        return staticmethod(functools.wraps(original.__func__)(wrap(original.__func__)))

    return _replaced(cls, name, replace)


def vector_bitcasts() -> contextlib.AbstractContextManager[bool]:
    """Within this block, Inductor's vectorised C++ bitcasts are register casts (see the module docstring).

    Yields whether the override is in place (False where this torch lacks the hook).
    """
    if not _compat.INDUCTOR_CPP_VEC_BITCAST:
        return contextlib.nullcontext(False)
    from torch._inductor.codegen import cpp as cpp_codegen

    return _replaced_staticmethod(cpp_codegen.CppVecOverrides, "to_dtype_bitcast", _register_bitcast)


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

    return _replaced_function(cpp_codegen.CppVecKernel, "_get_vec_load_line", _direct_load_line)


#: |x| above which the inline sin/cos hand the whole vector to Inductor's own (Sleef's) functions
SINCOS_LIMIT = 32768.0

#: float32 parts of pi/2 (their sum is pi/2 to 72 bits): Cody and Waite's reduction
_HALF_PI = (1.5707963705062866, -4.371138828673793e-08, -1.7151245100058819e-15)
#: Cephes' sinf and cosf on [-pi/4, pi/4], highest power first (in z = r*r)
_SIN_POLY = (-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1)
_COS_POLY = (2.443315711809948e-05, -1.388731625493765e-03, 4.166664568298827e-02, -0.5, 1.0)

_FLOAT = "at::vec::Vectorized<float>"
_INT = "at::vec::Vectorized<int32_t>"


def _f(c: float) -> str:
    return f"{_FLOAT}({c!r}f)"  # a float32 constant, broadcast


def _horner(coefficients, z: str) -> str:
    out = _f(coefficients[0])
    for c in coefficients[1:]:
        out = f"at::vec::fmadd({out}, {z}, {_f(c)})"
    return out


def _sincos_line(x: str, which: str) -> str:
    """C++: ``sin`` or ``cos`` of the float32 vector ``x``, inline (see the module docstring)."""
    two, one, thirty = f"{_INT}(2)", f"{_INT}(1)", f"{_INT}(30)"
    if which == "sin":  # [s, c, -s, -c][q mod 4], and x itself at +-0
        pick = (
            f"auto v = {_FLOAT}::blendv(s, c, odd) ^ at::vec::cast<float>((qi & {two}) << {thirty}); "
            f"return {_FLOAT}::blendv(v, x, x == {_f(0.0)}); "
        )
    else:  # [c, -s, -c, s][q mod 4]
        pick = f"return {_FLOAT}::blendv(c, s, odd) ^ at::vec::cast<float>(((qi + {one}) & {two}) << {thirty}); "
    return (
        f"[](const {_FLOAT}& x) -> {_FLOAT} {{ "
        f"if (!at::vec::VecMask<float,1>(x.abs() > {_f(SINCOS_LIMIT)}).all_zero()) return x.{which}(); "
        f"auto q = (x * {_f(2 / math.pi)}).round(); "
        f"auto r = at::vec::fmadd(q, {_f(-_HALF_PI[0])}, x); "
        f"r = at::vec::fmadd(q, {_f(-_HALF_PI[1])}, r); "
        f"r = at::vec::fmadd(q, {_f(-_HALF_PI[2])}, r); "
        f"auto z = r * r; "
        f"auto s = at::vec::fmadd({_horner(_SIN_POLY, 'z')}, z * r, r); "
        f"auto c = {_horner(_COS_POLY, 'z')}; "
        f"auto qi = at::vec::convert<int32_t>(q); "
        f"auto odd = at::vec::cast<float>((qi & {one}) == {one}); "
        f"{pick}}}({x})"
    )


def _hypot_line(x: str, y: str) -> str:
    """C++: ``hypot`` of the float32 vectors ``x`` and ``y``, inline (see the module docstring)."""
    return (
        f"[](const {_FLOAT}& x, const {_FLOAT}& y) -> {_FLOAT} {{ "
        f"auto h2 = at::vec::fmadd(x, x, y * y); "
        f"if (!at::vec::VecMask<float,1>((h2 >= {_FLOAT}(0x1p-100f)) & (h2 <= {_FLOAT}(0x1p100f))).all_masked()) "
        f"return x.hypot(y); "
        f"return h2.sqrt(); }}({x}, {y})"
    )


def _x86_isa(isa) -> bool:
    from torch._inductor import cpu_vec_isa

    return isinstance(isa, (cpu_vec_isa.VecAVX2, cpu_vec_isa.VecAVX512))


def _inline(write, original):
    """``original`` (a CppVecOverrides op), except that float32 vectors of one register on x86 get ``write``."""

    def op(*args):
        kernel = _one_register_kernel(torch.float32)
        if (
            kernel is not None
            and _x86_isa(kernel.vec_isa)
            and all(getattr(a, "is_vec", False) and getattr(a, "dtype", None) == torch.float32 for a in args)
        ):
            return write(*args)
        return original(*args)

    return op


_INLINE = {
    "sin": lambda x: _sincos_line(x, "sin"),
    "cos": lambda x: _sincos_line(x, "cos"),
    "hypot": _hypot_line,
}


@contextlib.contextmanager
def vector_math() -> Iterator[bool]:
    """Within this block, Inductor's float32 vector ``sin``, ``cos`` and ``hypot`` are inline (see the module docstring).

    Yields whether the override is in place (False where this torch lacks the hook).
    """
    if not _compat.INDUCTOR_CPP_VEC_MATH:
        yield False
        return
    from torch._inductor.codegen import cpp as cpp_codegen

    overrides = cpp_codegen.CppVecOverrides
    with contextlib.ExitStack() as stack:
        done = [
            stack.enter_context(_replaced_staticmethod(overrides, name, functools.partial(_inline, write)))
            for name, write in _INLINE.items()
        ]
        yield all(done)


def inline_hypot(dtype: torch.dtype) -> bool:
    """Whether a ptc compile writes ``hypot`` of ``dtype`` inline on this CPU (float32, x86, the hook here).

    Where it does, ptc's complex ``abs`` is ``torch.hypot``; elsewhere it is
    :func:`ptc.complex.rules.chypot`'s one-division formula, cheaper than Sleef's hypot.
    """
    if dtype != torch.float32 or not _compat.INDUCTOR_CPP_VEC_MATH:
        return False
    from torch._inductor import cpu_vec_isa

    return _x86_isa(cpu_vec_isa.pick_vec_isa())


_INT64_PAIR = "at::vec::VectorizedN<int64_t,2>"


def _halves(x: str, high: bool) -> str:
    """C++: the low (or high) 32-bit halves of the two AVX2 int64 registers of ``x``, as one int32 vector, in order."""
    pick = "0xDD" if high else "0x88"  # 32-bit lanes 1,3 (0,2) of each 128-bit lane of both registers
    return (
        f"_mm256_castpd_si256(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps("
        f"_mm256_castsi256_ps({x}[0]), _mm256_castsi256_ps({x}[1]), {pick})), 0xD8))"
    )


def _narrow_line(x: str) -> str:
    """C++: ``x.to(int32)`` of an AVX2 int64 register pair (the low halves)."""
    return f"[](const {_INT64_PAIR}& x) -> {_INT} {{ return {_halves('x', high=False)}; }}({x})"


def _narrow_shift_line(a: str, b: str) -> str:
    """C++: ``(a >> b).to(int32)`` of AVX2 int64 register pairs: ``a``'s high halves where every ``b`` is 32."""
    is32 = "_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(b[{i}], _mm256_set1_epi64x(32)))) == 15"
    return (
        f"[](const {_INT64_PAIR}& a, const {_INT64_PAIR}& b) -> {_INT} {{ "
        f"if ({is32.format(i=0)} && {is32.format(i=1)}) return {_halves('a', high=True)}; "
        f"auto s = a >> b; return {_halves('s', high=False)}; }}({a}, {b})"
    )


def _avx2_int64_pairs(kernel) -> bool:
    """Whether ``kernel`` is an AVX2 vector kernel whose int64 vectors are two registers and int32 vectors one."""
    from torch._inductor import cpu_vec_isa

    isa = kernel.vec_isa
    return (
        isinstance(isa, cpu_vec_isa.VecAVX2)
        and not isinstance(isa, cpu_vec_isa.VecAVX512)
        and kernel._get_num_vectors(torch.int64) == 2
        and kernel._get_num_vectors(torch.int32) == 1
    )


def _recording_shift(shifts, original):
    """CppVecOverrides.bitwise_right_shift, noting each int64 vector shift it writes in ``shifts[kernel][expr]``."""
    from torch._inductor.codegen import cpp as cpp_codegen

    def bitwise_right_shift(a, b):
        expr = original(a, b)
        kernel = cpp_codegen.V.kernel
        if (
            isinstance(expr, str)
            and isinstance(kernel, cpp_codegen.CppVecKernel)
            and all(getattr(v, "is_vec", False) and getattr(v, "dtype", None) == torch.int64 for v in (a, b))
        ):
            shifts.setdefault(kernel, {})[expr] = (a, b)
        return expr

    return bitwise_right_shift


def _narrowing_expr(shifts, original):
    """CppVecKernel.get_to_dtype_expr, with int64 -> int32 vectors narrowed by shuffles on AVX2."""

    def get_to_dtype_expr(self, src, dtype, src_dtype, rounding=False):
        if (
            dtype == torch.int32
            and src_dtype == torch.int64
            and getattr(src, "is_vec", False)
            and _avx2_int64_pairs(self)
        ):
            for expr, (a, b) in shifts.get(self, {}).items():
                if self.cse.try_get(expr) is src:  # src is a >> b
                    return _narrow_shift_line(a, b)
            return _narrow_line(src)
        return original(self, src, dtype, src_dtype, rounding)

    return get_to_dtype_expr


@contextlib.contextmanager
def narrowing_shuffles() -> Iterator[bool]:
    """Within this block, AVX2 int64 -> int32 vector narrowing is two shuffles (see the module docstring).

    Yields whether the override is in place (False where this torch lacks the hook).
    """
    if not _compat.INDUCTOR_CPP_VEC_NARROWING:
        yield False
        return
    from torch._inductor.codegen import cpp as cpp_codegen

    shifts: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # kernel -> {shift expr: (a, b)}

    with (
        _replaced_staticmethod(
            cpp_codegen.CppVecOverrides, "bitwise_right_shift", functools.partial(_recording_shift, shifts)
        ),
        _replaced_function(
            cpp_codegen.CppVecKernel, "get_to_dtype_expr", functools.partial(_narrowing_expr, shifts)
        ) as narrowing,
    ):
        yield narrowing  # without the recording the narrowing is still two shuffles, just never fused


#: ops ptc's decompositions write that Inductor's CPU reuse heuristic does not count as heavy
#: (it stores a reused value computed with exp, log, log10, log1p, log2, sigmoid or tanh)
HEAVY_ON_REUSE = ("sin", "cos")


def _realize_trig_on_reuse(original):
    from torch._inductor import ir

    def should_realize_on_reuse(self, users, *, graph_reuse=True):
        if original(self, users, graph_reuse=graph_reuse):
            return True
        data = self.data
        return (
            users > 1
            and isinstance(data, ir.Pointwise)
            and ir.is_cpu(data)
            and any(op in data.inner_fn_opcount().used_ops for op in HEAVY_ON_REUSE)
        )

    return should_realize_on_reuse


def trig_reuse() -> contextlib.AbstractContextManager[bool]:
    """Within this block, a reused CPU value computed with sin or cos is stored, not recomputed (see the module docstring).

    Yields whether the override is in place (False where this torch lacks the hook).
    """
    if not _compat.INDUCTOR_REALIZE_ON_REUSE:
        return contextlib.nullcontext(False)
    from torch._inductor import ir

    return _replaced_function(ir.StorageBox, "should_realize_on_reuse", _realize_trig_on_reuse)


@functools.lru_cache(maxsize=None)
def sources_digest() -> str:
    """sha256 over the sources of ``ptc.complex`` (every ``.py`` of the package and its subpackages, by path)."""
    digest = hashlib.sha256()
    root = Path(__file__).parent
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
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
