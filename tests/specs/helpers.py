"""Shared by the spec tests."""

import io
import logging

import torch


class Graphs:
    """A torch.compile backend that keeps the graphs it is given."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm


def save_load(ep):
    """``ep`` after a torch.export.save / load round trip through memory.

    torch's loader logs a warning with a broken format string when it falls
    back to ``weights_only=False`` for example inputs of a custom pytree
    class; that logger is kept at ERROR.
    """
    logging.getLogger("torch._export.serde.serialize").setLevel(logging.ERROR)
    buffer = io.BytesIO()
    torch.export.save(ep, buffer)
    buffer.seek(0)
    return torch.export.load(buffer)
