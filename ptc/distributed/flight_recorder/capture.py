"""How collective calls reach a recorder: process-group hooks, or a reversible method wrapper.

A recorder attaches :class:`Calls` to one ``ProcessGroup`` object, four
functions that are told about every call issued through it:

* ``begin(kind, inputs, outputs, peer)`` before the backend sees the call; it
  returns a token (or ``None`` to ignore the call).  ``kind`` is the name of
  a ``HookOpName`` member (``"ALLREDUCE"``), ``inputs``/``outputs``
  are flat tensor lists, ``peer`` is the root or p2p peer as a group rank, -1 if
  none;
* ``started(token, work)`` when the backend returned its ``Work``;
* ``done(token, exc)`` when the call raised (``exc``), or when a ``Work`` the
  recorder watches (:func:`watched_works`) returned from ``Work.wait()`` in
  Python (``exc`` is what ``wait`` raised, or None);
* ``internal_error(exc)`` when one of the others raised: they must not, and
  whatever they do, the user's collective proceeds.

For the Python core, completion times come from ``Work.wait``: while it is
attached, ``torch.distributed.Work.wait`` is wrapped too, and a watched ``Work`` that
returns from it completed (or raises its failure) reports the moment it did,
on the waiting thread; a ``wait(timeout)`` that runs out while the Work goes
on reports nothing.
A done-callback on the Work's future would report the same moment for works
nobody waits on, but it runs in the backend's worker thread and must take the
GIL there; on gloo that hand-off cost 5-15 % of a 1 MB all_reduce loop on two
cores, far over the recorder's budget.  Works never waited in Python (the DDP
reducer's, those consumed through ``get_future()``) are found complete by the
recorder's polling instead (see ``FlightRecorder``).  The native core
(:mod:`ptc.distributed.flight_recorder.native`) adds that callback in C++, where it needs
no GIL, so it leaves ``Work.wait`` alone (:func:`attach_native`).

Two mechanisms, chosen by feature (``ptc._compat.PROCESS_GROUP_HOOKS``):

``"hooks"`` (torch with ``ProcessGroup.register_pre_hook``, e.g. 2.14)
    A pre-hook and a post-hook registered on that one process group under a
    private hook id, removed on detach.  The hooks fire in c10d's dispatcher
    kernels, so every call is seen: ``torch.distributed.*``, direct
    ``ProcessGroup`` methods, and collectives that C++ issues by itself (the
    DDP reducer).  The post-hook does not fire when the backend raises; the
    call's record is then closed as failed when the same thread issues its next
    call on that group.  Building the hooks' arguments costs torch itself some
    microseconds per call.  With the native core the hooks are C++ functions
    registered by the core itself: no Python runs per call.

``"wrapper"`` (any torch; the only choice where hooks are missing, e.g. 2.13)
    While anything is attached to some group this way, the collective methods
    of ``torch.distributed.ProcessGroup`` (``allreduce``, ``broadcast``,
    ``send`` ... every method the ``torch.distributed`` functions end in) are
    replaced by thin wrappers that look the calling group up in a table and
    call the original method straight away for groups nobody is attached to.
    The originals are put back when the last one detaches, so nothing of this
    outlives the recorder and importing ptc changes nothing.  A wrapper around
    one group object is not possible: pybind's ``ProcessGroup`` instances take
    no attributes, and a substitute group object would not be the one that
    ``torch.distributed`` and user code hold.  Limitation: collectives that
    C++ issues without going through Python (the DDP reducer's gradient
    buckets) are not seen on this path.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

import torch

from ptc import _compat
from ptc.distributed.flight_recorder.ops import kind_name
from ptc.errors import FeatureUnavailable, PtcValueError

__all__ = [
    "MECHANISMS", "Calls", "attach", "attach_native", "resolve_mechanism", "wait_wrapped", "watched_works",
    "wrapper_installed",
]  # fmt: skip

MECHANISMS = ("hooks", "wrapper")
_WRAP_LOCK = threading.Lock()  # guards every patch of torch's classes and the tables below


class Calls(NamedTuple):
    """What a recorder is told about the calls on one group (see the module docstring)."""

    begin: Callable[[Any, List[torch.Tensor], List[torch.Tensor], int], Any]
    started: Callable[[Any, Any], None]
    done: Callable[[Any, Optional[BaseException]], None]
    internal_error: Callable[[BaseException], None]


def resolve_mechanism(capture: str) -> str:
    """``"auto"`` -> the best mechanism this torch offers; checks an explicit choice."""
    if capture == "auto":
        return "hooks" if _compat.PROCESS_GROUP_HOOKS else "wrapper"
    if capture not in MECHANISMS:
        raise PtcValueError(f"capture={capture!r}: expected 'auto', 'hooks' or 'wrapper'")
    if capture == "hooks" and not _compat.PROCESS_GROUP_HOOKS:
        raise FeatureUnavailable(
            "capture='hooks' needs ProcessGroup.register_pre_hook, which this torch "
            f"({torch.__version__}) lacks; use capture='auto' or 'wrapper'",
            requirement="PROCESS_GROUP_HOOKS",
        )
    return capture


def attach(pg: Any, calls: Calls, mechanism: str) -> Callable[[], None]:
    """Start telling ``calls`` about the calls on ``pg``; returns the function that stops it."""
    global _ATTACHMENTS
    with _WRAP_LOCK:
        if _ATTACHMENTS == 0:
            _install_wait()
        _ATTACHMENTS += 1
    try:
        remove = _HookAttachment(pg, calls).remove if mechanism == "hooks" else _attach_wrapper(pg, calls)
    except BaseException:
        _release_wait()
        raise
    released = []

    def detach() -> None:
        if released:
            return
        released.append(True)
        try:
            remove()
        finally:
            _release_wait()

    return detach


def attach_native(pg: Any, attachment: Any, calls: Calls, mechanism: str) -> Callable[[], None]:
    """:func:`attach` for the native core (:mod:`ptc.distributed.flight_recorder.native`); returns the detach
    function.

    ``"hooks"``: the core registers torch's C++ pre/post hooks itself, so no
    Python runs per call; ``"wrapper"``: the method wrapper calls ``calls``
    (the attachment's own begin/started/done).  Either way the core takes
    end times from each Work's future, so ``Work.wait`` is left alone.
    """
    if mechanism == "hooks":
        attachment.hook(pg, next(_HOOK_IDS))
        return attachment.unhook
    return _attach_wrapper(pg, calls)


# --- Work.wait: completion times ---------------------------------------------

_ATTACHMENTS = 0  # live attachments of any mechanism; Work.wait is wrapped while > 0
_WATCHED: Dict[int, Tuple[Callable[..., None], Any]] = {}  # id(work) -> (done, token); the token holds the work
_ORIGINAL_WAIT: List[Any] = []


def watched_works() -> Dict[int, Tuple[Callable[..., None], Any]]:
    """``{id(work): (done, token)}``: a recorder adds a Work here to hear when ``wait()`` returns.

    The recorder must keep the Work alive while it is in the table (its token
    does) and remove it when it stops caring.
    """
    return _WATCHED


def _install_wait() -> None:
    cls = torch.distributed.Work
    original = cls.__dict__["wait"]
    watched_of = _WATCHED.get
    forget = _WATCHED.pop

    def wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        watched = watched_of(id(self))
        if watched is None:
            return original(self, *args, **kwargs)
        try:
            result = original(self, *args, **kwargs)
        except BaseException as exc:
            if not self.is_completed():
                # wait(timeout) gave up (or was interrupted): the collective goes on, so it has
                # not failed; it closes when a later wait returns or it is found done
                raise
            forget(id(self), None)
            watched[0](watched[1], exc)
            raise
        if self.is_completed():  # NCCL's wait() returns once the stream waits, before the work is done
            forget(id(self), None)
            watched[0](watched[1], None)
        return result

    wait.__name__ = "wait"
    wait.__qualname__ = "Work.wait"
    wait.__doc__ = getattr(original, "__doc__", None)
    wait.__wrapped__ = original  # type: ignore[attr-defined]
    _ORIGINAL_WAIT.append(original)
    cls.wait = wait


def _release_wait() -> None:
    global _ATTACHMENTS
    with _WRAP_LOCK:
        _ATTACHMENTS -= 1
        if _ATTACHMENTS == 0 and _ORIGINAL_WAIT:
            torch.distributed.Work.wait = _ORIGINAL_WAIT.pop()
            _WATCHED.clear()


def wait_wrapped() -> bool:
    """Whether ``Work.wait`` is wrapped right now (something is attached)."""
    return bool(_ORIGINAL_WAIT)


# --- hooks ------------------------------------------------------------------

_HOOK_IDS = itertools.count(0x7074_6300)  # "ptc" + n: apart from ids torch's own hooks use


_HOOK_KIND_NAMES: Dict[int, str] = {}  # HookOpName value -> member name ("ALLREDUCE")


def _learn_kind_names(kind: Any) -> str:
    """The name of hook kind ``kind``, after filling the table from its enum's members."""
    members = getattr(type(kind), "__members__", None) or {}
    _HOOK_KIND_NAMES.update({member.value: name for name, member in members.items()})
    return _HOOK_KIND_NAMES.get(kind.value) or kind_name(kind)


class _HookAttachment:
    """One pre/post hook pair on one process group."""

    def __init__(self, pg: Any, calls: Calls) -> None:
        self._pg = pg
        self._id = next(_HOOK_IDS)
        begin, started, done, internal_error = calls
        # thread ident -> (op_id, token): the call each thread has between its pre and post hook
        open_calls: Dict[int, Tuple[int, Any]] = {}
        get_ident = threading.get_ident
        kind_names = _HOOK_KIND_NAMES

        def pre(args: Any) -> None:
            try:
                ident = get_ident()
                if open_calls:
                    stale = open_calls.pop(ident, None)
                    if stale is not None:  # the backend raised: no post hook came for it
                        done(stale[1], RuntimeError("the backend raised before returning a Work"))
                kind = args.name  # a new HookOpName object per call: its hash and == are pybind calls
                name = kind_names.get(kind.value)
                token = begin(name or _learn_kind_names(kind), args.input_tensors, args.output_tensors, args.root)
                if token is not None:
                    open_calls[ident] = (args.op_id, token)
            except Exception as exc:  # noqa: BLE001 - never break the user's collective
                internal_error(exc)

        def post(args: Any) -> None:
            try:
                opened = open_calls.pop(get_ident(), None)
                if opened is not None and opened[0] == args.op_id:
                    started(opened[1], args.work)
            except Exception as exc:  # noqa: BLE001
                internal_error(exc)

        pg.register_pre_hook(self._id, pre)
        pg.register_post_hook(self._id, post)

    def remove(self) -> None:
        pg, self._pg = self._pg, None
        if pg is not None:
            pg.unregister_pre_hook(self._id)
            pg.unregister_post_hook(self._id)


# --- wrapper ----------------------------------------------------------------

Extracted = Tuple[List[torch.Tensor], List[torch.Tensor], int]
Extract = Callable[[tuple, dict], Extracted]
_Tensor = torch.Tensor


def _flat(obj: Any) -> List[torch.Tensor]:
    """The tensors in ``obj``: a tensor, or (nested) lists of them."""
    if isinstance(obj, _Tensor):
        return [obj]
    out: List[torch.Tensor] = []
    if isinstance(obj, (list, tuple)):
        for item in obj:
            if isinstance(item, _Tensor):
                out.append(item)
            else:
                out.extend(_flat(item))
    return out


def _arg(args: tuple, kwargs: dict, index: int, names: Tuple[str, ...]) -> Any:
    if len(args) > index:
        return args[index]
    for name in names:
        if name in kwargs:
            return kwargs[name]
    return None


_ROOT_NAMES = ("root", "opts", "dstRank", "srcRank")
_IN_NAMES = ("tensors", "tensor", "input_tensors", "input_tensor", "input", "inputTensor", "inputTensors", "input_list")
_OUT_NAMES = ("output_tensors", "output_tensor", "output", "outputTensor", "outputTensors", "output_lists")


def _root(args: tuple, kwargs: dict, index: int) -> int:
    """The root rank: a positional int, or ``opts.rootRank``."""
    value = _arg(args, kwargs, index, _ROOT_NAMES)
    if isinstance(value, int):
        return value
    return int(getattr(value, "rootRank", -1))


def _inputs(args: tuple, kwargs: dict) -> Extracted:
    if args:
        first = args[0]
        if type(first) is list and len(first) == 1 and isinstance(first[0], _Tensor):
            return first, (), -1  # allreduce([t]): the hot case, without _flat's frame
        return _flat(first), (), -1
    return _flat(_arg(args, kwargs, 0, _IN_NAMES)), (), -1


def _rooted_inputs(args: tuple, kwargs: dict) -> Extracted:
    return _flat(args[0] if args else _arg(args, kwargs, 0, _IN_NAMES)), [], _root(args, kwargs, 1)


def _out_in(args: tuple, kwargs: dict) -> Extracted:
    if len(args) >= 2:
        return _flat(args[1]), _flat(args[0]), -1
    return _flat(_arg(args, kwargs, 1, _IN_NAMES)), _flat(_arg(args, kwargs, 0, _OUT_NAMES)), -1


def _rooted_out_in(args: tuple, kwargs: dict) -> Extracted:
    inputs, outputs, _ = _out_in(args, kwargs)
    return inputs, outputs, _root(args, kwargs, 2)


def _send(args: tuple, kwargs: dict) -> Extracted:
    return _flat(_arg(args, kwargs, 0, _IN_NAMES)), [], _root(args, kwargs, 1)


def _recv(args: tuple, kwargs: dict) -> Extracted:
    return [], _flat(_arg(args, kwargs, 0, _IN_NAMES)), _root(args, kwargs, 1)


def _recv_any(args: tuple, kwargs: dict) -> Extracted:
    return [], _flat(_arg(args, kwargs, 0, _IN_NAMES)), -1


def _nothing(args: tuple, kwargs: dict) -> Extracted:
    return [], [], -1


# ProcessGroup method -> (HookOpName kind, argument extractor); the methods the
# torch.distributed functions end in.  Methods a torch lacks are skipped.
_METHODS: Dict[str, Tuple[str, Extract]] = {
    "allreduce": ("ALLREDUCE", _inputs),
    "allreduce_coalesced": ("ALLREDUCE", _inputs),
    "broadcast": ("BROADCAST", _rooted_inputs),
    "reduce": ("REDUCE", _rooted_inputs),
    "allgather": ("ALLGATHER", _out_in),
    "all_gather_single": ("ALLGATHER", _out_in),
    "_allgather_base": ("ALLGATHER", _out_in),
    "allgather_coalesced": ("ALLGATHER", _out_in),
    "all_gather_single_coalesced": ("ALLGATHER", _out_in),
    "allgather_into_tensor_coalesced": ("ALLGATHER", _out_in),
    "gather": ("GATHER", _rooted_out_in),
    "scatter": ("SCATTER", _rooted_out_in),
    "reduce_scatter": ("REDUCE_SCATTER", _out_in),
    "reduce_scatter_single": ("REDUCE_SCATTER", _out_in),
    "_reduce_scatter_base": ("REDUCE_SCATTER", _out_in),
    "reduce_scatter_single_coalesced": ("REDUCE_SCATTER", _out_in),
    "reduce_scatter_tensor_coalesced": ("REDUCE_SCATTER", _out_in),
    "all_to_all_single": ("ALLTOALL", _out_in),
    "alltoall_base": ("ALLTOALL", _out_in),
    "alltoall": ("ALLTOALL", _out_in),
    "send": ("SEND", _send),
    "recv": ("RECV", _recv),
    "recv_anysource": ("RECV", _recv_any),
    "barrier": ("BARRIER", _nothing),
}

_CALLS: Dict[int, Tuple[Calls, ...]] = {}  # id(process group) -> what is attached to it
_GROUPS: Dict[int, Any] = {}  # id(process group) -> the group (keeps the id valid)
_ORIGINALS: Dict[str, Any] = {}  # method name -> ProcessGroup's own attribute


def _record(attached: Tuple[Calls, ...], original: Any, pg: Any, kind: str, extract: Extract,
            args: tuple, kwargs: dict) -> Any:  # fmt: skip
    tokens = []
    try:
        inputs, outputs, peer = extract(args, kwargs)
        for calls in attached:
            token = calls.begin(kind, inputs, outputs, peer)
            if token is not None:
                tokens.append((calls, token))
    except Exception as exc:  # noqa: BLE001 - never break the user's collective
        attached[0].internal_error(exc)
    try:
        work = original(pg, *args, **kwargs)
    except BaseException as exc:
        for calls, token in tokens:
            calls.done(token, exc)
        raise
    for calls, token in tokens:
        try:
            calls.started(token, work)
        except Exception as error:  # noqa: BLE001
            calls.internal_error(error)
    return work


def _make_wrapper(method: str, original: Any, kind: str, extract: Extract) -> Any:
    attached_to = _CALLS.get

    def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
        attached = attached_to(id(self))
        if attached is None:
            return original(self, *args, **kwargs)
        if len(attached) > 1:
            return _record(attached, original, self, kind, extract, args, kwargs)
        calls = attached[0]  # the usual case, spelled out: this is the hot path
        try:
            inputs, outputs, peer = extract(args, kwargs)
            token = calls.begin(kind, inputs, outputs, peer)
        except Exception as exc:  # noqa: BLE001 - never break the user's collective
            calls.internal_error(exc)
            token = None
        if token is None:
            return original(self, *args, **kwargs)
        try:
            work = original(self, *args, **kwargs)
        except BaseException as exc:
            calls.done(token, exc)
            raise
        try:
            calls.started(token, work)
        except Exception as exc:  # noqa: BLE001
            calls.internal_error(exc)
        return work

    recorded.__name__ = method
    recorded.__qualname__ = f"ProcessGroup.{method}"
    recorded.__doc__ = getattr(original, "__doc__", None)
    recorded.__wrapped__ = original  # type: ignore[attr-defined]
    return recorded


def _install() -> None:
    cls = torch.distributed.ProcessGroup
    for method, (kind, extract) in _METHODS.items():
        original = cls.__dict__.get(method)
        if original is None:
            continue
        _ORIGINALS[method] = original
        setattr(cls, method, _make_wrapper(method, original, kind, extract))


def _uninstall() -> None:
    cls = torch.distributed.ProcessGroup
    for method, original in _ORIGINALS.items():
        setattr(cls, method, original)
    _ORIGINALS.clear()


def wrapper_installed() -> bool:
    """Whether ProcessGroup's methods are wrapped right now (something uses the wrapper)."""
    return bool(_ORIGINALS)


def _attach_wrapper(pg: Any, calls: Calls) -> Callable[[], None]:
    key = id(pg)
    with _WRAP_LOCK:
        if not _ORIGINALS:
            _install()
        _CALLS[key] = _CALLS.get(key, ()) + (calls,)
        _GROUPS[key] = pg

    def detach() -> None:
        with _WRAP_LOCK:
            remaining = tuple(c for c in _CALLS.get(key, ()) if c is not calls)
            if remaining:
                _CALLS[key] = remaining
            else:
                _CALLS.pop(key, None)
                _GROUPS.pop(key, None)
            if not _CALLS and _ORIGINALS:
                _uninstall()

    return detach
