"""ptc's AVX2 int64 -> int32 narrowing by shuffles (ptc.complex.codegen.narrowing_shuffles).

The compiles here ask Inductor for 256-bit vectors (``cpp.simdlen=256``), so
the AVX2 code is generated and run on AVX-512 CPUs too. Where this CPU or
torch has no such path (no AVX2, no hook) the same checks run on Inductor's
own code.
"""

import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import ptc.complex as pc
from ptc import _compat

N = 4096 + 3  # whole vectors and a tail
AVX2 = {"cpp.simdlen": 256}
ATEN_NARROWING = "at::vec::convert<int32_t,1,int64_t,2>"


def _avx2_here() -> bool:
    from torch._inductor import config as inductor_config
    from torch._inductor import cpu_vec_isa

    with inductor_config.patch({"cpp.simdlen": 256}):
        isa = cpu_vec_isa.pick_vec_isa()
    return (
        _compat.INDUCTOR_CPP_VEC_NARROWING
        and isinstance(isa, cpu_vec_isa.VecAVX2)
        and not isinstance(isa, cpu_vec_isa.VecAVX512)
    )


def _compiled(fn, *args):
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=pc.backend(options=AVX2), dynamic=False)
    _, codes = pc.generated_code(compiled, *args)
    return compiled, "\n".join(codes)


def _halves(z):
    return z.real * 2.0, z.imag * 4.0  # exact: each part's bits are checked


@pytest.fixture(scope="module")
def gen():
    return torch.Generator().manual_seed(0)


@pytest.fixture(scope="module")
def halves():
    return _compiled(_halves, torch.zeros(N, dtype=torch.complex64))


def _shifts(x, s):
    return (x >> 32).to(torch.int32), (x >> 5).to(torch.int32), (x >> s).to(torch.int32), x.to(torch.int32)


@pytest.fixture(scope="module")
def shifts():
    return _compiled(_shifts, torch.zeros(N, dtype=torch.int64), torch.zeros(N, dtype=torch.int64))


def _same(got, want):
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
        assert torch.equal(torch.signbit(g), torch.signbit(w))


def test_complex64_halves_are_two_shuffles(halves):
    """On AVX2 both parts of a complex64 come from shuffles of its int64 bits, with no ATen narrowing left."""
    _, code = halves
    if _avx2_here():
        assert ATEN_NARROWING not in code
        assert "_mm256_castsi256_ps(a[1]), 0xDD)" in code  # the high halves (the imaginary parts), from the bits
        assert "_mm256_castsi256_ps(x[1]), 0x88)" in code  # the low halves (the real parts)
    else:
        assert ATEN_NARROWING in code or "_mm256_shuffle_ps" not in code


def _specials():
    f = torch.tensor(
        [0.0, -0.0, 1.0, -1.0, float("inf"), -float("inf"), float("nan"), 1e-45, -1e-45, 1.2e-38, -3.4e38, 3.4e38],
        dtype=torch.float32,
    )
    re, im = torch.meshgrid(f, f, indexing="ij")
    return torch.complex(re.reshape(-1), im.reshape(-1))


def test_complex64_halves_match_eager(halves, gen):
    """Every lane's real and imaginary part, in order, in whole vectors and the tail: signs, zeros, inf, nan."""
    compiled, _ = halves
    z = torch.randn(N, dtype=torch.complex64, generator=gen)
    special = _specials()
    z[: special.numel()] = special
    z[-special.numel() :] = special.flip(0)
    _same(compiled(z), _halves(z))


def test_int64_shifts_narrow_as_eager(shifts, gen):
    """``(x >> 32)``, ``(x >> 5)``, ``(x >> s)`` per lane, and ``x`` itself narrowed to int32: eager's values."""
    compiled, code = shifts
    x = torch.randint(-(2**63), 2**63 - 1, (N,), dtype=torch.int64, generator=gen)
    x[:8] = torch.tensor([0, -1, 2**31, -(2**31), 2**32, -(2**32), 2**63 - 1, -(2**63)])
    s = torch.randint(0, 64, (N,), generator=gen)
    s[:16] = 32  # whole vectors of 32: the high halves directly
    s[16:24] = torch.tensor([32, 32, 32, 32, 32, 32, 32, 31])  # one lane off: the shift itself
    _same(compiled(x, s), _shifts(x, s))
    if _avx2_here():
        assert ATEN_NARROWING not in code
        shifts_written = re.findall(r"= tmp\d+ >> tmp\d+;", code)
        assert len(shifts_written) == 6  # three shifts, in the vector loop and its tail
        assert code.count("0xDD") == len(shifts_written)  # each narrowed shift is noted and checks its b


@settings(max_examples=15, deadline=None)
@given(
    st.lists(st.integers(-(2**63), 2**63 - 1), min_size=37, max_size=37),
    st.lists(st.sampled_from([0, 1, 31, 32, 33, 63]), min_size=37, max_size=37),
)
def test_any_int64_narrows_as_eager(shifts, xs, ss):
    compiled, _ = shifts
    x = torch.tensor(xs * (N // 37 + 1), dtype=torch.int64)[:N]
    s = torch.tensor(ss * (N // 37 + 1), dtype=torch.int64)[:N]
    _same(compiled(x, s), _shifts(x, s))
