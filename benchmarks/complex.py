"""ptc.complex side by side with its anchors, in one process run.

    python benchmarks/complex.py [--rounds 11] [--sample-ms 20] [--only a,c] [--clock cpu] [--profile]
                                 [--aten-gemm]

Workloads (complex64; see ../shared/anchors/complex.md, section 2):

  (a) abs(z*w + conj(z)*exp(1j*theta)), 2^20 elements
  (b) A @ B, 256x256
  (c) FFT convolution irfft(rfft(x) * rfft(k), n=4096), x, k float32 16x4096
  (d) quantum step psi' = U diag(exp(-i E dt)) U^H psi, renormalised, n = 1024
  (e) reductions z.sum(), z.mean(dim=1), z.abs().sum() on 1024x1024
  (f) forward + backward of (z*w).abs().sum(), 2^18 elements
  (g) Llama's rotary embedding view_as_real(view_as_complex(x.reshape(..., -1, 2)) * freqs_cis),
      forward + backward, x 4x512x8x64
  (h) STFT mask: stft(return_complex=True) -> sigmoid mask of |spec| -> istft, 4x16000
  (i) complex Linear -> modReLU -> complex Linear, forward + backward of the weights, 256x512
  (j) a state updated in place, z.mul_(w).add_(1e-3j) with |w| = 1, 2^20 elements (returns z)

Modes: eager; stock ``torch.compile`` (Inductor); torch's opt-in complex
wrapper (``enable_complex_wrapper``, where this torch has it); ptc
(``backend=ptc.complex.backend()``; with ``--aten-gemm`` also ``ptc-aten``, the
same with ``gemm="aten"``); and, as the floor of any compiled
function, Dynamo running its graph on eager kernels (``backend="eager"``: its
guards and call wrappers, nothing compiled). One thread, every mode compiled first,
then timed in interleaved rounds (each sample >= --sample-ms of repeated
calls); the min over rounds is reported. For each compiled mode: graph breaks,
ATen calls left in the generated code that are neither views nor library
kernels ("fallbacks"), and the relative error vs eager.

``--profile`` adds, per workload and mode, where a call's time goes (torch.profiler
over repeated calls): the library kernels (BLAS and FFT calls), the other ATen ops
left in the code, and the rest (compiled kernels, Dynamo's guards and wrappers,
Python), each in microseconds per call of the unprofiled time.

Goals vs eager: (a) >= 20x, (b) >= 0.95x, (c) >= 0.8x, (d) >= 0.95x,
(e) >= 2.5x, (f) >= 2x, (g) >= 1.5x, (h) >= 1x, (i) >= 1.5x, (j) >= 1.15x, geometric mean
>= 2x; never slower than stock compile by more than 5%.
"""

from __future__ import annotations

import argparse
import math
import time
import warnings

import torch

import ptc.complex as pc
from ptc import _compat
from ptc.demos.complex import sample_ms

GOALS = {"a": 20.0, "b": 0.95, "c": 0.8, "d": 0.95, "e": 2.5, "f": 2.0, "g": 1.5, "h": 1.0, "i": 1.5, "j": 1.15}


# --- workloads --------------------------------------------------------------


def wl_a():
    g = torch.Generator().manual_seed(0)
    n = 1 << 20
    z = torch.randn(n, dtype=torch.complex64, generator=g)
    w = torch.randn(n, dtype=torch.complex64, generator=g)
    theta = torch.randn(n, generator=g)

    def f(z, w, theta):
        return torch.abs(z * w + torch.conj(z) * torch.exp(1j * theta))

    return f, (z, w, theta), ()


def wl_b():
    g = torch.Generator().manual_seed(1)
    a = torch.randn(256, 256, dtype=torch.complex64, generator=g)
    b = torch.randn(256, 256, dtype=torch.complex64, generator=g)
    return (lambda a, b: a @ b), (a, b), ()


def wl_c():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(16, 4096, generator=g)
    k = torch.randn(16, 4096, generator=g)

    def f(x, k):
        return torch.fft.irfft(torch.fft.rfft(x) * torch.fft.rfft(k), n=4096)

    return f, (x, k), ()


