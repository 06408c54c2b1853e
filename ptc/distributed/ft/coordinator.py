"""The coordinator of a fault-tolerant group: membership by generation.

One coordinator serves one job.  It runs outside every worker (a launcher's
thread, ``python -m ptc.distributed.ft.coordinator``, or a detached process that
the first worker starts, see :func:`spawn_detached`), so any worker, rank 0
included, can die without taking the group's state with it.  It owns:

* the job's ``TCPStore`` (the gloo rendezvous of every generation uses it,
  under a prefix unique to the generation, so no key is ever reused);
* one TCP connection per worker (:mod:`ptc.distributed.ft.wire`).  An end of
  file on it means the process died: that is how a crash is seen within
  milliseconds.  A worker that sends no heartbeat for ``heartbeat_timeout``
  seconds (stopped, wedged) is declared failed too, and *fenced*: told so and
  disconnected, so if it wakes up it knows it must rejoin;
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
(the generation is simply replaced).  The coordinator itself is the one
process that must stay up: if it dies, the workers keep training in their
current generation, but a later failure can no longer be survived (it
surfaces as :class:`~ptc.errors.PeerFailure` after the process-group
timeout, saying the coordinator is gone).  Run it on a host that is not a
training worker (the launcher, a login node); it uses no accelerator and
little CPU.

Split brain cannot happen: there is one coordinator and it alone forms
generations; a fenced or partitioned worker can only come back as a joiner.

Scale: the coordinator holds one idle TCP connection per worker and handles
``N / heartbeat_interval`` tiny heartbeats a second (1000 workers at the
default 0.1 s: 10k messages/s, one thread), and a membership change costs
it ``2 N`` small messages; nothing it does grows faster than ``N``.  Across
machines, bind it to a reachable address (``host=``) and pass that address
to the workers; the per-generation cost that does grow is gloo's own
full-mesh connect (``N - 1`` connections per worker).  For very large jobs
the intended shape is the one torchft uses: a fault-tolerant group across
replica groups (one member per replica, e.g. its rank 0 or one per
data-parallel shard), with the model-parallel groups inside a replica on
their own process groups.
"""

from __future__ import annotations

import datetime
import json
import os
import selectors
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from ptc.distributed.ft import wire
from ptc.errors import PtcValueError


@dataclass
class _Conn:
    sock: socket.socket
    reader: wire.LineReader = field(default_factory=wire.LineReader)
    worker: Optional[int] = None
    pid: Optional[int] = None
    last_heard: float = field(default_factory=time.monotonic)
    leaving: bool = False


