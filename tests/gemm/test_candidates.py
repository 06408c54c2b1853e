"""Candidate enumeration (cutlass.operators on meta tensors), ranking for a named target, selection rules."""

import pytest
from expecttest import assert_expected_inline

from ptc.gemm import GemmProblem, TARGETS, plan, estimate_us
from ptc.gemm.candidates import Candidate, select

pytestmark = pytest.mark.skipif(
    not __import__("ptc")._compat.CUTLASS_OPERATORS, reason="needs pip install 'ptc[gemm]' (in the test extra)"
)

LLM = [GemmProblem("mm", m, n, k) for m, n, k in ((1, 4096, 4096), (16, 14336, 4096), (128, 4096, 14336), (4096, 4096, 4096))]


@pytest.fixture(scope="module", params=["H100_SXM", "B200"])
def plans(request):
    return request.param, [plan(p, request.param) for p in LLM]


def test_every_compatible_kernel_is_selected_or_dropped_with_a_reason(plans):
    _, ps = plans
    for p in ps:
        names = [c.name for c in p.selected] + [c.name for c, _ in p.dropped]
        assert len(names) == len(set(names)) == p.considered > 0
        assert all(reason.split(":")[0] in {"duplicate", "diversity", "cap", "cluster", "efc", "efc-tile"}
                   for _, reason in p.dropped)


def test_selection_has_distinct_keys_diversity_and_cap(plans):
    _, ps = plans
    for p in ps:
        keys = [c.key for c in p.selected]
        assert len(keys) == len(set(keys)), "duplicate (tile, cluster) keys selected"
        tiles = [(c.tile[0], c.tile[1], c.two_cta) for c in p.selected]
        assert max(tiles.count(t) for t in tiles) <= 2
        assert len(set(tiles)) >= 4  # the budget spans tile shapes, unlike torch's top-10
        assert len(p.selected) == 8
        assert all(c.cluster[0] * c.cluster[1] <= 8 for c in p.selected)
        assert [c.estimate_us for c in p.selected] == sorted(c.estimate_us for c in p.selected)


def test_plans_are_deterministic():
    a, b = plan(LLM[2], "B200"), plan(LLM[2], "B200")
    assert a.selected == b.selected and a.dropped == b.dropped


def test_blackwell_two_cta_pair_tiles_are_ranked_by_per_cta_tile():
    """A 2-CTA kernel's tile_m spans the pair (pytorch #196313): 2-CTA 256-wide tiles stay reachable."""
    p = plan(LLM[3], "B200")
    assert any(c.two_cta and c.tile[0] == 256 for c in p.selected)
    one = Candidate("a", (128, 256, 64), (2, 1), False, False, "clc")
    pair = Candidate("b", (256, 256, 64), (2, 1), True, False, "clc")
    # the pair does twice the work per tile on twice the SMs: same per-SM efficiency, half the tiles
    assert estimate_us(pair, LLM[3], TARGETS["B200"]) <= estimate_us(one, LLM[3], TARGETS["B200"])


def test_estimates_follow_the_target():
    c = Candidate("a", (128, 128, 64), (1, 1), False, False, "static")
    big = GemmProblem("mm", 8192, 8192, 8192)
    h100, b200 = estimate_us(c, big, TARGETS["H100_SXM"]), estimate_us(c, big, TARGETS["B200"])
    assert b200 < h100  # more SMs, higher peak
    assert estimate_us(c, LLM[0], TARGETS["H100_SXM"]) < h100  # smaller problem, less time
    # a decode GEMM (M=1) is bandwidth bound: at least its weight bytes over DRAM bandwidth
    assert estimate_us(c, LLM[0], TARGETS["H200_SXM"]) >= 4096 * 4096 * 2 / 4.8e12 * 1e6


def test_fused_plans_use_efc_kernels_with_tile_m_at_least_128():
    p = plan(LLM[2], "B200", "bias,silu")
    assert p.fusion.fused and p.selected
    assert all(c.efc and c.tile[0] >= 128 for c in p.selected)
    assert any(r.startswith("efc-tile") for _, r in p.dropped)


