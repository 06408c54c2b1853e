"""Winner choice with a tie band, and the autotune database's file format, merge and keys."""

import itertools
import json
import math

import pytest
from hypothesis import given, settings, strategies as st

from ptc.errors import PtcValueError
from ptc.gemm import AutotuneDB, Key, pick
from ptc.gemm.policy import NoValidChoice, backend_of

INF = float("inf")


def test_backend_of():
    assert [backend_of(n) for n in ("mm", "bias_addmm", "triton_mm_3", "ptc_nvgemm_t128x64x64_c2x1_2cta_clc")] == [
        "ATEN", "ATEN", "TRITON", "NVGEMM"]


def test_fastest_wins_outside_the_tie_band():
    assert pick({"mm": 10.0, "triton_mm_1": 12.0, "ptc_nvgemm_a": 9.0}) == "ptc_nvgemm_a"


def test_aten_kept_within_the_tie_band():
    assert pick({"mm": 10.0, "ptc_nvgemm_a": 9.9}) == "mm"
    assert pick({"mm": 10.0, "ptc_nvgemm_a": 9.9}, tolerance=0.0) == "ptc_nvgemm_a"
    # among ties of one backend the faster, then the name, decides
    assert pick({"ptc_nvgemm_b": 9.9, "ptc_nvgemm_a": 9.9, "triton_x": 11}) == "ptc_nvgemm_a"


def test_failures_never_win_and_all_failed_raises():
    assert pick({"mm": INF, "ptc_nvgemm_a": 3.0}) == "ptc_nvgemm_a"
    with pytest.raises(NoValidChoice, match="every choice failed"):
        pick({"mm": INF, "ptc_nvgemm_a": float("nan")})
    with pytest.raises(PtcValueError, match="tolerance must be"):
        pick({"mm": 1.0}, tolerance=-1)
    with pytest.raises(PtcValueError, match="timings is empty"):
        pick({})


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.sampled_from(["mm", "triton_mm_1", "triton_mm_2", "ptc_nvgemm_a", "ptc_nvgemm_b"]),
                       st.floats(0.5, 2.0), min_size=1))
def test_pick_is_within_tolerance_and_order_independent(timings):
    w = pick(timings)
    assert timings[w] <= min(timings.values()) * 1.02
    for perm in itertools.islice(itertools.permutations(timings.items()), 6):
        assert pick(dict(perm)) == w


KEY = Key("NVIDIA B200", "2.14.1", "4.8.1", "mm", "mm:bf16xbf16->bf16:m16n4096k4096:tn")


def test_db_round_trip_is_deterministic(tmp_path):
    db = AutotuneDB(tmp_path / "db.json")
    db.record(KEY, {"mm": 41.0, "ptc_nvgemm_a": 33.25, "ptc_nvgemm_b": INF})
    db.record(KEY, {"ptc_nvgemm_a": 35.0, "ptc_nvgemm_b": 50.0})  # slower re-measure keeps the faster
    path = db.save()
    text = path.read_text()
    data = json.loads(text)
    assert data["format"] == "ptc.gemm.autotune/1"
    assert data["entries"][KEY.text()] == {
        "timings_us": {"mm": 41.0, "ptc_nvgemm_a": 33.25, "ptc_nvgemm_b": 50.0}, "winner": "ptc_nvgemm_a"}
    again = AutotuneDB(path)
    assert again.timings(KEY) == db.timings(KEY) and again.winner(KEY) == "ptc_nvgemm_a"
    again.save()
    assert path.read_text() == text  # byte-stable: diffs and merges cleanly in a repository


def test_db_keys_separate_gpus_and_versions(tmp_path):
    db = AutotuneDB(tmp_path / "db.json")
    db.record(KEY, {"mm": 1.0})
    other = Key("NVIDIA H100 80GB HBM3", *KEY.text().split("|")[1:])
    assert db.winner(other) is None and db.timings(other) is None
    assert Key.parse(KEY.text()) == KEY
    with pytest.raises(PtcValueError, match="not a database key"):
        Key.parse("a|b")


def test_db_merge_is_order_independent(tmp_path):
    a, b = AutotuneDB(tmp_path / "a.json"), AutotuneDB(tmp_path / "b.json")
    a.record(KEY, {"mm": 41.0, "ptc_nvgemm_a": INF})
    b.record(KEY, {"mm": 42.0, "ptc_nvgemm_a": 30.0})
    ab, ba = AutotuneDB(tmp_path / "ab.json"), AutotuneDB(tmp_path / "ba.json")
    ab.merge(a), ab.merge(b), ba.merge(b), ba.merge(a)
    assert ab.timings(KEY) == ba.timings(KEY) == {"mm": 41.0, "ptc_nvgemm_a": 30.0}


def test_db_all_failed_has_no_winner(tmp_path):
    db = AutotuneDB(tmp_path / "db.json")
    db.record(KEY, {"mm": INF})
    assert db.winner(KEY) is None
    assert math.isinf(AutotuneDB(db.save()).timings(KEY)["mm"])


def test_db_rejects_foreign_files(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"cache": {}}')
    with pytest.raises(PtcValueError, match="is not a ptc autotune database"):
        AutotuneDB(p)
    p.write_text("{nope")
    with pytest.raises(PtcValueError, match="not readable JSON"):
        AutotuneDB(p)


def test_current_key_names_versions():
    k = Key.current("mm", "sig", gpu="B200")
    assert k.gpu == "B200" and k.op == "mm" and k.cutlass_dsl not in ("", None)
