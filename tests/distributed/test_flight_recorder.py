"""The recorder in one process: what it records, bounds, threads, reconfigure, dumps, switching off."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch
import torch.distributed as dist

from fr_helpers import SimulatedRanks, fake_group, gloo_groups, wait_for
from ptc import _compat
from ptc.distributed import FlightRecorder, capability
from ptc.distributed import flight_recorder as fr
from ptc.distributed.flight_recorder import analysis as fr_analysis
from ptc.distributed.flight_recorder import capture as fr_capture
from ptc.distributed.flight_recorder import native as fr_native
from ptc.distributed.flight_recorder import signals as fr_signals
from ptc.errors import FeatureUnavailable, PtcTypeError, PtcValueError

# Keys of a native entry as torch 2.13 and 2.14 write them (fault_tolerance.md section 4.2).
NATIVE_ENTRY_KEYS = {
    "collective_seq_id", "input_dtypes", "input_sizes", "is_p2p", "op_id", "output_dtypes", "output_sizes",
    "p2p_seq_id", "pg_id", "process_group", "profiling_name", "record_id", "retired", "state", "thread_id",
    "thread_name", "time_created_ns", "time_discovered_completed_ns", "time_discovered_started_ns", "timeout_ms",
}  # fmt: skip
MECHANISMS = ["hooks", "wrapper"] if _compat.PROCESS_GROUP_HOOKS else ["wrapper"]


@pytest.fixture
def fake_world():
    """The default group: 3 ranks on the fake backend, this process is rank 1."""
    import torch.testing._internal.distributed.fake_pg  # noqa: F401 - registers the "fake" backend

    dist.init_process_group("fake", store=dist.HashStore(), rank=1, world_size=3)
    yield dist.group.WORLD
    dist.destroy_process_group()


def _every_kind(world_size: int = 3) -> None:
    t = torch.arange(4, dtype=torch.float32)
    dist.all_reduce(t)
    dist.broadcast(t, src=0)
    dist.reduce(t, dst=2)
    dist.all_gather([torch.zeros(4) for _ in range(world_size)], t)
    dist.all_gather_single(torch.zeros(4 * world_size), t)
    dist.reduce_scatter_single(torch.zeros(2, dtype=torch.float64), torch.ones(2 * world_size, dtype=torch.float64))
    dist.all_to_all_single(torch.zeros(world_size * 2), torch.ones(world_size * 2))
    dist.barrier()
    dist.send(torch.ones(5, dtype=torch.int64), 2)
    dist.recv(torch.zeros(3), 0)


EXPECTED_KINDS = [  # (profiling_name, input_sizes, output_sizes, input dtypes) of _every_kind on rank 1 of 3
    ("gloo:all_reduce", [[4]], [[4]], ["Float"]),
    ("gloo:broadcast", [[4]], [[4]], ["Float"]),
    ("gloo:reduce", [[4]], [[4]], ["Float"]),
    ("gloo:all_gather", [[4]], [[3, 4]], ["Float"]),
    ("gloo:all_gather", [[4]], [[12]], ["Float"]),
    ("gloo:reduce_scatter", [[6]], [[2]], ["Double"]),
    ("gloo:all_to_all", [[6]], [[6]], ["Float"]),
    ("gloo:barrier", [], [], []),
    ("gloo:send 1->2", [[5]], [[5]], ["Long"]),
    ("gloo:recv 1<-0", [[3]], [[3]], ["Float"]),
]


@pytest.mark.parametrize("capture", MECHANISMS)
def test_records_every_kind_of_call_in_the_native_format(fake_world, capture, core, tmp_path):
    from torch.distributed.flight_recorder.components.types import Op

    with fr.recording(dump_dir=tmp_path, capture=capture, core=core) as rec:
        assert (rec.capture, rec.core) == (capture, core)
        _every_kind()
        entries = rec.entries()
    got = [(e["profiling_name"], e["input_sizes"], e["output_sizes"], e["input_dtypes"]) for e in entries]
    assert got == EXPECTED_KINDS
    assert [e["collective_seq_id"] for e in entries] == [1, 2, 3, 4, 5, 6, 7, 8, 8, 8]
    assert [e["p2p_seq_id"] for e in entries] == [0] * 8 + [1, 2]
    assert [e["record_id"] for e in entries] == list(range(10))
    roots = {e["profiling_name"]: e["peer"] for e in entries[:3]}
    assert roots == {"gloo:all_reduce": -1, "gloo:broadcast": 0, "gloo:reduce": 2}
    memberships = {"0": {0, 1, 2}}
    for e in entries:
        assert NATIVE_ENTRY_KEYS <= set(e), NATIVE_ENTRY_KEYS - set(e)
        assert e["process_group"] == ("0", "default_pg")
        assert e["state"] == "completed" and e["retired"]
        assert e["time_created_ns"] <= e["time_discovered_started_ns"] <= e["time_discovered_completed_ns"]
        assert e["is_p2p"] == (" " in e["profiling_name"])
        assert e["thread_name"] == threading.current_thread().name
        assert "frames" not in e  # stacks are off by default
        Op(e, memberships, "0")  # torch's analyzer parses every entry


def test_hooks_and_wrapper_record_alike(fake_world, core, tmp_path):
    """Where torch has PG hooks both mechanisms exist and must agree; elsewhere 'hooks' is refused."""
    if not _compat.PROCESS_GROUP_HOOKS:
        with pytest.raises(FeatureUnavailable, match="register_pre_hook") as info:
            FlightRecorder(capture="hooks")
        assert info.value.requirement == "PROCESS_GROUP_HOOKS"
        assert FlightRecorder(capture="auto", dump_dir=tmp_path).capture == "wrapper"
        fr.disable()
        return
    records = {}
    for capture in ("hooks", "wrapper"):
        with fr.recording(dump_dir=tmp_path, capture=capture, core=core) as rec:
            _every_kind()
            records[capture] = [
                {k: v for k, v in e.items() if not k.startswith("time_") and k != "thread_id"} for e in rec.entries()
            ]
    assert records["hooks"] == records["wrapper"]


def test_both_cores_record_alike(fake_world, tmp_path):
    """The native core's dump is the Python core's, field for field (times and thread ids aside)."""
    fr_native.load(build=True)
    records = {}
    for core in ("python", "native"):
        with fr.recording(dump_dir=tmp_path, core=core) as rec:
            _every_kind()
            snap = rec.snapshot("same")
        records[core] = {
            "entries": [
                {k: v for k, v in e.items() if not k.startswith("time_") and k != "thread_id"} for e in snap["entries"]
            ],
            "pg_status": snap["pg_status"],
            "ptc": {k: v for k, v in snap["ptc"].items() if k not in ("dumped_at_ns", "core")},
        }
        assert snap["ptc"]["core"] == core
    assert records["python"] == records["native"]


def test_hook_kinds_are_named_through_their_enum_value(monkeypatch):
    """The hooks hand over a new enum object per call; the capture names it by its value
    (hashing the object itself is a pybind call), learning the names from its enum."""
    import enum

    class Kind(enum.Enum):  # stands in for torch's HookOpName, which torch 2.13 lacks
        ALLREDUCE = 0
        SEND = 9

    monkeypatch.setattr(fr_capture, "_HOOK_KIND_NAMES", {})
    assert fr_capture._learn_kind_names(Kind.SEND) == "SEND"
    assert fr_capture._HOOK_KIND_NAMES == {0: "ALLREDUCE", 9: "SEND"}
    if _compat.PROCESS_GROUP_HOOKS:
        hook_op_name = type(torch._C._distributed_c10d.HookOpName.BARRIER)
        for name, member in hook_op_name.__members__.items():
            assert fr_capture._learn_kind_names(member) == name


@pytest.fixture
def gloo_solo():
    """The default group: gloo with this process alone."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield dist.group.WORLD
    dist.destroy_process_group()


