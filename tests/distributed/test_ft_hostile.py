"""The coordinator against hostile or broken peers: message validation, bounded input,
authentication, members that never get ready, and clear answers to misconfiguration.

In one process (a Coordinator thread, hand-driven connections), except where a test
needs the coordinator in a process of its own (its memory, its descriptors).
"""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ft_helpers import SECRET, Peer, hostile_cases
from ptc.distributed.ft import auth as ft_auth
from ptc.distributed.ft import coordinator as ft_coordinator
from ptc.distributed.ft import wire as ft_wire
from ptc.distributed.ft.coordinator import Coordinator
from ptc.distributed.ft.group import FaultTolerantGroup, MembershipRefused, _Link, init_fault_tolerant
from ptc.errors import EXIT_JOB_FINISHED, CoordinatorUnreachable, JobFinished, PtcValueError


# --- the validator ------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


def _strategy(spec: ft_wire.Field):
    """Values that fit ``spec``."""
    if isinstance(spec, ft_wire.Int):
        values = st.integers(spec.lo, spec.hi)
    elif isinstance(spec, ft_wire.Hex):
        values = st.text("0123456789abcdef", min_size=spec.chars, max_size=spec.chars)
    elif isinstance(spec, ft_wire.EventName):
        values = st.text(min_size=spec.min_chars, max_size=min(spec.max_chars, 20)).filter(
            lambda s: s not in ft_wire.RESERVED_EVENT_NAMES)
    elif isinstance(spec, ft_wire.Text):
        values = st.text(min_size=spec.min_chars, max_size=min(spec.max_chars, 20))
    elif isinstance(spec, ft_wire.Bool):
        values = st.booleans()
    elif isinstance(spec, ft_wire.Array):
        values = st.lists(_strategy(spec.item), max_size=4)
    elif isinstance(spec, ft_wire.EventData):
        keys = st.text(max_size=8).filter(lambda k: k not in ft_wire.RESERVED_EVENT_FIELDS)
        values = st.dictionaries(keys, json_values, max_size=4)
    else:
        raise AssertionError(f"no strategy for {spec!r}")
    return st.none() | values if spec.null else values


@st.composite
def valid_messages(draw, kinds=ft_wire.TO_COORDINATOR | ft_wire.TO_WORKER):
    kind = draw(st.sampled_from(sorted(kinds)))
    message = {"t": kind}
    for name, spec in ft_wire.SCHEMA[kind].items():
        if spec.optional and draw(st.booleans()):
            continue
        message[name] = draw(_strategy(spec))
    return message


