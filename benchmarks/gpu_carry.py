"""Carry ptc.gemm's CuTeDSL packages to a GPU machine that has no package registry.

The lent GPU machine (Python 3.12, CUDA 13, no registry) takes at most 64 MiB
per call, and the packages ptc.gemm needs are ~330 MB unpacked (~72 MB with
xz). So they travel in two parts, each under 64 MiB, in two calls made one
after the other while the machine stays warm:

Here (any Linux machine with PyPI)::

    python benchmarks/gpu_carry.py prepare            # -> .gpu_carry/part1.tar.xz, part2.tar.xz

On the GPU machine (the ``run`` tool; ``carry`` names the part)::

    # call 1, carry [".gpu_carry/part1.tar.xz"]
    python3 benchmarks/gpu_carry.py unpack .gpu_carry/part1.tar.xz /tmp/ptc_site
    # call 2, carry [".gpu_carry/part2.tar.xz"], within the machine's idle window
    python3 benchmarks/gpu_carry.py unpack .gpu_carry/part2.tar.xz /tmp/ptc_site && \\
      PYTHONPATH=$PWD:/tmp/ptc_site python3 benchmarks/gpu_check.py --out $OUT/gpu

``prepare`` downloads the wheels pinned in pyproject.toml's ``gemm`` extra (and
their native helpers) for the target Python, unzips them into one directory
(``pip install --no-deps --target`` does the same for these wheels: none has a
``.data`` part), adds a ``sitecustomize.py`` that processes the directory's
``.pth`` files (PYTHONPATH alone skips them, and cutlass-dsl finds its
``dsl_packages`` through one), and packs it: part 1 holds the files over
``--big-mb`` (the 193 MB MLIR extension: ~48 MiB packed), part 2 the rest
(~18 MiB), so each call stays under the limit with the working tree beside it.

The packages' other requirements (cuda-bindings, networkx, protobuf,
typing-extensions) are not carried: the GPU machine's torch image has them (the
same set of packages ran on the lent H200 before). Checked here with a Python 3.11
/ CUDA 12 bundle: unpacked into a fresh directory, cutlass.operators imports from
it and ptc compiles a Hopper kernel to PTX (in a child process, so the .pth
handling reaches children too).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 64 * 2**20
# besides the gemm extra: what cutlass-dsl and cutlass.operators import at run time
HELPERS = ("nvidia-cutlass-dsl-libs-base", "nvidia-cutlass-dsl-libs-core", "apache-tvm-ffi==0.1.15.post2")
SITECUSTOMIZE = (
    "# written by ptc's benchmarks/gpu_carry.py: read this directory's .pth files\n"
    "import os, site\n"
    "site.addsitedir(os.path.dirname(os.path.abspath(__file__)))\n"
)


def pinned_gemm_requirements(pyproject: Path = ROOT / "pyproject.toml") -> list:
    """The ``gemm`` extra's requirements, as pyproject.toml pins them."""
    m = re.search(r"^gemm\s*=\s*\[(.*?)\]", pyproject.read_text(), re.M | re.S)
    if m is None:
        raise SystemExit("pyproject.toml has no gemm extra")
    return re.findall(r'"([^"]+)"', m.group(1))


def requirements(python_version: str, cuda: str) -> list:
    gemm = pinned_gemm_requirements()
    dsl = next((r.split("==")[1] for r in gemm if r.startswith("nvidia-cutlass-dsl==")), None)
    if dsl is None:
        raise SystemExit("the gemm extra does not pin nvidia-cutlass-dsl")
    helpers = [h if "==" in h else f"{h}=={dsl}" for h in HELPERS]
    return gemm + helpers + [f"nvidia-cutlass-dsl-libs-cu{cuda}=={dsl}"]


def unzip_all(wheels, site: Path) -> None:
    for w in wheels:
        with zipfile.ZipFile(w) as z:
            if any(".data/" in n for n in z.namelist()):
                raise SystemExit(f"{w.name} has a .data part: install it with pip on the target instead")
            z.extractall(site)
            for info in z.infolist():  # zipfile drops the executable bit: keep it (shared libraries)
                mode = info.external_attr >> 16
                if mode:
                    (site / info.filename).chmod(mode & 0o777)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)


def pack(site: Path, out: Path, big_bytes: int) -> list:
    """``site`` as two xz tarballs: files of ``big_bytes`` or more, then the rest."""
    files = sorted(p for p in site.rglob("*") if p.is_file())
    big = [p for p in files if p.stat().st_size >= big_bytes]
    parts = []
    for name, group in (("part1", big), ("part2", [p for p in files if p not in big])):
        path = out / f"{name}.tar.xz"
        with tarfile.open(path, "w:xz", preset=9) as tar:
            for p in group:
                tar.add(p, arcname=str(p.relative_to(site)))
        parts.append(path)
    return parts


def unpack(part: Path, site: Path) -> None:
    site.mkdir(parents=True, exist_ok=True)
    with tarfile.open(part, "r:xz") as tar:
        if hasattr(tarfile, "tar_filter"):  # Python >= 3.12 (and patched 3.8+): refuse paths outside site
            tar.extractall(site, filter="tar")
        else:
            tar.extractall(site)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="download, unzip and pack (here)")
    p.add_argument("--out", default=str(ROOT / ".gpu_carry"))
    p.add_argument("--python-version", default="3.12")
    p.add_argument("--cuda", default="13", help="CUDA major of the GPU machine (libs-cu12 or libs-cu13)")
    p.add_argument("--big-mb", type=float, default=100.0, help="files this large go to part 1")
    u = sub.add_parser("unpack", help="unpack one part into a directory (on the GPU machine)")
    u.add_argument("part")
    u.add_argument("site")
    args = parser.parse_args(argv)
    if args.cmd == "unpack":
        unpack(Path(args.part), Path(args.site))
        print(f"unpacked {args.part} into {args.site}; use PYTHONPATH=$PWD:{args.site}")
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        wheels_dir, site = Path(tmp) / "wheels", Path(tmp) / "site"
        reqs = requirements(args.python_version, args.cuda)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
                        args.python_version, "--platform", "manylinux_2_28_x86_64", "-d", str(wheels_dir), *reqs],
                       check=True)
        unzip_all(sorted(wheels_dir.glob("*.whl")), site)
        parts = pack(site, out, int(args.big_mb * 2**20))
    for part in parts:
        size = part.stat().st_size
        print(f"{part}: {size / 2**20:.1f} MiB" + ("" if size < LIMIT else "  OVER 64 MiB: lower --big-mb or split again"))
    return 0 if all(p.stat().st_size < LIMIT for p in parts) else 1


if __name__ == "__main__":
    raise SystemExit(main())
