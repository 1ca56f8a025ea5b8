"""Registers whose lanes follow the lane index: uniform (one value) or affine (``base + lane * k``).

A warp's register is a vector of 32 lanes, and the arithmetic that forms indices and addresses
(``blockIdx.x * blockDim.x + threadIdx.x``, a numba array's wraparound, ``i * 4 + base``) on
64-bit lanes is most of what a simple kernel costs.  Where every lane's value is ``base + lane * k``
(``k`` a constant, modulo the register's width), the warp keeps ``base`` alone, as it keeps a
uniform register: the arithmetic runs once on scalars, and an access through such an address is
known to be consecutive.  The facts are exact, never guessed: a register qualifies when every
instruction that writes it is an unguarded one of the rules below over operands that qualify, and
it is written either in the first block only (which every live lane runs together and no branch
enters again) or before every read in each block (a block's temporary, which no other lane
reads).  Alongside the stride, each register has the range its lanes' values lie in where one is
known (nonnegative, below half the width), which decides what would otherwise depend on the values:
a sign extension or a right shift of a value known nonnegative (``shr.s64 %rd, %rd, 63`` of a
thread index is 0).

``%tid.x`` is affine (stride 1) and ``%tid.y``, ``%tid.z`` uniform in a warp when the block's x
extent is a multiple of 32 (a *shaped* launch, which also bounds the grid so that a 32-bit
``blockIdx * blockDim + threadIdx`` cannot wrap); a kernel is compiled for shaped launches and for
others apart (:mod:`.tier`).  Registers a warp-wide instruction reads (``shfl``, ``vote`` ...) keep
every lane, as the interpreter holds them.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..machine import BRA, PLAIN, Function
from ..parse import Imm, Instruction, Mem, Reg
from .flow import entry_live, operand_registers
from .values import Unsupported, constant_bits, signed_literal

__all__ = ["lane_strides", "SHAPED_GRID"]

SHAPED_GRID = (1 << 21) - 1  # a shaped launch has fewer blocks than this along each axis

_OPS = frozenset((
    "add", "sub", "mul", "mad", "div", "rem", "abs", "neg", "min", "max", "and", "or", "xor", "not", "cnot",
    "shl", "shr", "popc", "clz", "brev", "setp", "selp", "mov", "cvt", "cvta", "fma",
))
_COLLECTIVE = frozenset(("shfl", "vote", "match", "redux", "activemask", "elect", "bar", "barrier"))
_STORES = frozenset(("st", "red"))
_INTEGER = {f"{s}{w}": w for s in "sub" for w in (16, 32, 64)}
_MAX_UPDATES = 8  # a register whose facts still change after this many updates loses its range


class Fact(NamedTuple):
    """What every lane of a register holds: ``base + lane * stride`` (stride None: no such form)
    and values within ``span`` (inclusive, nonnegative; None: not known)."""

    stride: int | None
    span: tuple[int, int] | None


_ANY = Fact(None, None)


def _specials(shaped: bool) -> dict[str, Fact]:
    small, grid = (0, 1023), (0, SHAPED_GRID - 1 if shaped else (1 << 31) - 2)
    found = {"%laneid": Fact(1, (0, 31)), "%warpid": Fact(0, (0, 31)), "%nwarpid": Fact(0, (1, 32)),
             "%warpsize": Fact(0, (32, 32))}
    for c in "xyz":
        found[f"%ntid.{c}"] = Fact(0, (1, 1024))
        found[f"%ctaid.{c}"] = Fact(0, grid)
        found[f"%nctaid.{c}"] = Fact(0, (1, grid[1] + 1))
        found[f"%tid.{c}"] = Fact((1 if c == "x" else 0) if shaped else None, small)
    return found


def lane_strides(fn: Function, first: tuple[int, int], local: frozenset[str],
                 widths: dict[str, int], shaped: bool) -> dict[str, int]:
    """Register -> stride (0: uniform) of the registers kept as one scalar per warp; ``widths``
    are the registers' bits, ``first`` the first block, ``local`` the blocks' temporaries."""
    steps = fn.steps
    writes = _candidates(fn, first, local)
    collective = {r for s in steps if s.ins.opcode in _COLLECTIVE
                  for o in s.ins.operands for r in operand_registers(o)}
    specials = _specials(shaped)
    unwritten = entry_live(fn) & frozenset(writes)  # read at the value a frame starts with: 0
    facts: dict[str, Fact] = {}
    updates: dict[str, int] = {}
    _settle(writes, facts, updates, specials, unwritten, steps)
    # registers some cycle of unknowns left without a fact may hold anything: settle again without them
    facts.update({name: _ANY for name in writes if name not in facts})
    _settle(writes, facts, updates, specials, unwritten, steps)
    return {
        name: fact.stride % (1 << widths[name]) if widths[name] > 1 else 0
        for name, fact in facts.items()
        if name in widths and fact.stride is not None
        and (fact.stride == 0 or (widths[name] in (32, 64) and name not in collective))
    }


def _settle(writes: dict[str, list[int]], facts: dict[str, Fact], updates: dict[str, int],
            specials: dict[str, Fact], unwritten: frozenset[str], steps: list[Any]) -> None:
    """Iterate each register's fact (the join over its writes, and its starting 0 where it may be
    read before written) until none changes; a range still moving after :data:`_MAX_UPDATES`
    updates is dropped, a stride after twice as many."""
    changed = True
    while changed:
        changed = False
        for name, at in writes.items():
            found: Fact | None = Fact(0, (0, 0)) if name in unwritten else None
            for i in at:
                fact = _transfer(steps[i].ins, facts, specials, writes)
                if fact is None:
                    continue  # an operand not known yet
                found = fact if found is None else _join(found, fact)
            if found is None or found == facts.get(name):
                continue
            updates[name] = updates.get(name, 0) + 1
            if updates[name] > _MAX_UPDATES:
                found = Fact(found.stride if updates[name] <= 2 * _MAX_UPDATES else None, None)
            if found != facts.get(name):
                facts[name], changed = found, True


def _candidates(fn: Function, first: tuple[int, int], local: frozenset[str]) -> dict[str, list[int]]:
    """Registers every write of which is an unguarded instruction of the rules' opcodes, written in
    the first block only (no branch enters it again) or a block's temporary: their writes."""
    steps = fn.steps
    entered = any(s.kind == BRA and s.target == 0 for s in steps)
    writes: dict[str, list[int]] = {}
    for i, step in enumerate(steps):
        ins = step.ins
        if ins.opcode in _STORES or not ins.operands or isinstance(ins.operands[0], Mem):
            continue
        for name in operand_registers(ins.operands[0]):
            writes.setdefault(name, []).append(i)

    def fit(i: int) -> bool:
        step, ins = steps[i], steps[i].ins
        if step.kind != PLAIN or ins.guard is not None or not isinstance(ins.operands[0], Reg):
            return False
        parameter = (ins.opcode == "ld" and "param" in ins.mods and isinstance(ins.operands[1], Mem)
                     and not isinstance(ins.operands[1].base, Reg))
        return ins.opcode in _OPS or parameter

    return {
        name: at for name, at in writes.items()
        if all(fit(i) for i in at)
        and (name in local or (not entered and all(first[0] <= i < first[1] for i in at)))
    }


