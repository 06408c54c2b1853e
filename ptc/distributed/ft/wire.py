"""The wire format between fault-tolerant workers and their coordinator.

Each worker holds one TCP connection to the coordinator for its whole life.
Messages are JSON objects, one per line (UTF-8, ``\\n``-terminated), with a
type field ``"t"``.  The coordinator speaks first: on connect it sends a
``challenge``; the worker answers with ``hello``, which proves it knows the
job's secret (:mod:`ptc.distributed.ft.auth`) without sending it.

========================  =====================================================
worker -> coordinator      meaning
========================  =====================================================
``hello``                 first message, answer to ``challenge``: ``worker``
                          id, ``pid``, ``world`` (the size it expects or
                          None), ``job`` id, ``nonce`` (the worker's own
                          challenge to the coordinator), ``proof``
                          (HMAC-SHA256 of the challenge, job and worker id
                          under the job secret; None without a secret).
                          A member that reconnects after its coordinator
                          was lost adds what it knows: ``gen`` (the
                          generation it is connected in), ``members`` (that
                          generation's worker ids in rank order) and
                          ``seen`` (the newest generation number it was
                          told of); all three or none; ``broken``: that
                          generation failed here (it cannot be resumed)
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
``challenge``             sent on connect: ``proto`` (:data:`PROTOCOL`),
                          ``nonce``, ``auth`` (False: the coordinator runs
                          without a secret and checks no proof)
``welcome``               hello accepted: ``store_port`` of the TCPStore,
                          ``gen``, the job's ``world`` and ``min_workers``,
                          ``proof`` (the coordinator's answer to the worker's
                          nonce; None without a secret)
``refused``               hello rejected; ``error`` says why (authentication,
                          job id, duplicate id, world size); ``finished``:
                          the job is over
``gen``                   generation ``gen`` is formed: ``members`` (worker
                          ids in rank order), ``failed``, ``joined``,
                          ``reason``; every older generation is aborted
``go``                    every member of ``gen`` is ready: connect now with
                          ``handles`` (in rank order)
``join_pending``          a worker waits to join; members grow the group at
                          their next step boundary
``fenced``                this worker was declared failed (heartbeat
                          silence, not ready in time) or the job finished
                          (``finished``); it must stop using its group
========================  =====================================================

An end of file from the coordinator without ``fenced`` means the coordinator
is gone.

Every message is checked against :data:`SCHEMA` before anyone reads it
(:func:`decode`): a JSON object, a known ``t`` for the receiving side, no
field the table does not name, and each field of the type, range and size
the table gives.  A line longer than :data:`MAX_LINE` bytes is refused
while it arrives (:class:`LineReader`), so a peer that never sends a newline
costs at most that much memory.
"""

from __future__ import annotations

import json
import math
import socket
from collections import deque
from typing import Any, Deque, Dict, FrozenSet, Optional

PROTOCOL = "ptc-ft/2"

MAX_LINE = 64 * 1024  # bytes of one message to the coordinator, newline included
MAX_NEWS_LINE = 64 * 1024 * 1024  # bytes of one message to a worker (``go`` grows with the world)
MAX_ID = 2**31 - 1  # worker ids and pids
MAX_WORLD = 1 << 20  # members of one generation
MAX_GEN = 2**53 - 1  # generation numbers (exact in any JSON reader)
MAX_NAME = 128  # characters of a job id or an event name
MAX_TEXT = 1024  # characters of an error or a reason
MAX_HANDLE = 1024  # characters of a reconfigure handle
HEX_CHARS = 64  # nonces and proofs: 32 bytes, hex
MAX_EVENT_FIELDS = 64
MAX_EVENT_DEPTH = 8  # nesting of an event's data (an object inside data counts 2)

# fields an event's data may not set: the record's own, and the sender's id (the coordinator adds it)
RESERVED_EVENT_FIELDS = frozenset({"time", "who", "event", "worker"})
# events only the coordinator and its launcher write: a worker may not forge them
RESERVED_EVENT_NAMES = frozenset({"hello", "refused", "rejected", "generation", "worker_failed", "left",
                                  "job_finished", "waiting_for_workers", "not_ready", "internal_error",
                                  "accept_paused", "rejections_suppressed", "coordinator_exit", "spawn",
                                  "sigcont", "go", "adopted", "coordinator_started",
                                  "coordinator_killed", "coordinator_restart", "coordinator_exited",
                                  "adopt_abandoned"})  # fmt: skip


class ProtocolError(ValueError):
    """A line that is not a valid message for its receiver (the text says what is wrong)."""


# --- the schema -------------------------------------------------------------------


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, int):
        return "an int"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class Field:
    """One field of a message kind: ``problem(value)`` is None when the value fits."""

    def __init__(self, *, optional: bool = False, null: bool = False) -> None:
        self.optional = optional  # may be missing
        self.null = null  # may be null

    def problem(self, value: Any) -> Optional[str]:
        if value is None:
            return None if self.null else "expected a value, got null"
        return self._problem(value)

    def _problem(self, value: Any) -> Optional[str]:
        raise NotImplementedError


