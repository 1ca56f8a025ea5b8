"""Floating-point instructions (PTX ISA 9.7.3 "Floating-Point", 9.7.4 "Half Precision").

Round-to-nearest-even results are exact: NumPy's f32/f64 add, sub, mul, div
and sqrt are correctly rounded IEEE operations, and ``fma`` is made exact
(f32 through an exact f64 product plus a tie correction; f64 through the
error-free TwoProduct/TwoSum transformations).  The directed roundings
``.rz/.rm/.rp`` take the rounded-to-nearest result and step one ulp when the
exact residual points the other way.  ``.approx`` functions are computed
accurately, which is within the error PTX documents for them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .build import Context, Run, op
from .values import FLOAT_TYPES

__all__ = ["float_arith", "flush", "saturate", "nudge", "fma32", "fma64", "min_max"]

_ROUNDINGS = frozenset(("rn", "rz", "rm", "rp"))
_F32_TINY = np.float32(np.finfo(np.float32).tiny)
_INF = {np.dtype(np.float32): np.float32(np.inf), np.dtype(np.float64): np.float64(np.inf),
        np.dtype(np.float16): np.float16(np.inf)}


def flush(x: Any) -> Any:
    """``.ftz``: f32 subnormals become zero of the same sign (PTX ISA 9.7.3)."""
    if x.dtype != np.float32:
        return x
    return np.where(np.abs(x) < _F32_TINY, np.copysign(np.float32(0), x), x).astype(np.float32)


def saturate(x: Any) -> Any:
    """``.sat``: clamp to [0, 1], NaN -> 0."""
    return np.where(np.isnan(x), x.dtype.type(0), np.clip(x, 0, 1)).astype(x.dtype)


def nudge(r: Any, residual: Any, mode: str) -> Any:
    """Turn the nearest result ``r`` into the ``mode`` rounding, given the sign of exact - r."""
    if mode == "rn":
        return r
    inf = _INF[r.dtype]
    if mode == "rm":
        return np.where(residual < 0, np.nextafter(r, -inf), r).astype(r.dtype)
    if mode == "rp":
        return np.where(residual > 0, np.nextafter(r, inf), r).astype(r.dtype)
    toward_zero = (residual != 0) & (r != 0) & ((residual > 0) != (r > 0))
    return np.where(toward_zero, np.nextafter(r, r.dtype.type(0)), r).astype(r.dtype)


def _two_sum(a: Any, b: Any) -> tuple[Any, Any]:
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _split(a: Any) -> tuple[Any, Any]:
    c = 134217729.0 * a  # 2**27 + 1 (Veltkamp)
    hi = c - (c - a)
    return hi, a - hi


def _two_prod(a: Any, b: Any) -> tuple[Any, Any]:
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def fma64(a: Any, b: Any, c: Any, mode: str = "rn") -> Any:
    """a*b+c for f64 with one rounding (error-free transformations; non-finite cases direct)."""
    p, pe = _two_prod(a, b)
    s, se = _two_sum(p, c)
    tail = pe + se
    r = s + tail
    residual = (s - r) + tail
    plain = a * b + c
    return nudge(np.where(np.isfinite(r), r, plain), np.where(np.isfinite(r), residual, 0.0), mode)


def fma32(a: Any, b: Any, c: Any, mode: str = "rn") -> Any:
    """a*b+c for f32 with one rounding: the f64 product is exact, the f64 sum's error is known."""
    p = a.astype(np.float64) * b.astype(np.float64)
    s, e = _two_sum(p, c.astype(np.float64))
    r = s.astype(np.float32)
    r64 = r.astype(np.float64)
    # s exactly halfway between two f32 values: the error e decides the tie (normal range).
    tie = ((s.view(np.uint64) & np.uint64(0x1FFFFFFF)) == np.uint64(0x10000000)) & (e != 0)
    if np.any(tie):
        away = tie & (np.sign(e) == np.sign(s - r64))
        r = np.where(away, np.nextafter(r, np.where(s > r64, np.float32(np.inf), np.float32(-np.inf))),
                     r).astype(np.float32)
        r64 = r.astype(np.float64)
    return nudge(r, (s - r64) + e, mode) if mode != "rn" else r


