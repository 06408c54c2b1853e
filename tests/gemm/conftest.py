"""Helpers for the Inductor tests: compile with caches off, inject timings, launch on CPU."""

import contextlib

import pytest
import torch

from ptc import _compat

needs_ops = pytest.mark.skipif(
    not _compat.CUTLASS_OPERATORS, reason="needs pip install 'ptc[gemm]' (in the test extra)"
)


@contextlib.contextmanager
def injected_timings(rule):
    """Benchmarking a choice returns ``rule(choice_name)`` (ms) instead of measuring;
    ``rule`` returning None measures for real. Runs after ptc's own hook."""
    from torch._inductor import select_algorithm as sa

    def timed(choice):
        real = choice.benchmark

        def benchmark(*args, out):
            t = rule(choice.name)
            return real(*args, out=out) if t is None else t

        return benchmark

    def fn(choices):
        for c in choices:
            c.benchmark = timed(c)
        return choices

    sa.add_preprocessing_fn(fn)
    try:
        yield
    finally:
        sa.get_algorithm_selector_cache().preprocessing_fns.remove(fn)


def compile_and_run(f, *args):
    """``torch.compile(f, mode="max-autotune")(*args)`` with caches off; returns (out, code)."""
    import torch._inductor.config as ic
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    with ic.patch(force_disable_caches=True):
        out, code = run_and_get_code(torch.compile(f, mode="max-autotune"), *args)
    return out, "\n".join(code)


class CpuLauncher:
    """Stands in for the GPU launch: records each call and computes the kernel's
    result with the epilogue's reference semantics (the EVT's meaning)."""

    def __init__(self, epilogue=None):
        self.calls = []
        self.epilogue = epilogue

    def __call__(self, operator, arch, a, b, out, source, operands):
        self.calls.append((operator, arch, tuple(a.shape), tuple(b.shape), source, tuple(operands)))
        acc = a.float() @ b.float()
        if self.epilogue is None:
            out.copy_(acc.to(out.dtype))
        else:
            out.copy_(self.epilogue.apply(acc, out.dtype, **operands))