class Int(Field):
    def __init__(self, lo: int, hi: int, **kw: bool) -> None:
        super().__init__(**kw)
        self.lo, self.hi = lo, hi

    def _problem(self, value: Any) -> Optional[str]:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"expected an int, got {_json_kind(value)}"
        if not self.lo <= value <= self.hi:
            return f"{_short(value)} is outside {self.lo}..{self.hi}"
        return None


class Text(Field):
    def __init__(self, max_chars: int, min_chars: int = 0, **kw: bool) -> None:
        super().__init__(**kw)
        self.min_chars, self.max_chars = min_chars, max_chars

    def _problem(self, value: Any) -> Optional[str]:
        if not isinstance(value, str):
            return f"expected a string, got {_json_kind(value)}"
        if not self.min_chars <= len(value) <= self.max_chars:
            return f"{len(value)} characters, expected {self.min_chars}..{self.max_chars}"
        return None


class Hex(Field):
    def __init__(self, chars: int = HEX_CHARS, **kw: bool) -> None:
        super().__init__(**kw)
        self.chars = chars

    def _problem(self, value: Any) -> Optional[str]:
        if not isinstance(value, str) or len(value) != self.chars or value.strip("0123456789abcdef"):
            return f"expected {self.chars} lowercase hex digits, got {_short(value)}"
        return None


class Bool(Field):
    def _problem(self, value: Any) -> Optional[str]:
        return None if isinstance(value, bool) else f"expected a bool, got {_json_kind(value)}"


class Array(Field):
    def __init__(self, item: Field, max_items: int = MAX_WORLD, **kw: bool) -> None:
        super().__init__(**kw)
        self.item, self.max_items = item, max_items

    def _problem(self, value: Any) -> Optional[str]:
        if not isinstance(value, list):
            return f"expected an array, got {_json_kind(value)}"
        if len(value) > self.max_items:
            return f"{len(value)} items, at most {self.max_items}"
        for i, item in enumerate(value):
            problem = self.item.problem(item)
            if problem is not None:
                return f"[{i}]: {problem}"
        return None


class EventData(Field):
    """An event's data: an object of at most :data:`MAX_EVENT_FIELDS` fields, none of them
    reserved, nested at most :data:`MAX_EVENT_DEPTH` deep."""

    def _problem(self, value: Any) -> Optional[str]:
        if not isinstance(value, dict):
            return f"expected an object, got {_json_kind(value)}"
        if len(value) > MAX_EVENT_FIELDS:
            return f"{len(value)} fields, at most {MAX_EVENT_FIELDS}"
        reserved = sorted(RESERVED_EVENT_FIELDS.intersection(value))
        if reserved:
            return f"field(s) {reserved} are reserved"
        stack = [(value, 1)]
        while stack:
            item, depth = stack.pop()
            if depth > MAX_EVENT_DEPTH:
                return f"nested deeper than {MAX_EVENT_DEPTH}"
            children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
            stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
        return None


class EventName(Text):
    def _problem(self, value: Any) -> Optional[str]:
        problem = super()._problem(value)
        if problem is None and value in RESERVED_EVENT_NAMES:
            problem = f"{value!r} is an event only the coordinator writes"
        return problem


_GEN = Int(0, MAX_GEN)
_WORKERS = Array(Int(0, MAX_ID))

# kind -> field -> Field.  Each kind is listed under the side that receives it.
SCHEMA: Dict[str, Dict[str, Field]] = {
    # worker -> coordinator
    "hello": {"worker": Int(0, MAX_ID), "pid": Int(0, MAX_ID, optional=True, null=True),
              "world": Int(1, MAX_WORLD, optional=True, null=True), "job": Text(MAX_NAME, 1),
              "nonce": Hex(), "proof": Hex(optional=True, null=True),
              # a member reconnecting after the coordinator was lost: what it knows (see Coordinator._adopt)
              "gen": Int(1, MAX_GEN, optional=True), "members": Array(Int(0, MAX_ID), optional=True),
              "seen": Int(1, MAX_GEN, optional=True), "broken": Bool(optional=True)},  # fmt: skip
    "hb": {},
    "ready": {"gen": _GEN, "handle": Text(MAX_HANDLE)},
    "fail": {"gen": _GEN, "err": Text(MAX_TEXT, optional=True)},
    "grow": {"gen": _GEN},
    "event": {"name": EventName(MAX_NAME, 1), "data": EventData(optional=True)},
    "leave": {},
    # coordinator -> worker
    "challenge": {"proto": Text(MAX_NAME), "nonce": Hex(), "auth": Bool()},
    "welcome": {"store_port": Int(1, 65535), "gen": _GEN, "world": Int(1, MAX_WORLD), "min_workers": Int(1, MAX_WORLD),
                "proof": Hex(null=True)},  # fmt: skip
    "refused": {"error": Text(MAX_TEXT), "finished": Bool(optional=True)},
    "gen": {"gen": _GEN, "members": _WORKERS, "failed": _WORKERS, "joined": _WORKERS, "reason": Text(MAX_TEXT)},
    "go": {"gen": _GEN, "handles": Array(Text(MAX_HANDLE))},
    "join_pending": {"workers": _WORKERS},
    "fenced": {"reason": Text(MAX_TEXT), "finished": Bool(optional=True)},
}
TO_COORDINATOR: FrozenSet[str] = frozenset({"hello", "hb", "ready", "fail", "grow", "event", "leave"})
TO_WORKER: FrozenSet[str] = frozenset(SCHEMA) - TO_COORDINATOR


