"""Fault-tolerant data-parallel training on a :class:`FaultTolerantGroup`.

A few lines turn an existing loop into one that survives crashed, hung and
joining workers::

    ft = init_fault_tolerant()                       # see ptc.distributed.ft.group
    trainer = Trainer(ft, model, optimizer)          # or Trainer(..., ddp=True) and use trainer.model
    while trainer.step < total_steps:
        trainer.run_step(lambda info: loss_fn(trainer.model(batch(info.step, info.worker_id))).backward())

:meth:`Trainer.run_step` is equivalent to the following, where every
collective may raise PeerFailure::

    while True:
        if needs_sync: sync_state()          # after every generation change
        zero the gradients; compute(info)     # local forward + backward
        flat = [*grads, vote=1, join_pending, *digits(step)]  # in the gradients' own dtype
        allreduce(flat)                       # one collective carries gradients and the vote
        if sum(vote) == size and sum(digits) == size * digits(step):  # every member contributed to this very step
            grads = flat_grads / size; before_step(info); optimizer.step(); step += 1
        if sum(join_pending): grow()          # every member saw the same sum: same step boundary
        return
    # on PeerFailure: recover() (or rejoin() when fenced), needs_sync = True, and the same step again

Commit rule: a member applies step ``s`` only if its allreduce of ``s``
completed, which means every member of the generation contributed the same
step; a member whose allreduce failed does not apply it.  Both can happen in
one failure (the collective finished on some ranks before the peer died), so
after every generation change :meth:`Trainer.sync_state` makes the state
identical: among the members that were in the previous generation, the
lowest-ranked one with the most committed steps is the source, and if any
member's step or state checksum differs, the source broadcasts its model,
optimizer and step to all (a joiner always receives it).  A committed step
is therefore never lost, and no step is applied by some members only.  A
worker that was fenced (declared hung) and comes back rejoins as a new
member and takes the group's state, even if it had applied a step the others
abandoned.  Afterwards the state checksums are compared again: they must be
equal on every member (checked, :class:`StateDivergence` otherwise).

What the source broadcasts, so that a joiner (or a member that was behind)
cannot be told apart from the others afterwards: the model (parameters and
buffers), the optimizer's state dict, the step and the history, each
``extra_state`` object's state dict (LR schedulers, a GradScaler, a
stateful sampler), and, with ``sync_rng=True`` (the default), the source's
global random number generators: torch's CPU generator, numpy's global
``RandomState`` (when numpy is importable) and Python's ``random``.
Receiving it is equivalent to::

    model.load_state_dict(source.model.state_dict()); optimizer.load_state_dict(...)
    step, history = source.step, source.history
    for obj, src in zip(extra_state, source.extra_state): obj.load_state_dict(src.state_dict())
    torch.set_rng_state(source_torch_rng); numpy.random.set_state(source_numpy_rng); random.setstate(source_python_rng)

The random states are not part of the checksum: a generation change in
which no state moves (everyone was in sync) leaves each member its own
streams, and code drawing different amounts on different members (per-worker
augmentation) does not force a broadcast.  Pass ``sync_rng=False`` where each
worker's streams are meant to differ (seeded per worker) and must stay so;
CUDA generators and ``torch.Generator``/``numpy.random.Generator`` objects of
your own are never moved (put such an object in ``extra_state`` through a
small wrapper with ``state_dict``/``load_state_dict``).

The gradients travel in their own dtype, as with DDP (complex ones as their
real view; a model mixing dtypes is sent as float64), and the vote travels
with them in that dtype: its sums are small integers, exact in any float
dtype, and the step is split into digits small enough that ``size`` of them
add up exactly (see :func:`vote_flags`).

With ``ddp=True`` the model is wrapped in torch's ``DistributedDataParallel``
on a process-local group, with a communication hook that runs each gradient
bucket's allreduce on the fault-tolerant group (one bucket carries the
vote); a crash inside the gradient allreduce makes the hook hand the
buckets back unreduced and the step is not committed, so backward never
fails.  Each bucket's allreduce starts as soon as DDP hands it over,
overlapping the rest of backward as with DDP's own hook, and runs in place
in DDP's bucket like DDP's own (only the bucket the vote rides with is
copied: the previous step's smallest, or the last, when under 4 MiB; an
abandoned one ends before the next attempt touches a gradient; see
:meth:`ptc.distributed.ft.transports.PythonHook.start`).  A model whose
gradients fit in one small bucket (under ``DDP_HOOK_MIN_BYTES``, 512 KiB, and
DDP's bucket cap) has nothing to overlap: it gets no hook, DDP runs as under
``no_sync()``, and the Trainer reduces the gradients after backward as it does
without DDP (a comm hook in Python costs more than such a model's whole
allreduce).  The hook runs
in C++ (:mod:`ptc.distributed.ft.native`: no Python per bucket, each bucket
averaged by the backend's thread when its allreduce completes, pending ones
released by the coordinator's news) or in Python, with the same collectives
and the same bits: ``ddp_hook="auto"`` takes the C++ one where it is built and
serves the model (float32/float64 parameters on the CPU, and no Flight
Recorder capturing through ptc's method wrapper, which would not see its
collectives), ``"native"`` builds it or raises, ``"python"`` keeps Python's.
With a hook the gradients are set to None before each attempt (as
``optimizer.zero_grad()`` does): DDP copies each fresh gradient into its bucket
and points ``p.grad`` at it.  The gradients are views
of DDP's buckets (``gradient_as_bucket_view=True``, which spares DDP two
copies of every gradient per step); ``ddp_options`` are passed on to
``DistributedDataParallel`` (``bucket_cap_mb``, ``find_unused_parameters``,
or ``gradient_as_bucket_view=False``; not ``process_group``).  DDP's
``forward_sync_buffers`` (on by default) is honoured over the fault-tolerant
group: before every forward, each member's module buffers (batch-norm
statistics...) become rank 0's, as with DDP; ``forward_sync_buffers=False``
leaves each member its own.  Without ``ddp=True`` buffers are each member's
own between generation changes, like parameters they are made equal by
:meth:`Trainer.sync_state` after one.
"""

