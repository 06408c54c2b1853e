"""``Pair``: a complex value carried as two real tensors while a graph is rewritten.

A ``Pair(re, im)`` stands for the complex tensor ``re + 1j*im``. ``re`` and
``im`` are real tensors of the same shape (float32 for complex64, float64 for
complex128). A pair read from a complex tensor ``z`` reads ``z``'s own
interleaved memory, no copy: for complex64 on the CPU through the 64 bits of
each element (``z.view(int64)``: the low 32 bits are the real part's, the high
32 the imaginary part's), otherwise as two strided views of ``view_as_real(z)``
(see :func:`split`).

A pair may also remember a complex tensor that already holds its values (its
*source*: a graph input, the output of a library kernel such as ``mm`` or an
FFT, or a view of one). ``Pair.complex()`` then returns that tensor instead of
interleaving ``re``/``im`` into a new buffer, so library kernels and graph
outputs cross the boundary without copies.
"""

from __future__ import annotations

import sys
from typing import Callable, Optional, Sequence

import torch

aten = torch.ops.aten

__all__ = ["Pair", "PAIRED_DTYPES", "real_dtype", "complex_dtype", "is_paired", "interleave", "split", "join",
           "join_bits", "storage_view", "from_storage", "store"]

#: complex dtypes rewritten into pairs; anything else (complex32) stays on ATen.
PAIRED_DTYPES = {torch.complex64: torch.float32, torch.complex128: torch.float64}
_COMPLEX_OF = {v: k for k, v in PAIRED_DTYPES.items()}