def test_hopper_has_no_efc_so_epilogues_plan_plain_kernels():
    p = plan(LLM[2], "H100_SXM", "bias,relu")
    assert not p.fusion.fused and "no epilogue-fusion kernels for sm_90a" in p.fusion.reason
    assert p.selected and not any(c.efc for c in p.selected)


def test_scaled_gemm_plans():
    nvfp4 = GemmProblem("scaled_mm", 4096, 4096, 4096, a_dtype="e2m1x2", b_dtype="e2m1x2", scale="block16")
    mxfp8 = nvfp4.with_(a_dtype="e4m3", b_dtype="e4m3", scale="block32")
    for prob in (nvfp4, mxfp8):
        p = plan(prob, "B200")
        assert p.selected and not p.note, p.note
        assert plan(prob, "H100_SXM").note.startswith(f"{prob.scale} block scales need Blackwell")
    row = mxfp8.with_(scale="row")
    fused = plan(row, "B200", "rowscale")  # FP8 dequant by row/column scales, fused
    assert fused.fusion.fused and fused.selected and all(c.efc for c in fused.selected)
    assert "needs the dequant epilogue" in plan(row, "H100_SXM", "rowscale").note


def test_bmm_plans():
    p = plan(GemmProblem("bmm", 512, 512, 128, batch=32), "B200")
    assert p.selected


def test_select_rules_on_handmade_candidates():
    mk = lambda name, t, cl, est, two=False, efc=False: Candidate(name, t, cl, two, efc, "clc", est)
    cands = [
        mk("a", (128, 256, 64), (2, 1), 10.0), mk("a2", (128, 256, 64), (2, 1), 10.0),  # duplicate key
        mk("b", (128, 256, 64), (1, 1), 11.0), mk("c", (128, 256, 64), (4, 1), 12.0),  # 3rd key of one tile
        mk("d", (128, 128, 64), (16, 1), 9.0),  # non-portable cluster
        mk("e", (64, 64, 64), (1, 1), 13.0), mk("f", (256, 128, 64), (2, 1), 14.0, two=True),
    ]
    sel, dropped = select(cands, max_candidates=3, per_tile=2)
    assert [c.name for c in sel] == ["a", "b", "e"]
    assert_expected_inline("\n".join(f"{c.name}: {r}" for c, r in dropped), """\
d: cluster: 16x1 exceeds the portable maximum of 8 CTAs
a2: duplicate: same key as selected 't128x256x64 c2x1 1cta clc'
c: diversity: 2 keys with tile 128x256 already selected
f: cap: 3 candidates already selected""")
    with pytest.raises(ValueError, match="max_candidates must be >= 1"):
        select(cands, max_candidates=0)


def test_a_duplicate_names_its_key_kernel_truthfully():
    """The kernel a duplicate points to is selected, or the reason says it was dropped too."""
    mk = lambda name, t, cl, est: Candidate(name, t, cl, False, False, "clc", est)
    cands = [
        mk("a", (128, 256, 64), (2, 1), 10.0), mk("b", (128, 256, 64), (1, 1), 11.0),
        mk("c", (128, 256, 64), (4, 1), 12.0), mk("c2", (128, 256, 32), (4, 1), 12.5),  # c: 3rd key of the tile
        mk("d", (64, 64, 64), (1, 1), 13.0), mk("d2", (64, 64, 32), (1, 1), 13.5),
    ]
    sel, dropped = select(cands, max_candidates=2, per_tile=2)
    assert [c.name for c in sel] == ["a", "b"]
    assert_expected_inline("\n".join(f"{c.name}: {r}" for c, r in dropped), """\
c2: duplicate: same key as 't128x256x64 c4x1 1cta clc', the key's best kernel, itself dropped by diversity
d2: duplicate: same key as 't64x64x64 c1x1 1cta clc', the key's best kernel, itself dropped by cap
c: diversity: 2 keys with tile 128x256 already selected
d: cap: 2 candidates already selected""")


