"""Fault-tolerant process groups: survive a failed worker without restarting.

A :class:`FaultTolerantGroup` is one worker's membership in a job whose
members can fail and join while the others keep going::

    ft = init_fault_tolerant(coordinator="10.0.0.5:29600", worker_id=3, world_size=4)
    while training:
        try:
            ft.allreduce(grads)               # like dist.all_reduce on the group
        except PeerFailure as failure:        # a RuntimeError naming the failed ranks
            ft.recover()                      # next generation: survivors (+ joiners), connected
            ...                               # redo the step (ptc.distributed.Trainer does all this)

Semantics, per call of a collective in generation ``g``:

* it either completes on this worker exactly like the plain c10d collective
  on the group's current process group, or raises :class:`PeerFailure`
  (``ranks``: the failed members' ranks in ``g``; ``generation``: ``g``);
* it never waits longer than it takes the coordinator to see a failure:
  a crashed worker at once (its connection closes), a hung one after
  ``heartbeat_timeout``; the coordinator then forms generation ``g + 1``
  and every member blocked in a collective of ``g`` is released, whether
  or not it exchanged data with the dead worker;
* collectives work on private copies, so an abandoned collective can never
  write into a caller's tensor later.

:meth:`FaultTolerantGroup.recover` moves to the newest generation: ranks are
the members' positions in the coordinator's list (survivors keep their
order, joiners come last), subgroups made with :meth:`subgroups` are
rebuilt, and a Flight Recorder attached with ``flight_recorder=`` moves to
the new generation.  Two engines do the reconnect (:mod:`ptc.distributed.ft.gloo`):

``native``  torch's gloo ``reconfigure`` (one process group object for the
            whole job; about 1-3 ms);
``rebuild`` a new gloo process group per generation on a store prefix of
            its own; an abandoned one has its connections shut down (so
            its pending collectives end at once, everywhere) and is kept
            until the process ends, never destroyed (destroying one with a
            collective pending blocks until its timeout, or aborts the
            process when it happens on one of gloo's threads).

``engine="auto"`` takes ``native`` where torch has it
(``ptc._compat.GLOO_RECONFIGURE``), else ``rebuild``.

A generation can be doomed while its members connect: a member dies after
saying ``ready`` (the coordinator had sent ``go``), and the coordinator
announces the next generation at once.  Both engines rendezvous through the
store inside one blocking C++ call that only ends with ``reconfigure_timeout``
(2 s by default) when a member never arrives, and nothing that call does can
be interrupted safely.  So the members first meet in the store themselves
(:meth:`FaultTolerantGroup._arrive`: each adds one to the generation's
arrival count, then reads it in short slices, woken by the coordinator's news
in between) and call the engine only once every member is there: a member that
died before arriving costs the survivors the time the coordinator's news takes
(milliseconds), not ``reconfigure_timeout``.  Only a member that dies inside
the engine's own connect (after arriving, a window of a few milliseconds)
still costs the timeout.

The coordinator may die too (see :mod:`ptc.distributed.ft.coordinator`): the
link then reconnects in the background while collectives go on in the current
generation (they need only gloo); a failure meanwhile is recovered once a
coordinator is back (:meth:`FaultTolerantGroup.recover` waits for one up to
``coordinator_timeout``), and generations after the outage connect through the
new coordinator's store (a new engine: the old one's groups are kept, never
destroyed).
"""

from __future__ import annotations

import datetime
import os
import socket
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from ptc import _compat
from ptc.distributed.ft import auth, gloo, wire
from ptc.distributed.ft.faults import Fault, Injector
from ptc.errors import CoordinatorUnreachable, JobFinished, PeerFailure, PtcError, PtcTypeError, PtcValueError

# How long a collective in flight may still complete after a newer generation that removed
# nobody (a grow) was announced: its peers are alive, and some may have completed it already.
GROW_GRACE_S = 0.25

# How long a collective is first waited for in C++ (GIL released, nothing else runs), before the
# wait becomes abortable: waits of ABORTABLE_SLICE, the news (an abort broadcast) checked between
# them, so a rank not adjacent to a dead peer is released at most one slice after the news
# arrives.  Most collectives of a training step finish within the first wait.  No done-callback
# on the collective's future: it would run on the backend's thread, which must take the GIL for
# it (and again to release the callable), and a thread that takes the GIL while the interpreter
# finalizes is ended by pthread_exit, which aborts the process from inside c10d's noexcept code
# ("terminate called without an active exception": a worker whose last collective had taken
# the abortable wait exited that way, rarely, under load).
# Never 0: c10d reads a zero timeout as "no timeout" (kNoTimeout) and would wait forever.
FAST_WAIT = datetime.timedelta(milliseconds=20)
ABORTABLE_SLICE = datetime.timedelta(milliseconds=5)


def _wait_slice(work: Any, timeout: datetime.timedelta) -> None:
    """Wait up to ``timeout`` for ``work`` in C++; a timeout or the work's failure both return
    (the caller reads its future, and ``work.wait()`` raises the failure)."""
    try:
        work.wait(max(timeout, datetime.timedelta(milliseconds=1)))
    except RuntimeError:
        pass


# How often a member reads the generation's arrival count in the store before connecting it
# (see _arrive): the first read is immediate, then the pause doubles from MIN to MAX.  News from the
# coordinator (a newer generation: this one is doomed) ends the wait at once, whatever the pause.
ARRIVE_POLL_MIN_S = 0.001
ARRIVE_POLL_MAX_S = 0.02


# How long to wait before connecting again when the coordinator closed a connection before its
# challenge (it closes the oldest connections without a hello when too many are open).
RECONNECT_PAUSE_S = 0.05

# After the coordinator was lost: how long one try at one address may take (connect, challenge, hello,
# welcome), and the longest pause between rounds over every address (the pause doubles from
# RECONNECT_PAUSE_S up to it).
RECONNECT_ATTEMPT_S = 1.0
RECONNECT_MAX_PAUSE_S = 1.0

# How long a member waits for a coordinator to come back when it needs one (to recover from a failure)
# before it gives up with PeerFailure: FaultTolerantGroup(coordinator_timeout=...).
COORDINATOR_TIMEOUT_S = 60.0

PROTOCOL_NAME = "the ptc fault-tolerance protocol"  # what CoordinatorUnreachable says a server does not speak


class _ClosedBeforeWelcome(Exception):
    """The coordinator closed the connection after its challenge, before answering the hello."""


class MembershipRefused(PtcValueError):
    """The coordinator refused this worker (authentication, job id, duplicate id, wrong world size)."""


class Fenced(PtcError, RuntimeError):
    """This worker was declared failed (it was silent too long) and removed
    from the group; it must :meth:`FaultTolerantGroup.rejoin`."""


@dataclass(frozen=True)
class Generation:
    """One membership of the group: ``members`` are worker ids in rank order."""

    number: int
    members: Tuple[int, ...]
    failed: Tuple[int, ...] = ()
    joined: Tuple[int, ...] = ()
    reason: str = ""

    def rank_of(self, worker: int) -> int:
        return self.members.index(worker)


# --- the connection to the coordinator ---------------------------------------


