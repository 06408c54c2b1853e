"""ptc.distributed: fault-tolerant process groups and a Flight Recorder for any c10d backend.

Fault tolerance (the :mod:`ptc.distributed.ft` package; see its ``group`` and ``train``)::

    from ptc.distributed import init_fault_tolerant, Trainer

    ft = init_fault_tolerant()                      # coordinator from args, $PTC_FT_COORDINATOR or torchrun's store
    trainer = Trainer(ft, model, optimizer)         # ddp=True: torch DDP with ptc's comm hook
    while trainer.step < steps:
        trainer.run_step(lambda info: loss(trainer.model, info.step, info.worker_id).backward())

=============================  ================================================
name                           what
=============================  ================================================
``init_fault_tolerant``        join (or start) a job; returns the group
``FaultTolerantGroup``         abortable collectives, ``recover``, ``rejoin``,
                               ``grow``, ``subgroups``
``Trainer``                    commit vote with the gradients, state sync,
                               DDP hook
``Coordinator``                membership by generation, liveness, abort
``LocalJob``                   coordinator + worker processes on this machine
``ft_faults``                  the fault-injection kit (module)
=============================  ================================================

Flight Recorder (the :mod:`ptc.distributed.flight_recorder` package, imported lazily, so
``ptc fr-trace`` and ``ptc env`` stay quick)::

    from ptc.distributed import FlightRecorder, enable_flight_recorder, analyze_dumps

    rec = enable_flight_recorder(dump_dir="fr", dump_signal=signal.SIGUSR1)
    ...                                  # collectives on the default group are recorded
    rec.dump("checkpoint")               # fr/rank_<rank>, readable by torchfrtrace
    print(analyze_dumps("fr").format())  # what `ptc fr-trace fr` prints

=============================  ================================================
name                           what
=============================  ================================================
``FlightRecorder``             the recorder (attach, detach, on_reconfigure,
                               dump, snapshot, entries, close)
``enable_flight_recorder``     create one and attach it to a group
``disable_flight_recorder``    close one, or all of this process's
``flight_recording``           context manager: record a group for a block
``dump_flight_recorders``      dump every recorder of the process (the
                               fault-tolerant runtime calls it on failure)
``flight_recorder_reconfigure``  move a group to a new generation in every
                               recorder attached to it
``analyze_dumps``              the analysis behind ``ptc fr-trace``
``load_dumps``                 read a directory of dumps (ptc's or torch's)
=============================  ================================================
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "Coordinator",
    "FaultTolerantGroup",
    "LocalJob",
    "Trainer",
    "init_fault_tolerant",
    "FlightRecorder",
    "analyze_dumps",
    "capability",
    "disable_flight_recorder",
    "dump_flight_recorders",
    "enable_flight_recorder",
    "flight_recorder_reconfigure",
    "flight_recording",
    "load_dumps",
]

_LAZY = {
    "Coordinator": ("ptc.distributed.ft.coordinator", "Coordinator"),
    "FaultTolerantGroup": ("ptc.distributed.ft.group", "FaultTolerantGroup"),
    "init_fault_tolerant": ("ptc.distributed.ft.group", "init_fault_tolerant"),
    "Trainer": ("ptc.distributed.ft.train", "Trainer"),
    "LocalJob": ("ptc.distributed.ft.launch", "LocalJob"),
    "FlightRecorder": ("ptc.distributed.flight_recorder.recorder", "FlightRecorder"),
    "enable_flight_recorder": ("ptc.distributed.flight_recorder.recorder", "enable"),
    "disable_flight_recorder": ("ptc.distributed.flight_recorder.recorder", "disable"),
    "flight_recording": ("ptc.distributed.flight_recorder.recorder", "recording"),
    "dump_flight_recorders": ("ptc.distributed.flight_recorder.recorder", "dump_all"),
    "flight_recorder_reconfigure": ("ptc.distributed.flight_recorder.recorder", "on_reconfigure"),
    "analyze_dumps": ("ptc.distributed.flight_recorder.analysis", "analyze"),
    "load_dumps": ("ptc.distributed.flight_recorder.analysis", "load_dumps"),
}

# Module names this package answers to (``from ptc.distributed import ft_faults as F``), and the
# modules they are.  ft_launch, ft_native, fr_native, coordinator and ft_example are also files
# here, for ``python -m`` and ``from ptc.distributed.ft_launch import ...``.
_MODULES = {
    "coordinator": "ptc.distributed.ft.coordinator",
    "ft_faults": "ptc.distributed.ft.faults",
    "ft_group": "ptc.distributed.ft.group",
    "ft_launch": "ptc.distributed.ft.launch",
    "ft_native": "ptc.distributed.ft.native",
    "ft_train": "ptc.distributed.ft.train",
    "ft_wire": "ptc.distributed.ft.wire",
    "fr_analysis": "ptc.distributed.flight_recorder.analysis",
    "fr_capture": "ptc.distributed.flight_recorder.capture",
    "fr_native": "ptc.distributed.flight_recorder.native",
    "fr_ops": "ptc.distributed.flight_recorder.ops",
    "ft_example": "ptc.demos.ft_example",
    "ft_demo": "ptc.demos.ft",
    "fr_demo": "ptc.demos.flight_recorder",
}


def capability(name: str) -> str:
    """What ptc provides for feature ``name`` on this install (for ``ptc env``)."""
    if name == "flight_recorder":
        from ptc import _compat

        if not _compat.DISTRIBUTED:
            return "unavailable (torch.distributed not built)"
        from ptc.distributed.flight_recorder import native as fr_native

        via = "PG hooks" if _compat.PROCESS_GROUP_HOOKS else "PG method wrapper"
        return f"any backend via {via}; torchfrtrace-readable dumps; native core: {fr_native.status()}"
    if name == "fault_tolerance":
        from ptc import _compat

        if not _compat.DISTRIBUTED:
            return "unavailable (torch.distributed not built)"
        from ptc.distributed.ft import native as ft_native

        engine = "native gloo reconfigure" if _compat.GLOO_RECONFIGURE else "gloo rebuild per generation"
        return (f"coordinator, abort broadcast, rejoin with live state, commit vote; {engine}; "
                f"native DDP hook: {ft_native.status()}")  # fmt: skip
    return "not implemented yet"


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        module = importlib.import_module(_MODULES[name])
        globals()[name] = module
        return module
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(target[0]), target[1])
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | set(_MODULES))