@pytest.mark.parametrize("capture", MECHANISMS)
def test_ddp_gradient_buckets_are_seen_through_hooks_only(gloo_solo, capture, core, tmp_path):
    """The DDP reducer issues its all_reduce from C++: PG hooks see it, the Python-level wrapper cannot."""
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
    with fr.recording(dump_dir=tmp_path, capture=capture, core=core) as rec:
        model(torch.randn(3, 4)).sum().backward()
        if capture == "hooks":  # the completion hook runs on gloo's thread, possibly just after the reducer's wait
            wait_for(lambda: all(e["state"] == "completed" for e in rec.entries()), 10.0, "the bucket's completion")
        entries = rec.entries()
    if capture == "hooks":
        assert [(e["profiling_name"], e["input_sizes"], e["state"]) for e in entries] == [
            ("gloo:all_reduce", [[10]], "completed")  # one bucket: 4*2 weights + 2 biases
        ]
    else:
        assert entries == []


def test_ring_buffer_keeps_the_newest_calls(fake_world, core, tmp_path):
    with fr.recording(capacity=5, dump_dir=tmp_path, core=core) as rec:
        for _ in range(12):
            dist.all_reduce(torch.ones(2))
        snap = rec.snapshot()
    assert [e["record_id"] for e in snap["entries"]] == [7, 8, 9, 10, 11]
    assert [e["collective_seq_id"] for e in snap["entries"]] == [8, 9, 10, 11, 12]
    assert snap["ptc"]["recorded"] == 12 and snap["ptc"]["dropped"] == 7
    assert snap["pg_status"]["0"] == {
        "last_enqueued_collective": 12,
        "last_started_collective": 12,
        "last_completed_collective": 12,
    }


