"""Complex64 GEMMs on the CPU as one real GEMM on oneDNN.

For complex ``a`` (``m x k``) and ``b`` (``k x n``), ``c = a @ b`` is the real
GEMM of ``a``'s interleaved values with the real block form of ``b``::

    x = view_as_real(a).reshape(m, 2 * k)          # a's own memory where a is row-major
    w = empty(2 * n, 2 * k)                         # the block form of b, as a linear layer's weight
    w[0::2, 0::2], w[0::2, 1::2] = b.real.T, -b.imag.T
    w[1::2, 0::2], w[1::2, 1::2] = b.imag.T,  b.real.T
    c = view_as_complex((x @ w.T).reshape(m, n, 2))

Each output is the same sum of ``2k`` real products as in a complex GEMM
(only their order differs), so results agree with ATen's to rounding. The real
GEMM runs on oneDNN (``ptc::onednn_linear``, a custom op Inductor calls as an
extern kernel); ``w`` is built by one pointwise kernel Inductor fuses with
whatever computes ``b``, and ``x`` is a view where ``a`` is row-major (else one
kernel that stores its values row-major).

ATen sends complex (and real) GEMMs to its BLAS, which on some CPUs runs a
much slower path than oneDNN's kernels. :func:`choose` times both forms for a
GEMM's shape once per process and picks the faster (``gemm="auto"``, the
backend's default); ``"onednn"`` always takes this form where it applies,
``"aten"`` never does.
"""

from __future__ import annotations

import logging
import time
from typing import Dict, Set, Tuple

import torch
import torch.fx as fx

from ptc import _compat
from ptc.complex.pair import Pair, join_bits

aten = torch.ops.aten
log = logging.getLogger("ptc.complex")

__all__ = ["GEMM_MODES", "FORMS", "choose", "planned", "mm", "addmm", "onednn_linear"]

#: the values of the backend's ``gemm`` option
GEMM_MODES = ("auto", "onednn", "aten")

#: GEMMs with fewer multiply-adds than this stay on ATen without being timed
MIN_WORK = 64 * 64 * 64
#: the largest size of a GEMM's dimension that :func:`choose` times
TIMED_SIZE = 512
#: the real form is taken when it takes at most this fraction of ATen's time
MARGIN = 0.9

_CHOICES: Dict[Tuple[int, int, int, int], bool] = {}
_OP = None


def onednn_linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``x @ w.T`` for real 2-d ``x`` (``m x k``) and ``w`` (``n x k``), computed by oneDNN.

    The op ``torch.ops.ptc.onednn_linear``, registered on first use (Inductor
    lowers oneDNN's own linear op only for frozen weights, so it is wrapped).
    """
    global _OP
    if _OP is None:
        _OP = _register()
    return _OP(x, w)


def _register():
    @torch.library.custom_op("ptc::onednn_linear", mutates_args=())
    def op(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), w.contiguous(), None, "none", [], "")

    @op.register_fake
    def _(x, w):
        return x.new_empty((x.shape[0], w.shape[0]))

    return op


def available() -> bool:
    """Whether oneDNN's GEMM can be used now (built in, and not switched off by ``torch.backends.mkldnn``)."""
    return _compat.onednn_linear() and bool(torch.backends.mkldnn.enabled)


# --- which GEMMs ----------------------------------------------------------------------------

_GEMMS = {aten.mm.default: (0, 1), aten.addmm.default: (1, 2)}


def planned(gm: fx.GraphModule, mode: str) -> Set[str]:
    """The names of ``gm``'s ``mm``/``addmm`` nodes to compute in the real form under ``mode``.

    Only complex64 CPU GEMMs of static shapes qualify; under ``"auto"`` each
    shape is timed once (:func:`choose`).
    """
    if mode == "aten" or not available():
        return set()
    names = set()
    for node in gm.graph.nodes:
        operands = _GEMMS.get(node.target) if node.op == "call_function" else None
        if operands is None:
            continue
        vals = [getattr(node.args[i], "meta", {}).get("val") for i in operands]
        if not all(isinstance(v, torch.Tensor) and v.dtype == torch.complex64 and v.device.type == "cpu"
                   and v.dim() == 2 for v in vals):
            continue
        sizes = (*vals[0].shape, vals[1].shape[1])
        if not all(isinstance(s, int) and s > 0 for s in sizes):
            continue
        if mode == "onednn" or choose(*sizes):
            names.add(node.name)
    return names


def choose(m: int, k: int, n: int) -> bool:
    """Whether the real form of a complex64 ``(m x k) @ (k x n)`` is faster here than ATen's GEMM.

    Timed once per shape and thread count in this process, outside any trace,
    on random operands: ATen's ``a @ b`` against oneDNN's real GEMM plus a copy
    of the block form's size (what the fused kernel that builds it writes).
    Sizes above :data:`TIMED_SIZE` are timed at that size (both GEMMs are
    compute-bound there; the smaller size weighs the block's build more, so
    it errs towards ATen).
    """
    if m * k * n < MIN_WORK or not available():
        return False
    m, k, n = (min(s, TIMED_SIZE) for s in (m, k, n))
    key = (m, k, n, torch.get_num_threads())
    if key not in _CHOICES:
        _CHOICES[key] = _timed_choice(m, k, n)
    return _CHOICES[key]


def _timed_choice(m: int, k: int, n: int) -> bool:
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing

    with unset_fake_temporarily(), disable_proxy_modes_tracing(), torch.no_grad():
        g = torch.Generator().manual_seed(0)
        a = torch.randn(m, k, dtype=torch.complex64, generator=g)
        b = torch.randn(k, n, dtype=torch.complex64, generator=g)
        x = torch.view_as_real(a).reshape(m, 2 * k)
        w = torch.randn(2 * n, 2 * k, dtype=torch.float32, generator=g)
        t_aten = _best_time(lambda: a @ b)
        t_real = _best_time(lambda: onednn_linear(x, w)) + _best_time(w.clone)
    real = t_real <= MARGIN * t_aten
    log.info("ptc.complex: complex64 GEMM %dx%dx%d: ATen %.3f ms, oneDNN real form %.3f ms: %s",
             m, k, n, t_aten * 1e3, t_real * 1e3, "real form" if real else "ATen")
    return real


def _best_time(fn, *, rounds: int = 3, budget_s: float = 0.01) -> float:
    """The best of ``rounds`` mean times of ``fn()`` over repeats that take about ``budget_s``."""
    fn()
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-7)
    repeats = max(1, min(100, int(budget_s / once)))
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        best = min(best, (time.perf_counter() - start) / repeats)
    return best


