"""ptc's native Flight Recorder core: build it, load it, read its records.

The core (``native.cpp``) keeps a recorder's ring buffer in C++ and does
the per-call work there: layouts, sequence ids, times, and the end of each
call, taken from a callback on the Work's future that the backend's own
thread runs without the GIL (or, for a Work without a CPU future: gloo's
send/recv, NCCL's, from a poller thread asking ``isCompleted()`` every
millisecond while such a Work is open).  Where torch has process-group
hooks in C++ (``c10d/Hooks.hpp``, torch 2.14) the core registers them
itself, so a recorded collective runs no Python at all; elsewhere ptc's
Python method wrapper hands calls to it (:mod:`ptc.distributed.flight_recorder.capture`).

It is a torch C++ extension, compiled once per torch version with the
machine's C++ compiler and ``ninja`` (about 30-40 s on 2 cores) and cached
under ``$PTC_NATIVE_DIR`` (default ``~/.cache/ptc/native``)::

    python -m ptc.distributed.fr_native      # build now (what core="native" does on first use)

``FlightRecorder(core="auto")`` uses the core when it is already built for
this torch and falls back to the Python core otherwise (it never starts a
build by itself); ``core="native"`` builds it if needed, or raises
:class:`ptc.FeatureUnavailable` saying what is missing.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType
from typing import List, Optional

import torch

from ptc._native import DIR_ENV, Extension

__all__ = ["DIR_ENV", "SOURCE", "build_dir", "load", "module_name", "status"]

SOURCE = Path(__file__).with_name("native.cpp")
_EXT = Extension("ptc_fr_native", SOURCE, "the native Flight Recorder core", "fr_native",
                 "python -m ptc.distributed.fr_native")  # fmt: skip


def module_name() -> str:
    """The extension's name: torch's version and the source's digest, so neither is ever mixed up."""
    return _EXT.module_name()


def build_dir() -> Path:
    """Where the extension is built and cached (``$PTC_NATIVE_DIR``/<name>)."""
    return _EXT.build_dir()


def load(build: bool = False) -> Optional[ModuleType]:
    """The core's module: loaded from the cache, or built first when ``build`` (None if not built).

    Raises :class:`ptc.FeatureUnavailable` when ``build`` is true and it cannot be built.
    """
    return _EXT.load(build)


def status() -> str:
    """One line for ``ptc env``: loaded, built, or what building it needs."""
    if _EXT.modules:
        hooks = "C++ process-group hooks" if _EXT.modules[0].HOOKS else "ptc's method wrapper"
        return f"loaded (calls reach it through {hooks})"
    return _EXT.status()


def main(argv: Optional[List[str]] = None) -> int:
    module = load(build=True)
    assert module is not None
    print(f"ptc native Flight Recorder core for torch {torch.__version__}: {module.__file__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