class _Link:
    """This worker's connection to the coordinator: the handshake (challenge, hello, welcome:
    see :mod:`ptc.distributed.ft.wire`), then heartbeats out and membership news in, on a
    thread of its own.  Everything up to the welcome is bounded by ``connect_timeout``.

    ``addresses``: where a coordinator may be, tried in turn.  When the connection ends without
    ``fenced`` (the coordinator died), the link is *down* (``down_since``), not lost: the thread
    connects again, to each address in turn with a bounded backoff, for as long as the link is
    open, and its hello then carries ``report()`` (what this member knows: its generation, the
    members, the newest generation it was told of) so that a new coordinator can rebuild the
    job's state.  News, ``go`` handles and history survive the reconnect; ``welcome`` and
    ``store_port`` are the new coordinator's."""

    def __init__(self, addresses: Sequence[str], *, worker: int, world: Optional[int], job: str,
                 secret: Optional[bytes], heartbeat_interval: float, connect_timeout: float,
                 on_news: Callable[[], None], report: Optional[Callable[[], Optional[Dict[str, Any]]]] = None,
                 respawn: Optional[Callable[[str], None]] = None) -> None:  # fmt: skip
        self.addresses = list(addresses)
        self._worker, self._world, self._job, self._secret = worker, world, job, secret
        self._report = report
        self._respawn = respawn
        self._connect_timeout = connect_timeout
        self.address = self.addresses[0]
        self.sock, self.reader, self.welcome = self._first_handshake()
        self.store_port = int(self.welcome["store_port"])
        self.cond = threading.Condition()
        self.announced: Optional[Generation] = None
        self.history: List[Generation] = []  # the latest announcements, oldest first
        self.go: Dict[int, List[str]] = {}
        self.join_pending = False
        self.fenced: Optional[str] = None
        self.finished = False  # fenced because the job is over
        self.lost = False  # gave up on the coordinator for good (never set while the link is open)
        self.down_since: Optional[float] = None  # the connection ended (coordinator died): reconnecting since
        self.reconnects = 0
        self._on_news = on_news
        self._interval = heartbeat_interval
        self._send_lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="ptc-ft-link", daemon=True)
        self._thread.start()

    def _handshake(self, address: str, seconds: float, report: Optional[Dict[str, Any]], retry: bool = True
                   ) -> Tuple[socket.socket, wire.LineReader, Dict[str, Any]]:  # fmt: skip
        """Connect to ``address`` and complete the hello within ``seconds`` (``retry``: a refused
        connection is tried again until then; else it ends the attempt, for the next address)."""
        self.address = address
        self._retry_connect = retry
        self._deadline = time.monotonic() + seconds
        self._attempt_timeout = seconds
        while True:
            sock, reader, challenge = self._challenge()
            try:
                return sock, reader, self._hello(sock, reader, challenge, report)
            except _ClosedBeforeWelcome:
                sock.close()
                if self._left() <= 0:
                    raise self._unreachable(f"it closed the connection before the welcome, until "
                                            f"connect_timeout = {self._attempt_timeout:g} s") from None
                time.sleep(RECONNECT_PAUSE_S)  # made room for other connections: say hello again
            except BaseException:
                sock.close()
                raise

    def _first_handshake(self) -> Tuple[socket.socket, wire.LineReader, Dict[str, Any]]:
        """The first connection: one address gets the whole ``connect_timeout``; several are
        tried in turn (``RECONNECT_ATTEMPT_S`` each) until one answers or the time is up."""
        if len(self.addresses) == 1:
            return self._handshake(self.addresses[0], self._connect_timeout, None)
        deadline = time.monotonic() + self._connect_timeout
        errors: Dict[str, str] = {}
        while True:
            for address in self.addresses:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CoordinatorUnreachable(f"coordinator = {','.join(self.addresses)!r}: none answered within "
                                                 f"connect_timeout = {self._connect_timeout:g} s ({errors})")  # fmt: skip
                try:
                    return self._handshake(address, min(left, RECONNECT_ATTEMPT_S), None, retry=False)
                except CoordinatorUnreachable as exc:
                    errors[address] = str(exc)[-200:]
            time.sleep(RECONNECT_PAUSE_S)

    def _unreachable(self, why: str) -> CoordinatorUnreachable:
        return CoordinatorUnreachable(f"coordinator = {self.address!r}: {why}")

    def _left(self) -> float:
        return max(0.0, self._deadline - time.monotonic())

    def _connect(self) -> socket.socket:
        host, port = wire.parse_address(self.address)
        while True:
            try:
                sock = socket.create_connection((host, port), timeout=max(0.1, self._left()))
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return sock
            except OSError as exc:
                if self._left() <= 0 or not self._retry_connect:
                    why = f"not reachable within connect_timeout = {self._attempt_timeout:g} s ({exc})"
                    raise self._unreachable(why) from None
                time.sleep(RECONNECT_PAUSE_S)

    def _challenge(self) -> Tuple[socket.socket, wire.LineReader, Dict[str, Any]]:
        """Connect and read the coordinator's challenge (connecting again if it closes first)."""
        while True:
            sock = self._connect()
            reader = wire.LineReader(wire.MAX_NEWS_LINE)
            try:
                line = wire.recv_line(sock, reader, self._left())
            except wire.ProtocolError as exc:
                sock.close()
                raise self._unreachable(f"the server there does not speak {PROTOCOL_NAME} ({exc})") from None
            if line is not None:
                break
            sock.close()
            if self._left() <= 0:
                raise self._unreachable(f"no challenge within connect_timeout = {self._attempt_timeout:g} s: "
                                        f"the server there does not speak {PROTOCOL_NAME}, or is stuck")  # fmt: skip
            time.sleep(RECONNECT_PAUSE_S)  # closed before its challenge: connect again
        try:
            challenge = wire.decode(line, frozenset({"challenge"}))
        except wire.ProtocolError as exc:
            sock.close()
            raise self._unreachable(f"the server there does not speak {PROTOCOL_NAME} "
                                    f"(its first line: {line[:60]!r}: {exc})") from None  # fmt: skip
        if challenge["proto"] != wire.PROTOCOL:
            sock.close()
            raise self._unreachable(f"it speaks {challenge['proto']!r}, this worker {wire.PROTOCOL!r} "
                                    "(a coordinator of another ptc version)")  # fmt: skip
        return sock, reader, challenge

    def _hello(self, sock: socket.socket, reader: wire.LineReader, challenge: Dict[str, Any],
               report: Optional[Dict[str, Any]]) -> Dict[str, Any]:  # fmt: skip
        """Answer the challenge; the welcome, once it proved the coordinator knows the secret."""
        worker, world, job, secret = self._worker, self._world, self._job, self._secret
        if challenge["auth"] and secret is None:
            raise MembershipRefused(f"coordinator = {self.address!r} admits only workers that know the job "
                                    f"secret: give this worker ${auth.ENV_SECRET}, ${auth.ENV_SECRET_FILE} "
                                    "or secret=")  # fmt: skip
        if not challenge["auth"] and secret is not None:
            raise self._unreachable("it runs without a job secret (insecure) but this worker has one: "
                                    "it cannot prove it is this job's coordinator")  # fmt: skip
        nonce = auth.new_nonce()
        proof = None if secret is None else auth.hello_proof(secret, challenge["nonce"], job, worker)
        wire.send(sock, {"t": "hello", "worker": worker, "pid": os.getpid(), "world": world, "job": job,
                         "nonce": nonce, "proof": proof, **(report or {})})  # fmt: skip
        try:
            reply = wire.recv_one(sock, reader, self._left(), frozenset({"welcome", "refused"}))
        except wire.ProtocolError as exc:
            raise self._unreachable(f"its answer to hello is not the ptc protocol ({exc})") from None
        if reply is None:
            if self._left() > 0:  # an end of file, not a timeout
                raise _ClosedBeforeWelcome()
            raise self._unreachable(f"no answer to hello within connect_timeout = {self._attempt_timeout:g} s")
        if reply["t"] == "refused":
            if reply.get("finished"):
                raise JobFinished(f"worker {worker}: {reply['error']}")
            raise MembershipRefused(reply["error"])
        if secret is not None:
            expected = auth.welcome_proof(secret, nonce, challenge["nonce"], job, worker)
            if not auth.matches(expected, reply["proof"]):
                raise self._unreachable("its welcome does not prove it knows the job secret "
                                        "(another job's coordinator?)")  # fmt: skip
        return reply

    def send(self, message: Dict[str, Any]) -> None:
        with self._send_lock:
            if not self._closed:
                wire.send(self.sock, message)

    def _run(self) -> None:
        while True:
            self._serve()  # until the connection ends
            with self.cond:
                if self._closed or self.fenced is not None:
                    self.cond.notify_all()
                    return
                self.down_since = time.monotonic()
                self.cond.notify_all()
            self._on_news()
            if not self._reconnect():
                return

    def _serve(self) -> None:
        """Heartbeats out, news in, until the connection ends (or the link is closed)."""
        import select

        if not self._receive_buffered():  # what arrived together with the welcome
            self._drop_socket()
            return
        next_beat = time.monotonic()
        while not self._closed and self.fenced is None:
            now = time.monotonic()
            if now >= next_beat:
                self.send({"t": "hb"})
                next_beat = now + self._interval
            try:
                readable, _, _ = select.select([self.sock], [], [], max(0.0, next_beat - time.monotonic()))
            except (OSError, ValueError):
                readable = [self.sock]
            if not readable:
                continue
            try:
                data = self.sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            try:
                self.reader.feed(data)
            except wire.ProtocolError:
                break
            if not self._receive_buffered():
                break
        self._drop_socket()

    def _drop_socket(self) -> None:
        with self._send_lock:
            try:
                self.sock.close()
            except OSError:
                pass

    def _reconnect(self) -> bool:
        """Connect again (the coordinator was lost), to each address in turn, until one welcomes
        this worker or the link is closed; True once connected.  A refusal fences the link."""
        pause = RECONNECT_PAUSE_S
        lost_address, respawned = self.address, self._respawn is None
        while not self._closed:
            for address in self.addresses:
                if self._closed:
                    return False
                try:
                    report = self._report() if self._report is not None else None
                    sock, reader, welcome = self._handshake(address, RECONNECT_ATTEMPT_S, report,
                                                            retry=len(self.addresses) == 1)  # fmt: skip
                except (MembershipRefused, JobFinished) as exc:
                    with self.cond:
                        self.fenced, self.finished = f"refused on reconnect: {exc}", isinstance(exc, JobFinished)
                        self.cond.notify_all()
                    self._on_news()
                    return False
                except Exception:  # noqa: BLE001 - unreachable (or not yet): the next address, the next round
                    continue
                with self._send_lock:
                    if self._closed:
                        sock.close()
                        return False
                    self.sock, self.reader = sock, reader
                with self.cond:
                    self.welcome, self.store_port = welcome, int(welcome["store_port"])
                    self.down_since = None
                    self.reconnects += 1
                    self.cond.notify_all()
                self._on_news()
                return True
            if not respawned:  # a first round found nobody: the launcher's hook may start one (torchrun path)
                respawned = True
                try:
                    self._respawn(lost_address)  # type: ignore[misc]
                except Exception:  # noqa: BLE001 - another member's coordinator may hold the port: keep trying
                    pass
                continue
            time.sleep(pause)
            pause = min(pause * 2, RECONNECT_MAX_PAUSE_S)
        return False

    @property
    def down(self) -> bool:
        """The coordinator is unreachable now (the link reconnects in the background)."""
        return self.down_since is not None

    def _receive_buffered(self) -> bool:
        """Take every complete line the reader holds; False once the coordinator counts as lost."""
        while True:
            line = self.reader.pop()
            if line is None:
                return True
            try:
                message = wire.decode(line, wire.TO_WORKER)
            except wire.ProtocolError:
                return False
            self._receive(message)

    def _receive(self, message: Dict[str, Any]) -> None:
        kind = message.get("t")
        with self.cond:
            if kind == "gen":
                self.announced = Generation(message["gen"], tuple(message["members"]), tuple(message["failed"]),
                                            tuple(message["joined"]), message["reason"])  # fmt: skip
                self.history = self.history[-15:] + [self.announced]
                self.join_pending = False
            elif kind == "go":
                self.go[message["gen"]] = list(message["handles"])
            elif kind == "join_pending":
                self.join_pending = True
            elif kind == "fenced":
                self.fenced = message["reason"]
                self.finished = bool(message.get("finished"))
            self.cond.notify_all()
        if kind in ("gen", "fenced"):
            self._on_news()

    def close(self, leave: bool = True) -> None:
        if leave:
            self.send({"t": "leave"})
        self._closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