def _wrong_values(spec: ft_wire.Field):
    """Values of a wrong type, range or size for ``spec``."""
    wrong = [[], {}, [1], {"a": 1}]
    if not spec.null:
        wrong.append(None)
    if isinstance(spec, ft_wire.Int):
        wrong += ["1", "x", 1.0, 1.5, True, spec.lo - 1, spec.hi + 1, 10**40, -(10**40)]
    elif isinstance(spec, ft_wire.Hex):
        wrong += [1, "zz" * (spec.chars // 2), "A" * spec.chars, "0" * (spec.chars + 1), ""]
    elif isinstance(spec, ft_wire.Text):
        wrong += [1, 1.5, True, "x" * (spec.max_chars + 1)] + (["" ] if spec.min_chars else [])
    elif isinstance(spec, ft_wire.Bool):
        wrong += [1, 0, "true", 1.0]
    elif isinstance(spec, ft_wire.Array):
        wrong = ["x", 5, {}, {"a": 1}, None] + [[w] for w in _wrong_values(spec.item)]
    elif isinstance(spec, ft_wire.EventData):
        wrong = [w for w in wrong if not isinstance(w, dict)] + ["x", 5, {"worker": 1}, {"time": 0},
                                                                  {"d": [[[[[[[[[1]]]]]]]]]}]  # fmt: skip
    return wrong


def _decode(message, kinds):
    return ft_wire.decode(json.dumps(message).encode(), kinds)


@settings(max_examples=300, deadline=None)
@given(json_values | st.dictionaries(st.sampled_from(["t", "gen", "worker", "data", "name", "handle"]), json_values)
       .map(lambda d: d) | st.builds(lambda kind, rest: {"t": kind, **rest},
                                    st.sampled_from(sorted(ft_wire.SCHEMA)), st.dictionaries(st.text(max_size=8), json_values)))  # fmt: skip
def test_any_json_value_is_a_message_or_a_protocol_error(value):
    """Whatever JSON arrives, decode returns a message that fits its kind's schema or raises ProtocolError."""
    for kinds in (ft_wire.TO_COORDINATOR, ft_wire.TO_WORKER):
        try:
            message = _decode(value, kinds)
        except ft_wire.ProtocolError:
            continue
        assert ft_wire.check(message, kinds) is None and message["t"] in kinds


@settings(max_examples=100, deadline=None)
@given(valid_messages())
def test_valid_messages_pass_and_each_wrong_field_is_named(message):
    kinds = ft_wire.TO_COORDINATOR if message["t"] in ft_wire.TO_COORDINATOR else ft_wire.TO_WORKER
    assert _decode(message, kinds) == message
    other = ft_wire.TO_WORKER if kinds is ft_wire.TO_COORDINATOR else ft_wire.TO_COORDINATOR
    with pytest.raises(ft_wire.ProtocolError, match="unknown message type"):
        _decode(message, other)  # each side accepts only its own kinds
    for name, spec in ft_wire.SCHEMA[message["t"]].items():
        for wrong in _wrong_values(spec):
            with pytest.raises(ft_wire.ProtocolError, match=f"{message['t']}.{name}"):
                _decode({**message, name: wrong}, kinds)
        if not spec.optional:
            with pytest.raises(ft_wire.ProtocolError, match=f"missing field '{name}'"):
                _decode({k: v for k, v in message.items() if k != name}, kinds)
    with pytest.raises(ft_wire.ProtocolError, match="unknown field"):
        _decode({**message, "extra": 1}, kinds)


@settings(max_examples=100, deadline=None)
@given(st.one_of(st.text(max_size=12), json_values).filter(lambda k: not (isinstance(k, str) and k in ft_wire.SCHEMA)))
def test_unknown_kinds_are_refused(kind):
    with pytest.raises(ft_wire.ProtocolError, match="unknown message type"):
        _decode({"t": kind}, ft_wire.TO_COORDINATOR)


@pytest.mark.parametrize("line", [
    b"", b" ", b"1", b"[]", b"null", b'"hello"', b"{}", b'{"t":null}', b'{"t":["hb"]}', b'{"t":{"a":1}}',
    b'{"t":"ready","gen":"x","handle":""}', b'{"t":"fail","gen":null}', b'{"t":"event","name":"x","data":[1]}',
    b'{"t":"event","name":"x","data":{"worker":1}}', b'{"t":"event","name":"generation","data":{}}',
    b'{"t":"hello","worker":0,"world":"abc","job":"default","nonce":"' + b"0" * 64 + b'"}',
    b'{"t":"ready","gen":' + b"9" * 5000 + b',"handle":""}', b'{"t":"ready","gen":1e999,"handle":""}',
    b'{"t":"ready","gen":NaN,"handle":""}', b'{"t":"ready","gen":Infinity,"handle":""}', b'{"t":"grow","gen":-1}',
    b'{"t":"event","name":"x","data":{"v":-Infinity}}', b'{"t":"hb"', b"\xff\xfe\x00", b'{"t":"hb"}{"t":"hb"}',
    b"[" * 60000, b'{"a":' * 10000, b'{"t":"hb","t2":1}',
])  # fmt: skip
def test_hostile_lines_are_protocol_errors(line):
    assert len(line) < ft_wire.MAX_LINE
    with pytest.raises(ft_wire.ProtocolError):
        ft_wire.decode(line, ft_wire.TO_COORDINATOR)


@settings(max_examples=100, deadline=None)
@given(st.lists(valid_messages(ft_wire.TO_COORDINATOR), min_size=1, max_size=6), st.data())
def test_a_stream_split_anywhere_gives_the_same_messages(messages, data):
    stream = b"".join(ft_wire.encode(m) for m in messages)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    reader, got = ft_wire.LineReader(), []
    for start, end in zip([0] + cuts, cuts + [len(stream)]):
        reader.feed(stream[start:end])
        while (line := reader.pop()) is not None:
            got.append(ft_wire.decode(line, ft_wire.TO_COORDINATOR))
    assert got == messages and reader.pending == 0


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 70000))
def test_a_flood_without_newline_is_refused_within_one_line_of_memory(chunk):
    reader = ft_wire.LineReader()
    sent = 0
    with pytest.raises(ft_wire.ProtocolError, match="longer than 65536 bytes"):
        while sent < 4 * ft_wire.MAX_LINE:
            reader.feed(b"x" * chunk)
            sent += chunk
            assert reader.pending < ft_wire.MAX_LINE
    assert sent < ft_wire.MAX_LINE + chunk


def test_the_longest_line_fits_and_one_byte_more_does_not():
    body = b'{"t":"event","name":"x","data":{"s":"'
    tail = b'"}}'
    fill = ft_wire.MAX_LINE - 1 - len(body) - len(tail)
    reader = ft_wire.LineReader()
    reader.feed(body + b"a" * fill + tail + b"\n")
    assert len(reader.pop()) == ft_wire.MAX_LINE - 1
    with pytest.raises(ft_wire.ProtocolError):
        ft_wire.LineReader().feed(body + b"a" * (fill + 1) + tail + b"\n")


# --- a coordinator that hand-driven connections talk to ------------------------------


def _start(**options) -> Coordinator:
    return Coordinator(**{"world_size": 2, "heartbeat_timeout": 30.0, "secret": SECRET, **options}).start()


@pytest.fixture
def running():
    """A coordinator whose two members formed generation 1 and got their go."""
    c = _start(hello_timeout=1.0)
    a, b = Peer(c).hello(0, world=2), Peer(c).hello(1, world=2)
    for peer in (a, b):
        peer.expect("gen")
        peer.send({"t": "ready", "gen": 1, "handle": ""})
    a.expect("go"), b.expect("go")
    yield c, a, b
    for peer in (a, b):
        peer.close()
    c.stop()


def _link(c: Coordinator, worker: int, *, job: str = "default") -> _Link:
    """A worker's real link (handshake included) to ``c``."""
    return _Link([c.address], worker=worker, world=None, job=job, secret=SECRET, heartbeat_interval=0.1,
                 connect_timeout=5.0, on_news=lambda: None)


def _assert_unharmed(c: Coordinator) -> None:
    """Generation 1 of members 0 and 1 stands, the loop lives, and answers a new connection."""
    assert c._thread.is_alive(), "the coordinator's loop died"
    assert c.generation == 1 and c.members == [0, 1] and sorted(c._workers) == [0, 1], c.history[-5:]
    assert not [e for e in c.history if e["event"] == "internal_error"], c.history[-5:]
    probe = Peer(c)
    assert probe.challenge["t"] == "challenge"
    probe.close()