def test_concurrent_threads_lose_no_call(fake_world, core, tmp_path):
    threads, calls = 6, 120
    barrier = threading.Barrier(threads)

    def issue():
        barrier.wait(timeout=30)
        for _ in range(calls):
            dist.all_reduce(torch.ones(3))

    def run(capacity):
        with fr.recording(capacity=capacity, dump_dir=tmp_path, core=core) as rec:
            workers = [threading.Thread(target=issue, name=f"issuer-{i}") for i in range(threads)]
            for w in workers:
                w.start()
            for w in workers:
                w.join(timeout=60)
            assert not any(w.is_alive() for w in workers)
            return rec.snapshot()

    total = threads * calls
    snap = run(capacity=total)
    entries = snap["entries"]
    assert [e["record_id"] for e in entries] == list(range(total))
    assert sorted(e["collective_seq_id"] for e in entries) == list(range(1, total + 1))
    assert sorted(e["op_id"] for e in entries) == list(range(1, total + 1))
    per_thread = {}
    for e in entries:
        per_thread[e["thread_name"]] = per_thread.get(e["thread_name"], 0) + 1
    assert per_thread == {f"issuer-{i}": calls for i in range(threads)}
    assert all(e["state"] == "completed" for e in entries)

    snap = run(capacity=50)  # the bound holds under contention too
    ids = [e["record_id"] for e in snap["entries"]]
    assert len(ids) == 50 and len(set(ids)) == 50 and ids == sorted(ids)
    assert snap["ptc"]["recorded"] == total and snap["ptc"]["dropped"] == total - 50
    assert min(ids) >= total - 50 - threads  # the newest calls, give or take in-flight appends


def test_closing_restores_torch_and_stops_recording(fake_world, core, tmp_path):
    pg_cls, work_cls = dist.ProcessGroup, dist.Work
    allreduce, wait = pg_cls.__dict__["allreduce"], work_cls.__dict__["wait"]
    first = FlightRecorder(dump_dir=tmp_path, capture="wrapper", core=core).attach()
    second = FlightRecorder(dump_dir=tmp_path, core=core).attach()
    assert pg_cls.__dict__["allreduce"] is not allreduce
    # the Python core takes end times from Work.wait; the native core from each Work's future
    assert (work_cls.__dict__["wait"] is not wait) is (core == "python")
    dist.all_reduce(torch.ones(1))
    first.close()
    dist.all_reduce(torch.ones(1))  # the second recorder still records
    assert len(first.entries()) == 1 and len(second.entries()) == 2
    second.close()
    assert pg_cls.__dict__["allreduce"] is allreduce and work_cls.__dict__["wait"] is wait
    dist.all_reduce(torch.ones(1))
    assert len(second.entries()) == 2
    first.close()  # closing twice is harmless
    with pytest.raises(PtcValueError, match="closed"):
        first.attach()


def test_importing_ptc_changes_nothing_in_torch():
    code = (
        "import torch.distributed as dist\n"
        "before = (dist.ProcessGroup.__dict__['allreduce'], dist.ProcessGroup.__dict__['barrier'], dist.Work.__dict__['wait'])\n"
        "import ptc, ptc.distributed\n"
        "from ptc.distributed.flight_recorder import analysis, capture, recorder\n"
        "from ptc.distributed import flight_recorder, fr_capture, fr_analysis\n"
        "after = (dist.ProcessGroup.__dict__['allreduce'], dist.ProcessGroup.__dict__['barrier'], dist.Work.__dict__['wait'])\n"
        "assert all(a is b for a, b in zip(before, after)), 'import changed torch'\n"
        "assert not flight_recorder.active_recorders()\n"
        "print('unchanged')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "unchanged" in proc.stdout, proc.stderr


def test_reconfigure_starts_a_new_named_generation(fake_world, core, tmp_path):
    with fr.recording(dump_dir=tmp_path, core=core) as rec:
        dist.all_reduce(torch.ones(2))
        dist.all_reduce(torch.ones(2))
        assert fr.on_reconfigure(1, ranks=[0, 1, 2]) == 1
        dist.all_reduce(torch.ones(2))
        replacement = fake_group(0, 2)  # a rebuilt group: rank 1 of before is rank 0 of now
        rec.on_reconfigure(2, new_group=replacement, ranks=[1, 2])
        dist.all_reduce(torch.ones(2))  # the old group is no longer recorded
        replacement.allreduce([torch.ones(2)]).wait()
        snap = rec.snapshot()
    names = [(e["process_group"][0], e["collective_seq_id"], e["generation"]) for e in snap["entries"]]
    assert names == [("0", 1, 0), ("0", 2, 0), ("0@gen1", 1, 1), ("0@gen2", 1, 2)]
    assert snap["pg_config"] == {
        "0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"},
        "0@gen1": {"name": "0@gen1", "desc": "default_pg", "ranks": "[0, 1, 2]"},
        "0@gen2": {"name": "0@gen2", "desc": "default_pg", "ranks": "[1, 2]"},
    }
    assert snap["entries"][-1]["profiling_name"] == "gloo:all_reduce"


