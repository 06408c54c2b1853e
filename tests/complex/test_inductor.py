"""Through Inductor: the benchmark workloads compile to real kernels, forward and backward.

Each compiled function is built once per module (compiles take seconds on 2
cores). The generated code is inspected: no complex elementwise or reduction
op may be left running on its eager kernel; GEMM and FFT stay library calls.
"""

import pytest
import torch
import torch._inductor.config as inductor_config

import ptc.complex as pc

from .helpers import rel_close

aten = torch.ops.aten


def _compile(fn, *args, backend=None, grad=False):
    torch._dynamo.reset()
    b = backend if backend is not None else pc.backend()
    compiled = torch.compile(fn, backend=b, fullgraph=True)
    if grad:

        def step(*a):
            out = compiled(*a)
            return out, torch.autograd.grad(out, (a[0],))[0]

        result, codes = pc.generated_code(step, *args)
    else:
        result, codes = pc.generated_code(compiled, *args)
    return compiled, result, codes, b


def wl_a(z, w, theta):
    return torch.abs(z * w + torch.conj(z) * torch.exp(1j * theta))


def wl_c(x, k):
    return torch.fft.irfft(torch.fft.rfft(x) * torch.fft.rfft(k), n=x.shape[-1])


def wl_d(u, uh, energies, psi):
    phi = torch.exp(-1j * energies * 0.01) * (uh @ psi)
    out = u @ phi
    return out / torch.linalg.vector_norm(out)


def wl_e(z):
    return z.sum(), z.mean(dim=1), z.abs().sum()


def wl_f(z, w):
    return (z * w).abs().sum()


@pytest.fixture(scope="module")
def gen():
    return torch.Generator().manual_seed(0)


@pytest.fixture(scope="module")
def inputs(gen):
    n = 4096
    c = lambda *s: torch.randn(*s, dtype=torch.complex64, generator=gen)  # noqa: E731
    h = c(64, 64)
    energies, u = torch.linalg.eigh(h + h.mH)
    return {
        "a": (c(n), c(n), torch.randn(n, generator=gen)),
        "b": (c(32, 32), c(32, 32)),
        "c": (torch.randn(4, 256, generator=gen), torch.randn(4, 256, generator=gen)),
        "d": (u.contiguous(), u.mH.contiguous(), energies, c(64)),
        "e": (c(64, 48),),
        "f": (c(n).requires_grad_(), c(n)),
    }


FNS = {"a": wl_a, "b": lambda a, b: a @ b, "c": wl_c, "d": wl_d, "e": wl_e, "f": wl_f}


#: library-bound workloads: the default backend runs them as they are (test_library_bound_graphs_run_as_is);
#: here they go through Inductor to check the rewrite's library boundaries
LIBRARY_BOUND = {"b", "c"}


@pytest.fixture(scope="module")
def compiled(inputs):
    out = {}
    for name, fn in FNS.items():
        backend = pc.backend(library_graphs="compile") if name in LIBRARY_BOUND else None
        out[name] = _compile(fn, *inputs[name], backend=backend, grad=(name == "f"))
    return out


@pytest.mark.parametrize("name", list(FNS))
def test_workload_matches_eager(name, compiled, inputs):
    _, result, _, _ = compiled[name]
    args = inputs[name]
    if name == "f":
        out = wl_f(*args)
        (grad,) = torch.autograd.grad(out, (args[0],))
        rel_close(result[0].detach(), out.detach(), torch.complex64)
        rel_close(result[1], grad, torch.complex64)
        return
    expected = FNS[name](*args)
    for got, exp in zip(result if isinstance(result, tuple) else (result,), expected if isinstance(expected, tuple) else (expected,)):
        rel_close(got, exp, torch.complex64)


@pytest.mark.parametrize("name", list(FNS))
def test_no_complex_op_left_on_eager_kernels(name, compiled):
    _, _, codes, backend = compiled[name]
    assert codes, "Inductor produced code"
    assert pc.complex_fallbacks(codes) == [], pc.aten_calls(codes)
    assert not backend.report.fallback, dict(backend.report.fallback)
    if name == "f":
        assert len(codes) == 2 and backend.report.graphs == 2, "forward and backward both compiled and rewritten"


