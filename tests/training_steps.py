"""A training step with dropout, shared by the tests that check a compile draws the random
numbers eager draws (tests/complex/test_random.py, tests/cudagraph/test_model_patterns.py)."""

import torch


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


def train_steps(model, xs):
    """Forward and backward per input, seeded: (output, gradients, generator state) per step."""
    torch.manual_seed(42)
    steps = []
    for x in xs:
        model.zero_grad(set_to_none=True)
        y = model(x)
        y.pow(2).sum().backward()
        steps.append((y.detach(), [p.grad.clone() for p in model.parameters()], torch.get_rng_state()))
    return steps
