"""Warp-level instructions as vector IR (``shfl``, ``vote``, ``activemask``, ``redux``, ``match``,
``elect``), with the interpreter's semantics (:mod:`..ops_warp`).

A warp is one vector of 32 lanes, so a warp instruction is a permutation or a reduction of one
register.  The lanes that take part in thread ``i``'s result are those that execute the
instruction with it (the block's mask and the guard) and that ``i``'s ``membermask`` names; threads
may pass different masks, so a result is computed per lane from the executing lanes' bits ANDed
with that lane's mask.  ``shfl`` reads its source lane whatever the mask (a lane that does not
execute it holds the value it last wrote; on a GPU that read is undefined); a shuffle whose
lane operands are constants is a ``shufflevector``, any other a gather from the stack.
"""

from __future__ import annotations

from collections.abc import Callable

from ..parse import Imm, Instruction, Pair
from .emit import LANE_IDS, Emitter
from .ops import lower, modifiers, operands
from .values import Unsupported, constant_bits, vec

__all__: list[str] = []

_M, _I32 = vec("i1"), vec("i32")
_ALL = (1 << 32) - 1
# redux: the LLVM reduction and the value a lane outside the members adds, per operation and type
_REDUX = {
    "add": ("add", 0, 0), "and": ("and", _ALL, _ALL), "or": ("or", 0, 0), "xor": ("xor", 0, 0),
    "min": ("min", _ALL, (1 << 31) - 1), "max": ("max", 0, 1 << 31),
}


def _bits(e: Emitter, lanes: str) -> str:
    """A lane mask as one i32, lane ``j`` at bit ``j``."""
    return e.op(f"bitcast {_M} {lanes} to i32")


def _membermask(e: Emitter, operand: object | None) -> str:
    """Each lane's ``membermask`` (all lanes where the instruction takes none)."""
    return f"splat (i32 {_ALL})" if operand is None else e.read(operand, "u32")


def _members(e: Emitter, m: str, membermask: str) -> str:
    """Per lane: the executing lanes its membermask names, as bits."""
    return e.op(f"and {_I32} {e.spread(_bits(e, m), 'i32')}, {membermask}")


def _destinations(d: object) -> tuple[object, object | None]:
    return (d.first, d.second) if isinstance(d, Pair) else (d, None)


def _each_lane(e: Emitter, build: Callable[[str], str]) -> str:
    """A ``<32 x i32>`` whose lane ``i`` is ``build(i)`` (an i32 computed from the lane index, in a
    loop of 32 passes: lanes passing different masks or values need a reduction each)."""
    before, head, after = e.block, e.label("lane"), e.label("lanes")
    i, acc, i_next, acc_next = e.tmp(), e.tmp(), e.tmp(), e.tmp()
    e.emit(f"br label %{head}")
    e.put_label(head)
    e.emit(f"{i} = phi i32 [0, %{before}], [{i_next}, %{head}]")
    e.emit(f"{acc} = phi {_I32} [zeroinitializer, %{before}], [{acc_next}, %{head}]")
    e.emit(f"{acc_next} = insertelement {_I32} {acc}, i32 {build(i)}, i32 {i}")
    e.emit(f"{i_next} = add i32 {i}, 1")
    e.emit(f"br i1 {e.op(f'icmp ult i32 {i_next}, 32')}, label %{head}, label %{after}")
    e.put_label(after)
    return acc_next


# -- shfl ---------------------------------------------------------------------------------------------


def _source_lane(mode: str, lane: int, shift: int, clamp: int) -> tuple[int, bool]:
    """The lane ``lane`` reads and whether it is in range (PTX ISA ``shfl.sync``), for constants."""
    shift, segmask = shift & 0x1F, (clamp >> 8) & 0x1F
    least = lane & segmask
    most = least | ((clamp & 0x1F) & ~segmask)
    if mode == "up":
        j = lane - shift
        return (j, True) if j >= most else (lane, False)
    j = lane + shift if mode == "down" else lane ^ shift if mode == "bfly" else least | (shift & ~segmask)
    return (j, True) if j <= most else (lane, False)


