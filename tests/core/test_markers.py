"""The pytest configuration: markers are declared and `cuda` tests skip with a reason on CPU."""

from pathlib import Path

import pytest

from ptc import _compat

ROOT = Path(__file__).resolve().parents[2]


def test_cuda_marker_skips_without_gpu(pytester):
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text())
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.cuda
        def test_needs_gpu():
            import torch
            assert torch.cuda.is_available()

        def test_cpu_twin():
            pass
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs")
    if _compat.CUDA_AVAILABLE:
        result.assert_outcomes(passed=2)
    else:
        result.assert_outcomes(passed=1, skipped=1)
        result.stdout.fnmatch_lines(["*needs a CUDA GPU*"])


@pytest.mark.parametrize("marker", ["cuda", "slow", "multiprocess"])
def test_markers_are_declared(pytestconfig, marker):
    declared = [line.split(":")[0] for line in pytestconfig.getini("markers")]
    assert marker in declared


def test_every_test_has_a_timeout(pytestconfig):
    assert float(pytestconfig.getini("timeout")) > 0
