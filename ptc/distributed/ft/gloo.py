"""gloo as fault-tolerant groups use it: how a generation's process group is connected, and
how a replaced one is ended and kept.

Two engines connect a generation (see :mod:`ptc.distributed.ft.group`): :class:`NativeEngine`
(torch's gloo ``reconfigure``, one process group for the whole job) and :class:`RebuildEngine`
(a new gloo group per generation).  What gloo needs worked around lives here too: an abandoned
group's pending collectives are ended by shutting down its connections
(:func:`shut_down_connections`, gloo has no working abort), and the group itself is kept until
the process ends, never destroyed (:func:`keep_for_good`).
"""

from __future__ import annotations

import datetime
import os
import socket
from typing import Any, Callable, Dict, List, Tuple

import torch

from ptc import _compat


class NativeEngine:
    """torch's gloo reconfigure: one process group for the whole job.

    Reconfiguring connects the new generation's pairs and leaves the replaced one's open, with
    its pending collectives pending (torch 2.14.1): :meth:`connect` shuts those connections down,
    as :func:`retire` does for a rebuilt group.
    """

    name = "native"

    def __init__(self, store: Any, worker_id: int, timeout: datetime.timedelta) -> None:
        from torch._C._distributed_c10d import PrefixStore

        self._timeout = timeout
        self.pg = _compat.gloo_process_group(PrefixStore("ptc_ft/pg", store), worker_id, worker_id + 1, timeout,
                                             reconfigurable=True)  # fmt: skip
        self._sockets: Dict[int, int] = {}  # the current generation's connections (see connect)
        self.sockets = (0, 0)  # the last connect's (sockets opened, replaced generation's shut down)

    def handle(self) -> str:
        return self.pg.get_reconfigure_handle()

    def connect(self, gen: int, rank: int, size: int, handles: List[str], timeout: datetime.timedelta) -> Any:
        from torch._C._distributed_c10d import ReconfigureOptions

        options = ReconfigureOptions()
        options.uuid = gen
        options.handles = list(handles)
        options.timeout = timeout
        _, opened = opened_while(lambda: self.pg.reconfigure(options).wait())
        self.pg._get_backend(torch.device("cpu"))._set_default_timeout(self._timeout)
        # the replaced generation's collectives still pending end now, as RebuildEngine's retire() does
        # (every member of the new generation has left the old one: they all reconfigured).  reconfigure
        # connects new pairs and leaves the old ones open, so an abandoned collective waiting on a peer
        # that gave up waited for the whole timeout, holding one of the backend's worker threads, and
        # with two of them held (a bucket allreduce and the vote's) the new generation's state sync
        # waited as long (tests/distributed/test_ft_ddp_stall.py).  As in new_group(), a socket another
        # thread opened during reconfigure would be counted as this generation's.
        self.sockets = (len(opened), shut_down_connections(self._sockets))
        self._sockets = opened
        return self.pg


def open_sockets() -> Dict[int, int]:
    """This process's open sockets: ``{fd: inode}`` (empty where the platform cannot list fds)."""
    import stat

    found: Dict[int, int] = {}
    for directory in ("/proc/self/fd", "/dev/fd"):
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for name in names:
            try:
                info = os.fstat(int(name))
            except (OSError, ValueError):
                continue  # the listing's own fd, or closed since
            if stat.S_ISSOCK(info.st_mode):
                found[int(name)] = info.st_ino
        break
    return found


def opened_while(fn: Callable[[], Any]) -> Tuple[Any, Dict[int, int]]:
    """``fn()``'s result and the sockets this process opened while it ran (``{fd: inode}``)."""
    before = open_sockets()
    result = fn()
    return result, {fd: inode for fd, inode in open_sockets().items() if before.get(fd) != inode}