def test_library_kernels_stay(compiled):
    calls = {n: pc.aten_calls(compiled[n][2]) for n in "bcd"}
    assert any("mm" in c for c in calls["b"]), calls["b"]
    assert "_fft_r2c.default" in calls["c"] and "_fft_c2r.default" in calls["c"]
    # (d)'s two complex GEMVs run as one-column GEMMs on the matrices' own memory (ptc.complex.gemv)
    assert calls["d"].count("mm.default") == 2 and "mv.default" not in calls["d"], calls["d"]


@pytest.mark.parametrize("name", sorted(LIBRARY_BOUND))
def test_library_bound_graphs_run_as_is(name, inputs):
    """Only library kernels plus one op: no AOTAutograd/Inductor wrapper, eager's kernels, eager's bits."""
    args = inputs[name]
    compiled, result, codes, backend = _compile(FNS[name], *args)
    assert codes == [], "no Inductor code for a library-bound graph"
    assert backend.report.library_graphs == 1 and backend.report.graphs == 0
    assert "library-bound graphs run as they are: 1" in str(backend.report)
    assert torch.equal(result, FNS[name](*args))
    assert torch.equal(compiled(*args), FNS[name](*args))


def test_library_bound_needs_a_library_kernel_and_complex_values(gen):
    from ptc.complex.backend import library_bound

    seen = {}

    def spy(gm, example_inputs):
        seen["bound"] = library_bound(gm, example_inputs)
        return gm.forward

    def check(fn, *args):
        torch._dynamo.reset()
        torch.compile(fn, backend=spy, fullgraph=True)(*args)
        return seen.pop("bound")

    z = torch.randn(16, 16, dtype=torch.complex64, generator=gen)
    x = torch.randn(16, 16, generator=gen)
    assert check(lambda a, b: a @ b, z, z)
    assert check(lambda a, b: (a @ b.mH) * 2, z, z)  # views (transpose, conj bit) are free, one op computes
    assert not check(lambda a, b: a * b, z, z)  # no library kernel: compiled and fused
    assert not check(lambda a, b: (a @ b).exp() * 2, z, z)  # two ops to fuse
    assert not check(lambda a, b: a @ b, x, x)  # no complex value: stock Inductor
    assert not check(lambda a, b: (a @ b).abs() + 1, z, z)
    assert not check(lambda a, b: a @ b[0], z, z)  # a GEMV: ptc runs it as a one-column GEMM, faster
    assert not check(lambda a, b: a @ (a.mH @ b[0]), z, z)


def test_library_graphs_option_is_checked():
    from ptc.errors import PtcValueError

    with pytest.raises(PtcValueError):
        pc.backend(library_graphs="sometimes")


def test_inspector_sees_stock_fallbacks(inputs):
    """The inspection above can fail: stock Inductor leaves complex ops on eager kernels."""
    torch._dynamo.reset()
    _, codes = pc.generated_code(torch.compile(wl_a, backend="inductor"), *inputs["a"])
    fallbacks = pc.complex_fallbacks(codes)
    assert "mul.Tensor" in fallbacks and "abs.default" in fallbacks


@pytest.mark.parametrize("name", ["a", "f"])
def test_one_graph_no_breaks(name, inputs):
    explained = torch._dynamo.explain(FNS[name])(*inputs[name])
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)


def test_config_is_not_leaked(compiled):
    assert inductor_config.cpp.enable_tiling_heuristics is True
    from torch._inductor.decomposition import select_decomp_table

    table = select_decomp_table()
    assert not getattr(table[aten.add.Tensor], "__ptc_keeps_complex__", False)


def test_transcendental_kernels_are_vectorised(compiled):
    code = compiled["a"][2][0]
    assert "at::vec::Vectorized<float>" in code


def test_odd_inputs(gen):
    """Conj-bit, transposed and sliced inputs, and outputs that are views of inputs."""

    def f(z, w):
        return z * w + 1j, z[1:], (z * 2).t()

    z = torch.randn(6, 5, dtype=torch.complex64, generator=gen)
    w = torch.randn(5, 6, dtype=torch.complex64, generator=gen).t()
    for zz in (z, z.conj()):
        compiled, result, codes, _ = _compile(f, zz, w)
        expected = f(zz, w)
        for got, exp in zip(result, expected):
            rel_close(got, exp, torch.complex64)
            assert got.stride() == exp.stride()
            assert got.is_conj() == exp.is_conj()
        assert result[1].data_ptr() == zz[1:].data_ptr(), "a view of the input stays a view"
        assert pc.complex_fallbacks(codes) == []


