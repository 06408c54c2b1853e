"""ptc: compiler front-end extensions for torch.compile and torch.export.

The public API, re-exported from the packages that implement it. ``ptc.switch`` is
imported on first use, so ``import ptc`` stays cheap (it does not import torch).
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
    "switch",
]


def __getattr__(name: str):
    if name == "switch":
        from ptc.control_flow import switch

        globals()["switch"] = switch
        return switch
    raise AttributeError(f"module 'ptc' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | {"switch"})