def real_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for complex64, float64 for complex128; real dtypes map to themselves."""
    return PAIRED_DTYPES.get(dtype, dtype)


def complex_dtype(dtype: torch.dtype) -> torch.dtype:
    """complex64 for float32, complex128 for float64 (and for every other real dtype)."""
    if dtype in PAIRED_DTYPES:
        return dtype
    return _COMPLEX_OF.get(dtype, torch.complex64 if dtype in (torch.float16, torch.bfloat16) else torch.complex128)


def is_paired(value) -> bool:
    """A tensor whose dtype the rewrite turns into a pair."""
    return isinstance(value, torch.Tensor) and value.dtype in PAIRED_DTYPES


class Pair:
    """The complex tensor ``re + 1j*im`` as two real tensors (see the module docstring)."""

    __slots__ = ("re", "im", "dtype", "_source", "imag_only", "value", "same_values")

    def __init__(
        self,
        re: torch.Tensor,
        im: torch.Tensor,
        dtype: Optional[torch.dtype] = None,
        source: Optional[Callable[[], torch.Tensor]] = None,
    ) -> None:
        if dtype is None:
            dtype = complex_dtype(torch.promote_types(re.dtype, im.dtype))
        rdt = real_dtype(dtype)
        if re.dtype != rdt:
            re = re.to(rdt)
        if im.dtype != rdt:
            im = im.to(rdt)
        if re.shape != im.shape:
            shape = torch.broadcast_shapes(re.shape, im.shape)
            re, im = re.expand(shape), im.expand(shape)
        self.re, self.im, self.dtype = re, im, dtype
        self._source = source
        self.imag_only = False  # re is exactly 0 where im is finite (theta * 1j), see rules._exp
        self.value: Optional[complex] = None  # the Python number of a 0-d constant pair
        #: a tensor with this pair's values that is not its own (the input a ``clone`` copied):
        #: library kernels may read it, it is never handed out as a result (see :meth:`readable`)
        self.same_values: Optional[Callable[[], torch.Tensor]] = None

    # --- construction -------------------------------------------------------

    @classmethod
    def of(cls, z: torch.Tensor) -> "Pair":
        """The pair reading ``z``'s own memory (``view_as_real``), with ``z`` as its source.

        Conjugate and negative bits are honoured: ``view_as_real`` refuses a
        conj-bit tensor, so the bit is stripped with a view and folded into the
        signs of the two parts.
        """
        base, sign_re, sign_im = z, 1.0, 1.0
        if z.is_conj():
            base, sign_im = aten._conj(base), -sign_im
        if base.is_neg():
            base, sign_re, sign_im = aten._neg_view(base), -sign_re, -sign_im
        re, im = split(base)
        if sign_re < 0:
            re = aten.neg(re)
        if sign_im < 0:
            im = aten.neg(im)
        return cls(re, im, z.dtype, source=lambda: z)

    @classmethod
    def constant(cls, value: complex, like: torch.Tensor, dtype: torch.dtype) -> "Pair":
        """A 0-d pair holding the Python number ``value``."""
        rdt = real_dtype(dtype)
        value = complex(value)
        re = torch.scalar_tensor(value.real, dtype=rdt, device=like.device)
        im = torch.scalar_tensor(value.imag, dtype=rdt, device=like.device)
        out = cls(re, im, dtype)
        out.value = value
        return out

    @classmethod
    def promote(cls, x, dtype: torch.dtype, like: Optional[torch.Tensor] = None) -> "Pair":
        """``x`` (a Pair, a real tensor or a Python number) as a pair of complex ``dtype``."""
        if isinstance(x, Pair):
            if x.dtype == dtype:
                return x
            return cls(x.re, x.im, dtype)
        if isinstance(x, torch.Tensor):
            if x.is_complex():  # a complex dtype that is not paired (complex32): its own values
                return cls.of(x.to(dtype))
            rdt = real_dtype(dtype)
            re = x.to(rdt)
            return cls(re, torch.zeros_like(re), dtype)
        return cls.constant(x, like, dtype)

    # --- properties ---------------------------------------------------------

    @property
    def shape(self) -> torch.Size:
        return self.re.shape

    @property
    def device(self) -> torch.device:
        return self.re.device

    @property
    def ndim(self) -> int:
        return self.re.dim()

    @property
    def has_source(self) -> bool:
        return self._source is not None

    def with_source(self, source: Optional[Callable[[], torch.Tensor]]) -> "Pair":
        self._source = source
        return self

    # --- leaving pair form --------------------------------------------------

    def complex(self, like: Optional[torch.Tensor] = None) -> torch.Tensor:
        """This value as an interleaved complex tensor.

        The source when there is one (no copy). Otherwise ``re`` and ``im`` are
        interleaved by one store (:func:`join`) that Inductor fuses into the
        kernel that computes them; with ``like`` the new tensor gets ``like``'s strides
        (dense layouts only), so compiled outputs keep eager's memory format.
        """
        if self._source is not None:
            z = self._source()
            if z.dtype == self.dtype:
                return z
        perm = _dense_order(like) if like is not None else None
        re, im = self.re, self.im
        if perm is not None:
            re, im = aten.permute(re, perm), aten.permute(im, perm)
        z = join(re, im, self.dtype)
        if perm is not None:
            inverse = [0] * len(perm)
            for i, p in enumerate(perm):
                inverse[p] = i
            z = aten.permute(z, inverse)
        source = z
        self._source = lambda: source
        return z

    def readable(self) -> torch.Tensor:
        """A complex tensor with this value for a kernel that only reads it (no copy where one exists).

        The source; else the tensor a ``clone``/``contiguous``/``resolve_conj``
        of it was made from (``same_values``; it may carry a conj bit and
        any strides); else :meth:`complex`.
        """
        if self._source is None and self.same_values is not None:
            z = self.same_values()
            if z.dtype == self.dtype:
                return z
        return self.complex()

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor], source_fn=None) -> "Pair":
        """Apply a real, linear, layout-only ``fn`` to both parts (views, data movement).

        ``source_fn`` (the same op on a complex tensor) keeps a view of the
        source, so views of inputs stay views of inputs.
        """
        out = Pair(fn(self.re), fn(self.im), self.dtype)
        if source_fn is not None and self._source is not None:
            parent = self._source
            out._source = lambda: source_fn(parent())
        return out

    def __repr__(self) -> str:
        return f"Pair(shape={tuple(self.shape)}, dtype={self.dtype}, source={self._source is not None})"


def through_bits(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether complex values of ``dtype`` on ``device`` are split and joined through int64 bits.

    Inductor's C++ backend loads a stride-2 plane of ``view_as_real`` one float
    at a time into a stack buffer, and stores one the same way; loading the
    int64 view is one contiguous vector load, and taking its halves is a shift
    and a truncating conversion. Measured on a 2-core AVX-512 CPU: the fused
    kernel of ``abs(z*w + conj(z)*exp(1j*theta))`` (1M complex64) 1.8 ms
    against 4.1 ms with stride-2 loads; with complex output 2.1 against 4.3 ms.
    complex128 has no 128-bit integer to do the same with.
    """
    return dtype == torch.complex64 and device.type == "cpu" and sys.byteorder == "little"


def split(z: torch.Tensor):
    """``(z.real, z.imag)`` of a complex tensor without conj or neg bit, read from ``z``'s memory.

    Equivalent to ``view_as_real(z).unbind(-1)``; for complex64 on the CPU the
    same values come from the int64 view of each element::

        bits = z.view(int64)
        re = bits.to(int32).view(float32)          # the low 32 bits (truncation)
        im = (bits >> 32).to(int32).view(float32)  # the high 32 bits

    Bits are bits: NaN payloads, signed zeros and denormals come through unchanged.
    """
    return _parts(storage_view(z))


