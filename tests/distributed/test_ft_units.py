"""Fault tolerance in one process: the coordinator's protocol, the group API, the fault kit, bad inputs."""

from __future__ import annotations

import copy
import socket
import threading
import time
import types

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ptc import _compat
from ptc.distributed.ft import auth as ft_auth
from ptc.distributed.ft import faults as F
from ptc.distributed.ft import wire as ft_wire
from ptc.distributed.ft.coordinator import Coordinator
from ptc.distributed.ft.group import (
    CoordinatorUnreachable,
    FaultTolerantGroup,
    MembershipRefused,
    init_fault_tolerant,
)
from ptc.distributed.ft.train import StateDivergence, Trainer, read_vote, state_checksum, vote_flags, wire_dtype
from ptc.errors import PeerFailure, PtcError, PtcTypeError, PtcValueError


class Client:
    """A hand-driven worker connection: what the coordinator sees of a worker.  It answers the
    challenge with a proof of ``secret`` (default: the coordinator's own; False: no proof)."""

    def __init__(self, coordinator: Coordinator, worker: int, world=None, *, job="default", secret=None):
        self.sock = socket.create_connection(("127.0.0.1", coordinator.port), timeout=5)
        self.reader = ft_wire.LineReader(ft_wire.MAX_NEWS_LINE)
        self.challenge = ft_wire.recv_one(self.sock, self.reader, timeout=5)
        assert self.challenge is not None and self.challenge["t"] == "challenge", self.challenge
        secret = coordinator.secret if secret is None else secret
        proof = ft_auth.hello_proof(secret, self.challenge["nonce"], job, worker) if secret else None
        ft_wire.send(self.sock, {"t": "hello", "worker": worker, "pid": 0, "world": world, "job": job,
                                 "nonce": ft_auth.new_nonce(), "proof": proof})  # fmt: skip

    def send(self, **message):
        ft_wire.send(self.sock, message)

    def expect(self, kind, timeout=5.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = ft_wire.recv_one(self.sock, self.reader, timeout=max(0.01, deadline - time.monotonic()))
            if message is None:
                break
            if message["t"] == kind:
                return message
        raise AssertionError(f"no {kind!r} message within {timeout} s")

    def close(self):
        self.sock.close()


@pytest.fixture
def coordinator():
    c = Coordinator(world_size=2, heartbeat_timeout=30.0).start()
    yield c
    c.stop()


# --- the coordinator's protocol ---------------------------------------------------


def test_first_generation_forms_when_the_world_has_arrived(coordinator):
    a = Client(coordinator, 1, world=2)
    assert a.expect("welcome")["store_port"] == coordinator.store.port
    b = Client(coordinator, 0, world=2)
    b.expect("welcome")
    for client in (a, b):
        gen = client.expect("gen")
        assert gen["gen"] == 1 and gen["members"] == [0, 1] and gen["failed"] == []
    a.send(t="ready", gen=1, handle="h1")
    b.send(t="ready", gen=1, handle="h0")
    assert a.expect("go")["handles"] == ["h0", "h1"]  # in rank order
    a.close(), b.close()


def test_a_closed_connection_forms_the_next_generation_without_the_dead(coordinator):
    a, b = Client(coordinator, 0, world=2), Client(coordinator, 1, world=2)
    a.expect("gen"), b.expect("gen")
    b.close()
    gen = a.expect("gen")
    assert gen["gen"] == 2 and gen["members"] == [0] and gen["failed"] == [1]
    assert "connection closed" in gen["reason"]
    a.close()


def test_silence_fences_the_worker():
    c = Coordinator(world_size=2, heartbeat_timeout=0.3).start()
    try:
        a, b = Client(c, 0, world=2), Client(c, 1, world=2)
        stop = threading.Event()

        def beat():
            while not stop.is_set():
                a.send(t="hb")
                time.sleep(0.05)

        beater = threading.Thread(target=beat)
        beater.start()
        try:
            assert "no heartbeat" in b.expect("fenced", timeout=3)["reason"]
            gen = a.expect("gen", timeout=3)
            assert gen["gen"] == 1
            gen = a.expect("gen", timeout=3)
            assert gen["members"] == [0] and gen["failed"] == [1]
        finally:
            stop.set()
            beater.join()
        a.close(), b.close()
    finally:
        c.stop()


def test_hello_refusals_name_the_problem(coordinator):
    a = Client(coordinator, 0, world=2)
    a.expect("welcome")
    dup = Client(coordinator, 0, world=2)
    assert "already taken" in dup.expect("refused")["error"]
    wrong = Client(coordinator, 1, world=3)
    assert "world_size = 3" in wrong.expect("refused")["error"]
    outside = Client(coordinator, 5, world=2)
    assert "must be < world_size = 2" in outside.expect("refused")["error"]
    for c in (a, dup, wrong, outside):
        c.close()


def test_joiner_waits_and_grow_admits_it(coordinator):
    a, b = Client(coordinator, 0, world=2), Client(coordinator, 1, world=2)
    a.expect("gen"), b.expect("gen")
    joiner = Client(coordinator, 7)
    joiner.expect("welcome")
    assert a.expect("join_pending")["workers"] == [7]
    a.send(t="grow", gen=1)
    for client in (a, b, joiner):
        gen = client.expect("gen")
        assert gen["gen"] == 2 and gen["members"] == [0, 1, 7] and gen["joined"] == [7]
    b.send(t="grow", gen=1)  # a late request for an old generation changes nothing
    time.sleep(0.1)
    assert coordinator.generation == 2
    for c in (a, b, joiner):
        c.close()


def test_reported_failure_without_a_dead_worker_reconnects_the_same_members(coordinator):
    a, b = Client(coordinator, 0, world=2), Client(coordinator, 1, world=2)
    a.expect("gen"), b.expect("gen")
    a.send(t="fail", gen=1, err="timeout")
    gen = b.expect("gen")
    assert gen["gen"] == 2 and gen["members"] == [0, 1] and "reported a failed collective" in gen["reason"]
    a.close(), b.close()


def test_min_workers_holds_the_generation_until_someone_joins():
    c = Coordinator(world_size=2, heartbeat_timeout=30.0, min_workers=2).start()
    try:
        a, b = Client(c, 0, world=2), Client(c, 1, world=2)
        a.expect("gen"), b.expect("gen")
        b.close()
        time.sleep(0.3)
        assert c.generation == 1 and any(e["event"] == "waiting_for_workers" for e in c.history)
        late = Client(c, 2)
        assert late.expect("gen")["members"] == [0, 2]
        assert a.expect("gen")["members"] == [0, 2]
        a.close(), late.close()
    finally:
        c.stop()


def test_coordinator_arguments_are_checked():
    with pytest.raises(PtcValueError, match="heartbeat_timeout"):
        Coordinator(world_size=1, heartbeat_timeout=0)
    with pytest.raises(PtcValueError, match="world_size"):
        Coordinator(world_size=0)
    with pytest.raises(PtcValueError, match="min_workers"):
        Coordinator(world_size=1, min_workers=0)
    with pytest.raises(PtcValueError, match="ready_timeout"):
        Coordinator(world_size=1, ready_timeout=-1)
    with pytest.raises(PtcValueError, match="hello_timeout"):
        Coordinator(world_size=1, hello_timeout=0)
    with pytest.raises(PtcValueError, match="job = ''"):
        Coordinator(world_size=1, job="")


# --- the group API ----------------------------------------------------------------


def _in_threads(items, fn):
    """``[fn(item) for item in items]``, each call in a thread of its own (the members of one group must meet)."""
    items = list(items)
    results, errors = [None] * len(items), []

    def run(i):
        try:
            results[i] = fn(items[i])
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(items))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return results


def _groups(coordinator, n, **options):
    """n FaultTolerantGroups of this process (one per thread while connecting)."""
    return _in_threads(range(n), lambda i: FaultTolerantGroup(coordinator.address, i, n, connect_timeout=10,
                                                              join_timeout=30, secret=coordinator.secret,
                                                              **options))  # fmt: skip


def _each(groups, fn):
    return _in_threads(groups, fn)


