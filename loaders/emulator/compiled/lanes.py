"""Registers whose lanes follow the lane index: ``base + C[lane]``, ``C`` a constant per lane.

A warp's register is a vector of 32 lanes, and the arithmetic that forms indices and addresses
(``blockIdx.x * blockDim.x + threadIdx.x``, a numba array's wraparound, ``i * 4 + base``, a tile's
``ty * 64 + tx * 4``) on 64-bit lanes is most of what a simple kernel costs.  Where every lane's
value is lane 0's plus a constant of its own (modulo the register's width: ``C`` all zero for a
uniform register, ``lane * k`` for an affine one, ``(lane % 16) * 4 + (lane / 16) * 64`` for a
16-wide block's tile address), the warp keeps lane 0's value alone: the arithmetic runs once on
scalars, and an access through such an address is known to be consecutive, or to read a few rows
of consecutive elements (:meth:`.emit.Emitter.move`).  The facts are exact, never guessed: a
register qualifies when every instruction that writes it is an unguarded one of the rules below
over operands that qualify, and it is written either in blocks every live lane runs together
(*converged*: :func:`lane_offsets`) only or before every read in each block (a block's
temporary, which no other lane reads).  Alongside the offsets, each register has the range its
lanes' values lie in where one is known (nonnegative, below half the width), which decides what
would otherwise depend on the values: a sign extension or a right shift of a value known
nonnegative (``shr.s64 %rd, %rd, 63`` of a thread index is 0).

The thread index follows the lane where every warp of the block covers its threads alike
(:func:`warp_shape`: a block's x extent a multiple of 32, or a divisor of 32 with whole warps of
rows, as 16x16 and 8x8 blocks have), a *shaped* launch, which also bounds the grid so that a
32-bit ``blockIdx * blockDim + threadIdx`` cannot wrap; a kernel is compiled for each warp shape
it is launched with, and once for the others (:mod:`.tier`).  Registers a warp-wide instruction
reads (``shfl``, ``vote`` ...) keep every lane, as the interpreter holds them.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, NamedTuple

from ..machine import BRA, PLAIN, Function
from ..parse import Imm, Instruction, Mem, Reg
from .flow import entry_live, operand_registers, successors
from .values import Unsupported, constant_bits, signed_literal

__all__ = ["lane_offsets", "warp_shape", "Lanes", "Offsets", "Shape", "SHAPED_GRID"]

SHAPED_GRID = (1 << 21) - 1  # a shaped launch has fewer blocks than this along each axis

_OPS = frozenset((
    "add", "sub", "mul", "mad", "div", "rem", "abs", "neg", "min", "max", "and", "or", "xor", "not", "cnot",
    "shl", "shr", "popc", "clz", "brev", "setp", "selp", "mov", "cvt", "cvta", "fma",
))
_COLLECTIVE = frozenset(("shfl", "vote", "match", "redux", "activemask", "elect", "bar", "barrier"))
_STORES = frozenset(("st", "red"))
_INTEGER = {f"{s}{w}": w for s in "sub" for w in (16, 32, 64)}
_MAX_UPDATES = 8  # a register whose facts still change after this many updates loses its range
_LANES = 32

Offsets = tuple[int, ...]  # per lane, what it adds to lane 0's value
Shape = tuple[Offsets, Offsets, Offsets]  # the offsets of %tid.x, %tid.y and %tid.z in every warp
UNIFORM: Offsets = (0,) * _LANES
_LANE: Offsets = tuple(range(_LANES))


class Lanes(NamedTuple):
    """What :func:`lane_offsets` finds of a kernel: the registers kept as one scalar per warp (their
    lanes' offsets), the blocks every live lane runs together, and the registers a warp-wide
    instruction reads (whose lanes another lane may see)."""

    offsets: dict[str, Offsets]
    converged: frozenset[int]
    collective: frozenset[str]


class Fact(NamedTuple):
    """What every lane of a register holds: lane 0's value plus ``offsets[lane]`` (None: no such
    form) and values within ``span`` (inclusive, nonnegative; None: not known)."""

    offsets: Offsets | None
    span: tuple[int, int] | None


_ANY = Fact(None, None)


@lru_cache(maxsize=64)
def warp_shape(block: tuple[int, int, int]) -> Shape | None:
    """How the thread index follows the lane in every warp of a block of ``block`` threads: each
    axis's offsets from the warp's first thread, the same in every warp; None where warps differ
    (a 48 x 2 block: its second warp wraps to the next row in mid-warp).  The lanes of a last,
    partial warp past the block never run: only the others must agree."""
    bx, by, _ = block
    threads = bx * by * block[2]
    found: Shape | None = None
    for first in range(0, threads, _LANES):
        index = [(t % bx, t // bx % by, t // (bx * by)) for t in range(first, first + _LANES)]
        axes: Shape = tuple(tuple(i[c] - index[0][c] for i in index) for c in range(3))  # type: ignore[assignment]
        valid = min(_LANES, threads - first)
        if found is None:
            found = axes
        elif any(a[:valid] != f[:valid] for a, f in zip(axes, found, strict=True)):
            return None
    return found


def _specials(shape: Shape | None) -> dict[str, Fact]:
    small, grid = (0, 1023), (0, SHAPED_GRID - 1 if shape else (1 << 31) - 2)
    found = {"%laneid": Fact(_LANE, (0, 31)), "%warpid": Fact(UNIFORM, (0, 31)),
             "%nwarpid": Fact(UNIFORM, (1, 32)), "%warpsize": Fact(UNIFORM, (32, 32))}
    for axis, c in enumerate("xyz"):
        found[f"%ntid.{c}"] = Fact(UNIFORM, (1, 1024))
        found[f"%ctaid.{c}"] = Fact(UNIFORM, grid)
        found[f"%nctaid.{c}"] = Fact(UNIFORM, (1, grid[1] + 1))
        found[f"%tid.{c}"] = Fact(shape[axis] if shape else None, small)
    return found


def lane_offsets(fn: Function, blocks: list[tuple[int, int]], local: frozenset[str],
                 widths: dict[str, int], shape: Shape | None) -> Lanes:
    """Register -> its lanes' offsets from lane 0 (modulo its width; :data:`UNIFORM`: one value)
    of the registers kept as one scalar per warp, for launches of warp ``shape`` (None: the
    thread index does not follow the lane); ``widths`` are the registers' bits, ``blocks`` the
    function's, ``local`` the blocks' temporaries.

    The blocks every live lane of a warp runs together (*converged*) are found with the facts:
    the first, and those every branch into which comes from a converged block on a uniform
    predicate (so a loop whose bound is a parameter stays converged).  Starting from every block
    and narrowing until the facts agree with the branches, each round's facts assume only blocks
    the last round's branches had not ruled out; the last round's hold of every execution, step by
    step from the entry (a converged block is entered only from converged blocks, on a predicate
    one for all lanes)."""
    converged = frozenset(range(len(blocks)))
    while True:
        facts = _facts(fn, blocks, converged, local, shape)
        narrowed = _converged(fn, blocks, facts) & converged
        if narrowed == converged:
            break
        converged = narrowed
    collective = frozenset(r for s in fn.steps if s.ins.opcode in _COLLECTIVE
                           for o in s.ins.operands for r in operand_registers(o))
    offsets = {
        name: tuple(o % (1 << widths[name]) for o in fact.offsets) if widths[name] > 1 else UNIFORM
        for name, fact in facts.items()
        if name in widths and fact.offsets is not None
        and (fact.offsets == UNIFORM or (widths[name] in (32, 64) and name not in collective))
    }
    return Lanes(offsets, converged, collective)


def _facts(fn: Function, blocks: list[tuple[int, int]], converged: frozenset[int], local: frozenset[str],
           shape: Shape | None) -> dict[str, Fact]:
    """Each candidate register's fact, were the ``converged`` blocks run by all live lanes together."""
    writes = _candidates(fn, blocks, converged, local)
    specials = _specials(shape)
    unwritten = entry_live(fn) & frozenset(writes)  # read at the value a frame starts with: 0
    facts: dict[str, Fact] = {}
    updates: dict[str, int] = {}
    _settle(writes, facts, updates, specials, unwritten, fn.steps)
    # registers some cycle of unknowns left without a fact may hold anything: settle again without them
    facts.update({name: _ANY for name in writes if name not in facts})
    _settle(writes, facts, updates, specials, unwritten, fn.steps)
    return facts