def check(message: Any, kinds: FrozenSet[str]) -> Optional[str]:
    """Why ``message`` is not a valid message of one of ``kinds`` (None when it is)."""
    if not isinstance(message, dict):
        return f"a message is a JSON object, got {_json_kind(message)}"
    kind = message.get("t")
    if not isinstance(kind, str) or kind not in kinds:
        return f"unknown message type {_short(kind)}"
    fields = SCHEMA[kind]
    for name in message:
        if name != "t" and name not in fields:
            return f"{kind}: unknown field {_short(name)}"
    for name, spec in fields.items():
        if name not in message:
            if not spec.optional:
                return f"{kind}: missing field {name!r}"
            continue
        problem = spec.problem(message[name])
        if problem is not None:
            return f"{kind}.{name}: {problem}"
    return None


# --- lines ------------------------------------------------------------------------


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:20]} is not a finite number")
    return value


def decode(line: bytes, kinds: FrozenSet[str]) -> Dict[str, Any]:
    """One line (without its newline) -> a message of one of ``kinds``; raises :class:`ProtocolError`."""
    try:
        message = json.loads(line.decode("utf-8"), parse_constant=_no_constant, parse_float=_finite)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep to parse
        raise ProtocolError(f"not JSON: {type(exc).__name__}: {str(exc)[:100]}") from None
    problem = check(message, kinds)
    if problem is not None:
        raise ProtocolError(problem)
    return message


def encode(message: Dict[str, Any]) -> bytes:
    """One message as a line; raises ValueError for what JSON cannot carry (NaN, infinities)."""
    return (json.dumps(message, separators=(",", ":"), allow_nan=False) + "\n").encode()


class LineReader:
    """Split the bytes arriving on a socket into lines of at most ``max_line`` bytes.

    :meth:`feed` raises :class:`ProtocolError` as soon as the line being
    received is longer than that, so it never holds more than ``max_line``
    bytes of an unfinished line.
    """

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self.max_line = max_line
        self._buffer = bytearray()
        self._lines: Deque[bytes] = deque()

    def feed(self, data: bytes) -> None:
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                break
            if len(self._buffer) + end - start + 1 > self.max_line:
                raise ProtocolError(f"a line longer than {self.max_line} bytes")
            self._buffer += data[start:end]
            self._lines.append(bytes(self._buffer))
            self._buffer.clear()
            start = end + 1
        if len(self._buffer) + len(data) - start >= self.max_line:  # no room left for the newline
            raise ProtocolError(f"a line longer than {self.max_line} bytes")
        self._buffer += data[start:]

    def pop(self) -> Optional[bytes]:
        """The oldest complete line not yet taken, or None."""
        return self._lines.popleft() if self._lines else None

    @property
    def pending(self) -> int:
        """Bytes of the unfinished line."""
        return len(self._buffer)


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


def recv_line(sock: socket.socket, reader: LineReader, timeout: float) -> Optional[bytes]:
    """Block up to ``timeout`` for one line (None on end of file or timeout);
    raises :class:`ProtocolError` for a line too long.  Lines that arrive with
    it stay in ``reader`` for :meth:`LineReader.pop`."""
    import time

    deadline = time.monotonic() + timeout
    try:
        while True:
            line = reader.pop()
            if line is not None:
                return line
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            sock.settimeout(left)
            data = sock.recv(65536)
            if not data:
                return None
            reader.feed(data)
    except (socket.timeout, OSError):
        return None
    finally:
        try:
            sock.settimeout(None)
        except OSError:
            pass


def recv_one(sock: socket.socket, reader: LineReader, timeout: float,
             kinds: FrozenSet[str] = TO_WORKER) -> Optional[Dict[str, Any]]:  # fmt: skip
    """Block up to ``timeout`` for one message of ``kinds`` (None on end of file or timeout);
    raises :class:`ProtocolError` for a line that is not one."""
    line = recv_line(sock, reader, timeout)
    return None if line is None else decode(line, kinds)
