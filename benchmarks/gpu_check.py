"""GPU check for ptc.cudagraph: the GPU tests, the benchmark and the demo in one run.

    python benchmarks/gpu_check.py [--out gpu_check_results] [--python PYTHON]

Runs, each with a bounded time (total under 8 minutes):

  1. ``ptc env --json``                                  -> OUT/env.json
  2. ``pytest tests/cudagraph`` (the ``cuda`` tests run
     where a GPU is present, their CPU twins beside them) -> OUT/pytest.txt, OUT/pytest.xml
  3. ``benchmarks/cudagraph.py`` (10/100/1000 iterations) -> OUT/bench.txt, OUT/bench.json
  4. ``ptc demo cudagraph`` (with the GPU speedup line)   -> OUT/demo.txt

and writes OUT/summary.md with each step's exit status and time. Exit status 0
only if every step passed and a GPU was present (so a CPU-only run cannot be
mistaken for a GPU check). Written for an NVIDIA Hopper (or newer) machine;
not yet run on one.
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
    ("pytest", ["-m", "pytest", "tests/cudagraph", "-q", "-p", "no:logging", "-rs",
                "--timeout", "120", "--junitxml", "{out}/pytest.xml"], 240),
    ("bench", ["benchmarks/cudagraph.py", "--iters", "10,100,1000", "--rounds", "5",
               "--json", "{out}/bench.json"], 150),
    ("demo", ["-m", "ptc", "demo", "cudagraph"], 60),
]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu_check_results")
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)

    import torch

    gpu = torch.cuda.is_available()
    lines = [
        "# ptc.cudagraph GPU check",
        "",
        f"- torch {torch.__version__} (CUDA build {torch.version.cuda})",
        f"- GPU: {torch.cuda.get_device_name(0) if gpu else 'NONE: this is not a GPU check'}",
        "",
        "| step | exit | seconds | output |",
        "|---|---|---|---|",
    ]
    ok = gpu
    for name, cmd, timeout in STEPS:
        cmd = [args.python] + [c.format(out=out) for c in cmd]
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
