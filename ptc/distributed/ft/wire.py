"""The wire format between fault-tolerant workers and their coordinator.

Each worker holds one TCP connection to the coordinator for its whole life.
Messages are JSON objects, one per line, with a type field ``"t"``:

========================  =====================================================
worker -> coordinator      meaning
========================  =====================================================
``hello``                 first message: ``worker`` id, ``pid``, ``world``
                          (expected initial size or None), ``job``
``hb``                    heartbeat, every ``heartbeat_interval`` seconds
``ready``                 ready to connect generation ``gen``; ``handle`` is
                          the reconfigure handle (torch with ``_reconfigure``)
``fail``                  a collective of generation ``gen`` failed (``err``)
``grow``                  admit waiting joiners after the step that ends
                          generation ``gen``
``event``                 a timeline event (``name``, ``data``) for the log
``leave``                 clean exit: not a failure
========================  =====================================================

========================  =====================================================
coordinator -> worker      meaning
========================  =====================================================
``welcome``               hello accepted; ``store_port`` of the TCPStore
``refused``               hello rejected; ``error`` says why (duplicate id,
                          wrong world size)
``gen``                   generation ``gen`` is formed: ``members`` (worker
                          ids in rank order), ``failed``, ``joined``,
                          ``reason``; every older generation is aborted
``go``                    every member of ``gen`` is ready: connect now with
                          ``handles`` (in rank order)
``join_pending``          a worker waits to join; members grow the group at
                          their next step boundary
``fenced``                this worker was declared failed (heartbeat
                          silence); it must stop using its group and rejoin
========================  =====================================================

An end of file from the coordinator without ``fenced`` means the coordinator
is gone.
"""

from __future__ import annotations

import json
import socket
from typing import Any, Dict, List, Optional


def encode(message: Dict[str, Any]) -> bytes:
    return (json.dumps(message, separators=(",", ":")) + "\n").encode()


class LineReader:
    """Split the bytes arriving on a socket into messages."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> List[Dict[str, Any]]:
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]


def send(sock: socket.socket, message: Dict[str, Any]) -> bool:
    """Send one message; False if the connection is gone."""
    try:
        sock.sendall(encode(message))
        return True
    except OSError:
        return False


def parse_address(address: str, argument: str = "coordinator") -> "tuple[str, int]":
    """``"host:port"`` -> ``(host, port)``, with a clear error for anything else."""
    from ptc.errors import PtcValueError

    if not isinstance(address, str) or ":" not in address:
        raise PtcValueError(f"{argument} = {address!r}: expected 'host:port'")
    host, _, port = address.rpartition(":")
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not host or not 0 < number < 65536:
        raise PtcValueError(f"{argument} = {address!r}: expected 'host:port' with a port in 1..65535")
    return host, number


def recv_one(sock: socket.socket, reader: LineReader, timeout: float) -> Optional[Dict[str, Any]]:
    """Block up to ``timeout`` for one message (None on EOF or timeout)."""
    sock.settimeout(timeout)
    try:
        data = b""  # first what is already buffered
        while True:
            messages = reader.feed(data)
            if messages:
                if len(messages) > 1:  # keep the rest for the caller's reader loop
                    reader._buffer = b"".join(encode(m) for m in messages[1:]) + reader._buffer
                return messages[0]
            data = sock.recv(65536)
            if not data:
                return None
    except (socket.timeout, OSError):
        return None
    finally:
        sock.settimeout(None)
