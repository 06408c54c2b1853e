"""ptc's exception types.

Every ptc error derives from :class:`PtcError` *and* from the builtin a user
would already catch for that kind of mistake, so ``except ValueError`` keeps
working around ptc calls.  Messages name the user's argument (``y.shape[0]``,
``index``), the rule it broke, the values that broke it, and what to change.

=====================  =================  ===========================================
type                   also a             raised when
=====================  =================  ===========================================
``PtcTypeError``       ``TypeError``      an argument has the wrong type
``PtcValueError``      ``ValueError``     an argument has the right type, a bad value
``SpecError``          ``ValueError``     a shape spec itself is malformed
``SpecViolation``      ``ValueError``     a call's inputs break a (valid) spec
``SpecConstraintError`` ``ValueError``    a model's code constrains a spec's variables
                                          beyond what the spec states (a ``SpecError``)
``BranchMismatch``     ``TypeError``      control-flow branches disagree in structure
                                          or dtype
``CaptureError``       ``RuntimeError``   a CUDA-graph capture (real or simulated)
                                          does something capture forbids
``FeatureUnavailable`` ``RuntimeError``   a feature needs something this install
                                          lacks (a GPU, an optional package)
``PeerFailure``        ``RuntimeError``   distributed peers failed; ``.ranks`` names them
``CoordinatorUnreachable`` ``ConnectionError``  no fault-tolerance coordinator answers
                                          at the address, or what answers does not
                                          speak its protocol
``JobFinished``        ``RuntimeError``   a fault-tolerant worker came (back) after its
                                          job ended; ``.exit_code`` is what its
                                          process should exit with
``WrongResult``        ``RuntimeError``   a compiled kernel's result disagrees with
                                          what it computes by definition; ptc
                                          refuses the kernel
=====================  =================  ===========================================
"""

from __future__ import annotations

from typing import Iterable, Tuple

__all__ = [
    "PtcError",
    "PtcTypeError",
    "PtcValueError",
    "SpecError",
    "SpecViolation",
    "SpecConstraintError",
    "BranchMismatch",
    "CaptureError",
    "FeatureUnavailable",
    "PeerFailure",
    "CoordinatorUnreachable",
    "JobFinished",
    "WrongResult",
]


class PtcError(Exception):
    """Base class of every exception ptc raises on purpose."""


class PtcTypeError(PtcError, TypeError):
    """An argument has the wrong type."""


class PtcValueError(PtcError, ValueError):
    """An argument has an acceptable type but a bad value."""


class SpecError(PtcError, ValueError):
    """A shape spec is malformed (unknown key, bad range, unsolvable expression)."""


class SpecViolation(PtcError, ValueError):
    """A call's inputs break a shape spec; raised before any compiled code runs."""


class SpecConstraintError(SpecError):
    """A model's own code constrains a spec's variables beyond what the spec states.

    Raised where torch reports a constraint violation for a spec'd call
    (``ptc.specs.export``, a compiled call). ``constraints`` lists each one
    in the spec's terms (``ptc.specs.diagnose.Constraint``: the rule, the
    model's source line and the spec change that states it); the exception
    torch raised is the ``__cause__``.
    """

    def __init__(self, message: str, constraints=()) -> None:
        super().__init__(message)
        self.constraints = list(constraints)


class BranchMismatch(PtcError, TypeError):
    """Branches of a control-flow op return different pytree structures or dtypes."""


class CaptureError(PtcError, RuntimeError):
    """A graph capture did something capture forbids (e.g. a host read)."""


class FeatureUnavailable(PtcError, RuntimeError):
    """A feature needs something this install lacks.

    ``requirement`` names what is missing, e.g. the ``ptc._compat`` probe
    ``"CUDA_AVAILABLE"`` or the extra ``"ptc[gemm]"``.
    """

    def __init__(self, message: str, requirement: str = "") -> None:
        super().__init__(message)
        self.requirement = requirement


class PeerFailure(PtcError, RuntimeError):
    """One or more distributed peers failed.

    ``ranks`` is the sorted tuple of failed ranks (in the generation the
    failure was seen in); ``generation`` is that generation's number.
    """

    def __init__(self, ranks: Iterable[int], generation: int, detail: str = "") -> None:
        self.ranks: Tuple[int, ...] = tuple(sorted(set(int(r) for r in ranks)))
        self.generation = int(generation)
        names = ", ".join(str(r) for r in self.ranks) or "unknown"
        msg = f"peer rank(s) {names} failed in generation {self.generation}"
        if detail:
            msg += f": {detail}"
        super().__init__(msg)


class CoordinatorUnreachable(PtcError, ConnectionError):
    """No fault-tolerance coordinator could be reached: nothing answers at the
    address (or the bootstrap store that names it) within the connect timeout,
    or the server there does not speak the coordinator's protocol."""


# What a worker process exits with when its job ended before it could (re)join: 0, because the
# job itself completed; a non-zero code would make a launcher such as torchrun count the job as
# failed and restart every worker of a finished job.
EXIT_JOB_FINISHED = 0


class JobFinished(PtcError, RuntimeError):
    """A fault-tolerant worker came (back) after its job had finished: every
    member left cleanly, nobody is left to admit it.  Nothing is wrong and
    nothing is left to do; a worker script should print the message on one
    line and exit with ``exit_code`` (:data:`EXIT_JOB_FINISHED`)."""

    exit_code = EXIT_JOB_FINISHED


class WrongResult(PtcError, RuntimeError):
    """A compiled kernel's result disagrees with its definition (e.g. ``epilogue(a @ b)``).

    ptc checks a kernel the first time it runs on a shape and refuses it from then on:
    Inductor's autotuner scores the refused kernel as infinitely slow, and a call
    outside autotuning raises instead of returning a wrong tensor.
    """