def test_explain_golden_for_hopper():
    from ptc.gemm import format_plan

    text = format_plan(plan(GemmProblem("mm", 4096, 4096, 4096), "H100_SXM", max_candidates=4), show_dropped=3)
    assert_expected_inline(text, """\
problem  mm:bf16xbf16->bf16:m4096n4096k4096:tn   target H100_SXM (sm_90a, 132 SMs)
epilogue -: none
kernels  28 compatible, 4 selected, 24 dropped

  rank  candidate                            est us
     1  t128x256x64 c2x2 1cta static          146.3
     2  t128x256x64 c2x1 1cta static          168.3
     3  t128x128x64 c2x2 1cta static          179.4
     4  t64x256x64 c2x2 1cta static           209.6

  dropped:
    t128x128x64 c1x1 1cta static          333.5  duplicate: same key as 't128x128x32 c1x1 1cta static', the key's best kernel, itself dropped by cap
    t128x64x64 c1x1 1cta static           498.8  duplicate: same key as 't128x64x32 c1x1 1cta static', the key's best kernel, itself dropped by cap
    t64x128x64 c1x1 1cta static           498.8  duplicate: same key as 't64x128x32 c1x1 1cta static', the key's best kernel, itself dropped by cap
    ... 21 more (cap 18, diversity 2, duplicate 1); `ptc gemm explain --all` (show_dropped=None) lists them""")


from hypothesis import given, settings, strategies as st  # noqa: E402

_cand = st.builds(
    lambda i, tm, tn, cm, cn, two, efc, est: Candidate(f"k{i}", (tm, tn, 64), (cm, cn), two, efc, "clc", est),
    st.integers(0, 10**6), st.sampled_from([64, 128, 256]), st.sampled_from([32, 64, 128, 256]),
    st.sampled_from([1, 2, 4, 8, 16]), st.sampled_from([1, 2, 4]), st.booleans(), st.booleans(),
    st.sampled_from([5.0, 7.5, 10.0, 20.0]),
)


@settings(max_examples=30, deadline=None)
@given(st.lists(_cand, max_size=40, unique_by=lambda c: c.name), st.integers(1, 8), st.integers(1, 3), st.booleans())
def test_select_invariants(cands, cap, per_tile, efc):
    sel, dropped = select(cands, max_candidates=cap, per_tile=per_tile, efc=efc)
    assert sorted(c.name for c in sel + [c for c, _ in dropped]) == sorted(c.name for c in cands)
    assert len(sel) <= cap and len({c.key for c in sel}) == len(sel)
    assert all(c.efc == efc and c.cluster[0] * c.cluster[1] <= 8 for c in sel)
    tiles = [(c.tile[0], c.tile[1], c.two_cta) for c in sel]
    assert all(tiles.count(t) <= per_tile for t in tiles)
    labels = {c.label for c in sel}
    for _, reason in dropped:
        if reason.startswith("duplicate: same key as selected "):
            assert reason.split("selected ", 1)[1].strip("'") in labels
    # nothing dropped for the cap is better than something selected
    capped = [c for c, r in dropped if r.startswith("cap")]
    assert all(c.estimate_us >= max(s.estimate_us for s in sel) for c in capped)
    assert select(list(reversed(cands)), max_candidates=cap, per_tile=per_tile, efc=efc)[0] == sel


def test_planning_leaves_the_processes_excepthook_alone():
    """Importing cutlass replaces sys.excepthook with one that cuts frames out of every
    uncaught exception's traceback; ptc's probes and planning import it and put the hook back.
    A fresh interpreter, since cutlass installs its hook once per process."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "hook = sys.excepthook\n"
        "import ptc.gemm\n"
        "from ptc import _compat\n"
        "assert _compat.CUTLASS_DSL and _compat.CUTLASS_OPERATORS\n"
        "ptc.gemm.plan(ptc.gemm.GemmProblem('mm', 16, 14336, 4096), 'B200', epilogue='bias,silu')\n"
        "assert 'cutlass' in sys.modules\n"
        "print(sys.excepthook is hook)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "True"