@pytest.mark.parametrize("engine", ["native", "rebuild"] if _compat.GLOO_RECONFIGURE else ["rebuild"])
def test_collectives_and_subgroups(coordinator, engine):
    groups = _groups(coordinator, 2, engine=engine)
    try:
        assert [g.rank for g in groups] == [0, 1] and {g.size for g in groups} == {2}
        assert {g.engine for g in groups} == {engine}
        sums = _each(groups, lambda g: g.allreduce(torch.full((3,), float(g.rank + 1))))
        assert all(torch.equal(s, torch.full((3,), 3.0)) for s in sums)
        maxes = _each(groups, lambda g: g.allreduce(torch.tensor([g.rank]), "max"))
        assert [int(m) for m in maxes] == [1, 1]
        got = _each(groups, lambda g: g.broadcast(torch.tensor([10 + g.rank]), 1))
        assert [int(x) for x in got] == [11, 11]
        subs = _each(groups, lambda g: g.subgroups(lambda n: [[r] for r in range(n)]))
        assert [s.ranks for s in subs] == [(0,), (1,)]
        solo = _each(groups, lambda g: g.allreduce(torch.tensor([g.rank + 5.0]), group=g._subgroups[0]))
        assert [float(x) for x in solo] == [5.0, 6.0]
        first = [s.pg for s in subs]
        both = _each(groups, lambda g: g.subgroups(lambda n: [list(range(n))]))
        assert [s.pg for s in subs] == first  # declaring another subgroup leaves the connected ones alone
        sums = _each(groups, lambda g: g.allreduce(torch.tensor([g.rank + 1.0]), group=g._subgroups[1]))
        assert [float(x) for x in sums] == [3.0, 3.0] and [s.ranks for s in both] == [(0, 1), (0, 1)]
        with pytest.raises(PtcValueError, match="rank 2 of part 0 is outside"):
            groups[0].subgroups(lambda n: [[0, 1, 2]])
        with pytest.raises(PtcValueError, match="op = 'mean'"):
            groups[0].allreduce(torch.ones(1), "mean")
        assert "rank 0 of 2" in repr(groups[0])
    finally:
        for g in groups:
            g.close()


def test_coordinator_loss_is_not_fatal_and_recovery_without_one_is_bounded():
    """The coordinator gone: collectives go on in the current generation (the link reconnects in the
    background); what needs a coordinator (recover) fails clearly after coordinator_timeout."""
    c = Coordinator(world_size=1, heartbeat_timeout=30.0).start()
    (group,) = _groups(c, 1, coordinator_timeout=0.5)
    try:
        group.allreduce(torch.ones(2))
        c.stop()
        deadline = time.monotonic() + 5
        while not group._link.down and time.monotonic() < deadline:
            time.sleep(0.01)
        assert group._link.down and not group.stale()
        assert torch.equal(group.allreduce(torch.ones(2)), torch.ones(2))
        started = time.monotonic()
        with pytest.raises(PeerFailure, match="no coordinator came back .* coordinator_timeout = 0.5 s"):
            group.recover()
        assert time.monotonic() - started < 5
    finally:
        group.close()


def test_duplicate_worker_is_refused(coordinator):
    (a, b) = _groups(coordinator, 2)
    try:
        with pytest.raises(MembershipRefused, match="already taken") as info:
            FaultTolerantGroup(coordinator.address, 1, 2, connect_timeout=5, secret=coordinator.secret)
        assert isinstance(info.value, ValueError)
    finally:
        a.close(), b.close()


def test_unreachable_coordinator_is_a_clear_connection_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here
    started = time.monotonic()
    with pytest.raises(CoordinatorUnreachable, match="not reachable within connect_timeout") as info:
        FaultTolerantGroup(f"127.0.0.1:{port}", 0, 1, connect_timeout=0.5)
    assert isinstance(info.value, ConnectionError) and time.monotonic() - started < 5


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"worker_id": -1}, "worker_id = -1"),
        ({"worker_id": True}, "worker_id = True"),
        ({"world_size": 0}, "world_size = 0"),
        ({"timeout": 0}, "timeout = 0"),
        ({"heartbeat_interval": "fast"}, "heartbeat_interval = 'fast'"),
        ({"engine": "nccl"}, "engine = 'nccl'"),
    ],
)
def test_bad_group_arguments_name_the_argument(kwargs, match):
    args = {"worker_id": 0, "world_size": 1, **kwargs}
    with pytest.raises(PtcValueError, match=match):
        FaultTolerantGroup("127.0.0.1:1", args.pop("worker_id"), args.pop("world_size"), **args)


def test_bad_coordinator_address():
    with pytest.raises(PtcValueError, match="expected 'host:port'"):
        FaultTolerantGroup("localhost", 0, 1)
    with pytest.raises(PtcValueError, match="port in 1..65535"):
        ft_wire.parse_address("h:0")


def test_init_without_any_way_to_find_the_coordinator(monkeypatch):
    for name in ("PTC_FT_COORDINATOR", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(PtcValueError, match=r"worker_id: not given and \$RANK is not set"):
        init_fault_tolerant()
    with pytest.raises(PtcValueError, match="coordinator: not given"):
        init_fault_tolerant(worker_id=0)


# --- the trainer ------------------------------------------------------------------


def test_trainer_arguments_are_checked():
    c = Coordinator(world_size=1).start()
    (group,) = _groups(c, 1)
    try:
        model = torch.nn.Linear(2, 1)
        with pytest.raises(PtcTypeError, match="group: expected a FaultTolerantGroup"):
            Trainer(object(), model, torch.optim.SGD(model.parameters(), lr=0.1))
        with pytest.raises(PtcTypeError, match="optimizer: expected a torch.optim.Optimizer"):
            Trainer(group, model, object())
    finally:
        group.close()
        c.stop()


def test_single_member_trainer_commits_and_checksums_track_state():
    c = Coordinator(world_size=1).start()
    (group,) = _groups(c, 1)
    try:
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1).double()
        trainer = Trainer(group, model, torch.optim.SGD(model.parameters(), lr=0.1))
        before = trainer.checksum()
        x = torch.randn(8, 4, dtype=torch.float64)
        for _ in range(3):
            trainer.run_step(lambda info: model(x).pow(2).mean().backward())
        assert trainer.step == 3 and [h[0] for h in trainer.history] == [0, 1, 2]
        assert trainer.checksum() != before
        assert issubclass(StateDivergence, RuntimeError) and issubclass(StateDivergence, PtcError)
    finally:
        group.close()
        c.stop()


def test_state_checksum_sees_every_bit():
    t = torch.tensor([1.0, 2.0], dtype=torch.float64)
    u = t.clone()
    u[1] = torch.nextafter(u[1], torch.tensor(3.0, dtype=torch.float64))
    assert state_checksum([t], 0) != state_checksum([u], 0)
    assert state_checksum([t], 0) != state_checksum([t], 1)
    assert state_checksum([t], 0) == state_checksum([t.clone()], 0)


# --- the fault kit ----------------------------------------------------------------


def test_faults_round_trip_and_validate():
    faults = [F.kill_in_collective(3, worker=1), F.kill_between_steps(5, rank=0), F.kill_during_reconfigure(2, worker=2),
              F.stop_at_step(4, worker=0, cont_after=1.5)]  # fmt: skip
    assert F.decode(F.encode(faults)) == faults
    with pytest.raises(PtcValueError, match="exactly one target"):
        F.kill_in_collective(3)
    with pytest.raises(PtcValueError, match="exactly one target"):
        F.Fault("kill", "step", 1, worker=1, rank=1)
    with pytest.raises(PtcValueError, match="cont_after"):
        F.Fault("stop", "step", 1, worker=1)
    with pytest.raises(PtcValueError, match="point = 'forward'"):
        F.Fault("kill", "forward", 1, worker=1)
    with pytest.raises(PtcValueError, match="fault plan: not JSON"):
        F.decode("{")


def test_injector_fires_once_at_the_right_point(monkeypatch):
    fired, announced = [], []
    monkeypatch.setattr(F.os, "kill", lambda pid, sig: fired.append(sig))
    injector = F.Injector([F.kill_in_collective(2, rank=1), F.stop_at_step(3, worker=4, cont_after=1.0)],
                          lambda name, data: announced.append(name))  # fmt: skip
    injector.point("collective", 2, worker=9, rank=0)  # wrong rank
    injector.point("collective", 1, worker=9, rank=1)  # wrong collective
    assert fired == []
    injector.point("collective", 2, worker=9, rank=1)
    injector.point("collective", 2, worker=9, rank=1)  # once only
    injector.point("step", 3, worker=4, rank=None)
    import signal

    assert fired == [signal.SIGKILL, signal.SIGSTOP] and announced == ["fault_kill", "fault_stop"]


def test_a_group_injects_only_the_plan_it_is_given(coordinator, monkeypatch, tmp_path):
    """The fault plan is an argument: the environment never gives a group one, and the plan a
    launcher writes to a file (ft_faults.save) is the plan its worker loads and passes on."""
    plan = [F.kill_in_collective(10**6, worker=1), F.stop_at_step(10**6, rank=0, cont_after=1.0)]
    monkeypatch.setenv("PTC_FT_FAULTS", F.encode(plan))
    F.save(tmp_path / "faults.json", plan)
    assert F.load(tmp_path / "faults.json") == plan
    with pytest.raises(PtcTypeError, match="faults: expected a list"):
        FaultTolerantGroup(coordinator.address, 0, 2, faults="kill")
    plain, planned = _in_threads(range(2), lambda i: FaultTolerantGroup(
        coordinator.address, i, 2, connect_timeout=10, join_timeout=30, secret=coordinator.secret,
        faults=plan if i else ()))
    try:
        assert plain.faults is None
        assert planned.faults is not None and planned.faults.faults == plan
    finally:
        for g in (plain, planned):
            g.close()


