"""benchmarks/ft.py --tail: the schedule of benchmarks/ft_tail_worker.py and the per-kill percentiles (no processes)."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def mods():
    try:
        yield (_load("ptc_ft_bench", ROOT / "benchmarks" / "ft.py"),
               _load("ptc_ft_tail_worker", ROOT / "benchmarks" / "ft_tail_worker.py"))
    finally:
        sys.modules.pop("ptc_ft_bench", None)
        sys.modules.pop("ptc_ft_tail_worker", None)


def test_percentiles_interpolate_like_numpy(mods):
    ft, _ = mods
    xs = [float(x) for x in range(1, 51)]  # 1..50
    assert ft.percentile(xs, 50) == pytest.approx(25.5)
    assert ft.percentile(xs, 99) == pytest.approx(49.51)
    assert ft.percentile(xs, 0) == 1.0 and ft.percentile(xs, 100) == 50.0
    assert ft.percentile([7.0], 99) == 7.0 and ft.percentile([], 50) is None
    s = ft.tail_stats([10.0, None, 30.0, 20.0])
    assert s == {"count": 3, "missing": 1, "p50": 20.0, "p90": 28.0, "p99": 29.8, "max": 30.0}


def test_schedule_one_victim_per_injection_in_turns(mods):
    _, w = mods
    full = lambda gen, n, start=0: [(start + i, gen, (0, 1, 2, 3)) for i in range(n)]  # noqa: E731
    h = full(1, 29)
    assert w.victim(h, 1, 4, 30, 5) is None  # not yet 30 steps at full size
    h = full(1, 30)
    assert w.victim(h, 1, 4, 30, 5) == 0
    assert w.victim(h, 2, 4, 30, 5) is None  # the kill moved the group on: no second victim
    h += [(30, 2, (1, 2, 3)), (31, 3, (0, 1, 2, 3))] + full(3, 30, 32)
    assert w.injections_done(h) == 1
    assert w.victim(h, 3, 4, 30, 5) == 1  # the next worker id
    assert w.victim(h, 3, 4, 30, 1) is None  # all done
    assert not w.finished(h[:31], 4, 1, 20) and w.finished(h, 4, 1, 20) and not w.finished(h, 4, 2, 20)
    short = h + [(62 + i, 4, (0, 2, 3)) for i in range(50)]  # a victim that never comes back
    assert not w.finished(short, 4, 2, 20) and not w.finished(short, 4, 2, 20, stall=51)
    assert w.finished(short, 4, 2, 20, stall=50)


def test_tail_injections_phases_from_a_timeline(mods):
    ft, _ = mods
    ev = [{"time": 0.0, "event": "generation", "gen": 1, "members": [0, 1, 2, 3], "joined": [0, 1, 2, 3], "failed": []}]
    ev += [{"time": 0.5 + 0.01 * k, "event": "commit", "worker": w, "gen": 1, "step": k + 1}
           for k in range(3) for w in range(4)]
    tk = 1.0
    ev += [
        {"time": tk, "event": "fault_kill", "worker": 2, "point": "collective", "at": 40},
        {"time": tk + 0.010, "event": "worker_failed", "worker": 2, "why": "EOF"},
        {"time": tk + 0.011, "event": "generation", "gen": 2, "members": [0, 1, 3], "joined": [], "failed": [2]},
    ]
    for i, w in enumerate((0, 1, 3)):
        ev += [{"time": tk + 0.012 + 0.001 * i, "event": "peer_failure", "worker": w, "gen": 1},
               {"time": tk + 0.020 + 0.001 * i, "event": "reconfigured", "worker": w, "gen": 2, "dt_ms": 2.0},
               {"time": tk + 0.030 + 0.001 * i, "event": "state_synced", "worker": w, "gen": 2},
               {"time": tk + 0.050 + 0.001 * i, "event": "commit", "worker": w, "gen": 2, "step": 4}]
    rows = ft.tail_injections(ev, 4)
    assert len(rows) == 1
    r = rows[0]
    assert r["full_size"] and r["point"] == "collective" and r["worker"] == 2
    assert r["detect_ms"] == 10.0 and r["new_generation_ms"] == 11.0 and r["released_ms"] == 14.0
    assert r["reconfigured_ms"] == 22.0 and r["synced_ms"] == 32.0 and r["resume_ms"] == 52.0