def _converged(fn: Function, blocks: list[tuple[int, int]], facts: dict[str, Fact]) -> frozenset[int]:
    """The blocks entered only from the entry or from converged blocks by a branch all lanes take
    alike: unconditional, on a predicate whose fact is uniform, or the lanes a guarded return
    or exit leaves (the others stay together)."""
    after = successors(fn, blocks)
    found = set(range(len(blocks)))
    divergent = set()
    for k, (_, end) in enumerate(blocks):
        last = fn.steps[end - 1]
        guard = last.ins.guard
        if last.kind == BRA and guard is not None and facts.get(guard.name, _ANY).offsets != UNIFORM:
            divergent.add(k)
    changed = True
    while changed:  # a block some lanes may leave apart, or not all together reach, spreads that on
        changed = False
        for k in range(len(blocks)):
            if k in found and k not in divergent:
                continue
            for j in after[k]:
                if j in found:
                    found.discard(j)
                    changed = True
    return frozenset(found)


def _settle(writes: dict[str, list[int]], facts: dict[str, Fact], updates: dict[str, int],
            specials: dict[str, Fact], unwritten: frozenset[str], steps: list[Any]) -> None:
    """Iterate each register's fact (the join over its writes, and its starting 0 where it may be
    read before written) until none changes; a range still moving after :data:`_MAX_UPDATES`
    updates is dropped, the offsets after twice as many."""
    changed = True
    while changed:
        changed = False
        for name, at in writes.items():
            found: Fact | None = Fact(UNIFORM, (0, 0)) if name in unwritten else None
            for i in at:
                fact = _transfer(steps[i].ins, facts, specials, writes)
                if fact is None:
                    continue  # an operand not known yet
                found = fact if found is None else _join(found, fact)
            if found is None or found == facts.get(name):
                continue
            updates[name] = updates.get(name, 0) + 1
            if updates[name] > _MAX_UPDATES:
                found = Fact(found.offsets if updates[name] <= 2 * _MAX_UPDATES else None, None)
            if found != facts.get(name):
                facts[name], changed = found, True


