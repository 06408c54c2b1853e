"""The coordinator of a fault-tolerant group: membership by generation.

One coordinator serves one job.  It runs outside every worker (a launcher's
thread, ``python -m ptc.distributed.ft.coordinator``, or a detached process that
the first worker starts, see :func:`spawn_detached`), so any worker, rank 0
included, can die without taking the group's state with it.  It owns:

* the job's ``TCPStore`` (the gloo rendezvous of every generation uses it,
  under a prefix unique to the generation, so no key is ever reused), bound
  to the coordinator's own interface;
* one TCP connection per worker (:mod:`ptc.distributed.ft.wire`).  An end of
  file on it means the process died: that is how a crash is seen within
  milliseconds.  A worker that sends no heartbeat for ``heartbeat_timeout``
  seconds (stopped, wedged) is declared failed too, and *fenced*: told so and
  disconnected, so if it wakes up it knows it must rejoin.  So is a member of
  a new generation that does not say ``ready`` within ``ready_timeout``: the
  generation is formed again without it (down to ``min_workers``), so no
  single member can hold the others up;
* the membership.  Generation ``g`` is an ordered list of worker ids; a
  worker's rank is its index.  The coordinator forms generation ``g + 1``

  - when a member fails: the survivors, in their old order (so ranks are
    renumbered deterministically: the first survivor becomes rank 0), plus
    any worker waiting to join;
  - when a member reports a failed collective (``fail``) although nobody is
    known dead: the same members, reconnected;
  - when a member asks to grow (``grow``, at a step boundary all members
    agreed on): the members plus the waiting joiners.

  Forming a generation *is* the abort broadcast: every member gets the
  ``gen`` message at once, so a rank blocked in a collective with the dead
  peer is released even if it never exchanged data with it.  When every
  member said ``ready``, the coordinator sends ``go`` with the reconfigure
  handles in rank order and the members connect.

What survives what: any worker failing, rank 0 included, and several in a
row, down to ``min_workers``; a worker failing while the others reconfigure
(the generation is simply replaced); the coordinator itself dying.  Its
state is soft (as torchft's Lighthouse): if it dies, the members keep
training in their current generation (the data path does not need it) and
reconnect in the background; a coordinator started again with the same
configuration and secret (at the same address, or a standby at the next
address of ``PTC_FT_COORDINATOR=host1:port1,host2:port2``) rebuilds the
state from their hellos, which say what each knows (:meth:`_adopt`): the
generation they are connected in, its members, the newest generation
number they were told of.  When every member of that generation is back
within ``adopt_grace`` seconds it resumes serving it as it is (nobody
reconnects, nobody stops); otherwise it forms the next generation from
those that came back.  Generation numbers continue after the newest one
reported, never reused; the new store (empty) goes out in the welcome and
the members use it from their next generation on.  Run it on a host that
is not a training worker (the launcher, a login node); it uses no
accelerator and little CPU.

Split brain cannot happen while one coordinator runs at a time: it alone
forms generations; a fenced or partitioned worker can only come back as a
joiner.  A restarted or standby coordinator runs no consensus with another
one: whoever starts it (the launcher, a supervisor) must make sure the old
one is dead first, and a standby is started only once the primary is
(two live coordinators that members reconnect to would split the job).

Who may talk to it: the coordinator is the fault domain the data path
trusts, so nothing a peer sends can stop it or change state it should not.
A connection is challenged at once and becomes a worker only with a
``hello`` that proves the job secret for this job id
(:mod:`ptc.distributed.ft.auth`); world size, ``min_workers`` and job id
are the coordinator's own configuration.  Every line is checked against
:data:`wire.SCHEMA` before use; an invalid one, a line over
:data:`wire.MAX_LINE` bytes, or no hello within ``hello_timeout`` closes
that connection (a registered worker that does so is a failed worker) and
is logged as ``rejected`` (at most ``REJECTIONS_LOGGED_PER_S`` a second, the
rest counted once a second; after ``MAX_REJECTIONS_LOGGED`` such records in
the coordinator's life, only counted, once every ``FLOOD_SUMMARY_INTERVAL``
seconds, so a flood that never stops adds a line a minute to the log).  At
most ``MAX_PENDING`` (or the world size, if larger) connections wait for
their hello (a new one closes the oldest); when ``accept`` runs out of
descriptors the listening socket rests for ``ACCEPT_BACKOFF`` seconds; an exception while
handling one connection is logged (``internal_error``) and closes it.

Scale: the coordinator holds one idle TCP connection per worker and handles
``N / heartbeat_interval`` tiny heartbeats a second (1000 workers at the
default 0.1 s: 10k messages/s, one thread; its timed checks run every
``min(0.02, heartbeat_timeout / 4)`` seconds, not per message), and a
membership change encodes two messages of ``O(N)`` bytes once each and
sends them to the ``N`` members.  Across
machines, bind it to a reachable address (``host=``) and pass that address
to the workers; the per-generation cost that does grow is gloo's own
full-mesh connect (``N - 1`` connections per worker).  For very large jobs
the intended shape is the one torchft uses: a fault-tolerant group across
replica groups (one member per replica, e.g. its rank 0 or one per
data-parallel shard), with the model-parallel groups inside a replica on
their own process groups.
"""

from __future__ import annotations

