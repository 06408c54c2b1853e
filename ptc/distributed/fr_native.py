"""ptc's native Flight Recorder core: build it, load it, read its records.

The core (``fr_native.cpp``) keeps a recorder's ring buffer in C++ and does
the per-call work there: layouts, sequence ids, times, and the end of each
call, taken from a callback on the Work's future that the backend's own
thread runs without the GIL (or, for a Work without a CPU future: gloo's
send/recv, NCCL's, from a poller thread asking ``isCompleted()`` every
millisecond while such a Work is open).  Where torch has process-group
hooks in C++ (``c10d/Hooks.hpp``, torch 2.14) the core registers them
itself, so a recorded collective runs no Python at all; elsewhere ptc's
Python method wrapper hands calls to it (:mod:`ptc.distributed.fr_capture`).

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

import hashlib
import importlib.util
import os
import re
import shutil
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import List, Optional

import torch

from ptc.errors import FeatureUnavailable

__all__ = ["SOURCE", "build_dir", "load", "module_name", "status"]

SOURCE = Path(__file__).with_name("fr_native.cpp")
DIR_ENV = "PTC_NATIVE_DIR"
_LOCK = threading.Lock()
_MODULE: List[ModuleType] = []


def module_name() -> str:
    """The extension's name: torch's version and the source's digest, so neither is ever mixed up."""
    torch_tag = re.sub(r"[^0-9A-Za-z]+", "_", str(torch.__version__))
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    return f"ptc_fr_native_{torch_tag}_{digest}"


def build_dir() -> Path:
    """Where the extension is built and cached (``$PTC_NATIVE_DIR``/<name>)."""
    base = os.environ.get(DIR_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "ptc", "native"
    )
    return Path(base) / module_name()


def _built_library() -> Optional[Path]:
    name = module_name()
    for path in build_dir().glob(f"{name}*.so"):
        return path
    return None


def _import(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(module_name(), path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _missing_tools() -> Optional[str]:
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        return f"a C++ compiler ({compiler!r} is not on PATH; install g++ or set CXX)"
    if shutil.which("ninja") is None:
        try:
            import ninja  # the PyPI package ships the binary  # type: ignore[import-not-found]

            os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
        except ImportError:
            return "ninja (pip install ninja)"
    return None


def _build() -> ModuleType:
    missing = _missing_tools()
    if missing is not None:
        raise FeatureUnavailable(f"the native Flight Recorder core needs {missing}", requirement="fr_native")
    import logging
    import warnings

    quiet = logging.getLogger("torch.utils.cpp_extension")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # "No CUDA runtime is found" from a CUDA build of torch on a CPU machine
    try:
        from torch.utils.cpp_extension import load as load_extension
    finally:
        quiet.setLevel(level)

    directory = build_dir()
    directory.mkdir(parents=True, exist_ok=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return load_extension(
                module_name(), [str(SOURCE)], build_directory=str(directory), extra_cflags=["-O2"], verbose=False
            )
    except Exception as exc:  # noqa: BLE001 - a failed build is a missing feature, with its reason
        detail = str(exc).strip().splitlines()[-12:]
        raise FeatureUnavailable(
            "building the native Flight Recorder core failed:\n  " + "\n  ".join(detail), requirement="fr_native"
        ) from exc


def load(build: bool = False) -> Optional[ModuleType]:
    """The core's module: loaded from the cache, or built first when ``build`` (None if not built).

    Raises :class:`ptc.FeatureUnavailable` when ``build`` is true and it cannot be built.
    """
    with _LOCK:
        if _MODULE:
            return _MODULE[0]
        library = _built_library()
        if library is not None:
            module = _import(library)
        elif build:
            module = _build()
        else:
            return None
        _MODULE.append(module)
        return module


def status() -> str:
    """One line for ``ptc env``: loaded, built, or what building it needs."""
    if _MODULE:
        hooks = "C++ process-group hooks" if _MODULE[0].HOOKS else "ptc's method wrapper"
        return f"loaded (calls reach it through {hooks})"
    if _built_library() is not None:
        return f"built ({build_dir()})"
    missing = _missing_tools()
    if missing is not None:
        return f"not built; building needs {missing}"
    return "not built; `python -m ptc.distributed.fr_native` builds it (30-40 s)"


def main(argv: Optional[List[str]] = None) -> int:
    module = load(build=True)
    assert module is not None
    print(f"ptc native Flight Recorder core for torch {torch.__version__}: {module.__file__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
