"""What one recorded call looks like in a dump: op names, sizes and dtypes.

Both capture paths (process-group hooks on torch that has them, the method
wrapper elsewhere) hand the recorder the same four things: the op *kind* (the
names of torch's ``HookOpName``: ``ALLREDUCE``, ``SEND`` ...), the input and
output tensors as flat lists, and the root or peer rank (-1 when there is
none).  At call time the recorder keeps only :func:`layouts` of the tensors
(their ``torch.Size`` and dtype, never the tensors); when a dump is written,
:func:`describe` turns them into the fields torch's Flight Recorder dump
format has, so a dump looks the same whichever path recorded it:

* ``profiling_name`` is ``"<backend>:<op>"`` with the op names that torch's
  analyzer (``torchfrtrace``) matches on (``all_reduce``, ``all_gather``,
  ``reduce_scatter``, ``all_to_all``, ``broadcast``, ``reduce``, ``gather``,
  ``scatter``, ``barrier``, ``send``, ``recv``).  Point-to-point names carry
  the group ranks: ``send 0->1`` and ``recv 1<-0``.  ``<backend>`` is the
  backend's name when ``torchfrtrace`` knows it (``gloo``, ``nccl``, ...);
  any other backend (the ``fake`` test backend, custom backends) is written
  as ``gloo`` because the analyzer rejects names it does not know.  The true
  backend name is kept in the entry's ``backend`` field.
* in-place collectives (all_reduce, broadcast, reduce) record their tensors
  as both input and output, as NCCL's recorder does, because the analyzer
  checks ``input_sizes == output_sizes`` for them;
* a list of equally shaped tensors on the gathered side of a gather-like op
  (all_gather's outputs, reduce_scatter's inputs, ...) is recorded as one
  stacked shape ``[n, *shape]``, so list and single-tensor variants of the
  same collective record the same numbers of elements, which is what the
  analyzer's size rules compare.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import torch

__all__ = [
    "IN_PLACE_KINDS",
    "KINDS",
    "P2P_KINDS",
    "STOCK_BACKENDS",
    "OpRecord",
    "describe",
    "dtype_name",
    "kind_name",
    "layouts",
    "profiling_prefix",
]

# HookOpName member -> the op name torchfrtrace matches on.
KINDS: Dict[str, str] = {
    "ALLREDUCE": "all_reduce",
    "BROADCAST": "broadcast",
    "REDUCE": "reduce",
    "ALLGATHER": "all_gather",
    "GATHER": "gather",
    "SCATTER": "scatter",
    "REDUCE_SCATTER": "reduce_scatter",
    "ALLTOALL": "all_to_all",
    "BARRIER": "barrier",
    "SEND": "send",
    "RECV": "recv",
    "SPLIT": "split",
    "NEW_WINDOW": "new_window",
}
P2P_KINDS = frozenset({"SEND", "RECV"})

# Backend prefixes torchfrtrace accepts (components/types.py, class Op).
STOCK_BACKENDS = frozenset({"nccl", "ncclx", "xccl", "gloo", "rccl", "rcclx", "mccl", "hccl"})

IN_PLACE_KINDS = frozenset({"ALLREDUCE", "BROADCAST", "REDUCE"})
_STACK_OUTPUTS = frozenset({"ALLGATHER", "GATHER"})
_STACK_INPUTS = frozenset({"REDUCE_SCATTER", "SCATTER"})

_DTYPE_NAMES: Dict[torch.dtype, str] = {}
_KIND_NAMES: Dict[object, str] = {}

Layout = Tuple[torch.Size, torch.dtype]


def kind_name(kind: object) -> str:
    """``"ALLREDUCE"`` for ``HookOpName.ALLREDUCE`` (or for the string itself)."""
    name = _KIND_NAMES.get(kind)
    if name is None:
        name = kind if isinstance(kind, str) else (getattr(kind, "name", None) or str(kind).rsplit(".", 1)[-1])
        _KIND_NAMES[kind] = name
    return name


def layouts(tensors: Sequence[torch.Tensor]) -> List[Layout]:
    """What the recorder keeps of a call's tensors: (shape, dtype) pairs."""
    return [(t.shape, t.dtype) for t in tensors]


def dtype_name(dtype: torch.dtype) -> str:
    """c10's name for ``dtype`` (``Float``, ``BFloat16``, ``Long``), as native dumps write it."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        try:
            legacy = torch.empty((), dtype=dtype).type()  # e.g. "torch.FloatTensor"
            name = legacy.rsplit(".", 1)[-1][: -len("Tensor")]
        except Exception:  # noqa: BLE001 - dtypes without a legacy tensor type
            name = str(dtype).replace("torch.", "")
        _DTYPE_NAMES[dtype] = name
    return name


def profiling_prefix(backend: str) -> str:
    """The ``<backend>`` part of ``profiling_name`` (see the module docstring)."""
    return backend if backend in STOCK_BACKENDS else "gloo"


# (name, profiling_name, input_sizes, input_dtypes, output_sizes, output_dtypes, is_p2p)
OpRecord = Tuple[str, str, List[List[int]], List[str], List[List[int]], List[str], bool]


def _shapes(pairs: Sequence[Layout]) -> Tuple[List[List[int]], List[str]]:
    return [list(shape) for shape, _ in pairs], [dtype_name(dtype) for _, dtype in pairs]


def _stacked(pairs: Sequence[Layout]) -> Tuple[List[List[int]], List[str]]:
    if len(pairs) > 1:
        shape, dtype = pairs[0]
        if all(p == pairs[0] for p in pairs):
            return [[len(pairs), *shape]], [dtype_name(dtype)]
    return _shapes(pairs)


def describe(
    kind: str,
    inputs: Sequence[Layout],
    outputs: Sequence[Layout],
    peer: int,
    group_rank: int,
    prefix: str,
) -> Optional[OpRecord]:
    """The dump fields of one call, or ``None`` for an op kind the format has no name for.

    ``inputs``/``outputs`` are :func:`layouts` of the call's tensors.
    """
    name = KINDS.get(kind)
    if name is None:
        return None
    if kind in P2P_KINDS:
        pairs = inputs if kind == "SEND" else outputs
        if not pairs:  # a backend that reports the other list
            pairs = outputs if kind == "SEND" else inputs
        sizes, dtypes = _shapes(pairs)
        if kind == "SEND":
            label = f"{prefix}:send {group_rank}->{peer}"
        else:
            label = f"{prefix}:recv {group_rank}<-{peer}"
        return (name, label, sizes, dtypes, sizes, dtypes, True)
    if kind in IN_PLACE_KINDS and not outputs:
        in_sizes, in_dtypes = _shapes(inputs)
        return (name, f"{prefix}:{name}", in_sizes, in_dtypes, in_sizes, in_dtypes, False)
    if kind == "ALLTOALL" or (kind in _STACK_INPUTS and len(outputs) <= 1):
        in_sizes, in_dtypes = _stacked(inputs)
    else:
        in_sizes, in_dtypes = _shapes(inputs)
    if kind == "ALLTOALL" or (kind in _STACK_OUTPUTS and len(inputs) <= 1):
        out_sizes, out_dtypes = _stacked(outputs)
    else:
        out_sizes, out_dtypes = _shapes(outputs)
    return (name, f"{prefix}:{name}", in_sizes, in_dtypes, out_sizes, out_dtypes, False)