@pytest.mark.parametrize("case", sorted(hostile_cases()))
def test_hostile_input_closes_only_that_connection(running, case):
    c, a, b = running
    peer = Peer(c)
    peer.raw(hostile_cases()[case](peer.challenge["nonce"]))
    assert peer.closed_by_coordinator(), f"{case}: connection left open"
    rejected = [e for e in (c.history + list(c.rejections)) if e["event"] == "rejected"]
    assert rejected and rejected[-1]["worker"] is None and rejected[-1]["why"], (c.history + list(c.rejections))[-3:]
    _assert_unharmed(c)


@pytest.mark.parametrize("message", [
    {"t": "ready", "gen": "x", "handle": ""}, {"t": "fail", "gen": None}, {"t": "event", "name": "x", "data": [1]},
    {"t": "event", "name": "x", "data": {"worker": 1}}, {"t": "event", "name": "generation", "data": {}},
    {"t": "hello", "worker": 7, "job": "default", "nonce": "0" * 64}, {"t": "grow", "gen": True}, {"t": "hb", "x": 1},
])  # fmt: skip
def test_a_joiner_that_sends_an_invalid_message_is_dropped_and_nothing_else_changes(running, message):
    c, a, b = running
    joiner = Peer(c).hello(7)
    joiner.expect("welcome")
    a.expect("join_pending")
    joiner.send(message)
    assert joiner.closed_by_coordinator()
    assert [e for e in (c.history + list(c.rejections)) if e["event"] == "rejected"][-1]["worker"] == 7
    assert 7 not in c._joiners
    _assert_unharmed(c)


def test_a_member_that_sends_an_invalid_message_is_a_failed_member(running):
    c, a, b = running
    b.send({"t": "fail", "gen": None})
    assert b.closed_by_coordinator()
    gen = a.expect("gen")
    assert gen["members"] == [0] and gen["failed"] == [1] and "invalid message" in gen["reason"]


def test_an_exception_while_handling_one_connection_is_logged_and_the_loop_goes_on(running, monkeypatch):
    c, a, b = running

    def broken(self, worker, gen, handle):
        raise RuntimeError("a bug in one handler")

    monkeypatch.setattr(Coordinator, "_on_ready", broken)
    joiner = Peer(c).hello(7)
    joiner.expect("welcome")
    joiner.send({"t": "ready", "gen": 1, "handle": ""})
    assert joiner.closed_by_coordinator()
    errors = [e for e in c.history if e["event"] == "internal_error"]
    assert errors and "a bug in one handler" in errors[-1]["error"] and errors[-1]["worker"] == 7
    assert c._thread.is_alive() and c.members == [0, 1]
    assert Peer(c).challenge["t"] == "challenge"


def test_connections_without_hello_are_closed_after_the_hello_timeout(running):
    c, a, b = running  # hello_timeout = 1 s
    silent = [Peer(c) for _ in range(3)]
    mute = Peer(c, read_challenge=False)
    partial = Peer(c)
    partial.raw(b'{"t":"hello","worker":')
    started = time.monotonic()
    for peer in silent + [mute, partial]:
        assert peer.closed_by_coordinator(timeout=5), "a connection without hello stayed open"
    assert 0.5 < time.monotonic() - started < 4
    assert any("no hello within hello_timeout = 1 s" in e.get("why", "") for e in (c.history + list(c.rejections)))
    _assert_unharmed(c)


def test_connections_without_hello_are_capped_the_oldest_goes_first(running, monkeypatch):
    c, a, b = running
    monkeypatch.setattr(ft_coordinator, "MAX_PENDING", 4)
    peers = [Peer(c) for _ in range(6)]
    assert peers[0].closed_by_coordinator(2) and peers[1].closed_by_coordinator(2)
    assert len(c._pending) == 4
    joiner = Peer(c).hello(7)  # a real worker still gets in (the oldest silent one makes room)
    assert joiner.expect("welcome")["gen"] == 1
    for p in peers + [joiner]:
        p.close()


def test_the_cap_closes_a_connection_of_the_host_holding_the_most():
    """Over the cap, the oldest waiting connection of the busiest peer host is closed, so a
    flood from one host does not push out a worker connecting from another."""
    c = Coordinator(world_size=2, secret=SECRET)
    try:
        peers = ["10.0.0.7:5000", "10.0.0.9:4000", "10.0.0.9:4001", "10.0.0.7:5001", "10.0.0.9:4002"]
        c._pending = {k: types.SimpleNamespace(peer=peer) for k, peer in enumerate(peers)}
        assert c._eviction_victim().peer == "10.0.0.9:4000"
    finally:
        c.stop()


def test_one_wakeup_takes_every_waiting_connection_up_to_a_bound():
    """One accept per wakeup let a connect storm fill the listen queue (honest connects then
    timed out): a wakeup takes up to ACCEPTS_PER_WAKEUP, each challenged."""
    c = Coordinator(world_size=2, secret=SECRET)  # not serving: connections wait in the queue
    clients = []
    try:
        clients = [socket.create_connection(("127.0.0.1", c.port), timeout=5) for _ in range(5)]
        time.sleep(0.2)
        c._accept()
        assert len(c._pending) == 5
        c._accept()  # nothing left: returns at once
        assert len(c._pending) == 5
        reader = ft_wire.LineReader(ft_wire.MAX_NEWS_LINE)
        assert ft_wire.recv_one(clients[-1], reader, 5)["t"] == "challenge"
    finally:
        for sock in clients:
            sock.close()
        c.stop()


