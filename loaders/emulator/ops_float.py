"""Floating-point instructions (PTX ISA 9.7.3 "Floating-Point", 9.7.4 "Half Precision").

The arithmetic itself is exact IEEE (:mod:`.float_math`).  ``.approx``
functions are computed accurately, which is within the error PTX documents
for them: sin, cos, ex2, lg2 and tanh in double precision by the C library's
functions (``float_math.LIBM``, which the compiled tier calls too), rounded to
the type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import float_math
from .build import Context, Run, op
from .float_math import LIBM, LIBM_FUNCTIONS, ROUNDINGS, exact_binary, flush, fma32, fma64, min_max, saturate
from .ops_half import PACKED, packed_arith
from .values import FLOAT_TYPES

__all__ = ["float_arith"]

_UFUNCS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}  # IEEE rn already

def _modifiers(cx: Context, extra: set[str]) -> tuple[str, str, bool, bool, set[str]]:
    flags, (t,) = cx.split_mods(set(ROUNDINGS) | {"ftz", "sat"} | extra, FLOAT_TYPES)
    rounding = flags & ROUNDINGS
    if len(rounding) > 1:
        raise cx.unsupported(f"more than one rounding modifier (got {sorted(rounding)})")
    return t, (rounding.pop() if rounding else "rn"), "ftz" in flags, "sat" in flags, flags


def _finish(value: Any, ftz: bool, sat: bool) -> Any:
    if ftz:
        value = flush(value)
    return saturate(value) if sat else value


_SPARSE = 0.75  # a masked group below this share of the batch is computed compressed


def _on_active(fn: Callable[..., Any], m: Any, *args: Any) -> Any:
    """``fn(*args)`` for the threads in ``m``: when few threads run (divergent code), on their
    elements only, scattered back into a full-size result whose other elements are unused."""
    if m is None or np.count_nonzero(m) >= _SPARSE * len(m):
        return fn(*args)
    chosen = m.nonzero()[0]
    compressed = [x[chosen] if type(x) is np.ndarray else x for x in args]
    result = fn(*compressed)
    out = np.empty(len(m), result.dtype)
    out[chosen] = result
    return out


def float_arith(cx: Context, name: str) -> Run:
    """Builder for the float forms of add/sub/mul/mad/fma/div/abs/neg/min/max."""
    if cx.ins.mods and cx.ins.mods[-1] in PACKED:
        flags, (t,) = cx.split_mods(set(ROUNDINGS) | {"ftz", "sat", "relu", "NaN"}, set(PACKED))
        return packed_arith(cx, name, t, flags)
    t, mode, ftz, sat, flags = _modifiers(cx, {"approx", "full", "NaN", "xorsign", "abs"})
    if flags & {"xorsign", "abs"}:
        raise cx.unsupported(f"modifier(s) {sorted(flags & {'xorsign', 'abs'})} are not implemented")
    pre = flush if ftz else (lambda x: x)
    plain = mode == "rn" and not ftz and not sat and t != "f16"  # one NumPy call, no wrappers
    if name in ("add", "sub", "mul", "div"):
        d, a, b = cx.operands(3)
        ra, rb, w = cx.read(a, t), cx.read(b, t), cx.write(d)
        if plain:
            ufunc = _UFUNCS[name]
            return lambda fr, m: w(fr, ufunc(ra(fr), rb(fr)), m)
        return lambda fr, m: w(fr, _finish(exact_binary(name, pre(ra(fr)), pre(rb(fr)), mode), ftz, sat), m)
    if name in ("mad", "fma"):
        d, a, b, c = cx.operands(4)
        ra, rb, rc, w = cx.read(a, t), cx.read(b, t), cx.read(c, t), cx.write(d)
        fused = {"f32": fma32, "f64": fma64}.get(t)
        if plain and t == "f64" and float_math.native_fma is None:  # dozens of passes: on the active threads
            return lambda fr, m: w(fr, _on_active(fma64, m, ra(fr), rb(fr), rc(fr)), m)
        if plain and fused is not None:
            return lambda fr, m: w(fr, fused(ra(fr), rb(fr), rc(fr)), m)
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


_APPROXIMATE = LIBM or {opcode: getattr(np, name) for opcode, name in LIBM_FUNCTIONS.items()}
_MATH: dict[str, Callable[[Any], Any]] = {
    "rcp": lambda x: x.dtype.type(1) / x,
    "sqrt": np.sqrt,
    "rsqrt": _rsqrt,
    **{name: _in_f64(fn) for name, fn in _APPROXIMATE.items()},
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
