"""``ptc demo switch``: a mixture-of-experts block that runs one of 5 experts."""

from __future__ import annotations

import io

import torch

from ptc.control_flow import render_cond_tree, switch, tree_depth


class OneOfFiveExperts(torch.nn.Module):
    """Routes the whole batch to the expert its router scores highest.

    Equivalent to ``experts[argmax(router(x).mean(0))](x)``: one expert runs,
    chosen on the device, with no Python-level branch to break tracing.
    """

    def __init__(self, dim: int = 16, n_experts: int = 5) -> None:
        super().__init__()
        self.router = torch.nn.Linear(dim, n_experts)
        self.experts = torch.nn.ModuleList(torch.nn.Linear(dim, dim) for _ in range(n_experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        index = self.router(x).mean(0).argmax()  # an int64 tensor, computed
        branches = [lambda x, e=expert: torch.relu(e(x)) for expert in self.experts]
        return switch(index, branches, x)


def main() -> None:
    torch.manual_seed(0)
    block = OneOfFiveExperts().eval()
    x = torch.randn(4, 16)
    index = int(block.router(x).mean(0).argmax())
    print(f"router picks expert {index} of 5 for this batch")
    eager = block(x)
    print(f"eager: ran only expert {index}; output {tuple(eager.shape)}")

    ep = torch.export.export(block, (x,))
    print(f"\nexported graph (top level); the 5-way switch is a cond tree of depth {tree_depth(5)}:")
    print(ep.graph_module.code.strip())
    print("\nthe whole tree (ptc.control_flow.render_cond_tree):")
    print(render_cond_tree(ep.graph_module))

    buffer = io.BytesIO()
    torch.export.save(ep, buffer)
    size = len(buffer.getvalue())
    buffer.seek(0)
    loaded = torch.export.load(buffer)
    same = torch.allclose(loaded.module()(x), eager)
    print(f"\ntorch.export.save -> {size} bytes; torch.export.load -> same result as eager: {same}")
    for i, xi in enumerate([x, -x, x * 3]):
        pick = int(block.router(xi).mean(0).argmax())
        ok = torch.allclose(loaded.module()(xi), block(xi))
        print(f"  input {i}: expert {pick}, loaded program matches eager: {ok}")

    print("\nsemantics: the index is clamped, and must be an integer:")
    branches = [lambda t: t + 0, lambda t: t + 10, lambda t: t + 20]
    for raw in (-3, 1, 99):
        print(f"  switch({raw}, 3 branches, 0) -> {int(switch(torch.tensor(raw), branches, torch.tensor(0)))}")
    try:
        switch(torch.tensor(1.5), branches, torch.tensor(0))
    except TypeError as e:
        print(f"  switch(tensor(1.5), ...) -> {type(e).__name__}: {e}")
