"""Fixtures for the distributed tests; helpers live in fr_helpers.py."""

import pytest

from ptc.distributed import flight_recorder as fr
from ptc.distributed.flight_recorder import capture as fr_capture
from ptc.distributed.flight_recorder import native as fr_native


@pytest.fixture(params=["python", "native"])
def core(request):
    """Each Flight Recorder core: Python, and the native one (built once per torch version, then cached).

    A native core that cannot be built fails the test with the compiler's message: CI has a compiler.
    """
    if request.param == "native":
        fr_native.load(build=True)
    return request.param


@pytest.fixture(autouse=True)
def no_recorder_outlives_its_test():
    """Every test closes what it opened: no recorder stays active, torch's classes are restored."""
    yield
    leftover = fr.active_recorders()
    for recorder in leftover:
        recorder.close()
    assert not leftover, f"test left recorders open: {leftover}"
    assert not fr_capture.wrapper_installed(), "ProcessGroup methods still wrapped after the test"
    assert not fr_capture.wait_wrapped(), "Work.wait still wrapped after the test"
