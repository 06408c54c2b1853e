"""The capability report behind ``ptc env``: what torch offers natively, what ptc adds."""

from __future__ import annotations

import importlib
import platform
import sys
from dataclasses import dataclass
from typing import Callable, Dict, List

import torch

from ptc import _compat

__all__ = ["FEATURES", "Feature", "report", "format_report"]


@dataclass(frozen=True)
class Feature:
    """One ptc capability: where it lives and what stock torch offers instead."""

    name: str
    package: str
    summary: str
    native: Callable[[], str]


def _native_specs() -> str:
    if _compat.NATIVE_DYNAMIC_SPEC_DECORATOR and _compat.NATIVE_DYNAMIC_SPEC_EXPORT:
        return "@dynamic_spec for compile/export/make_fx (unbacked only)"
    if _compat.NATIVE_SHAPES_SPEC and _compat.COMPILE_SHAPES_SPEC_KWARG:
        return "torch.compile(shapes_spec=) only"
    return "none (export Dim API, mark_dynamic)"


def _native_switch() -> str:
    if _compat.NATIVE_SWITCH_HOP:
        return "prototype switch HOP (not serializable, no vmap)"
    return "none (nest torch.cond)"


def _native_cudagraph() -> str:
    if _compat.CUDA_GRAPH_WHILE_NODES:
        return "WHILE/IF nodes for backend='cudagraphs' only, not Inductor"
    if _compat.CUDA_GRAPH_IF_NODES:
        return "IF nodes for cond only, no WHILE"
    return "none in this build"


def _native_complex() -> str:
    if _compat.NATIVE_COMPLEX_WRAPPER:
        return "eager kernels; opt-in enable_complex_wrapper (forward graphs only, partial)"
    return "none (complex ops fall back to eager kernels)"


def _native_gemm() -> str:
    if _compat.NATIVE_NVGEMM and _compat.NATIVE_NVGEMM_EPILOGUE_FUSION:
        return "NVGEMM backend string (fused epilogues, no DB/explain)"
    if _compat.NATIVE_NVGEMM:
        return "NVGEMM backend string (no epilogue fusion)"
    return "NVGEMM not usable with installed packages"


def _native_fault_tolerance() -> str:
    if _compat.NATIVE_RECONFIGURE:
        return "gloo _reconfigure (no detection, quorum or rejoin)"
    if _compat.DISTRIBUTED:
        return "none (rebuild process groups by hand)"
    return "torch.distributed not built"


def _native_flight_recorder() -> str:
    if _compat.PROCESS_GROUP_HOOKS:
        return "native recorder (gloo: never completes/dumps); Python PG hooks"
    if _compat.DISTRIBUTED:
        return "native recorder (gloo: never completes/dumps)"
    return "torch.distributed not built"


FEATURES: List[Feature] = [
    Feature("specs", "ptc.specs", "@dynamic_spec declarative shape specs", _native_specs),
    Feature("switch", "ptc.control_flow", "N-way switch lowered to torch.cond", _native_switch),
    Feature("cudagraph", "ptc.cudagraph", "while_loop in CUDA graphs", _native_cudagraph),
    Feature("complex", "ptc.complex", "complex decompositions for Inductor", _native_complex),
    Feature("gemm", "ptc.gemm", "CuTeDSL GEMM autotuning (NVGEMM)", _native_gemm),
    Feature(
        "fault_tolerance",
        "ptc.distributed",
        "fault-tolerant process groups",
        _native_fault_tolerance,
    ),
    Feature(
        "flight_recorder",
        "ptc.distributed",
        "Flight Recorder for any backend",
        _native_flight_recorder,
    ),
]


def _ptc_status(feature: Feature) -> str:
    """Ask the feature's package; a package that does not exist yet says so."""
    try:
        module = importlib.import_module(feature.package)
    except ModuleNotFoundError as e:
        if e.name is not None and feature.package.startswith(e.name):
            return "not implemented yet"
        raise
    capability = getattr(module, "capability", None)
    if capability is None:
        return "not implemented yet"
    return str(capability(feature.name))


def _gpu() -> Dict[str, object]:
    available = _compat.CUDA_AVAILABLE
    names = []
    if available:
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {"available": available, "count": len(names), "names": names}


def report() -> Dict[str, object]:
    """The capability report as plain data (what ``ptc env --json`` prints)."""
    import ptc

    return {
        "ptc": ptc.__version__,
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "torch": {
            "version": torch.__version__,
            "git": torch.version.git_version,
            "build": f"cuda {torch.version.cuda}" if torch.version.cuda else "cpu",
        },
        "gpu": _gpu(),
        "probes": _compat.probe_values(),
        "features": [
            {
                "name": f.name,
                "summary": f.summary,
                "native": f.native(),
                "ptc": _ptc_status(f),
            }
            for f in FEATURES
        ],
    }


def format_report(data: Dict[str, object]) -> str:
    """Render :func:`report` for a terminal."""
    torch_info = data["torch"]
    gpu = data["gpu"]
    lines = [
        f"ptc {data['ptc']} on Python {data['python']} ({data['platform']})",
        f"torch {torch_info['version']} ({torch_info['build']}, git {torch_info['git'][:10]})",
        "GPU: " + (", ".join(gpu["names"]) if gpu["available"] else "none (CPU only)"),
        "",
        "feature probes (ptc._compat):",
    ]
    probes = _compat.probes()
    for name, value in data["probes"].items():
        lines.append(f"  {'yes' if value else 'no ':3}  {name:31} {probes[name].doc}")
    lines += ["", "features:"]
    rows = [("feature", "torch natively", "ptc")] + [
        (f["name"], f["native"], f["ptc"]) for f in data["features"]
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(2)]
    for r in rows:
        lines.append(f"  {r[0]:{widths[0]}}  {r[1]:{widths[1]}}  {r[2]}")
    return "\n".join(lines)


def demo() -> None:
    """Demo section: the install's capabilities."""
    print(format_report(report()))
    sys.stdout.flush()