from __future__ import annotations

import io
import threading
import time
import weakref
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch

from ptc.distributed.ft.group import GROW_GRACE_S, FaultTolerantGroup, Fenced
from ptc.distributed.ft.transports import AfterBackward, NativeHook, PythonHook, comm_hook
from ptc.distributed.ft.vote import WireBuffer, as_real, read_summed_vote, vote_values
from ptc.distributed.ft.vote import read_vote, vote_flags, wire_dtype  # noqa: F401 - this module's names too
from ptc.errors import PeerFailure, PtcError, PtcTypeError, PtcValueError

# With ddp=True, a model whose gradients take fewer bytes than this (and fit in one bucket of DDP's
# bucket cap) gets no comm hook: DDP would hand them over as one bucket at the very end of backward,
# so nothing could overlap, while a comm hook written in Python costs about 0.1-0.2 ms per step here
# (measured: what torch's own Python allreduce hook costs).  DDP then runs as under no_sync() and the
# Trainer reduces the gradients after backward, with the vote, as it does without DDP.
DDP_HOOK_MIN_BYTES = 512 * 1024


class StateDivergence(PtcError, RuntimeError):
    """Members' states differ after a synchronisation (a bug, never expected)."""


@dataclass(frozen=True)
class StepInfo:
    """What ``compute`` gets: the step to compute and who computes it."""

    step: int
    rank: int
    size: int
    worker_id: int
    generation: int


def state_checksum(tensors: List[torch.Tensor], step: int) -> int:
    """CRC32 over the bytes of ``tensors`` and ``step``: equal iff bit-identical (up to CRC collisions)."""
    crc = zlib.crc32(int(step).to_bytes(8, "little", signed=True))
    for t in tensors:
        t = t.detach().contiguous().cpu().reshape(-1)  # 1-d: a 0-d tensor has no byte view (Adam's step, BN's count)
        crc = zlib.crc32(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"", crc)
    return crc