# --- subgroups ------------------------------------------------------------------


class Subgroup:
    """A subgroup rebuilt in every generation from ``split(world_size)``.

    ``pg`` is this worker's subgroup in the current generation (None when the
    split leaves this rank out); ``ranks`` its members' ranks in the group.
    Use it through :meth:`FaultTolerantGroup.allreduce` and friends with
    ``group=subgroup``.
    """

    def __init__(self, index: int, split: Callable[[int], Sequence[Sequence[int]]]) -> None:
        self.index = index
        self.split = split
        self.pg: Any = None
        self.ranks: Tuple[int, ...] = ()
        self.generation = 0
        self._sockets: Dict[int, int] = {}

    def _partition(self, size: int) -> List[List[int]]:
        parts = self.split(size)
        seen: Dict[int, int] = {}
        result = []
        for i, part in enumerate(parts):
            part = [int(r) for r in part]
            for r in part:
                if not 0 <= r < size:
                    raise PtcValueError(f"subgroups split: rank {r} of part {i} is outside 0..{size - 1}")
                if r in seen:
                    raise PtcValueError(f"subgroups split: rank {r} is in parts {seen[r]} and {i}")
                seen[r] = i
            result.append(part)
        return result


# --- the group ------------------------------------------------------------------


class FaultTolerantGroup:
    """This worker's handle on a fault-tolerant job (see the module docstring).

    Build it with :func:`init_fault_tolerant`.  ``rank``/``size`` are those of
    the current generation, ``worker_id`` is stable for the process's life.
    ``job``: the job id the coordinator serves.  ``secret`` / ``secret_file``
    (else ``$PTC_FT_SECRET`` / ``$PTC_FT_SECRET_FILE``): the job secret this
    worker proves it knows (:mod:`ptc.distributed.ft.auth`); it never leaves
    the process.  ``faults``: a fault plan
    (:class:`~ptc.distributed.ft.faults.Fault` records, for tests, demos and
    benchmarks); this worker fires those that target it at its fault points.
    Without one (the default) nothing is ever injected.

    ``coordinator``: ``"host:port"``, or several comma-separated (a restarted
    coordinator's and standbys' addresses), tried in turn.  The coordinator's
    death is not fatal: the member goes on training in its generation and
    reconnects in the background (its hello then reports its generation, the
    members and the newest generation it heard of, from which a new
    coordinator rebuilds the job's state); a recovery that needs a coordinator
    while none is reachable waits for one at most ``coordinator_timeout``
    seconds (default ``$PTC_FT_COORDINATOR_TIMEOUT``, else 60) and then raises
    :class:`~ptc.errors.PeerFailure` saying so.  ``respawn(address)``: called
    once per outage, on the link's thread, after a first round of reconnects
    found nobody (the torchrun path passes one that starts the lost detached
    coordinator again at its address).

    Raises :class:`~ptc.errors.CoordinatorUnreachable` when no coordinator
    answers at ``coordinator`` within ``connect_timeout`` (or what answers
    does not speak the protocol), :class:`MembershipRefused` when it refuses
    this worker, :class:`~ptc.errors.JobFinished` when the job is over.
    """

    def __init__(
        self,
        coordinator: str,
        worker_id: int,
        world_size: Optional[int] = None,
        *,
        heartbeat_interval: float = 0.1,
        timeout: float = 60.0,
        reconfigure_timeout: float = 2.0,
        join_timeout: float = 60.0,
        connect_timeout: float = 30.0,
        coordinator_timeout: Optional[float] = None,
        engine: str = "auto",
        flight_recorder: Any = None,
        job: str = "default",
        secret: Optional[auth.Secret] = None,
        secret_file: Optional[str] = None,
        faults: Sequence[Fault] = (),
        respawn: Optional[Callable[[str], None]] = None,
    ) -> None:
        if coordinator_timeout is None:
            try:
                coordinator_timeout = float(os.environ.get("PTC_FT_COORDINATOR_TIMEOUT", COORDINATOR_TIMEOUT_S))
            except ValueError:
                raise PtcValueError(f"$PTC_FT_COORDINATOR_TIMEOUT = {os.environ['PTC_FT_COORDINATOR_TIMEOUT']!r}: "
                                    "expected seconds") from None  # fmt: skip
        if isinstance(worker_id, bool) or not isinstance(worker_id, int) or not 0 <= worker_id <= wire.MAX_ID:
            raise PtcValueError(f"worker_id = {worker_id!r}: expected an int in 0..{wire.MAX_ID} "
                                "(a unique id per worker process)")  # fmt: skip
        if world_size is not None and (isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1):
            raise PtcValueError(f"world_size = {world_size!r}: expected an int >= 1")
        for name, value in (("heartbeat_interval", heartbeat_interval), ("timeout", timeout),
                            ("reconfigure_timeout", reconfigure_timeout), ("join_timeout", join_timeout),
                            ("connect_timeout", connect_timeout), ("coordinator_timeout", coordinator_timeout)):  # fmt: skip
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise PtcValueError(f"{name} = {value!r}: expected seconds > 0")
        if engine not in ("auto", "native", "rebuild"):
            raise PtcValueError(f"engine = {engine!r}: expected 'auto', 'native' or 'rebuild'")
        if not isinstance(job, str) or not 1 <= len(job) <= wire.MAX_NAME:
            raise PtcValueError(f"job = {job!r}: expected a string of 1..{wire.MAX_NAME} characters")
        if isinstance(faults, (str, bytes)) or not isinstance(faults, Sequence) or not all(
            isinstance(f, Fault) for f in faults
        ):
            raise PtcTypeError("faults: expected a list of ptc.distributed.ft_faults.Fault records")
        if engine == "native" and not _compat.GLOO_RECONFIGURE:
            from ptc.errors import FeatureUnavailable

            raise FeatureUnavailable("engine='native' needs torch's gloo reconfigure", requirement="GLOO_RECONFIGURE")
        if not _compat.DISTRIBUTED:
            from ptc.errors import FeatureUnavailable

            raise FeatureUnavailable("torch.distributed is not built in", requirement="DISTRIBUTED")
        if not isinstance(coordinator, str):
            raise PtcValueError(f"coordinator = {coordinator!r}: expected 'host:port' (or several, comma-separated)")
        self._addresses = [a.strip() for a in coordinator.split(",") if a.strip()]
        if not self._addresses:
            raise PtcValueError(f"coordinator = {coordinator!r}: expected 'host:port' (or several, comma-separated)")
        for address in self._addresses:
            wire.parse_address(address)
        self.worker_id = worker_id
        self.coordinator = coordinator
        self._coordinator_timeout = float(coordinator_timeout)
        self._respawn = respawn
        self._recovering = False  # the current generation failed here: recover() is due or running
        self._old_engines: List[Any] = []  # engines of earlier coordinators' stores: their groups are never destroyed
        self.job = job
        self._secret = auth.resolve(secret, secret_file)
        self._world_size = world_size
        self._heartbeat_interval = float(heartbeat_interval)
        self._timeout = datetime.timedelta(seconds=timeout)
        self._reconfigure_timeout = datetime.timedelta(seconds=reconfigure_timeout)
        self._join_timeout = float(join_timeout)
        self._connect_timeout = float(connect_timeout)
        self._engine_name = ("native" if _compat.GLOO_RECONFIGURE else "rebuild") if engine == "auto" else engine
        self._waiters: "set[object]" = set()  # one token per collective being waited for (_wait_abortable)
        self._news_listeners: List[Any] = []  # weakref.WeakMethod: called on the link thread at every news
        self._waiters_lock = threading.Lock()
        self._subgroups: List[Subgroup] = []
        self._recorder = flight_recorder
        self._recorder_attached = False
        self.generation: Optional[Generation] = None
        self.previous: Optional[Generation] = None
        self.rejoined = False
        self.closed = False
        self.faults = Injector(faults, lambda name, data: self._event(name, **data)) if faults else None
        self._link = self._connect(world_size)
        self._store_at = (self._link.address, self._link.store_port)
        self._store = self._make_store()
        self._engine = (gloo.NativeEngine if self._engine_name == "native" else gloo.RebuildEngine)(
            self._store, worker_id, self._timeout
        )
        self.recover(timeout=self._join_timeout)

    # --- membership ----------------------------------------------------------

    def _connect(self, world_size: Optional[int]) -> _Link:
        return _Link(self._addresses, worker=self.worker_id, world=world_size, job=self.job, secret=self._secret,
                     heartbeat_interval=self._heartbeat_interval, connect_timeout=self._connect_timeout,
                     on_news=self._news_arrived, report=self._report, respawn=self._respawn)  # fmt: skip

    def _make_store(self) -> Any:
        import torch.distributed as dist

        host, _ = wire.parse_address(self._store_at[0])
        return dist.TCPStore(host, self._store_at[1], is_master=False,
                             timeout=datetime.timedelta(seconds=self._connect_timeout))  # fmt: skip

    def _report(self) -> Optional[Dict[str, Any]]:
        """What this member tells a coordinator it reconnects to (it rebuilds the job's state from
        these): its generation, the members, the newest generation number it was told of, and
        whether its generation failed here (then it cannot be resumed as it is)."""
        gen = self.generation
        if gen is None:
            return None
        news = self._link.announced if getattr(self, "_link", None) is not None else None
        seen = max(gen.number, news.number if news is not None else 0)
        report: Dict[str, Any] = {"gen": gen.number, "members": list(gen.members), "seen": seen}
        if self._recovering:
            report["broken"] = True
        return report

    def _follow_coordinator(self) -> None:
        """After the link reconnected to another coordinator (a restart, a standby), connect
        generations through its store: a new store client and a new engine (the old engine's
        groups are kept, never destroyed; a rebuilt one's connections are shut down)."""
        link = self._link
        where = (link.address, link.store_port)
        if where == self._store_at:
            return
        self._store_at = where
        self._store = self._make_store()
        old = self._engine
        if isinstance(old, gloo.RebuildEngine) and old.pg is not None:
            gloo.retire(old.pg, old._sockets)
        self._old_engines.append(old)
        self._engine = type(old)(self._store, self.worker_id, self._timeout)
        self._event("store_moved", address=link.address, store_port=link.store_port)

    @property
    def engine(self) -> str:
        """``"native"`` or ``"rebuild"``: how generations are connected."""
        return self._engine_name

    @property
    def rank(self) -> int:
        """This worker's rank in the current generation."""
        return self._current().rank_of(self.worker_id)

    @property
    def size(self) -> int:
        """How many members the current generation has."""
        return len(self._current().members)

    @property
    def pg(self) -> Any:
        """The current generation's c10d process group (collectives on it
        directly are not abortable; prefer this object's methods)."""
        self._current()
        return self._engine.pg

    @property
    def join_pending(self) -> bool:
        """A worker waits to join; call :meth:`grow` at a step boundary that
        every member agrees on (the Trainer votes on it with the gradients)."""
        return self._link.join_pending

    def _current(self) -> Generation:
        if self.generation is None:
            raise PtcError("the group has no generation yet")
        return self.generation

    def _news_arrived(self) -> None:
        """On the link thread, at every news: the news listeners, and the recorders' dump when a
        member failed. (Waits in a collective see the news at their next slice.)"""
        with self._waiters_lock:
            listeners = [ref() for ref in self._news_listeners]
            self._news_listeners = [ref for ref, fn in zip(self._news_listeners, listeners) if fn is not None]
        for fn in listeners:
            if fn is not None:
                try:
                    fn()
                except Exception as exc:  # noqa: BLE001 - the link thread must go on reading news
                    self._event("news_listener_failed", error=f"{type(exc).__name__}: {exc}"[:200])
        link = getattr(self, "_link", None)  # news can arrive while __init__ is still connecting
        news = None if link is None else link.announced
        if news is not None and news.failed and self._recorder is not None and self.generation is not None:
            threading.Thread(target=self._dump_recorders, args=(news,), daemon=True).start()

    def stale(self) -> bool:
        """True when the coordinator formed a newer generation (this one is aborted)."""
        news = self._link.announced
        return (self._link.fenced is not None or self._link.lost
                or (news is not None and self.generation is not None and news.number > self.generation.number))  # fmt: skip

    def _failure(self, detail: str) -> PeerFailure:
        """The PeerFailure for the current generation, naming the failed ranks
        (waits briefly for the coordinator's verdict when it is not in yet)."""
        gen = self._current()
        self._recovering = True
        if self._link.fenced is not None:
            return self._fenced()  # type: ignore[return-value]
        if self._link.down:
            detail = (f"{detail} (the coordinator is unreachable: recovery waits up to coordinator_timeout = "
                      f"{self._coordinator_timeout:g} s for one at {self.coordinator})")  # fmt: skip
        elif not self.stale() and not self._link.lost:
            self._link.send({"t": "fail", "gen": gen.number, "err": detail[:300]})
            with self._link.cond:
                self._link.cond.wait_for(self.stale, timeout=self._heartbeat_interval * 20 + 2)
        failed = sorted({gen.rank_of(w) for later in self._link.history if later.number > gen.number
                         for w in later.failed if w in gen.members})  # fmt: skip
        if self._link.lost:
            detail = f"the coordinator at {self.coordinator} is gone, fault tolerance is off; {detail}"
        self._event("peer_failure", gen=gen.number, failed_ranks=list(failed), detail=detail[:200])
        return PeerFailure(failed, gen.number, detail)

    def _fenced(self) -> PtcError:
        """The error for a fenced link: :class:`JobFinished` when the job is over, else :class:`Fenced`."""
        if self._link.finished:
            return JobFinished(f"worker {self.worker_id}: {self._link.fenced}")
        return Fenced(f"worker {self.worker_id} was fenced: {self._link.fenced}; call rejoin()")

    def recover(self, timeout: Optional[float] = None) -> Generation:
        """Move to the newest generation and connect it; returns it.

        Blocks until the coordinator has formed a generation newer than the
        current one that includes this worker, every member is ready, and
        the new process group is connected (a member failing meanwhile just
        restarts this with the next generation).  Raises :class:`Fenced` if
        this worker was removed (:class:`~ptc.errors.JobFinished` when the job
        ended meanwhile), ``PtcError`` after ``timeout`` seconds (default
        ``join_timeout``) without a generation.
        """
        deadline = [time.monotonic() + (self._join_timeout if timeout is None else timeout)]
        link = self._link
        if self.generation is not None:
            self._recovering = True
        while True:
            known = self.generation.number if self.generation is not None else 0
            ok = self._wait_link(
                lambda: link.fenced is not None or link.lost or (link.announced is not None and link.announced.number > known),
                deadline, known)  # fmt: skip
            with link.cond:
                news = link.announced
            if link.fenced is not None:
                raise self._fenced()
            if link.lost:
                raise PeerFailure((), known, f"the coordinator at {self.coordinator} is gone; the group cannot recover")
            if not ok or news is None:
                raise PtcError(f"no new generation within {timeout if timeout is not None else self._join_timeout:g} s "
                               f"(coordinator {self.coordinator} forms one with at least min_workers = "
                               f"{link.welcome['min_workers']} of world_size = {link.welcome['world']}); "
                               "too few workers alive?")  # fmt: skip
            if self.worker_id not in news.members:
                raise Fenced(f"worker {self.worker_id} is not a member of generation {news.number}; call rejoin()")
            started = time.monotonic()
            try:
                self._follow_coordinator()  # before the handle: it is the engine's
            except Exception as exc:  # noqa: BLE001 - its store is not reachable (yet): wait for news again
                self._event("store_unreachable", error=f"{type(exc).__name__}: {exc}"[:200])
                time.sleep(RECONNECT_PAUSE_S)
                continue
            link.send({"t": "ready", "gen": news.number, "handle": self._engine.handle()})
            self.fault_point("reconfigure", news.number, news.rank_of(self.worker_id))
            self._wait_link(lambda: news.number in link.go or self._superseded(news) or link.fenced is not None
                            or link.lost or link.down, deadline, known)  # fmt: skip
            with link.cond:
                handles = link.go.get(news.number)
            if handles is None:
                if link.down:  # the coordinator died before its go: the next one forms a newer generation
                    self._wait_link(lambda: not link.down or link.fenced is not None or link.lost, deadline, known)
                    continue
                if time.monotonic() >= deadline[0] and not self._superseded(news):
                    raise PtcError(f"generation {news.number} did not become ready within the join timeout")
                continue  # superseded, fenced or lost: loop decides
            rank = news.rank_of(self.worker_id)
            try:
                arrived = self._arrive(news)
                if arrived is None:  # doomed (superseded), fenced or lost before everyone arrived: loop decides
                    self._event("connect_abandoned", gen=news.number,
                                waited_ms=round((time.monotonic() - started) * 1000, 2))  # fmt: skip
                    continue
                if not arrived:
                    raise PtcError(f"not every member of generation {news.number} arrived within "
                                   f"reconfigure_timeout = {self._reconfigure_timeout.total_seconds():g} s")  # fmt: skip
                new_pg = self._engine.connect(news.number, rank, len(news.members), handles, self._reconfigure_timeout)
                self._connect_subgroups(news)
            except Exception as exc:  # noqa: BLE001 - a member died mid-connect: report, take the next generation
                if not self._superseded(news):
                    link.send({"t": "fail", "gen": news.number, "err": f"connect: {exc}"[:300]})
                continue
            old_pg = getattr(self, "_last_pg", None)
            self.previous, self.generation = self.generation, news
            self._recovering = False
            self._last_pg = new_pg
            self._move_recorder(old_pg, new_pg, news)
            opened, closed = self._engine.sockets
            self._event("reconfigured", gen=news.number, rank=rank, size=len(news.members),
                        dt_ms=round((time.monotonic() - started) * 1000, 2), engine=self.engine,
                        sockets_opened=opened, old_sockets_shut_down=closed)  # fmt: skip
            return news

    def _wait_link(self, done: Callable[[], bool], deadline: List[float], known: int) -> bool:
        """Wait on the link until ``done()`` (True) or ``deadline[0]`` (False).  While the coordinator
        is unreachable the deadline is not counted: the wait ends when it is back (``deadline[0]``
        then extends to at least ``join_timeout`` from there) or raises :class:`PeerFailure` after
        ``coordinator_timeout`` seconds without one."""
        link = self._link
        outage: Optional[float] = None
        while True:
            with link.cond:
                if done():
                    return True
                now = time.monotonic()
                if link.down:
                    outage = now if outage is None else outage
                    if now - outage >= self._coordinator_timeout:
                        raise PeerFailure((), known, f"no coordinator came back at {self.coordinator} within "
                                                     f"coordinator_timeout = {self._coordinator_timeout:g} s; "
                                                     "the group cannot recover")  # fmt: skip
                    link.cond.wait(timeout=min(0.25, self._coordinator_timeout - (now - outage)))
                    continue
                if outage is not None:
                    outage = None
                    deadline[0] = max(deadline[0], now + self._join_timeout)
                left = deadline[0] - now
                if left <= 0:
                    return False
                link.cond.wait(timeout=left)

    def _arrive(self, news: Generation) -> Optional[bool]:
        """Meet the other members of ``news`` in the store before the engine connects them.

        Adds one to the generation's arrival count in the store (a key no other generation uses),
        then reads the count (one small request, whatever the size of the generation), first at
        once, then in slices of ``ARRIVE_POLL_MIN_S`` growing to ``ARRIVE_POLL_MAX_S``, waiting
        between reads on the link, so that news from the coordinator ends the wait at once.  True when every member arrived (the engine's connect
        then finds them all); None when a newer generation was announced (this one is doomed: a
        member failed), this worker was fenced or the coordinator is lost; False when
        ``reconfigure_timeout`` passed first.  Store errors propagate (as the connect's would).
        """
        link = self._link
        key, size = f"ptc_ft/arrive/g{news.number}", len(news.members)
        self._store.add(key, 1)

        def doomed() -> bool:
            return self._superseded(news) or link.fenced is not None or link.lost or link.down

        limit = time.monotonic() + self._reconfigure_timeout.total_seconds()
        pause = ARRIVE_POLL_MIN_S
        while True:
            if doomed():
                return None
            if self._store.add(key, 0) >= size:
                return True
            left = limit - time.monotonic()
            if left <= 0:
                return False
            with link.cond:
                link.cond.wait_for(doomed, timeout=min(pause, left))
            pause = min(pause * 2, ARRIVE_POLL_MAX_S)

    def fault_point(self, point: str, at: int, rank: Optional[int]) -> None:
        """Fire the faults of the plan (``faults=``, see :mod:`ptc.distributed.ft.faults`) due here."""
        if self.faults is not None:
            self.faults.point(point, at, self.worker_id, rank)

    def _superseded(self, news: Generation) -> bool:
        latest = self._link.announced
        return latest is not None and latest.number > news.number

    def grow(self) -> Generation:
        """Admit the waiting workers now; every member must call this at the
        same point (a step boundary they agreed on)."""
        self._link.send({"t": "grow", "gen": self._current().number})
        return self.recover()

    def rejoin(self) -> Generation:
        """After :class:`Fenced`: reconnect to the coordinator as a joiner and
        wait to be admitted (the members grow the group at a step boundary)."""
        self._link.close(leave=False)
        self._link = self._connect(None)
        self._event("rejoin", fenced_in=self.generation.number if self.generation else None)
        self.rejoined = True
        self.previous = self.generation = None
        return self.recover()

    def _connect_subgroups(self, news: Generation, subs: Optional[Sequence[Subgroup]] = None) -> None:
        """Build ``subs`` (default: every declared subgroup) in generation ``news``, retiring
        each one's group of an older generation (all members have left it: see connect)."""
        from torch._C._distributed_c10d import PrefixStore

        rank, size = news.rank_of(self.worker_id), len(news.members)
        for sub in self._subgroups if subs is None else subs:
            if sub.pg is not None:
                gloo.retire(sub.pg, sub._sockets)
            sub.pg, sub._sockets, sub.ranks, sub.generation = None, {}, (), news.number
            for i, part in enumerate(sub._partition(size)):
                if rank in part:
                    store = PrefixStore(f"ptc_ft/g{news.number}/sub{sub.index}/{i}", self._store)
                    sub.pg, sub._sockets = gloo.new_group(store, part.index(rank), len(part), self._reconfigure_timeout)
                    sub.pg._get_backend(torch.device("cpu"))._set_default_timeout(self._timeout)
                    sub.ranks = tuple(part)

    def subgroups(self, split: Callable[[int], Sequence[Sequence[int]]]) -> Subgroup:
        """Declare subgroups, rebuilt in every generation.

        ``split(world_size)`` returns disjoint lists of ranks (e.g.
        ``lambda n: [list(range(i, min(i + 2, n))) for i in range(0, n, 2)]``
        pairs neighbours); the returned :class:`Subgroup` is this worker's
        part.  Every member must declare the same subgroups in the same order.
        """
        if not callable(split):
            raise PtcTypeError(f"split: expected a callable world_size -> list of rank lists, got {type(split).__name__}")
        sub = Subgroup(len(self._subgroups), split)
        sub._partition(self.size)  # validate now, with a clear error
        self._subgroups.append(sub)
        try:
            self._connect_subgroups(self._current(), [sub])  # the others are connected already
        except Exception:
            self._subgroups.pop()
            raise
        return sub

    # --- flight recorder -------------------------------------------------------

    # What the Flight Recorder hears from this group, all of it here: a recorder passed as
    # ``flight_recorder=`` is attached to the first generation's group and moved to each later one,
    # and every recorder of the process dumps when news names failed workers.

    def _dump_recorders(self, news: Generation) -> None:
        from ptc.distributed.flight_recorder.recorder import dump_all

        try:
            dump_all(f"ptc fault tolerance: worker(s) {list(news.failed)} failed; generation {news.number}")
        except Exception:  # noqa: BLE001 - a dump must never break recovery
            pass

    def _move_recorder(self, old_pg: Any, new_pg: Any, news: Generation) -> None:
        recorder = self._recorder
        if recorder is None:
            return
        ranks = list(news.members)
        if not self._recorder_attached:
            recorder.attach(new_pg, name=f"ptc_ft.{self.job}", desc="ptc fault-tolerant group", ranks=ranks,
                            generation=news.number)  # fmt: skip
            self._recorder_attached = True
        elif old_pg is new_pg:
            recorder.on_reconfigure(news.number, group=new_pg, ranks=ranks)
        else:
            recorder.on_reconfigure(news.number, group=old_pg, new_group=new_pg, ranks=ranks)

    # --- collectives -------------------------------------------------------------

    def _run(self, what: str, issue: Callable[[Any], Any], group: Optional[Subgroup] = None) -> None:
        gen, work = self._issue(what, issue, group)
        self._await(what, gen, work)

    def _issue(self, what: str, issue: Callable[[Any], Any], group: Optional[Subgroup] = None) -> Tuple[Generation, Any]:
        """Start a collective on this generation's group: ``(generation, work)`` for :meth:`_await`."""
        if self.closed:
            raise PtcValueError(f"{what}: this member closed its group (close() left the job)")
        gen = self._current()
        if self.stale():
            raise self._failure(f"{what}: generation {gen.number} was aborted")
        pg = self._engine.pg if group is None else group.pg
        if pg is None:
            raise PtcValueError(f"group: this rank is not in any part of subgroup {group.index}")  # type: ignore[union-attr]
        try:
            work = issue(pg)
        except RuntimeError as exc:
            raise self._failure(f"{what}: {exc}") from None
        self._count_collective(gen)
        return gen, work

    def _count_collective(self, gen: Optional[Generation] = None) -> None:
        """An issued collective, for the fault injector (``kill inside collective k``)."""
        if self.faults is not None:
            self.faults.collectives += 1
            self.fault_point("collective", self.faults.collectives, (gen or self._current()).rank_of(self.worker_id))

    def _listen_for_news(self, method: Callable[[], None]) -> None:
        """Call the bound ``method`` on the link thread whenever news arrives (kept weakly)."""
        with self._waiters_lock:
            self._news_listeners.append(weakref.WeakMethod(method))

    def _await(self, what: str, gen: Generation, work: Any) -> None:
        """Wait for a collective :meth:`_issue` started; raises PeerFailure (or Fenced)."""
        try:
            work.wait(FAST_WAIT)
            return
        except RuntimeError:
            # timed out (the work goes on), or failed; or it completed right after the timeout
            # struck: the wait below tells them apart (it raises only the work's own error)
            pass
        self._wait_abortable(what, gen, work)

    def _wait_abortable(self, what: str, gen: Generation, work: Any) -> None:
        """Wait for ``work`` until it completes, or until news (a newer generation, fencing, the
        coordinator lost) aborts it: C++ waits of ``ABORTABLE_SLICE`` (see ``FAST_WAIT``), the
        news checked between them.  Registered in ``_waiters`` meanwhile (see :meth:`_release_groups`)."""
        token = object()
        with self._waiters_lock:
            self._waiters.add(token)
        try:
            future = work.get_future()
            limit = time.monotonic() + self._timeout.total_seconds() + 10
            while not future.done():
                if self.stale():
                    if self._finishes_anyway(gen, work, future):
                        break
                    raise self._failure(f"{what}: aborted, generation {gen.number} was replaced")
                if time.monotonic() > limit:
                    raise self._failure(f"{what}: not completed within the timeout")
                _wait_slice(work, ABORTABLE_SLICE)
            try:
                work.wait()
            except RuntimeError as exc:
                raise self._failure(f"{what}: {exc}") from None
        finally:
            with self._waiters_lock:
                self._waiters.discard(token)

    def _finishes_anyway(self, gen: Generation, work: Any, future: Any) -> bool:
        """A newer generation was announced while this collective runs. If nobody of ``gen``
        failed (a grow, or the same members re-formed), every peer is alive and may already have
        completed this very collective: give it ``GROW_GRACE_S`` to complete here too, so that
        members do not disagree about a step only because the announcement overtook the last
        message. True when it completed (the caller returns its result)."""
        if not self._nobody_failed(gen):
            return False
        deadline = time.monotonic() + GROW_GRACE_S
        while not future.done():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            _wait_slice(work, min(ABORTABLE_SLICE, datetime.timedelta(seconds=left)))
        return True

    def _nobody_failed(self, gen: Generation) -> bool:
        """The announced generation keeps every member of ``gen`` (a grow, or the same members
        re-formed) and this member is neither fenced nor cut off: its collectives may complete."""
        news = self._link.announced
        return (self._link.fenced is None and not self._link.lost and news is not None and not news.failed
                and set(gen.members) <= set(news.members))  # fmt: skip

    def allreduce(self, tensor: torch.Tensor, op: str = "sum", *, group: Optional[Subgroup] = None) -> torch.Tensor:
        """In place: ``tensor`` becomes the reduction over the members
        (``op``: "sum", "max", "min", "product").  Raises PeerFailure."""
        from torch.distributed import AllreduceOptions, ReduceOp

        ops = {"sum": ReduceOp.SUM, "max": ReduceOp.MAX, "min": ReduceOp.MIN, "product": ReduceOp.PRODUCT}
        if op not in ops:
            raise PtcValueError(f"op = {op!r}: expected one of {sorted(ops)}")
        buffer = tensor.detach().clone()
        options = AllreduceOptions()
        options.reduceOp = ops[op]
        self._run("allreduce", lambda pg: pg.allreduce([buffer], options), group)
        tensor.copy_(buffer)
        return tensor

    def _allreduce_owned(self, buffer: torch.Tensor) -> None:
        """Sum-allreduce a buffer nobody else will touch (no copies)."""
        self._run("allreduce", lambda pg: pg.allreduce([buffer]))

    def _allreduce_owned_start(self, buffer: torch.Tensor) -> Tuple[Generation, Any]:
        """:meth:`_allreduce_owned` without the wait: pass the result to :meth:`_await`."""
        return self._issue("allreduce", lambda pg: pg.allreduce([buffer]))

    def broadcast(self, tensor: torch.Tensor, src: int, *, group: Optional[Subgroup] = None) -> torch.Tensor:
        """In place: every member's ``tensor`` becomes rank ``src``'s."""
        buffer = tensor.detach().clone()
        self._broadcast_owned(buffer, src, group)
        tensor.copy_(buffer)
        return tensor

    def _broadcast_owned(self, buffer: torch.Tensor, src: int, group: Optional[Subgroup] = None) -> None:
        """:meth:`broadcast` into a buffer nobody else will touch (no copies)."""
        from torch.distributed import BroadcastOptions

        options = BroadcastOptions()
        options.rootRank = int(src)
        options.rootTensor = 0
        self._run("broadcast", lambda pg: pg.broadcast([buffer], options), group)

    def barrier(self) -> None:
        """Wait until every member arrives (an allreduce of one element)."""
        self._allreduce_owned(torch.zeros(1))

    # --- events and shutdown -------------------------------------------------------

    def _event(self, name: str, **data: Any) -> None:
        message = {"t": "event", "name": name, "data": data}
        try:
            problem = wire.check(message, wire.TO_COORDINATOR)
            if problem is None and len(wire.encode(message)) > wire.MAX_LINE:
                problem = f"more than {wire.MAX_LINE} bytes as JSON"
        except (TypeError, ValueError) as exc:  # not JSON: an object json cannot write, a NaN
            problem = f"data is not JSON ({exc})"
        if problem is not None:
            # checked here, not only at the coordinator, which drops a worker that sends an invalid message
            raise PtcValueError(f"event {name!r}: {problem}")
        self._link.send(message)

    def event(self, name: str, **data: Any) -> None:
        """Log a timeline event at the coordinator (one clock for all workers).

        ``data`` is JSON (finite numbers), at most ``wire.MAX_EVENT_FIELDS``
        fields nested ``wire.MAX_EVENT_DEPTH`` deep, without the reserved
        fields ``time``, ``who``, ``event`` and ``worker``; ``name`` is not one
        of the coordinator's own events.  Anything else raises PtcValueError.
        """
        self._event(name, **data)

    def close(self) -> None:
        """Leave the job cleanly (the coordinator does not count it as a failure), and let go
        of this member's process groups (see :meth:`_release_groups`)."""
        if self.closed:
            return
        self.closed = True
        self._link.close(leave=True)
        self._release_groups()

    def _release_groups(self) -> None:
        """Drop this member's references to its current generation's groups (the engine's and the
        subgroups'), so that, unless someone else holds them, they are destroyed now, their
        threads joined while the interpreter is whole: a gloo group still alive when the process
        exits aborts it now and then (std::terminate in torch's teardown while the peers are
        still connected, on both torches).  Not while a collective is being waited for (a
        close from another thread): destroying its group would wait for it."""
        with self._waiters_lock:
            if self._waiters:
                return
        self._engine.pg = self._last_pg = None
        for sub in self._subgroups:
            sub.pg = None

    def __enter__(self) -> "FaultTolerantGroup":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        gen = self.generation
        where = f"generation {gen.number}, rank {self.rank} of {self.size}" if gen else "not connected"
        return f"FaultTolerantGroup(worker {self.worker_id}, {where}, engine {self.engine})"