import collections
import datetime
import errno
import json
import os
import selectors
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Set, Union

from ptc.distributed.ft import auth, wire
from ptc.errors import PtcValueError

HELLO_TIMEOUT = 5.0  # seconds a new connection has to complete its hello before it is closed
READY_TIMEOUT = 30.0  # seconds a member of a new generation has to say ready before it is fenced
MAX_PENDING = 64  # connections that have not completed their hello; a new one closes the oldest
ACCEPT_BACKOFF = 0.5  # seconds the listening socket rests after accept() found no descriptor left
SEND_TIMEOUT = 1.0  # seconds one message may take to leave; a peer that does not read is dropped
REJECTIONS_LOGGED_PER_S = 20  # refused and rejected connections logged one by one; the rest counted
MAX_REJECTIONS_LOGGED = 10_000  # rejection records logged one by one in a coordinator's life; then only counted
FLOOD_SUMMARY_INTERVAL = 60.0  # seconds between counts of unlogged rejections once MAX_REJECTIONS_LOGGED is spent
ACCEPTS_PER_WAKEUP = 32  # connections taken from the listen queue per readiness of the listening socket
MAX_REJECTIONS_KEPT = 1000  # records of refused/rejected connections kept in memory (Coordinator.rejections)
MAX_REJECTION_TEXT = 200  # characters of a peer-supplied reason kept in a rejection record

_OUT_OF_DESCRIPTORS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


@dataclass
class _Conn:
    sock: socket.socket
    peer: str = ""
    reader: wire.LineReader = field(default_factory=wire.LineReader)
    nonce: str = field(default_factory=auth.new_nonce)  # this connection's challenge
    accepted: float = field(default_factory=time.monotonic)
    worker: Optional[int] = None  # set once its hello is accepted
    pid: Optional[int] = None
    last_heard: float = field(default_factory=time.monotonic)
    leaving: bool = False
    broken: Optional[str] = None  # why a send failed (the connection is shut down, its end of file follows)
    closed: bool = False

    def __post_init__(self) -> None:
        self.fd = self.sock.fileno()


def _listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket bound to ``host`` (whatever address family it resolves to)."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    return socket.create_server((host, port), family=family, backlog=socket.SOMAXCONN)


