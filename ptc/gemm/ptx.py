"""Compile selected CuTeDSL kernels to PTX on a machine without a GPU.

``cute.compile`` lowers a kernel through MLIR to PTX (and cubin) for the arch
named by ``CUTE_DSL_ARCH``; no driver is needed except for the occupancy query
some operators make (``get_max_active_clusters``), which the worker answers from
the target's SM count. Compilation runs in a child process so that environment
variables and that stub never touch the caller's process::

    kernels = compile_ptx(GemmProblem("mm", 256, 256, 256), "B200", [candidate.name], epilogue="bias,relu")
    kernels[0].ptx     # PTX text, `.target sm_100a`

The PTX of one kernel is byte-identical across runs for a pinned
``nvidia-cutlass-dsl`` version, so tests can pin its hash.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import List, Sequence, Tuple

from ptc.errors import FeatureUnavailable, PtcError, PtcValueError
from ptc.gemm import catalog
from ptc.gemm.epilogue import Epilogue
from ptc.gemm.problem import GemmProblem
from ptc.gemm.targets import Target, target as _target

__all__ = ["CompiledKernel", "compile_ptx", "compile_many"]

# modules whose get_max_active_clusters asks the driver (same list torch 2.14.1 patches in its workers)
_OCCUPANCY_MODULES = (
    "cutlass.operators.providers.cutedsl.integration_utils.mma",
    "cutlass.operators.providers.cutedsl.gemm.sm100_persistent",
    "cutlass.operators.providers.cutedsl.gemm.sm100_persistent_preferred_cluster",
    "cutlass.operators.providers.cutedsl.gemm.sm100_static_persistent_efc",
    "cutlass.operators.providers.cutedsl.gemm.sm100_dense_blockscaled_static_persistent",
    "cutlass.operators.providers.cutedsl.gemm.sm90_static_persistent",
)


@dataclass(frozen=True)
class CompiledKernel:
    """One compiled kernel: ``name`` (operator), ``ptx`` text, ``seconds`` to compile."""

    name: str
    ptx: str
    seconds: float

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.ptx.encode()).hexdigest()


def compile_ptx(
    problem: GemmProblem,
    target: "Target | str",
    operators: Sequence[str],
    epilogue: "Epilogue | str | None" = None,
    timeout: float = 300.0,
) -> List[CompiledKernel]:
    """Compile the named ``cutlass.operators`` operators for ``problem`` on ``target`` to PTX.

    Raises:
      FeatureUnavailable: ``cutlass.operators`` is not installed.
      PtcValueError: an operator name does not support this problem on this target.
      PtcError: the worker failed (its stderr tail is in the message).
    """
    return compile_many(target, [(problem, operators, epilogue)], timeout)


def compile_many(
    target: "Target | str",
    items: Sequence[Tuple[GemmProblem, Sequence[str], "Epilogue | str | None"]],
    timeout: float = 300.0,
) -> List[CompiledKernel]:
    """:func:`compile_ptx` for several ``(problem, operators, epilogue)`` items in one
    child process (its start-up, ~3 s of imports, is paid once); results in order."""
    tgt = _target(target)
    if not catalog.available():
        raise FeatureUnavailable("compiling CuTeDSL kernels needs pip install 'ptc[gemm]'", "ptc[gemm]")
    job = {"arch": tgt.arch, "sms": tgt.sms, "items": []}
    for problem, operators, epilogue in items:
        epi = Epilogue.parse(epilogue)
        source = epi.evt_source() if epi else None
        known = {o.metadata.operator_name for o in catalog.operators(problem, tgt, source, epi)}
        unknown = [name for name in operators if name not in known]
        if unknown:
            raise PtcValueError(
                f"operators {unknown} do not support {problem.signature()} on sm_{tgt.arch}"
                + (f" with epilogue {epi.spec()!r}" if epi else "") + "; take names from ptc.gemm.plan(...).selected"
            )
        job["items"].append(
            {"signature": problem.signature(), "operators": list(operators), "epilogue": epi.spec(), "alpha": epi.alpha}
        )
    with tempfile.TemporaryDirectory(prefix="ptc_ptx_") as dump:
        env = dict(os.environ, CUTE_DSL_ARCH=f"sm_{tgt.arch}", CUTE_DSL_KEEP="ir,ptx", CUTE_DSL_DUMP_DIR=dump,
                   CUTE_DSL_NO_CACHE="1")
        proc = subprocess.run(
            [sys.executable, "-m", "ptc.gemm.ptx"], input=json.dumps(job), capture_output=True, text=True,
            env=env, timeout=timeout,
        )
    if proc.returncode != 0:
        raise PtcError(f"PTX compile worker failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return [CompiledKernel(k["name"], k["ptx"], k["seconds"]) for k in out]


def _worker() -> None:  # runs in the child process
    import importlib
    import time

    job = json.loads(sys.stdin.read())
    tgt = Target("worker", job["arch"], job["sms"], 1.0, 1.0, 1.0, 1.0, 1, 8, True)

    def max_active_clusters(cluster_shape=None, *a, **k):
        size = 1
        for d in (cluster_shape or (1,)):
            size *= int(d)
        return job["sms"] // max(1, size)

    for name in _OCCUPANCY_MODULES:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(mod, "get_max_active_clusters"):
            mod.get_max_active_clusters = max_active_clusters
    results = []
    for item in job["items"]:
        problem = GemmProblem.from_signature(item["signature"])
        epi = Epilogue.parse(item["epilogue"], item["alpha"])
        source = epi.evt_source() if epi else None
        args = catalog.meta_arguments(problem, source, epi)
        ops = {o.metadata.operator_name: o for o in catalog.operators(problem, tgt, source, epi)}
        for name in item["operators"]:
            start = time.perf_counter()
            artifact = ops[name].compile(args, target_sm=tgt.arch)
            ptx = artifact.compiled_obj.__ptx__
            if ptx is None:
                raise SystemExit("the DSL kept no PTX (CUTE_DSL_KEEP must include ir and ptx)")
            results.append({"name": name, "ptx": str(ptx), "seconds": round(time.perf_counter() - start, 3)})
    print(json.dumps(results))


if __name__ == "__main__":
    _worker()
