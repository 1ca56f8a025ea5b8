"""Integer and bit instructions (PTX ISA 9.7.1 "Integer Arithmetic", 9.7.7 "Logic and Shift").

Values wrap modulo 2**width as on the GPU: NumPy fixed-width arithmetic does
the same (overflow warnings are silenced for the whole launch).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .build import Context, Run, op
from .ops_float import float_arith
from .values import DTYPES, FLOAT_TYPES, SINT, UINT

__all__ = ["mulhi", "bit_reverse", "leading_zeros"]

_INTS = frozenset(f"{k}{w}" for k in "usb" for w in (16, 32, 64))
_M32 = np.uint64(0xFFFFFFFF)


def _binary(cx: Context, ptx_type: str, fn: Callable[[Any, Any], Any], out_type: str | None = None,
            b_type: str | None = None) -> Run:
    d, a, b = cx.operands(3)
    ra, rb, w = cx.read(a, ptx_type), cx.read(b, b_type or ptx_type), cx.write(d)
    return lambda fr, m: w(fr, fn(ra(fr), rb(fr)), m)


def _unary(cx: Context, ptx_type: str, fn: Callable[[Any], Any]) -> Run:
    d, a = cx.operands(2)
    ra, w = cx.read(a, ptx_type), cx.write(d)
    return lambda fr, m: w(fr, fn(ra(fr)), m)


def _saturate_s32(wide: Any) -> Any:
    return np.clip(wide, -(1 << 31), (1 << 31) - 1).astype(np.int32)


def _wide(x: Any) -> Any:
    dt = x.dtype
    return x.astype((SINT if dt.kind == "i" else UINT)[dt.itemsize * 2])


def _wide_product(a: Any, b: Any) -> Any:
    """``mul.wide``: the exact product in twice the width (the casts happen inside the one pass)."""
    dt = a.dtype
    return np.multiply(a, b, dtype=(SINT if dt.kind == "i" else UINT)[dt.itemsize * 2])


def mulhi(a: Any, b: Any) -> Any:
    """High half of the full product (PTX ``mul.hi``), exact for 64-bit operands too."""
    dt = a.dtype
    if dt.itemsize < 8:
        return (_wide(a) * _wide(b) >> (8 * dt.itemsize)).astype(dt)
    ua, ub = a.view(np.uint64), b.view(np.uint64)
    a_lo, a_hi, b_lo, b_hi = ua & _M32, ua >> np.uint64(32), ub & _M32, ub >> np.uint64(32)
    p0, p1, p2, p3 = a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi
    mid = (p0 >> np.uint64(32)) + (p1 & _M32) + (p2 & _M32)
    hi = p3 + (p1 >> np.uint64(32)) + (p2 >> np.uint64(32)) + (mid >> np.uint64(32))
    if dt.kind == "i":  # signed correction: hi_s = hi_u - (a < 0 ? b : 0) - (b < 0 ? a : 0)
        hi = hi - np.where(a < 0, ub, np.uint64(0)) - np.where(b < 0, ua, np.uint64(0))
    return hi.view(dt)


def _int_or_float(int_builder: Callable[[Context], Run]) -> Callable[[Context], Run]:
    def build(cx: Context) -> Run:
        if cx.ins.mods and cx.ins.mods[-1] in FLOAT_TYPES | {"f16x2", "bf16", "bf16x2"}:
            return float_arith(cx, cx.ins.opcode)
        return int_builder(cx)

    return build


_CC = "%cc"  # the carry flag of the extended-precision instructions (PTX ISA 9.7.2)


def _carry_in(fr: Any) -> Any:
    return fr.regs.get(_CC, np.uint8(0))


def _set_carry(fr: Any, carry: Any, m: Any) -> None:
    carry = carry.astype(np.uint8)
    fr.regs[_CC] = carry if m is None else np.where(m, carry, _carry_in(fr))


def _extended(cx: Context, t: str, subtract: bool, carry_in: bool, carry_out: bool,
              product: Callable[[Any, Any], Any] | None = None) -> Run:
    """add.cc / addc / sub.cc / subc / mad{c}.lo.cc / mad{c}.hi.cc on unsigned bits."""
    unsigned = f"u{t[1:]}"
    ops = cx.operands(4 if product else 3)
    w = cx.write(ops[0])
    readers = [cx.read(o, unsigned) for o in ops[1:]]

    def run(fr: Any, m: Any) -> None:
        values = [r(fr) for r in readers]
        a, b = (product(values[0], values[1]), values[2]) if product else values
        if subtract:
            # a + ~b + CF: after a subtraction the flag is NOT borrow.  The PTX ISA words it
            # as a borrow, but NVIDIA's own __int128 routines feed sub.cc's flag to addc and
            # only give right results this way; pure sub/subc chains agree either way.
            cin = _carry_in(fr).astype(a.dtype) if carry_in else a.dtype.type(1)
            nb = ~b
            first = a + nb
            result = first + cin
            carry = (first < a) | (result < first)
        else:
            cin = _carry_in(fr).astype(a.dtype) if carry_in else a.dtype.type(0)
            first = a + b
            result = first + cin
            carry = (first < a) | (result < first)
        w(fr, result, m)
        if carry_out:
            _set_carry(fr, np.asarray(carry), m)

    return run


@op("addc", "subc", "madc")
def _with_carry(cx: Context) -> Run:
    if cx.ins.opcode == "madc":
        flags, (t,) = cx.split_mods({"lo", "hi", "cc"}, _INTS)
        return _extended(cx, t, False, True, "cc" in flags, mulhi if "hi" in flags else (lambda x, y: x * y))
    flags, (t,) = cx.split_mods({"cc"}, _INTS)
    return _extended(cx, t, cx.ins.opcode == "subc", True, "cc" in flags)


def _add_sub(cx: Context) -> Run:
    flags, (t,) = cx.split_mods({"sat", "cc"}, _INTS)
    subtract = cx.ins.opcode == "sub"
    if "cc" in flags:
        return _extended(cx, t, subtract, False, True)
    if "sat" in flags:
        if t != "s32":
            raise cx.unsupported(".sat needs .s32")
        return _binary(cx, t, lambda a, b: _saturate_s32(a.astype(np.int64) + (-1 if subtract else 1)
                                                         * b.astype(np.int64)))
    return _binary(cx, t, (lambda a, b: a - b) if subtract else (lambda a, b: a + b))


def _mul(cx: Context) -> Run:
    flags, (t,) = cx.split_mods({"lo", "hi", "wide"}, _INTS)
    mode = flags.pop() if len(flags) == 1 else None
    if mode is None:
        raise cx.unsupported("integer mul needs exactly one of .lo, .hi, .wide")
    if mode == "wide":
        if t.endswith("64"):
            raise cx.unsupported("mul.wide takes 16- or 32-bit operands")
        return _binary(cx, t, _wide_product)
    return _binary(cx, t, mulhi if mode == "hi" else (lambda a, b: a * b))


def _mad(cx: Context) -> Run:
    flags, (t,) = cx.split_mods({"lo", "hi", "wide", "sat", "cc"}, _INTS)
    if "cc" in flags:
        return _extended(cx, t, False, False, True, mulhi if "hi" in flags else (lambda x, y: x * y))
    d, a, b, c = cx.operands(4)
    mode = (flags - {"sat"}).pop() if len(flags - {"sat"}) == 1 else None
    if mode is None:
        raise cx.unsupported("integer mad needs exactly one of .lo, .hi, .wide")
    wide = mode == "wide"
    if wide and t.endswith("64"):
        raise cx.unsupported("mad.wide takes 16- or 32-bit operands")
    c_type = t[0] + str(int(t[1:]) * 2) if wide else t
    ra, rb, rc, w = cx.read(a, t), cx.read(b, t), cx.read(c, c_type), cx.write(d)
    if "sat" in flags:
        if (t, mode) != ("s32", "hi"):
            raise cx.unsupported(".sat applies to mad.hi.s32 only")
        return lambda fr, m: w(fr, _saturate_s32(mulhi(ra(fr), rb(fr)).astype(np.int64)
                                                 + rc(fr).astype(np.int64)), m)
    product = _wide_product if wide else mulhi if mode == "hi" else (lambda x, y: x * y)
    return lambda fr, m: w(fr, product(ra(fr), rb(fr)) + rc(fr), m)


def _divide(a: Any, b: Any, remainder: bool) -> Any:
    """Truncating division; x / 0 gives all ones and x % 0 gives x, as the hardware does."""
    zero = b == 0
    safe = np.where(zero, 1, b).astype(b.dtype)
    if a.dtype.kind == "u":
        q, r = a // safe, a % safe
    else:
        r = np.fmod(a, safe)
        q = ((a - r) // safe).astype(a.dtype)
    if remainder:
        return np.where(zero, a, r).astype(a.dtype)
    return np.where(zero, a.dtype.type(-1) if a.dtype.kind == "i" else ~a.dtype.type(0), q).astype(a.dtype)


def _div_rem(cx: Context) -> Run:
    if cx.ins.mods and cx.ins.mods[-1] in FLOAT_TYPES:
        return float_arith(cx, cx.ins.opcode)
    _, (t,) = cx.split_mods(set(), _INTS)
    remainder = cx.ins.opcode == "rem"
    return _binary(cx, t, lambda a, b: _divide(a, b, remainder))


def _abs_neg(cx: Context) -> Run:
    if cx.ins.mods and cx.ins.mods[-1] in FLOAT_TYPES | {"f16x2", "bf16", "bf16x2"}:
        return float_arith(cx, cx.ins.opcode)
    _, (t,) = cx.split_mods(set(), {"s16", "s32", "s64"})
    return _unary(cx, t, np.abs if cx.ins.opcode == "abs" else np.negative)


def _min_max(cx: Context) -> Run:
    if cx.ins.mods and cx.ins.mods[-1] in FLOAT_TYPES | {"f16x2", "bf16", "bf16x2"}:
        return float_arith(cx, cx.ins.opcode)
    _, (t,) = cx.split_mods(set(), _INTS)
    return _binary(cx, t, np.minimum if cx.ins.opcode == "min" else np.maximum)


op("add", "sub")(_int_or_float(_add_sub))
op("mul")(_int_or_float(_mul))
op("mad")(_int_or_float(_mad))
op("div", "rem")(_div_rem)
op("abs", "neg")(_abs_neg)
op("min", "max")(_min_max)

_LOGIC = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}


@op("and", "or", "xor")
def _logic(cx: Context) -> Run:
    _, (t,) = cx.split_mods(set(), {"pred", "b16", "b32", "b64"})
    return _binary(cx, t, _LOGIC[cx.ins.opcode])


@op("not", "cnot")
def _not(cx: Context) -> Run:
    _, (t,) = cx.split_mods(set(), {"pred", "b16", "b32", "b64"})
    if cx.ins.opcode == "cnot":
        return _unary(cx, t, lambda a: (a == 0).astype(a.dtype))
    return _unary(cx, t, np.invert)


@op("shl", "shr")
def _shift(cx: Context) -> Run:
    _, (t,) = cx.split_mods(set(), _INTS)
    bits = 8 * DTYPES[t].itemsize
    left = cx.ins.opcode == "shl"

    def shift(a: Any, b: Any) -> Any:
        amount = np.minimum(b, bits - 1).astype(a.dtype)
        shifted = a << amount if left else a >> amount
        if left or a.dtype.kind == "u":
            return np.where(b >= bits, a.dtype.type(0), shifted).astype(a.dtype) if np.any(b >= bits) \
                else shifted
        return shifted  # arithmetic shift by min(b, bits - 1) already fills with the sign

    return _binary(cx, t, shift, b_type="u32")


def _field_mask(length: Any) -> Any:
    length = np.asarray(length, np.uint64)
    return np.where(length >= 64, ~np.uint64(0), (np.uint64(1) << np.minimum(length, 63)) - np.uint64(1))


@op("bfe")
def _bfe(cx: Context) -> Run:
    _, (t,) = cx.split_mods(set(), {"u32", "s32", "u64", "s64"})
    d, a, b, c = cx.operands(4)
    ra, rb, rc, w = cx.read(a, t), cx.read(b, "u32"), cx.read(c, "u32"), cx.write(d)
    bits = 8 * DTYPES[t].itemsize

    def bfe(x: Any, pos: Any, length: Any) -> Any:
        pos = (pos & 0xFF).astype(np.uint64)
        length = (length & 0xFF).astype(np.uint64)
        ux = x.view(UINT[x.dtype.itemsize]).astype(np.uint64)
        room = np.uint64(bits) - np.minimum(pos, np.uint64(bits))
        inside = np.where(pos >= bits, np.uint64(0), np.minimum(length, room))
        field = (ux >> np.minimum(pos, np.uint64(bits - 1))) & _field_mask(inside)
        if x.dtype.kind == "i":  # bits past the field (or past the msb) copy a[min(pos+len-1, msb)]
            top = np.minimum(pos + length, np.uint64(bits)) - np.uint64(1)
            sign = np.where(length == 0, False, ((ux >> np.minimum(top, np.uint64(63))) & np.uint64(1)) == 1)
            field = np.where(sign, field | ~_field_mask(inside), field)
        return field.astype(UINT[x.dtype.itemsize]).view(x.dtype)

    return lambda fr, m: w(fr, bfe(ra(fr), rb(fr), rc(fr)), m)


@op("bfi")
def _bfi(cx: Context) -> Run:
    _, (t,) = cx.split_mods(set(), {"b32", "b64"})
    d, f, b, c, e = cx.operands(5)
    rf, rb, rc, re_, w = cx.read(f, t), cx.read(b, t), cx.read(c, "u32"), cx.read(e, "u32"), cx.write(d)
    dt, bits = DTYPES[t], 8 * DTYPES[t].itemsize

    def bfi(field: Any, base: Any, pos: Any, length: Any) -> Any:
        pos = (pos & 0xFF).astype(np.uint64)
        length = (length & 0xFF).astype(np.uint64)
        mask = np.where(pos >= bits, np.uint64(0), _field_mask(length) << np.minimum(pos, np.uint64(63)))
        fshift = field.astype(np.uint64) << np.minimum(pos, np.uint64(63))
        return ((base.astype(np.uint64) & ~mask) | (fshift & mask)).astype(dt)

    return lambda fr, m: w(fr, bfi(rf(fr), rb(fr), rc(fr), re_(fr)), m)


_BYTE_REVERSE = np.array([int(f"{i:08b}"[::-1], 2) for i in range(256)], np.uint8)


def bit_reverse(x: Any) -> Any:
    arr = np.atleast_1d(x)
    size = arr.dtype.itemsize
    flipped = _BYTE_REVERSE[arr.view(np.uint8).reshape(-1, size)[:, ::-1]]
    out = np.ascontiguousarray(flipped).view(arr.dtype).reshape(arr.shape)
    return out if isinstance(x, np.ndarray) else out[0]


def leading_zeros(x: Any) -> Any:
    """Count of leading zero bits, as u32 (PTX ``clz``), by binary search over the width."""
    bits = 8 * x.dtype.itemsize
    keep = np.uint64((1 << bits) - 1)
    ux = x.view(UINT[x.dtype.itemsize]).astype(np.uint64)
    count = np.zeros(np.shape(ux), np.uint32)
    for step in (32, 16, 8, 4, 2, 1):
        if step < bits:
            empty = (ux >> np.uint64(bits - step)) == 0
            count = count + np.where(empty, np.uint32(step), np.uint32(0))
            ux = np.where(empty, (ux << np.uint64(step)) & keep, ux)
    return count + ((ux >> np.uint64(bits - 1)) == 0).astype(np.uint32)


@op("popc", "clz", "brev", "bfind")
def _bits(cx: Context) -> Run:
    flags, (t,) = cx.split_mods({"shiftamt"} if cx.ins.opcode == "bfind" else set(),
                                {"b32", "b64"} if cx.ins.opcode != "bfind" else {"u32", "s32", "u64", "s64"})
    name = cx.ins.opcode
    if name == "popc":
        return _unary(cx, t, lambda a: np.bitwise_count(a).astype(np.uint32))
    if name == "clz":
        return _unary(cx, t, leading_zeros)
    if name == "brev":
        return _unary(cx, t, bit_reverse)
    shiftamt, bits = "shiftamt" in flags, 8 * DTYPES[t].itemsize

    def bfind(a: Any) -> Any:
        u = a.view(UINT[a.dtype.itemsize])
        if a.dtype.kind == "i":
            u = np.where(a < 0, ~u, u)
        zeros = leading_zeros(u)
        pos = np.uint32(bits - 1) - zeros
        found = zeros < bits
        result = np.where(found, (np.uint32(bits - 1) - pos) if shiftamt else pos, np.uint32(0xFFFFFFFF))
        return result.astype(np.uint32)

    return _unary(cx, t, bfind)


@op("bmsk")
def _bmsk(cx: Context) -> Run:
    """A mask of ``b`` ones from bit ``a`` (PTX ISA 9.7.7 ``bmsk``; ``.clamp`` saturates, ``.wrap`` wraps)."""
    flags, _ = cx.split_mods({"clamp", "wrap"}, {"b32"})
    if len(flags) != 1:
        raise cx.unsupported("bmsk needs one of .clamp/.wrap")
    clamp = "clamp" in flags
    all_ones = np.uint64(0xFFFFFFFF)

    def bmsk(a: Any, b: Any) -> Any:
        a, b = np.asarray(a, np.uint64), np.asarray(b, np.uint64)
        a1, b1 = a & np.uint64(31), b & np.uint64(31)
        low = (all_ones << a1) & all_ones
        overflow = a1 + b1 >= 32
        if clamp:
            low = np.where(a >= 32, np.uint64(0), low)
            overflow = overflow | (a >= 32) | (b >= 32)
        high = np.where(b1 == 0, all_ones, (all_ones << (a1 + b1)) & all_ones)
        high = np.where(overflow, np.uint64(0), high)
        result = (low & ~high & all_ones).astype(np.uint32)
        return result if result.ndim else result[()]

    return _binary(cx, "u32", bmsk)


@op("prmt")
def _prmt(cx: Context) -> Run:
    cx.split_mods(set(), {"b32"})
    d, a, b, c = cx.operands(4)
    ra, rb, rc, w = cx.read(a, "u32"), cx.read(b, "u32"), cx.read(c, "u32"), cx.write(d)

    def prmt(x: Any, y: Any, sel: Any) -> Any:
        source = (y.astype(np.uint64) << np.uint64(32)) | x.astype(np.uint64)
        result = np.uint32(0)
        for i in range(4):
            nibble = (sel >> np.uint32(4 * i)) & np.uint32(0xF)
            byte = ((source >> ((nibble & np.uint32(7)).astype(np.uint64) * np.uint64(8))) & np.uint64(0xFF))
            byte = byte.astype(np.uint32)
            byte = np.where((nibble & np.uint32(8)) != 0,
                            np.where(byte & np.uint32(0x80), np.uint32(0xFF), np.uint32(0)), byte)
            result = result | (byte.astype(np.uint32) << np.uint32(8 * i))
        return np.asarray(result, np.uint32)[()] if np.ndim(result) == 0 else result.astype(np.uint32)

    return lambda fr, m: w(fr, prmt(ra(fr), rb(fr), rc(fr)), m)


@op("lop3")
def _lop3(cx: Context) -> Run:
    _, (t,) = cx.split_mods(set(), {"b32"})
    d, a, b, c, lut = cx.operands(5)
    ra, rb, rc, w = cx.read(a, t), cx.read(b, t), cx.read(c, t), cx.write(d)
    table = int(cx.read(lut, "u32")(None))

    def lop3(x: Any, y: Any, z: Any) -> Any:
        result = np.uint32(0) & x
        for i in range(8):
            if table >> i & 1:
                result = result | ((x if i & 4 else ~x) & (y if i & 2 else ~y) & (z if i & 1 else ~z))
        return result

    return lambda fr, m: w(fr, lop3(ra(fr), rb(fr), rc(fr)), m)


@op("shf")
def _shf(cx: Context) -> Run:
    flags, _ = cx.split_mods({"l", "r", "wrap", "clamp"}, {"b32"})
    if len(flags & {"l", "r"}) != 1 or len(flags & {"wrap", "clamp"}) != 1:
        raise cx.unsupported("shf needs one of .l/.r and one of .wrap/.clamp")
    d, a, b, c = cx.operands(4)
    ra, rb, rc, w = cx.read(a, "u32"), cx.read(b, "u32"), cx.read(c, "u32"), cx.write(d)
    left, wrap = "l" in flags, "wrap" in flags

    def shf(lo: Any, hi: Any, n: Any) -> Any:
        n = (n & np.uint32(31)) if wrap else np.minimum(n, np.uint32(32))
        both = (hi.astype(np.uint64) << np.uint64(32)) | lo.astype(np.uint64)
        n64 = n.astype(np.uint64)
        return ((both << n64) >> np.uint64(32) if left else both >> n64).astype(np.uint32)

    return lambda fr, m: w(fr, shf(ra(fr), rb(fr), rc(fr)), m)