def test_a_whole_job_connecting_at_once_is_not_capped(monkeypatch):
    """The cap on connections without a hello is at least the world size: a job whose
    members all connect before any of them says hello loses nobody."""
    monkeypatch.setattr(ft_coordinator, "MAX_PENDING", 4)
    c = _start(world_size=8, hello_timeout=5.0)
    try:
        peers = [Peer(c) for _ in range(8)]
        time.sleep(0.3)
        assert len(c._pending) == 8
        for i, p in enumerate(peers):
            p.hello(i, world=8).expect("welcome")
        assert not c._pending and len(c._workers) == 8
        extra = [Peer(c) for _ in range(9)]  # beyond the world size: the oldest silent one goes
        assert extra[0].closed_by_coordinator(2)
        for p in peers + extra:
            p.close()
    finally:
        c.stop()


def test_rejections_are_logged_at_a_bounded_rate(running, monkeypatch):
    c, a, b = running
    monkeypatch.setattr(ft_coordinator, "REJECTIONS_LOGGED_PER_S", 3)
    started = time.monotonic()
    for _ in range(12):
        p = Peer(c)
        p.raw(b"1\n")
        assert p.closed_by_coordinator()
    windows = int(time.monotonic() - started) + 2  # one-second windows the rejections can span
    time.sleep(1.1)
    logged = [e for e in c.rejections if e["event"] in ("rejected", "rejections_suppressed")]
    assert c.rejected >= 12
    assert sum(e["event"] == "rejected" for e in logged) <= 3 * windows  # at most 3 a second
    assert sum(e.get("count", 0) for e in logged) + sum(e["event"] == "rejected" for e in logged) == 12


def test_a_flood_that_never_stops_adds_a_line_a_window_to_the_log(tmp_path, monkeypatch):
    """Rejections are logged one by one up to MAX_REJECTIONS_LOGGED in the coordinator's life;
    after that only counted, once every FLOOD_SUMMARY_INTERVAL, and the count of the last
    window is written when the coordinator stops: every rejection is accounted for."""
    monkeypatch.setattr(ft_coordinator, "REJECTIONS_LOGGED_PER_S", 3)
    monkeypatch.setattr(ft_coordinator, "MAX_REJECTIONS_LOGGED", 5)
    monkeypatch.setattr(ft_coordinator, "FLOOD_SUMMARY_INTERVAL", 3600.0)
    log = tmp_path / "coordinator.jsonl"
    c = Coordinator(world_size=2, secret=SECRET, log=str(log))  # not serving: the windows are moved by hand

    def reject(times, after_seconds=0.0):
        c._rejections_window -= after_seconds
        for _ in range(times):
            c._log_rejection("rejected", why="invalid line")

    reject(10)  # 3 logged
    reject(10, after_seconds=1.01)  # the last 2 of the budget logged, the window's 8 more counted
    reject(10, after_seconds=1.01)  # budget spent: a one-second window no longer ends
    reject(1, after_seconds=3600.0)  # the long window ends: one count for the 18 before
    c.stop()
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(e["event"], e.get("count")) for e in lines] == [("rejected", None)] * 3 + [
        ("rejections_suppressed", 7)] + [("rejected", None)] * 2 + [
        ("rejections_suppressed", 8 + 10), ("rejections_suppressed", 1)]  # fmt: skip


def test_the_record_of_rejections_is_bounded_and_kept_out_of_the_timeline(running, monkeypatch):
    """Refused and rejected connections come from peers nobody authenticated: a ring of the
    last MAX_REJECTIONS_KEPT records with the peer's text cut short, never the timeline."""
    c, a, b = running
    monkeypatch.setattr(ft_coordinator, "MAX_REJECTIONS_KEPT", 5)
    c = _start(hello_timeout=1.0)  # a ring made with the patched size
    try:
        before = len(c.history)
        for k in range(8):
            p = Peer(c)
            p.hello(1, job="\U000e0001" * 128 if k % 2 else "other-job")  # refused: another job
            assert p.closed_by_coordinator()
        assert len(c.rejections) == 5
        assert not [e for e in c.history[before:] if e["event"] in ("rejected", "refused", "rejections_suppressed")]
        texts = [v for e in c.rejections for v in e.values() if isinstance(v, str)]
        assert texts and max(map(len, texts)) <= ft_coordinator.MAX_REJECTION_TEXT
    finally:
        c.stop()


def test_a_refusal_fits_the_wire_schema_whatever_the_job_id(running):
    """A 128-character job id of characters repr() escapes made the coordinator's 'refused'
    longer than the schema allows: the worker saw a protocol error, not the refusal."""
    c, a, b = running
    with pytest.raises(MembershipRefused, match="this coordinator serves job 'default'"):
        _link(c, 5, job="\U000e0001" * 128)
    _assert_unharmed(c)


def test_a_worker_closed_before_its_welcome_says_hello_again(running, monkeypatch):
    """The coordinator may close a connection that has its challenge but no hello yet (room
    made for others under a flood): the worker connects again within connect_timeout."""
    c, a, b = running
    real, closed = Coordinator._hello, []

    def evict_first(self, conn, message):
        if not closed:
            closed.append(message["worker"])
            self._reject(conn, "room made for other connections")
            return
        real(self, conn, message)

    monkeypatch.setattr(Coordinator, "_hello", evict_first)
    link = _link(c, 7)
    try:
        assert closed == [7] and link.welcome["gen"] == 1
    finally:
        link.close()