def _join(a: Fact, b: Fact) -> Fact:
    stride = a.stride if a.stride == b.stride else None
    if a.span is None or b.span is None:
        return Fact(stride, None)
    span = (min(a.span[0], b.span[0]), max(a.span[1], b.span[1]))
    return Fact(stride, span)


def _transfer(ins: Instruction, facts: dict[str, Fact], specials: dict[str, Fact],
              candidates: dict[str, list[int]]) -> Fact | None:
    """The fact of ``ins``'s destination from its operands' (None: an operand not known yet)."""
    if ins.opcode == "ld":  # a kernel parameter at a constant offset
        return Fact(0, None)
    types = [m for m in ins.mods if m in _INTEGER or (m[:1] in "f" and m[1:].isdigit()) or m == "pred"]
    width = _INTEGER.get(types[-1]) if types else None
    sources = []
    for operand in ins.operands[1:]:
        fact = _operand(operand, facts, specials, candidates, types[-1] if types else "b64")
        if fact is None:
            return None
        sources.append(fact)
    if width is None:  # floats, predicates, untyped: uniform when every source is
        return Fact(0, None) if all(s.stride == 0 for s in sources) else _ANY
    found = _affine(ins, sources, width, types)
    if found is not None:
        return found
    return Fact(0, None) if all(s.stride == 0 for s in sources) else _ANY


def _operand(operand: Any, facts: dict[str, Fact], specials: dict[str, Fact],
             candidates: dict[str, list[int]], ptx_type: str) -> Fact | None:
    """An operand's fact (None: a register's not known yet)."""
    if isinstance(operand, Reg):
        if operand.name in specials:
            return specials[operand.name]
        return facts.get(operand.name) if operand.name in candidates else _ANY
    if isinstance(operand, Imm):
        try:
            value = constant_bits(operand.text, ptx_type)
        except Unsupported:
            return _ANY
        return Fact(0, (value, value) if value < 1 << (_INTEGER.get(ptx_type, 64) - 1) else None)
    if isinstance(operand, Mem):
        return _ANY
    names = operand_registers(operand)
    inner = [_operand(Reg(name), facts, specials, candidates, ptx_type) for name in names]
    if any(fact is None for fact in inner):
        return None
    # a symbol's address, or a negated predicate, a vector: uniform where every register in it is
    return Fact(0, None) if all(fact.stride == 0 for fact in inner) else _ANY  # type: ignore[union-attr]