def init_fault_tolerant(
    coordinator: Optional[str] = None,
    *,
    worker_id: Optional[int] = None,
    world_size: Optional[int] = None,
    store: Any = None,
    min_workers: Optional[int] = None,
    **options: Any,
) -> FaultTolerantGroup:
    """Join (or start) a fault-tolerant job and connect its first generation.

    Where the coordinator is, in order: ``coordinator="host:port"``; the
    ``PTC_FT_COORDINATOR`` environment variable; else a coordinator found
    through (or started from) a bootstrap ``store`` -- the one given, or the
    ``torchrun`` store named by ``MASTER_ADDR``/``MASTER_PORT``.  In that
    case the first worker to arrive starts a detached coordinator process
    (it outlives that worker and exits once the job is idle) with
    ``min_workers`` (default 1) and publishes its address in the store;
    without a configured secret (``secret=``, ``secret_file=``,
    ``$PTC_FT_SECRET``, ``$PTC_FT_SECRET_FILE``) it generates the job's and
    publishes it there too, where the other workers read it.
    ``worker_id`` and ``world_size`` default to ``RANK`` and ``WORLD_SIZE``
    from the environment (as torchrun sets them).  ``min_workers`` larger
    than ``world_size`` is refused.  Other keyword arguments go to
    :class:`FaultTolerantGroup`.
    """
    if worker_id is None:
        worker_id = _env_int("RANK", "worker_id")
    if world_size is None and "WORLD_SIZE" in os.environ:
        world_size = _env_int("WORLD_SIZE", "world_size")
    if min_workers is not None:
        if isinstance(min_workers, bool) or not isinstance(min_workers, int) or min_workers < 1:
            raise PtcValueError(f"min_workers = {min_workers!r}: expected an int >= 1")
        if world_size is not None and min_workers > world_size:
            raise PtcValueError(f"min_workers = {min_workers} > world_size = {world_size}: "
                                "no generation could ever form")  # fmt: skip
    if coordinator is None:
        coordinator = os.environ.get("PTC_FT_COORDINATOR")
    if coordinator is None:
        secret = auth.resolve(options.pop("secret", None), options.pop("secret_file", None))
        hooks: List[Callable[[str], None]] = []
        coordinator, options["secret"] = _coordinator_from_store(
            store, worker_id, world_size, str(options.get("job", "default")),
            float(options.get("connect_timeout", 30.0)), secret, min_workers or 1, respawn=hooks)  # fmt: skip
        options.setdefault("respawn", hooks[0])
    return FaultTolerantGroup(coordinator, worker_id, world_size, **options)


