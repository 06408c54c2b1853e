"""Random ops under ptc.complex draw what the stock compile they stand for draws: with
Inductor's ``fallback_random`` (and always with ``inductor=False``, which runs aten ops as
``aot_eager`` does) a training step's dropout masks, outputs, gradients and generator state
equal eager's, whatever setting an earlier compile in the process used."""

import copy

import pytest
import torch

import ptc.complex as pc
from training_steps import DropoutAfterNorm, train_steps


# (inductor, fallback_random): the cases where the stock anchor (aot_eager; Inductor with
# fallback_random) draws eager's numbers. Each runs after a compile with Inductor's default
# (fallback_random=False), whose decomposition table must not be reused.
CASES = [(False, False), (False, True), (True, True)]


@pytest.mark.parametrize("inductor, fallback_random", CASES)
def test_a_training_step_draws_what_eager_draws(inductor, fallback_random):
    torch.manual_seed(0)
    base = DropoutAfterNorm().train()
    xs = [torch.randn(2, 4, 16, generator=torch.Generator().manual_seed(k)) for k in range(2)]
    want = train_steps(copy.deepcopy(base), xs)
    for setting in (False, fallback_random):  # a compile with the default first
        torch._dynamo.reset()
        with torch._inductor.config.patch(fallback_random=setting):
            got = train_steps(torch.compile(copy.deepcopy(base), backend=pc.backend(inductor=inductor)), xs)
    for k, ((y1, g1, r1), (y2, g2, r2)) in enumerate(zip(want, got)):
        torch.testing.assert_close(y2, y1, rtol=1e-4, atol=1e-5, msg=f"call {k}: output")
        torch.testing.assert_close(g2, g1, rtol=1e-4, atol=1e-5, msg=f"call {k}: gradients")
        assert torch.equal(r1, r2), f"call {k}: generator state"