def _source_lanes(e: Emitter, mode: str, b: object, c: object) -> tuple[str, str]:
    """Each lane's source lane and whether it is in range, for run-time lane operands."""
    shift = e.op(f"and {_I32} {e.read(b, 'u32')}, splat (i32 31)")
    clamp = e.read(c, "u32")
    segmask = e.op(f"and {_I32} {e.op(f'lshr {_I32} {clamp}, splat (i32 8)')}, splat (i32 31)")
    outside = e.op(f"xor {_I32} {segmask}, splat (i32 -1)")
    least = e.op(f"and {_I32} {LANE_IDS}, {segmask}")
    bound = e.op(f"and {_I32} {e.op(f'and {_I32} {clamp}, splat (i32 31)')}, {outside}")
    most = e.op(f"or {_I32} {least}, {bound}")
    if mode == "up":
        j = e.op(f"sub {_I32} {LANE_IDS}, {shift}")
        valid = e.op(f"icmp sge {_I32} {j}, {most}")
    else:
        step = {"down": "add", "bfly": "xor"}.get(mode)
        j = (
            e.op(f"{step} {_I32} {LANE_IDS}, {shift}") if step  # idx: the lane within the segment
            else e.op(f"or {_I32} {least}, {e.op(f'and {_I32} {shift}, {outside}')}")
        )
        valid = e.op(f"icmp sle {_I32} {j}, {most}")
    return e.op(f"select {_M} {valid}, {_I32} {j}, {_I32} {LANE_IDS}"), valid


@lower("shfl")
def _shfl(e: Emitter, ins: Instruction, m: str) -> None:
    flags, _ = modifiers(ins, {"sync", "up", "down", "bfly", "idx"}, frozenset(("b32",)))
    modes = flags - {"sync"}
    if len(modes) != 1:
        raise Unsupported("shfl needs one of .up/.down/.bfly/.idx")
    mode = modes.pop()
    d, a, b, c = operands(ins, 5 if "sync" in flags else 4)[:4]
    value, (target, in_range) = e.read(a, "b32"), _destinations(d)
    if isinstance(b, Imm) and isinstance(c, Imm):
        shift, clamp = constant_bits(b.text, "u32"), constant_bits(c.text, "u32")
        lanes = [_source_lane(mode, lane, shift, clamp) for lane in range(32)]
        order = ", ".join(f"i32 {j}" for j, _ in lanes)
        moved = e.op(f"shufflevector {_I32} {value}, {_I32} poison, {_I32} <{order}>")
        valid = e.op(f"or {_M} <{', '.join(f'i1 {int(ok)}' for _, ok in lanes)}>, zeroinitializer")
    else:
        source, valid = _source_lanes(e, mode, b, c)
        e.emit(f"store {_I32} {value}, ptr %lanes")
        at = e.op(f"getelementptr i32, ptr %lanes, {_I32} {source}")
        e.intrinsic(f"declare {_I32} @llvm.masked.gather.v32i32.v32p0({vec('ptr')}, {_M}, {_I32})")
        moved = e.op(
            f"call {_I32} @llvm.masked.gather.v32i32.v32p0({vec('ptr')} align 4 {at}, "
            f"{_M} splat (i1 true), {_I32} poison)"
        )
    e.write(target, moved, "b32", m)
    if in_range is not None:
        e.write(in_range, valid, "pred", m)


# -- vote, activemask ---------------------------------------------------------------------------------


@lower("vote")
def _vote(e: Emitter, ins: Instruction, m: str) -> None:
    flags, (t,) = modifiers(ins, {"sync", "all", "any", "uni", "ballot"}, frozenset(("pred", "b32")))
    modes = flags - {"sync"}
    if len(modes) != 1 or (t == "b32") != ("ballot" in modes):
        raise Unsupported("vote needs .all/.any/.uni with .pred, or .ballot with .b32")
    mode = modes.pop()
    ops = operands(ins, 3 if "sync" in flags else 2)
    votes = e.read(ops[1], "pred")
    members = _members(e, m, _membermask(e, ops[2] if "sync" in flags else None))
    yes = e.op(f"and {_I32} {e.spread(_bits(e, votes), 'i32')}, {members}")
    if mode == "ballot":
        e.write(ops[0], yes, "b32", m)
        return
    noes = _bits(e, e.op(f"xor {_M} {votes}, splat (i1 true)"))
    no = e.op(f"and {_I32} {e.spread(noes, 'i32')}, {members}")
    some_yes, some_no = (e.op(f"icmp ne {_I32} {x}, zeroinitializer") for x in (yes, no))
    if mode == "any":
        result = some_yes
    elif mode == "all":
        result = e.op(f"xor {_M} {some_no}, splat (i1 true)")
    else:
        result = e.op(f"xor {_M} {e.op(f'and {_M} {some_yes}, {some_no}')}, splat (i1 true)")
    e.write(ops[0], result, "pred", m)