def _exact_binary(name: str, a: Any, b: Any, mode: str) -> Any:
    """add/sub/mul/div in ``mode``; f16 goes through f64 (exact for its range), then rounds."""
    dt = a.dtype
    if dt == np.float16:
        exact = _BINARY[name](a.astype(np.float64), b.astype(np.float64))
        r16 = exact.astype(np.float16)
        return nudge(r16, exact - r16.astype(np.float64), mode)
    r = _BINARY[name](a, b)
    if mode == "rn":
        return r
    if name == "div":
        if dt == np.float32:
            return nudge(r, a.astype(np.float64) / b.astype(np.float64) - r.astype(np.float64), mode)
        # a/b - r has the sign of (a - r*b) * b; a - r*b is exact from TwoProduct (overflow: -r)
        p, pe = _two_prod(r, b)
        residual = ((a - p) - pe) * np.sign(b)
        overflow = np.isinf(r) & np.isfinite(a) & (b != 0)
        return nudge(r, np.where(np.isfinite(residual), residual, np.where(overflow, -r, 0.0)), mode)
    if name == "mul":
        if dt == np.float32:
            return nudge(r, a.astype(np.float64) * b.astype(np.float64) - r.astype(np.float64), mode)
        _, err = _two_prod(a, b)
        return nudge(r, err, mode)
    bb = -b if name == "sub" else b
    if dt == np.float32:
        s, err = _two_sum(a.astype(np.float64), bb.astype(np.float64))
        return nudge(r, (s - r.astype(np.float64)) + err, mode)
    _, err = _two_sum(a, bb)
    return nudge(r, err, mode)


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
}


def min_max(name: str, nan: bool) -> Callable[[Any, Any], Any]:
    """PTX ``min``/``max``: a NaN operand loses unless ``.NaN``; of two zeros, +0.0 > -0.0
    (PTX ISA 9.7.3 ``min``/``max`` notes).  NumPy's fmin/fmax return either zero."""
    pick = {("min", False): np.fmin, ("min", True): np.minimum,
            ("max", False): np.fmax, ("max", True): np.maximum}[name, nan]

    def fn(a: Any, b: Any) -> Any:
        r = pick(a, b)
        zeros = (a == 0) & (b == 0)
        if not np.any(zeros):
            return r
        take_a = np.signbit(a) if name == "min" else ~np.signbit(a)
        return np.where(zeros, np.where(take_a, a, b), r).astype(r.dtype)

    return fn


def _modifiers(cx: Context, extra: set[str]) -> tuple[str, str, bool, bool, set[str]]:
    flags, (t,) = cx.split_mods(set(_ROUNDINGS) | {"ftz", "sat"} | extra, FLOAT_TYPES)
    rounding = flags & _ROUNDINGS
    if len(rounding) > 1:
        raise cx.unsupported(f"more than one rounding modifier (got {sorted(rounding)})")
    return t, (rounding.pop() if rounding else "rn"), "ftz" in flags, "sat" in flags, flags


def _finish(value: Any, ftz: bool, sat: bool) -> Any:
    if ftz:
        value = flush(value)
    return saturate(value) if sat else value


