"""ptc's C++ extensions: built with the machine's compiler, cached, loaded.

Each extension is one C++ source compiled with ``torch.utils.cpp_extension``
and ``ninja`` (30-50 s on 2 cores), once per torch version and source: the
module's name carries both, so a build is never loaded for another.  Builds
are cached under ``$PTC_NATIVE_DIR`` (default ``~/.cache/ptc/native``).
Users of an extension decide when to build (:meth:`Extension.load` with
``build=True``); loading an existing build is cheap.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import re
import shutil
import threading
from pathlib import Path
from types import ModuleType
from typing import Iterator, List, Optional

import torch

from ptc.errors import FeatureUnavailable

DIR_ENV = "PTC_NATIVE_DIR"


def missing_tools() -> Optional[str]:
    """What building needs and this machine lacks (None: a compiler and ninja are there)."""
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        return f"a C++ compiler ({compiler!r} is not on PATH; install g++ or set CXX)"
    if shutil.which("ninja") is None and _ninja_package_dir() is None:
        return "ninja (pip install ninja)"
    return None


def _ninja_package_dir() -> Optional[str]:
    """Where the ``ninja`` PyPI package keeps its binary (None: not installed)."""
    try:
        import ninja  # type: ignore[import-not-found]
    except ImportError:
        return None
    return ninja.BIN_DIR


@contextlib.contextmanager
def _ninja_on_path() -> Iterator[None]:
    """``PATH`` with the ``ninja`` package's binary during the block (torch's builder runs
    ``ninja`` from ``PATH``), as it was after it."""
    package_dir = None if shutil.which("ninja") is not None else _ninja_package_dir()
    if package_dir is None:
        yield
        return
    before = os.environ.get("PATH")
    os.environ["PATH"] = package_dir + os.pathsep + (before or "")
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PATH", None)
        else:
            os.environ["PATH"] = before


class Extension:
    """One C++ extension: ``stem`` names it, ``source`` is its file, ``what`` says what it is
    (in errors), ``requirement`` is the FeatureUnavailable requirement name, ``command`` builds it."""

    def __init__(self, stem: str, source: Path, what: str, requirement: str, command: str) -> None:
        self.stem, self.source, self.what, self.requirement, self.command = stem, source, what, requirement, command
        self.modules: List[ModuleType] = []  # the loaded module (at most one)
        self._lock = threading.Lock()

    def module_name(self) -> str:
        """torch's version and the source's digest in the name, so neither is ever mixed up."""
        torch_tag = re.sub(r"[^0-9A-Za-z]+", "_", str(torch.__version__))
        digest = hashlib.sha256(self.source.read_bytes()).hexdigest()[:12]
        return f"{self.stem}_{torch_tag}_{digest}"

    def build_dir(self) -> Path:
        """Where it is built and cached (``$PTC_NATIVE_DIR``/<name>)."""
        base = os.environ.get(DIR_ENV) or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "ptc", "native"
        )
        return Path(base) / self.module_name()

    def built_library(self) -> Optional[Path]:
        name = self.module_name()
        for path in self.build_dir().glob(f"{name}*.so"):
            return path
        return None

    def load(self, build: bool = False) -> Optional[ModuleType]:
        """The module: loaded from the cache, or built first when ``build`` (None if not built).

        Raises :class:`ptc.FeatureUnavailable` when ``build`` is true and it cannot be built.
        """
        with self._lock:
            if self.modules:
                return self.modules[0]
            library = self.built_library()
            if library is not None:
                module = self._import(library)
            elif build:
                module = self._build()
            else:
                return None
            self.modules.append(module)
            return module

    def status(self) -> str:
        """One line for ``ptc env``: loaded, built, or what building it needs."""
        if self.modules:
            return "loaded"
        if self.built_library() is not None:
            return f"built ({self.build_dir()})"
        missing = missing_tools()
        if missing is not None:
            return f"not built; building needs {missing}"
        return f"not built; `{self.command}` builds it (30-50 s)"

    def _import(self, path: Path) -> ModuleType:
        spec = importlib.util.spec_from_file_location(self.module_name(), path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    def _build(self) -> ModuleType:
        missing = missing_tools()
        if missing is not None:
            raise FeatureUnavailable(f"{self.what} needs {missing}", requirement=self.requirement)
        import logging
        import warnings

        quiet = logging.getLogger("torch.utils.cpp_extension")
        level = quiet.level
        quiet.setLevel(logging.ERROR)  # "No CUDA runtime is found" from a CUDA build of torch on a CPU machine
        try:
            from torch.utils.cpp_extension import load as load_extension
        finally:
            quiet.setLevel(level)

        directory = self.build_dir()
        directory.mkdir(parents=True, exist_ok=True)
        try:
            with warnings.catch_warnings(), _ninja_on_path():
                warnings.simplefilter("ignore")
                return load_extension(self.module_name(), [str(self.source)], build_directory=str(directory),
                                      extra_cflags=["-O2"], verbose=False)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - a failed build is a missing feature, with its reason
            detail = str(exc).strip().splitlines()[-12:]
            raise FeatureUnavailable(f"building {self.what} failed:\n  " + "\n  ".join(detail),
                                     requirement=self.requirement) from exc  # fmt: skip