def wl_d():
    g = torch.Generator().manual_seed(3)
    n = 1024
    h = torch.randn(n, n, dtype=torch.complex64, generator=g)
    h = h + h.mH
    energies, u = torch.linalg.eigh(h)
    u = u.contiguous()
    uh = u.mH.contiguous()
    psi = torch.randn(n, dtype=torch.complex64, generator=g)
    psi = psi / torch.linalg.vector_norm(psi)
    dt = 0.01

    def f(u, uh, energies, psi):
        phi = uh @ psi
        phi = torch.exp(-1j * energies * dt) * phi
        out = u @ phi
        return out / torch.linalg.vector_norm(out)

    return f, (u, uh, energies, psi), ()


def wl_e():
    g = torch.Generator().manual_seed(4)
    z = torch.randn(1024, 1024, dtype=torch.complex64, generator=g)

    def f(z):
        return z.sum(), z.mean(dim=1), z.abs().sum()

    return f, (z,), ()


def wl_f():
    g = torch.Generator().manual_seed(5)
    n = 1 << 18
    z = torch.randn(n, dtype=torch.complex64, generator=g, requires_grad=True)
    w = torch.randn(n, dtype=torch.complex64, generator=g)

    def f(z, w):
        return (z * w).abs().sum()

    return f, (z, w), (0,)


def wl_g():
    """Llama's rotary embedding: pairs of features as complex numbers times a phase per position."""
    g = torch.Generator().manual_seed(6)
    batch, seq, heads, dim = 4, 512, 8, 64
    x = torch.randn(batch, seq, heads, dim, generator=g, requires_grad=True)
    theta = 1.0 / (10000.0 ** (torch.arange(0, dim, 2).float() / dim))
    angles = torch.outer(torch.arange(seq).float(), theta)
    freqs_cis = torch.polar(torch.ones_like(angles), angles).unsqueeze(1)  # (seq, 1, dim/2)
    weight = torch.randn(batch, seq, heads, dim, generator=g)

    def f(x, freqs_cis, weight):
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        out = torch.view_as_real(xc * freqs_cis).flatten(3).type_as(x)
        return (out * weight).sum()

    return f, (x, freqs_cis, weight), (0,)


