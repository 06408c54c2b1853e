"""The guided tour behind ``ptc demo``: one section per feature, run in order.

A feature adds its section by adding one line to ``SECTIONS``: its name (what
``ptc demo NAME`` takes), a one-line title, and ``"module:function"`` of a
function that prints what the feature does on real inputs, from a module of
this package (``ptc.demos.<section>``; ``env`` prints ``ptc env``'s report).
The whole tour must finish in under 3 minutes on a 2-core CPU.
"""

from __future__ import annotations

import importlib
import time
from typing import Dict, Iterable, NamedTuple

from ptc.errors import PtcValueError

__all__ = ["SECTIONS", "run"]


class Section(NamedTuple):
    title: str
    target: str  # "module:function"


SECTIONS: Dict[str, Section] = {
    "env": Section("what this install can do", "ptc._env:demo"),
    "specs": Section("one shape spec for compile, export and checks", "ptc.demos.specs:main"),
    "switch": Section("N-way switch lowered to a torch.cond tree", "ptc.demos.switch:main"),
    "cudagraph": Section("while_loop/cond captured with conditional nodes (CPU simulator)", "ptc.demos.cudagraph:main"),
    "complex": Section("complex tensors compiled into fused real kernels", "ptc.demos.complex:main"),
    "gemm": Section("CuTeDSL GEMM candidates, fusion decisions and a shared autotune DB", "ptc.demos.gemm:main"),
    "flight_recorder": Section("a gloo desync recorded, dumped and diagnosed", "ptc.demos.flight_recorder:main"),
    "ft": Section("a worker SIGKILLed mid-allreduce; the others go on, it rejoins", "ptc.demos.ft:main"),
}


def _resolve(target: str):
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)


def run(names: Iterable[str] = ()) -> None:
    """Run the named sections (all of them when ``names`` is empty)."""
    names = list(names) or list(SECTIONS)
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        raise PtcValueError(
            f"ptc demo: unknown section(s) {', '.join(unknown)}; "
            f"choose from: {', '.join(SECTIONS)}"
        )
    total = time.perf_counter()
    for name in names:
        section = SECTIONS[name]
        print(f"=== ptc demo {name}: {section.title} ===", flush=True)
        start = time.perf_counter()
        _resolve(section.target)()
        print(f"--- {name} done in {time.perf_counter() - start:.1f} s\n", flush=True)
    print(f"ptc demo finished in {time.perf_counter() - total:.1f} s", flush=True)