def test_subgroups_are_rebuilt_in_the_next_generation(coordinator):
    from ptc.distributed.ft import gloo

    c = Coordinator(world_size=3, heartbeat_timeout=30.0).start()
    # worker 2 only loses its coordinator connection: its process group lives on in this process, so a survivor's
    # collective issued before the news can stay stuck in gloo until the collective timeout. Keep that short: a
    # group whose gloo thread is stuck blocks (holding the GIL) when it is garbage-collected, until the timeout.
    groups = _groups(c, 3, timeout=3.0)
    try:
        pairs = lambda n: [list(range(i, min(i + 2, n))) for i in range(0, n, 2)]  # noqa: E731
        subs = _each(groups, lambda g: g.subgroups(pairs))
        assert [s.ranks for s in subs] == [(0, 1), (0, 1), (2,)]
        groups[2]._link.close(leave=False)  # worker 2 "dies": its coordinator connection ends
        survivors = groups[:2]

        def fail_then_recover(g):
            with pytest.raises(PeerFailure) as info:
                g.allreduce(torch.ones(1))
            assert info.value.ranks == (2,) and info.value.generation == 1
            return g.recover().number

        first = [s.pg for s in subs[:2]]
        assert _each(survivors, fail_then_recover) == [2, 2]
        assert [(s.generation, s.ranks) for s in subs[:2]] == [(2, (0, 1)), (2, (0, 1))]
        assert all(any(pg is old for pg in gloo.ABANDONED) for old in first)  # retired, not destroyed
        sums = _each(survivors, lambda g: g.allreduce(torch.tensor([g.rank + 1.0]), group=g._subgroups[0]))
        assert [float(s) for s in sums] == [3.0, 3.0]
    finally:
        for g in groups:
            g.close()
        c.stop()


def test_a_worker_with_another_world_size_is_refused(coordinator):
    (a, b) = _groups(coordinator, 2)
    try:
        with pytest.raises(MembershipRefused, match="started with world_size = 2"):
            FaultTolerantGroup(coordinator.address, 5, 3, connect_timeout=5, secret=coordinator.secret)
    finally:
        a.close(), b.close()


