"""Moves, comparisons, selects and conversions (PTX ISA 9.7.5 "Comparison and Selection",
9.7.9 "Data Movement and Conversion": mov, cvt, cvta).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .build import Context, Run, op
from .float_math import flush, flush_compared, nudge, saturate
from .memory import WINDOWS
from .ops_half import LANE_TYPES, f64_to_bf16, lane
from .parse import Sym, Vec
from .values import DTYPES, FLOAT_TYPES, UINT

__all__ = ["COMBINE", "COMPARISONS", "comparison", "read_value"]

_TYPES = frozenset(DTYPES)
_ORDERED: dict[str, Callable[[Any, Any], Any]] = {
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal, "lo": np.less, "ls": np.less_equal, "hi": np.greater, "hs": np.greater_equal,
}
_UNORDERED = {"equ": "eq", "neu": "ne", "ltu": "lt", "leu": "le", "gtu": "gt", "geu": "ge"}
COMBINE = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}
COMPARISONS = frozenset(_ORDERED) | frozenset(_UNORDERED) | {"num", "nan"}


def comparison(cmp: str, is_float: bool) -> Callable[[Any, Any], Any]:
    """PTX ISA 9.7.5.1: ordered float compares are false on NaN (``ne`` too), unordered ones true."""
    if not is_float:
        return _ORDERED[cmp]
    if cmp == "num":
        return lambda a, b: ~(np.isnan(a) | np.isnan(b))
    if cmp == "nan":
        return lambda a, b: np.isnan(a) | np.isnan(b)
    if cmp in _UNORDERED:
        base = _ORDERED[_UNORDERED[cmp]]
        return lambda a, b: base(a, b) | np.isnan(a) | np.isnan(b)
    if cmp == "ne":
        return lambda a, b: (a != b) & ~(np.isnan(a) | np.isnan(b))
    return _ORDERED[cmp]


@op("setp")
def _setp(cx: Context) -> Run:
    """``setp``; on packed halves (``.f16x2``, ``.bf16x2``) ``p|q`` take the low and the high
    lane's result (PTX ISA "Half Precision Comparison Instructions: setp")."""
    flags, (t,) = cx.split_mods(COMPARISONS | set(COMBINE) | {"ftz"}, _TYPES - {"pred"})
    cmps, combine = flags & COMPARISONS, flags & set(COMBINE)
    if len(cmps) != 1 or len(combine) > 1:
        raise cx.unsupported("setp needs one comparison and at most one of .and/.or/.xor")
    kind = LANE_TYPES.get(t, t)
    compare = comparison(cmps.pop(), kind in FLOAT_TYPES or kind == "bf16")
    ops = cx.operands((4,) if combine else (3,))
    dest = ops[0]
    first, second = (dest.first, dest.second) if hasattr(dest, "second") else (dest, None)
    w1 = cx.write(first)
    w2 = cx.write(second) if second is not None else None
    ra, rb = cx.read(ops[1], t), cx.read(ops[2], t)
    flushing = flush_compared if "ftz" in flags else (lambda x: x)

    def pre(x: Any) -> Any:
        return flushing(read_value(t, x))

    rc = cx.read(ops[3], "pred") if combine else None
    join = COMBINE[combine.pop()] if combine else None
    if t in LANE_TYPES:
        if w2 is None:
            raise cx.unsupported(f"setp.{t} writes one predicate per lane: p|q")

        def lanes(fr: Any, m: Any) -> None:
            a, b = ra(fr), rb(fr)
            for w, shift in ((w1, 0), (w2, 16)):
                result = compare(flushing(lane(a, shift, kind)), flushing(lane(b, shift, kind)))
                w(fr, result if join is None else join(result, rc(fr)), m)

        return lanes

    def run(fr: Any, m: Any) -> None:
        result = compare(pre(ra(fr)), pre(rb(fr)))
        if join is not None:
            c = rc(fr)
            w1(fr, join(result, c), m)
            if w2 is not None:
                w2(fr, join(~result, c), m)
        else:
            w1(fr, result, m)
            if w2 is not None:
                w2(fr, ~result, m)

    return run


@op("selp")
def _selp(cx: Context) -> Run:
    _, (t,) = cx.split_mods(set(), _TYPES - {"pred"})
    d, a, b, c = cx.operands(4)
    ra, rb, rc, w = cx.read(a, t), cx.read(b, t), cx.read(c, "pred"), cx.write(d)

    def run(fr: Any, m: Any) -> None:
        p = rc(fr)
        if isinstance(p, np.ndarray):
            w(fr, np.where(p, ra(fr), rb(fr)), m)
        else:
            w(fr, ra(fr) if p else rb(fr), m)

    return run


