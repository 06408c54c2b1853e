"""ptc: compiler front-end extensions for torch.compile and torch.export.

The public API, re-exported from the packages that implement it.
"""

from ptc.errors import (
    BranchMismatch,
    CaptureError,
    FeatureUnavailable,
    PeerFailure,
    PtcError,
    PtcTypeError,
    PtcValueError,
    SpecConstraintError,
    SpecError,
    SpecViolation,
    WrongResult,
)

__version__ = "0.1.0"

__all__ = [
    "BranchMismatch",
    "CaptureError",
    "FeatureUnavailable",
    "PeerFailure",
    "PtcError",
    "PtcTypeError",
    "PtcValueError",
    "SpecConstraintError",
    "SpecError",
    "SpecViolation",
    "WrongResult",
]
