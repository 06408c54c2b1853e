"""The commit vote that rides with a step's gradients, and the buffer they travel in.

Every member adds ``[1, join_pending, *digits(step)]`` (:func:`vote_values`)
to the step's allreduce, in the gradients' own dtype (:func:`wire_dtype`), so
one collective carries the gradients and the vote; the summed values tell
whether every member voted for this very step (:func:`read_summed_vote`).
See :mod:`ptc.distributed.ft.train` for the commit rule they serve.
"""

from __future__ import annotations

import functools
import math
from typing import Any, List, Set, Tuple

import torch

from ptc.errors import PtcValueError


def as_real(t: torch.Tensor) -> torch.Tensor:
    """``t``, or its real view (a trailing dimension of 2) if it is complex."""
    return torch.view_as_real(t) if t.is_complex() else t


@functools.lru_cache(maxsize=None)
def _digit_bits(dtype: torch.dtype, size: int) -> int:
    """Bits per step digit: ``size`` digits below ``2**bits`` sum exactly in ``dtype`` (whose
    significand, implicit bit included, holds every integer up to ``2**exact``)."""
    exact = round(-math.log2(torch.finfo(dtype).eps)) + 1
    return exact - size.bit_length()


def wire_dtype(dtypes: Set[torch.dtype], size: int) -> torch.dtype:
    """The dtype a step's allreduce carries gradients of ``dtypes`` in, among ``size`` members.

    Their own dtype when there is one (what DDP sends: float32 gradients are not
    doubled on the wire), float64 when they mix dtypes or when the dtype is too
    narrow to sum the vote exactly (bfloat16 past 127 members, float16 past 1023).
    """
    if len(dtypes) == 1:
        (dtype,) = dtypes
        if dtype.is_floating_point and _digit_bits(dtype, size) >= 1:
            return dtype
    return torch.float64


def _step_digits(step: int, size: int, dtype: torch.dtype) -> List[int]:
    bits = _digit_bits(dtype, size)
    if bits < 1:
        raise PtcValueError(f"dtype {dtype} cannot carry the vote of {size} members exactly (use wire_dtype)")
    mask = (1 << bits) - 1
    return [(step >> (bits * i)) & mask for i in range(-(-63 // bits))]


def vote_values(step: int, join_pending: bool, size: int, dtype: torch.dtype) -> List[int]:
    """``[1, join_pending, *digits]``: this member's vote, its join flag and its step.

    The step (at most 63 bits) is written in base ``2**b`` with the largest ``b``
    for which ``size`` digits add up exactly in ``dtype`` (float64: 2 digits,
    float32: 3, bfloat16 with 4 members: 13), lowest digit first, so that the
    allreduce's sums are exact integers whatever the order of the additions.
    """
    return [1, 1 if join_pending else 0, *_step_digits(step, size, dtype)]


def vote_flags(step: int, join_pending: bool, size: int, dtype: torch.dtype) -> torch.Tensor:
    """:func:`vote_values` as a tensor of ``dtype`` (what a member adds to the step's allreduce)."""
    return torch.tensor(vote_values(step, join_pending, size, dtype), dtype=dtype)


def read_vote(total: torch.Tensor, size: int, step: int) -> Tuple[int, int, bool]:
    """From the summed flags of :func:`vote_flags`: (votes, join flags, every member voted ``step``).

    Equivalent to ``sum(steps) == size * step``, digit by digit: equal steps always pass.
    """
    return read_summed_vote(total.tolist(), vote_values(step, False, size, total.dtype), size)


def read_summed_vote(summed: List[float], vote: List[int], size: int) -> Tuple[int, int, bool]:
    """:func:`read_vote` of the sums ``summed`` of ``size`` members' votes, ``vote`` being this member's
    (:func:`vote_values`, its step digits are what every member's must be)."""
    same_step = all(v == size * d for v, d in zip(summed[2:], vote[2:]))
    return int(summed[0]), int(summed[1]), same_step


def _host_view(t: torch.Tensor) -> Any:
    """A NumPy array sharing ``t``'s memory, or None (not on the CPU, a dtype NumPy lacks: bfloat16)."""
    if t.device.type != "cpu":
        return None
    try:
        return t.numpy()
    except (TypeError, RuntimeError):  # bfloat16 (TypeError), NumPy missing (RuntimeError)
        return None


class WireBuffer:
    """One allreduce's buffer, kept under ``key`` for the next step's: ``flat`` is ``head`` (what
    is averaged: gradients, or a copy of a DDP bucket) followed by ``tail`` (the vote, or nothing).

    The vote is written and read through a NumPy view of the tail where the tail has one (on the
    CPU, in a dtype NumPy knows), which spends no torch call on it; elsewhere through torch.
    """

    __slots__ = ("key", "flat", "head", "tail", "votes", "written", "_host")

    def __init__(self, key: Any, numel: int, vote: int, dtype: torch.dtype, device: torch.device) -> None:
        self.key = key
        self.flat = torch.empty(numel + vote, dtype=dtype, device=device)
        self.head, self.tail = self.flat[:numel], self.flat[numel:]
        self.votes = vote  # elements of the vote (0: none)
        self.written: List[int] = []  # the vote written last (read_vote gives its sums after the allreduce)
        self._host = _host_view(self.tail)

    def fits(self, numel: int, vote: int, dtype: torch.dtype, device: torch.device) -> bool:
        return (self.head.numel() == numel and self.votes == vote and self.flat.dtype == dtype
                and self.flat.device == device)  # fmt: skip

    def write_vote(self, values: List[int]) -> None:
        self.written = values
        if self._host is not None:
            self._host[:] = values
        else:
            self.tail.copy_(torch.tensor(values, dtype=self.tail.dtype))

    def read_vote(self) -> List[float]:
        return self._host.tolist() if self._host is not None else self.tail.tolist()

