"""Fault-tolerant training with real worker processes (gloo on 127.0.0.1): every scenario of the fault kit.

Each test checks, besides its own story: nobody is left running, the final
states of all members are bit-identical, and equal to a single-process
replay of the committed steps with the logged membership.
"""

from __future__ import annotations

import time

import pytest

from ft_helpers import check_consistent, pid_alive, run_scenario
from ptc import _compat
from ptc.distributed.ft import faults as F

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

ENGINES = ["native", "rebuild"] if _compat.GLOO_RECONFIGURE else ["rebuild"]


def _failed(outcome, worker):
    return [e for e in outcome.result.of("worker_failed") if e["worker"] == worker]


@pytest.mark.parametrize("engine", ENGINES)
def test_kill_inside_allreduce_then_restart_rejoins(tmp_path, engine):
    """SIGKILL inside a collective: survivors get PeerFailure naming the rank, go on, the restarted worker rejoins."""
    outcome = run_scenario(tmp_path, 3, steps=30, engine=engine, faults=[F.kill_in_collective(20, worker=2)],
                           restart_after=0.2, until_size=3)  # fmt: skip
    text = outcome.describe()
    check_consistent(outcome, expect_workers=[0, 1, 2])
    assert _failed(outcome, 2), text
    failures = outcome.result.of("peer_failure")
    assert failures and all(e["failed_ranks"] == [2] for e in failures), text
    gens = outcome.generations()
    assert gens[1]["members"] == [0, 1] and gens[1]["failed"] == [2], text
    assert gens[-1]["members"] == [0, 1, 2] and 2 in gens[-1]["joined"], text
    kinds = [(r.worker, r.kind, r.returncode) for r in outcome.result.runs]
    assert (2, "initial", -9) in kinds and (2, "restart", 0) in kinds, kinds
    assert any(e["bytes"] > 0 for e in outcome.result.of("state_synced") if e["gen"] == gens[-1]["gen"]), text


@pytest.fixture(scope="module")
def native_hook_built():
    """The native DDP hook, built once here (not by every worker at once)."""
    from ptc.distributed.ft import native as ft_native

    ft_native.load(build=True)


@pytest.mark.parametrize("path", ["after_backward", "copied", "in_place", "copied-native", "in_place-native"])
def test_ddp_survives_a_crash_inside_the_gradient_allreduce(tmp_path, path, request):
    """torch DDP around the model: the victim dies inside the gradient allreduce; backward never fails on
    survivors.  The model's gradients are one small bucket: by default they get no comm hook and are
    reduced after backward (after_backward); with the hook forced (DDP_HOOK_MIN_BYTES 0) the bucket is
    copied with the vote (copied), or reduced in DDP's own buffer with the vote alone after it (in_place),
    so the survivors' abandoned allreduce must end before their next attempt touches the gradients.
    ``-native``: the same with the C++ hook (the same collectives, counted the same)."""
    # after_backward, copied: collectives 1-4 are the initial state sync; collective 4 + s + 1 is step s's
    # gradients; in place: collective 4 + 2 s + 1 is step s's bucket, the next one its vote
    hook = ["--ddp-hook-min-bytes", "0", "--ddp-hook", "native" if path.endswith("-native") else "python"]
    if path.endswith("-native"):
        request.getfixturevalue("native_hook_built")
    extra, k = {"after_backward": ([], 20), "copied": (hook, 20),
                "in_place": (hook + ["--vote-copy-max-bytes", "0"], 19)}[path.replace("-native", "")]  # fmt: skip
    outcome = run_scenario(tmp_path, 3, steps=30, ddp=True, faults=[F.kill_in_collective(k, worker=1)], extra=extra)
    check_consistent(outcome, expect_workers=[0, 2])
    assert _failed(outcome, 1), outcome.describe()
    ended = outcome.result.of("abandoned_allreduces_ended")
    if path.startswith("in_place"):
        # a survivor whose bucket allreduce did not complete waited for it before its next attempt; one that
        # completed it (the victim's data can go out before the kill) fails only in the vote, and has nothing
        # to wait for (test_the_next_attempt_waits_for_abandoned_in_place_allreduces checks the wait itself)
        assert {e["worker"] for e in ended} <= {0, 2} and all(e["count"] >= 1 for e in ended), outcome.describe()
    else:
        assert not ended, outcome.describe()
    assert all(r.returncode == 0 for r in outcome.result.runs if r.worker != 1), outcome.describe()


