"""Random ops under ptc.complex draw what the stock compile they stand for draws: with
Inductor's ``fallback_random`` (and always with ``inductor=False``, which runs aten ops as
``aot_eager`` does) a training step's dropout masks, outputs, gradients and generator state
equal eager's, whatever setting an earlier compile in the process used."""

import copy

import pytest
import torch

import ptc.complex as pc


class DropoutAfterNorm(torch.nn.Module):
    """BERT's embeddings: a dropout after LayerNorm, whose input backward saves."""

    def __init__(self):
        super().__init__()
        self.lin, self.norm, self.drop, self.out = (
            torch.nn.Linear(16, 16),
            torch.nn.LayerNorm(16),
            torch.nn.Dropout(0.1),
            torch.nn.Linear(16, 4),
        )

    def forward(self, x):
        return self.out(self.drop(self.norm(self.lin(x))))


def _train(model, xs):
    torch.manual_seed(42)
    steps = []
    for x in xs:
        model.zero_grad(set_to_none=True)
        y = model(x)
        y.pow(2).sum().backward()
        steps.append((y.detach(), [p.grad.clone() for p in model.parameters()], torch.get_rng_state()))
    return steps


# (inductor, fallback_random): the cases where the stock anchor (aot_eager; Inductor with
# fallback_random) draws eager's numbers. Each runs after a compile with Inductor's default
# (fallback_random=False), whose decomposition table must not be reused.
CASES = [(False, False), (False, True), (True, True)]


@pytest.mark.parametrize("inductor, fallback_random", CASES)
def test_a_training_step_draws_what_eager_draws(inductor, fallback_random):
    torch.manual_seed(0)
    base = DropoutAfterNorm().train()
    xs = [torch.randn(2, 4, 16, generator=torch.Generator().manual_seed(k)) for k in range(2)]
    want = _train(copy.deepcopy(base), xs)
    for setting in (False, fallback_random):  # a compile with the default first
        torch._dynamo.reset()
        with torch._inductor.config.patch(fallback_random=setting):
            got = _train(torch.compile(copy.deepcopy(base), backend=pc.backend(inductor=inductor)), xs)
    for k, ((y1, g1, r1), (y2, g2, r2)) in enumerate(zip(want, got)):
        torch.testing.assert_close(y2, y1, rtol=1e-4, atol=1e-5, msg=f"call {k}: output")
        torch.testing.assert_close(g2, g1, rtol=1e-4, atol=1e-5, msg=f"call {k}: gradients")
        assert torch.equal(r1, r2), f"call {k}: generator state"