def _candidates(fn: Function, blocks: list[tuple[int, int]], converged: frozenset[int],
                local: frozenset[str]) -> dict[str, list[int]]:
    """Registers every write of which is an unguarded instruction of the rules' opcodes, written in
    ``converged`` blocks only or a block's temporary: their writes."""
    steps = fn.steps
    inside = [False] * len(steps)
    for k in converged:
        inside[blocks[k][0]:blocks[k][1]] = [True] * (blocks[k][1] - blocks[k][0])
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
        and (name in local or all(inside[i] for i in at))
    }


def _join(a: Fact, b: Fact) -> Fact:
    offsets = a.offsets if a.offsets == b.offsets else None
    if a.span is None or b.span is None:
        return Fact(offsets, None)
    span = (min(a.span[0], b.span[0]), max(a.span[1], b.span[1]))
    return Fact(offsets, span)


def _transfer(ins: Instruction, facts: dict[str, Fact], specials: dict[str, Fact],
              candidates: dict[str, list[int]]) -> Fact | None:
    """The fact of ``ins``'s destination from its operands' (None: an operand not known yet)."""
    if ins.opcode == "ld":  # a kernel parameter at a constant offset
        return Fact(UNIFORM, None)
    types = [m for m in ins.mods if m in _INTEGER or (m[:1] in "f" and m[1:].isdigit()) or m == "pred"]
    width = _INTEGER.get(types[-1]) if types else None
    sources = []
    for operand in ins.operands[1:]:
        fact = _operand(operand, facts, specials, candidates, types[-1] if types else "b64")
        if fact is None:
            return None
        sources.append(fact)
    uniform = Fact(UNIFORM, None) if all(s.offsets == UNIFORM for s in sources) else _ANY
    if width is None:  # floats, predicates, untyped: uniform when every source is
        return uniform
    found = _affine(ins, sources, width, types)
    return uniform if found is None else found


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
        return Fact(UNIFORM, (value, value) if value < 1 << (_INTEGER.get(ptx_type, 64) - 1) else None)
    if isinstance(operand, Mem):
        return _ANY
    names = operand_registers(operand)
    inner = [_operand(Reg(name), facts, specials, candidates, ptx_type) for name in names]
    if any(fact is None for fact in inner):
        return None
    # a symbol's address, or a negated predicate, a vector: uniform where every register in it is
    return Fact(UNIFORM, None) if all(fact.offsets == UNIFORM for fact in inner) else _ANY  # type: ignore[union-attr]


