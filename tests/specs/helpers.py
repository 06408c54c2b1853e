"""Shared by the spec tests."""

import io

import torch


class Graphs:
    """A torch.compile backend that keeps the graphs it is given."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm


def save_load(ep):
    """``ep`` after a torch.export.save / load round trip through memory."""
    buffer = io.BytesIO()
    torch.export.save(ep, buffer)
    buffer.seek(0)
    return torch.export.load(buffer)