@op("slct")
def _slct(cx: Context) -> Run:
    flags, (t, s) = cx.split_mods({"ftz"}, _TYPES - {"pred"}, ntypes=2)
    if s not in ("s32", "f32"):
        raise cx.unsupported(f"slct's selector type must be .s32 or .f32 (got .{s})")
    d, a, b, c = cx.operands(4)
    ra, rb, rc, w = cx.read(a, t), cx.read(b, t), cx.read(c, s), cx.write(d)
    pre = flush if "ftz" in flags else (lambda x: x)
    return lambda fr, m: w(fr, np.where(pre(rc(fr)) >= 0, ra(fr), rb(fr)), m)


@op("mov")
def _mov(cx: Context) -> Run:
    _, (t,) = cx.split_mods(set(), _TYPES)
    d, a = cx.operands(2)
    if isinstance(d, Vec):  # unpack: mov.b64 {lo, hi}, %rd (element 0 is the low bits)
        part = UINT[DTYPES[t].itemsize // len(d.items)]
        ra, writers = cx.read(a, t), [cx.write(item) for item in d.items]
        shift = np.uint64(8 * part.itemsize)

        def unpack(fr: Any, m: Any) -> None:
            value = ra(fr).astype(np.uint64)
            for w in writers:
                w(fr, value.astype(part), m)
                value = value >> shift

        return unpack
    if isinstance(a, Vec):
        part_type = f"b{8 * DTYPES[t].itemsize // len(a.items)}"
        readers, w = [cx.read(item, part_type) for item in a.items], cx.write(d)
        out = UINT[DTYPES[t].itemsize]
        bits = DTYPES[part_type].itemsize * 8

        def pack(fr: Any, m: Any) -> None:
            value = np.uint64(0)
            for i, r in enumerate(readers):
                value = value | (r(fr).astype(np.uint64) << np.uint64(bits * i))
            w(fr, value.astype(out), m)

        return pack
    ra, w = cx.read(a, t), cx.write(d)
    return lambda fr, m: w(fr, ra(fr), m)


@op("cvta")
def _cvta(cx: Context) -> Run:
    flags, (t,) = cx.split_mods({"to", "global", "shared", "local", "const", "param", "shared::cta"},
                                {"u32", "u64"})
    spaces = flags - {"to"}
    if len(spaces) != 1:
        raise cx.unsupported("cvta needs one state space")
    space = spaces.pop().split("::")[0]
    d, a = cx.operands(2)
    window = WINDOWS.get(space, 0)
    delta = DTYPES[t].type((-window if "to" in flags else window) % (1 << (8 * DTYPES[t].itemsize)))
    w = cx.write(d)
    if isinstance(a, Sym):
        value = DTYPES[t].type((cx.symbol_address(a) + window) % (1 << (8 * DTYPES[t].itemsize)))
        return lambda fr, m: w(fr, value, m)
    ra = cx.read(a, t)
    if not window:
        return lambda fr, m: w(fr, ra(fr), m)
    return lambda fr, m: w(fr, ra(fr) + delta, m)


@op("isspacep")
def _isspacep(cx: Context) -> Run:
    """``isspacep.space p, a``: whether generic address ``a`` lies in the state space (PTX ISA
    "isspacep").  Shared, local and parameter space are the windows of :data:`WINDOWS`; global is
    every address outside them.  ``.const`` is refused: constant memory is host memory here,
    indistinguishable from global."""
    flags, _ = cx.split_mods({"global", "shared", "local", "param", "shared::cta"}, set(), ntypes=0)
    if len(flags) != 1:
        raise cx.unsupported("isspacep needs one of .global, .shared, .local, .param")
    space = flags.pop().split("::")[0]
    d, a = cx.operands(2)
    ra, w = cx.read(a, "u64"), cx.write(d)
    top, windows = np.uint64(0xF000_0000_0000_0000), np.array(sorted(set(WINDOWS.values())), np.uint64)
    if space == "global":
        return lambda fr, m: w(fr, ~np.isin(ra(fr) & top, windows), m)
    window = np.uint64(WINDOWS[space])
    return lambda fr, m: w(fr, (ra(fr) & top) == window, m)


_INT_ROUND = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}
_CVT_FLAGS = {"rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi", "ftz", "sat", "relu", "satfinite"}