def new_group(store: Any, rank: int, size: int, timeout: datetime.timedelta) -> Tuple[Any, Dict[int, int]]:
    """A connected gloo group and the sockets its construction opened (its listener and its
    connections to the peers: gloo connects the full mesh before it returns)."""
    return opened_while(lambda: _compat.gloo_process_group(store, rank, size, timeout))


def shut_down_connections(sockets: Dict[int, int]) -> int:
    """Shut down those of ``sockets`` that are still open and connected; the number shut down.

    This is how an abandoned gloo group's collectives end: gloo has no working abort
    (``abort()``/``shutdown()`` leave a pending collective pending on torch 2.13.0 and
    2.14.1 alike, measured), so a collective waiting on a peer that gave up waits until
    that peer's process exits.  Its done-callback then runs on gloo's thread, and when that
    happens while this interpreter is finalizing it crashes the process (SIGSEGV in
    ``PyThreadState_New`` from ``PythonFutureWrapper``'s callback: 5 of 12 runs of
    test_ddp_survives_a_crash_inside_the_gradient_allreduce on torch 2.13).  A shut-down
    connection fails every collective on it at once, here and on the peer, while both
    interpreters are alive.  The listener is left alone (gloo's accept loop aborts the
    process if it is shut down), and an fd closed and reused since is recognized by its
    inode.  The sockets are those that appeared while the group was built; another thread
    that opened a socket in that window would have it shut down here too.
    """
    done = 0
    for fd, inode in sockets.items():
        try:
            dup = os.dup(fd)
        except OSError:
            continue  # closed since
        try:
            if os.fstat(dup).st_ino != inode:
                continue  # the number was reused for another file
            conn = socket.socket(fileno=dup)
            dup = -1  # the socket object owns it now
            try:
                conn.getpeername()  # not connected: the group's listener
                conn.shutdown(socket.SHUT_RDWR)
                done += 1
            except OSError:
                pass
            finally:
                conn.close()
        finally:
            if dup >= 0:
                os.close(dup)
    return done


ABANDONED: List[Any] = []  # abandoned groups, never destroyed (see keep_for_good)


def keep_for_good(pg: Any) -> None:
    """Keep ``pg`` until the process ends, without ever destroying it.

    Destroying a gloo group with a collective still pending blocks until that collective
    times out (the group's timeout), and destroyed by the garbage collector on one of
    gloo's own threads (where a done-callback runs Python) it killed survivors with
    std::terminate (``gloo::IoException``).  A module list alone would still be cleared,
    and the group destroyed, while the interpreter shuts down, so the list also owns one
    reference that is never released.  Cost: the group's threads stay until the process
    exits (one group per generation change).
    """
    import ctypes

    ABANDONED.append(pg)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(pg))


def retire(pg: Any, sockets: Dict[int, int]) -> int:
    """An abandoned generation's group: kept for good, its pending collectives ended now (the
    number of its connections shut down)."""
    keep_for_good(pg)
    return shut_down_connections(sockets)


class RebuildEngine:
    """A new gloo process group per generation; abandoned ones kept for good."""

    name = "rebuild"

    def __init__(self, store: Any, worker_id: int, timeout: datetime.timedelta) -> None:
        self._store = store
        self._timeout = timeout
        self.pg: Any = None
        self._sockets: Dict[int, int] = {}
        self.sockets = (0, 0)  # the last connect's (sockets opened, replaced generation's shut down)

    def handle(self) -> str:
        return ""

    def connect(self, gen: int, rank: int, size: int, handles: List[str], timeout: datetime.timedelta) -> Any:
        from torch._C._distributed_c10d import PrefixStore

        pg, sockets = new_group(PrefixStore(f"ptc_ft/g{gen}", self._store), rank, size, timeout)
        pg._get_backend(torch.device("cpu"))._set_default_timeout(self._timeout)
        closed = 0
        if self.pg is not None:
            # every member of the new generation has left the old one (they all built this group)
            closed = retire(self.pg, self._sockets)
        self.pg, self._sockets = pg, sockets
        self.sockets = (len(sockets), closed)
        return pg