def test_a_log_that_cannot_be_written_stops_no_membership_change(capfd):
    """A full disk under --log (here /dev/full) and an on_event that raises: the generation
    still forms and its members hear of it; the failures are reported once on stderr."""
    def broken(record):
        raise RuntimeError("a callback's bug")

    c = _start(log="/dev/full", on_event=broken)
    try:
        a, b = Peer(c).hello(0, world=2), Peer(c).hello(1, world=2)
        assert a.expect("gen")["gen"] == 1 and b.expect("gen")["gen"] == 1
        assert c.generation == 1 and sorted(c._workers) == [0, 1]
        a.close(), b.close()
    finally:
        c.stop()
    err = capfd.readouterr().err
    assert err.count("cannot write its log") == 1 and "on_event raised RuntimeError" in err


def test_connections_without_hello_do_not_keep_an_idle_coordinator_alive():
    """serve(exit_when_idle=) ends once no member is left, however many connections that
    never said hello come and go (the detached coordinator under torchrun relies on it)."""
    c = Coordinator(world_size=1, heartbeat_timeout=30.0, secret=SECRET, hello_timeout=1.0)
    thread = threading.Thread(target=c.serve, kwargs={"exit_when_idle": 1.0}, daemon=True)
    thread.start()
    held = []
    try:
        member = Peer(c).hello(0, world=1)
        member.expect("gen")
        member.send({"t": "leave"})
        member.close()
        deadline = time.monotonic() + 8
        while thread.is_alive() and time.monotonic() < deadline:
            held.append(Peer(c, read_challenge=False))  # one silent connection every 0.3 s
            time.sleep(0.3)
        assert not thread.is_alive(), "silent connections kept the idle coordinator serving"
        assert c.history[-1]["event"] == "coordinator_exit"
    finally:
        for p in held:
            p.close()
        c.stop()


# --- the coordinator in a process of its own: memory and descriptors -------------------


