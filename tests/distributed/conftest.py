"""Fixtures for the distributed tests; helpers live in fr_helpers.py."""

import pytest

from ptc.distributed import fr_capture
from ptc.distributed import flight_recorder as fr


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
