"""Text views of traced control flow, for people and golden tests."""

from __future__ import annotations

from typing import List

import torch
from torch.fx import GraphModule, Node

__all__ = ["render_cond_tree", "cond_depth"]

# bookkeeping ops that say nothing about what a branch computes
_HIDDEN = {"lt", "sym_size", "_assert_scalar", "sym_constrain_range_for_size"}


def render_cond_tree(gm: GraphModule) -> str:
    """The ``torch.cond`` nesting of ``gm`` with each predicate and each leaf's ops.

    Shows aten ops by name with their constant arguments, nothing else (no node
    names, no shapes), so one program renders the same on every torch version::

        clamp(0, 2)
        cond(index < 2)
          true:
            cond(index < 1)
              ...
    """
    return "\n".join(_render(gm, ""))


def cond_depth(gm: GraphModule) -> int:
    """How deep ``torch.cond`` calls nest in ``gm`` (0 when there are none)."""
    depth = 0
    for node in gm.graph.nodes:
        if _is_cond(node):
            depth = max(depth, 1 + max(cond_depth(getattr(gm, node.args[i].target)) for i in (1, 2)))
    return depth


def _is_cond(node: Node) -> bool:
    return node.op == "call_function" and node.target is torch.ops.higher_order.cond


def _render(gm: GraphModule, indent: str) -> List[str]:
    lines: List[str] = []
    for node in gm.graph.nodes:
        if _is_cond(node):
            pred = node.args[0]
            bound = pred.args[1] if isinstance(pred, Node) and len(pred.args) > 1 else "?"
            lines.append(f"{indent}cond(index < {bound})")
            for label, child in (("true", node.args[1]), ("false", node.args[2])):
                lines.append(f"{indent}  {label}:")
                lines += _render(getattr(gm, child.target), indent + "    ")
        elif node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            name = node.target._schema.name.split("::")[1]
            if name in _HIDDEN:
                continue
            constants = tuple(a for a in node.args if not isinstance(a, (Node, list, tuple)))
            lines.append(f"{indent}{name}{constants if constants else ''}")
    return lines
