"""A compiled optimizer step on complex parameters: the parameters and the optimizer's state after
each step equal eager's, and compiling leaves the user's tensors as they were.

Dynamo lifts an optimizer's parameters and state into its graphs as attributes (real tensors);
ptc's check for library-bound graphs traces those graphs, and must do it on fake copies: an
in-place op whose tensors are all real runs for real even under a fake mode.
"""

from __future__ import annotations

import copy

import pytest
import torch

import ptc.complex as pc

OPTIMIZERS = {
    "sgd_momentum": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
    "sgd_nesterov_foreach": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "nesterov": True, "foreach": True}),
    "adam": (torch.optim.Adam, {"lr": 0.01}),
    "adamw_foreach": (torch.optim.AdamW, {"lr": 0.01, "foreach": True}),
    "rmsprop": (torch.optim.RMSprop, {"lr": 0.01, "momentum": 0.5}),
}
#: RMSprop divides by the root of a small running average: stock compile's rounding differs from
#: eager's by ~1e-4 there too (the same element, the same amount)
TOLERANCE = {"rmsprop": {"rtol": 1e-4, "atol": 2e-4}}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_compiled_step_on_complex_parameters_equals_eager(name):
    cls, options = OPTIMIZERS[name]
    torch._dynamo.reset()
    torch.manual_seed(0)
    eager_model = torch.nn.Sequential(torch.nn.Linear(8, 8, dtype=torch.complex64), torch.nn.Linear(8, 4, dtype=torch.complex64))
    ptc_model = copy.deepcopy(eager_model)
    eager_opt, ptc_opt = cls(eager_model.parameters(), **options), cls(ptc_model.parameters(), **options)
    backend = pc.backend(strict=True)
    step = torch.compile(ptc_opt.step, backend=backend)
    x = torch.randn(5, 8, dtype=torch.complex64)
    for _ in range(3):  # the first step creates the state; the next ones compile the update of existing state
        for model, opt, run in ((eager_model, eager_opt, eager_opt.step), (ptc_model, ptc_opt, step)):
            opt.zero_grad()
            model(x).abs().sum().backward()
            run()
        for p, q in zip(eager_model.parameters(), ptc_model.parameters()):
            torch.testing.assert_close(q, p, **TOLERANCE.get(name, {}))
            for key, value in eager_opt.state[p].items():
                torch.testing.assert_close(ptc_opt.state[q][key], value, **TOLERANCE.get(name, {}))


def test_library_check_leaves_the_graphs_tensors_alone():
    """The library-bound check traces a graph whose attribute is updated in place; the attribute
    keeps its values (it was multiplied by 0.9 at compile time)."""
    from ptc.complex.backend import library_bound

    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.buf = torch.ones(4, 4, dtype=torch.complex64)

        def forward(self, x):
            self.buf.mul_(0.9)
            return x @ self.buf

    gm = torch.fx.symbolic_trace(Step())
    assert any(n.op == "get_attr" for n in gm.graph.nodes)
    before = gm.buf.clone()
    for node in gm.graph.nodes:  # what Dynamo records for each node
        if node.op == "placeholder":
            node.meta["example_value"] = torch.ones(4, 4, dtype=torch.complex64)
    library_bound(gm, [torch.ones(4, 4, dtype=torch.complex64)])
    assert torch.equal(gm.buf, before)
    assert gm.graph.owning_module is gm
