"""``ptc demo specs``: one spec, one compiled graph for 20 shapes, a clear violation, an export."""

from __future__ import annotations

import sympy
import torch

from ptc.errors import SpecViolation
from ptc.specs import Var, dynamic_spec, export, tensor

B = Var("B", min=2, max=16)
T = Var("T", min=8, max=256)
H = Var("H", min=2, max=8)


@dynamic_spec(
    {"x": tensor(B, T, H * 64), "mask": tensor(B, T)},
    assumptions=[sympy.Eq(T % 8, 0)],
)
def attention_block(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Self-attention with H heads of width 64 over a (B, T, H*64) batch."""
    b, t, hidden = x.shape
    heads = x.view(b, t, hidden // 64, 64).transpose(1, 2)  # (B, H, T, 64)
    scores = heads @ heads.transpose(-1, -2) / 8.0
    scores = scores.masked_fill(mask[:, None, None, :] == 0, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ heads
    return out.transpose(1, 2).reshape(b, t, hidden)


def main() -> None:
    print("spec: x: (B, T, H*64), mask: (B, T), with 2<=B<=16, 8<=T<=256, 2<=H<=8, T % 8 == 0")
    graphs = []

    def counting_inductor(gm, example_inputs):
        from torch._inductor.compile_fx import compile_fx

        graphs.append(gm)
        return compile_fx(gm, example_inputs)

    compiled = torch.compile(attention_block, backend=counting_inductor, fullgraph=True)
    shapes = [(b, t, h) for b, t, h in zip([2, 3, 4, 5, 8] * 4, [8, 16, 24, 40, 64, 72, 128, 256, 32, 48] * 2, [2, 3, 4, 8] * 5)]
    worst = 0.0
    for b, t, h in shapes:
        x, mask = torch.randn(b, t, h * 64), torch.ones(b, t)
        mask[:, -1] = 0
        worst = max(worst, (compiled(x, mask) - attention_block(x, mask)).abs().max().item())
    print(f"compiled {len(shapes)} calls with different (B, T, H): {len(graphs)} graph(s), max |compiled - eager| = {worst:.2e}")

    x, mask = torch.randn(4, 20, 128), torch.ones(4, 20)
    try:
        compiled(x, mask)
    except SpecViolation as e:
        print(f"x of shape {tuple(x.shape)} -> SpecViolation: {e}")
    x, mask = torch.randn(4, 16, 128), torch.ones(4, 24)
    try:
        compiled(x, mask)
    except SpecViolation as e:
        print(f"mask of shape {tuple(mask.shape)} -> SpecViolation: {e}")
    print(f"graphs after the violations: {len(graphs)} (no recompiles)")

    ep = export(attention_block, (torch.randn(4, 16, 128), torch.ones(4, 16)))
    print("\nptc.specs.export -> range_constraints:")
    for symbol, bounds in ep.range_constraints.items():
        print(f"  {symbol}: [{bounds.lower}, {bounds.upper}]")
    asserts = [
        n.args[1] for n in ep.graph.nodes
        if n.op == "call_function" and n.target is torch.ops.aten._assert_scalar.default
    ]
    if asserts:
        print("runtime assertions in the exported graph:")
        for text in asserts:
            print(f"  {text}")
    try:
        ep.module()(torch.randn(4, 20, 128), torch.ones(4, 20))
    except Exception as e:  # the exported program is plain torch: its own error type
        print(f"exported program on T=20: {type(e).__name__}: {str(e).splitlines()[0]}")