class Coordinator:
    """Membership, liveness and abort broadcast for one fault-tolerant job.

    ``world_size``: how many workers form generation 1 (None: taken from the
    first worker's hello).  ``heartbeat_timeout``: seconds of silence after
    which a connected worker is declared failed and fenced.  ``min_workers``:
    a generation is only formed with at least this many members.  ``log``: a
    path that receives one JSON line per membership event (the timeline).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        world_size: Optional[int] = None,
        heartbeat_timeout: float = 2.0,
        min_workers: int = 1,
        log: Optional[str] = None,
        on_event: Optional[Callable[[Dict[str, Any]], None]] = None,
    ) -> None:
        if world_size is not None and (not isinstance(world_size, int) or world_size < 1):
            raise PtcValueError(f"world_size = {world_size!r}: expected an int >= 1 or None")
        if not isinstance(heartbeat_timeout, (int, float)) or heartbeat_timeout <= 0:
            raise PtcValueError(f"heartbeat_timeout = {heartbeat_timeout!r}: expected seconds > 0")
        if not isinstance(min_workers, int) or min_workers < 1:
            raise PtcValueError(f"min_workers = {min_workers!r}: expected an int >= 1")
        import torch.distributed as dist

        self.host = host
        self.world_size = world_size
        self.heartbeat_timeout = float(heartbeat_timeout)
        self.min_workers = min_workers
        self._on_event = on_event
        self._log = open(log, "a", buffering=1) if log else None
        self.store = dist.TCPStore(host, 0, is_master=True, wait_for_workers=False,
                                   timeout=datetime.timedelta(seconds=60))  # fmt: skip
        self._server = socket.create_server((host, port))
        self._server.setblocking(False)
        self.port = self._server.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._server, selectors.EVENT_READ, None)
        self._conns: Dict[int, _Conn] = {}  # fileno -> connection
        self._workers: Dict[int, _Conn] = {}  # worker id -> connection (live, registered)
        self.generation = 0
        self.finished = False
        self.members: List[int] = []
        self._ready: Dict[int, str] = {}
        self._joiners: List[int] = []
        self._held: Optional[Dict[str, Any]] = None  # a generation waiting for min_workers
        self._suspect: Optional[tuple] = None  # (generation, reporter, deadline) of a reported failure
        self.fail_grace = min(0.2, self.heartbeat_timeout / 2)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.history: List[Dict[str, Any]] = []

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
        if self._log is not None:
            self._log.close()

    def serve(self, *, exit_when_idle: Optional[float] = None) -> None:
        """Run the event loop until :meth:`stop` (or, with ``exit_when_idle``,
        until no worker was connected for that many seconds after the first came)."""
        tick = min(0.02, self.heartbeat_timeout / 4)
        idle_since: Optional[float] = None
        seen_any = False
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=tick):
                if key.data is None:
                    self._accept()
                else:
                    self._read(key.data)
            self._check_heartbeats()
            self._check_suspect()
            if exit_when_idle is not None:
                seen_any = seen_any or bool(self._conns)
                if self._conns or not seen_any:
                    idle_since = None
                elif idle_since is None:
                    idle_since = time.monotonic()
                elif time.monotonic() - idle_since > exit_when_idle:
                    self._event("coordinator_exit", reason="idle")
                    return

    # --- connections ---------------------------------------------------------

    def _accept(self) -> None:
        try:
            sock, _ = self._server.accept()
        except OSError:
            return
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Conn(sock)
        self._conns[sock.fileno()] = conn
        self._selector.register(sock, selectors.EVENT_READ, conn)

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn, "connection closed (process exited)")
            return
        conn.last_heard = time.monotonic()
        try:
            messages = conn.reader.feed(data)
        except ValueError:
            self._drop(conn, "garbled message")
            return
        for message in messages:
            self._handle(conn, message)

    def _send(self, conn: _Conn, message: Dict[str, Any]) -> None:
        conn.sock.setblocking(True)
        try:
            wire.send(conn.sock, message)
        finally:
            conn.sock.setblocking(False)

    def _close(self, conn: _Conn) -> None:
        self._conns.pop(conn.sock.fileno(), None)
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()

    def _drop(self, conn: _Conn, why: str) -> None:
        """A connection ended: a failure unless the worker said goodbye."""
        self._close(conn)
        worker = conn.worker
        if worker is None or self._workers.get(worker) is not conn:
            return
        del self._workers[worker]
        if conn.leaving:
            self._event("left", worker=worker)
            if worker in self._joiners:
                self._joiners.remove(worker)
            if self.members and not self._alive_members():
                self.finished = True  # every member left cleanly: the job is over
                self._event("job_finished", gen=self.generation)
                for joiner in list(self._joiners):  # nobody is left to admit them
                    waiting = self._workers.pop(joiner)
                    self._send(waiting, {"t": "fenced", "reason": "the job has finished: every member left"})
                    self._close(waiting)
                self._joiners = []
            return
        self._lost(worker, why)

    def _lost(self, worker: int, why: str) -> None:
        self._event("worker_failed", worker=worker, why=why)
        if worker in self._joiners:
            self._joiners.remove(worker)
        if worker in self.members:
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
            if now - conn.last_heard > self.heartbeat_timeout:
                self._send(conn, {"t": "fenced", "reason": f"no heartbeat for {self.heartbeat_timeout:g} s"})
                del self._workers[worker]
                self._close(conn)
                self._lost(worker, f"no heartbeat for {now - conn.last_heard:.2f} s (hung or stopped); fenced")

    # --- messages ------------------------------------------------------------

    def _handle(self, conn: _Conn, message: Dict[str, Any]) -> None:
        kind = message.get("t")
        if kind == "hb":
            return
        if kind == "hello":
            self._hello(conn, message)
            return
        worker = conn.worker
        if worker is None or self._workers.get(worker) is not conn:
            return  # a fenced or unregistered connection has no say
        if kind == "ready":
            self._on_ready(worker, int(message["gen"]), str(message.get("handle", "")))
        elif kind == "fail":
            gen = int(message["gen"])
            self._event("collective_failed", worker=worker, gen=gen, err=str(message.get("err", ""))[:300])
            if gen == self.generation and worker in self.members and self._suspect is None:
                # The reporter's transport often sees a crash a few ms before our connection does: give the
                # liveness check a moment to name the dead worker before re-forming the same members.
                self._suspect = (gen, worker, time.monotonic() + self.fail_grace)
        elif kind == "grow":
            gen = int(message["gen"])
            if gen == self.generation and worker in self.members:
                self._form(self.members + self._joiners, failed=[], reason="grow: admit waiting workers")
        elif kind == "event":
            self._event(str(message.get("name", "event")), worker=worker, **dict(message.get("data") or {}))
        elif kind == "leave":
            conn.leaving = True

    def _hello(self, conn: _Conn, message: Dict[str, Any]) -> None:
        worker, world = message.get("worker"), message.get("world")
        if not isinstance(worker, int) or worker < 0:
            self._refuse(conn, f"worker id {worker!r}: expected an int >= 0")
            return
        if world is not None:
            if self.world_size is None and self.generation == 0:
                self.world_size = int(world)
            elif world != self.world_size:
                self._refuse(conn, f"world_size = {world}: this job was started with world_size = {self.world_size}")
                return
        if self.finished:
            self._refuse(conn, "the job has finished: every member of its last generation left cleanly")
            return
        existing = self._workers.get(worker)
        if existing is not None:
            self._refuse(conn, f"worker id {worker} is already taken by a live process (pid {existing.pid})")
            return
        if self.generation == 0 and self.world_size is not None and worker >= self.world_size:
            self._refuse(conn, f"worker id {worker}: must be < world_size = {self.world_size} for the first generation")
            return
        conn.worker, conn.pid = worker, message.get("pid")
        self._workers[worker] = conn
        self._send(conn, {"t": "welcome", "store_port": self.store.port, "gen": self.generation})
        self._event("hello", worker=worker, pid=conn.pid)
        if self.generation == 0 and self._held is None:
            if self.world_size is not None and len(self._workers) >= self.world_size:
                self._form(sorted(self._workers), failed=[], reason="initial")
            return
        self._joiners.append(worker)
        alive = self._alive_members()
        if not alive or self._held is not None:
            self._form(alive + self._joiners, failed=[], reason="join (no running generation)")
        else:
            for m in alive:
                self._send(self._workers[m], {"t": "join_pending", "workers": list(self._joiners)})

    def _refuse(self, conn: _Conn, error: str) -> None:
        self._send(conn, {"t": "refused", "error": error})
        self._event("refused", error=error)
        self._close(conn)

    def _form(self, members: List[int], *, failed: List[int], reason: str) -> None:
        members = list(dict.fromkeys(m for m in members if m in self._workers))
        if len(members) < self.min_workers:
            self._held = {"failed": failed, "reason": reason}
            self._event("waiting_for_workers", have=len(members), need=self.min_workers)
            return
        self._held = None
        joined = [m for m in members if m not in self.members]
        self.generation += 1
        self.members = members
        self._joiners = [j for j in self._joiners if j not in members]
        self._ready = {}
        message = {"t": "gen", "gen": self.generation, "members": members, "failed": failed,
                   "joined": joined, "reason": reason}  # fmt: skip
        self._event("generation", gen=self.generation, members=members, failed=failed, joined=joined, reason=reason)
        for m in members:
            self._send(self._workers[m], message)

    def _on_ready(self, worker: int, gen: int, handle: str) -> None:
        if gen != self.generation or worker not in self.members:
            return
        self._ready[worker] = handle
        if len(self._ready) == len(self.members):
            message = {"t": "go", "gen": gen, "handles": [self._ready[m] for m in self.members]}
            for m in self.members:
                self._send(self._workers[m], message)

    def _event(self, name: str, **data: Any) -> None:
        record = {"time": time.time(), "who": "coordinator", "event": name, **data}
        self.history.append(record)
        if self._log is not None:
            self._log.write(json.dumps(record) + "\n")
        if self._on_event is not None:
            self._on_event(record)


# --- a detached coordinator process ------------------------------------------


def spawn_detached(bootstrap_store: Any, key: str, *, host: str = "127.0.0.1", world_size: Optional[int] = None,
                   heartbeat_timeout: float = 2.0, idle_exit: float = 30.0) -> Optional[int]:  # fmt: skip
    """Start a coordinator process in its own session and publish its address
    under ``key`` in ``bootstrap_store``.  Returns its PID.

    The process is not a child that dies with its parent: it outlives the
    worker that started it, and exits by itself once no worker has been
    connected for ``idle_exit`` seconds (``$PTC_FT_COORDINATOR_IDLE_EXIT``
    overrides it; ``$PTC_FT_COORDINATOR_PIDFILE`` names a file that receives
    its PID, for whoever has to clean up).
    """
    idle_exit = float(os.environ.get("PTC_FT_COORDINATOR_IDLE_EXIT", idle_exit))
    args = [sys.executable, "-m", "ptc.distributed.ft.coordinator", "--host", host,
            "--heartbeat-timeout", str(heartbeat_timeout), "--idle-exit", str(idle_exit), "--print-address"]  # fmt: skip
    if world_size is not None:
        args += ["--world-size", str(world_size)]
    if os.environ.get("PTC_FT_COORDINATOR_PIDFILE"):
        args += ["--pid-file", os.environ["PTC_FT_COORDINATOR_PIDFILE"]]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                            start_new_session=True, env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline().decode().strip()
    proc.stdout.close()
    if not line:
        raise PtcValueError("the detached coordinator did not start (no address printed)")
    bootstrap_store.set(key, line)
    return proc.pid


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m ptc.distributed.ft.coordinator``: serve one job until idle."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m ptc.distributed.ft.coordinator", description=main.__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--world-size", type=int, default=None)
    parser.add_argument("--heartbeat-timeout", type=float, default=2.0)
    parser.add_argument("--min-workers", type=int, default=1)
    parser.add_argument("--idle-exit", type=float, default=None, help="exit after this many idle seconds")
    parser.add_argument("--log", default=None, help="JSON lines timeline")
    parser.add_argument("--print-address", action="store_true")
    parser.add_argument("--pid-file", default=None, help="write this process's PID here")
    args = parser.parse_args(argv)
    if args.pid_file:
        with open(args.pid_file, "w") as f:
            f.write(str(os.getpid()))
    coordinator = Coordinator(args.host, args.port, world_size=args.world_size, heartbeat_timeout=args.heartbeat_timeout,
                              min_workers=args.min_workers, log=args.log)  # fmt: skip
    print(coordinator.address if args.print_address else f"ptc coordinator at {coordinator.address}", flush=True)
    try:
        coordinator.serve(exit_when_idle=args.idle_exit)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
