"""Instruction semantics of the CPU emulator on hand-written PTX, checked bit-exactly.

Each case runs one instruction for many threads (one input element per
thread) and compares with an independent reference: Python integers for
integer ops, exact rationals (``fractions.Fraction``) for rounded float ops.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from _emulator import backend, elementwise, kernel_ptx, launch, ptr, round_f32

from ptxbridge.loaders.emulator import float_math

RNG = np.random.default_rng(11)
def ints(dtype: type, n: int = 512) -> np.ndarray:
    info = np.iinfo(dtype)
    edges = np.array([info.min, info.max, 0, 1, info.max // 2, info.min + 1 if info.min else 2], dtype)
    return np.concatenate([edges, RNG.integers(info.min, info.max, n - len(edges), dtype=dtype,
                                               endpoint=True)])


def wrap(value: int, bits: int, signed: bool) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if signed and value >> (bits - 1) else value


# -- integers ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("t", "dtype"), [("u64", np.uint64), ("s64", np.int64), ("u32", np.uint32),
                                          ("s32", np.int32)])
def test_mul_hi_is_the_high_half_of_the_full_product(t, dtype):
    a, b = ints(dtype), ints(dtype)[::-1].copy()
    bits = 8 * np.dtype(dtype).itemsize
    got = elementwise(f"mul.hi.{t} %d, %a, %b;", dtype, a, b)
    expected = [wrap((int(x) * int(y)) >> bits, bits, t[0] == "s") for x, y in zip(a, b, strict=True)]
    assert got.tolist() == expected


def test_mul_wide_and_mad_wrap():
    a, b, c = ints(np.int32), ints(np.int32)[::-1].copy(), ints(np.int32)[3:].tolist() + [0, 0, 0]
    c = np.array(c, np.int32)
    assert elementwise("mul.wide.s32 %d, %a, %b;", np.int64, a, b).tolist() == \
        [int(x) * int(y) for x, y in zip(a, b, strict=True)]
    assert elementwise("mad.lo.s32 %d, %a, %b, %c;", np.int32, a, b, c).tolist() == \
        [wrap(int(x) * int(y) + int(z), 32, True) for x, y, z in zip(a, b, c, strict=True)]


def _trunc_div(x: int, y: int) -> tuple[int, int]:
    q = abs(x) // abs(y) * (1 if (x >= 0) == (y >= 0) else -1)
    return q, x - q * y


def test_signed_division_truncates_and_wraps_at_the_minimum():
    a = ints(np.int32)
    b = np.where(ints(np.int32)[::-1] == 0, -1, ints(np.int32)[::-1]).astype(np.int32)
    b[:4] = [-1, 7, -7, 3]
    quotient = elementwise("div.s32 %d, %a, %b;", np.int32, a, b)
    remainder = elementwise("rem.s32 %d, %a, %b;", np.int32, a, b)
    expected = [_trunc_div(int(x), int(y)) for x, y in zip(a, b, strict=True)]
    assert quotient.tolist() == [wrap(q, 32, True) for q, _ in expected]
    assert remainder.tolist() == [wrap(r, 32, True) for _, r in expected]


@pytest.mark.parametrize("instruction", ["shl.b32", "shr.u32", "shr.s32"])
def test_shifts_by_the_width_or_more(instruction):
    a = ints(np.int32, 64)
    amount = np.arange(64, dtype=np.uint32) % 40
    got = elementwise(f"{instruction} %d, %a, %b;", np.int32, a, amount).tolist()
    for x, s, g in zip(a.tolist(), amount.tolist(), got, strict=True):
        if instruction == "shl.b32":
            assert g == wrap(x << s if s < 32 else 0, 32, True)
        elif instruction == "shr.u32":
            assert g == wrap((x & 0xFFFFFFFF) >> min(s, 32), 32, True)
        else:
            assert g == x >> min(s, 31)


def _bfe_reference(x: int, pos: int, length: int, signed: bool) -> int:
    """PTX ISA 9.7.8.7 ``bfe``, bit by bit, for 32-bit operands."""
    pos, length = pos & 0xFF, length & 0xFF
    sbit = (x >> min(pos + length - 1, 31)) & 1 if signed and length else 0
    bits = [(x >> (pos + i)) & 1 if i < length and pos + i <= 31 else sbit for i in range(32)]
    return wrap(sum(bit << i for i, bit in enumerate(bits)), 32, signed)


@pytest.mark.parametrize("signed", [False, True])
def test_bit_field_extract(signed):
    a = ints(np.uint32, 512)
    pos = RNG.integers(0, 40, 512).astype(np.uint32)
    length = RNG.integers(0, 40, 512).astype(np.uint32)
    t, out = ("s32", np.int32) if signed else ("u32", np.uint32)
    got = elementwise(f"bfe.{t} %d, %a, %b, %c;", out, a, pos, length)
    assert got.tolist() == [_bfe_reference(x, p, n, signed) for x, p, n in
                            zip(a.tolist(), pos.tolist(), length.tolist(), strict=True)]


def test_bit_field_insert():
    field, base = ints(np.uint32, 256), ints(np.uint32, 256)[::-1].copy()
    pos = RNG.integers(0, 32, 256).astype(np.uint32)
    got = elementwise("bfi.b32 %d, %a, %b, %c, 8;", np.uint32, field, base, pos)
    for f, b, p, g in zip(field.tolist(), base.tolist(), pos.tolist(), got.tolist(), strict=True):
        mask = (0xFF << p) & 0xFFFFFFFF
        assert g == (b & ~mask & 0xFFFFFFFF) | ((f << p) & mask)


def test_extended_precision_chains_add_and_subtract_64_bit_values():
    a, b = ints(np.uint64, 256), ints(np.uint64, 256)[::-1].copy()
    chain = ".reg .b32 %al, %ah, %bl, %bh, %l, %h; mov.b64 {%al, %ah}, %a; mov.b64 {%bl, %bh}, %b; "
    added = elementwise(chain + "add.cc.u32 %l, %al, %bl; addc.u32 %h, %ah, %bh; mov.b64 %d, {%l, %h};",
                        np.uint64, a, b)
    subtracted = elementwise(chain + "sub.cc.u32 %l, %al, %bl; subc.cc.u32 %h, %ah, %bh; "
                             "addc.u32 %u, 0, 0; mov.b64 %d, {%l, %h};", np.uint64, a, b)
    flag = elementwise(chain + "sub.cc.u32 %l, %al, %bl; subc.cc.u32 %h, %ah, %bh; addc.u32 %u, 0, 0; "
                       "cvt.u64.u32 %d, %u;", np.uint64, a, b)
    pairs = list(zip(a.tolist(), b.tolist(), strict=True))
    assert added.tolist() == [(x + y) % 2**64 for x, y in pairs]
    assert subtracted.tolist() == [(x - y) % 2**64 for x, y in pairs]
    assert flag.tolist() == [int(x >= y) for x, y in pairs]  # the flag after a subtraction is NOT borrow


def test_saturating_add_and_cvt():
    a, b = ints(np.int32), ints(np.int32)[::-1].copy()
    assert elementwise("add.sat.s32 %d, %a, %b;", np.int32, a, b).tolist() == \
        [max(-2**31, min(2**31 - 1, int(x) + int(y))) for x, y in zip(a, b, strict=True)]
    assert elementwise("cvt.sat.u8.s32 %d, %a;", np.uint16, a).tolist() == \
        [max(0, min(255, int(x))) for x in a]
    assert elementwise("cvt.s8.s32 %d, %a;", np.int16, a).tolist() == [wrap(int(x), 8, True) for x in a]


def test_popc_clz_brev_on_64_bits():
    a = ints(np.uint64)
    values = [int(x) for x in a]
    assert elementwise("popc.b64 %u, %a; cvt.u64.u32 %d, %u;", np.uint64, a).tolist() == \
        [bin(v).count("1") for v in values]
    assert elementwise("clz.b64 %u, %a; cvt.u64.u32 %d, %u;", np.uint64, a).tolist() == \
        [64 - v.bit_length() for v in values]
    assert elementwise("brev.b64 %d, %a;", np.uint64, a).tolist() == \
        [int(f"{v:064b}"[::-1], 2) for v in values]


def test_prmt_selects_and_replicates_signs():
    a, b = ints(np.uint32, 128), ints(np.uint32, 128)[::-1].copy()
    selector = RNG.integers(0, 1 << 16, 128).astype(np.uint32)
    got = elementwise("prmt.b32 %d, %a, %b, %c;", np.uint32, a, b, selector)
    for x, y, s, g in zip(a.tolist(), b.tolist(), selector.tolist(), got.tolist(), strict=True):
        source = (y << 32) | x
        expected = 0
        for i in range(4):
            nibble = (s >> (4 * i)) & 0xF
            byte = (source >> (8 * (nibble & 7))) & 0xFF
            if nibble & 8:
                byte = 0xFF if byte & 0x80 else 0
            expected |= byte << (8 * i)
        assert g == expected


# -- floats ------------------------------------------------------------------------------------

def f32s(n: int = 512) -> np.ndarray:
    mantissa = RNG.integers(1 << 23, 1 << 24, n)
    exponent = RNG.integers(-10, 10, n)
    sign = RNG.choice([-1, 1], n)
    return (sign * mantissa * np.exp2(exponent - 23.0)).astype(np.float32)


@pytest.fixture(params=["native", "emulated"])
def fma_path(request, monkeypatch):
    """Round-to-nearest fma through the C ufunc (where it was built) and through the NumPy emulation."""
    if request.param == "emulated":
        monkeypatch.setattr(float_math, "native_fma", None)
    elif float_math.native_fma is None:
        pytest.skip("the C fma extension (loaders/emulator/_native.c) was not built")
    return request.param


def test_fma_f32_is_rounded_once_including_ties(fma_path):
    a, b, c = f32s(), f32s(), f32s()
    # c = -(a*b rounded to 26 bits) plus half an f32 ulp of the product makes exact ties.
    product = a.astype(np.float64) * b.astype(np.float64)
    c[:128] = (-product[:128]).astype(np.float32)
    got = elementwise("fma.rn.f32 %d, %a, %b, %c;", np.float32, a, b, c)
    for x, y, z, g in zip(a.tolist(), b.tolist(), c.tolist(), got.tolist(), strict=True):
        assert g == round_f32(Fraction(x) * Fraction(y) + Fraction(z), "rn")


@pytest.mark.parametrize("mode", ["rn", "rz", "rm", "rp"])
@pytest.mark.parametrize("op", ["add", "mul", "fma"])
def test_directed_rounding_f32(mode, op):
    a, b, c = f32s(), f32s(), f32s()
    operands = "%a, %b, %c" if op == "fma" else "%a, %b"
    got = elementwise(f"{op}.{mode}.f32 %d, {operands};", np.float32, a, b, c)
    for x, y, z, g in zip(a.tolist(), b.tolist(), c.tolist(), got.tolist(), strict=True):
        exact = {"add": Fraction(x) + Fraction(y), "mul": Fraction(x) * Fraction(y),
                 "fma": Fraction(x) * Fraction(y) + Fraction(z)}[op]
        assert g == round_f32(exact, mode)


@pytest.mark.parametrize("mode", ["rn", "rz", "rm", "rp"])
@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_directed_rounding_f16(mode, op):
    a = RNG.uniform(-4, 4, 256).astype(np.float16)
    b = RNG.uniform(-4, 4, 256).astype(np.float16)
    b[:8] = np.float16(0.00075)  # 1.0 + 0.00075 lies between two f16 values
    a[:8] = np.float16(1.0)
    got = elementwise(f"{op}.{mode}.f16 %d, %a, %b;", np.float16, a, b)
    for x, y, g in zip(a.tolist(), b.tolist(), got.tolist(), strict=True):
        exact = {"add": Fraction(x) + Fraction(y), "sub": Fraction(x) - Fraction(y),
                 "mul": Fraction(x) * Fraction(y)}[op]
        assert g == round_f32(exact, mode, np.float16)


def test_fma_f64_matches_the_exact_result(fma_path):
    a, b, c = RNG.normal(size=512), RNG.normal(size=512), RNG.normal(size=512)
    c[:100] = -(a[:100] * b[:100])  # catastrophic cancellation: only the exact product survives
    got = elementwise("fma.rn.f64 %d, %a, %b, %c;", np.float64, a, b, c)
    for x, y, z, g in zip(a.tolist(), b.tolist(), c.tolist(), got.tolist(), strict=True):
        assert g == float(Fraction(x) * Fraction(y) + Fraction(z))


def test_ordered_and_unordered_float_compares():
    a = np.array([1.0, np.nan, 2.0, np.nan, -0.0, 3.0], np.float32)
    b = np.array([2.0, 1.0, np.nan, np.nan, 0.0, 3.0], np.float32)
    table = {}
    for cmp in ("lt", "ltu", "ne", "neu", "eq", "equ", "num", "nan", "ge", "geu"):
        instruction = f"setp.{cmp}.f32 %p, %a, %b; selp.u32 %d, 1, 0, %p;"
        table[cmp] = elementwise(instruction, np.uint32, a, b).tolist()
    assert table["lt"] == [1, 0, 0, 0, 0, 0] and table["ltu"] == [1, 1, 1, 1, 0, 0]
    assert table["ne"] == [1, 0, 0, 0, 0, 0] and table["neu"] == [1, 1, 1, 1, 0, 0]
    assert table["eq"] == [0, 0, 0, 0, 1, 1] and table["equ"] == [0, 1, 1, 1, 1, 1]
    assert table["num"] == [1, 0, 0, 0, 1, 1] and table["nan"] == [0, 1, 1, 1, 0, 0]
    assert table["ge"] == [0, 0, 0, 0, 1, 1] and table["geu"] == [0, 1, 1, 1, 1, 1]


def test_bf16_compares_as_numbers_not_bits():
    a = (np.array([1.0, -2.0, np.nan, 3.0], np.float32).view(np.uint32) >> 16).astype(np.uint16)
    b = (np.array([2.0, -3.0, 1.0, 3.0], np.float32).view(np.uint32) >> 16).astype(np.uint16)
    got = elementwise("setp.lt.bf16 %p, %a, %b; selp.u32 %d, 1, 0, %p;", np.uint32, a, b)
    assert got.tolist() == [1, 0, 0, 0]


def test_setp_with_a_boolean_combination_and_two_destinations():
    a, b = ints(np.int32, 64), ints(np.int32, 64)[::-1].copy()
    got = elementwise("setp.gt.s32 %p, %b, 0; setp.lt.and.s32 %q|%p, %a, %b, %p; "
                      "selp.u32 %d, 1, 0, %p;", np.uint32, a, b)
    assert got.tolist() == [int(not (x < y) and y > 0) for x, y in zip(a.tolist(), b.tolist(), strict=True)]


def test_float_to_int_conversion_saturates_and_rounds():
    x = np.array([1.5, 2.5, -1.5, -2.5, 3e9, -3e9, np.nan, np.inf, -np.inf, 0.49999997], np.float32)
    assert elementwise("cvt.rni.s32.f32 %d, %a;", np.int32, x).tolist() == \
        [2, 2, -2, -2, 2**31 - 1, -2**31, 0, 2**31 - 1, -2**31, 0]
    assert elementwise("cvt.rzi.u32.f32 %d, %a;", np.uint32, x).tolist() == \
        [1, 2, 0, 0, 3_000_000_000, 0, 0, 2**32 - 1, 0, 0]
    assert elementwise("cvt.rmi.s32.f32 %d, %a;", np.int32, x).tolist()[:4] == [1, 2, -2, -3]
    assert elementwise("cvt.rpi.s32.f32 %d, %a;", np.int32, x).tolist()[:4] == [2, 3, -1, -2]


def test_float_narrowing_conversions():
    x = RNG.normal(size=256) * 1000
    assert elementwise("cvt.rn.f32.f64 %d, %a;", np.float32, x).tolist() == \
        [round_f32(Fraction(v), "rn") for v in x.tolist()]
    assert elementwise("cvt.rz.f32.f64 %d, %a;", np.float32, x).tolist() == \
        [round_f32(Fraction(v), "rz") for v in x.tolist()]
    y = x.astype(np.float32)
    half = elementwise("cvt.rn.f16.f32 %d, %a;", np.float16, y)
    np.testing.assert_array_equal(half, y.astype(np.float16))
    bf16 = elementwise("cvt.rn.bf16.f32 %d, %a;", np.uint16, y)
    widened = (bf16.astype(np.uint32) << 16).view(np.float32)
    assert all(abs(float(w) - float(v)) <= abs(float(v)) * 2**-8 for w, v in zip(widened, y, strict=True))
    back = elementwise("cvt.f32.bf16 %d, %a;", np.float32, bf16)
    np.testing.assert_array_equal(back, widened)


def test_min_max_prefer_the_number_over_nan():
    a = np.array([1.0, np.nan, -0.0, 5.0], np.float32)
    b = np.array([np.nan, 2.0, 3.0, -5.0], np.float32)
    assert elementwise("min.f32 %d, %a, %b;", np.float32, a, b).tolist() == [1.0, 2.0, -0.0, -5.0]
    assert elementwise("max.f32 %d, %a, %b;", np.float32, a, b).tolist() == [1.0, 2.0, 3.0, 5.0]


@pytest.mark.parametrize("t", ["f32", "f64"])
def test_min_max_order_signed_zeros(t):
    # PTX ISA min/max notes: "If values of both inputs are 0.0, then +0.0 > -0.0" (either order).
    dtype = np.float32 if t == "f32" else np.float64
    a, b = np.array([0.0, -0.0, -0.0, 0.0], dtype), np.array([-0.0, 0.0, -0.0, 0.0], dtype)
    for mods in ("", ".NaN") if t == "f32" else ("",):
        low = elementwise(f"min{mods}.{t} %d, %a, %b;", dtype, a, b)
        high = elementwise(f"max{mods}.{t} %d, %a, %b;", dtype, a, b)
        assert np.signbit(low).tolist() == [True, True, True, False]
        assert np.signbit(high).tolist() == [False, False, True, False]


def test_packed_half_min_max_honour_nan_and_signed_zeros():
    # lanes (low, high): a = (NaN, +0), b = (1.0, -0)
    a, b = np.array([0x00007E00], np.uint32), np.array([0x80003C00], np.uint32)
    assert elementwise("min.f16x2 %d, %a, %b;", np.uint32, a, b).tolist() == [0x80003C00]
    assert elementwise("max.f16x2 %d, %a, %b;", np.uint32, a, b).tolist() == [0x00003C00]
    nan_min = elementwise("min.NaN.f16x2 %d, %a, %b;", np.uint32, a, b)
    assert np.isnan(np.array([nan_min[0] & 0xFFFF], np.uint16).view(np.float16)[0])
    assert nan_min[0] >> 16 == 0x8000


def _round_f64(x: Fraction, mode: str) -> float:
    near = float(x)  # correctly rounded to nearest
    if Fraction(near) == x:
        return near
    lo = near if Fraction(near) < x else float(np.nextafter(near, -np.inf))
    hi = float(np.nextafter(lo, np.inf))
    return lo if mode == "rm" or (mode == "rz" and x > 0) else hi


@pytest.mark.parametrize("mode", ["rz", "rm", "rp"])
def test_directed_rounding_of_f64_division(mode):
    a, b = (RNG.standard_normal(251) * 10.0 ** RNG.integers(-5, 5, 251) for _ in range(2))
    a, b = np.concatenate([[1.0, -1.0, 2.0, 1.0, 6.0], a]), np.concatenate([[3.0, 3.0, 7.0, 10.0, 3.0], b])
    got = elementwise(f"div.{mode}.f64 %d, %a, %b;", np.float64, a, b)
    assert got.tolist() == [_round_f64(Fraction(x) / Fraction(y), mode) for x, y in zip(a, b, strict=True)]
    big, tiny = np.array([1e300, -1e300]), np.array([1e-10, 1e-10])
    top = np.finfo(np.float64).max
    expected = {"rz": [top, -top], "rm": [top, -np.inf], "rp": [np.inf, -top]}[mode]
    assert elementwise(f"div.{mode}.f64 %d, %a, %b;", np.float64, big, tiny).tolist() == expected


def test_selp_and_slct():
    a, b, c = ints(np.int32, 64), ints(np.int32, 64)[::-1].copy(), np.roll(ints(np.int32, 64), 5)
    got = elementwise("slct.s32.s32 %d, %a, %b, %c;", np.int32, a, b, c)
    assert got.tolist() == [x if z >= 0 else y for x, y, z in zip(a, b, c, strict=True)]
    got = elementwise("setp.lt.s32 %p, %c, %a; selp.b32 %d, %a, %b, %p;", np.int32, a, b, c)
    assert got.tolist() == [x if z < x else y for x, y, z in zip(a, b, c, strict=True)]


def test_mov_packs_and_unpacks_halves():
    a = ints(np.uint64, 64)
    got = elementwise(".reg .b32 %lo, %hi; mov.b64 {%lo, %hi}, %a; mov.b64 %d, {%hi, %lo};", np.uint64, a)
    assert got.tolist() == [((int(v) & 0xFFFFFFFF) << 32) | (int(v) >> 32) for v in a]


# -- warps -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("mode", "b", "c"), [("down", 3, 0x1F), ("up", 5, 0), ("bfly", 6, 0x1F),
                                              ("idx", 9, 0x1F), ("down", 2, 0x70F), ("idx", 33, 0x1F),
                                              ("bfly", 0x41, 0x1F), ("down", 0x101, 0x1F)])
def test_shfl_sync_follows_the_lane_rules(mode, b, c):
    a = np.arange(64, dtype=np.uint32) * 10
    got = elementwise(f"shfl.sync.{mode}.b32 %d|%p, %a, {b}, {c}, -1;", np.uint32, a)
    for t in range(64):
        lane = t % 32
        seg = (c >> 8) & 0x1F
        min_lane, clamp, b = lane & seg, c & 0x1F, b & 0x1F  # bval[4:0] = b[4:0] (PTX ISA shfl.sync)
        max_lane = min_lane | (clamp & ~seg)
        j = {"up": lane - b, "down": lane + b, "bfly": lane ^ b, "idx": min_lane | (b & ~seg)}[mode]
        valid = j >= max_lane if mode == "up" else j <= max_lane
        assert got[t] == a[t - lane + (j if valid else lane)]


# -- control flow, barriers, memory spaces -----------------------------------------------------

def test_divergent_paths_with_separate_barriers_and_early_exit():
    """Odd and even threads meet at different bar.sync instructions; threads >= 48 exit first."""
    body = """
    mov.u32 %t, %tid.x;
    setp.ge.u32 %p, %t, 48;
    @%p exit;
    mov.u32 %s, buf;
    shl.b32 %o, %t, 2;
    add.u32 %s, %s, %o;
    and.b32 %x, %t, 1;
    setp.eq.u32 %q, %x, 1;
    @%q bra ODD;
    mul.lo.u32 %v, %t, 3;
    st.shared.u32 [%s], %v;
    bar.sync 0;
    bra JOIN;
