"""benchmarks/ft_scale.py at N = 16: the real coordinator process against 16 simulated members.

The members are protocol-level (one selectors loop, no torch): HMAC handshake, heartbeats at the
default 0.1 s, ``ready`` on news.  A generation of all 16 forms; closing one member's socket (a
killed process) yields a generation of the 15 survivors within a generous bound; the coordinator
stays up and nobody is fenced or refused.
"""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ft_scale():
    spec = importlib.util.spec_from_file_location("ptc_ft_scale", ROOT / "benchmarks" / "ft_scale.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def test_sixteen_members_form_a_generation_and_survive_a_death(ft_scale):
    n = 16
    result = ft_scale.measure(n, deaths=1, steady=1.0, settle=0.2, timeout=30.0, log=lambda *a: None)
    generations = result["observed_generations"]
    assert generations[0] == {"gen": 1, "members": n, "failed": []}
    assert len(generations) == 2, generations
    assert generations[1]["gen"] == 2 and generations[1]["members"] == n - 1
    assert generations[1]["failed"] == [result["deaths"][0]["victim"]]
    death = result["deaths"][0]
    assert 0 < death["news_ms"] <= death["go_ms"] < 2000, death
    assert result["alive"] and result["coordinator_exit"] == 0
    assert result["members_final"] == n - 1
    assert (result["lost"], result["fenced"], result["refused"], result["protocol_errors"]) == (0, 0, 0, [])
    # every member heartbeats (the simulator kept up with 160 beats a second)
    assert result["hb_per_s"] >= 0.5 * result["hb_nominal_per_s"], result
    assert result["coordinator_cpu_pct"] >= 0


def test_table_and_plot(ft_scale, tmp_path):
    pytest.importorskip("matplotlib")
    fake = {"n": 16, "hello_to_gen_ms": 10.0, "hello_to_go_ms": 12.0, "death_news_ms_median": 1.0,
            "death_news_ms_max": 1.5, "death_go_ms_median": 2.0, "death_go_ms_max": 2.5,
            "death_coord_detect_ms_median": 0.2, "death_cpu_ms_median": 0.0, "coordinator_cpu_pct": 1.0,
            "hb_per_s": 160, "hb_nominal_per_s": 160, "simulator_cpu_pct": 1.0, "rss_idle_mb": 500.0,
            "rss_mb": 501.0}  # fmt: skip
    text = ft_scale.table([fake, {**fake, "n": 64}])
    assert text.count("\n") == 3 and "| 64 |" in text
    out = tmp_path / "scale.png"
    ft_scale.plot([fake, {**fake, "n": 64}], str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