def test_kill_between_steps(tmp_path):
    outcome = run_scenario(tmp_path, 3, steps=30, faults=[F.kill_between_steps(12, worker=1)])
    check_consistent(outcome, expect_workers=[0, 2])
    assert outcome.generations()[-1]["members"] == [0, 2]
    history = outcome.outputs[0]["history"]
    assert history[11][2] == (0, 1, 2) and history[12][2] == (0, 2), history[10:14]


def test_rank_zero_dies(tmp_path):
    """Killing rank 0 is like killing anyone: the first survivor becomes rank 0."""
    outcome = run_scenario(tmp_path, 3, steps=30, faults=[F.kill_in_collective(15, rank=0)])
    check_consistent(outcome, expect_workers=[1, 2])
    assert outcome.outputs[1]["rank"] == 0 and outcome.outputs[2]["rank"] == 1


def test_kill_during_reconfigure_and_two_failures(tmp_path):
    """A second worker dies while the survivors reconfigure after the first failure."""
    outcome = run_scenario(tmp_path, 4, steps=30,
                           faults=[F.kill_in_collective(15, worker=3), F.kill_during_reconfigure(2, worker=1)])  # fmt: skip
    text = outcome.describe()
    check_consistent(outcome, expect_workers=[0, 2])
    assert _failed(outcome, 3) and _failed(outcome, 1), text
    assert outcome.generations()[-1]["members"] == [0, 2], text


def test_two_failures_in_a_row(tmp_path):
    outcome = run_scenario(tmp_path, 4, steps=40,
                           faults=[F.kill_in_collective(15, worker=2), F.kill_in_collective(25, worker=0)])  # fmt: skip
    check_consistent(outcome, expect_workers=[1, 3])
    members = [tuple(g["members"]) for g in outcome.generations()]
    assert members[0] == (0, 1, 2, 3) and members[-1] == (1, 3), outcome.describe()


def test_stopped_worker_is_fenced_and_rejoins_after_sigcont(tmp_path):
    """SIGSTOP: declared failed after the heartbeat timeout, the others go on; after SIGCONT it is fenced,
    rejoins as a new member and takes the group's state (even if it had applied a step the others abandoned)."""
    outcome = run_scenario(tmp_path, 3, steps=30, sleep=0.01, heartbeat_timeout=2.0,
                           faults=[F.stop_at_step(10, worker=2, cont_after=4.0)], until_size=3)  # fmt: skip
    text = outcome.describe()
    check_consistent(outcome, expect_workers=[0, 1, 2])
    stopped = outcome.result.of("fault_stop")
    assert stopped and stopped[0]["worker"] == 2, text
    failed = [e for e in _failed(outcome, 2) if e["time"] > stopped[0]["time"]]
    assert failed and "no heartbeat" in failed[0]["why"], text
    assert outcome.result.of("sigcont"), text
    assert any(e["worker"] == 2 for e in outcome.result.of("rejoin")), text
    assert outcome.generations()[-1]["members"] == [0, 1, 2], text
    assert [r.kind for r in outcome.result.runs].count("restart") == 0