def _to_bf16(x: Any) -> Any:
    """f32 -> bf16 bits, round to nearest even; NaN stays a quiet NaN."""
    bits = x.astype(np.float32).view(np.uint32)
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))
    return np.where(np.isnan(x), np.uint32(0x7FC0), rounded).astype(np.uint16)


def read_value(t: str, x: Any) -> Any:
    """Source operand as a NumPy number (bf16 bits widened to f32)."""
    if t == "bf16":
        return (x.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return x


def _int_range(t: str) -> tuple[int, int]:
    info = np.iinfo(DTYPES[t])
    return int(info.min), int(info.max)


def convert(value: Any, src: str, dst: str, flags: set[str]) -> Any:
    """``cvt.flags.dst.src`` on one operand (PTX ISA 9.7.9.21)."""
    src_float = src in FLOAT_TYPES or src == "bf16"
    dst_float = dst in FLOAT_TYPES or dst == "bf16"
    x = read_value(src, value)
    if "ftz" in flags and src_float:
        x = flush(x)
    if not dst_float:
        lo, hi = _int_range(dst)
        if src_float:  # float -> int always saturates; NaN -> 0
            rounded = _INT_ROUND[next(iter(flags & set(_INT_ROUND)), "rzi")](x.astype(np.float64))
            clipped = np.clip(np.nan_to_num(rounded, nan=0.0), lo, hi)
            result = clipped.astype(DTYPES[dst])
            return np.where(rounded >= float(hi), DTYPES[dst].type(hi), result).astype(DTYPES[dst])
        if "sat" in flags:
            x_lo, x_hi = _int_range(src)
            if lo > x_lo:
                x = np.maximum(x, x.dtype.type(max(lo, x_lo)))
            if hi < x_hi:
                x = np.minimum(x, x.dtype.type(min(hi, x_hi)))
        return x.astype(DTYPES[dst])
    mode = next(iter(flags & {"rn", "rz", "rm", "rp"}), "rn")
    if src_float and (flags & set(_INT_ROUND)):
        x = _INT_ROUND[next(iter(flags & set(_INT_ROUND)))](x)
    target = np.dtype(np.float32) if dst == "bf16" else DTYPES[dst]
    result = x.astype(target)
    if mode != "rn":
        wide = np.longdouble
        result = nudge(result, x.astype(wide) - result.astype(wide), mode)
    if "ftz" in flags:
        result = flush(result)
    if "sat" in flags:
        result = saturate(result)
    if "relu" in flags:
        result = np.where(result < 0, result.dtype.type(0), result).astype(result.dtype)
    if dst == "bf16":
        return f64_to_bf16(x.astype(np.float64)) if mode == "rn" and not flags & {"sat", "relu", "ftz"} \
            else _to_bf16(result)
    return result


@op("cvt")
def _cvt(cx: Context) -> Run:
    convertible = (FLOAT_TYPES | {"bf16"} | {t for t in DTYPES if t[0] in "us" and t[1:].isdigit()})
    flags, (dst, src) = cx.split_mods(_CVT_FLAGS, convertible | {"f16x2", "bf16x2"}, ntypes=2)
    if flags & {"satfinite"}:
        raise cx.unsupported(".satfinite is not implemented")
    if dst in ("f16x2", "bf16x2"):  # cvt.rn.f16x2.f32 d, a, b: a -> upper half, b -> lower half
        d, a, b = cx.operands(3)
        ra, rb, w = cx.read(a, src), cx.read(b, src), cx.write(d)
        half = dst[:-2]

        def pack(fr: Any, m: Any) -> None:
            hi = convert(ra(fr), src, half, flags).view(np.uint16) if half == "f16" else \
                convert(ra(fr), src, half, flags)
            lo = convert(rb(fr), src, half, flags).view(np.uint16) if half == "f16" else \
                convert(rb(fr), src, half, flags)
            w(fr, (hi.astype(np.uint32) << np.uint32(16)) | lo.astype(np.uint32), m)

        return pack
    if src in ("f16x2", "bf16x2"):
        raise cx.unsupported(f"cvt from .{src} is not implemented")
    d, a = cx.operands(2)
    ra, w = cx.read(a, src), cx.write(d)
    return lambda fr, m: w(fr, convert(ra(fr), src, dst, flags), m)
