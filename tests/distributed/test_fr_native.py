"""The native Flight Recorder core: what it does that the Python core cannot, and its edge cases.

Everything both cores do alike is tested once per core in test_flight_recorder.py
(the ``core`` fixture); this file holds what only the native core has: no
Python per call, end times from the Work's own future, failures dumped from
the backend's callback, polled Works without a future, and its lifetime.
"""

from __future__ import annotations

import os
import select
import sys
import threading
import time

import pytest
import torch

import ptc
from fr_helpers import gloo_groups, wait_for
from ptc import _compat
from ptc.distributed import FlightRecorder
from ptc.distributed import flight_recorder as fr
from ptc.distributed.flight_recorder import analysis as fr_analysis
from ptc.distributed.flight_recorder import native as fr_native

PTC_DIR = os.path.dirname(os.path.abspath(ptc.__file__))
MECHANISMS = ["hooks", "wrapper"] if _compat.PROCESS_GROUP_HOOKS else ["wrapper"]


@pytest.fixture(autouse=True)
def native():
    return fr_native.load(build=True)


def _ptc_python_calls(run) -> set:
    """The names of ptc's Python functions that ``run()`` calls (C functions are not counted)."""
    called = set()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(PTC_DIR):
            called.add(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return called


@pytest.mark.parametrize("capture", MECHANISMS)
def test_a_recorded_call_runs_no_recorder_python(capture, tmp_path):
    """With torch's C++ hooks a recorded collective runs no Python of ptc at all; through the
    method wrapper (torch without hooks) only the wrapper and its argument extraction do."""
    (pg,) = gloo_groups(1)
    t = torch.ones(4)
    with FlightRecorder(dump_dir=tmp_path, rank=0, capture=capture, core="native") as rec:
        rec.attach(pg, name="solo", ranks=[0])
        pg.allreduce([t]).wait()  # a first call: the thread is new, the core asks Python its name
        called = _ptc_python_calls(lambda: [pg.allreduce([t]).wait() for _ in range(20)])
        assert len(rec.entries()) == 21
    assert called == (set() if capture == "hooks" else {"recorded", "_inputs"})
    # the Python core, for comparison: its recording functions run on every call
    with FlightRecorder(dump_dir=tmp_path, rank=0, capture=capture, core="python") as rec:
        rec.attach(pg, name="solo", ranks=[0])
        assert {"begin", "started"} <= _ptc_python_calls(lambda: pg.allreduce([t]).wait())


@pytest.mark.parametrize("core", ["python", "native"])
def test_a_backend_failure_nobody_waits_for_is_dumped(core, tmp_path):
    """Rank 1 never arrives; gloo fails rank 0's all_reduce after its timeout.  Nobody calls
    wait(): the native core hears it from the future's callback at once, the Python core
    finds it at the watchdog's next look.  Either way the entry fails and a dump says why."""
    groups = gloo_groups(2, timeout_s=1.0)
    with FlightRecorder(dump_dir=tmp_path, rank=0, core=core, poll_interval=0.1, timeout=60) as rec:
        rec.attach(groups[0], name="pair", ranks=[0, 1])
        work = groups[0].allreduce([torch.ones(4)])
        wait_for(lambda: rec.dumps, 20, "the failure dump")
        assert work.is_completed()
        (entry,) = rec.entries()
    dump = fr_analysis.load_dumps(tmp_path)[0]
    assert dump.reason.startswith("failure: all_reduce (seq 1) in group 'pair' on rank 0 failed: "), dump.reason
    assert entry["state"] == "failed" and "imed out" in entry["error"], entry["error"]
    assert entry["time_discovered_completed_ns"] - entry["time_discovered_started_ns"] >= 0.9e9


def test_a_work_without_a_future_ends_when_its_wait_returns(tmp_path):
    """gloo's send/recv Works have no future to call back: the core's poller thread watches
    them (only while one is held) and closes them within a few ms of their wait() returning."""
    groups = gloo_groups(2)
    with FlightRecorder(dump_dir=tmp_path, rank=0, core="native", poll_interval=60) as rec:
        rec.attach(groups[0], name="pair", ranks=[0, 1])
        send = groups[0].send([torch.ones(3)], 1, 0)
        time.sleep(0.2)
        groups[1].recv([torch.zeros(3)], 0, 0).wait()
        send.wait()
        returned_ns = time.time_ns()
        time.sleep(0.3)  # a dump taken now must find the send closed already, not close it itself
        (entry,) = rec.entries()
    assert entry["profiling_name"] == "gloo:send 0->1" and entry["input_sizes"] == [[3]]
    assert entry["state"] == "completed"
    assert entry["time_discovered_started_ns"] < returned_ns - 150e6  # it was issued before the pause
    assert abs(entry["time_discovered_completed_ns"] - returned_ns) < 100e6, "found late (by the snapshot?)"


def test_each_call_keeps_its_own_threads_name(tmp_path):
    """Thread ids are reused once a thread ends (glibc hands the next thread the same one);
    the native core keeps the name with each call, so the first thread's calls keep its name."""
    (pg,) = gloo_groups(1)
    idents = []

    def issue():
        idents.append(threading.get_ident())
        pg.allreduce([torch.ones(2)]).wait()

    with FlightRecorder(dump_dir=tmp_path, rank=0, core="native") as rec:
        rec.attach(pg, name="solo", ranks=[0])
        for name in ("first", "second", "third"):
            t = threading.Thread(target=issue, name=name)
            t.start()
            t.join(30)
        entries = rec.entries()
    assert [e["thread_name"] for e in entries] == ["first", "second", "third"]
    assert [e["thread_id"] for e in entries] == [str(i) for i in idents]


def test_a_failure_after_close_writes_to_no_reused_descriptor(tmp_path):
    """A collective that fails after its recorder closed still runs the core's callback; it must
    not write its wake-up byte to the closed pipe's descriptor, which a new file may reuse."""
    groups = gloo_groups(2, timeout_s=1.0)
    rec = FlightRecorder(dump_dir=tmp_path, rank=0, core="native").attach(groups[0], name="pair", ranks=[0, 1])
    work = groups[0].allreduce([torch.ones(4)])  # rank 1 never arrives: fails after 1 s
    rec.close()
    reused_r, reused_w = os.pipe()  # takes the lowest free descriptors: those the recorder closed
    try:
        with pytest.raises(RuntimeError, match="imed out"):
            work.wait()
        readable, _, _ = select.select([reused_r], [], [], 0.2)
        assert not readable, "the callback wrote to a descriptor the recorder had closed"
    finally:
        os.close(reused_r), os.close(reused_w)
    (entry,) = rec.entries()  # the record itself is complete
    assert entry["state"] == "failed" and not rec.dumps


def test_reused_ring_slots_hold_each_new_call_exactly(tmp_path):
    """Slots are overwritten in place (their vectors reused): shapes of other ranks and counts,
    in and out of place, must not leak from the call a slot held before."""
    import torch.testing._internal.distributed.fake_pg  # noqa: F401 - registers the "fake" backend

    torch.distributed.init_process_group("fake", store=torch.distributed.HashStore(), rank=0, world_size=2)
    try:
        with fr.recording(capacity=3, dump_dir=tmp_path, core="native") as rec:
            torch.distributed.all_gather([torch.zeros(2, 3, 4) for _ in range(2)], torch.ones(2, 3, 4))
            torch.distributed.all_to_all_single(torch.zeros(6), torch.ones(6))
            torch.distributed.all_reduce(torch.ones(5, dtype=torch.int64))
            torch.distributed.barrier()
            torch.distributed.all_reduce(torch.ones(7, 2, dtype=torch.float64))
            got = [(e["profiling_name"], e["input_sizes"], e["input_dtypes"], e["output_sizes"]) for e in rec.entries()]
    finally:
        torch.distributed.destroy_process_group()
    assert got == [
        ("gloo:all_reduce", [[5]], ["Long"], [[5]]),
        ("gloo:barrier", [], [], []),
        ("gloo:all_reduce", [[7, 2]], ["Double"], [[7, 2]]),
    ]


def test_auto_uses_the_native_core_only_once_built(tmp_path, monkeypatch):
    """core="auto" never starts a build: with no cached build it records in Python."""
    import torch.testing._internal.distributed.fake_pg  # noqa: F401

    monkeypatch.setenv(fr_native.DIR_ENV, str(tmp_path / "empty-cache"))
    monkeypatch.setattr(fr_native._EXT, "modules", [])  # as in a fresh process
    with FlightRecorder(dump_dir=tmp_path) as rec:
        assert rec.core == "python"
    assert "not built" in fr_native.status()
    monkeypatch.undo()
    with FlightRecorder(dump_dir=tmp_path) as rec:
        assert rec.core == "native"
    assert fr_native.status().startswith("loaded")


def test_the_module_name_carries_torch_and_source(monkeypatch):
    """One build per torch version and source: neither may be loaded for the other."""
    name = fr_native.module_name()
    assert name.startswith("ptc_fr_native_") and str(torch.__version__).split("+")[0].replace(".", "_") in name
    monkeypatch.setattr(torch, "__version__", "9.9.9+test")
    assert fr_native.module_name() != name and "9_9_9_test" in fr_native.module_name()
