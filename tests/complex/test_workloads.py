"""Complex code as users write it: a rotary embedding, an STFT mask, a complex-valued network.

Each runs through ptc's backend at a small size: results (and gradients) equal eager's, and no
complex op is left on an eager kernel. benchmarks/complex.py times the same code at full size.
"""

from __future__ import annotations

import collections

import pytest
import torch
from functorch.compile import make_boxed_func
from torch._functorch.aot_autograd import aot_function

import ptc.complex as pc


def rotary(x, freqs_cis, weight):
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    out = torch.view_as_real(xc * freqs_cis).flatten(3).type_as(x)
    return (out * weight).sum()


def stft_mask(x, window):
    spec = torch.stft(x, n_fft=64, hop_length=16, window=window, return_complex=True)
    mag = spec.abs()
    mask = torch.sigmoid(4.0 * (mag - mag.mean(dim=-1, keepdim=True)))
    return torch.istft(spec * mask, n_fft=64, hop_length=16, window=window, length=x.shape[-1])


def complex_net(x, w1, b1, c1, w2):
    h = x @ w1.mT + b1
    mag = h.abs()
    h = torch.relu(mag + c1) * (h / (mag + 1e-6))  # modReLU
    out = h @ w2.mT
    return (out.real**2 + out.imag**2).mean()


def _rotary_inputs(g):
    batch, seq, heads, dim = 2, 16, 2, 8
    theta = 1.0 / (10000.0 ** (torch.arange(0, dim, 2).float() / dim))
    angles = torch.outer(torch.arange(seq).float(), theta)
    freqs = torch.polar(torch.ones_like(angles), angles).unsqueeze(1)
    return (torch.randn(batch, seq, heads, dim, generator=g), freqs, torch.randn(batch, seq, heads, dim, generator=g)), (0,)


def _stft_inputs(g):
    return (torch.randn(2, 512, generator=g), torch.hann_window(64)), ()


def _net_inputs(g):
    n, width = 8, 16
    x = torch.randn(n, width, dtype=torch.complex64, generator=g)
    w1 = torch.randn(width, width, dtype=torch.complex64, generator=g) / 4
    w2 = torch.randn(width, width, dtype=torch.complex64, generator=g) / 4
    return (x, w1, torch.zeros(width, dtype=torch.complex64), torch.full((width,), -0.1), w2), (1, 2, 3, 4)


WORKLOADS = {"rotary": (rotary, _rotary_inputs), "stft_mask": (stft_mask, _stft_inputs), "complex_net": (complex_net, _net_inputs)}


def _run(fn, args, grad):
    args = [a.detach().clone().requires_grad_(i in grad) for i, a in enumerate(args)]
    out = fn(*args)
    grads = torch.autograd.grad(out, [args[i] for i in grad]) if grad else ()
    return (out.detach(), *grads)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_workload_equals_eager_with_nothing_left_on_eager_kernels(name):
    fn, make = WORKLOADS[name]
    args, grad = make(torch.Generator().manual_seed(0))
    torch._dynamo.reset()
    expected = _run(fn, args, grad)
    backend = pc.backend(strict=True, library_graphs="compile")
    got, codes = pc.generated_code(lambda *a: _run(torch.compile(fn, backend=backend), a, grad), *args)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=2e-5, atol=2e-5)
    assert pc.complex_fallbacks(codes) == []
    assert not backend.report.fallback, dict(backend.report.fallback)


def test_a_broadcast_unfold_backward_is_one_index_put_not_one_per_window_position():
    """istft's overlap-add: the window envelope is a size-1 batch broadcast over the batch."""
    grad = torch.randn(1, 30, 64)
    seen = {}

    def compiler(gm, inputs):
        seen["ops"] = collections.Counter(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return make_boxed_func(gm)

    fn = lambda g: torch.ops.aten.unfold_backward(g, [4, 528], 1, 64, 16)  # noqa: E731
    out = aot_function(fn, fw_compiler=compiler, decompositions=pc.decompositions())(grad)
    torch.testing.assert_close(out, fn(grad))
    index_puts = sum(v for k, v in seen["ops"].items() if "index_put" in k)
    assert 1 <= index_puts <= 2, seen["ops"]


@pytest.mark.slow
def test_rotary_kernels_are_vectorised():
    """The features read as complex pairs come through each pair's 64 bits (contiguous vector loads),
    not as two stride-2 planes that keep Inductor's kernel scalar; forward and backward."""
    import re

    from torch._inductor import cpu_vec_isa

    if not cpu_vec_isa.pick_vec_isa():
        pytest.skip("this CPU has no vector ISA Inductor uses")
    args, grad = _rotary_inputs(torch.Generator().manual_seed(0))
    torch._dynamo.reset()
    backend = pc.backend(strict=True)
    _, codes = pc.generated_code(lambda *a: _run(torch.compile(rotary, backend=backend), a, grad), *args)
    kernels = re.findall(r"(cpp_fused_\w+) = async_compile.cpp_pybinding\((.*?)'''\)", "\n".join(codes), re.S)
    assert kernels
    scalar = [name for name, body in kernels if "at::vec::" not in body]
    assert scalar == [], scalar