def test_reconfigure_checks_its_arguments(fake_world, tmp_path):
    with fr.recording(dump_dir=tmp_path) as rec:
        rec.on_reconfigure(3, ranks=[0, 1, 2])
        with pytest.raises(PtcValueError, match="generation = 3: must be greater than the group's current generation 3"):
            rec.on_reconfigure(3, ranks=[0, 1, 2])
        with pytest.raises(PtcValueError, match=r"should be this recorder's rank 1, is 2"):
            rec.on_reconfigure(4, ranks=[0, 2, 1])
        with pytest.raises(PtcValueError, match="the group has 2 members, got 3 ranks"):
            rec.on_reconfigure(4, new_group=fake_group(1, 2), ranks=[0, 1, 2])
        with pytest.raises(PtcValueError, match="ranks: the group now has 2 members"):
            rec.on_reconfigure(4, new_group=fake_group(1, 2))
        with pytest.raises(PtcValueError, match="not attached"):
            rec.on_reconfigure(5, group=fake_group(0, 2))
        with pytest.raises(PtcTypeError, match=r"ranks\[1\]: expected an int rank, got str"):
            rec.on_reconfigure(4, ranks=[0, "1", 2])


def test_bad_arguments_are_named(fake_world, tmp_path):
    cases = [
        (lambda: FlightRecorder(0), PtcValueError, "capacity = 0: must be at least 1"),
        (lambda: FlightRecorder(2.5), PtcTypeError, "capacity: expected an int, got float"),
        (lambda: FlightRecorder(prefix="rank1"), PtcValueError, "prefix = 'rank1'"),
        (lambda: FlightRecorder(timeout=-1), PtcValueError, "timeout = -1: must be positive"),
        (lambda: FlightRecorder(timeout="5s"), PtcTypeError, "timeout: expected seconds or a datetime.timedelta, got str"),
        (lambda: FlightRecorder(store="tcp://x"), PtcTypeError, "store: expected a torch.distributed.Store"),
        (lambda: FlightRecorder(capture="nccl"), PtcValueError, "capture='nccl': expected 'auto', 'hooks' or 'wrapper'"),
        (lambda: FlightRecorder(core="cpp"), PtcValueError, "core='cpp': expected 'auto', 'native' or 'python'"),
        (lambda: FlightRecorder(core="native", record_stacks=True), PtcValueError, "record_stacks=True needs core='python'"),
        (lambda: FlightRecorder(dump_signal=-3), PtcValueError, "dump_signal = -3: not a signal number"),
        (lambda: fr.enable(group="world", dump_dir=tmp_path), PtcTypeError, "group: expected a torch.distributed.ProcessGroup or None, got str"),
        (lambda: fr.enable(group=fake_group(0, 2), dump_dir=tmp_path), PtcValueError, "name: this process group has no c10d group_name"),
        (lambda: FlightRecorder(dump_dir=tmp_path, rank=0).attach(fake_group(0, 2), name="g"), PtcValueError, "ranks: c10d does not know this group's members"),
        (lambda: fr.dump_all(reason=7), PtcTypeError, "reason: expected a str, got int"),
    ]  # fmt: skip
    for make, error, message in cases:
        with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
            make()
        fr.disable()
    with fr.recording(dump_dir=tmp_path) as rec:
        with pytest.raises(PtcValueError, match="is already attached"):
            rec.attach()


def test_needs_an_initialized_default_group_or_a_group(tmp_path):
    assert not dist.is_initialized()
    with pytest.raises(PtcValueError, match="group=None means the default process group, but torch.distributed is not initialized"):
        fr.enable(dump_dir=tmp_path)
    assert not fr.active_recorders()


