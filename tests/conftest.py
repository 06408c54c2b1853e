"""Shared pytest set-up: the `cuda` marker skips (with a reason) where no GPU is usable."""

import pytest

from ptc import _compat


def pytest_collection_modifyitems(config, items):
    if _compat.CUDA_AVAILABLE:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; its CPU twin runs beside it")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


pytest_plugins = ["pytester"]
