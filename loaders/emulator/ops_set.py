"""``set``: the comparison that writes a value instead of a predicate (PTX ISA 9.7.5.2 "set",
9.7.4.9 "Half Precision Comparison Instructions: set").

``set.CmpOp{.BoolOp}{.ftz}.dtype.stype d, a, b{, {!}c}`` compares ``a`` and ``b`` as ``stype``,
optionally combines the result with predicate ``c``, and writes "true" as ``dtype`` sees it:
1.0 for ``.f32`` / ``.f16`` / ``.bf16``, all ones for an integer type, 0 for false.  Packed
``.f16x2`` / ``.bf16x2`` sources compare each 16-bit lane on its own and write one result per
lane (1.0 in the lane's format for a packed destination, ``0xffff`` for ``.u32`` / ``.s32``).
numba's fp16 ``hexp`` (cuda_fp16.hpp) uses ``set.eq.f16.f16``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .build import Context, Run, op
from .float_math import flush_compared
from .ops_data import COMBINE, COMPARISONS, comparison, read_value
from .ops_half import LANE_TYPES, lane
from .values import DTYPES, FLOAT_TYPES, UINT

__all__: list[str] = []

_SCALAR_SOURCES = frozenset(t for t in DTYPES if t[0] in "bsuf" and t not in ("tf32", "f16x2", "bf16x2"))
# destination -> the bits "true" is written as (0.0 and integer 0 are all zero bits)
_TRUE = {"f32": 0x3F80_0000, "f16": 0x3C00, "bf16": 0x3F80, "u16": 0xFFFF, "s16": 0xFFFF,
         "u32": 0xFFFF_FFFF, "s32": 0xFFFF_FFFF}
_HALF_SOURCE_DESTINATIONS = frozenset(("f16", "bf16", "u16", "s16", "u32", "s32"))


def _check_types(cx: Context, dtype: str, stype: str) -> None:
    if stype in LANE_TYPES:
        allowed = {stype, "u32", "s32"}
    elif stype in ("f16", "bf16"):
        allowed = _HALF_SOURCE_DESTINATIONS
    else:
        allowed = {"u32", "s32", "f32", "f16", "bf16"}
    if dtype not in allowed:
        raise cx.unsupported(f"set with .{stype} sources writes one of {sorted('.' + t for t in allowed)} "
                             f"(got .{dtype})")


@op("set")
def _set(cx: Context) -> Run:
    flags, (dtype, stype) = cx.split_mods(COMPARISONS | set(COMBINE) | {"ftz"},
                                          _SCALAR_SOURCES | set(LANE_TYPES) | set(_TRUE), ntypes=2)
    cmps, combine = flags & COMPARISONS, flags & set(COMBINE)
    if len(cmps) != 1 or len(combine) > 1:
        raise cx.unsupported("set needs one comparison and at most one of .and/.or/.xor")
    _check_types(cx, dtype, stype)
    kind = LANE_TYPES.get(stype, stype)
    compare = comparison(cmps.pop(), kind in FLOAT_TYPES or kind == "bf16")
    ops = cx.operands((4,) if combine else (3,))
    w = cx.write(ops[0])
    ra, rb = cx.read(ops[1], stype), cx.read(ops[2], stype)
    rc = cx.read(ops[3], "pred") if combine else None
    join = COMBINE[combine.pop()] if combine else None
    pre = flush_compared if "ftz" in flags else (lambda x: x)

    def result(a: Any, b: Any, fr: Any) -> Any:
        outcome = compare(pre(a), pre(b))
        return outcome if join is None else join(outcome, rc(fr))

    if stype in LANE_TYPES:
        true = np.uint32(_TRUE[kind] if dtype in LANE_TYPES else 0xFFFF)

        def packed(fr: Any, m: Any) -> None:
            a, b = ra(fr), rb(fr)
            low = np.where(result(lane(a, 0, kind), lane(b, 0, kind), fr), true, np.uint32(0))
            high = np.where(result(lane(a, 16, kind), lane(b, 16, kind), fr), true, np.uint32(0))
            w(fr, (low | (high << np.uint32(16))).astype(np.uint32), m)

        return packed
    out = UINT[DTYPES[dtype].itemsize]
    true_bits, false_bits = out.type(_TRUE[dtype]), out.type(0)

    def scalar(fr: Any, m: Any) -> None:
        w(fr, np.where(result(read_value(stype, ra(fr)), read_value(stype, rb(fr)), fr), true_bits,
                       false_bits).astype(out), m)

    return scalar
