"""``ptc demo complex``: an FFT low-pass filter and a quantum-state step, three ways.

Each is run eagerly, with stock ``torch.compile`` (Inductor) and with
``ptc.complex.backend()``; the demo prints the time per call and how many ATen
kernels the generated code still calls eagerly for complex arithmetic.
"""

from __future__ import annotations

import time
import warnings

import torch

import ptc.complex as pc


def fft_lowpass(x, cutoff):
    """Keep frequencies below ``cutoff`` (a smooth mask), through rfft/irfft."""
    spec = torch.fft.rfft(x)
    freqs = torch.arange(spec.shape[-1], dtype=x.dtype)
    mask = torch.exp(-((freqs / cutoff) ** 2))
    spec = spec * mask * torch.exp(-1j * 0.1 * freqs)  # attenuate and shift phase
    return torch.fft.irfft(spec, n=x.shape[-1])


def quantum_step(u, uh, energies, psi, dt):
    """psi' = U exp(-i E dt) U^H psi, renormalised; returns psi' and its probabilities."""
    phi = torch.exp(-1j * energies * dt) * (uh @ psi)
    out = u @ phi
    out = out / torch.linalg.vector_norm(out)
    return out, (out * out.conj()).real


def _per_call_ms(fn, args, budget_s=0.25):
    fn(*args)
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < budget_s:
        fn(*args)
        calls += 1
    return (time.perf_counter() - start) / calls * 1e3


def _show(title, fn, args):
    print(f"\n{title}")
    eager_ms = _per_call_ms(fn, args)
    print(f"  {'eager':14} {eager_ms:8.3f} ms")
    expected = fn(*args)
    for label, backend in (("stock compile", "inductor"), ("ptc.complex", pc.backend())):
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend=backend)
        start = time.perf_counter()
        result, codes = pc.generated_code(compiled, *args)
        first = time.perf_counter() - start
        fallbacks = pc.complex_fallbacks(codes)
        ms = _per_call_ms(compiled, args)
        err = max((r - e).abs().max().item() for r, e in zip(result, expected))
        names = ", ".join(sorted(set(fallbacks))) or "none"
        print(
            f"  {label:14} {ms:8.3f} ms  {eager_ms / ms:5.2f}x eager   compile {first:4.1f} s   "
            f"max err {err:.1e}   eager fallbacks: {len(fallbacks)} ({names})"
        )


def main() -> None:
    warnings.filterwarnings("ignore", message="Torchinductor does not support code generation for complex")
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        x = torch.randn(64, 4096)
        cutoff = torch.tensor(300.0)
        _show("FFT low-pass filter, 64 signals x 4096 samples (rfft -> mask and phase -> irfft)",
              lambda x, c: (fft_lowpass(x, c),), (x, cutoff))

        n = 256
        h = torch.randn(n, n, dtype=torch.complex64)
        energies, u = torch.linalg.eigh(h + h.mH)
        psi = torch.randn(n, dtype=torch.complex64)
        psi = psi / torch.linalg.vector_norm(psi)
        args = (u.contiguous(), u.mH.contiguous(), energies, psi, 0.05)
        _show(f"quantum-state step, {n}x{n} unitary (two complex matvecs on BLAS, phase, renormalise)",
              quantum_step, args)
        print("\nptc keeps FFTs and matvecs on their library kernels (zero-copy in and out) and turns the")
        print("complex arithmetic between them into fused real kernels: see ptc.complex.coverage().")
    finally:
        torch.set_num_threads(threads)