def test_unreachable_bootstrap_store_is_a_clear_connection_error(monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.delenv("PTC_FT_COORDINATOR", raising=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    with pytest.raises(CoordinatorUnreachable, match=f"store 127.0.0.1:{port}"):
        init_fault_tolerant(worker_id=0, world_size=1, connect_timeout=1.0)


def test_a_finished_job_admits_nobody(coordinator):
    a, b = Client(coordinator, 0, world=2), Client(coordinator, 1, world=2)
    a.expect("gen"), b.expect("gen")
    waiting = Client(coordinator, 2)
    waiting.expect("welcome")
    for client in (a, b):
        client.send(t="leave")
        client.close()
    assert "job has finished" in waiting.expect("fenced")["reason"]
    late = Client(coordinator, 3)
    assert "job has finished" in late.expect("refused")["error"]
    waiting.close(), late.close()


def test_sync_takes_the_member_with_the_most_committed_steps_even_if_it_is_not_rank_0(coordinator):
    """After a failure some survivors may have committed a step the others did not: the step is kept."""
    groups = _groups(coordinator, 2)
    try:
        trainers = []
        for g in groups:
            torch.manual_seed(0)
            model = torch.nn.Linear(3, 1).double()
            trainers.append(Trainer(g, model, torch.optim.SGD(model.parameters(), lr=0.1)))
        _each(trainers, lambda t: t.sync_state())
        groups[0]._link.send({"t": "fail", "gen": 1, "err": "simulated"})  # same members, next generation
        assert _each(groups, lambda g: g.recover().number) == [2, 2]
        ahead = trainers[1]  # rank 1 committed one more step than rank 0
        with torch.no_grad():
            ahead.module.weight.add_(1.0)
        ahead.step, ahead.history = 1, [(0, 1, (0, 1))]
        _each(trainers, lambda t: t.sync_state())
        assert [t.step for t in trainers] == [1, 1]
        assert torch.equal(trainers[0].module.weight, ahead.module.weight)
        assert trainers[0].history == [(0, 1, (0, 1))]
        assert trainers[0].syncs[-1]["source"] == 1 and trainers[0].syncs[-1]["bytes"] > 0
    finally:
        for g in groups:
            g.close()


class _LinkStub:
    def __init__(self, announced, fenced=None, lost=False):
        self.announced, self.fenced, self.lost = announced, fenced, lost


@pytest.mark.parametrize("news,completes,expected", [
    (dict(members=(0, 1, 7), joined=(7,)), True, True),  # a grow: the collective still completes
    (dict(members=(0, 1, 7), joined=(7,)), False, False),  # ... unless it cannot within the grace
    (dict(members=(0,), failed=(1,)), True, False),  # a peer failed: abort at once
])
def test_a_collective_in_flight_may_finish_after_a_grow_was_announced(news, completes, expected):
    """The announcement of a grow can overtake the last message of a collective that the
    other members already completed: it must not make this member call the step failed."""
    from ptc.distributed.ft.group import GROW_GRACE_S, Generation

    me = type("Stub", (), {"_link": _LinkStub(Generation(number=2, **news)),
                           "_nobody_failed": FaultTolerantGroup._nobody_failed})()  # fmt: skip
    gen = Generation(number=1, members=(0, 1))
    work = _Work(after=0.05 if completes else None)
    start = time.monotonic()
    assert FaultTolerantGroup._finishes_anyway(me, gen, work, work.future) is expected
    took = time.monotonic() - start
    if news.get("failed"):
        assert took < 0.04  # no waiting when a peer is known dead
    elif not completes:
        assert GROW_GRACE_S <= took < GROW_GRACE_S + 1.0


def test_a_grow_announced_during_an_allreduce_lets_it_complete(coordinator):
    """The wiring of the grace above: member 1 is inside an allreduce when a grow is announced
    to it; member 0 joins the allreduce only afterwards. Member 1 gets the sum, not a PeerFailure."""
    from ptc.distributed.ft.group import Generation

    groups = _groups(coordinator, 2)
    try:
        one = groups[1]
        result = {}

        def member_one():
            result["sum"] = one.allreduce(torch.ones(2))

        t = threading.Thread(target=member_one)
        t.start()
        deadline = time.monotonic() + 10
        while not one._waiters and time.monotonic() < deadline:  # member 1 is waiting inside its allreduce
            time.sleep(0.005)
        assert one._waiters, "member 1 never entered its allreduce"
        one._link.announced = Generation(number=one.generation.number + 1, members=(0, 1, 7), joined=(7,))
        one._news_arrived()
        time.sleep(0.05)
        groups[0].allreduce(torch.ones(2))
        t.join(10)
        assert torch.equal(result.get("sum"), torch.full((2,), 2.0))
    finally:
        for g in groups:
            g.close()


class _Work:
    """A c10d Work stand-in: completes ``after`` seconds after it was issued (never if None),
    raising ``error`` from wait() if given; counts how it was waited for."""

    def __init__(self, after, error=None, completes_as_the_wait_times_out=False):
        self.future = torch.futures.Future()
        self.completes_as_the_wait_times_out = completes_as_the_wait_times_out
        self.error = error
        self.timed_waits = 0
        self.futures_asked = 0
        if after is not None:
            threading.Timer(after, self._finish).start()

    def _finish(self):
        if self.error is None:
            self.future.set_result(None)
        else:
            self.future.set_exception(self.error)

    def is_completed(self):
        return self.future.done()

    def get_future(self):
        self.futures_asked += 1
        return _FutureWithoutCallbacks(self.future)

    def wait(self, timeout=None):
        if timeout is not None:
            self.timed_waits += 1
            deadline = time.monotonic() + timeout.total_seconds()
            while not self.future.done() and time.monotonic() < deadline:
                time.sleep(0.001)
            if not self.future.done():
                if self.completes_as_the_wait_times_out:
                    self._finish()
                raise RuntimeError("Operation timed out!")  # what c10d's Work::wait(timeout) raises
        self.future.wait()
        return True


class _FutureWithoutCallbacks:
    """The Work's future as ft may use it: a done-callback would run on the backend's thread and
    take the GIL there, which aborts the process if the interpreter is finalizing meanwhile."""

    def __init__(self, future):
        self._future = future

    def done(self):
        return self._future.done()

    def add_done_callback(self, fn):
        raise AssertionError("a Python callback on a collective's future (it runs on the backend's thread)")

    then = add_done_callback


def _bare_group(work):
    """A FaultTolerantGroup around one stand-in Work, with nothing else behind it."""
    import datetime
    import types

    from ptc.distributed.ft.group import Generation

    class Bare(FaultTolerantGroup):
        def __init__(self):
            self.generation = Generation(number=1, members=(0, 1))
            self._link = _LinkStub(None)
            self._engine = types.SimpleNamespace(pg=types.SimpleNamespace(allreduce=lambda tensors: work))
            self.faults, self._recorder = None, None
            self._waiters, self._waiters_lock, self._news_listeners = set(), threading.Lock(), []
            self._timeout = datetime.timedelta(seconds=5)
            self.closed = False

        def _failure(self, detail):
            return PeerFailure([1], 1, detail)

    return Bare()


def test_a_collective_done_within_the_fast_wait_is_waited_for_in_cpp_alone():
    """No done-callback, no registered waiter: the common case costs one C++ wait."""
    work = _Work(after=None)
    work._finish()  # done when waited for (deterministic: a loaded machine could stall a timer past FAST_WAIT)
    group = _bare_group(work)
    group._allreduce_owned(torch.ones(1))
    assert work.timed_waits == 1 and work.futures_asked == 0 and not group._waiters


def test_a_collective_that_fails_within_the_fast_wait_is_a_peer_failure():
    work = _Work(after=0.0, error=RuntimeError("Connection closed by peer [127.0.0.1]:1234"))
    with pytest.raises(PeerFailure, match="Connection closed by peer"):
        _bare_group(work)._allreduce_owned(torch.ones(1))


def test_a_collective_that_completes_as_the_fast_wait_times_out_succeeds():
    """The timeout and the completion can cross: a completed work after a timed-out wait is not a failure."""
    work = _Work(after=None, completes_as_the_wait_times_out=True)
    _bare_group(work)._allreduce_owned(torch.ones(1))
    assert work.is_completed()


def test_a_slow_collective_switches_to_the_abortable_wait():
    """Past the fast wait it completes normally, or news releases it at once."""
    from ptc.distributed.ft.group import FAST_WAIT, Generation

    slow = FAST_WAIT.total_seconds() * 5
    work = _Work(after=None)
    asked = work.get_future

    def get_future():  # the work completes only once the wait has switched (a loaded machine may stall it)
        threading.Timer(slow, work._finish).start()
        return asked()

    work.get_future = get_future
    group = _bare_group(work)
    group._allreduce_owned(torch.ones(1))
    assert work.is_completed() and work.futures_asked == 1 and not group._waiters

    work = _Work(after=None)  # never completes: a peer died, this rank is not its neighbour
    group = _bare_group(work)
    timer = threading.Timer(slow, lambda: (setattr(group._link, "announced", Generation(number=2, members=(0,), failed=(1,))),
                                           group._news_arrived()))  # fmt: skip
    timer.start()
    start = time.monotonic()
    with pytest.raises(PeerFailure, match="aborted, generation 1 was replaced"):
        group._allreduce_owned(torch.ones(1))
    assert time.monotonic() - start < 0.45  # released by the news (at 0.1 s), at its next 5 ms wait
    assert not group._waiters


def test_the_rebuild_engine_never_destroys_an_abandoned_group():
    """An abandoned group outlives every Python reference to it, even the module list that
    interpreter shutdown clears: destroying it with a collective pending on a dead peer blocks
    until its timeout, or aborts the process when the garbage collector runs on a gloo thread."""
    import datetime
    import gc
    import weakref

    import torch.distributed as dist

    from ptc.distributed.ft import gloo

    timeout = datetime.timedelta(seconds=10)
    engine = gloo.RebuildEngine(dist.HashStore(), 0, timeout)
    first = engine.connect(1, 0, 1, [], timeout)
    alive = weakref.ref(first)
    second = engine.connect(2, 0, 1, [], timeout)
    assert engine.pg is second and any(pg is first for pg in gloo.ABANDONED)
    gloo.ABANDONED[:] = [pg for pg in gloo.ABANDONED if pg is not first]  # what shutdown does
    del first, engine
    gc.collect()
    assert alive() is not None
    second.allreduce([torch.ones(1)]).wait()  # the new generation's group works


def test_a_retired_groups_pending_collective_ends_at_once_with_its_callback_run():
    """gloo's abort() leaves a collective pending; one waiting on a peer that moved on would end
    only when that peer's process exits, and its done-callback would then run on gloo's thread,
    possibly while this interpreter is finalizing (a crash).  Retiring the group ends it now."""
    import datetime

    import torch.distributed as dist

    from ptc.distributed.ft import gloo

    timeout = datetime.timedelta(seconds=60)
    store = dist.HashStore()
    engines = [gloo.RebuildEngine(store, rank, timeout) for rank in range(2)]
    olds = _in_threads(range(2), lambda r: engines[r].connect(1, r, 2, [], timeout))
    _in_threads(range(2), lambda r: olds[r].allreduce([torch.ones(1)]).wait())
    pending = olds[0].allreduce([torch.ones(1)])  # rank 1 never joins it
    ran = threading.Event()
    pending.get_future().add_done_callback(lambda _f: ran.set())
    time.sleep(0.2)
    assert not pending.is_completed()
    news = _in_threads(range(2), lambda r: engines[r].connect(2, r, 2, [], timeout))
    assert ran.wait(10), "the abandoned collective is still pending"
    with pytest.raises(RuntimeError):
        pending.wait()
    assert any(pg is olds[0] for pg in gloo.ABANDONED)  # ended, and still never destroyed
    sums = _in_threads(range(2), lambda r: news[r].allreduce([torch.full((1,), r + 1.0)]).get_future().wait()[0])
    assert [float(x) for x in sums] == [3.0, 3.0]  # the new generation's group is untouched


def test_shutting_down_a_groups_connections_spares_listeners_and_reused_fds():
    from ptc.distributed.ft import gloo

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    a = socket.create_connection(listener.getsockname(), timeout=5)
    b, _ = listener.accept()
    recorded = {fd: inode for fd, inode in gloo.open_sockets().items() if fd in (listener.fileno(), a.fileno())}
    assert len(recorded) == 2
    reused = a.fileno()
    a.close()
    c = socket.create_connection(listener.getsockname(), timeout=5)  # takes the lowest free fd: a's number
    d, _ = listener.accept()
    try:
        assert c.fileno() == reused
        assert gloo.shut_down_connections(recorded) == 0  # the listener and a file that is not a's
        c.sendall(b"x")
        assert d.recv(1) == b"x"
        e = socket.create_connection(listener.getsockname(), timeout=5)  # still listening
        f, _ = listener.accept()
        assert gloo.shut_down_connections({e.fileno(): gloo.open_sockets()[e.fileno()]}) == 1
        f.settimeout(5)
        assert f.recv(1) == b""  # the peer sees the connection end
        e.close(), f.close()
    finally:
        for s in (b, c, d, listener):
            s.close()


# --- the vote in the gradients' dtype ------------------------------------------------------

_DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]


@settings(max_examples=40, deadline=None)
@given(dtype=st.sampled_from(_DTYPES), size=st.integers(1, 127), data=st.data())
def test_the_vote_sums_exactly_in_the_wire_dtype_in_any_order(dtype, size, data):
    """Summed in ``dtype`` in any order, the flags are the exact integer sums; equal steps pass,
    and one member at another step fails on every member."""
    assert wire_dtype({dtype}, size) == dtype  # bfloat16 carries up to 127 members
    base = data.draw(st.integers(0, 2**63 - 1))
    odd = data.draw(st.none() | st.integers(0, 2**63 - 1).filter(lambda s: s != base)) if size > 1 else None
    steps = [base] * size if odd is None else [base] * (size - 1) + [odd]
    joins = data.draw(st.lists(st.booleans(), min_size=size, max_size=size))
    flags = [vote_flags(s, j, size, dtype) for s, j in zip(steps, joins)]
    total = torch.zeros_like(flags[0])
    for i in data.draw(st.permutations(range(size))):
        total += flags[i]
    exact = [sum(int(v) for v in column) for column in zip(*(f.tolist() for f in flags))]
    assert [int(v) for v in total.tolist()] == exact
    for s in set(steps):
        assert read_vote(total, size, s) == (size, sum(joins), odd is None)


def test_the_wire_dtype_is_the_gradients_own_where_it_can_carry_the_vote():
    assert wire_dtype({torch.float32}, 4) == torch.float32
    assert wire_dtype({torch.bfloat16}, 128) == torch.float64  # too narrow to sum 128 votes exactly
    assert wire_dtype({torch.float16}, 1023) == torch.float16 and wire_dtype({torch.float16}, 1024) == torch.float64
    assert wire_dtype({torch.float32, torch.float64}, 2) == torch.float64  # one flat buffer, one dtype
    with pytest.raises(PtcValueError, match="cannot carry the vote of 128 members"):
        vote_flags(0, False, 128, torch.bfloat16)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_a_wire_buffer_carries_the_vote_through_numpy_or_torch(dtype):
    """The vote is written into and read from a wire buffer's tail through a NumPy view where NumPy
    has the dtype, through torch where not (bfloat16); both give the same elements."""
    from ptc.distributed.ft.vote import WireBuffer, read_summed_vote, vote_values

    cpu = torch.device("cpu")
    vote = vote_values(12345, True, 3, dtype)
    wire = WireBuffer("k", 4, len(vote), dtype, cpu)
    assert (wire._host is None) == (dtype == torch.bfloat16)
    wire.head.copy_(torch.arange(4.0))
    wire.write_vote(vote)
    assert wire.flat.tolist() == [0, 1, 2, 3, *vote] and wire.written == vote
    wire.flat.mul_(3)  # what an allreduce of three equal members leaves
    assert wire.read_vote() == [3 * v for v in vote]
    assert read_summed_vote(wire.read_vote(), vote, 3) == (3, 3, True)
    assert read_summed_vote(wire.read_vote(), vote_values(12346, True, 3, dtype), 3)[2] is False
    assert wire.fits(4, len(vote), dtype, cpu)
    assert not wire.fits(5, len(vote), dtype, cpu) and not wire.fits(4, len(vote) + 1, dtype, cpu)
    assert not wire.fits(4, len(vote), torch.float64 if dtype != torch.float64 else torch.float32, cpu)


def _train_two(coordinator, make, ddp=False, steps=2, ddp_options=None, before_forward=None, optimizer=None,
               then=None, before_step=None, ddp_hook="python"):  # fmt: skip
    """Two members train ``make()`` on different batches; returns (trainers, (dtype, numel) of every
    gradient allreduce, batches).  ``before_forward(trainer, info)`` runs at the start of compute;
    ``optimizer(params)`` makes the optimizers (SGD, lr 0.1); ``then(trainers)`` runs before the
    groups close; ``before_step(trainer, info)`` is given to run_step; ``ddp_hook`` goes with ``ddp``."""
    groups = _groups(coordinator, 2)
    wires, order = [], {}  # order: per worker, the DDP hook's starts and waits
    started = set()  # the works the DDP hook started
    for g in groups:
        for name in ("_allreduce_owned", "_allreduce_owned_start"):  # the Trainer's, the DDP hook's
            send = getattr(g, name)
            setattr(g, name, lambda flat, send=send: (wires.append((flat.dtype, flat.numel())), send(flat))[1])
        start, wait, events = g._allreduce_owned_start, g._await, order.setdefault(g.worker_id, [])

        def _start(flat, start=start, events=events):
            gen, work = start(flat)
            started.add(id(work))
            events.append("start")
            return gen, work

        def _await(what, gen, work, wait=wait, events=events):
            if id(work) in started:
                events.append("wait")
            return wait(what, gen, work)

        g._allreduce_owned_start, g._await = _start, _await
    try:
        trainers = []
        for g in groups:
            torch.manual_seed(0)
            model = make()
            opt = (optimizer or (lambda params: torch.optim.SGD(params, lr=0.1)))(model.parameters())
            trainers.append(Trainer(g, model, opt, ddp=ddp, ddp_options=ddp_options,
                                    ddp_hook=ddp_hook if ddp else "auto"))  # fmt: skip
        dtype = next(make().parameters()).dtype
        batches = [torch.randn(6, 3, generator=torch.Generator().manual_seed(i), dtype=dtype) for i in range(2 * steps)]

        def compute(t, info):
            if before_forward is not None:
                before_forward(t, info)
            t.model(batches[2 * info.step + info.rank]).abs().pow(2).mean().backward()

        def run(t):
            for _ in range(steps):
                t.run_step(lambda info: compute(t, info),
                           None if before_step is None else lambda info: before_step(t, info))  # fmt: skip

        _each(trainers, run)
        if then is not None:
            then(trainers)
        return trainers, wires, batches, order
    finally:
        for g in groups:
            g.close()
        # DDP's forward saves and restores a process-wide "active DDP module"; two members' forwards
        # in two threads interleave, so one of them stays set, and every later torch.compile in this
        # process would split its graphs for that DDP module (DDPOptimizer)
        from torch.nn.parallel import DistributedDataParallel

        DistributedDataParallel._active_ddp_module = None


def _replay_two(make, batches, steps=2, before_step=None):
    """The same two members' steps in one process: the mean of their gradients, in the model's dtype
    (``before_step(model)`` between the mean and the optimizer's step)."""
    torch.manual_seed(0)
    model = make()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        grads = []
        for rank in range(2):
            model.zero_grad()
            model(batches[2 * step + rank]).abs().pow(2).mean().backward()
            grads.append([p.grad.clone() for p in model.parameters()])
        for p, a, b in zip(model.parameters(), *grads):
            p.grad = (a + b) / 2
        if before_step is not None:
            before_step(model)
        optimizer.step()
    return model


@pytest.mark.parametrize(
    "dtype, ddp",
    [(torch.float32, False), (torch.float32, True), (torch.float32, "hook"), (torch.complex64, False),
     (torch.bfloat16, False)],
)
def test_gradients_travel_in_their_own_dtype_and_average_like_one_process(coordinator, dtype, ddp, monkeypatch):
    """float32 gradients are not doubled to float64 on the wire; complex ones keep their imaginary part.
    Under DDP this small model gets no comm hook (reduced after backward), unless DDP_HOOK_MIN_BYTES says so."""
    from ptc.distributed.ft import train as ft_train

    if ddp == "hook":
        monkeypatch.setattr(ft_train, "DDP_HOOK_MIN_BYTES", 0)
    make = lambda: torch.nn.Linear(3, 2, dtype=dtype)  # noqa: E731
    trainers, wires, batches, order = _train_two(coordinator, make, ddp=bool(ddp))
    assert all(t._ddp_hook is (ddp == "hook") for t in trainers)
    assert any(order.values()) is (ddp == "hook"), order  # the hook's starts and waits
    if ddp is True:  # DDP itself reduces nothing (as under no_sync()); the Trainer did, after backward
        assert all(t.model.require_backward_grad_sync is False for t in trainers)
    real = torch.float32 if dtype == torch.complex64 else dtype
    numel = sum(torch.view_as_real(p).numel() if p.is_complex() else p.numel() for p in make().parameters())
    flags = vote_flags(0, False, 2, real).numel()
    assert wires and all(w == (real, numel + flags) for w in wires), wires
    expected = _replay_two(make, batches)
    for t in trainers:
        assert t.step == 2
        for p, e in zip(t.module.parameters(), expected.parameters()):
            assert torch.equal(p, e), (p, e)


def test_ddp_buckets_overlap_and_each_is_averaged(coordinator):
    """Several DDP buckets: each one's allreduce starts when DDP hands it over, the last one's hook
    waits for them all; every bucket is averaged and the vote rides with one of them: the previous
    step's smallest (so, right after DDP's rebuild, with the bucket at the old one's index)."""
    def make():
        return torch.nn.Sequential(torch.nn.Linear(3, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                                   torch.nn.Linear(64, 2))  # fmt: skip

    trainers, wires, batches, order = _train_two(coordinator, make, ddp=True, steps=3,
                                                 ddp_options={"bucket_cap_mb": 0.005})  # fmt: skip
    flags = vote_flags(0, False, 2, torch.float32).numel()
    # step 0 has one bucket; DDP rebuilds its buckets after it: two from step 1 on (per member); the
    # vote rides with the one at index 0 in step 1 (step 0's smallest), with the 256 one in step 2
    assert sorted(n for _, n in wires) == sorted([4546 + flags] * 2 + [4290 + flags, 256] * 2 + [4290, 256 + flags] * 2), wires
    # each member waits for a step's buckets only after starting all of them
    assert order == {w: ["start", "wait"] + ["start", "start", "wait", "wait"] * 2 for w in (0, 1)}, order
    expected = _replay_two(make, batches, steps=3)
    for t in trainers:
        assert t.step == 3 and not t._transport.pending
        # the 4290-element bucket was reduced in place; the last one (the 256) was copied, and
        # step 0's copy of the single bucket it rebuilt from is released, not kept for good
        assert sorted(b.flat.numel() for b in t._wire_buffers.values()) == [256 + flags]
        for p, e in zip(t.module.parameters(), expected.parameters()):
            assert torch.equal(p, e)


class _TransposedStats(torch.nn.Module):
    """A buffer that is a non-contiguous view (a transpose), updated by every forward."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("seen", torch.zeros(4, 3).t())

    def forward(self, x):
        with torch.no_grad():
            self.seen.add_(x.detach().mean(0)[None, :])
        return x


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
@pytest.mark.parametrize("sync", [True, False])
def test_ddp_module_buffers_are_rank_0s_at_every_forward_as_with_ddp(coordinator, sync, layout):
    """DDP's forward_sync_buffers (default on) over the fault-tolerant group: at the start of each
    forward every member holds rank 0's buffers (DDP's own broadcast would run on its process-local
    group and change nothing); with forward_sync_buffers=False each member keeps its own.  A buffer
    that is a non-contiguous view is written through its own strides."""
    def make():
        stats = torch.nn.BatchNorm1d(4) if layout == "contiguous" else _TransposedStats()
        return torch.nn.Sequential(torch.nn.Linear(3, 4), stats, torch.nn.Linear(4, 2))

    seen = {}  # step -> rank -> the buffers as compute() found them
    after = {}  # step -> rank 0's buffers after its forward

    def before_forward(t, info):
        seen.setdefault(info.step, {})[info.rank] = [b.clone() for b in t.module.buffers()]
        if info.rank == 0 and info.step > 0:
            after[info.step - 1] = seen[info.step][0]

    trainers, _, _, _ = _train_two(coordinator, make, ddp=True, steps=3, before_forward=before_forward,
                                   ddp_options=None if sync else {"forward_sync_buffers": False})  # fmt: skip
    assert all(t.step == 3 and t.model.forward_sync_buffers is False for t in trainers)
    for step in (1, 2):  # step 0 starts from equal buffers (same seed) either way
        equal = all(torch.equal(a, b) for a, b in zip(seen[step][0], seen[step][1]))
        assert equal is sync, (step, seen[step])
    assert not torch.equal(seen[0][0][0], seen[2][0][0])  # the forwards did update them (running_mean)
    if layout == "transposed":  # still the module's own view, written in place
        assert all(not t.module[1].seen.is_contiguous() and t.module[1].seen.stride() == (1, 3) for t in trainers)


@pytest.mark.parametrize("ddp", [False, True])
def test_a_model_with_batch_norm_and_adam_state_is_checksummed_and_synchronised(coordinator, ddp):
    """0-d state tensors (BatchNorm's num_batches_tracked, Adam's step) have no byte view of their
    own: the checksum reads them as 1-d.  Members whose batch-norm statistics differ are made equal."""
    def make():
        return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))

    sums = {}

    def then(trainers):
        sums["before"] = [t.checksum() for t in trainers]
        _each(trainers, lambda t: t.sync_state())
        sums["after"] = [t.checksum() for t in trainers]

    trainers, _, _, _ = _train_two(coordinator, make, ddp=ddp, steps=2, then=then,
                                   optimizer=lambda params: torch.optim.Adam(params, lr=0.01))  # fmt: skip
    assert any(v.dim() == 0 for v in trainers[0].optimizer.state_dict()["state"][0].values())  # Adam's step
    assert sums["before"][0] != sums["before"][1]  # each member's last forward updated its own statistics
    assert sums["after"][0] == sums["after"][1] and trainers[0].syncs[-1]["bytes"] > 0
    for a, b in zip(trainers[0].module.state_dict().values(), trainers[1].module.state_dict().values()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("ddp", [False, True])
def test_before_step_sees_the_averaged_gradients_and_can_clip_them(coordinator, ddp):
    """run_step(compute, before_step): gradient clipping on the mean of the members' gradients,
    as in a DDP loop (clipping inside compute would clip this member's own)."""
    def make():
        return torch.nn.Linear(3, 2)

    def clip(module):
        torch.nn.utils.clip_grad_norm_(module.parameters(), 0.05)

    calls = []

    def before_step(t, info):
        calls.append((t.group.worker_id, info.step))
        clip(t.module)

    trainers, _, batches, _ = _train_two(coordinator, make, ddp=ddp, steps=3, before_step=before_step)
    assert sorted(calls) == [(w, s) for w in (0, 1) for s in range(3)]  # once per committed step, per member
    expected = _replay_two(make, batches, steps=3, before_step=clip)
    unclipped = _replay_two(make, batches, steps=3)
    for t in trainers:
        for p, e, u in zip(t.module.parameters(), expected.parameters(), unclipped.parameters()):
            assert torch.equal(p, e), (p, e)
        assert not all(torch.equal(p, u) for p, u in zip(t.module.parameters(), unclipped.parameters()))


class _Unused(torch.nn.Module):
    """``b`` takes no part in forward: it never gets a gradient."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)

    def forward(self, x):
        return self.a(x)


def test_a_parameter_without_gradient_under_ddp_names_find_unused_parameters(coordinator, monkeypatch):
    from ptc.distributed.ft import train as ft_train

    monkeypatch.setattr(ft_train, "DDP_HOOK_MIN_BYTES", 0)  # the comm hook even for this small model
    with pytest.raises(AssertionError, match=r"PtcError.*find_unused_parameters"):
        _train_two(coordinator, _Unused, ddp=True, steps=1)


def test_ddp_with_find_unused_parameters_trains_a_model_with_an_unused_parameter(coordinator):
    trainers, _, _, _ = _train_two(coordinator, _Unused, ddp=True, steps=3, ddp_options={"find_unused_parameters": True})
    assert all(t.step == 3 for t in trainers)
    for a, b in zip(trainers[0].module.parameters(), trainers[1].module.parameters()):
        assert torch.equal(a, b)
    torch.manual_seed(0)
    fresh = _Unused()  # as _train_two made them
    assert torch.equal(trainers[0].module.b.weight, fresh.b.weight)  # no gradient: never moved
    assert not torch.equal(trainers[0].module.a.weight, fresh.a.weight)


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
def test_extra_state_travels_with_the_model_and_the_optimizer(coordinator):
    """An LR scheduler passed as extra_state reaches a member that is behind (a joiner), so its next
    scheduler.step() gives the group's learning rate, not a fresh schedule's."""
    groups = _groups(coordinator, 2)
    try:
        trainers, schedulers = [], []
        for g in groups:
            torch.manual_seed(0)
            model = torch.nn.Linear(3, 2)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            schedulers.append(torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5))
            trainers.append(Trainer(g, model, opt, extra_state=[schedulers[-1]]))
        for _ in range(3):  # rank 0 is three committed steps ahead; rank 1 is as a fresh joiner
            schedulers[0].step()
        trainers[0].step = 3
        _each(trainers, lambda t: t.sync_state())
        assert trainers[1].step == 3 and schedulers[1].state_dict() == schedulers[0].state_dict()
        for s in schedulers:
            s.step()
        assert [t.optimizer.param_groups[0]["lr"] for t in trainers] == [0.1 * 0.5**4] * 2
    finally:
        for g in groups:
            g.close()


def test_a_big_last_ddp_bucket_is_reduced_in_place_and_the_vote_goes_alone(coordinator, monkeypatch):
    """Buckets are reduced in DDP's own bucket (no copy), except the one the vote rides with: the previous
    step's smallest or the last one, when it has at most VOTE_COPY_MAX_BYTES.  With no bucket that small
    (step 0's one bucket) the vote goes in an allreduce of its own.  Same mean."""
    from ptc.distributed.ft import transports

    def make():
        return torch.nn.Sequential(torch.nn.Linear(3, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                                   torch.nn.Linear(64, 2))  # fmt: skip

    monkeypatch.setattr(transports, "VOTE_COPY_MAX_BYTES", 1000 * 4)  # not step 0's one bucket, the 256 one
    trainers, wires, batches, order = _train_two(coordinator, make, ddp=True, steps=3,
                                                 ddp_options={"bucket_cap_mb": 0.005})  # fmt: skip
    flags = vote_flags(0, False, 2, torch.float32).numel()
    # step 0: one bucket (in place) and the vote; then 4290 in place and the last, 256, with the vote appended
    assert sorted(n for _, n in wires) == sorted([4546, flags] * 2 + [4290, 256 + flags] * 4), wires
    assert order == {w: ["start", "start", "wait", "wait"] * 3 for w in (0, 1)}, order
    expected = _replay_two(make, batches, steps=3)
    for t in trainers:
        assert t.step == 3 and not t._transport.pending and not t._hook_abandoned
        for p, e in zip(t.module.parameters(), expected.parameters()):
            assert torch.equal(p, e)
        assert [b.flat.numel() for b in t._wire_buffers.values()] == [flags, 256 + flags]  # the vote's and the copied bucket's


def test_the_vote_rides_with_the_previous_steps_smallest_ddp_bucket(coordinator, monkeypatch):
    """DDP keeps its bucket layout from step to step: the vote rides with the smallest bucket of the
    previous step, here the first one (copied early in backward), while the big last bucket is reduced
    in place and no allreduce of the vote's own follows it.  Same mean, and the vote is read: with one
    member a step ahead, neither commits."""
    from ptc.distributed.ft import transports

    def make():
        return torch.nn.Sequential(torch.nn.Linear(3, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))

    monkeypatch.setattr(transports, "VOTE_COPY_MAX_BYTES", 600)  # the 129-element bucket, not the 192 one
    ahead = {}

    def one_member_a_step_ahead(trainers):
        trainers[0].step += 1
        x = torch.randn(6, 3, generator=torch.Generator().manual_seed(99))
        ahead["committed"] = _each(trainers, lambda t: t._attempt(lambda info: t.model(x).sum().backward()))
        trainers[0].step -= 1

    trainers, wires, batches, order = _train_two(coordinator, make, ddp=True, steps=3, then=one_member_a_step_ahead,
                                                 ddp_options={"bucket_cap_mb": 0.00049})  # fmt: skip
    flags = vote_flags(0, False, 2, torch.float32).numel()
    # step 0: one bucket, in place (too big to carry the vote), the vote alone; DDP then rebuilds its
    # buckets: step 1 (sizes still step 0's) sends the vote alone again; step 2 and the attempt carry it
    # with bucket 0, the 192-element last bucket goes in place
    assert sorted(n for _, n in wires) == sorted([321, flags] * 2 + [129, 192, flags] * 2 + [129 + flags, 192] * 4), wires
    assert ahead["committed"] == [False, False] and [t.step for t in trainers] == [3, 3], ahead
    expected = _replay_two(make, batches, steps=3)
    for t in trainers:
        assert t._transport.vote_index == 0 and not t._transport.pending and not t._hook_abandoned
        for p, e in zip(t.module.parameters(), expected.parameters()):
            assert torch.equal(p, e)


def test_a_failed_bucket_carrying_the_vote_commits_nothing_and_backward_completes(monkeypatch):
    """The vote rides with bucket 0 (copied); its allreduce fails: backward still completes (every
    bucket's future is set), the step is not committed, the in-place last bucket's Work is kept as
    abandoned and the next attempt waits for it, then commits the same step."""
    from ptc.distributed.ft import transports

    monkeypatch.setattr(transports, "VOTE_COPY_MAX_BYTES", 600)  # as in the test above: bucket 0 carries it
    c = Coordinator(world_size=1).start()
    (group,) = _groups(c, 1)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(3, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
        reference = copy.deepcopy(model)
        t = Trainer(group, model, torch.optim.SGD(model.parameters(), lr=0.1), ddp=True, ddp_hook="python",
                    ddp_options={"bucket_cap_mb": 0.00049})  # fmt: skip
        batches = [torch.randn(6, 3, generator=torch.Generator().manual_seed(i)) for i in range(3)]

        def compute(info):
            t.model(batches[info.step]).abs().pow(2).mean().backward()

        for _ in range(2):
            t.run_step(compute)
        assert t._transport.vote_index == 0
        awaited, real_await = [], group._await

        def failing_await(what, gen, work):
            awaited.append(work)
            if len(awaited) == 1:  # bucket 0, with the vote
                raise PeerFailure([], gen.number, "injected")
            return real_await(what, gen, work)

        group._await = failing_await
        with pytest.raises(PeerFailure, match="injected"):
            t._attempt(compute)
        assert t.step == 2 and len(awaited) == 1 and not t._transport.pending and len(t._hook_abandoned) == 1
        group._await = real_await
        t.run_step(compute)  # drains the abandoned Work, then the same step again
        assert t.step == 3 and not t._hook_abandoned
        opt = torch.optim.SGD(reference.parameters(), lr=0.1)
        for x in batches:
            opt.zero_grad()
            reference(x).abs().pow(2).mean().backward()
            opt.step()
        for p, e in zip(model.parameters(), reference.parameters()):
            assert torch.equal(p, e)
    finally:
        group.close()
        c.stop()


def test_the_next_attempt_waits_for_abandoned_in_place_allreduces():
    """An abandoned in-place allreduce could still write into DDP's bucket (the gradients): the next
    attempt starts only once it has ended, and one that never ends is an error, not a race."""
    import datetime

    c = Coordinator(world_size=1).start()
    (group,) = _groups(c, 1)
    try:
        model = torch.nn.Linear(2, 1)
        trainer = Trainer(group, model, torch.optim.SGD(model.parameters(), lr=0.1), ddp=True)

        class SlowWork:
            def __init__(self, after):
                self.done_at = time.monotonic() + after

            def is_completed(self):
                return time.monotonic() >= self.done_at

        works = [SlowWork(0.2), SlowWork(0.0)]
        trainer._hook_abandoned = list(works)
        start = time.monotonic()
        trainer._drain_abandoned()
        assert time.monotonic() - start >= 0.2 and not trainer._hook_abandoned
        group._timeout = datetime.timedelta(seconds=0.1)
        trainer._hook_abandoned = [SlowWork(60.0)]
        with pytest.raises(PtcError, match="abandoned gradient allreduce is still running"):
            trainer._drain_abandoned()
        assert len(trainer._hook_abandoned) == 1  # still known: the next attempt waits again
    finally:
        group.close()
        c.stop()


# --- the native DDP hook (ft_native.cpp) --------------------------------------------


@pytest.fixture(scope="module")
def native_hook():
    """ptc's native DDP hook, built once per torch version (then cached); a failed build fails the test."""
    from ptc.distributed.ft import native as ft_native

    return ft_native.load(build=True)


def _two_buckets():
    """With bucket_cap_mb=0.00049: one 321-element bucket in step 0, then DDP's rebuilt 129 and 192."""
    return torch.nn.Sequential(torch.nn.Linear(3, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))


@pytest.mark.parametrize("copy_max, wires", [
    (600, [(-1, 5), (0, 129 + 5)]),  # the vote alone (steps 0, 1), then with bucket 0 (copied)
    (0, [(-1, 5)]),  # every bucket in place, the vote alone
    (4 * 1024 * 1024, [(0, 129 + 5)]),  # step 0's one bucket, then bucket 0, copied with the vote
])  # fmt: skip
def test_the_native_hook_gives_the_python_hooks_bits(native_hook, monkeypatch, copy_max, wires):
    """Same vote placement, same arithmetic: members with the native hook end bit-identical to members
    with the Python hook and to the one-process replay, and the vote went where the rule says."""
    from ptc.distributed.ft import transports

    monkeypatch.setattr(transports, "VOTE_COPY_MAX_BYTES", copy_max)
    trained = {}
    for hook in ("python", "native"):
        c = Coordinator(world_size=2, heartbeat_timeout=30.0).start()
        try:
            trained[hook], _, batches, _ = _train_two(c, _two_buckets, ddp=True, steps=3, ddp_hook=hook,
                                                      ddp_options={"bucket_cap_mb": 0.00049})  # fmt: skip
        finally:
            c.stop()
    assert [t.ddp_hook for t in trained["python"] + trained["native"]] == ["python"] * 2 + ["native"] * 2
    expected = _replay_two(_two_buckets, batches, steps=3)
    for a, b in zip(trained["python"], trained["native"]):
        assert a.step == b.step == 3 and not b._hook_abandoned
        for p, q, e in zip(a.module.parameters(), b.module.parameters(), expected.parameters()):
            assert torch.equal(p, q) and torch.equal(q, e)
        status = b._native.status()
        assert status["wires"] == wires and status["pending"] == 0, status
        assert status["vote_index"] == (None if copy_max == 0 else 0), status


def test_the_native_hook_counts_collectives_for_the_fault_injector(native_hook):
    """``kill inside collective k`` must mean the same collective with either hook: the injector sees
    the same points in the same order (two bucket collectives per step, the vote riding with one)."""
    points = {}
    for hook in ("python", "native"):

        class Counting:
            collectives = 0

            def __init__(self):
                self.seen = []

            def point(self, point, at, worker, rank):
                self.seen.append((point, at, worker))

        c = Coordinator(world_size=2, heartbeat_timeout=30.0).start()
        try:
            def count(trainers):
                points[hook] = [t.group.faults.seen for t in trainers]

            def before_forward(t, info):
                if t.group.faults is None:
                    t.group.faults = Counting()

            _train_two(c, _two_buckets, ddp=True, steps=3, ddp_hook=hook, before_forward=before_forward, then=count,
                       ddp_options={"bucket_cap_mb": 0.00049})  # fmt: skip
        finally:
            c.stop()
    def from_step_1(seen):  # the injector is set during step 0; collectives numbered from there
        seen = seen[seen.index(("step", 1, seen[0][2])):]
        first = next(at for point, at, _ in seen if point == "collective")
        return [(point, at - first if point == "collective" else at) for point, at, _ in seen]

    for python, native in zip(points["python"], points["native"]):
        assert from_step_1(native) == from_step_1(python) and len(from_step_1(native)) == 6, points


def test_news_releases_a_native_bucket_waiting_for_a_dead_peer(native_hook):
    """Member 1 dies while member 0's bucket allreduce waits for it: the coordinator's news ends
    member 0's backward at once (not after the collective timeout), nothing is committed, the
    in-place Work is abandoned, and after recover() member 0 trains on alone."""
    c = Coordinator(world_size=2, heartbeat_timeout=30.0).start()
    groups = _groups(c, 2, timeout=5.0)
    try:
        trainers = []
        for g in groups:
            torch.manual_seed(0)
            model = _two_buckets()
            trainers.append(Trainer(g, model, torch.optim.SGD(model.parameters(), lr=0.1), ddp=True, ddp_hook="native",
                                    ddp_options={"bucket_cap_mb": 0.00049}))  # fmt: skip
        x = torch.randn(6, 3, generator=torch.Generator().manual_seed(5))
        _each(trainers, lambda t: t.run_step(lambda info: t.model(x).sum().backward()))
        zero, outcome = trainers[0], {}

        def member_zero():
            start = time.monotonic()
            try:
                zero._attempt(lambda info: zero.model(x).sum().backward())
            except PeerFailure as exc:
                outcome["failure"] = exc
            outcome["took"] = time.monotonic() - start

        thread = threading.Thread(target=member_zero)
        thread.start()
        deadline = time.monotonic() + 20
        while zero._native.status()["pending"] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert zero._native.status()["pending"] > 0
        # as a crash, for the coordinator: its connection ends (its gloo group stays, so the collective
        # itself would end only at the group's timeout, 5 s)
        groups[1]._link.close(leave=False)
        thread.join(30)
        assert isinstance(outcome.get("failure"), PeerFailure) and outcome["took"] < 3, outcome
        assert zero.step == 1 and zero._hook_abandoned
        zero._recover()
        zero.run_step(lambda info: zero.model(x).sum().backward())  # waits for the abandoned Work first
        assert zero.step == 2 and zero.group.size == 1 and not zero._hook_abandoned
    finally:
        for g in groups:
            g.close()
        c.stop()


def test_news_aborts_native_buckets_at_once_unless_nobody_failed():
    """A failure ends the pending buckets now; a grow (nobody failed) gives them GROW_GRACE_S, for
    this very attempt only; no news for this generation, nothing."""
    from ptc.distributed.ft.group import GROW_GRACE_S, Generation

    class Native:
        def __init__(self):
            self.aborts = []

        def attempt(self):
            return 7

        def abort(self, reason, attempt=0):
            self.aborts.append((reason, attempt, time.monotonic()))

    for stale, nobody_failed, expected in ((True, False, "now"), (True, True, "later"), (False, False, None)):
        trainer = Trainer.__new__(Trainer)
        trainer._native = Native()
        trainer.group = types.SimpleNamespace(generation=Generation(number=3, members=(0, 1)), stale=lambda: stale,
                                              _nobody_failed=lambda gen: nobody_failed)  # fmt: skip
        start = time.monotonic()
        trainer._on_news()
        time.sleep(GROW_GRACE_S + 0.2 if expected == "later" else 0.05)
        aborts = trainer._native.aborts
        if expected is None:
            assert aborts == []
        elif expected == "now":
            assert len(aborts) == 1 and aborts[0][1] == 0 and aborts[0][2] - start < 0.05
        else:
            assert len(aborts) == 1 and aborts[0][1] == 7 and aborts[0][2] - start >= GROW_GRACE_S
        assert all("generation 3 was replaced" in a[0] for a in aborts)


def test_ddp_hook_is_checked_and_auto_never_builds(tmp_path, monkeypatch):
    from ptc.distributed.ft import native as ft_native
    from ptc.distributed.ft import train as ft_train

    monkeypatch.setattr(ft_train, "DDP_HOOK_MIN_BYTES", 0)  # a hook even for these small models
    c = Coordinator(world_size=1).start()
    (group,) = _groups(c, 1)
    try:
        def trainer(dtype=torch.float32, **options):
            model = torch.nn.Linear(2, 1, dtype=dtype)
            return Trainer(group, model, torch.optim.SGD(model.parameters(), lr=0.1), **options)

        with pytest.raises(PtcValueError, match="ddp_hook = 'fast': expected 'auto', 'native' or 'python'"):
            trainer(ddp=True, ddp_hook="fast")
        with pytest.raises(PtcValueError, match="ddp_hook = 'native': given without ddp=True"):
            trainer(ddp_hook="native")
        with pytest.raises(PtcValueError, match=r"ddp_hook = 'native': parameters of dtype \['torch.float16'\]"):
            trainer(torch.float16, ddp=True, ddp_hook="native")
        assert trainer(torch.float16, ddp=True).ddp_hook == "python"  # auto: the Python hook serves any dtype
        assert trainer().ddp_hook is None  # no DDP
        monkeypatch.setenv("PTC_NATIVE_DIR", str(tmp_path / "empty-cache"))
        monkeypatch.setattr(ft_native._EXT, "modules", [])  # as in a fresh process
        assert trainer(ddp=True).ddp_hook == "python" and "not built" in ft_native.status()
    finally:
        group.close()
        c.stop()


def test_ddp_options_and_extra_state_are_checked():
    c = Coordinator(world_size=1).start()
    (group,) = _groups(c, 1)
    try:
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with pytest.raises(PtcTypeError, match=r"extra_state\[1\]: expected an object with state_dict\(\)"):
            Trainer(group, model, opt, extra_state=[torch.optim.lr_scheduler.StepLR(opt, 1), object()])
        with pytest.raises(PtcTypeError, match="extra_state: expected a list"):
            Trainer(group, model, opt, extra_state=torch.optim.lr_scheduler.StepLR(opt, 1))
        with pytest.raises(PtcValueError, match="ddp_options: given without ddp=True"):
            Trainer(group, model, opt, ddp_options={"bucket_cap_mb": 1})
        with pytest.raises(PtcValueError, match="process_group is the Trainer's own"):
            Trainer(group, model, opt, ddp=True, ddp_options={"process_group": None})
    finally:
        group.close()
        c.stop()


class _Mixed(torch.nn.Module):
    """float32 and float64 parameters: the Trainer sends them as one float64 buffer."""

    def __init__(self, dtype=None):
        super().__init__()
        self.a = torch.nn.Linear(3, 2)
        self.b = torch.nn.Linear(3, 2).double()

    def forward(self, x):
        return self.a(x.float()).double() + self.b(x.double())


class _Replacing(torch.nn.Linear):
    """A forward whose backward leaves a gradient that is not the Trainer's view (a hook replaces it)."""

    def __init__(self):
        super().__init__(3, 2)
        self.bias.register_post_accumulate_grad_hook(lambda p: setattr(p, "grad", p.grad.clone()))


@pytest.mark.parametrize("make, wire", [(_Mixed, torch.float64), (_Replacing, torch.float32)])
def test_gradients_that_are_not_one_flat_buffer_are_sent_one_by_one(coordinator, make, wire):
    trainers, wires, batches, _ = _train_two(coordinator, make, steps=3)
    numel = sum(p.numel() for p in make().parameters())
    assert wires and all(w == (wire, numel + vote_flags(0, False, 2, wire).numel()) for w in wires), wires
    expected = _replay_two(make, batches, steps=3)
    for t in trainers:
        assert t.step == 3
        for p, e in zip(t.module.parameters(), expected.parameters()):
            assert torch.equal(p, e), (p, e)
        if make is _Replacing:  # the replaced gradient was sent, and made a view again at each step
            assert t.module.weight.grad is t._transport.views[0] and t.module.bias.grad is not t._transport.views[1]


def test_a_buffer_whose_allreduce_failed_is_never_handed_out_again():
    """An abandoned collective may still write into its buffer: only completed ones are reused."""
    c = Coordinator(world_size=1).start()
    (group,) = _groups(c, 1)
    try:
        model = torch.nn.Linear(2, 1)
        trainer = Trainer(group, model, torch.optim.SGD(model.parameters(), lr=0.1))
        parts, vote = [torch.ones(4), torch.full((2,), 2.0)], [1, 0, 7]
        first = trainer._allreduce_wire("k", parts, torch.float32, vote)
        assert trainer._allreduce_wire("k", parts, torch.float32, vote) is first  # completed: reused
        send = group._allreduce_owned

        def fail(buffer):
            send(buffer)
            raise PeerFailure([0], 1, "simulated")

        group._allreduce_owned = fail
        with pytest.raises(PeerFailure):
            trainer._allreduce_wire("k", parts, torch.float32, vote)
        group._allreduce_owned = send
        again = trainer._allreduce_wire("k", parts, torch.float32, vote)
        assert again is not first and torch.equal(again.flat, torch.tensor([1.0, 1, 1, 1, 2, 2, 1, 0, 7]))
        assert again.read_vote() == [1, 0, 7]
    finally:
        group.close()
        c.stop()


def test_members_trained_in_threads_leave_no_active_ddp_module(coordinator):
    from torch.nn.parallel import DistributedDataParallel

    _train_two(coordinator, lambda: torch.nn.Linear(3, 2), ddp=True)
    assert DistributedDataParallel._get_active_ddp_module() is None


def test_close_destroys_the_members_groups_and_refuses_collectives_after(coordinator):
    """close() lets go of the current generation's groups (the engine's and a subgroup's): with no
    other reference they are destroyed then, their threads joined while the interpreter is whole,
    not left to the process's teardown.  A collective after close() is a clear error."""
    import weakref

    groups = _groups(coordinator, 2)
    _each(groups, lambda g: g.subgroups(lambda n: [[r] for r in range(n)]))
    _each(groups, lambda g: g.allreduce(torch.ones(2)))
    alive = [weakref.ref(g._engine.pg) for g in groups] + [weakref.ref(g._subgroups[0].pg) for g in groups]
    for g in groups:
        g.close()
    import gc

    gc.collect()
    assert [ref() is None for ref in alive] == [True] * 4
    with pytest.raises(PtcValueError, match="allreduce: this member closed its group"):
        groups[0].allreduce(torch.ones(2))