# --- the real form ---------------------------------------------------------------------------


def _rows(a: Pair) -> torch.Tensor:
    """``a`` (``m x k``) as the real ``m x 2k`` matrix of its interleaved values: a view of
    :func:`_bits` where those lie row-major, else a contiguous copy of them."""
    bits = _bits(a)
    if not bits.is_contiguous() or bits.stride(-1) != 1:  # a size-1 dim lets is_contiguous pass any stride
        bits = aten.clone(bits, memory_format=torch.contiguous_format)
    return aten.view.dtype(bits, torch.float32)


def _bits(p: Pair) -> torch.Tensor:
    """The int64 bits of the complex64 values of ``p``: a view of the tensor that holds them
    where it has no conj/neg bit (any strides), else joined from the parts."""
    z = p.readable() if p.has_source or p.same_values is not None else None
    if z is not None and not z.is_conj() and not z.is_neg():
        return aten.view.dtype(z, torch.int64)
    return join_bits(p.re, p.im)


#: the sign bit of a complex64 element's imaginary part, in its int64 bits
_IMAG_SIGN = torch.iinfo(torch.int64).min


def _block(b: Pair) -> torch.Tensor:
    """The ``2n x 2k`` real weight of ``b`` (``k x n``): ``w[2j + s, 2i + t]`` is
    ``b.real[i, j]`` where ``s == t``, ``-b.imag[i, j]`` where ``(s, t) == (0, 1)`` and
    ``b.imag[i, j]`` where ``(s, t) == (1, 0)``.

    Row ``2j`` holds ``conj(b[:, j])`` and row ``2j + 1`` holds ``1j * conj(b[:, j])``,
    interleaved; both are made from each element's 64 bits at once (one kernel)::

        bits = b.T.view(int64)                          # low half: real part, high half: imaginary
        row0 = bits ^ (1 << 63)                         # (re, -im): the imaginary sign bit flipped
        row1 = (bits << 32) | ((bits >> 32) & 0xFFFFFFFF)  # (im, re): the halves swapped
    """
    k, n = b.shape
    bits = aten.permute(_bits(b), [1, 0])[:, None, :]  # (n, 1, k)
    row0 = torch.bitwise_xor(bits, _IMAG_SIGN)
    row1 = torch.bitwise_or(torch.bitwise_left_shift(bits, 32),
                            torch.bitwise_and(torch.bitwise_right_shift(bits, 32), 0xFFFFFFFF))
    s = torch.arange(2, device=b.device).view(2, 1)
    rows = aten.clone(torch.where(s == 0, row0, row1), memory_format=torch.contiguous_format)  # (n, 2, k)
    return aten.view(aten.view.dtype(rows, torch.float32), [2 * n, 2 * k])


def mm(ctx, a, b):
    """``mm(a, b)`` for complex64 pairs, in the real form (see the module docstring)."""
    if not isinstance(a, Pair) or not isinstance(b, Pair) or a.dtype != torch.complex64 or b.dtype != a.dtype:
        return NotImplemented
    if a.ndim != 2 or b.ndim != 2 or a.device.type != "cpu" or 0 in (*a.shape, *b.shape):
        return NotImplemented
    m, n = a.shape[0], b.shape[1]
    out = onednn_linear(_rows(a), _block(b))
    return Pair.of(aten.view_as_complex(aten.view(out, [m, n, 2])))


def addmm(ctx, self_, a, b, *, beta=1, alpha=1):
    """``addmm``, i.e. ``beta * self + alpha * (a @ b)``, with the product from :func:`mm`
    (:func:`ptc.complex.gemv.scaled_sum`: ``beta == 0`` ignores ``self`` as in eager)."""
    from ptc.complex.gemv import scaled_sum

    if isinstance(beta, torch.Tensor) or isinstance(alpha, torch.Tensor):
        return NotImplemented
    y = mm(ctx, a, b)
    return NotImplemented if y is NotImplemented else scaled_sum(y, self_, beta, alpha)


#: the real form of each GEMM op :func:`planned` picks from (``_GEMMS``: its operands' positions)
FORMS = {aten.mm.default: mm, aten.addmm.default: addmm}