def rng_state() -> Dict[str, Any]:
    """This process's global random states (torch's CPU generator, numpy's global ``RandomState`` when
    numpy is importable, Python's ``random``) as tensors, ints, floats and strings: what
    ``torch.load(weights_only=True)`` accepts.  :func:`set_rng_state` restores it."""
    import random

    version, internal, gauss_next = random.getstate()
    state: Dict[str, Any] = {"torch": torch.get_rng_state(),
                             "python": {"version": int(version), "state": [int(x) for x in internal],
                                        "gauss_next": None if gauss_next is None else float(gauss_next)}}  # fmt: skip
    try:
        import numpy
    except ImportError:
        return state
    name, keys, pos, has_gauss, cached = numpy.random.get_state(legacy=True)
    state["numpy"] = {"name": str(name), "keys": torch.from_numpy(numpy.asarray(keys, dtype=numpy.int64)),
                      "pos": int(pos), "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}  # fmt: skip
    return state


def set_rng_state(state: Dict[str, Any]) -> None:
    """Make this process's global random states :func:`rng_state`'s ``state`` (numpy's only where
    both sides have numpy)."""
    import random

    torch.set_rng_state(state["torch"])
    py = state["python"]
    random.setstate((py["version"], tuple(int(x) for x in py["state"]), py["gauss_next"]))
    if state.get("numpy") is None:
        return
    try:
        import numpy
    except ImportError:
        return
    np_state = state["numpy"]
    numpy.random.set_state((np_state["name"], np_state["keys"].numpy().astype(numpy.uint32), np_state["pos"],
                            np_state["has_gauss"], np_state["cached_gaussian"]))  # fmt: skip


class Trainer:
    """Fault-tolerant training steps for ``model`` and ``optimizer`` on ``group``.

    ``step`` counts committed steps.  ``history`` lists, per committed step,
    ``(step, generation, members)`` (worker ids whose gradients were averaged),
    which is enough to replay the run in one process.  ``report_steps=True``
    logs a ``commit`` event at the coordinator per committed step (timelines).
    ``extra_state``: more objects with ``state_dict()`` and ``load_state_dict()``
    (LR schedulers, a GradScaler, a data sampler's position) that travel with
    the model and the optimizer whenever :meth:`sync_state` moves state (to a
    joiner, to a member that missed a commit); they are not part of the
    checksum, so they must follow from the committed steps (as a scheduler
    stepped once per step does).  ``sync_rng``: whether the source's global
    random states (torch's CPU generator, numpy's global ``RandomState``,
    Python's ``random``) travel with that state and replace the receivers'
    (see the module docstring); every member should pass the same.  State
    can be sent from inside the source's :meth:`run_step`, after its commit
    but before what its caller does after ``run_step`` returns: keep a
    scheduler in line with the step (``if scheduler.last_epoch < trainer.step:
    scheduler.step()`` after each ``run_step``), or update objects in
    ``before_step``, which runs before the state can move.
    """

    def __init__(self, group: FaultTolerantGroup, model: torch.nn.Module, optimizer: torch.optim.Optimizer, *,
                 ddp: bool = False, ddp_options: Optional[Dict[str, Any]] = None, ddp_hook: str = "auto",
                 report_steps: bool = False, extra_state: Sequence[Any] = (),
                 sync_rng: bool = True) -> None:  # fmt: skip
        if not isinstance(group, FaultTolerantGroup):
            raise PtcTypeError(f"group: expected a FaultTolerantGroup, got {type(group).__name__}")
        if not isinstance(model, torch.nn.Module):
            raise PtcTypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise PtcTypeError(f"optimizer: expected a torch.optim.Optimizer, got {type(optimizer).__name__}")
        if isinstance(extra_state, (str, bytes)) or not isinstance(extra_state, Sequence):
            raise PtcTypeError(f"extra_state: expected a list of stateful objects, got {type(extra_state).__name__}")
        for i, obj in enumerate(extra_state):
            if not (callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))):
                raise PtcTypeError(f"extra_state[{i}]: expected an object with state_dict() and load_state_dict() "
                                   f"(an LR scheduler, a GradScaler), got {type(obj).__name__}")  # fmt: skip
        if not isinstance(sync_rng, bool):
            raise PtcTypeError(f"sync_rng: expected a bool, got {type(sync_rng).__name__}")
        self.extra_state = list(extra_state)
        self.sync_rng = sync_rng
        self.group = group
        self.module = model
        self.optimizer = optimizer
        self.step = 0
        self.report_steps = report_steps
        self.history: List[tuple] = []
        self.syncs: List[Dict[str, Any]] = []
        self._needs_sync = True
        self._params = [p for p in model.parameters() if p.requires_grad]
        self._numels = [as_real(p).numel() for p in self._params]
        self._dtypes = {as_real(p).dtype for p in self._params}
        self._wire_buffers: Dict[Any, WireBuffer] = {}  # see _filled_wire
        self._hook_abandoned: List[Any] = []  # Works of failed steps that reduce in DDP's buckets in place
        if ddp_options is not None and not ddp:
            raise PtcValueError("ddp_options: given without ddp=True")
        if ddp_hook not in ("auto", "native", "python"):
            raise PtcValueError(f"ddp_hook = {ddp_hook!r}: expected 'auto', 'native' or 'python'")
        if ddp_hook != "auto" and not ddp:
            raise PtcValueError(f"ddp_hook = {ddp_hook!r}: given without ddp=True")
        if "process_group" in (ddp_options or {}):
            raise PtcValueError("ddp_options: process_group is the Trainer's own (a process-local one; see ddp=True)")
        self._ddp_sync_buffers = False  # DDP's forward_sync_buffers, done by the Trainer (_wrap_ddp)
        self._ddp_hook = False  # ddp=True with ptc's comm hook (else the gradients are reduced after backward)
        self._native: Any = None  # the native hook's state (ft/native.cpp), when DDP runs it
        self.model: torch.nn.Module = self._wrap_ddp(model, ddp_options or {}, ddp_hook) if ddp else model
        # how the gradients reach the group (see ptc.distributed.ft.transports)
        self._transport: Any
        if self._native is not None:
            (dtype,) = self._dtypes
            self._transport = NativeHook(self._params, dtype)
        elif self._ddp_hook:
            self._transport = PythonHook(self._params)
        else:
            self._transport = AfterBackward(self._params, self._numels, self._dtypes)

    # --- state ---------------------------------------------------------------

    def _state_tensors(self) -> List[torch.Tensor]:
        tensors = list(self.module.state_dict().values())
        for state in self.optimizer.state.values():
            tensors += [v for v in state.values() if isinstance(v, torch.Tensor)]
        return tensors

    def checksum(self) -> int:
        """This member's state checksum (model, optimizer state, step)."""
        return state_checksum(self._state_tensors(), self.step)

    def sync_state(self) -> None:
        """Make every member's state equal to the source's (see the module docstring)."""
        ft = self.group
        gen = ft._current()
        continuing = ft.previous is not None and self.group.worker_id in ft.previous.members
        # one max-reduction picks the source: the most committed steps among continuing members, then the lowest rank
        span = 1 << 20
        key = self.step * span + (span - 1 - ft.rank) if continuing else -1
        crc = self.checksum()
        stats = torch.tensor([key, -self.step, crc, -crc, self.step], dtype=torch.int64)
        ft.allreduce(stats, "max")
        best_key, low, crc_max, crc_min, high = int(stats[0]), -int(stats[1]), int(stats[2]), -int(stats[3]), int(stats[4])
        if best_key < 0:
            best, source = -1, 0  # nobody has a past: everyone starts fresh; take rank 0's
        else:
            best, source = best_key // span, span - 1 - best_key % span
        in_sync = crc_max == crc_min and low == high and (best == -1 or best == low) and not gen.joined
        moved = 0
        if not in_sync:  # (in sync: the reduction above already proved the checksums equal)
            moved = self._broadcast_state(source)
            crc = self.checksum()
            check = torch.tensor([crc, -crc], dtype=torch.int64)
            ft.allreduce(check, "max")
            if int(check[0]) != -int(check[1]):
                raise StateDivergence(f"state checksums differ after synchronising generation {gen.number}")
        self.syncs.append({"generation": gen.number, "source": source, "bytes": moved, "step": self.step})
        ft.event("state_synced", gen=gen.number, source_rank=source, bytes=moved, step=self.step)
        self._needs_sync = False

    def _broadcast_state(self, source: int) -> int:
        ft = self.group
        payload = b""
        if ft.rank == source:
            buffer = io.BytesIO()
            torch.save({"model": self.module.state_dict(), "optimizer": self.optimizer.state_dict(), "step": self.step,
                        "history": self.history, "extra": [obj.state_dict() for obj in self.extra_state],
                        "rng": rng_state() if self.sync_rng else None}, buffer)  # fmt: skip
            payload = buffer.getvalue()
        length = torch.tensor([len(payload)], dtype=torch.int64)
        ft.broadcast(length, source)
        data = torch.zeros(int(length[0]), dtype=torch.uint8)
        if ft.rank == source:
            data.copy_(torch.frombuffer(bytearray(payload), dtype=torch.uint8))
        ft.broadcast(data, source)
        if ft.rank != source:
            state = torch.load(io.BytesIO(data.numpy().tobytes()), weights_only=True)
            if len(state["extra"]) != len(self.extra_state):
                raise PtcValueError(f"extra_state: the source (rank {source}) has {len(state['extra'])} objects, this "
                                    f"member {len(self.extra_state)}; every member must pass the same kinds")  # fmt: skip
            self.module.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.step = int(state["step"])
            self.history = [(int(s), int(g), tuple(int(m) for m in ms)) for s, g, ms in state["history"]]
            for obj, obj_state in zip(self.extra_state, state["extra"]):
                obj.load_state_dict(obj_state)
            if self.sync_rng and state.get("rng") is not None:
                set_rng_state(state["rng"])
        return int(length[0])

    # --- steps -----------------------------------------------------------------

    def run_step(self, compute: Callable[[StepInfo], Any],
                 before_step: Optional[Callable[[StepInfo], Any]] = None) -> int:  # fmt: skip
        """Run ``compute`` (forward and backward) until the step is committed
        by the group; returns the number of attempts it took.

        ``before_step(info)``, if given, runs once the step is committed, with
        the averaged gradients in place, right before ``optimizer.step()``:
        the place for what a DDP loop does between ``backward()`` and
        ``step()``, such as ``clip_grad_norm_`` (inside ``compute`` it would
        see this member's own gradients, not their mean).

        Returns early (0 attempts, or without this step) when a state sync
        moved this member to the group's step (a joiner, or a member that
        missed a commit): ``self.step`` changed, so the caller's
        ``while trainer.step < n`` loop decides again, like every member.
        """
        attempts = 0
        committed = False
        while True:
            try:
                if self._needs_sync:
                    before = self.step
                    self.sync_state()  # also right after a grow, so joiners and members meet here
                    if self.step != before:
                        return attempts  # took the group's state: the caller re-checks its loop condition
                if committed:
                    return attempts
                attempts += 1
                committed = self._attempt(compute, before_step)
                if committed and not self._needs_sync:
                    return attempts
            except Fenced:
                self.group.rejoin()
                self._needs_sync = True
            except PeerFailure:
                self._recover()

    def _recover(self) -> None:
        try:
            self.group.recover()
        except Fenced:
            self.group.rejoin()
        self._needs_sync = True

    def _attempt(self, compute: Callable[[StepInfo], Any], before_step: Optional[Callable[[StepInfo], Any]] = None) -> bool:
        """One try at the current step: zero, compute, reduce with the vote, commit (or not)."""
        ft = self.group
        gen = ft._current()
        rank, size = gen.rank_of(ft.worker_id), len(gen.members)
        info = StepInfo(self.step, rank, size, ft.worker_id, gen.number)
        transport = self._transport
        transport.zero(self)
        if self._hook_abandoned:
            self._drain_abandoned()
        ft.fault_point("step", self.step, rank)
        if self._ddp_sync_buffers:
            self._broadcast_buffers(rank)
        transport.compute(self, compute, info, gen)
        summed, vote = transport.reduce(self, info)
        return self._commit(info, gen, summed, vote, before_step)

    def _commit(self, info: StepInfo, gen: Any, summed: List[float], vote: List[int],
                before_step: Optional[Callable[[StepInfo], Any]]) -> bool:  # fmt: skip
        """Apply the step if every member voted for this very step; grow when a member asked to."""
        ft = self.group
        size = info.size
        votes, join, same_step = read_summed_vote(summed, vote, size)
        committed = votes == size and same_step
        if committed:
            if before_step is not None:
                before_step(info)
            self.optimizer.step()
            self.history.append((self.step, gen.number, tuple(gen.members)))
            self.step += 1
            if self.report_steps:
                ft.event("commit", step=self.step, gen=gen.number, size=size)
        else:
            self._needs_sync = True
        if join > 0:
            ft.grow()
            self._needs_sync = True
        return committed

    def _filled_wire(self, key: Any, parts: List[torch.Tensor], dtype: torch.dtype, vote: List[int],
                     device: torch.device) -> WireBuffer:  # fmt: skip
        """A buffer of the Trainer's own for one allreduce, holding ``torch.cat(parts)`` (1-d,
        converted to ``dtype``), then ``vote``.

        The buffer ``key`` had last time is used again (a fresh multi-megabyte buffer per step
        costs page faults), but the callers put a buffer back under its key only after its
        collective completed: one that failed may still be written by its abandoned collective,
        so it is never handed out again (its Work keeps it alive).
        """
        numel = sum(part.numel() for part in parts)
        buffer = self._wire_buffers.pop(key, None)
        if buffer is None or not buffer.fits(numel, len(vote), dtype, device):
            buffer = WireBuffer(key, numel, len(vote), dtype, device)
        if len(parts) == 1:
            buffer.head.copy_(parts[0])
        elif parts:
            torch.cat(parts, out=buffer.head)
        if vote:
            buffer.write_vote(vote)
        return buffer

    def _allreduce_wire(self, key: Any, parts: List[torch.Tensor], dtype: torch.dtype, vote: List[int]) -> WireBuffer:
        """The sum over the group of :meth:`_filled_wire`'s buffer."""
        buffer = self._filled_wire(key, parts, dtype, vote, parts[0].device if parts else torch.device("cpu"))
        self.group._allreduce_owned(buffer.flat)
        self._wire_buffers[key] = buffer  # completed: safe to use again
        return buffer

    def _drain_abandoned(self) -> None:
        """Wait until every abandoned in-place allreduce has ended, so none writes into a gradient
        again.  They end as soon as the group moved to a newer generation (recover() does);
        one still running after the group's timeout is an error, never a silent race."""
        start = time.monotonic()
        limit = start + self.group._timeout.total_seconds()
        works, self._hook_abandoned = self._hook_abandoned, []
        for i, work in enumerate(works):
            while not work.is_completed():
                if time.monotonic() > limit:
                    self._hook_abandoned = works[i:]
                    raise PtcError("ddp=True: an abandoned gradient allreduce is still running after the group's "
                                   "timeout; it could write into the gradients (call recover() first)")  # fmt: skip
                time.sleep(0.001)
        self.group.event("abandoned_allreduces_ended", count=len(works),
                         waited_ms=round((time.monotonic() - start) * 1e3, 3))  # fmt: skip

    def _vote(self, dtype: torch.dtype) -> List[int]:
        """What this member adds to the step's allreduce after its gradients (see :func:`vote_values`)."""
        return vote_values(self.step, self.group.join_pending, self.group.size, dtype)

    # --- DDP -------------------------------------------------------------------

    def _wrap_ddp(self, model: torch.nn.Module, options: Dict[str, Any], hook: str) -> torch.nn.Module:
        from torch.distributed import HashStore
        from torch.nn.parallel import DistributedDataParallel

        from ptc import _compat

        import datetime

        local = _compat.gloo_process_group(HashStore(), 0, 1, datetime.timedelta(seconds=60))
        # gradients as views of DDP's buckets: DDP copies no gradient into a bucket and back
        ddp = DistributedDataParallel(model, process_group=local, **{"gradient_as_bucket_view": True, **options})
        grad_bytes = sum(as_real(p).numel() * as_real(p).element_size() for p in self._params)
        one_small_bucket = grad_bytes < DDP_HOOK_MIN_BYTES and grad_bytes <= getattr(ddp, "bucket_bytes_cap", -1)
        self._ddp_hook = not one_small_bucket
        self._native = self._native_hook(hook) if self._ddp_hook else None
        if self._native is not None:
            from ptc.distributed.ft import native

            native.load().register(ddp.reducer, self._native)  # the reducer keeps the state weakly
            self.group._listen_for_news(self._on_news)
        elif self._ddp_hook:
            # the hook's state refers to the trainer weakly: a strong reference would make a cycle
            # (trainer -> DDP -> reducer -> state) that only the garbage collector frees, possibly during
            # interpreter shutdown, when the C++ reducer's destructor can no longer release Python objects
            ddp.register_comm_hook(weakref.ref(self), comm_hook)
        else:  # one small bucket at the end of backward: reduced by the Trainer after it (DDP_HOOK_MIN_BYTES)
            ddp.require_backward_grad_sync = False  # what DDP's no_sync() sets
        # DDP would broadcast the module buffers over its process-local group, which changes nothing:
        # the Trainer does it over the fault-tolerant group instead (_broadcast_buffers)
        self._ddp_sync_buffers = bool(ddp.will_sync_module_buffers())  # on, and the module has buffers (as DDP)
        ddp.forward_sync_buffers = False
        self._local_pg = local
        return ddp

    @property
    def ddp_hook(self) -> Optional[str]:
        """Which communication hook DDP runs: ``"native"`` (C++), ``"python"``, or None (no hook:
        no DDP, or gradients reduced after backward, see ``DDP_HOOK_MIN_BYTES``)."""
        if not self._ddp_hook:
            return None
        return "native" if self._native is not None else "python"

    def _native_hook(self, choice: str) -> Any:
        """The native hook's state (ft.native), or None for the Python hook: ``"auto"`` takes the
        native one when it is built and can serve this model, ``"native"`` builds it or raises."""
        if choice == "python":
            return None
        dtypes = {p.dtype for p in self._params}
        recorder = self.group._recorder
        if len(dtypes) != 1 or not dtypes <= {torch.float32, torch.float64}:
            why = f"parameters of dtype {sorted(map(str, dtypes))} (it serves one of float32, float64)"
        elif any(p.device.type != "cpu" for p in self._params):
            why = "parameters off the CPU (it serves gloo's CPU tensors)"
        elif recorder is not None and recorder.capture != "hooks":
            why = ("a Flight Recorder capturing through ptc's method wrapper is attached to the group: it would not "
                   "see the collectives C++ issues")  # fmt: skip
        else:
            from ptc.distributed.ft import native

            module = native.load(build=choice == "native")
            return None if module is None else module.HookState()
        if choice == "native":
            raise PtcValueError(f"ddp_hook = 'native': {why}; use ddp_hook='python'")
        return None

    def _on_news(self) -> None:
        """News on the link thread: a pending native bucket must not wait for a dead peer.  Its
        allreduces end now, with the local gradients (never committed), unless nobody of this
        generation failed: then they get ``GROW_GRACE_S`` to complete, as the Python hook's wait."""
        ft, native = self.group, self._native
        gen = ft.generation
        if native is None or gen is None or not ft.stale():
            return
        reason = f"allreduce: aborted, generation {gen.number} was replaced"
        if ft._nobody_failed(gen):
            timer = threading.Timer(GROW_GRACE_S, native.abort, args=(reason, native.attempt()))
            timer.daemon = True
            timer.start()
        else:
            native.abort(reason)

    def _broadcast_buffers(self, rank: int) -> None:
        """DDP's ``forward_sync_buffers`` on the fault-tolerant group: every member's module
        buffers (those DDP does not ignore) become rank ``0``'s, in one broadcast of their bytes."""
        ignored = self.model.parameters_to_ignore
        buffers = [b for name, b in self.module.named_buffers() if name not in ignored]
        if not buffers:
            return
        with torch.no_grad():
            flat = torch.cat([b.detach().reshape(-1).view(torch.uint8) for b in buffers])
            self.group._broadcast_owned(flat, 0)
            if rank == 0:
                return  # the source: its buffers are what was sent
            offset = 0
            for b in buffers:
                n = b.numel() * b.element_size()
                part = flat[offset:offset + n]
                offset += n
                if b.is_contiguous():
                    b.view(-1).view(torch.uint8).copy_(part)
                else:
                    b.copy_(part.clone().view(b.dtype).view(b.shape))