def _within(lo: int, hi: int, width: int) -> tuple[int, int] | None:
    return (lo, hi) if 0 <= lo <= hi < 1 << (width - 1) else None


def _constant(fact: Fact) -> int | None:
    known = fact.stride == 0 and fact.span is not None and fact.span[0] == fact.span[1]
    return fact.span[0] if known else None  # type: ignore[index]


def _affine(ins: Instruction, sources: list[Fact], width: int, types: list[str]) -> Fact | None:
    """The rules: lanes ``base + lane * k`` through integer ``mov``/``add``/``sub``/``neg``, ``mul``
    and ``mad`` by a constant (``.wide`` of values that extend exactly), ``shl`` by a constant,
    conversions between integer widths (widening only what extends exactly), ``shr`` of a range
    whose lanes shift to one value and ``and`` with a mask that keeps a range whole; None: no rule."""
    op, mods = ins.opcode, set(ins.mods)
    if mods & {"cc", "sat", "hi"} or (ins.operands and not isinstance(ins.operands[0], Reg)):
        return None
    if op == "mov" and len(sources) == 1:
        return sources[0]
    if op in ("add", "sub") and len(sources) == 2:
        return _sum(sources[0], sources[1], width, 1 if op == "add" else -1)
    if op == "neg" and len(sources) == 1 and sources[0].stride is not None:
        return Fact(-sources[0].stride, None)
    if op in ("mul", "mad") and len(sources) in (2, 3):
        product = _product(sources[0], sources[1], width, "wide" in mods)
        if op == "mul":
            return product
        return _sum(product, sources[2], 2 * width if "wide" in mods else width, 1)
    if op == "shl" and len(sources) == 2 and (shift := _constant(sources[1])) is not None and shift < width:
        a = sources[0]
        return Fact(None if a.stride is None else a.stride << shift,
                    a.span and _within(a.span[0] << shift, a.span[1] << shift, width))
    if op == "shr" and len(sources) == 2 and (shift := _constant(sources[1])) is not None:
        a = sources[0]
        if a.span is not None and a.span[0] >> shift == a.span[1] >> shift:
            return Fact(0, (a.span[0] >> shift,) * 2)
        return None
    if op == "and" and len(sources) == 2:
        a, b = sources
        mask = _constant(b)
        if mask is not None and a.span is not None and mask & (mask + 1) == 0 and a.span[1] <= mask:
            return a
        if a.span and b.span:
            return Fact(0 if a.stride == 0 and b.stride == 0 else None, (0, min(a.span[1], b.span[1])))
        return None
    if op == "cvt" and len(sources) == 1 and len(types) == 2 and set(types) <= set(_INTEGER) \
            and not mods - set(types):
        return _extended(sources[0], _INTEGER[types[1]], _INTEGER[types[0]])
    return None


def _sum(a: Fact, b: Fact, width: int, sign: int) -> Fact:
    """``a + sign * b`` on ``width`` bits."""
    stride = None if a.stride is None or b.stride is None else a.stride + sign * b.stride
    span = None
    if a.span and b.span:
        span = _within(a.span[0] + b.span[0], a.span[1] + b.span[1], width) if sign > 0 else \
            _within(a.span[0] - b.span[1], a.span[1] - b.span[0], width)
    return Fact(stride, span)


def _extended(a: Fact, source: int, width: int) -> Fact:
    """``a`` (``source`` bits) as ``width`` bits: truncation keeps the form; widening keeps it where
    every lane extends alike, a uniform value or a known nonnegative range."""
    if width <= source:
        return Fact(a.stride, a.span and _within(*a.span, width))
    if a.stride is None or (a.stride != 0 and a.span is None):
        return Fact(None, a.span)
    return Fact(signed_literal(a.stride, source), a.span)


def _product(a: Fact, b: Fact, width: int, wide: bool) -> Fact:
    """``a * b`` (``.lo`` of ``width`` bits, or ``.wide``): affine when one factor is a constant."""
    if wide:
        a, b, width = _extended(a, width, 2 * width), _extended(b, width, 2 * width), 2 * width
    span = a.span and b.span and _within(a.span[0] * b.span[0], a.span[1] * b.span[1], width)
    if a.stride == 0 and b.stride == 0:
        return Fact(0, span)
    for x, y in ((a, b), (b, a)):
        c = _constant(y)
        if c is not None and x.stride is not None:
            return Fact(x.stride * c, span)
    return Fact(None, span)
