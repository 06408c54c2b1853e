"""MXFP8 / NVFP4 operands: the tiled scale layout, fp4 unpacking and what a block-scaled GEMM means,
checked against torch's own helpers (torch.testing._internal.common_quantized: to_blocked, the
fp4 packing _scaled_mm's tests use) and against plain arithmetic written out here."""

import math

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch.testing._internal.common_quantized import (
    _bfloat16_to_float4_e2m1fn_x2,
    _floatx_unpacked_to_f32,
    to_blocked,
)

from ptc.errors import WrongResult
from ptc.gemm import blockscale, runtime

G = torch.Generator().manual_seed(0)
E8M0, FP4 = torch.float8_e8m0fnu, torch.float4_e2m1fn_x2


def e8m0(rows, cols):
    """Powers of two from 2^-4 to 2^3 (e8m0 holds only the exponent, bias 127)."""
    return torch.randint(123, 131, (rows, cols), generator=G, dtype=torch.uint8).view(E8M0)


def fp4_values(q):
    """torch's own decoding of packed fp4 (low nibble first), independent of ptc's table."""
    codes = q.view(torch.uint8)
    nibbles = torch.stack((codes & 0xF, codes >> 4), dim=-1).reshape(q.shape[0], -1)
    return _floatx_unpacked_to_f32(nibbles, 2, 1)


def spread(scales, block, k):
    return scales.float().repeat_interleave(block, dim=1)[:, :k]


@settings(max_examples=15, deadline=None)
@given(rows=st.integers(1, 300), kb=st.integers(1, 9))
def test_tiled_layout_is_torchs_and_unswizzle_inverts_it(rows, kb):
    s = e8m0(rows, kb)
    tiled = blockscale.swizzle(s)
    assert torch.equal(tiled.view(torch.uint8), to_blocked(s).view(torch.uint8))
    assert tiled.numel() == blockscale.scale_count(rows, 32 * kb, 32)
    assert torch.equal(blockscale.unswizzle(tiled, rows, kb).view(torch.uint8), s.view(torch.uint8))


def test_tile_position_rule_of_the_docstring():
    s = torch.arange(128 * 4, dtype=torch.float32).reshape(128, 4)
    tiled = blockscale.swizzle(s)
    for i, j, c in [(0, 0, 0), (1, 0, 0), (0, 1, 0), (3, 31, 3), (2, 5, 1)]:
        assert tiled[16 * j + 4 * i + c] == s[32 * i + j, c]


def test_unswizzle_refuses_a_wrong_count():
    with pytest.raises(ValueError, match="holds 512"):
        blockscale.unswizzle(torch.zeros(500), 100, 3)


def test_fp4_unpacking_matches_torchs_packing():
    x = (torch.randn(8, 64, generator=G) * 3).bfloat16()
    q = _bfloat16_to_float4_e2m1fn_x2(x)
    assert q.shape == (8, 32)
    assert torch.equal(blockscale.unpack_fp4(q), fp4_values(q))
    codes = torch.tensor([[0x21, 0xF7]], dtype=torch.uint8).view(FP4)  # low nibble first
    assert blockscale.unpack_fp4(codes).tolist() == [[0.5, 1.0, 6.0, -6.0]]


def test_modes():
    assert blockscale.mode_of(torch.float8_e4m3fn, E8M0) == "block32"
    assert blockscale.mode_of(FP4, torch.float8_e4m3fn) == "block16"
    assert blockscale.mode_of(torch.float8_e4m3fn, torch.float32) is None
    assert blockscale.mode_of(FP4, E8M0) is None  # MXFP4: not planned
    with pytest.raises(ValueError, match="not MXFP8 or NVFP4"):
        blockscale.block_of(torch.bfloat16, E8M0)
    assert blockscale.scale_count(1, 1, 32) == 128 * 4
    assert blockscale.scale_count(129, 32 * 5, 32) == 256 * 8