def test_input_mutation(gen):
    def f(z):
        z.mul_(2j)
        return z.abs()

    z = torch.randn(8, dtype=torch.complex64, generator=gen)
    ref = z.clone()
    _, result, _, _ = _compile(f, z)
    expected = f(ref)
    rel_close(z, ref, torch.complex64)
    rel_close(result, expected, torch.complex64)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_dynamic_shapes(gen, dtype):
    """Symbolic sizes, sliced (non-contiguous) inputs, and a complex output, for both paths of
    reading pairs (complex64's int64 bits, complex128's view_as_real)."""

    def f(z):
        return (z * z.conj()).real + torch.exp(z).abs(), z * 1j

    torch._dynamo.reset()
    compiled = torch.compile(f, backend=pc.backend(), dynamic=True)
    for n in (5, 9):
        z = torch.randn(n, 3, dtype=dtype, generator=gen)[:, 1:]
        got, expected = compiled(z), f(z)
        for g, e in zip(got, expected):
            rel_close(g, e, dtype)
            assert g.stride() == e.stride()


@pytest.mark.parametrize("name", ["a", "e"])
def test_complex64_is_read_through_its_bits_with_register_casts(name, compiled):
    """Kernels load each complex64 input as one contiguous int64 vector, never as stride-2 floats,
    and take its float halves with a register cast, not a scalar bit_cast loop."""
    from ptc import _compat

    kernels = compiled[name][2][0]
    assert "at::vec::VectorizedN<int64_t,2>::loadu" in kernels
    assert "2L*x" not in kernels, "a stride-2 (interleaved) load is left"
    if _compat.INDUCTOR_CPP_VEC_BITCAST:
        assert "at::vec::cast<float>" in kernels
        assert "tmpbuf_out[i] = c10::bit_cast" not in kernels, "a vector bitcast went through a scalar loop"


def _int64_loads(code):
    """The argument lists of every int64 vector load in ``code``, e.g. ``['in_ptr0 + x0', '8']``."""
    import re

    loads = []
    for match in re.finditer(r"at::vec::Vectorized(?:N)?<int64_t(?:,\d+)?>::loadu\(", code):
        depth, args, start = 1, [], match.end()
        for i in range(start, len(code)):
            ch = code[i]
            if ch in "(<":
                depth += 1
            elif ch in ")>":
                depth -= 1
            if depth == 0 or (depth == 1 and ch == ","):
                args.append(code[start:i].strip())
                start = i + 1
                if depth == 0:
                    break
        loads.append(args)
    return loads


def _full_width_count():
    from torch._inductor import cpu_vec_isa

    return f"static_cast<int64_t>({cpu_vec_isa.pick_vec_isa().nelements(torch.float)})"


@pytest.mark.parametrize("name", ["a", "e", "f"])
def test_full_width_int64_loads_read_directly(name, compiled):
    """A complex64 input's int64 vectors are loaded without a lane count where the count is the full
    width (AVX2's counted int64 load copies through a stack buffer: a store-forwarding stall)."""
    from ptc import _compat

    loads = _int64_loads("\n".join(compiled[name][2]))
    assert loads, "no int64 vector load"
    counted = [args for args in loads if len(args) == 2 and args[1] == _full_width_count()]
    if _compat.INDUCTOR_CPP_VEC_LOAD_LINE:
        assert not counted, counted
        assert any(len(args) == 1 for args in loads)
    else:
        assert counted  # Inductor's own code, unchanged


def test_tail_int64_loads_keep_their_count(gen):
    """Where a loop's last vector is partial, its int64 loads keep Inductor's lane count; results as eager."""
    from ptc import _compat

    n = 4096 + 3
    args = (
        torch.randn(n, dtype=torch.complex64, generator=gen),
        torch.randn(n, dtype=torch.complex64, generator=gen),
        torch.randn(n, generator=gen),
    )
    torch._dynamo.reset()
    compiled = torch.compile(wl_a, backend=pc.backend(), dynamic=False)
    result, codes = pc.generated_code(compiled, *args)
    rel_close(result, wl_a(*args), torch.complex64)
    loads = _int64_loads("\n".join(codes))
    assert any(len(a) == 2 and a[1] != _full_width_count() for a in loads), loads
    if _compat.INDUCTOR_CPP_VEC_LOAD_LINE:
        assert any(len(a) == 1 for a in loads), loads


