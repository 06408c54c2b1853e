"""benchmarks/gpu_carry.py offline: a wheel's files, its .pth and executable bits survive
prepare's unzip + pack into two parts and unpack on the other side; the pins are pyproject's."""

import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _carry():
    spec = importlib.util.spec_from_file_location("ptc_gpu_carry", ROOT / "benchmarks" / "gpu_carry.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _wheel(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("pkg_a/__init__.py", "VALUE = 7\n")
        big = zipfile.ZipInfo("pkg_a/libbig.so")
        big.external_attr = 0o755 << 16
        z.writestr(big, b"\0" * 4096)
        z.writestr("pkg_a/extra/hidden_mod.py", "HIDDEN = 'found through the .pth'\n")
        z.writestr("pkg_a.pth", "import sys, os, pkg_a; sys.path.insert(0, os.path.join(pkg_a.__path__[0], 'extra'))\n")
    return path


def test_pack_then_unpack_keeps_files_modes_and_pth(tmp_path):
    carry = _carry()
    site, out, there = tmp_path / "site", tmp_path / "out", tmp_path / "there"
    out.mkdir()
    carry.unzip_all([_wheel(tmp_path / "pkg_a-1.0-py3-none-any.whl")], site)
    part1, part2 = carry.pack(site, out, big_bytes=1024)
    carry.unpack(part1, there)
    assert [p.name for p in there.rglob("*") if p.is_file()] == ["libbig.so"]  # only the big file in part 1
    carry.unpack(part2, there)
    assert os.access(there / "pkg_a" / "libbig.so", os.X_OK)
    env = {**os.environ, "PYTHONPATH": str(there)}
    proc = subprocess.run([sys.executable, "-c", "import hidden_mod; print(hidden_mod.HIDDEN)"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert proc.stdout.strip() == "found through the .pth", proc.stderr


def test_requirements_are_the_pinned_gemm_extra_plus_its_native_parts():
    import tomllib

    carry = _carry()
    gemm = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gemm"]
    reqs = carry.requirements("3.12", "13")
    assert reqs[: len(gemm)] == gemm
    dsl = next(r.split("==")[1] for r in gemm if r.startswith("nvidia-cutlass-dsl=="))
    assert f"nvidia-cutlass-dsl-libs-cu13=={dsl}" in reqs and f"nvidia-cutlass-dsl-libs-base=={dsl}" in reqs