def _seconds(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise PtcValueError(f"{name} = {value!r}: expected seconds > 0")
    return float(value)


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PtcValueError(f"{name} = {value!r}: expected an int >= 1")
    return value


class Coordinator:
    """Membership, liveness and abort broadcast for one fault-tolerant job.

    ``world_size``: how many workers form generation 1 (worker ids
    ``0 .. world_size - 1``).  ``min_workers`` (at most ``world_size``): a
    generation is only formed with at least this many members.
    ``heartbeat_timeout``: seconds of silence after which a connected worker
    is declared failed and fenced.  ``ready_timeout``: seconds a member of a
    new generation has to say ``ready`` before it is fenced and the
    generation formed without it; it must exceed the longest compute of a
    step (a member answers news at its next collective) and stay below the
    workers' ``join_timeout``.  ``hello_timeout``: seconds a new connection
    has to complete its hello.  ``job``: the job id a hello must name.

    ``secret`` / ``secret_file`` (else ``$PTC_FT_SECRET`` /
    ``$PTC_FT_SECRET_FILE``): the job secret a hello must prove it knows
    (:mod:`ptc.distributed.ft.auth`); without any, a random one is generated:
    hand ``self.secret`` to the workers.  ``insecure=True``: no secret, no
    proof checked; any process that reaches the port can join.

    ``log``: a path that receives one JSON line per event (the timeline);
    ``on_event`` is called with each.  World size, minimum and job id come
    from here only: a hello cannot change them.

    ``adopt_grace``: a coordinator started while a job runs (after its
    predecessor died) waits this many seconds (default ``heartbeat_timeout``)
    from the first reconnecting member's hello for the rest of that member's
    generation before it forms a new one without those missing.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        world_size: int,
        heartbeat_timeout: float = 2.0,
        min_workers: int = 1,
        ready_timeout: float = READY_TIMEOUT,
        hello_timeout: float = HELLO_TIMEOUT,
        job: str = "default",
        secret: Optional[auth.Secret] = None,
        secret_file: Optional[Union[str, os.PathLike]] = None,
        insecure: bool = False,
        log: Optional[str] = None,
        on_event: Optional[Callable[[Dict[str, Any]], None]] = None,
        adopt_grace: Optional[float] = None,
    ) -> None:
        self.world_size = _count("world_size", world_size)
        self.min_workers = _count("min_workers", min_workers)
        if min_workers > world_size:
            raise PtcValueError(f"min_workers = {min_workers} > world_size = {world_size}: "
                                "no generation could ever form")  # fmt: skip
        self.heartbeat_timeout = _seconds("heartbeat_timeout", heartbeat_timeout)
        self.ready_timeout = _seconds("ready_timeout", ready_timeout)
        self.hello_timeout = _seconds("hello_timeout", hello_timeout)
        self.adopt_grace = self.heartbeat_timeout if adopt_grace is None else _seconds("adopt_grace", adopt_grace)
        if not isinstance(job, str) or not 1 <= len(job) <= wire.MAX_NAME:
            raise PtcValueError(f"job = {job!r}: expected a string of 1..{wire.MAX_NAME} characters")
        self.job = job
        if insecure and (secret is not None or secret_file is not None):
            raise PtcValueError("insecure=True: a coordinator without a secret takes no secret= or secret_file=")
        # the job secret (bytes), None when insecure
        self.secret: Optional[bytes] = None if insecure else (auth.resolve(secret, secret_file)
                                                              or auth.new_secret().encode())  # fmt: skip
        import torch.distributed as dist

        self.host = host
        self._on_event = on_event
        self._log = open(log, "a", buffering=1) if log else None
        # the store listens on the coordinator's own interface: c10d binds every interface
        # unless handed a listening socket (master_listen_fd, served by the libuv backend)
        store_socket = _listen(host, 0)
        store_port = store_socket.getsockname()[1]
        self.store = dist.TCPStore(host, store_port, is_master=True, wait_for_workers=False,
                                   timeout=datetime.timedelta(seconds=60), master_listen_fd=store_socket.detach(),
                                   use_libuv=True)  # fmt: skip
        self._server = _listen(host, port)
        self._server.setblocking(False)
        self.port = self._server.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._server, selectors.EVENT_READ, None)
        self._accept_paused_until: Optional[float] = None
        self._conns: Dict[int, _Conn] = {}  # fd -> every open connection
        self._pending: Dict[int, _Conn] = {}  # fd -> connections without an accepted hello, oldest first
        self._workers: Dict[int, _Conn] = {}  # worker id -> connection (live, registered)
        self.generation = 0
        self.finished = False
        self.members: List[int] = []
        self._ready: Dict[int, str] = {}
        self._ready_deadline: Optional[float] = None  # until go: when the current generation's laggards are fenced
        self._member_set: Set[int] = set()  # self.members as a set (membership tests)
        self._next_tick = 0.0  # when the timed checks run next (serve)
        self._joiners: List[int] = []
        self._held: Optional[Dict[str, Any]] = None  # a generation waiting for min_workers
        self._suspect: Optional[tuple] = None  # (generation, reporter, deadline) of a reported failure
        self.fail_grace = min(0.2, self.heartbeat_timeout / 2)
        self.rejected = 0  # connections closed for what they sent (or did not send), and refused hellos
        self._rejections_window = time.monotonic()
        self._rejections_logged = 0  # in the current window
        self._rejections_logged_ever = 0
        self._rejections_suppressed = 0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.history: List[Dict[str, Any]] = []
        # refused/rejected connections come from peers nobody authenticated: their records are kept in a
        # bounded ring (and written to the log), never in the unbounded history
        self.rejections: "collections.deque[Dict[str, Any]]" = collections.deque(maxlen=MAX_REJECTIONS_KEPT)
        self._log_failed = False
        # rebuilding a running job's state (a coordinator started after its predecessor died):
        # worker -> (gen, members, seen) from the reconnecting members' hellos, and the decision's deadline
        self._reports: Dict[int, tuple] = {}
        self._adopt_deadline: Optional[float] = None

    # --- lifecycle -----------------------------------------------------------

    @property
    def address(self) -> str:
        """``"host:port"`` that workers pass as ``coordinator=``."""
        return f"{self.host}:{self.port}"

    def start(self) -> "Coordinator":
        """Serve in a daemon thread; returns self."""
        self._thread = threading.Thread(target=self.serve, name="ptc-ft-coordinator", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close every connection (workers see the coordinator gone)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for conn in list(self._conns.values()):
            conn.sock.close()
        self._server.close()
        self._end_rejections_window(now=True)  # the count of a window cut short is not lost
        if self._log is not None:
            try:
                self._log.close()
            except OSError:
                pass

    def serve(self, *, exit_when_idle: Optional[float] = None) -> None:
        """Run the event loop until :meth:`stop` (or, with ``exit_when_idle``,
        until no worker was connected for that many seconds after the first came).

        Nothing a peer sends can end it: a message that fails validation closes
        that one connection, and an exception while handling one connection is
        logged (``internal_error``) and closes that connection.
        """
        tick = min(0.02, self.heartbeat_timeout / 4)
        idle_since: Optional[float] = None
        seen_any = False
        while not self._stop.is_set():
            try:
                ready = self._selector.select(timeout=tick)
            except (OSError, ValueError) as exc:
                self._internal_error("select", exc)
                time.sleep(tick)
                ready = []
            for key, _ in ready:
                if key.data is None:
                    self._guarded(self._accept)
                elif not key.data.closed:  # (closed by an earlier handler of this round)
                    self._guarded(self._read, key.data)
            now = time.monotonic()
            if now >= self._next_tick:  # not once per message: every tick seconds at most
                self._next_tick = now + tick
                self._guarded(self._tick)
            if exit_when_idle is not None:
                seen_any = seen_any or bool(self._workers)  # registered workers only: a socket that never
                if self._workers or not seen_any:  # said hello must not keep an idle coordinator alive
                    idle_since = None
                elif idle_since is None:
                    idle_since = time.monotonic()
                elif time.monotonic() - idle_since > exit_when_idle:
                    self._event("coordinator_exit", reason="idle")
                    return

    def _tick(self) -> None:
        """The timed checks, once per loop."""
        self._check_hellos()
        self._check_heartbeats()
        self._check_suspect()
        self._check_ready()
        self._check_adopt()
        self._resume_accepting()
        self._end_rejections_window()

    def _guarded(self, fn: Callable[..., None], conn: Optional[_Conn] = None) -> None:
        try:
            fn() if conn is None else fn(conn)
        except Exception as exc:  # noqa: BLE001 - the loop outlives any one connection's trouble
            self._internal_error(fn.__name__, exc, conn)

    def _internal_error(self, where: str, exc: BaseException, conn: Optional[_Conn] = None) -> None:
        error = f"{type(exc).__name__}: {exc}"[:300]
        try:
            self._event("internal_error", where=where, error=error, worker=conn.worker if conn else None)
            if conn is not None and not conn.closed:
                self._drop(conn, f"internal error while handling its message: {error}")
        except Exception:  # noqa: BLE001 - last resort: at least release the connection (and its worker id)
            if conn is not None and not conn.closed:
                if conn.worker is not None and self._workers.get(conn.worker) is conn:
                    del self._workers[conn.worker]
                self._close(conn)

    # --- connections ---------------------------------------------------------

    def _accept(self) -> None:
        """Take up to ``ACCEPTS_PER_WAKEUP`` connections waiting in the listen queue (one per
        wakeup let a connect storm fill the queue, and honest workers' connects time out)."""
        for k in range(ACCEPTS_PER_WAKEUP):
            if not self._accept_one(first=k == 0):
                return

    def _accept_one(self, first: bool) -> bool:
        """Accept one connection and send its challenge; False when none was taken. Out of
        descriptors, only the wakeup's first accept pauses accepting: Linux reports EMFILE
        before it looks at the queue, and a pause closes a waiting connection (one this
        wakeup just challenged)."""
        try:
            sock, peer = self._server.accept()
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as exc:
            if exc.errno in _OUT_OF_DESCRIPTORS and first:
                self._pause_accepting(exc)
            return False
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        conn = _Conn(sock, peer=f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer))
        self._conns[conn.fd] = conn
        self._pending[conn.fd] = conn
        self._selector.register(sock, selectors.EVENT_READ, conn)
        limit = max(MAX_PENDING, self.world_size)  # a whole job may connect at once
        if len(self._pending) > limit:
            self._reject(self._eviction_victim(), f"more than {limit} connections without a hello: the oldest "
                                                  "of the address holding the most is closed")
        challenge = {"t": "challenge", "proto": wire.PROTOCOL, "nonce": conn.nonce, "auth": self.secret is not None}
        self._send(conn, challenge)
        return True

    def _eviction_victim(self) -> _Conn:
        """The oldest pending connection of the peer host with the most pending connections."""
        counts: Dict[str, int] = {}
        for conn in self._pending.values():
            host = conn.peer.rpartition(":")[0]
            counts[host] = counts.get(host, 0) + 1
        busiest = max(counts, key=counts.__getitem__)
        return next(c for c in self._pending.values() if c.peer.rpartition(":")[0] == busiest)

    def _pause_accepting(self, exc: OSError) -> None:
        """No descriptor left for a new connection: stop polling the listening socket for
        ``ACCEPT_BACKOFF`` seconds (it stays readable, polling it would spin) and close the
        oldest connection without a hello, so a worker can get in."""
        self._selector.unregister(self._server)
        self._accept_paused_until = time.monotonic() + ACCEPT_BACKOFF
        self._log_rejection("accept_paused", error=f"{exc.strerror}", pending=len(self._pending))
        if self._pending:
            self._reject(next(iter(self._pending.values())), "closed to free a descriptor")

    def _resume_accepting(self) -> None:
        if self._accept_paused_until is not None and time.monotonic() >= self._accept_paused_until:
            self._accept_paused_until = None
            self._selector.register(self._server, selectors.EVENT_READ, None)

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn, conn.broken or "connection closed (process exited)")
            return
        conn.last_heard = time.monotonic()
        try:
            conn.reader.feed(data)
            while not conn.closed:
                line = conn.reader.pop()
                if line is None:
                    break
                self._handle(conn, wire.decode(line, wire.TO_COORDINATOR))
        except wire.ProtocolError as exc:
            self._reject(conn, str(exc))

    def _send(self, conn: _Conn, message: Dict[str, Any], data: Optional[bytes] = None) -> None:
        """Send one message (``data``: its encoding, when already made), waiting at most
        ``SEND_TIMEOUT``; a peer that does not take it is shut down (its end of file then
        drops it, in the loop, like any closed connection)."""
        if conn.closed or conn.broken:
            return
        try:
            conn.sock.settimeout(SEND_TIMEOUT)
            conn.sock.sendall(data if data is not None else wire.encode(message))
        except OSError as exc:
            conn.broken = f"could not send to it ({type(exc).__name__})"
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        finally:
            try:
                conn.sock.setblocking(False)
            except OSError:
                pass

    def _close(self, conn: _Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        self._conns.pop(conn.fd, None)
        self._pending.pop(conn.fd, None)
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()

    def _reject(self, conn: _Conn, why: str) -> None:
        """``conn`` sent something invalid (or nothing in time): log why, close it.  A registered
        worker that does is a failed worker."""
        self.rejected += 1
        self._log_rejection("rejected", why=why, worker=conn.worker, peer=conn.peer)
        self._drop(conn, f"invalid message: {why}")

    def _check_hellos(self) -> None:
        limit = time.monotonic() - self.hello_timeout
        for conn in list(self._pending.values()):  # oldest first
            if conn.accepted > limit:
                break
            self._reject(conn, f"no hello within hello_timeout = {self.hello_timeout:g} s")

    def _drop(self, conn: _Conn, why: str) -> None:
        """A connection ended: a failure unless the worker said goodbye.  The membership is updated
        before the socket is closed, so whoever sees the close sees the coordinator's new state."""
        try:
            worker = conn.worker
            if worker is None or self._workers.get(worker) is not conn:
                return
            del self._workers[worker]
            if conn.leaving:
                self._event("left", worker=worker)
                if worker in self._joiners:
                    self._joiners.remove(worker)
                if self.members and not self._alive_members():
                    self._finish()
                return
            self._lost(worker, why)
        finally:
            self._close(conn)

    def _finish(self) -> None:
        """Every member left cleanly: the job is over; joiners still waiting are told so."""
        self.finished = True
        self._ready_deadline = None
        self._event("job_finished", gen=self.generation)
        for joiner in list(self._joiners):  # nobody is left to admit them
            self._fence(joiner, "the job has finished: every member left", finished=True)
        self._joiners = []

    def _fence(self, worker: int, reason: str, *, finished: bool = False) -> None:
        """Tell ``worker`` it is out (it must stop using its group) and disconnect it."""
        conn = self._workers.pop(worker)
        message: Dict[str, Any] = {"t": "fenced", "reason": reason}
        if finished:
            message["finished"] = True
        self._send(conn, message)
        self._close(conn)

    def _lost(self, worker: int, why: str) -> None:
        self._event("worker_failed", worker=worker, why=why)
        if worker in self._joiners:
            self._joiners.remove(worker)
        if worker in self._member_set:
            survivors = self._alive_members()
            self._form(survivors + self._joiners, failed=[worker], reason=f"worker {worker} failed: {why}")

    def _alive_members(self) -> List[int]:
        """The current generation's members that are still connected, in rank order."""
        return [m for m in self.members if m in self._workers]

    def _check_suspect(self) -> None:
        """A reported failure nobody's liveness explained within ``fail_grace``: reconnect the same members."""
        if self._suspect is None:
            return
        gen, worker, deadline = self._suspect
        if gen != self.generation:
            self._suspect = None  # already replaced (the liveness check found the culprit)
        elif time.monotonic() >= deadline:
            self._suspect = None
            alive = self._alive_members()
            self._form(alive + self._joiners, failed=[m for m in self.members if m not in alive],
                       reason=f"worker {worker} reported a failed collective")  # fmt: skip

    def _check_heartbeats(self) -> None:
        now = time.monotonic()
        for worker, conn in list(self._workers.items()):
            if now - conn.last_heard > self.heartbeat_timeout and self._workers.get(worker) is conn:
                self._fence(worker, f"no heartbeat for {self.heartbeat_timeout:g} s")
                self._lost(worker, f"no heartbeat for {now - conn.last_heard:.2f} s (hung or stopped); fenced")

    def _check_ready(self) -> None:
        """Members of the current generation not ready within ``ready_timeout`` are fenced and
        the generation is formed without them."""
        if self._ready_deadline is None or time.monotonic() < self._ready_deadline:
            return
        self._ready_deadline = None
        late = [m for m in self.members if m not in self._ready]
        why = f"not ready for generation {self.generation} within ready_timeout = {self.ready_timeout:g} s"
        for worker in late:
            if worker in self._workers:
                self._fence(worker, why)
            self._event("worker_failed", worker=worker, why=f"{why}; fenced")
            if worker in self._joiners:
                self._joiners.remove(worker)
        self._form(self._alive_members() + self._joiners, failed=late, reason=f"worker(s) {late} {why}")

    # --- messages ------------------------------------------------------------

    def _handle(self, conn: _Conn, message: Dict[str, Any]) -> None:
        """One validated message (see :data:`wire.SCHEMA`); raises ProtocolError for one out of turn."""
        kind = message["t"]
        if conn.worker is None:
            if kind != "hello":
                raise wire.ProtocolError(f"{kind!r} before hello")
            self._hello(conn, message)
            return
        if kind == "hello":
            raise wire.ProtocolError("a second hello on one connection")
        worker = conn.worker
        if self._workers.get(worker) is not conn:
            return  # a fenced or replaced connection has no say
        if kind == "ready":
            self._on_ready(worker, message["gen"], message["handle"])
        elif kind == "fail":
            gen = message["gen"]
            self._event("collective_failed", worker=worker, gen=gen, err=message.get("err", ""))
            if gen == self.generation and worker in self._member_set and self._suspect is None:
                # The reporter's transport often sees a crash a few ms before our connection does: give the
                # liveness check a moment to name the dead worker before re-forming the same members.
                self._suspect = (gen, worker, time.monotonic() + self.fail_grace)
        elif kind == "grow":
            if message["gen"] == self.generation and worker in self._member_set:
                self._form(self.members + self._joiners, failed=[], reason="grow: admit waiting workers")
        elif kind == "event":
            self._record(message["name"], {"worker": worker, **message.get("data", {})})
        elif kind == "leave":
            conn.leaving = True

    def _hello(self, conn: _Conn, message: Dict[str, Any]) -> None:
        worker, job = message["worker"], message["job"]
        if job != self.job:
            self._refuse(conn, f"job {job[:40]!r}: this coordinator serves job {self.job[:40]!r}")
            return
        if self.secret is not None:
            expected = auth.hello_proof(self.secret, conn.nonce, job, worker)
            if not auth.matches(expected, message.get("proof")):
                self._refuse(conn, f"authentication failed for worker {worker}: no proof of this job's secret (give "
                                   f"every worker the secret: ${auth.ENV_SECRET}, ${auth.ENV_SECRET_FILE} or secret=)")  # fmt: skip
                return
        world = message.get("world")
        if world is not None and world != self.world_size:
            self._refuse(conn, f"world_size = {world}: this job was started with world_size = {self.world_size}")
            return
        if self.finished:
            self._refuse(conn, "the job has finished: every member of its last generation left cleanly", finished=True)
            return
        existing = self._workers.get(worker)
        if existing is not None:
            self._refuse(conn, f"worker id {worker} is already taken by a live process (pid {existing.pid})")
            return
        report = None
        if "gen" in message or "members" in message or "seen" in message:
            if not ("gen" in message and "members" in message and "seen" in message):
                raise wire.ProtocolError("hello: gen, members and seen come together")
            # a generation that failed at the reporter cannot be resumed: count it as seen over
            report = (message["gen"], list(message["members"]), message["seen"] + bool(message.get("broken")))
            if worker not in report[1] or report[2] < report[0]:
                raise wire.ProtocolError("hello: a member's report names it in its members, seen >= gen")
        adopting = report is not None and self.generation == 0 and self._held is None and not self.finished
        if self.generation == 0 and worker >= self.world_size and not adopting and self._adopt_deadline is None:
            self._refuse(conn, f"worker id {worker}: must be < world_size = {self.world_size} for the first generation")
            return
        self._pending.pop(conn.fd, None)
        conn.worker, conn.pid = worker, message.get("pid")
        self._workers[worker] = conn
        proof = None
        if self.secret is not None:
            proof = auth.welcome_proof(self.secret, message["nonce"], conn.nonce, job, worker)
        self._send(conn, {"t": "welcome", "store_port": self.store.port, "gen": self.generation,
                          "world": self.world_size, "min_workers": self.min_workers, "proof": proof})  # fmt: skip
        self._event("hello", worker=worker, pid=conn.pid,
                    **({} if report is None else {"gen": report[0], "seen": report[2]}))  # fmt: skip
        if adopting or (self._adopt_deadline is not None and self.generation == 0):
            if report is not None:
                self._reports[worker] = report
            else:
                self._joiners.append(worker)
            if self._adopt_deadline is None:
                self._adopt_deadline = time.monotonic() + self.adopt_grace
            self._check_adopt()
            return
        if self.generation == 0 and self._held is None:
            if len(self._workers) >= self.world_size:
                self._form(sorted(self._workers), failed=[], reason="initial")
            return
        self._joiners.append(worker)
        alive = self._alive_members()
        if not alive or self._held is not None:
            self._form(alive + self._joiners, failed=[], reason="join (no running generation)")
        else:
            for m in alive:
                self._send(self._workers[m], {"t": "join_pending", "workers": list(self._joiners)})

    def _check_adopt(self) -> None:
        """While rebuilding a running job's state: adopt it once every member of the newest
        reported generation is back, or at ``adopt_grace`` with whoever is (:meth:`_adopt`)."""
        if self._adopt_deadline is None:
            return
        reports = {w: r for w, r in self._reports.items() if w in self._workers}
        if not reports:
            if time.monotonic() >= self._adopt_deadline:
                self._reports, self._adopt_deadline = {}, None  # every reporter left again: start afresh
                self._event("adopt_abandoned", reason="no reconnected member left")
                if self._joiners:
                    self._form(list(self._joiners), failed=[], reason="join (no running generation)")
            return
        gen, members, _ = max(reports.values(), key=lambda r: r[0])
        seen = max(r[2] for r in reports.values())
        complete = all(m in reports and reports[m][0] == gen for m in members) and seen == gen
        if complete or time.monotonic() >= self._adopt_deadline:
            self._adopt(gen, members, seen, reports)

    def _adopt(self, gen: int, members: List[int], seen: int, reports: Dict[int, tuple]) -> None:
        """Take over a running job: generation ``gen`` of ``members`` (the newest a reconnected member
        is connected in).  Resumed as it is when all its members are back and none was told of a newer
        one (a generation formed just before the old coordinator died); else the next generation
        (numbered after ``seen``) is formed from those back, in their old order, then the rest."""
        self._adopt_deadline, self._reports = None, {}
        back = [m for m in members if m in reports]
        missing = [m for m in members if m not in reports]
        others = [w for w in reports if w not in members]  # reported an older generation
        self.generation, self.members, self._member_set = seen, list(members), set(members)
        if not missing and seen == gen and all(reports[m][0] == gen for m in members):
            self._ready = {m: "" for m in members}
            self._ready_deadline = None
            self._event("adopted", gen=gen, members=list(members), resumed=True)
            self._joiners = [j for j in self._joiners if j not in members] + others
            if self._joiners:
                for m in members:
                    self._send(self._workers[m], {"t": "join_pending", "workers": list(self._joiners)})
            return
        self._event("adopted", gen=gen, members=list(members), resumed=False, seen=seen, missing=missing)
        self._form(back + others + self._joiners, failed=missing,
                   reason=f"coordinator restarted: generation {gen} adopted, missing {missing}")  # fmt: skip

    def _refuse(self, conn: _Conn, error: str, *, finished: bool = False) -> None:
        """Answer a hello with ``refused`` and close the connection; nothing else changes."""
        error = error[: wire.MAX_TEXT]  # the schema's cap: a longer one is a protocol error at the worker
        message: Dict[str, Any] = {"t": "refused", "error": error}
        if finished:
            message["finished"] = True
        self._send(conn, message)
        self.rejected += 1
        self._log_rejection("refused", error=error, peer=conn.peer)
        self._close(conn)

    def _form(self, members: List[int], *, failed: List[int], reason: str) -> None:
        members = list(dict.fromkeys(m for m in members if m in self._workers))
        if len(members) < self.min_workers:
            self._held = {"failed": failed, "reason": reason}
            self._ready_deadline = None
            self._event("waiting_for_workers", have=len(members), need=self.min_workers)
            return
        self._held = None
        joined = [m for m in members if m not in self._member_set]
        self.generation += 1
        self.members = members
        self._member_set = set(members)
        self._joiners = [j for j in self._joiners if j not in members]
        self._ready = {}
        self._ready_deadline = time.monotonic() + self.ready_timeout
        message = {"t": "gen", "gen": self.generation, "members": members, "failed": failed,
                   "joined": joined, "reason": reason[: wire.MAX_TEXT]}  # fmt: skip
        self._event("generation", gen=self.generation, members=members, failed=failed, joined=joined, reason=reason)
        self._broadcast(members, message)

    def _on_ready(self, worker: int, gen: int, handle: str) -> None:
        if gen != self.generation or worker not in self._member_set:
            return
        self._ready[worker] = handle
        if len(self._ready) == len(self.members):
            self._ready_deadline = None
            message = {"t": "go", "gen": gen, "handles": [self._ready[m] for m in self.members]}
            # on the timeline: from here the members connect; a failure before they all did dooms the
            # generation (the next one's announcement tells them to abandon it: FaultTolerantGroup._arrive)
            self._event("go", gen=gen, size=len(self.members))
            self._broadcast(self.members, message)

    def _broadcast(self, workers: List[int], message: Dict[str, Any]) -> None:
        """Send ``message`` to each of ``workers``, encoded once (a generation's news is O(N))."""
        data = wire.encode(message)
        for m in workers:
            self._send(self._workers[m], message, data)

    # --- the timeline --------------------------------------------------------

    def _event(self, name: str, **data: Any) -> None:
        self._record(name, data)

    def _record(self, name: str, data: Dict[str, Any], *, keep: bool = True) -> None:
        """Record one event (``keep=False``: in the bounded ``rejections`` ring, not ``history``).  The
        timeline is best effort: a log that cannot be written (disk full) or an ``on_event`` that raises
        never stops the membership change that recorded it."""
        record = {"time": time.time(), "who": "coordinator", "event": name, **data}
        (self.history if keep else self.rejections).append(record)
        if self._log is not None:
            try:
                self._log.write(json.dumps(record) + "\n")
                self._log_failed = False
            except (OSError, ValueError) as exc:
                if not self._log_failed:  # once per outage, not once per event
                    self._log_failed = True
                    print(f"ptc coordinator: cannot write its log: {exc}", file=sys.stderr, flush=True)
        if self._on_event is not None:
            try:
                self._on_event(record)
            except Exception as exc:  # noqa: BLE001 - a callback's bug is not the membership's
                print(f"ptc coordinator: on_event raised {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)

    def _log_rejection(self, name: str, **data: Any) -> None:
        """Log a refused or rejected connection, at most ``REJECTIONS_LOGGED_PER_S`` a second and
        ``MAX_REJECTIONS_LOGGED`` in all; the others are counted in one ``rejections_suppressed``
        event a window (a second; ``FLOOD_SUMMARY_INTERVAL`` once the budget is spent)."""
        self._end_rejections_window()
        if self._rejections_logged < REJECTIONS_LOGGED_PER_S and self._rejections_logged_ever < MAX_REJECTIONS_LOGGED:
            self._rejections_logged += 1
            self._rejections_logged_ever += 1
            data = {k: v[:MAX_REJECTION_TEXT] if isinstance(v, str) else v for k, v in data.items()}
            self._record(name, data, keep=False)
        else:
            self._rejections_suppressed += 1

    def _end_rejections_window(self, *, now: bool = False) -> None:
        """Close the window of rejection counting once it has lasted its length (``now``: at once):
        record how many went unlogged in it, if any, and start the next."""
        length = 1.0 if self._rejections_logged_ever < MAX_REJECTIONS_LOGGED else FLOOD_SUMMARY_INTERVAL
        if not now and time.monotonic() - self._rejections_window < length:
            return
        if self._rejections_suppressed:
            self._record("rejections_suppressed", {"count": self._rejections_suppressed}, keep=False)
        self._rejections_window, self._rejections_logged, self._rejections_suppressed = time.monotonic(), 0, 0


# --- a detached coordinator process ------------------------------------------


def spawn_detached(bootstrap_store: Any, key: str, *, world_size: int, secret: bytes, host: str = "127.0.0.1",
                   port: int = 0, min_workers: int = 1, job: str = "default", heartbeat_timeout: float = 2.0,
                   idle_exit: float = 30.0) -> Optional[int]:  # fmt: skip
    """Start a coordinator process in its own session and publish its address
    under ``key`` in ``bootstrap_store``.  Returns its PID.  ``port``: where
    it listens (0: a free one); the torchrun path starts it again at the same
    address when the members lost it (:func:`ptc.distributed.ft.group.init_fault_tolerant`).

    The process gets ``secret`` in its environment (``$PTC_FT_SECRET``), never
    on its command line.  It is not a child that dies with its parent: it
    outlives the worker that started it, and exits by itself once no worker
    has been connected for ``idle_exit`` seconds
    (``$PTC_FT_COORDINATOR_IDLE_EXIT`` overrides it;
    ``$PTC_FT_COORDINATOR_PIDFILE`` names a file that receives its PID, for
    whoever has to clean up; ``$PTC_FT_COORDINATOR_LOG`` one that receives
    its timeline, JSON lines, appended to by every coordinator started there).
    """
    idle_exit = float(os.environ.get("PTC_FT_COORDINATOR_IDLE_EXIT", idle_exit))
    args = [sys.executable, "-m", "ptc.distributed.ft.coordinator", "--host", host, "--port", str(port),
            "--world-size", str(world_size),
            "--min-workers", str(min_workers), "--job", job, "--heartbeat-timeout", str(heartbeat_timeout),
            "--idle-exit", str(idle_exit), "--print-address"]  # fmt: skip
    if os.environ.get("PTC_FT_COORDINATOR_PIDFILE"):
        args += ["--pid-file", os.environ["PTC_FT_COORDINATOR_PIDFILE"]]
    if os.environ.get("PTC_FT_COORDINATOR_LOG"):
        args += ["--log", os.environ["PTC_FT_COORDINATOR_LOG"]]
    env = {**os.environ, "OMP_NUM_THREADS": "1", auth.ENV_SECRET: os.fsdecode(secret)}
    env.pop(auth.ENV_SECRET_FILE, None)
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                            start_new_session=True, env=env)  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline().decode().strip()
    proc.stdout.close()
    if not line:
        raise PtcValueError("the detached coordinator did not start (no address printed)")
    bootstrap_store.set(key, line)
    return proc.pid


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m ptc.distributed.ft.coordinator``: serve one job until idle.

    The job secret comes from ``--secret-file``, ``$PTC_FT_SECRET`` or
    ``$PTC_FT_SECRET_FILE`` (never from the command line, which other users
    can read); without one it refuses to start unless ``--insecure``.
    """
    import argparse

    parser = argparse.ArgumentParser(prog="python -m ptc.distributed.ft.coordinator", description=main.__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="the interface to serve on (and the store's)")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--world-size", type=int, required=True, help="workers of the first generation")
    parser.add_argument("--min-workers", type=int, default=1)
    parser.add_argument("--heartbeat-timeout", type=float, default=2.0)
    parser.add_argument("--ready-timeout", type=float, default=READY_TIMEOUT)
    parser.add_argument("--hello-timeout", type=float, default=HELLO_TIMEOUT)
    parser.add_argument("--adopt-grace", type=float, default=None,
                        help="started while a job runs: seconds to wait for every member of its generation")
    parser.add_argument("--job", default="default", help="the job id every hello must name")
    parser.add_argument("--secret-file", default=None, help="a file holding the job secret")
    parser.add_argument("--insecure", action="store_true",
                        help="serve without a job secret: any process that reaches the port can join")
    parser.add_argument("--idle-exit", type=float, default=None, help="exit after this many idle seconds")
    parser.add_argument("--log", default=None, help="JSON lines timeline")
    parser.add_argument("--print-address", action="store_true")
    parser.add_argument("--pid-file", default=None, help="write this process's PID here")
    args = parser.parse_args(argv)
    try:
        if not args.insecure and auth.resolve(secret_file=args.secret_file) is None:
            parser.error(f"no job secret: set ${auth.ENV_SECRET} or ${auth.ENV_SECRET_FILE}, or pass --secret-file "
                         f"PATH ({auth.HOW_TO_MAKE_ONE}); --insecure serves without one")  # fmt: skip
        coordinator = Coordinator(args.host, args.port, world_size=args.world_size, min_workers=args.min_workers,
                                  heartbeat_timeout=args.heartbeat_timeout, ready_timeout=args.ready_timeout,
                                  hello_timeout=args.hello_timeout, job=args.job, secret_file=args.secret_file,
                                  insecure=args.insecure, log=args.log, adopt_grace=args.adopt_grace)  # fmt: skip
    except PtcValueError as exc:
        parser.error(str(exc))
    if args.pid_file:
        with open(args.pid_file, "w") as f:
            f.write(str(os.getpid()))
    print(coordinator.address if args.print_address else f"ptc coordinator at {coordinator.address}", flush=True)
    try:
        coordinator.serve(exit_when_idle=args.idle_exit)
    except KeyboardInterrupt:
        pass
    finally:
        coordinator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
