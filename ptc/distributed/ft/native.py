"""ptc's native DDP communication hook for ``Trainer(..., ddp=True)``: build it, load it.

The hook (``native.cpp``) does per gradient bucket what the Python hook of
:mod:`ptc.distributed.ft.transports` does (in-place allreduce on the fault-tolerant
group, the vote riding with one bucket, the mean, abort on news), with no
Python per bucket: each bucket is averaged by the backend's own thread when
its allreduce completes.  Same arithmetic, so the same bits as the Python hook.

It is a torch C++ extension, compiled once per torch version with the
machine's C++ compiler and ``ninja`` (30-50 s on 2 cores) and cached under
``$PTC_NATIVE_DIR`` (default ``~/.cache/ptc/native``)::

    python -m ptc.distributed.ft_native      # build now (what ddp_hook="native" does on first use)

``Trainer(..., ddp=True)`` uses it when it is already built (``ddp_hook="auto"``,
never starting a build by itself); ``ddp_hook="native"`` builds it if needed,
or raises :class:`ptc.FeatureUnavailable` saying what is missing.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType
from typing import List, Optional

import torch

from ptc._native import Extension

__all__ = ["SOURCE", "load", "status"]

SOURCE = Path(__file__).with_name("native.cpp")
_EXT = Extension("ptc_ft_native", SOURCE, "the native DDP communication hook", "ft_native",
                 "python -m ptc.distributed.ft_native")  # fmt: skip


def load(build: bool = False) -> Optional[ModuleType]:
    """The hook's module: loaded from the cache, or built first when ``build`` (None if not built).

    Raises :class:`ptc.FeatureUnavailable` when ``build`` is true and it cannot be built.
    """
    return _EXT.load(build)


def status() -> str:
    """One line for ``ptc env``: loaded, built, or what building it needs."""
    return _EXT.status()


def main(argv: Optional[List[str]] = None) -> int:
    module = load(build=True)
    assert module is not None
    print(f"ptc native DDP communication hook for torch {torch.__version__}: {module.__file__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
