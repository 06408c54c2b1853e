#!/usr/bin/env python3
"""Set up and go: ``python3 dev.py demo`` or ``python3 dev.py test``.

Creates (or reuses) a virtualenv under ``.venv/torch-<version>/`` with torch,
ptc (editable) and the test tools, then runs the demo or the test suite in it.

Environment:
  PTC_TORCH   torch version to use (default 2.13.0; CI also runs 2.14.1)
  PTC_VENV    virtualenv directory (default .venv/torch-$PTC_TORCH)

Extra arguments go to ``ptc demo`` (section names) or to pytest.
Needs only python3 with pip and venv; everything else is installed.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
DEFAULT_TORCH = "2.13.0"
EXTRAS = "test"
USAGE = "usage: python3 dev.py {demo|test} [args...]"


def _run(cmd, **kwargs) -> int:
    print("+ " + " ".join(str(c) for c in cmd), flush=True)
    return subprocess.call([str(c) for c in cmd], **kwargs)


def _check(cmd) -> None:
    rc = _run(cmd)
    if rc != 0:
        sys.exit(f"dev.py: command failed with exit code {rc}: {' '.join(map(str, cmd))}")


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _create_venv(venv: Path) -> None:
    if _run([sys.executable, "-m", "venv", venv]) == 0 and _venv_python(venv).exists():
        return
    # Some distributions ship python3 without ensurepip; virtualenv from PyPI works there.
    print("dev.py: `python3 -m venv` failed; trying virtualenv from PyPI", flush=True)
    _check([sys.executable, "-m", "pip", "install", "--user", "virtualenv"])
    _check([sys.executable, "-m", "virtualenv", venv])


def _stamp(torch_version: str) -> str:
    """What the venv was set up from: a change in any of these reinstalls."""
    h = hashlib.sha256()
    h.update(torch_version.encode())
    h.update(EXTRAS.encode())
    h.update((ROOT / "pyproject.toml").read_bytes())
    return h.hexdigest()


def ensure_venv() -> Path:
    torch_version = os.environ.get("PTC_TORCH", DEFAULT_TORCH)
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?", torch_version):
        sys.exit(f"dev.py: PTC_TORCH={torch_version!r} is not a version like 2.13.0 or 2.14.1")
    venv = Path(os.environ.get("PTC_VENV", ROOT / ".venv" / f"torch-{torch_version}"))
    python = _venv_python(venv)
    stamp_file = venv / ".ptc-setup"
    stamp = _stamp(torch_version)
    if python.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
        return python
    if not python.exists():
        print(f"dev.py: creating {venv} for torch {torch_version}", flush=True)
        _create_venv(venv)
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check"]
    _check(pip + [f"torch=={torch_version}"])
    _check(pip + ["-e", f"{ROOT}[{EXTRAS}]"])
    stamp_file.write_text(stamp)
    return python


def main(argv) -> int:
    if not argv or argv[0] not in ("demo", "test"):
        print(USAGE, file=sys.stderr)
        return 2
    command, rest = argv[0], argv[1:]
    python = ensure_venv()
    os.chdir(ROOT)
    if command == "demo":
        return _run([python, "-m", "ptc", "demo", *rest])
    rc = _run([python, "-m", "pytest", *rest])
    if rc == 5:  # pytest: no tests were collected
        print("dev.py: pytest collected no tests; that is a failure", file=sys.stderr)
        return 1
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