def _env_int(name: str, argument: str) -> int:
    value = os.environ.get(name)
    if value is None:
        raise PtcValueError(f"{argument}: not given and ${name} is not set (pass {argument}= or launch with torchrun)")
    try:
        return int(value)
    except ValueError:
        raise PtcValueError(f"{argument}: ${name} = {value!r} is not an int") from None


def _coordinator_from_store(store: Any, worker_id: int, world_size: Optional[int], job: str, timeout: float,
                            secret: Optional[bytes], min_workers: int,
                            respawn: Optional[List[Callable[[str], None]]] = None) -> Tuple[str, bytes]:  # fmt: skip
    """The coordinator's address and the job secret, through the bootstrap store (the first worker
    there starts the coordinator; see :func:`init_fault_tolerant`); ``respawn`` receives the group's
    hook that starts the coordinator again when the members lost it."""
    import torch.distributed as dist

    if store is None:
        host, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
        if not host or not port:
            raise PtcValueError(
                "coordinator: not given, $PTC_FT_COORDINATOR is unset, and there is no store "
                "(pass coordinator='host:port', store=, or launch with torchrun)"
            )
        try:
            store = dist.TCPStore(host, int(port), is_master=False, timeout=datetime.timedelta(seconds=timeout))
        except Exception as exc:  # noqa: BLE001 - report which store, whatever c10d raised
            raise CoordinatorUnreachable(f"store {host}:{port} (MASTER_ADDR/MASTER_PORT): {exc}") from None
    if world_size is None:
        raise PtcValueError("world_size: not given and $WORLD_SIZE is not set (the coordinator a worker starts "
                            "through the store needs it)")  # fmt: skip
    from ptc.distributed.ft.coordinator import spawn_detached

    key, secret_key = f"ptc_ft/{job}/coordinator", f"ptc_ft/{job}/secret"
    claim = store.compare_set(f"ptc_ft/{job}/spawner", "", str(worker_id))
    if claim == str(worker_id).encode():
        job_secret = secret if secret is not None else auth.new_secret().encode()
        if secret is None:
            store.set(secret_key, job_secret)  # before the address: whoever sees the address finds the secret
        host = os.environ.get("PTC_FT_COORDINATOR_HOST", "127.0.0.1")
        spawn_detached(store, key, world_size=world_size, secret=job_secret, host=host, min_workers=min_workers,
                       job=job)  # fmt: skip
    try:
        store.wait([key], datetime.timedelta(seconds=timeout))
    except Exception as exc:  # noqa: BLE001
        raise CoordinatorUnreachable(f"no coordinator address appeared in the store under {key!r}: {exc}") from None
    if secret is None:
        if not store.check([secret_key]):
            raise MembershipRefused(f"job {job!r}: its coordinator was started with a configured secret; give "
                                    f"this worker the same (${auth.ENV_SECRET}, ${auth.ENV_SECRET_FILE} "
                                    "or secret=)")  # fmt: skip
        secret = bytes(store.get(secret_key))
    job_secret_: bytes = secret
    assert world_size is not None

    def _respawn(address: str) -> None:
        """The detached coordinator at ``address`` is gone: one member (the first to claim this
        incarnation in the store) starts another at the same address; the port decides if two try."""
        incarnation = store.add(f"ptc_ft/{job}/incarnation", 0)
        if store.compare_set(f"ptc_ft/{job}/respawn/{incarnation}", "", str(worker_id)) != str(worker_id).encode():
            return
        host, port = wire.parse_address(address)
        try:
            spawn_detached(store, key, world_size=world_size, secret=job_secret_, host=host, port=port,
                           min_workers=min_workers, job=job)  # fmt: skip
        finally:
            store.add(f"ptc_ft/{job}/incarnation", 1)

    if respawn is not None:
        respawn.append(_respawn)
    return store.get(key).decode(), secret