def test_dump_is_one_plain_file_per_rank_replaced_atomically(fake_world, core, tmp_path, monkeypatch):
    monkeypatch.setenv("PTC_FR_DUMP_DIR", str(tmp_path / "from_env"))
    with fr.recording(core=core) as rec:
        dist.all_reduce(torch.ones(2))
        first = rec.dump("first")
        dist.all_reduce(torch.ones(2))
        second = rec.dump("second")
    assert first == second == str(tmp_path / "from_env" / "rank_1")
    assert os.listdir(tmp_path / "from_env") == ["rank_1"]  # no temporary file left behind
    dumps = fr_analysis.load_dumps(tmp_path / "from_env")  # plain data only: the safe loader takes it
    assert list(dumps) == [1]
    assert dumps[1].reason == "second" and len(dumps[1].entries) == 2
    with open(first, "rb") as f:
        raw = pickle.load(f)
    assert raw["version"] == "2.10" and set(raw) >= {"entries", "pg_config", "pg_status", "version", "comm_lib_version"}


def test_stacks_are_recorded_only_when_asked(fake_world, tmp_path):
    def issue_from_here():
        dist.all_reduce(torch.ones(1))

    with fr.recording(dump_dir=tmp_path, record_stacks=True, stack_depth=4) as rec:
        assert rec.core == "python"  # "auto": stacks are Python's to walk
        issue_from_here()
        (entry,) = rec.entries()
    names = [frame["name"] for frame in entry["frames"]]
    assert len(names) <= 4 and "issue_from_here" in names
    assert all(not f["filename"].startswith(os.path.dirname(os.path.dirname(fr.__file__))) for f in entry["frames"])


def test_completion_time_is_when_the_work_ends(core, tmp_path):
    """The Python core: a waited Work completes when wait() returns, one nobody waits on when next
    seen done.  The native core: every Work when it ends (its future's callback), waited or not."""
    (pg,) = gloo_groups(1)
    pause_ns = 300_000_000
    with FlightRecorder(dump_dir=tmp_path, rank=0, core=core) as rec:
        rec.attach(pg, name="solo", ranks=[0])
        pg.allreduce([torch.ones(4)]).wait()
        time.sleep(pause_ns / 1e9)
        unwaited = pg.allreduce([torch.ones(4)])
        wait_for(unwaited.is_completed, 10, "the un-waited all_reduce")
        time.sleep(pause_ns / 1e9)
        pg.allreduce([torch.ones(4)]).wait()  # the next recorded call notices the un-waited one
        waited, seen_later, last = rec.entries()
    assert waited["state"] == seen_later["state"] == last["state"] == "completed"
    assert waited["time_discovered_completed_ns"] - waited["time_discovered_started_ns"] < pause_ns / 2
    unwaited_ns = seen_later["time_discovered_completed_ns"] - seen_later["time_discovered_started_ns"]
    if core == "python":
        assert unwaited_ns >= pause_ns
    else:
        assert unwaited_ns < pause_ns / 2
    assert seen_later["time_discovered_completed_ns"] <= last["time_created_ns"]


def test_a_wait_that_runs_out_while_the_collective_goes_on_is_no_failure(core, tmp_path):
    """wait(timeout) raises "timed out" and the Work goes on (ptc's fault-tolerant group waits
    like this first): no failure, no dump; the entry completes when the collective does."""
    import datetime

    groups = gloo_groups(2)
    with FlightRecorder(dump_dir=tmp_path, rank=0, core=core) as rec:
        rec.attach(groups[0], name="pair", ranks=[0, 1])
        work = groups[0].allreduce([torch.ones(4)])  # rank 1 is not there yet
        with pytest.raises(RuntimeError, match="timed out"):
            work.wait(datetime.timedelta(milliseconds=20))
        assert not work.is_completed()
        assert [e["state"] for e in rec.entries()] == ["started"] and not rec.dumps
        groups[1].allreduce([torch.ones(4)]).wait()
        work.wait()
        wait_for(lambda: rec.entries()[0]["state"] == "completed", 10, "the entry's completion")
        (entry,) = rec.entries()
    assert entry["state"] == "completed" and not rec.dumps


