"""switch over layers nobody here wrote: transformers' GPT-2 blocks with a skip path
(a branch that returns its operand) and T5 blocks, whose output holds a None
beside its tensors. Built from configs with random weights."""

import pytest
import torch

from ptc.control_flow import switch


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()


def _router(branches):
    class Router(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([b for b in branches if isinstance(b, torch.nn.Module)])

        def forward(self, index, hidden):
            return switch(index, branches, hidden)

    return Router().eval()


def _close(got, want):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    return len(got) == len(want) and all(
        (g is None and w is None) or torch.allclose(g, w, atol=1e-5, rtol=1e-5) for g, w in zip(got, want)
    )


def _check_consumers(router, hidden, n):
    with torch.no_grad():
        compiled = torch.compile(router, fullgraph=True)
        exported = torch.export.export(router, (torch.tensor(0), hidden)).module()
        for i in range(n):
            want = router(torch.tensor(i), hidden)
            assert _close(compiled(torch.tensor(i), hidden), want), f"compile, index {i}"
            assert _close(exported(torch.tensor(i), hidden), want), f"export, index {i}"


def test_gpt2_blocks_with_a_skip_path():
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block

    torch.manual_seed(0)
    config = GPT2Config(n_embd=32, n_head=4, n_layer=2, n_positions=64)
    config._attn_implementation = "eager"
    blocks = [GPT2Block(config, layer_idx=i) for i in range(2)]
    router = _router(blocks + [lambda hidden: hidden])
    hidden = torch.randn(2, 5, 32)
    assert router(torch.tensor(2), hidden) is hidden  # eager: the skip path returns its operand
    _check_consumers(router, hidden, 3)


def test_t5_blocks_return_none_beside_tensors():
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Block

    torch.manual_seed(0)
    config = T5Config(d_model=32, d_kv=8, num_heads=4, d_ff=64)
    config._attn_implementation = "eager"
    blocks = [T5Block(config, has_relative_attention_bias=True) for _ in range(3)]
    hidden = torch.randn(2, 5, 32)
    out = blocks[0](hidden)
    assert isinstance(out, tuple) and any(o is None for o in out), "T5Block's output has changed shape"
    _check_consumers(_router(blocks), hidden, 3)
