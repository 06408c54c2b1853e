"""How a step's gradients reach the group: the Trainer's gradient transports.

A :class:`~ptc.distributed.ft.train.Trainer` picks one transport when it is
built and runs every attempt at a step through it::

    transport.zero(trainer)                          # the gradients, ready for compute
    ...                                              # the Trainer: abandoned allreduces ended, fault point, buffers
    transport.compute(trainer, compute, info, gen)   # forward and backward
    summed, vote = transport.reduce(trainer, info)   # gradients averaged; the vote's sums, this member's vote
    ...                                              # the Trainer commits the step if every member voted for it

``AfterBackward``  no communication hook (no DDP, or DDP with one small
                   bucket, see ``DDP_HOOK_MIN_BYTES``): after backward the
                   gradients and the vote go in one allreduce, from one flat
                   buffer the gradients are views of where they share a dtype
                   and a device, else parameter by parameter.
``PythonHook``     DDP runs :func:`comm_hook`: each bucket's allreduce starts
                   when DDP hands the bucket over and overlaps the rest of
                   backward; one of them carries the vote.
``NativeHook``     the same in C++ (:mod:`ptc.distributed.ft.native`): no
                   Python per bucket.

The collectives and the arithmetic are the same in all three (the same bits).
A transport keeps no reference to its Trainer (DDP's hook state refers to the
Trainer weakly: a strong cycle through DDP's C++ reducer would be freed only
by the garbage collector); the Trainer is passed to every call.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import torch

from ptc.distributed.ft.group import Fenced
from ptc.distributed.ft.vote import as_real, wire_dtype
from ptc.errors import PeerFailure, PtcError

# With ddp=True the step's vote rides with one gradient bucket, copied with the vote appended (one
# collective): the smallest bucket of the previous step when it has at most this many bytes (DDP's
# buckets keep their layout from step to step), else the last one when it is that small; every other
# bucket is reduced in place, in DDP's own buffer.  With no bucket that small the vote goes in an
# allreduce of its own after the last bucket.  Measured on the 2-core test machine (4 workers,
# benchmarks/ft.py's 1.6M-parameter model, blocks in the same processes): that one more 20-byte
# collective cost 2 to 14 points of step time (a collective wakes every worker's threads a few
# times), while copying a bucket costs 64 us per MiB (one thread, warm cache).
VOTE_COPY_MAX_BYTES = 4 * 1024 * 1024

NO_LAST_BUCKET = ("ddp=True: the gradient hook did not run for the last bucket: a parameter got no gradient in this "
                  "step; DDP needs ddp_options={'find_unused_parameters': True} for a model that leaves parameters "
                  "unused")  # fmt: skip

Summed = Tuple[List[float], List[int]]  # (the vote's sums over the members, this member's vote)


class AfterBackward:
    """No comm hook: ``compute`` runs, then the Trainer reduces the gradients with the vote.

    Where the gradients share one dtype and one device they are views of one flat buffer
    (``flat``; ``views`` in parameter order), so a step zeroes, sends and averages them with a
    few torch calls whatever the number of tensors.
    """

    def __init__(self, params: List[torch.Tensor], numels: List[int], dtypes: Set[torch.dtype]) -> None:
        self.params, self.numels, self.dtypes = params, numels, dtypes
        self.flat: Optional[torch.Tensor] = None
        self.views: List[torch.Tensor] = []
        if len(dtypes) == 1 and len({p.device for p in params}) == 1:
            (dtype,) = dtypes
            self.flat = torch.zeros(sum(numels), dtype=dtype, device=params[0].device)
            for p, part in zip(params, self.flat.split(numels)):
                self.views.append(torch.view_as_complex(part.view(*p.shape, 2)) if p.is_complex()
                                  else part.view(p.shape))  # fmt: skip

    def zero(self, trainer: Any) -> None:
        if self.flat is not None:
            self.flat.zero_()
            for p, view in zip(self.params, self.views):
                if p.grad is not view:  # someone replaced it (or set it to None): a view again
                    p.grad = view
        else:  # zeroed in place (no DDP hook: the Trainer reads every p.grad after compute)
            grads = []
            for p in self.params:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                else:
                    grads.append(p.grad)
            if grads:
                torch._foreach_zero_(grads)

    def compute(self, trainer: Any, compute: Callable[[Any], Any], info: Any, gen: Any) -> None:
        compute(info)

    def reduce(self, trainer: Any, info: Any) -> Summed:
        size = info.size
        wire = wire_dtype(self.dtypes, size)
        vote = trainer._vote(wire)
        if self.flat is not None and all(p.grad is v for p, v in zip(self.params, self.views)):
            sent = trainer._allreduce_wire("trainer", [self.flat], wire, vote)
            # the mean, divided straight into the gradients (the same IEEE division as p.grad / size)
            torch.div(sent.head, size, out=self.flat)
        else:  # mixed dtypes, or compute() replaced a gradient: one torch call per parameter
            grads = [as_real(p.grad).reshape(-1).to(wire) for p in self.params]
            sent = trainer._allreduce_wire("trainer", grads, wire, vote)
            for p, summed in zip(self.params, sent.head.split(self.numels)):
                grad = as_real(p.grad)
                torch.div(summed.view_as(grad), size, out=grad)
        return sent.read_vote(), vote


class PythonHook:
    """DDP's buckets reduced by :func:`comm_hook`, each as soon as DDP hands it over.

    ``pending``: the buckets whose allreduce started, waited for by the last bucket's hook;
    ``failure``: what ended this attempt's allreduces; ``flags``: the vote's sums and this
    member's vote once the bucket carrying it completed.
    """

    def __init__(self, params: List[torch.Tensor]) -> None:
        self.params = params
        self.failure: Optional[BaseException] = None
        self.flags: Optional[Summed] = None
        self.pending: List[tuple] = []
        self.vote_sent = False  # this attempt's vote went out with a bucket
        self.vote_index: Optional[int] = None  # the bucket the vote rides with (see start)
        self.bucket_bytes: Dict[int, int] = {}  # DDP's bucket sizes, by index, as last seen

    def zero(self, trainer: Any) -> None:
        # as after optimizer.zero_grad(): DDP copies each fresh gradient into its bucket and points
        # p.grad at it there (gradient_as_bucket_view), which spares a zeroing and an accumulating pass
        for p in self.params:
            p.grad = None
        self.failure, self.flags, self.vote_sent = None, None, False
        if self.pending:  # a backward that stopped before its last bucket: release the rest
            self.finish(trainer, wait=False)

    def compute(self, trainer: Any, compute: Callable[[Any], Any], info: Any, gen: Any) -> None:
        compute(info)

    def reduce(self, trainer: Any, info: Any) -> Summed:
        if self.failure is not None:
            raise self.failure
        if self.flags is None:
            raise PtcError(NO_LAST_BUCKET)
        return self.flags

    def start(self, trainer: Any, index: int, buffer: torch.Tensor, future: Any, last: bool) -> None:
        """Start bucket ``index``'s allreduce; :meth:`finish` waits for it.

        A bucket whose dtype is the wire dtype is reduced in place, in DDP's bucket (the
        gradients themselves, with ``gradient_as_bucket_view``), like DDP's own hook does, unless
        it carries the step's vote: then it travels in a ``Trainer._filled_wire`` buffer with the
        vote appended (one collective), as does a bucket of another dtype.  The vote rides with the
        first bucket that is copied anyway, or with the smallest bucket of the previous step
        (``vote_index``) or the last one, when it has at most ``VOTE_COPY_MAX_BYTES``; a big last
        bucket that finds the vote unsent is reduced in place and the vote follows it in an
        allreduce of its own.  So every step sends the vote exactly once.  In place
        is safe because no abandoned collective outlives the recovery: both engines end a
        replaced generation's pending collectives at once by shutting down its connections (see
        :func:`ptc.distributed.ft.gloo.retire` and ``NativeEngine.connect``),
        and ``Trainer._drain_abandoned`` waits for them before the next attempt touches a gradient.
        """
        ft = trainer.group
        wire = wire_dtype({buffer.dtype}, ft.size)
        nbytes = buffer.numel() * buffer.element_size()
        self.bucket_bytes[index] = nbytes
        copied_anyway = buffer.dtype != wire
        small = nbytes <= VOTE_COPY_MAX_BYTES
        vote_here = not self.vote_sent and (last or copied_anyway or (index == self.vote_index and small))
        in_place = not copied_anyway and not (vote_here and small)
        vote = trainer._vote(wire) if vote_here else []
        self.vote_sent = self.vote_sent or vote_here
        if last:  # where the next step's vote rides: DDP keeps its layout (rebuilt once, after the first step)
            sizes = {i: n for i, n in self.bucket_bytes.items() if i <= index}
            self.bucket_bytes = sizes
            smallest = min(sizes, key=lambda i: (sizes[i], i))
            self.vote_index = smallest if sizes[smallest] <= VOTE_COPY_MAX_BYTES else None
        # (what to reduce, its _filled_wire buffer or None, the bucket it fills or None)
        jobs: List[tuple] = []
        if in_place:
            # this bucket index may have been copied before DDP rebuilt its buckets (after the first
            # step): that copy buffer will not be used again
            trainer._wire_buffers.pop(("bucket", index), None)
            jobs.append((buffer, None, buffer))
            if vote:
                sent = trainer._filled_wire("vote", [], wire, vote, buffer.device)
                jobs.append((sent.flat, sent, None))
        else:
            sent = trainer._filled_wire(("bucket", index), [buffer], wire, vote, buffer.device)
            jobs.append((sent.flat, sent, buffer))
        for n, (flat, sent, bucket) in enumerate(jobs):
            try:
                gen, work = ft._allreduce_owned_start(flat)
            except (PeerFailure, Fenced) as failure:
                self.failure = failure
                if n == 0:  # else the bucket's own allreduce went out: finish() completes its future
                    future.set_result(buffer)
                return
            self.pending.append((gen, work, flat, sent, bucket, future if bucket is not None else None))

    def finish(self, trainer: Any, wait: bool = True) -> None:
        """Wait for the started allreduces in order; average each bucket and complete its future
        (after a failure, or with ``wait=False``: complete them with whatever the bucket holds,
        the step will not be committed).  In-place Works not waited to the end are kept for
        ``Trainer._drain_abandoned``."""
        ft = trainer.group
        pending, self.pending = self.pending, []
        for gen, work, flat, sent, bucket, future in pending:
            completed = False
            try:
                if wait and self.failure is None:
                    ft._await("allreduce", gen, work)
                    completed = True
                    if bucket is not None:
                        if flat is bucket:
                            bucket.div_(ft.size)  # the mean, in place (the same IEEE division)
                        else:
                            torch.div(sent.head, ft.size, out=bucket)  # the mean, in one pass over the bucket
                    if sent is not None:
                        if sent.votes:
                            self.flags = (sent.read_vote(), sent.written)
                        trainer._wire_buffers[sent.key] = sent  # completed: safe to use again
            except (PeerFailure, Fenced) as failure:
                self.failure = failure
            finally:
                if not completed and flat is bucket:
                    trainer._hook_abandoned.append(work)
                if future is not None:
                    future.set_result(bucket)


class NativeHook:
    """DDP's buckets reduced by ptc's C++ hook, registered on DDP's reducer with the Trainer's
    ``_native`` state (the hook's own, see :mod:`ptc.distributed.ft.native`)."""

    def __init__(self, params: List[torch.Tensor], dtype: torch.dtype) -> None:
        self.params, self.dtype = params, dtype
        self._outcome: Optional[Tuple[Optional[str], Optional[List[float]], List[int]]] = None

    def zero(self, trainer: Any) -> None:
        for p in self.params:  # as PythonHook.zero
            p.grad = None

    def compute(self, trainer: Any, compute: Callable[[Any], Any], info: Any, gen: Any) -> None:
        """``compute(info)`` with the native hook serving DDP's buckets."""
        ft, native = trainer.group, trainer._native
        vote = trainer._vote(self.dtype)
        aborted = f"allreduce: generation {gen.number} was aborted" if ft.stale() else ""
        after_issue = ft._count_collective if ft.faults is not None else None
        native.begin(ft._engine.pg, info.size, [float(v) for v in vote], VOTE_COPY_MAX_BYTES, aborted,
                     after_issue)  # fmt: skip
        try:
            compute(info)
        finally:
            error, summed, abandoned = native.end()
            trainer._hook_abandoned.extend(abandoned)
        self._outcome = (error, summed, vote)

    def reduce(self, trainer: Any, info: Any) -> Summed:
        assert self._outcome is not None
        (error, summed, vote), self._outcome = self._outcome, None
        if error is not None:
            raise trainer.group._failure(error)
        if summed is None:
            raise PtcError(NO_LAST_BUCKET)
        return summed, vote


def comm_hook(trainer_ref, bucket):  # no annotations: DDP checks them against its own types
    """DDP communication hook: each bucket is averaged over the fault-tolerant
    group; one of them carries the vote (see :meth:`PythonHook.start`).  After a failure the remaining
    buckets keep their local gradients (the step will not be committed).

    Each bucket's allreduce starts when DDP hands the bucket over, so backward
    goes on computing (and the backend may run several buckets at once); the
    last bucket's hook waits for them all, in order, and completes every
    bucket's future.  DDP reduces buckets in index order, so the last one's
    hook comes after every other."""
    buffer = bucket.buffer()
    future: "torch.futures.Future[torch.Tensor]" = torch.futures.Future()
    trainer = trainer_ref()  # DDP's hook state: a weak reference to the Trainer
    if trainer is None:  # the Trainer is gone: nothing will commit this step
        future.set_result(buffer)
        return future
    last = bucket.is_last()
    hook = trainer._transport
    try:
        if hook.failure is None:
            hook.start(trainer, bucket.index(), buffer, future, last)
        else:
            future.set_result(buffer)
    finally:
        if last:
            hook.finish(trainer)
    return future