@pytest.mark.parametrize("capture", MECHANISMS)
def test_fast_paths_record_what_the_general_paths_do(gloo_solo, capture, core, tmp_path):
    """allreduce([t]) skips the generic tensor flattening, and a wait() that returns
    closes its entry without the general completion path: the record is the same."""
    pg = gloo_solo
    a, b = torch.ones(4), torch.ones(2, 3, dtype=torch.float64)
    with fr.recording(dump_dir=tmp_path, capture=capture, core=core) as rec:
        pg.allreduce([a]).wait()  # fast extraction, fast completion
        pg.allreduce([a, torch.zeros(4)]).wait()  # generic extraction
        work = pg.allreduce([b])
        wait_for(work.is_completed, 10, "the un-waited all_reduce")
        dist.all_reduce(a)  # closes the previous entry at this call, before its own
        work.wait()  # already closed: waiting again changes nothing
        dist.all_reduce(b)
        snap = rec.snapshot()
    entries = snap["entries"]
    assert [(e["input_sizes"], e["input_dtypes"], e["state"], e["collective_seq_id"]) for e in entries] == [
        ([[4]], ["Float"], "completed", 1),
        ([[4], [4]], ["Float", "Float"], "completed", 2),
        ([[2, 3]], ["Double"], "completed", 3),
        ([[4]], ["Float"], "completed", 4),
        ([[2, 3]], ["Double"], "completed", 5),
    ]
    assert all(e["time_created_ns"] <= e["time_discovered_started_ns"] <= e["time_discovered_completed_ns"] for e in entries)
    assert snap["pg_status"]["0"] == {"last_enqueued_collective": 5, "last_started_collective": 5, "last_completed_collective": 5}
    assert not fr_capture.watched_works()


def _dumps_settle(rec, count: int) -> None:
    """Wait until ``rec`` wrote ``count`` dumps, and check it stays there a moment (the native
    core's failure dumps come from the watchdog thread, woken by the backend's callback)."""
    wait_for(lambda: len(rec.dumps) >= count, 10, f"{count} dump(s)")
    time.sleep(0.2)
    assert len(rec.dumps) == count, rec.dumps


def test_failures_dump_once_per_generation(core, tmp_path):
    ranks = SimulatedRanks(2, tmp_path / "dumps", core=core, poll_interval=0.05)
    rec = ranks.recorders[0]
    try:
        pg = ranks.groups[0]
        calls = rec._calls[id(pg)]  # what capture calls when a collective raises
        first = calls.begin("ALLREDUCE", [torch.ones(2)], [], -1)
        second = calls.begin("ALLREDUCE", [torch.ones(2)], [], -1)
        calls.done(first, RuntimeError("Connection reset by peer"))
        calls.done(second, RuntimeError("second failure"))
        _dumps_settle(rec, 1)
        dump = fr_analysis.load_dumps(tmp_path / "dumps")[0]
        assert dump.reason.startswith("failure: all_reduce (seq 1) in group 'world' on rank 0 failed: RuntimeError: Connection reset")
        states = [(e["collective_seq_id"], e["state"], e["error"]) for e in dump.entries]
        assert states[0] == (1, "failed", "RuntimeError: Connection reset by peer")
        rec.on_reconfigure(1, group=pg)  # a new generation re-arms the automatic dump
        third = calls.begin("ALLREDUCE", [torch.ones(2)], [], -1)
        calls.done(third, RuntimeError("third"))
        _dumps_settle(rec, 2)
    finally:
        ranks.close()


def test_watchdog_dumps_an_overdue_call_then_its_failure(core, tmp_path):
    ranks = SimulatedRanks(1, tmp_path, timeout=0.2, poll_interval=0.05, core=core)
    rec = ranks.recorders[0]
    try:
        calls = rec._calls[id(ranks.groups[0])]
        stuck = calls.begin("BROADCAST", [torch.ones(3)], [], 0)  # never returns from the backend
        wait_for(lambda: rec.dumps, 10, "the timeout dump")
        dump = fr_analysis.load_dumps(tmp_path)[0]
        assert dump.reason.startswith("timeout: broadcast (seq 1) in group 'world' on rank 0 unfinished after ")
        assert dump.reason.endswith("(timeout 200 ms, state scheduled)")
        assert dump.entries[0]["timed_out"] is True and dump.entries[0]["state"] == "scheduled"
        calls.done(stuck, RuntimeError("Timed out waiting 200ms"))  # the backend gives up too: say more
        wait_for(lambda: len(rec.dumps) == 2, 10, "the failure dump")
        assert fr_analysis.load_dumps(tmp_path)[0].entries[0]["state"] == "failed"
        later = calls.begin("ALLREDUCE", [torch.ones(3)], [], -1)
        calls.done(later, RuntimeError("again"))
        time.sleep(0.3)
        assert len(rec.dumps) == 2  # one failure dump and one timeout dump per generation

        rec.on_reconfigure(1, group=ranks.groups[0])
        calls.done(calls.begin("ALLREDUCE", [torch.ones(3)], [], -1), RuntimeError("first, a failure"))
        calls.begin("BARRIER", [], [], -1)  # then an overdue call: nothing new to say
        time.sleep(0.5)
        assert len(rec.dumps) == 3
        assert fr_analysis.load_dumps(tmp_path)[0].reason.startswith("failure: all_reduce (seq 1) in group 'world@gen1'")
    finally:
        ranks.close()


