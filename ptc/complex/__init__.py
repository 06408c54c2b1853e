"""Complex tensors compiled by Inductor into fused real kernels, forward and backward.

Stock Inductor runs almost every complex op on its eager kernel. Under ptc's
backend each complex op becomes real arithmetic on (real, imag) pairs read from
the original interleaved memory (no copies; complex64 on the CPU through each
element's int64 bits, see :func:`ptc.complex.pair.split`), so Inductor
fuses it into vectorised real kernels, in forward and backward graphs alike::

    import ptc.complex
    f = torch.compile(f, backend=ptc.complex.backend())    # or @ptc.complex.compile

Nothing happens on import; other ``torch.compile`` calls are untouched.
GEMM/GEMV, linalg and FFTs keep their library kernels (inputs and outputs
cross zero-copy), and a graph that is only library kernels plus at most one
other op runs as it is, on eager's kernels (nothing to fuse, no wrapper cost;
``backend(library_graphs="compile")`` compiles it anyway); ops that raise for complex in eager raise the same way; ops
without a rule run on their ATen kernel. ``coverage()`` lists which is which.
A graph ptc fails to compile is compiled by stock Inductor instead, with the
reason logged (see :class:`ComplexBackend`).
"""

from ptc.complex.backend import ComplexBackend, backend, compile, config_patches, decompositions
from ptc.complex.coverage import coverage, format_coverage
from ptc.complex.inspect import aten_calls, complex_fallbacks, generated_code
from ptc.complex.pair import Pair
from ptc.complex.rewrite import Report, rewrite

__all__ = [
    "backend",
    "compile",
    "ComplexBackend",
    "coverage",
    "format_coverage",
    "rewrite",
    "Report",
    "Pair",
    "decompositions",
    "config_patches",
    "generated_code",
    "complex_fallbacks",
    "aten_calls",
    "capability",
]


def capability(feature: str) -> str:
    """Status line for ``ptc env``."""
    c = coverage()
    n_rules = sum(1 for e in c if e.status == "decomposed")
    n_lib = sum(1 for e in c if e.status == "library")
    return f"backend(): {n_rules} complex ATen ops as fused real code (fwd+bwd); {n_lib} kept on BLAS/FFT/LAPACK"
