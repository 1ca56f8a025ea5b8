"""An integer compare of a register whose lanes follow the lane against one value, as a range test.

``setp.ge.s64 %p, %i, %n`` with ``%i = base + lane`` (:mod:`.lanes`) and ``%n`` one value a warp is
what every bounds-checked kernel starts with, and on 32 lanes of 64 bits it is eight vector
compares and the packing of their results: a third of a saxpy warp's time.  Each lane's value is
``x + S[lane]``, lane 0's value plus a small constant; where no lane's value wraps around (two
scalar compares of ``x``), ``x + S[lane] < n`` is ``S[lane] < n - x``, the difference clamped to
just outside the constants' range, and the lanes compare their constants against it as bytes (or
the narrowest integers the constants fit).  A signed compare is an unsigned one of the values with
their sign bit flipped, which moves every lane alike.  Where a lane's value would wrap, the lanes
compare as they always did.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..parse import Imm, Reg
from .values import bits_of, constant_bits, signed_literal, vec

__all__ = ["lane_compare"]

_SIGNED = {"lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge", "lo": "slt", "ls": "sle", "hi": "sgt",
           "hs": "sge", "eq": "eq", "ne": "ne"}  # on the lanes' constants, small signed integers
_SWAPPED = {"slt": "sgt", "sle": "sge", "sgt": "slt", "sge": "sle", "eq": "eq", "ne": "ne"}


def lane_compare(e: Any, cmp: str, t: str, a: Any, b: Any, vector: Callable[[], str]) -> str | None:
    """``setp.cmp.t`` of operands ``a`` and ``b`` as a ``<32 x i1>`` when one is a register whose
    lanes follow the lane by constants and the other one value a warp (a register or an
    immediate); ``vector()`` emits the lanes' own compare, for a warp whose values wrap around.
    None: not such a compare."""
    if cmp not in _SIGNED or t[0] not in "usb" or (t[0] == "b" and cmp not in ("eq", "ne")):
        return None
    width = bits_of(t)
    left = _offsets(e, a, width)
    if left is not None:
        offsets, follows, other, predicate = left, a, b, _SIGNED[cmp]
    else:  # one value against the lanes: the compare turned around
        offsets, follows, other, predicate = _offsets(e, b, width), b, a, _SWAPPED[_SIGNED[cmp]]
    if offsets is None:
        return None
    one = _scalar(e, other, t, width)
    if one is None:
        return None
    lanes = _narrowest(min(offsets) - 1, max(offsets) + 1)
    if lanes is None:
        return None
    it = f"i{width}"
    x = e.slot_value(follows.name)
    if t[0] == "s":  # signed: both sides with the sign bit flipped, compared unsigned
        sign = signed_literal(1 << (width - 1), width)
        x, one = e.op(f"xor {it} {x}, {sign}"), e.op(f"xor {it} {one}, {sign}")
    low, high = min(offsets), max(offsets)
    kept = [e.op(f"icmp uge {it} {x}, {signed_literal(-low, width)}")] if low < 0 else []
    if high > 0:
        kept.append(e.op(f"icmp ule {it} {x}, {signed_literal((1 << width) - 1 - high, width)}"))
    wide = f"i{2 * width}"
    gap = e.op(f"sub {wide} {e.op(f'zext {it} {one} to {wide}')}, {e.op(f'zext {it} {x} to {wide}')}")
    e.intrinsic(f"declare {wide} @llvm.smax.{wide}({wide}, {wide})")
    e.intrinsic(f"declare {wide} @llvm.smin.{wide}({wide}, {wide})")
    above = e.op(f"call {wide} @llvm.smax.{wide}({wide} {gap}, {wide} {low - 1})")
    clamped = e.op(f"call {wide} @llvm.smin.{wide}({wide} {above}, {wide} {high + 1})")
    bound = e.op(f"trunc {wide} {clamped} to {lanes}")
    constants = ", ".join(f"{lanes} {o}" for o in offsets)
    fast = f"icmp {predicate} {vec(lanes)} <{constants}>, {e.spread(bound, lanes)}"
    if not kept:
        return e.op(fast)
    inside = kept[0] if len(kept) == 1 else e.op(f"and i1 {kept[0]}, {kept[1]}")
    ranged, wrapped, joined = e.label("ranged"), e.label("wrapped"), e.label("compared")
    e.emit(f"br i1 {inside}, label %{ranged}, label %{wrapped}")
    e.put_label(ranged)
    quick = e.op(fast)
    e.emit(f"br label %{joined}")
    e.put_label(wrapped)
    slow = vector()
    came = e.block
    e.emit(f"br label %{joined}")
    e.put_label(joined)
    return e.op(f"phi {vec('i1')} [{quick}, %{ranged}], [{slow}, %{came}]")


def _offsets(e: Any, operand: Any, width: int) -> tuple[int, ...] | None:
    """The signed constants a lane adds to lane 0's value of register ``operand`` (None: not such
    a register, or not of ``width`` bits)."""
    if not isinstance(operand, Reg) or operand.name not in e.lane_offsets:
        return None
    return e.signed_offsets(operand.name) if e.registers[operand.name] == width else None


def _scalar(e: Any, operand: Any, t: str, width: int) -> str | None:
    """Operand ``operand``'s one value a warp as an ``i{width}`` scalar (None: it has more)."""
    if isinstance(operand, Imm):
        return str(signed_literal(constant_bits(operand.text, t), width))
    if isinstance(operand, Reg) and operand.name in e.uniform and operand.name not in e.lane_offsets \
            and e.registers.get(operand.name) == width:
        return e.slot_value(operand.name)
    return None


def _narrowest(low: int, high: int) -> str | None:
    """The narrowest integer lanes holding ``[low, high]`` (bytes fill a vector register: no packing)."""
    for bits in (8, 16, 32):
        if -(1 << (bits - 1)) <= low and high < 1 << (bits - 1):
            return f"i{bits}"
    return None

