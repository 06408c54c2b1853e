"""Attaching a recorder to groups, and what it does per call (``_Attaching``: a part of ``FlightRecorder``).

:meth:`FlightRecorder.attach` hands :mod:`ptc.distributed.flight_recorder.capture`
the functions it calls for every collective on a group (``_calls_for``: the
hot path, with the Python core) or the native core's attachment; a group
moves to a new generation with :meth:`FlightRecorder.on_reconfigure`.  Works
that nobody waits on in Python are found complete here (``_discover_head``,
``_discover_all``), and a call that failed is closed by ``_fr_done``.
"""

from __future__ import annotations

import datetime
import os
import sys
import threading
import time
import warnings
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

import torch

import ptc
from ptc.distributed.flight_recorder import capture as fr_capture
from ptc.distributed.flight_recorder.dumps import _DONE, _Entry, _Group, _short
from ptc.distributed.flight_recorder.ops import IN_PLACE_KINDS, KINDS, P2P_KINDS, kind_name
from ptc.errors import PtcTypeError, PtcValueError

if TYPE_CHECKING:
    from ptc.distributed.flight_recorder.recorder import FlightRecorder

_PTC_DIR = os.path.dirname(os.path.abspath(ptc.__file__))  # ptc's own frames are left out of recorded stacks
get_ident = threading.get_ident

# kind as capture reports it (a HookOpName name; a member also works) -> (canonical name, is p2p, in place), or
# False for kinds the recorder skips; filled on first sight, read on every call
_KIND_INFO: Dict[Any, Any] = {}


def _kind_info(kind: Any) -> Any:
    name = kind_name(kind)
    info = (name, name in P2P_KINDS, name in IN_PLACE_KINDS) if name in KINDS else False
    _KIND_INFO[kind] = info
    return info


def _stack(depth: int) -> List[Dict[str, Any]]:
    """The caller's Python stack, innermost first, without ptc's own frames."""
    frames: List[Dict[str, Any]] = []
    frame = sys._getframe(1)
    while frame is not None and len(frames) < depth:
        code = frame.f_code
        if not code.co_filename.startswith(_PTC_DIR):
            frames.append({"name": code.co_name, "filename": code.co_filename, "line": frame.f_lineno})
        frame = frame.f_back
    return frames


def _work_error(work: Any) -> Optional[BaseException]:
    """The error a finished Work ended with, or None, read through its future.

    A Work without a future (gloo's send/recv) reports None: its error is seen
    only where someone waits on it.  (Calling ``wait()`` again instead is not
    safe: a gloo recv waits for a second message.)
    """
    try:
        future = work.get_future()
    except Exception:  # noqa: BLE001 - this Work has no future
        return None
    try:
        future.value()
    except Exception as exc:  # noqa: BLE001 - the collective's own error
        return exc
    return None


def _resolve_group(group: Any, argument: str = "group") -> Any:
    dist = torch.distributed
    if group is None:
        if not dist.is_initialized():
            raise PtcValueError(
                f"{argument}=None means the default process group, but torch.distributed is not "
                "initialized; call torch.distributed.init_process_group first or pass a group"
            )
        return dist.group.WORLD
    if not isinstance(group, dist.ProcessGroup):
        if group is dist.GroupMember.NON_GROUP_MEMBER:
            raise PtcValueError(f"{argument}: this process is not a member of that group")
        raise PtcTypeError(
            f"{argument}: expected a torch.distributed.ProcessGroup or None, got {type(group).__name__}"
        )
    return group


def _group_timeout_s(pg: Any) -> float:
    """The group's own timeout, as the backend was configured; c10d's default if unknown."""
    for device in getattr(pg, "_device_types", ()) or ():
        try:
            timeout = pg._get_backend(device).options._timeout
        except Exception:  # noqa: BLE001 - backends without options (fake, custom)
            continue
        if isinstance(timeout, datetime.timedelta) and timeout.total_seconds() > 0:
            return timeout.total_seconds()
    return torch.distributed.default_pg_timeout.total_seconds()


def _backend_name(pg: Any) -> str:
    try:
        name = str(pg.name())
    except Exception:  # noqa: BLE001
        name = ""
    if name in ("", "custom", "undefined"):
        for device in getattr(pg, "_device_types", ()) or ():
            try:
                return type(pg._get_backend(device)).__name__
            except Exception:  # noqa: BLE001
                continue
    return name or "unknown"