def _within(lo: int, hi: int, width: int) -> tuple[int, int] | None:
    return (lo, hi) if 0 <= lo <= hi < 1 << (width - 1) else None


def _constant(fact: Fact) -> int | None:
    known = fact.offsets == UNIFORM and fact.span is not None and fact.span[0] == fact.span[1]
    return fact.span[0] if known else None  # type: ignore[index]


def _affine(ins: Instruction, sources: list[Fact], width: int, types: list[str]) -> Fact | None:
    """The rules: lanes ``base + C[lane]`` through integer ``mov``/``add``/``sub``/``neg``, ``mul``
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
    if op == "neg" and len(sources) == 1 and sources[0].offsets is not None:
        return Fact(tuple(-o for o in sources[0].offsets), None)
    if op in ("mul", "mad") and len(sources) in (2, 3):
        product = _product(sources[0], sources[1], width, "wide" in mods)
        if op == "mul":
            return product
        return _sum(product, sources[2], 2 * width if "wide" in mods else width, 1)
    if op == "shl" and len(sources) == 2 and (shift := _constant(sources[1])) is not None and shift < width:
        a = sources[0]
        return Fact(None if a.offsets is None else tuple(o << shift for o in a.offsets),
                    a.span and _within(a.span[0] << shift, a.span[1] << shift, width))
    if op == "shr" and len(sources) == 2 and (shift := _constant(sources[1])) is not None:
        a = sources[0]
        if a.span is not None and a.span[0] >> shift == a.span[1] >> shift:
            return Fact(UNIFORM, (a.span[0] >> shift,) * 2)
        return None
    if op == "and" and len(sources) == 2:
        a, b = sources
        mask = _constant(b)
        if mask is not None and a.span is not None and mask & (mask + 1) == 0 and a.span[1] <= mask:
            return a
        if a.span and b.span:
            both = a.offsets == UNIFORM and b.offsets == UNIFORM
            return Fact(UNIFORM if both else None, (0, min(a.span[1], b.span[1])))
        return None
    if op == "cvt" and len(sources) == 1 and len(types) == 2 and set(types) <= set(_INTEGER) \
            and not mods - set(types):
        return _extended(sources[0], _INTEGER[types[1]], _INTEGER[types[0]])
    return None


def _sum(a: Fact, b: Fact, width: int, sign: int) -> Fact:
    """``a + sign * b`` on ``width`` bits."""
    offsets = None if a.offsets is None or b.offsets is None else \
        tuple(x + sign * y for x, y in zip(a.offsets, b.offsets, strict=True))
    span = None
    if a.span and b.span:
        span = _within(a.span[0] + b.span[0], a.span[1] + b.span[1], width) if sign > 0 else \
            _within(a.span[0] - b.span[1], a.span[1] - b.span[0], width)
    return Fact(offsets, span)


def _extended(a: Fact, source: int, width: int) -> Fact:
    """``a`` (``source`` bits) as ``width`` bits: truncation keeps the form; widening keeps it where
    every lane extends alike, a uniform value or a known nonnegative range."""
    if width <= source:
        return Fact(a.offsets, a.span and _within(*a.span, width))
    if a.offsets is None or (a.offsets != UNIFORM and a.span is None):
        return Fact(None, a.span)
    # every lane's value and lane 0's lie in [0, 2**(source-1)): their difference is the offset's
    # signed residue
    return Fact(tuple(signed_literal(o % (1 << source), source) for o in a.offsets), a.span)


def _product(a: Fact, b: Fact, width: int, wide: bool) -> Fact:
    """``a * b`` (``.lo`` of ``width`` bits, or ``.wide``): affine when one factor is a constant."""
    if wide:
        a, b, width = _extended(a, width, 2 * width), _extended(b, width, 2 * width), 2 * width
    span = a.span and b.span and _within(a.span[0] * b.span[0], a.span[1] * b.span[1], width)
    if a.offsets == UNIFORM and b.offsets == UNIFORM:
        return Fact(UNIFORM, span)
    for x, y in ((a, b), (b, a)):
        c = _constant(y)
        if c is not None and x.offsets is not None:
            return Fact(tuple(o * c for o in x.offsets), span)
    return Fact(None, span)
