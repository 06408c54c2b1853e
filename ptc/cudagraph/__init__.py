"""``while_loop``, ``cond`` and ``ptc.switch`` inside one CUDA graph.

* ``torch.compile(fn, backend="ptc_cudagraphs")``: Inductor compiles the
  straight-line code, the whole program (loops and branches included) is
  captured into one CUDA graph whose WHILE/IF conditional nodes read the
  predicate on the device: no host sync per iteration.
* ``capture(fn, *inputs, executor=...)``: the same as a function API, with a
  ``report`` of what was captured and why anything was not.
* ``SimGraph``: a CPU capture simulator with the CUDA graph's interface; any
  host read during capture raises ``ptc.CaptureError``.

``cond`` becomes IF nodes (IF/ELSE where the graph has it); a ``ptc.switch``
(its tree of ``cond`` on ``index < m``) becomes one SWITCH node where the graph
offers SWITCH (CUDA >= 12.8: the simulator; torch has no SWITCH binding), else
the IF tree.

Ineligible loops (input mutation, RNG, collectives, host reads, unsupported
carries, no CUDA, CUDA < 12.4, no binding) run un-graphed with a logged, counted
reason.
"""

from ptc import _compat
from ptc.cudagraph.api import CapturedFunction, CapturedProgram, Report, capture, counters
from ptc.cudagraph.backend import make_backend, ptc_cudagraphs
from ptc.cudagraph.eligibility import CATEGORIES, Support
from ptc.cudagraph.plan import Block, Branch, Loop, Segment, build_plan
from ptc.cudagraph.simulator import SimGraph

__all__ = [
    "capture",
    "CapturedFunction",
    "CapturedProgram",
    "Report",
    "counters",
    "make_backend",
    "ptc_cudagraphs",
    "Support",
    "CATEGORIES",
    "SimGraph",
    "build_plan",
    "Block",
    "Branch",
    "Loop",
    "Segment",
    "capability",
]


def capability(feature: str) -> str:
    """Status line for ``ptc env``."""
    if not _compat.CUDA_BUILD:
        gpu = "none, this torch is a CPU-only build"
    else:
        if _compat.CUDA_GRAPH_WHILE_NODES:
            gpu = "WHILE+IF nodes via torch's binding"
        elif _compat.CUDA_GRAPH_IF_NODES:
            gpu = "IF nodes via torch's binding; WHILE only from ptc's own nodes (cuda-python)"
        else:
            gpu = "conditional nodes only from ptc's own nodes (cuda-python)"
        if not _compat.CUDA_AVAILABLE:
            gpu += "; no CUDA device here"
    return f"backend 'ptc_cudagraphs' + capture(); CPU simulator; GPU: {gpu} (GPU path unverified)"