def _default_ranks(pg: Any) -> Optional[List[int]]:
    """Global ranks of ``pg``'s members in group-rank order, where c10d knows them."""
    try:
        return [int(r) for r in torch.distributed.get_process_group_ranks(pg)]
    except Exception:  # noqa: BLE001 - a group built by hand is not registered with c10d
        return None


def _check_ranks(ranks: Any, argument: str) -> List[int]:
    if isinstance(ranks, (str, bytes)) or not isinstance(ranks, Sequence):
        raise PtcTypeError(f"{argument}: expected a list of global ranks, got {type(ranks).__name__}")
    out = []
    for i, r in enumerate(ranks):
        if isinstance(r, bool) or not isinstance(r, int):
            raise PtcTypeError(f"{argument}[{i}]: expected an int rank, got {type(r).__name__}")
        if r < 0:
            raise PtcValueError(f"{argument}[{i}] = {r}: ranks are >= 0")
        out.append(int(r))
    if len(set(out)) != len(out):
        raise PtcValueError(f"{argument} = {out}: ranks must be distinct")
    return out


class _Attaching:
    """``FlightRecorder``'s attaching and recording (its state is set up by ``FlightRecorder.__init__``)."""

    def attach(
        self,
        group: Any = None,
        *,
        name: Optional[str] = None,
        desc: Optional[str] = None,
        ranks: Optional[Sequence[int]] = None,
        generation: int = 0,
    ) -> "FlightRecorder":
        """Start recording the calls issued on ``group`` (default: the default group).

        ``name``/``desc`` default to the group's c10d ``group_name`` and
        ``group_desc``; a group built by hand has no name and needs one that
        every member passes alike.  ``ranks`` are the members' global ranks in
        group-rank order (default: what c10d knows; required for a group c10d
        does not know).  ``generation`` starts the group in that generation.
        Returns the recorder, so ``FlightRecorder().attach()`` chains.
        """
        self._check_open()
        pg = _resolve_group(group)
        if id(pg) in self._boxes:
            raise PtcValueError(f"group {self._boxes[id(pg)][0].name!r} is already attached to this recorder")
        generation = self._check_generation(generation, "generation")
        base = name if name is not None else str(getattr(pg, "group_name", "") or "")
        if not isinstance(base, str) or not base:
            raise PtcValueError(
                "name: this process group has no c10d group_name (it was built by hand); "
                "pass name=, the same on every member"
            )
        if desc is None:
            desc = str(getattr(pg, "group_desc", "") or "") or "undefined"
        if self._rank is None:
            self._rank = self._own_global_rank(pg, ranks)
        record = self._new_group(pg, base, desc, ranks, generation, "ranks")
        self._start(pg, record)
        return self

    def _start(self, pg: Any, record: "_Group") -> None:
        box = [record]  # the group's current generation; on_reconfigure swaps it in place
        if self._tap is not None:
            attachment = self._tap.attachment(record.pg_id)
            calls = fr_capture.Calls(attachment.begin, attachment.started, attachment.done, self._fr_internal_error)
            self._detach[id(pg)] = fr_capture.attach_native(pg, attachment, calls, self._mechanism)
            self._attachments[id(pg)] = attachment
        else:
            calls = self._calls_for(box)
            self._detach[id(pg)] = fr_capture.attach(pg, calls, self._mechanism)
        self._boxes[id(pg)] = box
        self._calls[id(pg)] = calls

    def detach(self, group: Any = None) -> None:
        """Stop recording ``group``; what was recorded stays in the buffer and in dumps."""
        pg = _resolve_group(group)
        detach = self._detach.pop(id(pg), None)
        if detach is None:
            raise PtcValueError("group: not attached to this recorder")
        detach()
        self._boxes.pop(id(pg), None)
        self._calls.pop(id(pg), None)
        self._attachments.pop(id(pg), None)

    def on_reconfigure(
        self,
        generation: int,
        *,
        group: Any = None,
        new_group: Any = None,
        ranks: Optional[Sequence[int]] = None,
    ) -> None:
        """Move ``group`` to a new generation after a reconfigure.

        Calls recorded from now on are named ``"<name>@gen<generation>"`` with
        sequence ids from 1, and automatic dumps are re-armed.  ``new_group`` is
        the process group that replaces ``group`` when the reconfigure built a
        new one (torch without ``_reconfigure``); the recorder then records it
        instead.  ``ranks``: the new members' global ranks in new group-rank
        order; needed when membership changed (it can only be guessed when the
        size stayed the same and c10d knows the group).
        """
        self._check_open()
        pg = _resolve_group(group)
        box = self._boxes.get(id(pg))
        if box is None:
            raise PtcValueError("group: not attached to this recorder; attach it first")
        old = box[0]
        generation = self._check_generation(generation, "generation")
        if generation <= old.generation:
            raise PtcValueError(
                f"generation = {generation}: must be greater than the group's current generation {old.generation}"
            )
        target = pg if new_group is None else _resolve_group(new_group, "new_group")
        if ranks is None:
            if target.size() != len(old.ranks):
                raise PtcValueError(
                    f"ranks: the group now has {target.size()} members (it had {len(old.ranks)}); pass "
                    "ranks=, the new members' global ranks in group-rank order"
                )
            ranks = _default_ranks(target) if target is not pg else None
            if ranks is None or len(ranks) != target.size():
                ranks = old.ranks
        record = self._new_group(target, old.base_name, old.desc, ranks, generation, "ranks")
        if target is pg:
            box[0] = record
            if self._tap is not None:
                self._attachments[id(pg)].set_slot(record.pg_id)
        else:
            self.detach(pg)
            self._start(target, record)

    def _check_generation(self, generation: Any, argument: str) -> int:
        if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
            raise PtcValueError(f"{argument} = {generation!r}: expected an int >= 0")
        return generation

    def _own_global_rank(self, pg: Any, ranks: Optional[Sequence[int]]) -> int:
        dist = torch.distributed
        if ranks is not None:
            return int(list(ranks)[pg.rank()])
        if dist.is_initialized():
            return int(dist.get_rank())
        return int(pg.rank())

    def _new_group(self, pg: Any, base: str, desc: str, ranks: Optional[Sequence[int]],
                   generation: int, argument: str) -> _Group:  # fmt: skip
        size = pg.size()
        group_rank = pg.rank()
        if ranks is None:
            ranks = _default_ranks(pg)
            if ranks is None:
                raise PtcValueError(
                    f"{argument}: c10d does not know this group's members (it was built by hand); "
                    "pass ranks=, the members' global ranks in group-rank order"
                )
        ranks = _check_ranks(ranks, argument)
        if len(ranks) != size:
            raise PtcValueError(f"{argument} = {ranks}: the group has {size} members, got {len(ranks)} ranks")
        if ranks[group_rank] != self._rank:
            raise PtcValueError(
                f"{argument} = {ranks}: entry {group_rank} (this process's group rank) should be this "
                f"recorder's rank {self._rank}, is {ranks[group_rank]}"
            )
        timeout_s = self._timeout_s if self._timeout_s is not None else _group_timeout_s(pg)
        with self._lock:
            record = _Group(pg, len(self._all_groups), base, desc, ranks, generation,
                            _backend_name(pg), group_rank, timeout_s)  # fmt: skip
            self._all_groups.append(record)
            if self._tap is not None:
                self._tap.set_slot(record.pg_id, record.timeout_ns)
        return record

    # --- the sink interface (called by capture on the issuing thread) ---------

    def _calls_for(self, box: List[_Group]) -> fr_capture.Calls:
        """The recording functions for one attached group.

        This is the hot path, run for every collective: it keeps (shape, dtype)
        pairs, counters and times, binds every name it needs locally, and
        leaves everything else to the moment a dump is written.
        """
        append = self._buffer.append
        record_ids = self._record_ids
        pending = self._pending
        popleft = pending.popleft
        watched = self._watched
        thread_names = self._thread_names
        kinds = _KIND_INFO
        record_stacks, stack_depth = self._record_stacks, self._stack_depth
        time_ns = time.time_ns
        done = self._fr_done

        def begin(kind: Any, inputs: Any, outputs: Any, peer: int) -> Optional[_Entry]:
            info = kinds.get(kind)
            if info is None:
                info = _kind_info(kind)
            if not info:
                self._skipped += 1
                return None
            if pending:
                self._discover_head()
            group = box[0]
            entry = _Entry()
            entry.group = group
            entry.kind = info[0]
            if len(inputs) == 1:  # the usual case, without a comprehension's frame
                t = inputs[0]
                entry.inputs = ((t.shape, t.dtype),)
            else:
                entry.inputs = [(t.shape, t.dtype) for t in inputs]
            # in-place collectives' outputs are their inputs (describe() reads them there)
            entry.outputs = () if info[2] or not outputs else [(t.shape, t.dtype) for t in outputs]
            entry.peer = peer
            entry.record_id = next(record_ids)
            if info[1]:
                entry.is_p2p = True
                entry.p2p_seq_id = group.p2p_seq = next(group.p2p_ids)
                entry.collective_seq_id = group.collective_seq
            else:
                entry.is_p2p = False
                entry.collective_seq_id = group.collective_seq = next(group.collective_ids)
                entry.p2p_seq_id = group.p2p_seq
            entry.thread = thread = get_ident()
            if thread not in thread_names:
                thread_names[thread] = threading.current_thread().name
            entry.state = "scheduled"
            entry.time_started_ns = entry.time_completed_ns = entry.error = entry.work = entry.thread_name = None
            entry.timed_out = False
            entry.frames = _stack(stack_depth) if record_stacks else None
            entry.time_created_ns = time_ns()
            append(entry)
            return entry

        def started(entry: _Entry, work: Any) -> None:
            entry.time_started_ns = time_ns()
            if entry.state == "scheduled":
                entry.state = "started"
            if not entry.is_p2p:
                group = entry.group
                if entry.collective_seq_id > group.last_started:
                    group.last_started = entry.collective_seq_id
            if work is not None:
                entry.work = work
                watched[id(work)] = (waited, entry)
                pending.append(entry)

        def waited(entry: _Entry, error: Optional[BaseException]) -> None:
            """``done`` as the Work.wait wrapper calls it (it already took the Work out of
            the watched table): the common success case spelled out, the rest to ``done``."""
            if error is not None or entry.state != "started":
                return done(entry, error)
            entry.time_completed_ns = time_ns()
            entry.work = None
            entry.state = "completed"
            if pending and pending[0] is entry:
                popleft()
            if not entry.is_p2p:
                group = entry.group
                if entry.collective_seq_id > group.last_completed:
                    group.last_completed = entry.collective_seq_id

        return fr_capture.Calls(begin, started, done, self._fr_internal_error)

    def _fr_internal_error(self, exc: BaseException) -> None:
        self._internal_errors += 1
        if self._internal_errors == 1:
            warnings.warn(
                f"ptc FlightRecorder: recording failed ({_short(exc)}); the collective went ahead",
                RuntimeWarning,
                stacklevel=2,
            )

    def _discover_head(self) -> None:
        """Close the oldest pending entries whose Work is done; stop at the first unfinished one.

        Works that nobody waits on in Python (the DDP reducer's, those used
        through futures) are found complete here, at the next recorded call;
        the watchdog (:meth:`_discover_all`) finds the rest.
        """
        pending = self._pending
        while pending:
            try:
                entry = pending[0]
            except IndexError:
                return
            work = entry.work
            if work is not None and entry.state not in _DONE:
                if not work.is_completed():
                    return
                self._fr_done(entry, _work_error(work))
            try:
                if pending[0] is entry:
                    pending.popleft()
            except IndexError:
                return

    def _discover_all(self) -> None:
        """Close every started entry whose Work is done, asking the Work's future too (the
        only completion signal some backends, like ``fake``, give)."""
        for entry in list(self._buffer):
            work = entry.work
            if work is None or entry.state in _DONE:
                continue
            try:
                if work.is_completed() or work.get_future().done():
                    self._fr_done(entry, _work_error(work))
            except Exception as exc:  # noqa: BLE001
                self._fr_internal_error(exc)

    def _fr_done(self, entry: _Entry, error: Optional[BaseException] = None) -> None:
        """Close ``entry``: its call raised, or its Work finished (``error``: how it failed)."""
        if entry.state in _DONE:
            return
        entry.time_completed_ns = time.time_ns()
        work, entry.work = entry.work, None
        if work is not None:
            self._watched.pop(id(work), None)
            pending = self._pending
            if pending and pending[0] is entry:  # the usual case: spare the next call a look
                pending.popleft()
        group = entry.group
        if error is None:
            entry.state = "completed"
            if not entry.is_p2p and entry.collective_seq_id > group.last_completed:
                group.last_completed = entry.collective_seq_id
            return
        entry.state = "failed"
        entry.error = _short(error)
        if self.dump_on_failure:
            try:
                self._auto_dump(group, "failure", f"failure: {entry.describe()} failed: {entry.error}")
            except Exception as exc:  # noqa: BLE001 - never turn a failed collective into a recorder error
                self._fr_internal_error(exc)
