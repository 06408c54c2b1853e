"""Structured control flow that every torch consumer understands.

``switch(index, branches, *operands)``: N-way branch by an integer index, run
directly in eager and lowered to a balanced tree of ``torch.cond`` when traced.
``lower_native_switch``: rewrite torch's own prototype switch HOP into the same
tree, so such programs serialize. ``fix_export_metadata``: repair what strict
export leaves behind for deeply nested ``torch.cond`` so the program saves.
"""

from ptc.control_flow.lowering import count_native_switch, fix_export_metadata, lower_native_switch
from ptc.control_flow.render import cond_depth, render_cond_tree
from ptc.control_flow.switch import switch, tree_depth

__all__ = [
    "switch",
    "tree_depth",
    "lower_native_switch",
    "count_native_switch",
    "fix_export_metadata",
    "render_cond_tree",
    "cond_depth",
    "capability",
]


def capability(feature: str) -> str:
    """Status line for ``ptc env``."""
    return "switch -> balanced torch.cond tree (eager, compile, export, make_fx, vmap)"
