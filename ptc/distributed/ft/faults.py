"""Fault injection for fault-tolerant jobs: the kit the tests, the demo and the benchmark use.

A fault is a plain record that says *what* happens to *whom* and *when*::

    kill_in_collective(100, worker=2)     # worker 2 SIGKILLs itself inside its 100th collective
    kill_between_steps(50, rank=0)        # whoever is rank 0 dies before computing step 50
    kill_during_reconfigure(2, worker=1)  # worker 1 dies after saying "ready" for generation 2
    stop_at_step(40, worker=3, cont_after=2.0)  # SIGSTOP at step 40, SIGCONT 2 s later (a zombie)

A plan (a list of faults) is given to the group as an object:
``init_fault_tolerant(..., faults=plan)``; a group without one never injects
anything.  Between processes a plan travels as JSON (:func:`encode`,
:func:`decode`, or a file: :func:`save`, :func:`load`): the launcher
(:mod:`ptc.distributed.ft.launch`) writes its ``faults`` to a file, passes
``--faults PATH`` to the initial workers, whose script loads it and hands it
to the group, and sends the SIGCONT of a ``stop`` fault.  Each fault fires at
most once per process.  Points where faults fire:

``collective``    after the ``at``-th collective (counted from 1 in this
                  process) was handed to the backend, before waiting for it:
                  the peers are inside that collective with us
``step``          when the Trainer starts computing step ``at``
``reconfigure``   after this worker told the coordinator it is ready for
                  generation ``at`` (so the others are connecting without it)
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, List, Optional, Sequence, Union

from ptc.errors import PtcValueError

_POINTS = ("collective", "step", "reconfigure")
_ACTIONS = ("kill", "stop")


@dataclass(frozen=True)
class Fault:
    """``action`` ("kill" or "stop") at point ``point`` number ``at``, on the
    worker with id ``worker`` or on whichever worker has rank ``rank`` then."""

    action: str
    point: str
    at: int
    worker: Optional[int] = None
    rank: Optional[int] = None
    cont_after: Optional[float] = None

    def __post_init__(self) -> None:
        if self.action not in _ACTIONS:
            raise PtcValueError(f"action = {self.action!r}: expected one of {_ACTIONS}")
        if self.point not in _POINTS:
            raise PtcValueError(f"point = {self.point!r}: expected one of {_POINTS}")
        if isinstance(self.at, bool) or not isinstance(self.at, int) or self.at < 0:
            raise PtcValueError(f"at = {self.at!r}: expected an int >= 0")
        if (self.worker is None) == (self.rank is None):
            raise PtcValueError("a fault needs exactly one target: worker= (an id) or rank= (whoever holds it then)")
        if self.action == "stop" and (self.cont_after is None or self.cont_after <= 0):
            raise PtcValueError("cont_after: a stop fault needs the seconds after which the launcher sends SIGCONT")

    def targets(self, worker: int, rank: Optional[int]) -> bool:
        return self.worker == worker if self.worker is not None else rank == self.rank


def kill_in_collective(k: int, *, worker: Optional[int] = None, rank: Optional[int] = None) -> Fault:
    """SIGKILL inside the ``k``-th collective of the target worker."""
    return Fault("kill", "collective", k, worker, rank)


def kill_between_steps(step: int, *, worker: Optional[int] = None, rank: Optional[int] = None) -> Fault:
    """SIGKILL before the target computes ``step`` (after step - 1 committed)."""
    return Fault("kill", "step", step, worker, rank)


def kill_during_reconfigure(generation: int, *, worker: Optional[int] = None, rank: Optional[int] = None) -> Fault:
    """SIGKILL after the target said it is ready for ``generation``."""
    return Fault("kill", "reconfigure", generation, worker, rank)


def stop_at_step(step: int, *, cont_after: float, worker: Optional[int] = None, rank: Optional[int] = None) -> Fault:
    """SIGSTOP before the target computes ``step``; SIGCONT ``cont_after`` seconds later."""
    return Fault("stop", "step", step, worker, rank, cont_after)


def encode(faults: Iterable[Fault]) -> str:
    return json.dumps([asdict(f) for f in faults])


def decode(text: str) -> List[Fault]:
    try:
        items = json.loads(text)
    except ValueError as exc:
        raise PtcValueError(f"fault plan: not JSON ({exc})") from None
    return [Fault(**item) for item in items]


def save(path: Union[str, os.PathLike], faults: Iterable[Fault]) -> None:
    """Write a plan to ``path`` (what :func:`load` reads)."""
    Path(path).write_text(encode(faults))


def load(path: Union[str, os.PathLike]) -> List[Fault]:
    """The plan :func:`save` wrote to ``path``."""
    return decode(Path(path).read_text())


class Injector:
    """The faults of one process; :meth:`point` is called at each fault point."""

    def __init__(self, faults: Sequence[Fault], announce: Callable[[str, dict], None]) -> None:
        self.faults = list(faults)
        self.collectives = 0
        self._fired: "set[int]" = set()
        self._announce = announce

    def point(self, point: str, at: int, worker: int, rank: Optional[int]) -> None:
        for i, fault in enumerate(self.faults):
            if i in self._fired or fault.point != point or fault.at != at or not fault.targets(worker, rank):
                continue
            self._fired.add(i)
            data: dict[str, Any] = {"point": point, "at": at, "rank": rank, "pid": os.getpid()}
            if fault.action == "stop":
                data["cont_after"] = fault.cont_after
            self._announce(f"fault_{fault.action}", data)  # sent before the signal: the launcher logs the time
            os.kill(os.getpid(), signal.SIGKILL if fault.action == "kill" else signal.SIGSTOP)
