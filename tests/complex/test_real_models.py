"""ptc.complex on a model nobody here wrote: transformers' FNet (token mixing by a 2-D FFT,
``torch.fft.fftn(x).real``), built from a config with random weights. Forward and the
gradients of every parameter equal eager's; the FFTs stay library kernels."""

import pytest
import torch

import ptc.complex as pc

transformers = pytest.importorskip("transformers")


def _fnet():
    config = transformers.FNetConfig(vocab_size=100, hidden_size=64, num_hidden_layers=2, intermediate_size=128,
                                     max_position_embeddings=64, use_tpu_fourier_optimizations=False)  # fmt: skip
    torch.manual_seed(0)
    return transformers.FNetModel(config).eval()


def test_fnet_forward_and_gradients_equal_eager():
    torch._dynamo.reset()
    eager, compiled_model = _fnet(), _fnet()
    ids = torch.randint(0, 100, (2, 32), generator=torch.Generator().manual_seed(1))
    backend = pc.backend(strict=True)
    compiled = torch.compile(compiled_model, backend=backend)
    want = eager(ids).last_hidden_state
    got = compiled(ids).last_hidden_state
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    want.pow(2).mean().backward()
    got.pow(2).mean().backward()
    for (name, p), q in zip(eager.named_parameters(), compiled_model.parameters()):
        if p.grad is not None:
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-4, msg=lambda m: f"{name}: {m}")
    assert backend.report.library["_fft_c2c.default"] >= 4, "forward and backward FFTs stay library kernels"
    assert not backend.report.stock_graphs