@lower("activemask")
def _activemask(e: Emitter, ins: Instruction, m: str) -> None:
    modifiers(ins, set(), frozenset(("b32",)))
    (d,) = operands(ins, 1)
    e.write(d, e.spread(_bits(e, m), "i32"), "b32", m)


# -- redux, match, elect ------------------------------------------------------------------------------


@lower("redux")
def _redux(e: Emitter, ins: Instruction, m: str) -> None:
    flags, (t,) = modifiers(ins, {"sync", *_REDUX}, frozenset(("u32", "s32", "b32")))
    names = flags & set(_REDUX)
    if "sync" not in flags or len(names) != 1:
        raise Unsupported("redux needs .sync and one of " + ", ".join(_REDUX))
    how, unsigned, signed = _REDUX[names.pop()]
    if how in ("min", "max"):
        how = ("s" if t == "s32" else "u") + how
    neutral = signed if t == "s32" else unsigned
    d, a, mask = operands(ins, 3)
    values, membermask = e.read(a, t), _membermask(e, mask)
    e.intrinsic(f"declare i32 @llvm.vector.reduce.{how}.v32i32({_I32})")

    def reduced(bits: str) -> str:
        taking = e.op(f"bitcast i32 {bits} to {_M}")
        kept = e.op(f"select {_M} {taking}, {_I32} {values}, {_I32} splat (i32 {neutral})")
        return e.op(f"call i32 @llvm.vector.reduce.{how}.v32i32({_I32} {kept})")

    executing = _bits(e, m)
    if isinstance(mask, Imm):  # one mask for every lane: one reduction
        shared = e.op(f"and i32 {executing}, {constant_bits(mask.text, 'u32')}")
        result = e.spread(reduced(shared), "i32")
    else:

        def own(i: str) -> str:  # lane i's reduction over the executing lanes its mask names
            named = e.op(f"extractelement {_I32} {membermask}, i32 {i}")
            return reduced(e.op(f"and i32 {executing}, {named}"))

        result = _each_lane(e, own)
    e.write(d, result, t, m)


@lower("match")
def _match(e: Emitter, ins: Instruction, m: str) -> None:
    flags, (t,) = modifiers(ins, {"sync", "any", "all"}, frozenset(("b32", "b64")))
    if "sync" not in flags or len(flags & {"any", "all"}) != 1:
        raise Unsupported("match needs .sync and one of .any/.all")
    d, a, mask = operands(ins, 3)
    (target, uniform_out), values = _destinations(d), e.read(a, t)
    members = _members(e, m, _membermask(e, mask))
    vt, element = vec("i64" if t == "b64" else "i32"), "i64" if t == "b64" else "i32"

    def equal(i: str) -> str:
        mine = e.op(f"extractelement {vt} {values}, i32 {i}")
        return _bits(e, e.op(f"icmp eq {vt} {values}, {e.spread(mine, element)}"))

    lanes = e.op(f"and {_I32} {_each_lane(e, equal)}, {members}")
    if "any" in flags:
        e.write(target, lanes, "b32", m)
        return
    uniform = e.op(f"icmp eq {_I32} {lanes}, {members}")
    e.write(target, e.op(f"select {_M} {uniform}, {_I32} {lanes}, {_I32} zeroinitializer"), "b32", m)
    if uniform_out is not None:
        e.write(uniform_out, uniform, "pred", m)


@lower("elect")
def _elect(e: Emitter, ins: Instruction, m: str) -> None:
    flags, _ = modifiers(ins, {"sync"}, frozenset(), ntypes=0)
    if "sync" not in flags:
        raise Unsupported("elect needs .sync")
    d, mask = operands(ins, 2)
    if not isinstance(d, Pair):
        raise Unsupported("elect.sync writes d|p")
    members = _members(e, m, _membermask(e, mask))
    e.intrinsic(f"declare {_I32} @llvm.cttz.v32i32({_I32}, i1)")
    lowest = e.op(f"call {_I32} @llvm.cttz.v32i32({_I32} {members}, i1 false)")
    none = e.op(f"icmp eq {_I32} {members}, zeroinitializer")
    leader = e.op(f"select {_M} {none}, {_I32} zeroinitializer, {_I32} {lowest}")
    e.write(d.first, leader, "b32", m)
    e.write(d.second, e.op(f"icmp eq {_I32} {LANE_IDS}, {leader}"), "pred", m)
