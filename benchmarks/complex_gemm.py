"""Complex64 GEMMs on the CPU: ATen's complex GEMM beside ptc's real GEMM on oneDNN, in one process run.

    python benchmarks/complex_gemm.py [--shapes 256x512x512,64x64x64] [--threads 1] [--rounds 5]

For each ``m x k x n`` shape, ``a @ b.mT`` (``a`` row-major ``m x k``, ``b``
row-major ``n x k``, as in a complex ``Linear`` layer) timed as: eager
(ATen's complex GEMM), compiled by ptc with ``gemm="onednn"`` (the real
form, ``ptc.complex.realgemm``), and compiled by ptc with ``gemm="auto"``
(what the default picks on this machine: its choice is printed). The min over
``--rounds`` samples of repeated calls; ratios are eager's time over each.
"""

from __future__ import annotations

import argparse
import warnings

import torch

import ptc.complex as pc
from ptc.complex import realgemm
from ptc.demos.complex import sample_ms

SHAPES = "256x512x512,512x256x512,256x256x256,128x128x128,64x64x64,1024x1024x1024,32x512x512,4096x64x64,1x2048x2048"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default=SHAPES)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=5)
    ns = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(ns.threads)
    if not realgemm.available():
        print("this torch has no oneDNN: nothing to compare")
        return
    print(f"torch {torch.__version__}, {ns.threads} thread(s), min of {ns.rounds} samples (ms per call)")
    print(f"{'m x k x n':>16} {'ATen (eager)':>13} {'ptc onednn':>18} {'ptc auto':>18}  auto's choice")
    for shape in ns.shapes.split(","):
        m, k, n = (int(s) for s in shape.split("x"))
        g = torch.Generator().manual_seed(0)
        a = torch.randn(m, k, dtype=torch.complex64, generator=g)
        b = torch.randn(n, k, dtype=torch.complex64, generator=g)

        def f(a, b):
            return a @ b.mT

        torch._dynamo.reset()
        runs = {"eager": f}
        backends = {}
        for mode in ("onednn", "auto"):
            backends[mode] = pc.backend(gemm=mode)
            runs[mode] = torch.compile(f, backend=backends[mode], dynamic=False)
            torch.testing.assert_close(runs[mode](a, b), f(a, b), rtol=1e-4, atol=1e-3)
        best = {name: min(sample_ms(run, (a, b), 20.0) for _ in range(ns.rounds)) for name, run in runs.items()}
        choice = "real GEMM" if backends["auto"].report.real_gemm else "ATen"
        e = best["eager"]
        print(f"{shape:>16} {e:13.3f} {best['onednn']:9.3f} ({e / best['onednn']:4.2f}x) "
              f"{best['auto']:9.3f} ({e / best['auto']:4.2f}x)  {choice}")


if __name__ == "__main__":
    main()
