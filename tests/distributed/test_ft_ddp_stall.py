"""No stall after a kill inside the gradient allreduce with the Python DDP hook.

With ``ddp=True``, the Python comm hook and every bucket reduced in place (the vote in an
allreduce of its own), a survivor has two collectives of the failed step in flight when the
victim dies.  With the ``native`` engine (torch's gloo ``reconfigure``) they used to stay pending
on the replaced generation's connections until the collective timeout, holding both of gloo's
worker threads, so the survivors' state sync on the new generation waited for them: the
survivors reconnected in milliseconds, then resumed only after ``--timeout`` (10 s here).
Repeated, since whether both collectives are in flight depends on timing.
"""

from __future__ import annotations

import pytest

from ft_helpers import check_consistent, run_scenario
from ptc.distributed.ft import faults as F

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

TIMEOUT_S = 10  # the workers' collective timeout: what a stall costs
RESUME_LIMIT_S = 2.0


@pytest.mark.parametrize("run", range(3))
def test_survivors_resume_at_once_after_a_kill_inside_the_bucket_allreduces(tmp_path, run):
    # collectives 1-4 are the initial state sync; 4 + 2 s + 1 is step s's (in place) bucket, the next
    # one its vote: 23 kills worker 1 right after it issued step 9's bucket allreduce
    extra = ["--ddp-hook", "python", "--ddp-hook-min-bytes", "0", "--vote-copy-max-bytes", "0",
             "--timeout", str(TIMEOUT_S)]  # fmt: skip
    outcome = run_scenario(tmp_path, 4, steps=30, ddp=True, faults=[F.kill_in_collective(23, worker=1)], extra=extra)
    text = outcome.describe()
    check_consistent(outcome, expect_workers=[0, 2, 3])
    events = outcome.result.events
    failed = [e["time"] for e in events if e["event"] in ("worker_failed", "peer_failure")]
    assert failed, text
    failure = min(failed)
    resumed = {}
    for e in events:
        if e["event"] == "commit" and e["time"] > failure:
            resumed.setdefault(e["worker"], e["time"] - failure)
    assert sorted(resumed) == [0, 2, 3], text
    slow = {w: round(dt, 3) for w, dt in resumed.items() if dt > RESUME_LIMIT_S}
    assert not slow, f"survivors resumed only after (s): {slow}\n{text}"