class _FailsWhenLookedAtLate:
    """A Work that is still running when the watchdog finds its call overdue, and has failed
    by the time the timeout dump's snapshot looks again (the race of a backend timing out
    together with the watchdog)."""

    def __init__(self) -> None:
        self.entry = None

    def is_completed(self) -> bool:
        return bool(self.entry.timed_out)

    def get_future(self):
        future = torch.futures.Future()
        if self.entry.timed_out:
            future.set_exception(RuntimeError("Timed out waiting 200ms for recv operation to complete"))
        return future


def test_a_failure_found_while_dumping_a_timeout_is_not_overwritten(tmp_path):
    ranks = SimulatedRanks(2, tmp_path, store=dist.HashStore(), timeout=0.2, poll_interval=0.05, core="python")
    rec, peer = ranks.recorders
    try:
        calls = rec._calls[id(ranks.groups[0])]
        work = _FailsWhenLookedAtLate()  # a stand-in Work
        work.entry = calls.begin("ALLREDUCE", [torch.ones(3)], [], -1)
        calls.started(work.entry, work)
        wait_for(lambda: rec.dumps and peer.dumps, 10, "a dump and the peer's")
        time.sleep(0.2)
        failure = "failure: all_reduce (seq 1) in group 'world' on rank 0 failed: RuntimeError: Timed out"
        assert fr_analysis.load_dumps(tmp_path)[0].reason.startswith(failure)
        assert len(rec.dumps) == 1
        peer.request_peer_dumps("operator asked")  # the failure, not the superseded timeout, stays first
        wait_for(lambda: len(rec.dumps) == 2, 10, "the requested dump")
        first, then = fr_analysis.load_dumps(tmp_path)[0].reason.split("; then ")
        assert first.startswith(failure) and then == "requested by rank 1: operator asked"
    finally:
        ranks.close()


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals need the main thread")
def test_signal_dumps_from_the_recorder_thread_and_close_restores(core, tmp_path):
    before = signal.getsignal(signal.SIGUSR1)
    ranks = SimulatedRanks(1, tmp_path, dump_signal=signal.SIGUSR1, poll_interval=0.05, core=core)
    try:
        ranks.all_reduce([0])
        with pytest.raises(PtcValueError, match="another FlightRecorder already dumps on SIGUSR1"):
            FlightRecorder(dump_signal=signal.SIGUSR1)
        os.kill(os.getpid(), signal.SIGUSR1)
        wait_for(lambda: (tmp_path / "rank_0").exists(), 10, "the signal dump")
        assert fr_analysis.load_dumps(tmp_path)[0].reason == "signal SIGUSR1"
    finally:
        ranks.close()
    assert signal.getsignal(signal.SIGUSR1) == before
    assert signal.set_wakeup_fd(-1) == -1  # the wake-up fd was given back

    errors = []

    def from_thread():
        try:
            FlightRecorder(dump_signal=signal.SIGUSR2)
        except PtcValueError as e:
            errors.append(str(e))

    t = threading.Thread(target=from_thread)
    t.start()
    t.join(timeout=30)
    assert errors and "only be installed from the main thread" in errors[0]


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals need the main thread")
def test_a_signal_without_handlers_is_refused_and_leaves_the_signal_free():
    """SIGKILL takes no handler: a raw OSError, and the recorder stayed the process's signal
    owner, so every later recorder with a dump signal was refused."""
    with pytest.raises(PtcValueError, match="dump_signal = SIGKILL: no handler can be installed"):
        FlightRecorder(dump_signal=signal.SIGKILL)
    before = signal.getsignal(signal.SIGUSR1)
    recorder = FlightRecorder(dump_signal=signal.SIGUSR1)
    recorder.close()
    assert signal.getsignal(signal.SIGUSR1) == before


def test_store_carries_dump_requests_to_peers(core, tmp_path):
    store = dist.HashStore()
    ranks = SimulatedRanks(3, tmp_path, store=store, poll_interval=0.05, core=core)
    try:
        ranks.all_reduce([0, 1, 2])
        ranks.recorders[0].request_peer_dumps("operator asked")
        wait_for(lambda: all((tmp_path / f"rank_{r}").exists() for r in (1, 2)), 10, "peer dumps")
        time.sleep(0.3)  # the asking recorder must not dump because of its own request
        assert not (tmp_path / "rank_0").exists()
        dumps = fr_analysis.load_dumps(tmp_path)
        assert {r: d.reason for r, d in dumps.items()} == {
            1: "requested by rank 0: operator asked",
            2: "requested by rank 0: operator asked",
        }
    finally:
        ranks.close()


