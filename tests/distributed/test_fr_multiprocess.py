"""Gloo on 127.0.0.1, several processes: desync, hang, signal dumps, a reconfigured group.

Each scenario runs once per module (fr_worker.py says what each rank does);
the tests then read its dumps with ptc's analysis, `ptc fr-trace` and torch's
own `torchfrtrace`.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from fr_helpers import launch, run_cli, run_torchfrtrace, wait_for
from ptc import _compat
from ptc.distributed import analyze_dumps
from ptc.distributed.flight_recorder import native as fr_native

pytestmark = pytest.mark.multiprocess
CORES = ["python", "native"]


def _core(name: str) -> str:
    if name == "native":
        fr_native.load(build=True)  # once here, not in every worker
    return name


def _reasons(run):
    return {r: d.reason for r, d in analyze_dumps(run.dump_dir).dumps.items()}


# --- desync: rank 2 calls broadcast where ranks 0 and 1 call all_reduce --------


@pytest.fixture(scope="module", params=CORES)
def desync_run(request, tmp_path_factory):
    core = _core(request.param)
    run = launch("desync", 3, tmp_path_factory.mktemp(f"desync_{core}") / "dumps", core=core, timeout=90)
    assert run.returncodes == [0, 0, 0], run.describe()
    return run


def test_desync_dumps_itself_when_the_collective_fails(desync_run):
    events = [{e["event"] for e in rank_events} for rank_events in desync_run.events]
    assert all("desync_failed" in ev for ev in events), desync_run.describe()
    reasons = _reasons(desync_run)
    assert sorted(reasons) == [0, 1, 2]
    # each rank's own failure dumps it; a peer's request may have replaced the file later
    assert all(r.startswith("failure: ") or r.startswith("requested by rank ") for r in reasons.values()), reasons
    assert any(r.startswith("failure: ") for r in reasons.values())


def test_desync_verdict_names_the_culprit(desync_run):
    report = analyze_dumps(desync_run.dump_dir)
    (finding,) = report.errors
    assert (finding.kind, finding.seq, finding.culprit_ranks) == ("desync", 5, [2])
    assert "rank(s) 0, 1 called all_reduce(sizes [[1000]], Float); rank(s) 2 called broadcast(" in finding.message
    assert report.groups[0].matched == 4
    states = {e["state"] for d in report.dumps.values() for e in d.entries}
    assert states == {"completed", "failed"}
    proc = run_cli("fr-trace", str(desync_run.dump_dir))
    assert proc.returncode == 1, proc.stderr
    assert "-> culprit rank(s) 2" in proc.stdout.splitlines()[-1]


def test_stock_analyzer_reports_the_desync(desync_run):
    proc = run_torchfrtrace(str(desync_run.dump_dir))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Collective sequence number: 5 has errors" in out
    assert "COLLECTIVE_TYPE_MISMATCH" in out and "'broadcast'" in out and "'all_reduce'" in out


# --- hang: rank 2 never arrives at the fifth all_reduce -----------------------------


@pytest.fixture(scope="module", params=CORES)
def hang_run(request, tmp_path_factory):
    core = _core(request.param)
    run = launch("hang", 3, tmp_path_factory.mktemp(f"hang_{core}") / "dumps", core=core, timeout=90)
    assert run.returncodes == [0, 0, 0], run.describe()
    return run


def test_hang_dumps_on_timeout_and_asks_the_missing_rank(hang_run):
    reasons = _reasons(hang_run)
    assert sorted(reasons) == [0, 1, 2]
    # each waiting rank dumps on its own timeout, or on the other's request if that came first
    # (then it may stop before its own timeout); a later request keeps the rank's own reason first
    own = {r: f"timeout: all_reduce (seq 5) in group '0' on rank {r} unfinished after " for r in (0, 1)}
    assert all(reasons[r].startswith((own[r], f"requested by rank {1 - r}: {own[1 - r]}")) for r in (0, 1)), reasons
    assert any(reasons[r].startswith(own[r]) for r in (0, 1)), reasons
    # rank 2 was not in any collective: only a peer's request through the store made it dump
    assert reasons[2].startswith("requested by rank ") and "timeout: all_reduce (seq 5)" in reasons[2]


def test_hang_verdict_names_the_missing_rank(hang_run):
    report = analyze_dumps(hang_run.dump_dir)
    (finding,) = report.errors
    assert (finding.kind, finding.seq, finding.missing_ranks) == ("missing", 5, [2])
    assert "rank(s) 0, 1 entered it, rank 2 never reached it" in finding.message
    proc = run_cli("fr-trace", str(hang_run.dump_dir))
    assert proc.returncode == 1 and "missing rank(s) 2" in proc.stdout


def test_stock_analyzer_reports_the_missing_rank(hang_run):
    proc = run_torchfrtrace(str(hang_run.dump_dir))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Not all ranks joining collective, sequence number: 5" in out
    assert "missing ranks: {2}" in out


# --- a signal: rank 0 is blocked inside gloo, rank 1 sleeps -------------------------


@pytest.fixture(scope="module")
def signal_run(tmp_path_factory):
    dump_dir = tmp_path_factory.mktemp("signal") / "dumps"
    seen = {}

    def signal_both(procs, store):
        wait_for(lambda: store.check(["ready/0", "ready/1"]), 60, "both ranks ready")
        time.sleep(0.5)  # rank 0 is inside its third all_reduce by now
        for p in procs:
            os.kill(p.pid, signal.SIGUSR1)
        wait_for(lambda: all((dump_dir / f"rank_{r}").exists() for r in (0, 1)), 15, "the signal dumps")
        seen["rank0_still_blocked"] = not store.check(["returned/0"])
        for p in procs:  # the hang would last a minute: stop the workers now
            os.kill(p.pid, signal.SIGKILL)

    run = launch("signal", 2, dump_dir, timeout=60, while_running=signal_both)
    run.seen = seen
    return run


def test_signal_dumps_while_the_main_thread_is_blocked(signal_run):
    assert signal_run.seen == {"rank0_still_blocked": True}, signal_run.describe()
    assert _reasons(signal_run) == {0: "signal SIGUSR1", 1: "signal SIGUSR1"}


def test_signal_dumps_hold_p2p_and_stacks(signal_run):
    report = analyze_dumps(signal_run.dump_dir)
    (finding,) = report.errors  # the p2p pair matched; the third all_reduce lacks rank 1
    assert (finding.kind, finding.seq, finding.missing_ranks) == ("missing", 3, [1])
    rank0 = report.dumps[0].entries
    assert [e["profiling_name"] for e in rank0] == ["gloo:send 0->1"] + ["gloo:all_reduce"] * 3
    assert [e["state"] for e in rank0] == ["completed", "completed", "completed", "started"]
    assert report.dumps[1].entries[0]["profiling_name"] == "gloo:recv 1<-0"
    for e in rank0:
        assert "signal_dump" in [f["name"] for f in e["frames"]]
    done = [e for e in rank0 if e["state"] == "completed"]
    assert all(e["time_created_ns"] <= e["time_discovered_started_ns"] <= e["time_discovered_completed_ns"] for e in done)


# --- a reconfigured group: rank 2 dies, ranks 0 and 1 go on in generation 1 -----------

RECONFIGURE_MODES = ["rebuild", "native"] if _compat.NATIVE_RECONFIGURE else ["rebuild"]


@pytest.fixture(scope="module", params=RECONFIGURE_MODES)
def reconfigure_run(request, tmp_path_factory):
    run = launch("reconfigure", 3, tmp_path_factory.mktemp(f"reconf_{request.param}") / "dumps", mode=request.param,
                 core=_core("native"), timeout=90)  # fmt: skip
    assert run.returncodes == [0, 0, 0], run.describe()
    return run


def test_reconfigured_group_keeps_generations_apart(reconfigure_run):
    report = analyze_dumps(reconfigure_run.dump_dir)
    assert sorted(report.dumps) == [0, 1]  # rank 2 died without a dump
    groups = {g.name: (g.ranks, g.generation, g.collectives, g.matched, g.no_dump) for g in report.groups}
    assert groups == {"0": ([0, 1, 2], 0, 3, 3, [2]), "0@gen1": ([0, 1], 1, 3, 2, [])}
    gen1 = [e["collective_seq_id"] for e in report.dumps[0].entries if e["process_group"][0] == "0@gen1"]
    assert gen1 == [1, 2, 3]  # sequence ids restart in the new generation
    by_kind = {(f.group, f.kind): f for f in report.findings}
    assert set(by_kind) == {("0", "no_dump"), ("0@gen1", "missing")}
    assert by_kind[("0", "no_dump")].severity == "warning"
    assert by_kind[("0@gen1", "missing")].missing_ranks == [1] and by_kind[("0@gen1", "missing")].seq == 3
    assert _reasons(reconfigure_run)[1].startswith("requested by rank 0: timeout: all_reduce (seq 3) in group '0@gen1'")


def test_stock_analyzer_reads_the_reconfigured_dumps(reconfigure_run):
    proc = run_torchfrtrace("--allow-incomplete-ranks", str(reconfigure_run.dump_dir))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "group info: 0@gen1:default_pg" in out and "missing ranks: {1}" in out