def float_arith(cx: Context, name: str) -> Run:
    """Builder for the float forms of add/sub/mul/mad/fma/div/abs/neg/min/max."""
    from .ops_half import PACKED, packed_arith  # ops_half builds on this module

    if cx.ins.mods and cx.ins.mods[-1] in PACKED:
        flags, (t,) = cx.split_mods(set(_ROUNDINGS) | {"ftz", "sat", "relu", "NaN"}, set(PACKED))
        return packed_arith(cx, name, t, flags)
    t, mode, ftz, sat, flags = _modifiers(cx, {"approx", "full", "NaN", "xorsign", "abs"})
    if flags & {"xorsign", "abs"}:
        raise cx.unsupported(f"modifier(s) {sorted(flags & {'xorsign', 'abs'})} are not implemented")
    pre = flush if ftz else (lambda x: x)
    if name in ("add", "sub", "mul", "div"):
        d, a, b = cx.operands(3)
        ra, rb, w = cx.read(a, t), cx.read(b, t), cx.write(d)
        return lambda fr, m: w(fr, _finish(_exact_binary(name, pre(ra(fr)), pre(rb(fr)), mode), ftz, sat), m)
    if name in ("mad", "fma"):
        d, a, b, c = cx.operands(4)
        ra, rb, rc, w = cx.read(a, t), cx.read(b, t), cx.read(c, t), cx.write(d)
        fused = {"f32": fma32, "f64": fma64}.get(t)
        if fused is None:
            def fused(x: Any, y: Any, z: Any, mode: str) -> Any:
                return fma64(x.astype(np.float64), y.astype(np.float64), z.astype(np.float64),
                             mode).astype(x.dtype)
        return lambda fr, m: w(fr, _finish(fused(pre(ra(fr)), pre(rb(fr)), pre(rc(fr)), mode), ftz, sat), m)
    if name in ("abs", "neg"):
        fn = np.abs if name == "abs" else np.negative
        d, a = cx.operands(2)
        ra, w = cx.read(a, t), cx.write(d)
        return lambda fr, m: w(fr, _finish(fn(pre(ra(fr))), ftz, False), m)
    if name in ("min", "max"):
        fn = min_max(name, "NaN" in flags)
        d, a, b = cx.operands(3)
        ra, rb, w = cx.read(a, t), cx.read(b, t), cx.write(d)
        return lambda fr, m: w(fr, _finish(fn(pre(ra(fr)), pre(rb(fr))), ftz, False), m)
    raise cx.unsupported(f"no float form of {name}")


op("fma")(lambda cx: float_arith(cx, "fma"))


def _rsqrt(x: Any) -> Any:
    return (1 / np.sqrt(x.astype(np.float64))).astype(x.dtype)


def _in_f64(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda x: fn(x.astype(np.float64)).astype(x.dtype)


_MATH: dict[str, Callable[[Any], Any]] = {
    "rcp": lambda x: x.dtype.type(1) / x,
    "sqrt": np.sqrt,
    "rsqrt": _rsqrt,
    "sin": _in_f64(np.sin),
    "cos": _in_f64(np.cos),
    "lg2": _in_f64(np.log2),
    "ex2": _in_f64(np.exp2),
    "tanh": _in_f64(np.tanh),
}


@op(*_MATH)
def _math(cx: Context) -> Run:
    t, mode, ftz, sat, flags = _modifiers(cx, {"approx", "full"})
    if cx.ins.opcode in ("rcp", "sqrt") and mode != "rn" and "approx" not in flags:
        raise cx.unsupported(f"{cx.ins.opcode} with .{mode} rounding is not implemented")
    fn = _MATH[cx.ins.opcode]
    pre = flush if ftz else (lambda x: x)
    d, a = cx.operands(2)
    ra, w = cx.read(a, t), cx.write(d)
    return lambda fr, m: w(fr, _finish(fn(pre(ra(fr))), ftz, sat), m)


_TESTS: dict[str, Callable[[Any], Any]] = {
    "finite": np.isfinite,
    "infinite": np.isinf,
    "number": lambda x: ~np.isnan(x),
    "notanumber": np.isnan,
    "normal": lambda x: np.isfinite(x) & (np.abs(x) >= np.finfo(x.dtype).tiny),
    "subnormal": lambda x: (x != 0) & (np.abs(x) < np.finfo(x.dtype).tiny),
}


@op("testp")
def _testp(cx: Context) -> Run:
    flags, (t,) = cx.split_mods(set(_TESTS), {"f32", "f64"})
    if len(flags) != 1:
        raise cx.unsupported("testp needs exactly one test")
    test = _TESTS[flags.pop()]
    d, a = cx.operands(2)
    ra, w = cx.read(a, t), cx.write(d)
    return lambda fr, m: w(fr, test(ra(fr)), m)


@op("copysign")
def _copysign(cx: Context) -> Run:
    _, (t,) = cx.split_mods(set(), {"f32", "f64"})
    d, a, b = cx.operands(3)
    ra, rb, w = cx.read(a, t), cx.read(b, t), cx.write(d)
    return lambda fr, m: w(fr, np.copysign(rb(fr), ra(fr)), m)