def mxfp8(m, n, k):
    a = torch.randn(m, k, generator=G).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, generator=G).to(torch.float8_e4m3fn).t()  # K-major, as _scaled_mm wants
    sa, sb = e8m0(m, -(-k // 32)), e8m0(n, -(-k // 32))
    want = (a.float() * spread(sa, 32, k)) @ (b.t().float() * spread(sb, 32, k)).t()
    return a, b, blockscale.swizzle(sa), blockscale.swizzle(sb), want


def nvfp4(m, n, k):
    qa = torch.randint(0, 256, (m, k // 2), generator=G, dtype=torch.uint8).view(FP4)
    qb = torch.randint(0, 256, (n, k // 2), generator=G, dtype=torch.uint8).view(FP4)
    sa = (torch.rand(m, k // 16, generator=G) * 2 + 0.25).to(torch.float8_e4m3fn)
    sb = (torch.rand(n, k // 16, generator=G) * 2 + 0.25).to(torch.float8_e4m3fn)
    want = (fp4_values(qa) * spread(sa, 16, k)) @ (fp4_values(qb) * spread(sb, 16, k)).t()
    return qa, qb.t(), blockscale.swizzle(sa), blockscale.swizzle(sb), want


@pytest.mark.parametrize("make", [mxfp8, nvfp4])
def test_reference_is_the_dequantized_product(make):
    a, b, sa, sb, want = make(40, 24, 96)
    got = runtime.reference(a, b, None, dict(zip(runtime.BLOCK_SCALES, (sa, sb))))
    torch.testing.assert_close(got, want)


def test_dequantize_handles_a_k_that_is_not_a_whole_number_of_tiles():
    a, b, sa, sb, want = mxfp8(3, 5, 32 * 5)  # 5 blocks: padded to 8 columns of scales
    torch.testing.assert_close(runtime.reference(a, b, None, dict(zip(runtime.BLOCK_SCALES, (sa, sb)))), want)


def kernel(compute):
    def launch(operator, arch, a, b, out, source, operands):
        out.copy_(compute(a, b, *operands.values()).to(out.dtype))

    return launch


def right(a, b, sa, sb):
    return blockscale.dequantize(a, sa) @ blockscale.dequantize(b.t(), sb).t()


@pytest.mark.parametrize("make", [mxfp8, nvfp4])
def test_a_block_scaled_call_is_checked_and_a_kernel_that_gets_the_scales_wrong_is_refused(make):
    a, b, sa, sb, want = make(32, 48, 64)
    out = torch.empty(32, 48, dtype=torch.bfloat16)
    with runtime.launcher(kernel(right)):
        runtime.ptc_nvgemm_block_scaled_mm(a, b, sa, sb, out=out, operator="k", arch="100a")
    torch.testing.assert_close(out.float(), want, rtol=2**-7, atol=1e-3)
    wrong = {
        "scales ignored": lambda a, b, sa, sb: (blockscale.unpack_fp4(a) if a.dtype == FP4 else a.float())
        @ (blockscale.unpack_fp4(b.t()) if b.dtype == FP4 else b.t().float()).t(),
        "scales swapped": lambda a, b, sa, sb: right(a, b, sb, sa),
        "scales untiled": lambda a, b, sa, sb: right(a, b, sa.reshape(32, -1).t().reshape(-1), sb),
    }
    for what, compute in wrong.items():
        with runtime.launcher(kernel(compute)), pytest.raises(WrongResult, match=r"dequantize\(a\) @ dequantize\(b\)"):
            runtime.ptc_nvgemm_block_scaled_mm(a, b, sa, sb, out=out, operator="k", arch="100a")


class _Node:
    """The part of an Inductor IR node ptc's scale check reads."""

    def __init__(self, size, dtype, stride=None):
        self.size, self.dtype = list(size), dtype
        self.stride = stride or [math.prod(size[i + 1:]) for i in range(len(size))]  # contiguous

    def get_size(self):
        return self.size

    def get_stride(self):
        return self.stride

    def get_dtype(self):
        return self.dtype


class _Graph:
    class sizevars:
        @staticmethod
        def optimization_hint(e):
            return e

        @staticmethod
        def statically_known_equals(a, b):
            return a == b

    def __init__(self, target):
        self.current_node = type("FxNode", (), {"target": target})()


def scale_mode(target, a, b, sa, sb):
    from torch._inductor.virtualized import V

    from ptc.gemm.inductor import _scale_mode

    with V.set_graph_handler(_Graph(target)):
        return _scale_mode(a, b, sa, sb)


def test_which_scales_ptc_takes_from_a_scaled_mm_node():
    v1 = torch.ops.aten._scaled_mm.default
    e4m3 = torch.float8_e4m3fn
    a, b = _Node((200, 64), e4m3), _Node((64, 48), e4m3, [1, 64])
    mx = _Node((256 * 4,), E8M0), _Node((128 * 4,), E8M0)
    assert scale_mode(v1, a, b, *mx) == ("block32", "")
    assert scale_mode(v1, a, b, _Node((1,), torch.float32), _Node((1,), torch.float32)) == ("tensor", "")
    assert scale_mode(v1, a, b, _Node((200, 1), torch.float32), _Node((1, 48), torch.float32)) == ("row", "")
    nv_a, nv_b = _Node((200, 32), FP4), _Node((32, 48), FP4, [1, 32])
    assert scale_mode(v1, nv_a, nv_b, _Node((1024,), e4m3), _Node((512,), e4m3)) == ("block16", "")
    refused = {
        "untiled count": (v1, a, b, _Node((200 * 2,), E8M0), mx[1]),
        "A and B counts swapped": (v1, a, b, mx[1], mx[0]),
        "not contiguous": (v1, a, b, _Node((256, 4), E8M0, [1, 256]), mx[1]),
        "MXFP4 (fp4 with e8m0)": (v1, nv_a, nv_b, _Node((512,), E8M0), _Node((512,), E8M0)),
        "mixed modes": (v1, a, nv_b, mx[0], _Node((512,), e4m3)),
        "_scaled_mm_v2 (names its layout)": (torch.ops.aten._scaled_mm_v2.default, a, b, *mx),
        "odd float32 shapes": (v1, a, b, _Node((200, 2), torch.float32), _Node((1, 48), torch.float32)),
    }
    for what, args in refused.items():
        mode, why = scale_mode(*args)
        assert mode is None and why, what
    assert "tiled layout for m=200, n=48, k=64 holds 1024 and 512" in scale_mode(*refused["untiled count"])[1]
    assert "from aten._scaled_mm only" in scale_mode(*refused["_scaled_mm_v2 (names its layout)"])[1]


@pytest.mark.parametrize("mode", ["block32", "block16"])
def test_random_operands_are_what_scaled_mm_takes(mode):
    a, b, sa, sb = blockscale.random_operands(mode, 130, 48, 96, generator=G)
    k_cols = 96 // 2 if mode == "block16" else 96
    assert a.shape == (130, k_cols) and b.shape == (k_cols, 48) and b.stride() == (1, k_cols)
    assert blockscale.mode_of(a.dtype, sa.dtype) == blockscale.mode_of(b.dtype, sb.dtype) == mode
    block = blockscale.MODES[mode][0]
    assert sa.numel() == blockscale.scale_count(130, 96, block) and sb.numel() == blockscale.scale_count(48, 96, block)
    s = blockscale.unswizzle(sa, 130, 96 // block).float()
    assert s.min() >= 0.125 and s.max() <= 4.5  # no zero scale inside the used region
    with pytest.raises(ValueError, match="not one of block32, block16"):
        blockscale.random_operands("row", 1, 1, 32)


def test_a_scale_view_off_the_kernels_alignment_is_copied_not_launched_misaligned():
    a, b, sa, sb, want = mxfp8(32, 48, 64)
    buffer = torch.empty(sa.numel() + 16, dtype=torch.uint8).view(E8M0)
    start = next(i for i in range(1, 32) if (buffer.data_ptr() + i) % runtime.SCALE_ALIGN)  # off by a few bytes
    shifted = buffer[start:start + sa.numel()]
    shifted.copy_(sa)
    seen = []

    def launch(operator, arch, a, b, out, source, operands):
        seen.append([t.data_ptr() % runtime.SCALE_ALIGN for t in operands.values()])
        kernel(right)(operator, arch, a, b, out, source, operands)

    out = torch.empty(32, 48, dtype=torch.bfloat16)
    with runtime.launcher(launch):
        runtime.ptc_nvgemm_block_scaled_mm(a, b, shifted, sb, out=out, operator="k", arch="100a")
    assert shifted.data_ptr() % runtime.SCALE_ALIGN and seen == [[0, 0]]
    torch.testing.assert_close(out.float(), want, rtol=2**-7, atol=1e-2)
