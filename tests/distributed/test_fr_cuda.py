"""The native Flight Recorder core on NCCL (needs a CUDA GPU; run by benchmarks/gpu_check.py).

NCCL's Work has a device future, which completes when the collective is
enqueued, not when it ends; the core must therefore poll ``isCompleted()``
(which asks the GPU) instead of trusting the future's callback, or a hung
NCCL collective would be recorded as completed.  The CPU twin of the polling
itself is ``test_fr_native.py::test_a_work_without_a_future_ends_when_its_wait_returns``
(gloo's send/recv, which have no future at all).
"""

from __future__ import annotations

import datetime
import time

import pytest
import torch
import torch.distributed as dist

from fr_helpers import wait_for
from ptc.distributed import FlightRecorder
from ptc.distributed.flight_recorder import native as fr_native

pytestmark = pytest.mark.cuda


@pytest.fixture
def nccl_solo():
    fr_native.load(build=True)
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=60))  # fmt: skip
    yield dist.group.WORLD
    dist.destroy_process_group()


def test_cuda_nccl_collective_completes_when_the_gpu_is_done(nccl_solo, tmp_path):
    t = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(t)  # warm up the communicator
    torch.cuda.synchronize()
    with FlightRecorder(dump_dir=tmp_path, core="native", timeout=60) as rec:
        rec.attach()
        torch.cuda._sleep(2_000_000_000)  # ~1 s of GPU time ahead of the collective on its stream
        work = dist.all_reduce(t, async_op=True)
        time.sleep(0.1)
        assert not work.is_completed()
        assert [e["state"] for e in rec.entries()] == ["started"], "recorded as done while the GPU is busy"
        torch.cuda.synchronize()
        done_ns = time.time_ns()
        wait_for(lambda: rec.entries()[0]["state"] == "completed", 10, "the NCCL all_reduce's completion")
        (entry,) = rec.entries()
    assert entry["profiling_name"] == "nccl:all_reduce" and entry["input_sizes"] == [[1 << 20]]
    assert entry["time_discovered_completed_ns"] - entry["time_discovered_started_ns"] > 0.3e9
    assert entry["time_discovered_completed_ns"] <= done_ns + 50e6
