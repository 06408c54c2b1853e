"""Small example programs with loops and branches, shared by the demo, the tests
and the benchmarks. Each takes and returns tensors and has an eager reference."""

from __future__ import annotations

import torch
from torch._higher_order_ops.while_loop import while_loop

from ptc.control_flow import switch

__all__ = ["counted", "newton", "nested", "cond_in_while", "switch_in_while", "swap", "rng_body"]


def _zero(like: torch.Tensor) -> torch.Tensor:
    """The int64 loop counter, on ``like``'s device (a CPU counter would keep a
    CUDA loop out of the graph)."""
    return torch.zeros((), dtype=torch.int64, device=like.device)


def counted(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """``n`` steps of ``x = 0.5 * x + 1`` (the trip count is data)."""
    i, y = while_loop(lambda i, x: i < n, lambda i, x: (i + 1, x * 0.5 + 1), (_zero(x), x))
    return y + i


def newton(a: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """``n`` Newton steps for ``sqrt(a)``, elementwise (the benchmark's body)."""
    _, y = while_loop(lambda i, y: i < n, lambda i, y: (i + 1, 0.5 * (y + a / y)), (_zero(a), a.clone() + 1))
    return y


def nested(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """An outer loop of ``a`` trips whose body runs an inner loop of ``b`` trips."""

    def outer_body(i, x):
        _, x = while_loop(lambda j, x: j < b, lambda j, x: (j + 1, x + i.to(x.dtype) + 1), (_zero(x), x))
        return i + 1, x * 0.5

    return while_loop(lambda i, x: i < a, outer_body, (_zero(x), x))[1]


def cond_in_while(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """Even iterations double ``x``, odd ones subtract one."""

    def body(i, x):
        return i + 1, torch.cond(i % 2 == 0, lambda x: x * 2, lambda x: x - 1, (x,))

    i, y = while_loop(lambda i, x: i < n, body, (_zero(x), x))
    return y.sin() + i


def switch_in_while(x: torch.Tensor, n: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Iteration ``i`` applies branch ``i + k`` (clamped to [0, 2]) of a 3-way ``ptc.switch``."""
    branches = [lambda x: x * 2, lambda x: x - 1, lambda x: x.cos()]

    def body(i, x):
        return i + 1, switch(i + k, branches, x)

    return while_loop(lambda i, x: i < n, body, (_zero(x), x))[1]


def swap(a: torch.Tensor, b: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """A body swapping its carries: ``(a, b) -> (b, a + 1)``."""
    _, a, b = while_loop(lambda i, a, b: i < n, lambda i, a, b: (i + 1, b.clone(), a + 1), (_zero(a), a, b))
    return a * 10 + b


def rng_body(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """A loop drawing random numbers in its body: ineligible, runs un-graphed."""
    _, y = while_loop(lambda i, x: i < n, lambda i, x: (i + 1, x + torch.rand_like(x)), (_zero(x), x))
    return y