def join(re: torch.Tensor, im: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A new complex ``dtype`` tensor ``re + 1j*im`` (both parts already of its real dtype).

    Equivalent to ``view_as_complex(stack([re, im], -1))``; for complex64 on
    the CPU each element's 64 bits are assembled from the parts' bits and
    stored at once (see :func:`split`)::

        lo = re.view(int32).to(int64) & 0xFFFFFFFF
        hi = im.view(int32).to(int64) << 32
        z = (lo | hi).view(complex64)
    """
    if re.shape != im.shape:
        shape = torch.broadcast_shapes(re.shape, im.shape)
        re, im = re.expand(shape), im.expand(shape)
    if through_bits(dtype, re.device):
        return aten.view.dtype(join_bits(re, im), dtype)
    return aten.view_as_complex(interleave(re, im))


def join_bits(re: torch.Tensor, im: torch.Tensor) -> torch.Tensor:
    """The int64 bits of the complex64 values ``re + 1j*im`` (float32 parts of one shape): what
    :func:`join` stores, before its view as complex64."""
    lo = aten.view.dtype(re, torch.int32).to(torch.int64) & 0xFFFFFFFF
    hi = aten.view.dtype(im, torch.int32).to(torch.int64) << 32
    return lo | hi


def interleave(re: torch.Tensor, im: torch.Tensor) -> torch.Tensor:
    """``stack([re, im], -1)`` written as one pointwise ``where`` over the last (size-2) dim.

    Inductor lowers ``stack`` as two strided stores into aliases of one buffer;
    the ``where`` form is a single store through one pointer, which measured
    ~30% faster for a complex multiply on the C++ backend.
    """
    lane = torch.arange(2, device=re.device)
    return torch.where(lane == 0, re.unsqueeze(-1), im.unsqueeze(-1))


def _dense_order(like: torch.Tensor) -> Optional[Sequence[int]]:
    """The dim permutation that makes ``like`` contiguous, or None if it is contiguous or not dense."""
    if like is None or like.dim() < 2:
        return None
    try:
        if like.is_contiguous():
            return None
        sizes, strides = list(like.shape), list(like.stride())
    except Exception:  # noqa: BLE001 - symbolic or odd layouts: use the default
        return None
    try:
        order = sorted(range(len(sizes)), key=lambda d: (-int(strides[d]), -d))
    except Exception:  # noqa: BLE001 - unbacked symbols cannot be ordered
        return None
    expected = 1
    for d in reversed(order):
        if int(sizes[d]) != 1 and int(strides[d]) != expected:
            return None
        expected *= int(sizes[d])
    return order


# --- a complex input read and written through a real view of its memory ------------------------


def storage_view(z: torch.Tensor) -> torch.Tensor:
    """``z``'s memory as a real tensor: ``z.view(int64)`` for complex64 on the CPU (see
    :func:`split`), else ``view_as_real(z)`` (``[..., 2]`` planes). ``z`` has no conj or neg bit."""
    if through_bits(z.dtype, z.device):
        return aten.view.dtype(z, torch.int64)
    return aten.view_as_real(z)


def _parts(view: torch.Tensor):
    """The real and imaginary parts held in a :func:`storage_view` (see :func:`split`)."""
    if view.dtype == torch.int64:
        re = aten.view.dtype(view.to(torch.int32), torch.float32)
        im = aten.view.dtype((view >> 32).to(torch.int32), torch.float32)
        return re, im
    return aten.select(view, -1, 0), aten.select(view, -1, 1)


def from_storage(view: torch.Tensor, dtype: torch.dtype) -> Pair:
    """The pair of complex ``dtype`` held in ``view`` (what :func:`storage_view` made), with the
    complex tensor over the same memory as its source."""
    re, im = _parts(view)
    if view.dtype == torch.int64:
        return Pair(re, im, dtype, source=lambda: aten.view.dtype(view, dtype))
    return Pair(re, im, dtype, source=lambda: aten.view_as_complex(view))


def store(view: torch.Tensor, value: Pair) -> Pair:
    """``view.copy_(storage_view(value))``: ``value`` (broadcast to the view's complex shape)
    written into the memory :func:`storage_view` exposed, as real values; returns the
    stored pair (``value`` broadcast)."""
    shape = view.shape if view.dtype == torch.int64 else view.shape[:-1]
    re, im = value.re.expand(shape), value.im.expand(shape)
    aten.copy_(view, join_bits(re, im) if view.dtype == torch.int64 else interleave(re, im))
    return Pair(re, im, value.dtype)
