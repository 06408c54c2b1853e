"""ptc's exceptions are catchable as the builtin a user would expect."""

import pytest

import ptc
from ptc import errors


@pytest.mark.parametrize(
    "exc, builtin",
    [
        (errors.PtcTypeError, TypeError),
        (errors.PtcValueError, ValueError),
        (errors.SpecError, ValueError),
        (errors.SpecViolation, ValueError),
        (errors.BranchMismatch, TypeError),
        (errors.CaptureError, RuntimeError),
        (errors.FeatureUnavailable, RuntimeError),
        (errors.PeerFailure, RuntimeError),
        (errors.WrongResult, RuntimeError),
    ],
)
def test_each_error_is_a_ptc_error_and_its_builtin(exc, builtin):
    assert issubclass(exc, errors.PtcError)
    assert issubclass(exc, builtin)
    assert getattr(ptc, exc.__name__) is exc
    assert exc.__name__ in errors.__all__


def test_peer_failure_names_ranks_and_generation():
    e = errors.PeerFailure([3, 1, 3], generation=2, detail="heartbeat lost")
    assert e.ranks == (1, 3)
    assert e.generation == 2
    assert str(e) == "peer rank(s) 1, 3 failed in generation 2: heartbeat lost"
    with pytest.raises(RuntimeError, match="rank"):
        raise e


def test_feature_unavailable_names_requirement():
    e = errors.FeatureUnavailable("needs a GPU", requirement="CUDA_AVAILABLE")
    assert e.requirement == "CUDA_AVAILABLE"
    assert str(e) == "needs a GPU"
