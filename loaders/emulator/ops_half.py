"""Half-precision forms carried as bits: ``.bf16``, ``.f16x2``, ``.bf16x2`` (PTX ISA 9.7.4).

Each 16-bit lane is widened to f64 (exact), the operation is done there, and
the result is rounded once to the lane's format: NumPy rounds f64 -> f16
correctly; bf16 goes through f32 with round-to-odd, which makes the second
rounding exact.  Lane 0 is the low half of a packed register.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .build import Context, Run
from .float_math import min_max, saturate

__all__ = ["LANE_TYPES", "PACKED", "packed_arith", "f64_to_bf16", "lane"]

PACKED = {"bf16": ("bf16", 1), "f16x2": ("f16", 2), "bf16x2": ("bf16", 2)}
LANE_TYPES = {"f16x2": "f16", "bf16x2": "bf16"}  # packed halves: the type of each 16-bit lane
_LANE = np.uint32(0xFFFF)


def f64_to_bf16(x: Any) -> Any:
    """f64 -> bf16 bits, round to nearest even (round-to-odd to f32 first)."""
    r = x.astype(np.float32)
    inexact = r.astype(np.float64) != x
    rounded_up = inexact & (np.abs(r.astype(np.float64)) > np.abs(x))
    toward_zero = np.where(rounded_up, np.nextafter(r, np.float32(0)), r)
    bits = toward_zero.astype(np.float32).view(np.uint32) | np.where(inexact, np.uint32(1), np.uint32(0))
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    return np.where(np.isnan(x), np.uint32(0x7FC0), rounded).astype(np.uint16)


def lane(bits: Any, shift: int, kind: str) -> Any:
    """The 16-bit lane at ``shift`` of packed register bits as a NumPy float: f16, or bf16 widened
    to f32 (exactly)."""
    half = ((bits >> np.uint32(shift)) & _LANE).astype(np.uint16)
    if kind == "f16":
        return half.view(np.float16)
    return (half.astype(np.uint32) << np.uint32(16)).view(np.float32)


def _widen(bits: Any, kind: str) -> Any:
    if kind == "f16":
        return bits.astype(np.uint16).view(np.float16).astype(np.float64)
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)


def _narrow(value: Any, kind: str) -> Any:
    return value.astype(np.float16).view(np.uint16) if kind == "f16" else f64_to_bf16(value)


_OPS: dict[str, Callable[..., Any]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "fma": lambda a, b, c: a * b + c,
    "mad": lambda a, b, c: a * b + c,
}


def packed_arith(cx: Context, name: str, t: str, flags: set[str]) -> Run:
    """Builder for add/sub/mul/fma/min/max/neg/abs on bf16, f16x2 and bf16x2."""
    kind, lanes = PACKED[t]
    bits_type = "b32" if lanes == 2 else "b16"
    if name in ("neg", "abs"):  # sign-bit operations, NaN payloads untouched (PTX ISA 9.7.4.4)
        d, a = cx.operands(2)
        ra, w = cx.read(a, bits_type), cx.write(d)
        sign = np.uint32(0x80008000 if lanes == 2 else 0x8000)
        dt = np.uint32 if lanes == 2 else np.uint16
        fn = (lambda x: (x ^ sign).astype(dt)) if name == "neg" else (lambda x: (x & ~sign).astype(dt))
        return lambda fr, m: w(fr, fn(ra(fr)), m)
    if name not in _OPS and name not in ("min", "max"):
        raise cx.unsupported(f"{name}.{t} is not implemented")
    op = min_max(name, "NaN" in flags) if name in ("min", "max") else _OPS[name]
    ops = cx.operands(4 if name in ("fma", "mad") else 3)
    w, readers = cx.write(ops[0]), [cx.read(o, bits_type) for o in ops[1:]]
    finish = saturate if "sat" in flags else (lambda x: x)
    relu = "relu" in flags

    def lane(values: list[Any], shift: int) -> Any:
        wide = [_widen((v.astype(np.uint32) >> np.uint32(shift)) & _LANE, kind) for v in values]
        result = finish(op(*wide))
        if relu:
            result = np.where(result < 0, 0.0, result)
        return _narrow(np.asarray(result, np.float64), kind).astype(np.uint32)

    def run(fr: Any, m: Any) -> None:
        values = [r(fr) for r in readers]
        if lanes == 1:
            w(fr, lane(values, 0).astype(np.uint16), m)
        else:
            w(fr, lane(values, 0) | (lane(values, 16) << np.uint32(16)), m)

    return run
