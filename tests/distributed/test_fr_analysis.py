"""The analysis behind `ptc fr-trace`, on dumps that real recorders wrote for simulated ranks."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import pytest
import torch

from fr_helpers import SimulatedRanks, run_cli, run_torchfrtrace
from ptc.distributed import analyze_dumps
from ptc.distributed.flight_recorder import analysis as fr_analysis
from ptc.errors import PtcValueError


def _rewrite(path, edit):
    """Change a dump file the way a different situation would have written it."""
    with open(path, "rb") as f:
        data = pickle.load(f)
    edit(data)
    with open(path, "wb") as f:
        pickle.dump(data, f)


@pytest.fixture
def world(tmp_path):
    opened = []

    def make(size, **kwargs):
        ranks = SimulatedRanks(size, tmp_path / f"dumps{len(opened)}", **kwargs)
        opened.append(ranks)
        return ranks

    yield make
    for ranks in opened:
        ranks.close()


def test_a_clean_run_has_no_problem(world):
    w = world(3)
    for _ in range(4):
        w.all_reduce([0, 1, 2])
    w.broadcast([0, 1, 2], root=2)
    report = analyze_dumps(w.dump())
    assert report.ok and report.findings == []
    (group,) = report.groups
    assert (group.name, group.ranks, group.collectives, group.matched) == ("world", [0, 1, 2], 5, 5)
    assert report.verdict() == "no problem found (5 collectives matched in 1 group(s))"
    proc = run_cli("fr-trace", str(w.dump_dir))
    assert proc.returncode == 0, proc.stderr
    assert "verdict: no problem found" in proc.stdout


def test_desync_names_the_rank_outside_the_majority(world):
    w = world(3)
    w.all_reduce([0, 1, 2])
    w.all_reduce([0, 2], numel=8)
    w.all_reduce([1], numel=9)  # rank 1 disagrees about the size
    w.all_reduce([0, 1, 2])
    report = analyze_dumps(w.dump())
    (finding,) = report.errors
    assert (finding.kind, finding.seq, finding.culprit_ranks) == ("desync", 2, [1])
    assert "rank(s) 0, 2 called all_reduce(sizes [[8]], Float); rank(s) 1 called all_reduce(sizes [[9]], Float)" in finding.message
    assert "tie" not in finding.message


def test_desync_between_two_ranks_is_called_a_tie(world):
    w = world(2)
    w.all_reduce([0])
    w.broadcast([1], root=1)
    (finding,) = analyze_dumps(w.dump()).errors
    assert finding.kind == "desync" and finding.culprit_ranks == [1]
    assert "a tie: judged against rank 0" in finding.message
    assert "broadcast(sizes [[8]], Float, root 1)" in finding.message


def test_a_rank_that_never_arrives_is_missing(world):
    w = world(3)
    for _ in range(3):
        w.all_reduce([0, 1, 2])
    w.all_reduce([0, 1])
    report = analyze_dumps(w.dump())
    (finding,) = report.errors
    assert (finding.kind, finding.seq, finding.missing_ranks) == ("missing", 4, [2])
    assert "rank 2 never reached it (its last collective in this group: seq 3 all_reduce, completed)" in finding.message
    assert report.groups[0].matched == 3


def test_ring_buffers_of_different_depth_do_not_look_like_a_hang(world):
    w = world(3, capacities=[3, 10, 10])
    for _ in range(6):
        w.all_reduce([0, 1, 2])
    report = analyze_dumps(w.dump())
    assert report.ok, report.format()
    assert report.groups[0].matched == 3  # only what every rank kept is compared
    assert report.dumps[0].dropped == 3


def test_point_to_point_pairs_and_a_send_without_its_recv(world):
    w = world(2)
    w.send(0, 1)
    w.recv(1, 0)
    w.all_reduce([0, 1])
    w.send(0, 1, numel=6)
    report = analyze_dumps(w.dump())
    (finding,) = report.errors
    assert finding.kind == "p2p" and finding.missing_ranks == [1]
    assert "rank 0 send #2" in finding.message and "has no counterpart on rank 1" in finding.message


def test_silent_rank_is_a_warning_until_the_others_wait(world):
    w = world(3)
    for _ in range(2):
        w.all_reduce([0, 1, 2])
    directory = w.dump(ranks=[0, 1])
    report = analyze_dumps(directory)
    assert report.ok
    (warning,) = report.findings
    assert (warning.kind, warning.severity, warning.missing_ranks) == ("no_dump", "warning", [2])

    def last_call_still_running(data):
        data["entries"][-1]["state"] = "started"

    for r in (0, 1):
        _rewrite(directory / f"rank_{r}", last_call_still_running)
    (error,) = analyze_dumps(directory).errors
    assert (error.kind, error.seq, error.culprit_ranks) == ("no_dump", 2, [2])
    assert "rank(s) 0, 1 wait in it; rank(s) 2 left no dump" in error.message


def test_a_running_collective_is_in_flight_until_its_timeout_passes(world):
    w = world(2)
    for _ in range(2):
        w.all_reduce([0, 1])
    directory = w.dump()

    def running(data):
        data["entries"][-1]["state"] = "started"
        data["entries"][-1]["time_discovered_completed_ns"] = None

    for r in (0, 1):
        _rewrite(directory / f"rank_{r}", running)
    report = analyze_dumps(directory)
    assert report.ok and [f.kind for f in report.findings] == ["in_flight"]

    def overdue(data):
        data["entries"][-1]["timed_out"] = True

    _rewrite(directory / "rank_0", overdue)
    (error,) = analyze_dumps(directory).errors
    assert (error.kind, error.seq) == ("stuck", 2)


def test_torch_native_gloo_dump_layout_is_analysable(world):
    """torch's own gloo recorder files pg_config under '' (torchfrtrace: KeyError); ptc copes."""
    w = world(3)
    w.all_reduce([0, 1, 2])
    w.all_reduce([0, 1, 2])
    w.broadcast([2])
    w.all_reduce([0, 1])
    directory = w.dump()

    def native(data):
        data["pg_config"] = {"": {"name": "", "desc": "", "ranks": "[]"}}
        del data["ptc"]
        for e in data["entries"]:
            e["process_group"] = ("0", "default_pg")
            for key in ("backend", "generation", "peer", "error", "timed_out"):
                del e[key]

    for r in range(3):
        _rewrite(directory / f"rank_{r}", native)
    report = analyze_dumps(directory)
    kinds = [(f.kind, f.severity) for f in report.findings]
    assert ("config", "warning") in kinds
    (error,) = report.errors
    assert error.kind == "desync" and error.seq == 3 and error.culprit_ranks == [2]