@pytest.mark.parametrize(
    "override, probe, owner, attribute",
    [
        ("vector_bitcasts", "INDUCTOR_CPP_VEC_BITCAST", "CppVecOverrides", "to_dtype_bitcast"),
        ("full_width_loads", "INDUCTOR_CPP_VEC_LOAD_LINE", "CppVecKernel", "_get_vec_load_line"),
        ("vector_math", "INDUCTOR_CPP_VEC_MATH", "CppVecOverrides", "sin"),
        ("vector_math", "INDUCTOR_CPP_VEC_MATH", "CppVecOverrides", "cos"),
        ("vector_math", "INDUCTOR_CPP_VEC_MATH", "CppVecOverrides", "hypot"),
        ("narrowing_shuffles", "INDUCTOR_CPP_VEC_NARROWING", "CppVecKernel", "get_to_dtype_expr"),
        ("narrowing_shuffles", "INDUCTOR_CPP_VEC_NARROWING", "CppVecOverrides", "bitwise_right_shift"),
        ("trig_reuse", "INDUCTOR_REALIZE_ON_REUSE", "StorageBox", "should_realize_on_reuse"),
    ],
)
def test_codegen_override_is_scoped(override, probe, owner, attribute):
    """Each codegen override is in place only inside its block, and removed on error too."""
    from torch._inductor import ir
    from torch._inductor.codegen import cpp as cpp_codegen

    from ptc import _compat
    from ptc.complex import codegen

    block = getattr(codegen, override)
    if not getattr(_compat, probe):
        with block() as active:
            assert active is False
        return
    cls = getattr(ir if owner == "StorageBox" else cpp_codegen, owner)
    before = cls.__dict__[attribute]
    with block() as active:
        assert active is True
        assert cls.__dict__[attribute] is not before
    assert cls.__dict__[attribute] is before
    with pytest.raises(KeyError):
        with block():
            raise KeyError("boom")
    assert cls.__dict__[attribute] is before


def test_cache_key_names_the_overrides():
    """The key pass appends to the user's passes, changes no graph, names the overrides; plain callables are left."""
    from torch._inductor import config
    from torch._inductor.custom_graph_pass import CustomGraphPass

    from ptc.complex.codegen import cache_key

    class UserPass(CustomGraphPass):
        calls = 0

        def __call__(self, graph):
            UserPass.calls += 1

        def uuid(self):
            return "user"

    user = UserPass()
    with config.patch(post_grad_custom_post_pass=user):
        with cache_key(loads=True, bitcasts=False) as keyed:
            assert keyed is True
            first, key = config.post_grad_custom_post_pass
            assert first is user
            assert key.uuid()[0] == "ptc.complex.codegen"
            assert key.uuid()[2] == (("bitcasts", False), ("loads", True))
            graph = torch.fx.symbolic_trace(lambda x: x + 1).graph
            before = str(graph)
            key(graph)
            assert str(graph) == before
        assert config.post_grad_custom_post_pass is user
        with cache_key(loads=False, bitcasts=False):
            other = config.post_grad_custom_post_pass[-1]
        assert other.uuid() != key.uuid()
        torch._dynamo.reset()  # the user's pass still runs in a ptc compile (not served from the cache: passes
        z = torch.randn(64, dtype=torch.complex64)  # do not run on a hit)
        with inductor_config.patch(fx_graph_cache=False):
            got = torch.compile(lambda z: (z * z).abs(), backend=pc.backend())(z)
        rel_close(got, (z * z).abs(), torch.complex64)
        assert UserPass.calls >= 1
    plain = lambda graph: None  # noqa: E731 - Inductor does not cache compiles with such a pass
    with config.patch(post_grad_custom_post_pass=plain):
        with cache_key(loads=True) as keyed:
            assert keyed is False
            assert config.post_grad_custom_post_pass is plain