def test_peer_requests_are_each_served_in_order_and_never_to_their_publisher():
    store = dist.HashStore()
    store.add(fr_signals._STORE_COUNT_KEY, 3)  # requests from before these recorders are not for them
    a, b, c = (fr_signals._PeerRequests(store) for _ in range(3))
    a.publish("rank 0: A")
    b.publish("rank 1: B")
    a.publish("rank 0: C")  # three requests between two looks: none is lost or read twice
    assert list(c.take()) == ["rank 0: A", "rank 1: B", "rank 0: C"]
    assert list(a.take()) == ["rank 1: B"]
    assert list(b.take()) == ["rank 0: A", "rank 0: C"]
    assert list(a.take()) == list(b.take()) == list(c.take()) == []


def test_a_peer_request_whose_reason_is_late_is_served_at_the_next_look():
    store = dist.HashStore()
    reader = fr_signals._PeerRequests(store)
    number = store.add(fr_signals._STORE_COUNT_KEY, 1)  # a publisher between its two steps
    publisher_after = fr_signals._PeerRequests(store)
    publisher_after.publish("rank 2: after")
    assert list(reader.take()) == []  # it waits for the reason rather than skip the request
    store.set(f"{fr_signals._STORE_REQUEST_KEY}{number}", "rank 1: late")
    assert list(reader.take()) == ["rank 1: late", "rank 2: after"]
    store.add(fr_signals._STORE_COUNT_KEY, 1)  # a publisher that died between its two steps
    assert list(reader.take()) == []
    assert list(reader.take()) == [fr_signals._PeerRequests.UNKNOWN]  # still a request: served without its reason
    assert list(reader.take()) == []


def test_a_requested_dump_keeps_the_ranks_own_timeout_reason(core, tmp_path):
    """Rank 0 times out and asks rank 1; then rank 1 times out and asks rank 0: rank 0's
    last file is rank 1's request, and still says why rank 0 dumped on its own."""
    ranks = SimulatedRanks(2, tmp_path, store=dist.HashStore(), timeout=0.2, poll_interval=0.05, core=core)
    rec0, rec1 = ranks.recorders
    try:
        rec0._calls[id(ranks.groups[0])].begin("BROADCAST", [torch.ones(3)], [], 0)  # never returns
        wait_for(lambda: rec0.dumps and rec1.dumps, 10, "rank 0's timeout dump and rank 1's requested dump")
        own0 = "timeout: broadcast (seq 1) in group 'world' on rank 0 unfinished after "
        reasons = {r: d.reason for r, d in fr_analysis.load_dumps(tmp_path).items()}
        assert reasons[0].startswith(own0) and reasons[1].startswith("requested by rank 0: " + own0), reasons
        rec1._calls[id(ranks.groups[1])].begin("BROADCAST", [torch.ones(3)], [], 0)
        wait_for(lambda: len(rec0.dumps) == 2 and len(rec1.dumps) == 2, 10, "rank 1's timeout dump, rank 0's requested")
        time.sleep(0.3)  # nothing more: a requested dump does not ask again
        assert (len(rec0.dumps), len(rec1.dumps)) == (2, 2)
        reasons = {r: d.reason for r, d in fr_analysis.load_dumps(tmp_path).items()}
        own1 = "timeout: broadcast (seq 1) in group 'world' on rank 1 unfinished after "
        assert reasons[1].startswith(own1) and "requested" not in reasons[1], reasons
        first, then = reasons[0].split("; then ")
        assert first.startswith(own0) and then.startswith("requested by rank 1: " + own1), reasons
    finally:
        ranks.close()


def test_dump_all_dumps_every_recorder_of_the_process(core, tmp_path):
    ranks = SimulatedRanks(2, tmp_path, core=core)
    try:
        ranks.all_reduce([0, 1])
        paths = fr.dump_all("peer failure: ranks [3] in generation 2")
        assert sorted(paths) == [str(tmp_path / "rank_0"), str(tmp_path / "rank_1")]
        assert {d.reason for d in fr_analysis.load_dumps(tmp_path).values()} == {"peer failure: ranks [3] in generation 2"}
    finally:
        ranks.close()
    assert fr.dump_all("nothing open") == []


def test_capability_reports_the_mechanism():
    status = capability("flight_recorder")
    assert ("PG hooks" in status) is _compat.PROCESS_GROUP_HOOKS
    assert ("method wrapper" in status) is (not _compat.PROCESS_GROUP_HOOKS)
    ft = capability("fault_tolerance")
    assert ("native gloo reconfigure" in ft) is _compat.GLOO_RECONFIGURE
    assert ("rebuild per generation" in ft) is (not _compat.GLOO_RECONFIGURE)