def _coordinator_process(tmp_path: Path, *options: str, nofile: int = 0):
    """``python -m ptc.distributed.ft.coordinator --insecure`` (optionally with few descriptors): (proc, port)."""

    def limit():
        if nofile:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    proc = subprocess.Popen([sys.executable, "-m", "ptc.distributed.ft.coordinator", "--insecure", "--world-size", "2",
                             "--print-address", "--hello-timeout", "3", "--log", str(tmp_path / "timeline.jsonl"),
                             *options],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=limit,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    line = proc.stdout.readline().decode().strip()
    if not line:
        proc.kill()
        raise AssertionError(f"the coordinator did not start: {proc.stderr.read().decode()[-2000:]}")
    return proc, int(line.rpartition(":")[2])


def _stop(proc):
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _answers(port: int, timeout: float) -> bool:
    """Whether the coordinator at ``port`` sends a challenge to a new connection within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                message = ft_wire.recv_one(sock, ft_wire.LineReader(ft_wire.MAX_NEWS_LINE), 1.0)
                if message is not None and message["t"] == "challenge":
                    return True
        except (OSError, ft_wire.ProtocolError):
            pass
        time.sleep(0.2)
    return False


@pytest.mark.slow
def test_a_flood_without_newline_costs_the_coordinator_at_most_one_line(tmp_path):
    proc, port = _coordinator_process(tmp_path)
    try:
        assert _answers(port, 10)
        before = _rss_kib(proc.pid)
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sent = 0
        chunk = b"x" * 65536
        try:
            while sent < 16 * 2**20:
                sock.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass  # the coordinator closed the connection: what we expect
        time.sleep(0.5)
        grown = _rss_kib(proc.pid) - before
        sock.close()
        assert sent < 16 * 2**20, "the coordinator kept taking one unterminated line"
        assert grown < 4096, f"RSS grew by {grown} KiB for one unterminated line"
        assert _answers(port, 5)
    finally:
        _stop(proc)


@pytest.mark.slow
def test_out_of_descriptors_the_coordinator_backs_off_and_keeps_answering(tmp_path):
    """Every descriptor held by a registered worker (nothing to close to make room) and more
    connections waiting in the backlog: the coordinator rests instead of spinning on accept,
    and answers again once descriptors are free."""
    proc, port = _coordinator_process(tmp_path, "--heartbeat-timeout", "120", "--ready-timeout", "120", nofile=48)
    target = types.SimpleNamespace(port=port)
    peers, waiting = [], []
    try:
        assert _answers(port, 10)
        for worker in range(100):  # register workers until the coordinator has no descriptor left
            peer = Peer(target)
            peers.append(peer)
            if peer.challenge is None:
                break
            peer.hello(worker, secret=None)
            peer.expect("welcome")
        else:
            raise AssertionError("the coordinator never ran out of descriptors")
        for _ in range(20):  # these wait in the listening socket's backlog
            waiting.append(socket.create_connection(("127.0.0.1", port), timeout=2))
        time.sleep(0.5)
        cpu, wall = _cpu_seconds(proc.pid), time.monotonic()
        time.sleep(2.0)
        share = (_cpu_seconds(proc.pid) - cpu) / (time.monotonic() - wall)
        events = [json.loads(x) for x in (tmp_path / "timeline.jsonl").read_text().splitlines()]
        assert any(e["event"] == "accept_paused" for e in events), events[-5:]
        assert share < 0.15, f"the coordinator used {share:.0%} of a CPU while out of descriptors"
        for s in waiting:
            s.close()
        for p in peers:
            p.close()
        waiting, peers = [], []
        assert _answers(port, 15), "the coordinator stopped answering"
        assert proc.poll() is None
    finally:
        for s in waiting:
            s.close()
        for p in peers:
            p.close()
        _stop(proc)


# --- authentication ---------------------------------------------------------------------


@pytest.mark.parametrize("how", ["no proof", "wrong secret", "replayed proof", "another job", "proof for another worker"])
def test_a_hello_without_a_valid_proof_is_refused_and_changes_nothing(how):
    c = _start()
    try:
        first = Peer(c)
        peer = Peer(c)
        kwargs = {"no proof": {"secret": None}, "wrong secret": {"secret": b"x" * 32},
                  "replayed proof": {"nonce": first.challenge["nonce"]}, "another job": {"job": "other"},
                  "proof for another worker": {}}[how]  # fmt: skip
        if how == "proof for another worker":
            proof = ft_auth.hello_proof(SECRET, peer.challenge["nonce"], "default", 1)
            peer.send({"t": "hello", "worker": 0, "job": "default", "nonce": ft_auth.new_nonce(), "proof": proof})
        else:
            peer.hello(0, world=2, **kwargs)
        refused = peer.expect("refused")
        assert ("serves job 'default'" if how == "another job" else "authentication failed") in refused["error"]
        assert peer.closed_by_coordinator()
        assert c._workers == {} and c.generation == 0 and c.world_size == 2
        first.close()
    finally:
        c.stop()


def test_a_hello_cannot_set_the_world_size_or_the_job():
    c = _start()
    try:
        peer = Peer(c).hello(0, world=1)
        assert "started with world_size = 2" in peer.expect("refused")["error"]
        assert c.world_size == 2 and c._workers == {} and c.generation == 0
        with pytest.raises(TypeError, match="world_size"):
            Coordinator(secret=SECRET)  # the world size is the coordinator's own configuration
    finally:
        c.stop()


def test_the_secret_never_crosses_the_wire_and_each_side_proves_it_knows_it(monkeypatch):
    sent = []
    encode = ft_wire.encode
    monkeypatch.setattr(ft_wire, "encode", lambda message: sent.append(encode(message)) or sent[-1])
    c = _start(world_size=1)
    try:
        group = FaultTolerantGroup(c.address, 0, 1, secret=SECRET, connect_timeout=10, join_timeout=30)
        group.allreduce(torch.ones(1))
        group.close()
    finally:
        c.stop()
    kinds = [json.loads(m)["t"] for m in sent]
    assert "challenge" in kinds and "hello" in kinds and "welcome" in kinds
    hello = next(json.loads(m) for m in sent if json.loads(m)["t"] == "hello")
    welcome = next(json.loads(m) for m in sent if json.loads(m)["t"] == "welcome")
    assert len(hello["proof"]) == 64 and len(welcome["proof"]) == 64
    for message in sent:
        assert SECRET not in message and SECRET.hex().encode() not in message


def test_a_worker_with_the_wrong_secret_or_none_is_refused():
    c = _start(world_size=1)
    try:
        with pytest.raises(MembershipRefused, match="authentication failed"):
            FaultTolerantGroup(c.address, 0, 1, secret=b"w" * 32, connect_timeout=5)
        with pytest.raises(MembershipRefused, match="admits only workers that know the job secret"):
            FaultTolerantGroup(c.address, 0, 1, connect_timeout=5)
        assert c._workers == {} and c.generation == 0
    finally:
        c.stop()


def _fake_server(reply):
    """A listening socket whose thread answers each connection with ``reply(sock)``; (port, stop)."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                sock, _ = server.accept()
            except OSError:
                continue
            try:
                reply(sock)
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    def close():
        stop.set()
        thread.join(5)
        server.close()

    return server.getsockname()[1], close


def test_a_coordinator_that_cannot_prove_the_secret_is_not_trusted():
    held = []

    def impostor(sock):
        nonce = ft_auth.new_nonce()
        sock.sendall(ft_wire.encode({"t": "challenge", "proto": ft_wire.PROTOCOL, "nonce": nonce, "auth": True}))
        sock.recv(65536)
        sock.sendall(ft_wire.encode({"t": "welcome", "store_port": 1, "gen": 0, "world": 1, "min_workers": 1,
                                     "proof": "0" * 64}))  # fmt: skip
        held.append(sock)

    port, close = _fake_server(impostor)
    try:
        with pytest.raises(CoordinatorUnreachable, match="does not prove it knows the job secret"):
            FaultTolerantGroup(f"127.0.0.1:{port}", 0, 1, secret=SECRET, connect_timeout=5)
    finally:
        close()
        for s in held:
            s.close()


def test_insecure_coordinators_need_no_secret_and_workers_with_one_do_not_trust_them():
    c = Coordinator(world_size=1, insecure=True).start()
    try:
        with pytest.raises(CoordinatorUnreachable, match="runs without a job secret"):
            FaultTolerantGroup(c.address, 0, 1, secret=SECRET, connect_timeout=5)
        group = FaultTolerantGroup(c.address, 0, 1, connect_timeout=10, join_timeout=30)
        assert float(group.allreduce(torch.ones(1))) == 1.0
        group.close()
        assert c.secret is None
    finally:
        c.stop()
    with pytest.raises(PtcValueError, match="insecure=True"):
        Coordinator(world_size=1, insecure=True, secret=SECRET)


def test_where_the_secret_comes_from(tmp_path, monkeypatch):
    monkeypatch.delenv(ft_auth.ENV_SECRET, raising=False)
    monkeypatch.delenv(ft_auth.ENV_SECRET_FILE, raising=False)
    def secret_of(**options):
        c = Coordinator(world_size=1, **options)
        c.stop()
        return c.secret

    generated = secret_of()
    assert len(generated) >= ft_auth.MIN_SECRET_BYTES and generated != secret_of()
    path = tmp_path / "secret"
    path.write_text("from-a-file-0123456789\n")
    assert ft_auth.resolve(secret_file=path) == b"from-a-file-0123456789"
    monkeypatch.setenv(ft_auth.ENV_SECRET_FILE, str(path))
    assert secret_of() == b"from-a-file-0123456789"
    monkeypatch.setenv(ft_auth.ENV_SECRET, "from-the-environment-0123")
    assert ft_auth.resolve() == b"from-the-environment-0123"  # $PTC_FT_SECRET before $PTC_FT_SECRET_FILE
    assert ft_auth.resolve(secret="an-argument-0123456") == b"an-argument-0123456"
    with pytest.raises(PtcValueError, match="at least 16"):
        ft_auth.resolve(secret="short")
    with pytest.raises(PtcValueError, match="NUL"):
        ft_auth.resolve(secret=b"\0" * 20)
    with pytest.raises(PtcValueError, match="not both"):
        ft_auth.resolve(secret="x" * 20, secret_file=path)
    with pytest.raises(PtcValueError, match="cannot read the job secret"):
        ft_auth.resolve(secret_file=tmp_path / "missing")


def test_the_cli_refuses_to_start_without_a_secret(monkeypatch, capsys):
    monkeypatch.delenv(ft_auth.ENV_SECRET, raising=False)
    monkeypatch.delenv(ft_auth.ENV_SECRET_FILE, raising=False)
    with pytest.raises(SystemExit) as info:
        ft_coordinator.main(["--world-size", "2"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "no job secret" in err and "--insecure" in err


def _listening_addresses(port: int):
    """The local addresses this machine listens on at ``port`` (from /proc/net/tcp and tcp6)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.rpartition(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.append(address)
    return found


def test_the_store_listens_on_the_coordinators_interface_only():
    if not Path("/proc/net/tcp").exists():
        pytest.skip("needs /proc/net/tcp to list listening sockets")
    c = _start()
    try:
        assert _listening_addresses(c.store.port) == ["0100007F"]  # 127.0.0.1, not 0.0.0.0 or ::
        assert _listening_addresses(c.port) == ["0100007F"]
    finally:
        c.stop()


def test_torchrun_path_generates_the_secret_and_hands_it_through_the_store(monkeypatch):
    """The first worker starts the coordinator with a new secret and publishes it before the address;
    the others read it; a configured secret is passed on, never published."""
    from torch.distributed import HashStore

    from ptc.distributed.ft import group as ft_group

    started = []

    def spawn(store, key, *, world_size, secret, host, min_workers, job):
        c = Coordinator(world_size=world_size, min_workers=min_workers, secret=secret, job=job).start()
        started.append(c)
        assert store.check([f"ptc_ft/{job}/secret"]) or secret == SECRET
        store.set(key, c.address)

    monkeypatch.setattr(ft_coordinator, "spawn_detached", spawn)
    try:
        store = HashStore()
        address, secret = ft_group._coordinator_from_store(store, 0, 2, "j1", 5.0, None, 2)
        assert started and address == started[0].address and secret == started[0].secret
        assert bytes(store.get("ptc_ft/j1/secret")) == secret
        assert ft_group._coordinator_from_store(store, 1, 2, "j1", 5.0, None, 2) == (address, secret)
        store2 = HashStore()
        _, passed = ft_group._coordinator_from_store(store2, 0, 2, "j2", 5.0, SECRET, 1)
        assert passed == SECRET and started[1].secret == SECRET and not store2.check(["ptc_ft/j2/secret"])
        with pytest.raises(MembershipRefused, match="started with a configured secret"):
            ft_group._coordinator_from_store(store2, 1, 2, "j2", 5.0, None, 1)
    finally:
        for c in started:
            c.stop()


# --- members that never get ready --------------------------------------------------------


def test_a_member_that_never_gets_ready_is_fenced_and_the_others_go_on():
    c = _start(world_size=3, ready_timeout=1.0)
    fake = Peer(c).hello(2, world=3)  # says hello, beats, never says ready
    stop = threading.Event()

    def beat():
        while not stop.is_set():
            fake.send({"t": "hb"})
            time.sleep(0.1)

    beater = threading.Thread(target=beat)
    beater.start()
    groups = []
    try:
        started = time.monotonic()

        def join(i):
            groups.append(FaultTolerantGroup(c.address, i, 3, secret=SECRET, connect_timeout=10, join_timeout=15))

        threads = [threading.Thread(target=join, args=(i,)) for i in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(groups) == 2, c.history[-6:]
        assert time.monotonic() - started < 10
        assert {tuple(g.generation.members) for g in groups} == {(0, 1)}
        results = []
        threads = [threading.Thread(target=lambda g=g: results.append(float(g.allreduce(torch.ones(1))))) for g in groups]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert results == [2.0, 2.0]
        assert "not ready" in fake.expect("fenced")["reason"]
        failed = [e for e in c.history if e["event"] == "worker_failed"]
        assert failed and failed[0]["worker"] == 2 and "ready_timeout = 1 s" in failed[0]["why"]
    finally:
        stop.set()
        beater.join(5)
        for g in groups:
            g.close()
        fake.close()
        c.stop()


def test_laggards_below_min_workers_hold_the_generation():
    c = _start(world_size=2, min_workers=2, ready_timeout=0.5)
    try:
        a, b = Peer(c).hello(0, world=2), Peer(c).hello(1, world=2)
        a.expect("gen"), b.expect("gen")
        a.send({"t": "ready", "gen": 1, "handle": ""})
        assert "not ready" in b.expect("fenced", timeout=3)["reason"]
        time.sleep(0.2)
        assert c.generation == 1 and any(e["event"] == "waiting_for_workers" for e in c.history)
        late = Peer(c).hello(3)
        assert late.expect("gen")["members"] == [0, 3]
        a.close(), late.close()
    finally:
        c.stop()


# --- clear answers -----------------------------------------------------------------------


def test_min_workers_above_the_world_size_is_refused_naming_both(monkeypatch, capsys):
    with pytest.raises(PtcValueError, match="min_workers = 3 > world_size = 2"):
        Coordinator(world_size=2, min_workers=3)
    monkeypatch.setenv(ft_auth.ENV_SECRET, SECRET.decode())
    with pytest.raises(SystemExit) as info:
        ft_coordinator.main(["--world-size", "2", "--min-workers", "3"])
    assert info.value.code == 2 and "min_workers = 3 > world_size = 2" in capsys.readouterr().err
    with pytest.raises(PtcValueError, match="min_workers = 3 > world_size = 2"):
        init_fault_tolerant(worker_id=0, world_size=2, min_workers=3, coordinator="127.0.0.1:1")


@pytest.mark.parametrize("says", [b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", b"SSH-2.0-OpenSSH_9.0\r\n",
                                  b'{"t":"welcome"}\n', b"\x16\x03\x01\x00"])  # fmt: skip
def test_a_server_that_does_not_speak_the_protocol_is_named(says):
    held = []

    def speak(sock):
        sock.sendall(says)
        held.append(sock)

    port, close = _fake_server(speak)
    try:
        started = time.monotonic()
        with pytest.raises(CoordinatorUnreachable, match="does not speak the ptc fault-tolerance protocol") as info:
            FaultTolerantGroup(f"127.0.0.1:{port}", 0, 1, secret=SECRET, connect_timeout=2)
        assert isinstance(info.value, ConnectionError) and time.monotonic() - started < 10
    finally:
        close()
        for s in held:
            s.close()


def test_a_finished_job_raises_job_finished_for_late_and_waiting_workers():
    c = _start()
    try:
        a, b = Peer(c).hello(0, world=2), Peer(c).hello(1, world=2)
        a.expect("gen"), b.expect("gen")
        errors = []

        def wait_to_join():
            try:
                FaultTolerantGroup(c.address, 5, None, secret=SECRET, connect_timeout=5, join_timeout=20)
            except Exception as exc:  # noqa: BLE001
                errors.append(exc)

        waiting = threading.Thread(target=wait_to_join)
        waiting.start()
        a.expect("join_pending")
        for peer in (a, b):
            peer.send({"t": "leave"})
            peer.close()
        waiting.join(20)
        assert len(errors) == 1 and isinstance(errors[0], JobFinished), errors
        with pytest.raises(JobFinished, match="the job has finished") as info:
            FaultTolerantGroup(c.address, 6, None, secret=SECRET, connect_timeout=5)
        assert info.value.exit_code == EXIT_JOB_FINISHED
    finally:
        c.stop()


@pytest.mark.slow
def test_a_worker_that_comes_after_its_job_finished_exits_with_one_line(tmp_path):
    c = _start()
    try:
        a, b = Peer(c).hello(0, world=2), Peer(c).hello(1, world=2)
        a.expect("gen"), b.expect("gen")
        for peer in (a, b):
            peer.send({"t": "leave"})
            peer.close()
        deadline = time.monotonic() + 5
        while not c.finished and time.monotonic() < deadline:
            time.sleep(0.01)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PTC_FT_COORDINATOR": c.address, "RANK": "1",
               ft_auth.ENV_SECRET: SECRET.decode()}  # fmt: skip
        env.pop("WORLD_SIZE", None)
        proc = subprocess.run([sys.executable, "-m", "ptc.demos.ft_example", "--steps", "5", "--out", str(tmp_path)],
                              env=env, capture_output=True, text=True, timeout=180)  # fmt: skip
        assert proc.returncode == EXIT_JOB_FINISHED, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "the job has finished" in lines[0] and "Traceback" not in proc.stderr, proc.stderr
    finally:
        c.stop()


def test_the_launcher_ignores_malformed_worker_events_and_restarts_only_its_own_workers(tmp_path):
    from ptc.distributed.ft.launch import LocalJob

    job = LocalJob(lambda worker: ["true"], 2, restart_after=0.0, joins=[(3, 5)], log_dir=tmp_path)
    timers, joins = [], list(job.joins)
    for event in ({"event": "commit", "step": "x"}, {"event": "commit"}, {"event": "fault_stop", "cont_after": None},
                  {"event": "fault_stop", "cont_after": 1.0, "pid": [1]}, {"event": "worker_failed", "worker": "w"},
                  {"event": "worker_failed", "worker": 9}):  # fmt: skip
        job._events.put(event)
    job._drain(None, joins, timers)
    assert timers == [] and joins == [(3, 5)] and job.runs == []  # worker 9 is not one the launcher started


def test_a_worker_refuses_to_send_an_event_the_coordinator_would_drop_it_for():
    c = _start(world_size=1)
    group = FaultTolerantGroup(c.address, 0, 1, secret=SECRET, connect_timeout=10, join_timeout=30)
    try:
        for name, data, match in [("loss", {"value": float("nan")}, "not JSON"), ("generation", {}, "only the coordinator"),
                                  ("x", {"worker": 1}, "reserved"), ("x", {"blob": "x" * ft_wire.MAX_LINE}, "bytes as JSON"),
                                  ("x", {"obj": object()}, "not JSON"), ("", {}, "characters")]:  # fmt: skip
            with pytest.raises(PtcValueError, match=match):
                group.event(name, **data)
        group.event("fine", value=1.5, nested={"a": [1, 2]})
        time.sleep(0.3)
        assert c.members == [0] and 0 in c._workers and c.rejected == 0
        assert any(e["event"] == "fine" and e["nested"] == {"a": [1, 2]} for e in c.history)
    finally:
        group.close()
        c.stop()