def test_new_worker_joins_at_a_step(tmp_path):
    outcome = run_scenario(tmp_path, 3, steps=20, sleep=0.01, joins=[(5, 3)], until_size=4)
    text = outcome.describe()
    check_consistent(outcome, expect_workers=[0, 1, 2, 3])
    gens = outcome.generations()
    assert gens[-1]["members"] == [0, 1, 2, 3] and gens[-1]["joined"] == [3], text
    syncs = [e for e in outcome.result.of("state_synced") if e["gen"] == gens[-1]["gen"]]
    assert syncs and all(e["bytes"] > 0 for e in syncs), text
    assert not outcome.result.of("worker_failed"), text


def test_no_process_is_left_behind(tmp_path):
    outcome = run_scenario(tmp_path, 3, steps=10, faults=[F.kill_in_collective(8, worker=1)])
    for run in outcome.result.runs:
        assert not pid_alive(run.proc.pid), f"pid {run.proc.pid} of worker {run.worker} is alive"


def test_flight_recorder_dumps_of_a_reconfigured_group_are_analysable(tmp_path):
    """Every survivor dumps when the failure is announced; generations keep distinct group names;
    ptc fr-trace and the stock torchfrtrace both read the dumps."""
    from fr_helpers import run_torchfrtrace

    from ptc.distributed import analyze_dumps

    fr_dir = tmp_path / "fr"
    outcome = run_scenario(tmp_path, 3, steps=20, faults=[F.kill_in_collective(12, worker=2)],
                           extra=["--fr-dir", str(fr_dir)])  # fmt: skip
    check_consistent(outcome, expect_workers=[0, 1])
    report = analyze_dumps(fr_dir)
    assert sorted(report.dumps) == [0, 1]  # worker 2 was SIGKILLed: no dump
    names = {g.name: g for g in report.groups}
    first, second = names["ptc_ft.default@gen1"], names["ptc_ft.default@gen2"]
    assert first.ranks == [0, 1, 2] and first.no_dump == [2]
    assert second.ranks == [0, 1] and second.matched == second.collectives > 0
    proc = run_torchfrtrace("--allow-incomplete-ranks", str(fr_dir))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    # the stock analyzer stops at the first generation (rank 2's dump is missing for all of it) and says so
    assert "ptc_ft.default@gen1" in out and "missed FR dumps from ranks ({2})" in out, out


def test_inside_a_torchrun_launch(tmp_path):
    """torchrun gives RANK/WORLD_SIZE/MASTER_ADDR: the first worker starts a detached coordinator
    (it outlives that worker, so rank 0 does not hold the group's state) and publishes it in torchrun's store."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import torch

    torchrun = Path(sys.executable).with_name("torchrun")
    pidfile, out = tmp_path / "coordinator.pid", tmp_path / "out"
    # PYTHONFAULTHANDLER: a worker that aborts (SIGABRT) prints every thread's Python stack into the output
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PTC_FT_COORDINATOR_PIDFILE": str(pidfile),
           "PTC_FT_COORDINATOR_IDLE_EXIT": "1", "PYTHONFAULTHANDLER": "1"}  # fmt: skip
    env.pop("PTC_FT_COORDINATOR", None)
    cmd = [str(torchrun), "--standalone", "--nproc-per-node", "2", "-m", "ptc.demos.ft_example",
           "--steps", "5", "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    coordinator_pid = None
    try:
        output, _ = proc.communicate(timeout=150)
        assert proc.returncode == 0, output
        results = [torch.load(out / f"worker{w}.pt", weights_only=False) for w in (0, 1)]
        assert results[0]["checksum"] == results[1]["checksum"] and len(results[0]["history"]) == 5
        coordinator_pid = int(pidfile.read_text())
        deadline = time.monotonic() + 20
        while pid_alive(coordinator_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not pid_alive(coordinator_pid), "the detached coordinator did not exit once the job was idle"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if coordinator_pid is None and pidfile.exists():
            coordinator_pid = int(pidfile.read_text())
        if coordinator_pid is not None and pid_alive(coordinator_pid):
            os.kill(coordinator_pid, 9)