def wl_h():
    """An STFT mask: spectrogram, a soft mask from its magnitude, back to audio."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(4, 16000, generator=g)
    window = torch.hann_window(512)

    def f(x, window):
        spec = torch.stft(x, n_fft=512, hop_length=128, window=window, return_complex=True)
        mag = spec.abs()
        mask = torch.sigmoid(4.0 * (mag - mag.mean(dim=-1, keepdim=True)))
        return torch.istft(spec * mask, n_fft=512, hop_length=128, window=window, length=x.shape[-1])

    return f, (x, window), ()


def wl_i():
    """A complex-valued network: two complex Linear layers with a modReLU between, forward + backward."""
    g = torch.Generator().manual_seed(8)
    n, width = 256, 512
    x = torch.randn(n, width, dtype=torch.complex64, generator=g)
    w1 = (torch.randn(width, width, dtype=torch.complex64, generator=g) / width**0.5).requires_grad_()
    b1 = torch.zeros(width, dtype=torch.complex64, requires_grad=True)
    c1 = torch.full((width,), -0.1, requires_grad=True)
    w2 = (torch.randn(width, width, dtype=torch.complex64, generator=g) / width**0.5).requires_grad_()

    def f(x, w1, b1, c1, w2):
        h = x @ w1.mT + b1
        mag = h.abs()
        h = torch.relu(mag + c1) * (h / (mag + 1e-6))  # modReLU
        out = h @ w2.mT
        return (out.real**2 + out.imag**2).mean()

    return f, (x, w1, b1, c1, w2), (1, 2, 3, 4)


def wl_j():
    """A state updated in place (a time stepper's phase rotation): its new values are stored into
    it; each call rotates it further (|w| = 1, so it stays bounded)."""
    g = torch.Generator().manual_seed(9)
    n = 1 << 20
    z = torch.randn(n, dtype=torch.complex64, generator=g)
    w = torch.exp(1j * torch.randn(n, generator=g)).to(torch.complex64)

    def f(z, w):
        z.mul_(w).add_(1e-3j)
        return z

    return f, (z, w), ()


WORKLOADS = {
    "a": ("elementwise chain ending in abs, 1M", wl_a),
    "b": ("complex matmul 256x256", wl_b),
    "c": ("FFT convolution 16x4096", wl_c),
    "d": ("quantum step, 1024x1024 unitary", wl_d),
    "e": ("reductions on 1024x1024", wl_e),
    "f": ("fwd+bwd of (z*w).abs().sum(), 256K", wl_f),
    "g": ("rotary embedding fwd+bwd, 4x512x8x64", wl_g),
    "h": ("STFT mask pipeline, 4x16000", wl_h),
    "i": ("complex Linear + modReLU + Linear fwd+bwd, 256x512", wl_i),
    "j": ("in-place update of a state, 1M", wl_j),
}


# --- modes ------------------------------------------------------------------


def make_modes(aten_gemm=False):
    modes = {"eager": None, "compile": "inductor"}
    if _compat.NATIVE_COMPLEX_WRAPPER:
        modes["wrapper"] = "wrapper"
    modes["ptc"] = "ptc"
    if aten_gemm:
        modes["ptc-aten"] = "ptc-aten"
    modes["dynamo"] = "dynamo"
    return modes


def build(kind, f, grad):
    """A runner ``run(*args)`` for one mode: forward, or forward + the gradients of the args ``grad`` names."""
    if kind is None:
        fn = f
    elif kind == "ptc":
        fn = torch.compile(f, backend=pc.backend())
    elif kind == "ptc-aten":  # ptc with every complex GEMM on ATen's (none as a real GEMM on oneDNN)
        fn = torch.compile(f, backend=pc.backend(gemm="aten"))
    elif kind == "dynamo":
        fn = torch.compile(f, backend="eager")
    else:
        fn = torch.compile(f)
    if not grad:
        return fn

    def step(*args):
        out = fn(*args)
        grads = torch.autograd.grad(out, [args[i] for i in grad])
        return (out.detach(), *grads)

    return step


def first_call(kind, run, args):
    """Run once (this compiles), capturing Inductor's code; the wrapper mode compiles under its flag."""
    import torch._functorch.config as fconfig

    if kind in (None, "dynamo"):
        return run(*args), []
    if kind == "wrapper":
        with fconfig.patch(enable_complex_wrapper=True):
            return pc.generated_code(run, *args)
    return pc.generated_code(run, *args)


def fresh(args):
    """Copies of the arguments (leaves, as they were): workload (j) updates its first argument."""
    return tuple(a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
                 for a in args)  # fmt: skip


def graph_breaks(f, args):
    explained = torch._dynamo.explain(f)(*args)
    return explained.graph_count, explained.graph_break_count


def rel_err(out, ref):
    outs = out if isinstance(out, (tuple, list)) else (out,)
    refs = ref if isinstance(ref, (tuple, list)) else (ref,)
    worst = 0.0
    for o, r in zip(outs, refs):
        o, r = o.detach(), r.detach()
        scale = r.abs().max().item() or 1.0
        worst = max(worst, (o - r).abs().max().item() / scale)
    return worst


# ATen ops that run a BLAS or FFT library kernel (what workloads (b), (c), (d) are bound by)
LIBRARY_OPS = {"aten::mm", "aten::bmm", "aten::addmm", "aten::addmm_", "aten::addmv", "aten::addmv_", "aten::baddbmm", "aten::mv", "aten::dot", "aten::vdot",
               "aten::_fft_r2c", "aten::_fft_c2r", "aten::_fft_c2c", "aten::linalg_vector_norm",
               "mkldnn::_linear_pointwise"}  # fmt: skip


def profile_breakdown(run, args, per_call_ms, calls=200):
    """(library us, other ATen us, rest us) per call: self CPU time of the library ops and of the
    other ATen ops under torch.profiler; the rest is ``per_call_ms`` (the unprofiled time) minus both."""
    from torch.profiler import ProfilerActivity, profile

    run(*args)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            run(*args)
    library = other = 0.0
    for event in prof.key_averages():
        if event.key in LIBRARY_OPS:
            library += event.self_cpu_time_total
        elif event.key.startswith("aten::"):
            other += event.self_cpu_time_total
    library, other = library / calls, other / calls
    return library, other, per_call_ms * 1e3 - library - other


# --- main -------------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--sample-ms", type=float, default=20.0)
    parser.add_argument("--only", default="", help="comma-separated workloads, e.g. a,c")
    parser.add_argument(
        "--clock", choices=["wall", "cpu"], default="wall",
        help="wall: perf_counter; cpu: this thread's CPU time (1 thread), which ignores time the "
        "process spends descheduled on a shared machine",
    )
    parser.add_argument("--aten-gemm", action="store_true",
                        help="also run ptc with gemm='aten' (mode ptc-aten: no complex GEMM as a real one on oneDNN)")
    parser.add_argument("--profile", action="store_true",
                        help="also print where each mode's call time goes (library kernels, other ATen ops, the rest)")
    ns = parser.parse_args(argv)
    clock = time.thread_time if ns.clock == "cpu" else time.perf_counter

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    import torch._functorch.config as fconfig

    fconfig.enable_autograd_cache = False  # the wrapper's artifacts must not be served to other modes
    modes = make_modes(ns.aten_gemm)
    names = [n for n in WORKLOADS if not ns.only or n in ns.only.split(",")]
    print(f"torch {torch.__version__}, 1 thread, {ns.rounds} interleaved rounds of >= {ns.sample_ms:g} ms samples"
          f" ({ns.clock} clock)")
    summary = {}
    for name in names:
        title, make = WORKLOADS[name]
        f, args, grad = make()
        pristine = fresh(args)  # the timed calls below update (j)'s args
        torch._dynamo.reset()
        ref = build(None, f, grad)(*fresh(pristine))
        runs, info = {}, {}
        for mode, kind in modes.items():
            run = build(kind, f, grad)
            try:
                t0 = time.perf_counter()
                out, codes = first_call(kind, run, fresh(pristine))
                compile_s = time.perf_counter() - t0
                run(*args)  # a second warm call (backward graphs, guards)
            except Exception as e:  # noqa: BLE001 - a failing anchor is a result, not a crash
                info[mode] = f"FAIL {type(e).__name__}: {str(e).splitlines()[0][:90]}"
                continue
            runs[mode] = run
            if kind is None:
                info[mode] = ""
            elif kind == "dynamo":
                info[mode] = "(floor: Dynamo's guards and wrappers around eager kernels)"
            else:
                fbs = pc.complex_fallbacks(codes)
                graphs, breaks = graph_breaks(f, fresh(pristine)) if mode == "ptc" else ("", "")
                gb = f"graphs {graphs} breaks {breaks}, " if mode == "ptc" else ""
                info[mode] = (
                    f"{gb}first call {compile_s:.1f} s, rel err {rel_err(out, ref):.1e}, "
                    f"{len(fbs)} eager fallback calls{': ' + ', '.join(sorted(set(fbs))) if fbs else ''}"
                )
        best = {m: math.inf for m in runs}
        for _ in range(ns.rounds):
            for mode, run in runs.items():
                best[mode] = min(best[mode], sample_ms(run, args, ns.sample_ms, clock))
        eager = best.get("eager", math.nan)
        print(f"\n({name}) {title}")
        for mode in modes:
            if mode not in best:
                print(f"  {mode:8} {info[mode]}")
                continue
            ms = best[mode]
            print(f"  {mode:8} {ms:9.3f} ms  {eager / ms:7.2f}x eager   {info[mode]}")
        if ns.profile:
            print("  where a call's time goes (us per call: library kernels / other ATen ops / the rest):")
            for mode, run in runs.items():
                library, other, rest = profile_breakdown(run, args, best[mode])
                print(f"    {mode:8} {library:8.1f} / {other:8.1f} / {rest:8.1f}")
        if "ptc" in best:
            vs_eager = eager / best["ptc"]
            vs_compile = best["compile"] / best["ptc"] if "compile" in best else math.nan
            summary[name] = (vs_eager, vs_compile)
            verdict = "meets" if vs_eager >= GOALS[name] else "MISSES"
            floor = f", {best['dynamo'] / best['ptc']:.2f}x the Dynamo floor" if "dynamo" in best else ""
            print(f"  ptc: {vs_eager:.2f}x eager (goal >= {GOALS[name]}x: {verdict}), {vs_compile:.2f}x stock compile"
                  f"{floor}{'' if vs_compile >= 0.95 else ' (SLOWER than stock compile by more than 5%)'}")

    if summary:
        geo_e = math.exp(sum(math.log(v[0]) for v in summary.values()) / len(summary))
        geo_c = math.exp(sum(math.log(v[1]) for v in summary.values()) / len(summary))
        print("\nsummary (ptc speed-up):")
        print("  " + "  ".join(f"({k}) {v[0]:.2f}x" for k, v in summary.items()))
        print(f"  geometric mean over {len(summary)} workloads: {geo_e:.2f}x eager (goal >= 2x), {geo_c:.2f}x stock compile")


if __name__ == "__main__":
    main()
