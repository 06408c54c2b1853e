"""`ptc demo ft`: a worker killed mid-allreduce, the others go on, it rejoins; summary and timeline plot."""

import pytest

pytestmark = pytest.mark.multiprocess


def test_ft_demo_runs_and_plots(tmp_path):
    pytest.importorskip("matplotlib")
    from ptc import demos
    from ptc.demos import ft as ft_demo

    assert demos.SECTIONS["ft"].target == "ptc.demos.ft:main"
    lines = []
    summary = ft_demo.run(tmp_path, write=lines.append)
    text = "\n".join(lines)
    assert not summary["timed_out"], text
    assert "params equal" in text and summary["params_equal"], text
    assert summary["replay_equal"], text
    assert summary["lost"] == 0, text
    assert summary["workers"] == [0, 1, 2, 3], text  # the killed worker came back and finished with the others
    assert summary["resume_ms"] is not None and summary["detect_ms"] is not None, text
    assert summary["detect_ms"] <= summary["resume_ms"], text
    rejoin = summary["rejoins"][0]
    assert rejoin["worker"] == 2 and rejoin["kind"] == "restart" and rejoin["first_commit"] is not None, text
    png = tmp_path / "ft_timeline.png"
    assert summary["png"] == str(png)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert 600 <= width <= 3000 and 300 <= height <= 3000, (width, height)
    assert 20_000 < len(data) < 2_000_000
    assert "timeline plot: " + str(png) in text


def test_ft_demo_says_what_it_waits_for_and_leaves_nothing_behind(tmp_path, monkeypatch):
    """`ptc demo ft` (no --out): one line says what the silent start waits for; its
    temporary directory is gone afterwards."""
    import tempfile

    from ptc.demos import ft as ft_demo

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    lines = []
    summary = ft_demo.run(write=lines.append)
    text = "\n".join(lines)
    assert not summary["timed_out"] and summary["params_equal"], text
    waiting = next(i for i, ln in enumerate(lines) if ln.startswith("starting the 4 worker processes"))
    assert "once each has imported torch and joined the coordinator" in lines[waiting]
    started = next(i for i, ln in enumerate(lines) if "workers connected: training starts" in ln)
    assert waiting < started, text
    assert summary["png"] is None and "python -m ptc.demos.ft --out DIR keeps them in DIR" in text
    assert list(tmp_path.iterdir()) == []