def test_cached_code_of_other_overrides_is_not_served(gen, monkeypatch):
    """A graph compiled (and cached) without the load override is compiled again with it, not served."""
    import contextlib
    import sys

    from ptc import _compat

    backend_module = sys.modules["ptc.complex.backend"]
    args = (
        torch.randn(4096, dtype=torch.complex64, generator=gen),
        torch.randn(4096, dtype=torch.complex64, generator=gen),
    )

    def f(z, w):
        return (z * w - 0.25 * z).abs()

    def code():
        torch._dynamo.reset()
        with inductor_config.patch(fx_graph_cache=True, force_disable_caches=False):
            _, codes = pc.generated_code(torch.compile(f, backend=pc.backend()), *args)
        return _int64_loads("\n".join(codes))

    with monkeypatch.context() as m:
        m.setattr(backend_module, "full_width_loads", lambda: contextlib.nullcontext(False))
        assert all(len(a) == 2 for a in code())
    # where this Inductor has no load hook, nothing is overridden and the code stays counted
    assert any(len(a) == 1 for a in code()) is bool(_compat.INDUCTOR_CPP_VEC_LOAD_LINE)


def test_compiles_are_served_from_the_fx_graph_cache(gen):
    """ptc's decomposition table pickles by reference, so Inductor caches ptc's compiles (forward and
    backward); a second compile of the same graph is a cache hit with eager's results."""
    from torch._dynamo.utils import counters

    z = torch.randn(1000, dtype=torch.complex64, generator=gen, requires_grad=True)
    w = torch.randn(1000, dtype=torch.complex64, generator=gen)

    def f(z, w):
        return (z * w.conj() + 0.5j).abs().sum()

    expected = f(z, w)
    (expected_grad,) = torch.autograd.grad(expected, (z,))
    for attempt in range(2):
        torch._dynamo.reset()
        counters.clear()
        with inductor_config.patch(fx_graph_cache=True, force_disable_caches=False):
            out = torch.compile(f, backend=pc.backend())(z, w)
            (grad,) = torch.autograd.grad(out, (z,))
        rel_close(out.detach(), expected.detach(), torch.complex64)
        rel_close(grad, expected_grad, torch.complex64)
        assert counters["inductor"]["fxgraph_cache_bypass"] == 0, dict(counters["inductor"])
    assert counters["inductor"]["fxgraph_cache_hit"] == 2, dict(counters["inductor"])


def test_bits_round_trip_special_values():
    """split/join move bits, not values: NaN payloads, signed zeros, infinities and denormals survive."""
    from ptc.complex.pair import join, split

    raw = torch.tensor(
        [0x7FC00001, 0x80000000, 0x00000001, 0x7F800000, 0xFF800000, 0x3F800000, 0x7FBFFFFF, 0x807FFFFF],
        dtype=torch.int64,
    ).to(torch.int32)
    parts = raw.view(torch.float32)
    z = torch.view_as_complex(torch.stack([parts, parts.flip(0)], -1))
    re, im = split(z)
    assert torch.equal(re.view(torch.int32), raw) and torch.equal(im.view(torch.int32), raw.flip(0))
    back = join(re, im, torch.complex64)
    assert torch.equal(torch.view_as_real(back).view(torch.int32), torch.view_as_real(z).view(torch.int32))
    compiled = torch.compile(lambda z: (z * 1).conj().conj(), backend=pc.backend())
    got = compiled(z)
    # NaN payloads may change through arithmetic; the non-NaN bits must be exactly eager's
    exp = (z * 1).conj().conj()
    finite = ~torch.isnan(torch.view_as_real(exp))
    assert torch.equal(torch.view_as_real(got)[finite], torch.view_as_real(exp)[finite])


def test_exp_of_imaginary_multiple_is_cos_and_sin(compiled):
    """``exp(1j * theta)`` (the constant reaches the rule as a 0-d pair) computes no exp of a zero real part."""
    kernels = compiled["a"][2][0]
    assert ".cos()" in kernels and ".sin()" in kernels
    assert ".exp()" not in kernels


def test_no_complex_codegen_warning_from_ptc_compiles():
    """Inductor's "no code generation for complex operators" warning is not shown for ptc's graphs.

    Its joint-graph passes see the graph before ptc's rewrite and would warn;
    the graphs Inductor lowers read complex values through real views.
    """
    import warnings

    from torch._inductor import lowering

    once = getattr(lowering, "_warn_complex_not_supported", None)
    if hasattr(once, "cache_clear"):
        once.cache_clear()  # it warns once per process; make this compile the first
    u = torch.randn(8, 8, dtype=torch.complex64)
    x = torch.randn(8, dtype=torch.complex64)
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = torch.compile(lambda u, x: u @ (u.mH @ x), backend=pc.backend())(u, x)
    rel_close(out, u @ (u.mH @ x), torch.complex64)
    assert not [w for w in seen if "complex operators" in str(w.message)], [str(w.message) for w in seen]