def test_loader_accepts_plain_data_only(tmp_path):
    (tmp_path / "rank_0").write_bytes(pickle.dumps(torch.Size([2])))  # refers to a torch class
    with pytest.raises(PtcValueError, match="refusing to load torch.Size"):
        fr_analysis.load_dumps(tmp_path)
    (tmp_path / "rank_0").write_bytes(pickle.dumps({"entries": []}))
    with pytest.raises(PtcValueError, match="needs keys entries, version, pg_config"):
        fr_analysis.load_dumps(tmp_path)
    (tmp_path / "trace_1").write_bytes(b"")
    with pytest.raises(PtcValueError, match=r"different prefixes \('rank_', 'trace_'\)"):
        fr_analysis.load_dumps(tmp_path)
    with pytest.raises(PtcValueError, match="no such directory"):
        fr_analysis.load_dumps(tmp_path / "nope")


def test_cli_exit_status_json_and_entries(world, tmp_path):
    w = world(3)
    w.all_reduce([0, 1, 2])
    w.all_reduce([0, 1])
    directory = w.dump()
    proc = run_cli("fr-trace", str(directory), "--json")
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data["ok"] is False and data["findings"][0]["missing_ranks"] == [2]
    assert [d["rank"] for d in data["dumps"]] == [0, 1, 2]
    proc = run_cli("fr-trace", "-j", str(directory))
    assert proc.returncode == 1
    assert proc.stdout.count("all_reduce(sizes [[8]], Float)") == 5  # every entry of every rank
    proc = run_cli("fr-trace", str(tmp_path / "missing"))
    assert proc.returncode == 2 and "no such directory" in proc.stderr


def test_fr_trace_given_one_dump_file_names_the_directory_to_pass(world):
    w = world(2)
    w.all_reduce([0, 1])
    directory = w.dump()
    one = directory / "rank_0"
    proc = run_cli("fr-trace", str(one))
    assert proc.returncode == 2, proc.stdout
    assert f"{str(one)!r} is a file; pass the directory that holds the <prefix><rank> dumps" in proc.stderr
    assert f"(here {str(directory)!r})" in proc.stderr and "no such directory" not in proc.stderr
    with pytest.raises(PtcValueError, match="is a file; pass the directory"):
        fr_analysis.analyze(one)


def test_fr_trace_needs_neither_tabulate_nor_torch(world):
    w = world(2)
    w.all_reduce([0])
    w.all_reduce([1], numel=3)
    directory = w.dump()
    code = (
        "import sys\n"
        "sys.modules['tabulate'] = None\n"  # make `import tabulate` fail, as where it is not installed
        "from ptc.cli import main\n"
        "rc = main(['fr-trace', sys.argv[1]])\n"
        "assert 'torch' not in sys.modules, 'fr-trace imported torch'\n"
        "sys.exit(rc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(directory)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "desync in group world at collective seq 1" in proc.stdout


def test_stock_torchfrtrace_reads_ptc_dumps(world):
    w = world(3)
    w.all_reduce([0, 1, 2])
    w.all_reduce([0, 1])
    w.broadcast([2])
    directory = w.dump()
    proc = run_torchfrtrace(str(directory))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Collective sequence number: 2 has errors" in out
    assert "COLLECTIVE_TYPE_MISMATCH" in out and "'broadcast'" in out and "'all_reduce'" in out
    proc = run_torchfrtrace(str(directory), "-j")  # the entries table (needs tabulate, from the test extra)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Rank 0" in out and "Rank 2" in out and out.count("all_reduce(input_sizes=[[8]], state=completed)") == 5


@pytest.mark.multiprocess
def test_flight_recorder_demo_removes_its_dumps(tmp_path, monkeypatch, capsys):
    import tempfile

    from ptc.demos import flight_recorder as demo

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    demo.main()
    out = capsys.readouterr().out
    assert "dumps written by the ranks' recorders" in out and "verdict: " in out
    assert list(tmp_path.iterdir()) == []
