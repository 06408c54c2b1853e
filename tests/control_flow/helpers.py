"""Branch families and a version-independent rendering of cond trees."""

import torch
from torch.fx import GraphModule


def affine_branches(n):
    """n branches of equal output shape: branch k computes x * (k + 1) + k."""
    return [(lambda k: lambda x: x * (k + 1) + k)(k) for k in range(n)]


def prefix_branches(n):
    """n branches whose outputs differ in size: branch k returns (x[: k + 1] * 2)."""
    return [(lambda k: lambda x: x[: k + 1] * 2)(k) for k in range(n)]


def reference(branches, index, *operands):
    """The semantics, in plain Python."""
    index = min(max(int(index), 0), len(branches) - 1)
    return branches[index](*operands)


def cond_tree(gm: GraphModule, indent: str = "") -> str:
    """Render the torch.cond nesting of ``gm``: predicates and the ops of each leaf.

    Only aten/higher-order ops are shown (no node names, no shapes), so the same
    program renders the same on every torch version.
    """
    lines = []
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        target = node.target
        if target is torch.ops.higher_order.cond:
            pred = node.args[0]
            cmp = pred.args[1] if pred.op == "call_function" else "?"
            lines.append(f"{indent}cond(index < {cmp})")
            true_gm = getattr(gm, node.args[1].target)
            false_gm = getattr(gm, node.args[2].target)
            lines.append(f"{indent}  true:")
            lines.append(cond_tree(true_gm, indent + "    "))
            lines.append(f"{indent}  false:")
            lines.append(cond_tree(false_gm, indent + "    "))
        elif isinstance(target, torch._ops.OpOverload):
            name = target._schema.name.split("::")[1]
            if name in ("lt", "sym_size", "_assert_scalar", "sym_constrain_range_for_size"):
                continue
            args = [a for a in node.args if not isinstance(a, torch.fx.Node)]
            lines.append(f"{indent}{name}{tuple(args) if args else ''}")
    return "\n".join(lines)


def cond_depth(gm: GraphModule) -> int:
    best = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is torch.ops.higher_order.cond:
            sub = max(cond_depth(getattr(gm, node.args[i].target)) for i in (1, 2))
            best = max(best, 1 + sub)
    return best
