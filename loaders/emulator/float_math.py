"""Exact IEEE arithmetic on NumPy arrays: flush-to-zero, saturation, directed rounding, fused
multiply-add, and PTX's min/max rules (PTX ISA 9.7.3 "Floating-Point").

Round-to-nearest-even results are exact: NumPy's f32/f64 add, sub, mul, div and sqrt are correctly
rounded IEEE operations, and ``fma`` is made exact (f32 through an exact f64 product plus a tie
correction; f64 through the error-free TwoProduct/TwoSum transformations).  The directed roundings
``.rz/.rm/.rp`` take the rounded-to-nearest result and step one ulp when the exact residual points
the other way.  The instruction builders (``ops_float``, ``ops_half``, ``ops_data``) share these.

Round-to-nearest ``fma`` goes through ``native_fma``, the C ufunc of ``_native.c`` (C99 ``fma``/``fmaf``:
one pass instead of about 30 for f64), where it was built; the emulation is the fallback and the
directed roundings.  ``LIBM`` holds the C library's functions behind PTX's approximate ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

try:
    from . import _native
except ImportError:  # built without NumPy's headers, or no C compiler: the emulation below
    _native = None
native_fma = None if _native is None else _native.fma
# PTX's approximate functions by opcode: the C library's (computed in f64), which the compiled tier calls
# too; None without them (NumPy's then, and the compiled tier leaves such kernels alone)
LIBM_FUNCTIONS = {"sin": "sin", "cos": "cos", "ex2": "exp2", "lg2": "log2", "tanh": "tanh"}  # opcode: C name
LIBM: dict[str, Any] | None = None
if _native is not None and all(hasattr(_native, name) for name in LIBM_FUNCTIONS.values()):
    LIBM = {opcode: getattr(_native, name) for opcode, name in LIBM_FUNCTIONS.items()}

__all__ = ["LIBM", "LIBM_FUNCTIONS", "ROUNDINGS", "exact_binary", "flush", "fma32", "fma64", "min_max",
           "native_fma", "nudge", "saturate"]

ROUNDINGS = frozenset(("rn", "rz", "rm", "rp"))
_F32_TINY = np.float32(np.finfo(np.float32).tiny)
_F16_TINY = np.float16(2.0 ** -14)
_INF = {np.dtype(np.float32): np.float32(np.inf), np.dtype(np.float64): np.float64(np.inf),
        np.dtype(np.float16): np.float16(np.inf)}


def flush(x: Any) -> Any:
    """``.ftz``: f32 subnormals become zero of the same sign (PTX ISA 9.7.3)."""
    if x.dtype != np.float32:
        return x
    return np.where(np.abs(x) < _F32_TINY, np.copysign(np.float32(0), x), x).astype(np.float32)


def flush_compared(x: Any) -> Any:
    """``.ftz`` of the comparisons (``setp``, ``set``): f16 subnormal operands become zero too
    (PTX ISA "Half Precision Comparison Instructions"), f32 ones as :func:`flush`."""
    if x.dtype != np.float16:
        return flush(x)
    return np.where(np.abs(x) < _F16_TINY, np.copysign(np.float16(0), x), x).astype(np.float16)


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


def _zero_sign(r: Any, a: Any, b: Any, c: Any, mode: str, exact_zero: Any = None) -> Any:
    """IEEE 754 6.3: an exact zero sum is +0, or -0 when rounding down, unless both addends are
    zeros of one sign (then that sign).  The round-to-nearest paths get this right already.
    ``exact_zero`` marks the sums that are exactly zero (default: every zero result, which also
    takes a positive sum too small for the type, which rounds down to +0, for an exact one)."""
    if mode != "rm":
        return r
    both_plus = ((a == 0) | (b == 0)) & ~np.signbit(a * b) & (c == 0) & ~np.signbit(c)
    zero = (r == 0) if exact_zero is None else exact_zero
    return np.where(zero & ~both_plus, -np.abs(r), r).astype(r.dtype)


def fma64(a: Any, b: Any, c: Any, mode: str = "rn") -> Any:
    """a*b+c for f64 with one rounding: ``native_fma`` for round-to-nearest where it is built, else
    error-free transformations (exact unless a*b underflows or overflows, where their error term
    is not representable: 5e-324 * 1.5 + 5e-324 gives 1.5e-323, not 1e-323).

    A zero or non-finite product is exact, so ``a * b + c`` rounds once and keeps IEEE's signed
    zeros (``fma(-0, 1, -0) = -0``, which the transformations would turn into +0).
    """
    if mode == "rn" and native_fma is not None:
        return native_fma(a, b, c, dtype=np.float64)
    p, pe = _two_prod(a, b)
    s, se = _two_sum(p, c)
    tail = pe + se
    r = s + tail
    residual = None if mode == "rn" else (s - r) + tail
    ordinary = np.isfinite(r) & (p != 0)
    if not ordinary.all():  # p == 0: a zero factor (or an underflow, where c decides)
        plain = np.where(np.isinf(c) & np.isfinite(a) & np.isfinite(b), c, a * b + c)  # a finite product
        r = np.where(ordinary, r, plain)
        residual = None if residual is None else np.where(ordinary, residual, 0.0)
    if residual is None:
        return r
    return _zero_sign(nudge(r, residual, mode), a, b, c, mode)


def fma32(a: Any, b: Any, c: Any, mode: str = "rn") -> Any:
    """a*b+c for f32 with one rounding: the f64 product is exact, so only the f64 sum rounds; that
    second rounding can only mislead the final one when the sum lands exactly halfway between two
    f32 values, and only those elements get the sum's error term (the normal range)."""
    if mode == "rn" and native_fma is not None:
        return native_fma(a, b, c, dtype=np.float32)
    p = np.multiply(a, b, dtype=np.float64)  # the f32 -> f64 casts happen inside the one pass
    s = np.add(p, c, dtype=np.float64)
    r = s.astype(np.float32)
    tie = (s.view(np.uint64) & np.uint64(0x1FFFFFFF)) == np.uint64(0x10000000)
    if mode == "rn" and not tie.any():
        return r
    _, e = _two_sum(p, np.asarray(c, np.float64))
    r64 = r.astype(np.float64)
    tie = tie & (e != 0) & np.isfinite(r)  # an f32 overflow is infinity, not a tie to correct
    if tie.any():
        away = tie & (np.sign(e) == np.sign(s - r64))
        r = np.where(away, np.nextafter(r, np.where(s > r64, np.float32(np.inf), np.float32(-np.inf))),
                     r).astype(np.float32)
        r64 = r.astype(np.float64)
    if mode == "rn":
        return r
    residual = np.where(np.isinf(s), 0.0, (s - r64) + e)  # an infinite sum is exact (an operand is)
    # the f64 sum of an f32 product and an f32 is zero only when the exact sum is: both lie on a grid
    # of 2^-298, far above the least f64
    return _zero_sign(nudge(r, residual, mode), a, b, c, mode, s == 0)


def exact_binary(name: str, a: Any, b: Any, mode: str) -> Any:
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