ODD:
    mul.lo.u32 %v, %t, 5;
    st.shared.u32 [%s], %v;
    barrier.sync 0;
JOIN:
    mov.u32 %s, buf;
    sub.u32 %o, 47, %t;
    shl.b32 %o, %o, 2;
    add.u32 %s, %s, %o;
    ld.shared.u32 %v, [%s];
    ld.param.u64 %rd1, [out];
    mul.wide.u32 %rd2, %t, 4;
    add.s64 %rd1, %rd1, %rd2;
    st.global.u32 [%rd1], %v;
    ret;"""
    regs = ".reg .b32 %t, %s, %o, %x, %v; .reg .pred %p, %q; .reg .b64 %rd<3>;"
    be = backend(kernel_ptx(body, regs=regs, globals_=".shared .align 4 .b32 buf[64];"))
    out = np.zeros(2 * 64, np.uint32)
    launch(be, "k", [ptr("u32")], [out.ctypes.data], grid=1, block=64, arrays=[out])
    partner = 47 - np.arange(48)
    np.testing.assert_array_equal(out[:48], np.where(partner % 2, partner * 5, partner * 3))
    assert not out[48:].any()


def test_local_memory_is_private_per_thread_and_reachable_generically():
    body = """
    mov.u64 %SPL, __local_depot0;
    cvta.local.u64 %SP, %SPL;
    mov.u32 %t, %tid.x;
    st.local.u32 [%SPL+4], %t;
    ld.u32 %v, [%SP+4];
    add.u32 %v, %v, 1000;
    st.u32 [%SP+8], %v;
    ld.local.u32 %v, [%SPL+8];
    mov.u32 %c, %ctaid.x;
    mad.lo.u32 %t, %c, 100, %t;
    ld.param.u64 %rd1, [out];
    mul.wide.u32 %rd2, %t, 4;
    add.s64 %rd1, %rd1, %rd2;
    st.global.u32 [%rd1], %v;
    ret;"""
    regs = ".local .align 8 .b8 __local_depot0[16]; .reg .b64 %SP, %SPL, %rd<3>; .reg .b32 %t, %v, %c;"
    be = backend(kernel_ptx(body, regs=regs))
    out = np.zeros(200, np.uint32)
    launch(be, "k", [ptr("u32")], [out.ctypes.data], grid=2, block=100, arrays=[out])
    np.testing.assert_array_equal(out, np.tile(np.arange(100) + 1000, 2))


def test_module_constants_globals_and_host_access():
    globals_ = (".const .align 4 .f32 coeff[2] = {0f40000000, 0f3F000000};\n"
                ".visible .global .align 4 .u32 counter = 5;")
    body = """
    ld.const.f32 %f1, [coeff+4];
    atom.global.add.u32 %r1, [counter], 1;
    ld.param.u64 %rd1, [out];
    mov.u32 %r2, %tid.x;
    mul.wide.u32 %rd2, %r2, 4;
    add.s64 %rd1, %rd1, %rd2;
    cvt.rn.f32.u32 %f2, %r1;
    mul.f32 %f2, %f2, %f1;
    st.global.f32 [%rd1], %f2;
    ret;"""
    regs = ".reg .f32 %f<3>; .reg .b32 %r<3>; .reg .b64 %rd<3>;"
    be = backend(kernel_ptx(body, regs=regs, globals_=globals_))
    out = np.zeros(32, np.float32)
    launch(be, "k", [ptr("f32")], [out.ctypes.data], grid=1, block=32, arrays=[out])
    assert sorted(out.tolist()) == [v * 0.5 for v in range(5, 37)]
    assert be.read_global("counter") == (37).to_bytes(4, "little")
    be.write_global("counter", (100).to_bytes(4, "little"))
    launch(be, "k", [ptr("f32")], [out.ctypes.data], grid=1, block=32, arrays=[out])
    assert min(out) == 50.0 and be.global_address("counter")[1] == 4


def test_every_ballot_lane_and_lanemask():
    body = """
    mov.u32 %t, %tid.x;
    mov.u32 %l, %lanemask_lt;
    activemask.b32 %m;
    and.b32 %m, %m, %l;
    popc.b32 %v, %m;
    mov.u32 %l, %laneid;
    sub.u32 %v, %v, %l;
    mov.u32 %l, %warpid;
    mad.lo.u32 %v, %l, 100, %v;
    ld.param.u64 %rd1, [out];
    mul.wide.u32 %rd2, %t, 4;
    add.s64 %rd1, %rd1, %rd2;
    st.global.u32 [%rd1], %v;
    ret;"""
    be = backend(kernel_ptx(body, regs=".reg .b32 %t, %l, %m, %v; .reg .b64 %rd<3>;"))
    out = np.ones(80, np.uint32)
    launch(be, "k", [ptr("u32")], [out.ctypes.data], grid=1, block=80, arrays=[out])
    np.testing.assert_array_equal(out, (np.arange(80) // 32) * 100)


# -- errors ------------------------------------------------------------------------------------

def test_unsupported_instruction_fails_at_launch_with_its_line_and_spares_the_other_kernels():
    from ptxbridge.abi.errors import UnsupportedInstructionError

    body = "mov.u32 %r1, 1;\ntex.1d.v4.f32.s32 {%f1, %f2, %f3, %f4}, [t, {%r1}];\nret;"
    text = kernel_ptx(body, regs=".reg .b32 %r<2>; .reg .f32 %f<5>;")
    fine = kernel_ptx("ld.param.u64 %rd1, [out];\nst.global.u32 [%rd1], 7;\nret;", regs=".reg .b64 %rd<2>;",
                      name="fine").split(".address_size 64")[1]
    line = text.splitlines().index("tex.1d.v4.f32.s32 {%f1, %f2, %f3, %f4}, [t, {%r1}];") + 1
    be = backend(text + fine)  # loads: only a launch of `k` needs the instruction
    out = np.zeros(1, np.uint32)
    launch(be, "fine", [ptr("u32")], [out.ctypes.data], grid=1, block=1, arrays=[out])
    assert out[0] == 7
    with pytest.raises(UnsupportedInstructionError, match=rf"kernel 'k' cannot run on the CPU loader: "
                                                          rf"k, PTX line {line}: `tex\.1d"):
        launch(be, "k", [ptr("u8")], [0], grid=1, block=1)


def test_trap_names_kernel_line_and_thread():
    from ptxbridge.abi.errors import KernelTrapError

    body = "mov.u32 %r1, %tid.x;\nsetp.eq.u32 %p1, %r1, 37;\n@%p1 trap;\nret;"
    be = backend(kernel_ptx(body, regs=".reg .b32 %r<2>; .reg .pred %p<2>;"))
    expected = r"kernel 'k': block \(0, 0, 0\), thread \(37, 0, 0\) executed trap .*in k, PTX line \d+"
    with pytest.raises(KernelTrapError, match=expected):
        launch(be, "k", [ptr("u8")], [0], grid=1, block=64)


def test_misaligned_and_unmapped_accesses():
    from ptxbridge.abi.errors import MemoryAccessError

    body = "ld.param.u64 %rd1, [out];\nld.global.u32 %r1, [%rd1+2];\nret;"
    be = backend(kernel_ptx(body, regs=".reg .b32 %r<2>; .reg .b64 %rd<2>;"))
    data = np.zeros(4, np.uint32)
    with pytest.raises(MemoryAccessError, match="misaligned"):
        launch(be, "k", [ptr("u32")], [data.ctypes.data], grid=1, block=1, arrays=[data])
    with pytest.raises(MemoryAccessError, match=r"outside every buffer.*address 0x8 "):
        launch(be, "k", [ptr("u32")], [6], grid=1, block=1)
    # an aligned address whose end wraps past 2**64 is outside too (it raised IndexError)
    with pytest.raises(MemoryAccessError, match=r"outside every buffer.*address 0xfffffffffffffffc "):
        launch(be, "k", [ptr("u32")], [2**64 - 6], grid=1, block=1, arrays=[data])


def test_endless_loop_is_stopped_by_the_watchdog():
    from ptxbridge.abi.errors import EmulatorError

    be = backend(kernel_ptx("LOOP:\nbra.uni LOOP;"), max_steps=1000)
    with pytest.raises(EmulatorError, match="gave up after 1000 interpreter steps"):
        launch(be, "k", [ptr("u8")], [0], grid=1, block=32)


def test_match_and_elect_within_each_warp():
    values = (np.arange(64, dtype=np.uint32) % 3)
    got = elementwise("match.any.sync.b32 %d, %a, -1;", np.uint32, values)
    for t in range(64):
        warp = values[(t // 32) * 32:(t // 32) * 32 + 32]
        assert got[t] == sum(1 << lane for lane, v in enumerate(warp) if v == values[t])
    same = np.full(64, 7, np.uint32)
    same[40] = 8
    got = elementwise("match.all.sync.b32 %d|%p, %a, -1; @!%p mov.u32 %d, 1;", np.uint32, same)
    assert got[:32].tolist() == [0xFFFFFFFF] * 32 and got[32:].tolist() == [1] * 32
    got = elementwise("setp.ge.u32 %q, %a, 5; @%q elect.sync %u|%p, -1; selp.u32 %d, %u, 99, %p;",
                      np.uint32, np.arange(64, dtype=np.uint32) % 32)
    assert got.tolist() == [99 if lane != 5 else 5 for lane in list(range(32)) * 2]


def test_match_all_and_elect_honour_each_threads_member_mask():
    lanes = np.arange(64) % 32
    masks = np.where(lanes % 2 == 1, 0xAAAAAAAA, 0x55555555).astype(np.uint32)  # odd with odd, even with even
    values = np.full(64, 7, np.uint32)
    values[33] = 8  # breaks the odd lanes of warp 1 only
    got = elementwise("match.all.sync.b32 %d|%p, %a, %b; @!%p mov.u32 %d, 1;", np.uint32, values, masks)
    want = masks.copy()
    want[32:][lanes[32:] % 2 == 1] = 1
    assert got.tolist() == want.tolist()
    got = elementwise("elect.sync %u|%p, %b; selp.u32 %d, %u, 99, %p;", np.uint32, values, masks)
    assert got.tolist() == [lane if lane < 2 else 99 for lane in lanes]  # lane 0 for evens, 1 for odds


def test_isspacep_tells_the_state_space_of_a_generic_address():
    """Generic addresses of a global buffer, a shared and a local variable, each asked of every space
    (numba's NRT asks ``isspacep.local`` before freeing)."""
    spaces = ("global", "shared", "local", "param")
    asks = []
    for i, space in enumerate(spaces):
        for j, reg in enumerate(("%g", "%s", "%l")):
            asks += [f"isspacep.{space} %p, {reg};", "selp.u32 %t, 1, 0, %p;",
                     f"st.global.u32 [%out+{4 * (3 * i + j)}], %t;"]
    body = "\n".join(["ld.param.u64 %out, [out];", "cvta.to.global.u64 %g, %out;",
                      "mov.u64 %s, sh;", "cvta.shared.u64 %s, %s;",
                      "mov.u64 %l, lo;", "cvta.local.u64 %l, %l;", *asks, "ret;"])
    regs = "\n".join([".reg .b64 %out, %g, %s, %l;", ".reg .b32 %t;", ".reg .pred %p;",
                      ".shared .u32 sh[1];", ".local .u32 lo[1];"])
    out = np.full(12, 7, np.uint32)
    launch(backend(kernel_ptx(body, regs=regs)), "k", [ptr("u32")], [out.ctypes.data], 1, 1, [out])
    assert out.reshape(4, 3).tolist() == [[1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, 0]]


def test_register_declarations_may_attach_the_type():
    """``.reg.b32 f`` (cuda_fp16.hpp's inline asm) declares as ``.reg .b32 f`` does."""
    out = np.zeros(1, np.uint32)
    body = "{\n.reg.b32 f;\nmov.b32 f, 7;\nld.param.u64 %out, [out];\nst.global.b32 [%out], f;\n}\nret;"
    be = backend(kernel_ptx(body, regs=".reg .b64 %out;"))
    launch(be, "k", [ptr("u32")], [out.ctypes.data], 1, 1, [out])
    assert out.tolist() == [7]
