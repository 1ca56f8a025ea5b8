"""The CPU loader's C fused multiply-add (``_native.c``, C99 ``fma``/``fmaf``) rounds once, checked
against exact rationals over the operands where an fma is easy to get wrong (signed zeros,
infinities, NaNs, subnormals, overflow, ties), and agrees bit for bit with the NumPy emulation it
replaces wherever that emulation is exact (f32 everywhere; f64 unless the product under- or
overflows)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from _emulator import round_f32
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ptxbridge.loaders.emulator import float_math

native = pytest.importorskip("ptxbridge.loaders.emulator._native").fma
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _specials(dt: type) -> list[float]:
    info = np.finfo(dt)
    tiny, sub = float(info.tiny), float(info.smallest_subnormal)
    values = [0.0, 1.0, 1.5, float(info.max), tiny, sub, tiny - sub, float(info.eps), np.inf, np.nan, 3.0]
    return [s * v for v in values for s in (1.0, -1.0)]


def _floats(dt: type) -> st.SearchStrategy[float]:
    width = 32 if dt is np.float32 else 64
    return st.one_of(st.sampled_from(_specials(dt)), st.floats(width=width))


def _emulated(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(float_math, "native_fma", None)
        return (float_math.fma32 if a.dtype == np.float32 else float_math.fma64)(a, b, c)


def _same(x: np.ndarray, y: np.ndarray) -> bool:
    """Equal bits, or both NaN (the payload of a NaN result is not specified)."""
    unsigned = np.uint32 if x.dtype == np.float32 else np.uint64
    return bool(np.all((x.view(unsigned) == y.view(unsigned)) | (np.isnan(x) & np.isnan(y))))


_F32_MAX = Fraction(2**128 - 2**104)
_F32_OVERFLOW = Fraction(2**128 - 2**103)  # f32 max plus half an ulp: round-to-nearest gives inf


def _nearest(x: Fraction, dt: type) -> float:
    """``x`` rounded to the nearest ``dt`` (ties to even), infinities on overflow."""
    if dt is np.float64:
        try:
            return float(x)  # int / int true division: correctly rounded, subnormals included
        except OverflowError:
            return math.inf if x > 0 else -math.inf
    if abs(x) >= _F32_MAX:
        return (math.inf if abs(x) >= _F32_OVERFLOW else float(_F32_MAX)) * (1 if x > 0 else -1)
    with np.errstate(over="ignore"):  # the neighbour above f32 max is inf
        return round_f32(x, "rn")


def _expected(x: float, y: float, z: float, dt: type) -> float:
    """IEEE fusedMultiplyAdd of finite operands rounded once to ``dt``; an exact zero is +0 unless
    the product and ``z`` are both -0 (IEEE 754 6.3)."""
    exact = Fraction(x) * Fraction(y) + Fraction(z)
    if exact:
        return _nearest(exact, dt)
    negative_product = (x == 0 or y == 0) and math.copysign(1, x) * math.copysign(1, y) < 0
    return -0.0 if negative_product and math.copysign(1, z) < 0 else 0.0


def _columns(triples: list[tuple[float, float, float]], dt: type) -> tuple[np.ndarray, ...]:
    with np.errstate(over="ignore"):
        return tuple(np.array(column, dt) for column in zip(*triples, strict=True))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@FUZZ
@given(data=st.data())
def test_native_fma_is_exact_on_specials(dt, data):
    """Finite operands: the exact a*b+c rounded once (Fractions).  Infinities and NaNs: what the
    NumPy emulation gives.  f32: the emulation agrees everywhere; f64: its error-free
    transformations are not exact where a*b underflows or overflows, so there only the exact value
    decides."""
    triples = data.draw(st.lists(st.tuples(_floats(dt), _floats(dt), _floats(dt)), min_size=1, max_size=64))
    a, b, c = _columns(triples, dt)
    with np.errstate(all="ignore"):
        got, emulated = native(a, b, c), _emulated(a, b, c)
    assert got.dtype == dt
    for i, (x, y, z) in enumerate(zip(a.tolist(), b.tolist(), c.tolist(), strict=True)):
        if not all(map(math.isfinite, (x, y, z))):
            assert _same(got[i:i + 1], emulated[i:i + 1]), (x, y, z, got[i], emulated[i])
            continue
        expected = _expected(x, y, z, dt)
        assert _same(got[i:i + 1], np.array([expected], dt)), (x, y, z, got[i], expected)
    if dt is np.float32:
        assert _same(got, emulated)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@FUZZ
@given(data=st.data())
def test_native_fma_rounds_ties_and_near_ties_once(dt, data):
    """a*b is an odd number of half ulps of c (a tie of the final rounding), or a tie nudged by
    one ulp of the product (where rounding the exact sum twice, as f64 then f32, goes wrong)."""
    bits = 24 if dt is np.float32 else 53
    big = data.draw(st.integers(1 << (bits - 1), (1 << bits) - 1)) * data.draw(st.sampled_from([1, -1]))
    scale = Fraction(2) ** data.draw(st.integers(-40, 40))
    odd = 2 * data.draw(st.integers(0, 1023)) + 1
    nudge = 1 + data.draw(st.sampled_from([-1, 0, 1])) * Fraction(2) ** (1 - bits)
    a, b, c = (np.array([float(v)], dt) for v in (odd, scale / 2 * nudge, big * scale))
    exact = Fraction(odd) * (scale / 2 * nudge) + big * scale
    got = native(a, b, c)
    assert got[0] == (round_f32(exact, "rn") if dt is np.float32 else float(exact))
    assert _same(got, _emulated(a, b, c))


def test_native_fma_broadcasts_scalars_and_keeps_signed_zeros():
    x = np.array([-0.0, 2.0, np.inf], np.float32)
    got = native(x, np.float32(1.0), np.float32(-0.0))
    assert got.dtype == np.float32 and np.signbit(got[0]) and got[1] == 2.0 and np.isposinf(got[2])
    assert np.signbit(native(-0.0, 1.0, -0.0)) and not np.signbit(native(-0.0, 1.0, 0.0))


def test_the_numpy_fma_keeps_an_f32_overflow_infinite():
    """An f64 sum whose low bits look like an f32 tie but that overflows f32 (found by hypothesis)."""
    a, b, c = (np.array([v], np.float32) for v in (6.805922000352051e+16, 3.3895313892515355e+38, -1.0))
    with np.errstate(all="ignore"):
        assert _emulated(a, b, c)[0] == np.float32(np.inf)

