"""GPU check for ptc.cudagraph, ptc.gemm and the Flight Recorder: GPU tests, benchmarks, demo in one run.

    python benchmarks/gpu_check.py [--out gpu_check_results] [--python PYTHON]
                                   [--only cudagraph|gemm|fr] [--deadline-s 480]

Runs, each step with a bounded time and all of them within ``--deadline-s``:

  1. ``ptc env --json``                                   -> OUT/env.json
  2. ``pytest`` of the ``cuda`` tests of tests/cudagraph
     (their CPU twins run in CI)                           -> OUT/cudagraph_pytest.txt, .xml
  3. ``benchmarks/cudagraph.py`` (10/100/1000 iterations)  -> OUT/cudagraph_bench.txt, bench.json
  4. ``ptc demo cudagraph`` (with the GPU speedup line)    -> OUT/cudagraph_demo.txt
  5. ``pytest tests/distributed/test_fr_cuda.py``: the Flight
     Recorder's native core on NCCL (builds the core: needs
     a C++ compiler and ninja on the machine)              -> OUT/fr_pytest.txt, .xml
  6. ``pytest tests/gemm/test_cuda.py``                     -> OUT/gemm_pytest.txt, .xml
  7. ``benchmarks/gemm.py`` (correctness of every kernel
     kind, then the LLM-shaped GEMMs)                      -> OUT/gemm_bench.txt, OUT/gemm/

and writes OUT/summary.md with each step's exit status and time. Exit status 0
only if every step passed and a GPU was present (so a CPU-only run cannot be
mistaken for a GPU check). Written for an NVIDIA Hopper (or newer) machine.

On a GPU machine without a package registry, carry ptc.gemm's CuTeDSL packages
there first with ``benchmarks/gpu_carry.py`` (two calls under 64 MiB each); the
gemm steps report them absent otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

STEPS = [
    # name, command (after the python executable), timeout in seconds
    ("env", ["-m", "ptc", "env", "--json"], 60),
    ("cudagraph_pytest", ["-m", "pytest", "tests/cudagraph/test_cuda.py", "-m", "cuda", "-q", "-p", "no:logging",
                          "-p", "no:cacheprovider", "-rs", "--timeout", "120",
                          "--junitxml", "{out}/cudagraph_pytest.xml"], 200),
    ("cudagraph_bench", ["benchmarks/cudagraph.py", "--iters", "10,100,1000", "--rounds", "5",
                         "--json", "{out}/bench.json"], 120),
    ("cudagraph_demo", ["-m", "ptc", "demo", "cudagraph"], 60),
    ("fr_pytest", ["-m", "pytest", "tests/distributed/test_fr_cuda.py", "-q", "-p", "no:logging", "-p",
                   "no:cacheprovider", "-rs", "--timeout", "150", "--junitxml", "{out}/fr_pytest.xml"], 180),
    ("gemm_pytest", ["-m", "pytest", "tests/gemm/test_cuda.py", "-q", "-p", "no:logging", "-p", "no:cacheprovider",
                     "-rs", "--timeout", "200", "--junitxml", "{out}/gemm_pytest.xml"], 240),
    ("gemm_bench", ["benchmarks/gemm.py", "{out}/gemm", "--budget-s", "{gemm_budget}"], 330),
]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu_check_results")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--only", choices=("cudagraph", "gemm", "fr"), default=None, help="run only this package's steps")
    parser.add_argument("--deadline-s", type=float, default=480.0, help="all steps together end by then")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)

    import torch

    gpu = torch.cuda.is_available()
    lines = [
        "# ptc GPU check (cudagraph, fr, gemm)",
        "",
        f"- torch {torch.__version__} (CUDA build {torch.version.cuda})",
        f"- GPU: {torch.cuda.get_device_name(0) if gpu else 'NONE: this is not a GPU check'}",
        "",
        "| step | exit | seconds | output |",
        "|---|---|---|---|",
    ]
    ok = gpu
    for name, cmd, timeout in STEPS:
        if args.only and name != "env" and not name.startswith(args.only):
            continue
        left = args.deadline_s - (time.perf_counter() - t0)
        if left < 20:
            lines.append(f"| {name} | not run: deadline | 0 | |")
            ok = False
            continue
        # the last step (the gemm benchmark, whose compiles fill any budget) gets all the time left
        timeout = left if name == STEPS[-1][0] else min(timeout, left)
        gemm_budget = max(30, int(timeout - 180))  # the rest: correctness, kernels timed directly, overrun
        cmd = [args.python] + [c.format(out=out, gemm_budget=gemm_budget) for c in cmd]
        log = out / (f"{name}.json" if name == "env" else f"{name}.txt")
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                                  env={**os.environ, "PYTHONUNBUFFERED": "1"})
            code, text = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as e:
            code = "timeout"
            text = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            text += f"\n[gpu_check] {name} ran past {timeout} s"
        seconds = time.perf_counter() - start
        log.write_text(text)
        ok = ok and code == 0
        lines.append(f"| {name} | {code} | {seconds:.0f} | {log.name} |")
        print(f"[gpu_check] {name}: exit {code} in {seconds:.0f} s -> {log}", flush=True)
    bench = out / "bench.json"
    if bench.exists():
        goal = json.loads(bench.read_text()).get("goal")
        lines += ["", f"benchmark goal: {goal}"]
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
