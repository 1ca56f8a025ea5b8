"""Data flow over a kernel's basic blocks: which registers are block-local, live at a barrier.

Blocks are cut as :mod:`..liveness` cuts them: at branch targets and after every instruction the
scheduler carries out (branches, returns, barriers, traps).  Liveness is per thread, as each lane
runs the code on its own: a register is live at a block's start when some path reads it before an
unguarded instruction writes it.  The registers live where a waiting warp's lanes resume (the
starts of the blocks after its barriers) are kept in the warp's state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..machine import BAR, BRA, EXIT, PLAIN, RET, TRAP, Function
from ..parse import Instruction, Mem, Pair, Reg, Vec

__all__ = [
    "operand_registers", "read_registers", "blocks_of", "barrier_live", "entry_live", "looping",
    "named_registers", "successors", "written_in",
]

_STORES = frozenset(("st", "red"))


def operand_registers(operand: Any) -> list[str]:
    if isinstance(operand, Reg):
        return [operand.name]
    if isinstance(operand, Mem) and isinstance(operand.base, Reg):
        return [operand.base.name]
    if isinstance(operand, Vec):
        return [n for item in operand.items for n in operand_registers(item)]
    if isinstance(operand, Pair):
        return operand_registers(operand.first) + operand_registers(operand.second)
    inner = getattr(operand, "inner", None)
    return operand_registers(inner) if inner is not None else []


def named_registers(instructions: list[Instruction]) -> frozenset[str]:
    """Every register some of ``instructions`` names (an operand or a guard)."""
    names = {r for ins in instructions for o in ins.operands for r in operand_registers(o)}
    return frozenset(names | {ins.guard.name for ins in instructions if ins.guard is not None})


def read_registers(instructions: list[Instruction]) -> frozenset[str]:
    """Registers some instruction reads (a source operand, an address, a guard)."""
    found: set[str] = set()
    for ins in instructions:
        sources = ins.operands if ins.opcode in _STORES else ins.operands[1:]
        if ins.operands and isinstance(ins.operands[0], Mem):
            sources = ins.operands
        for operand in sources:
            found.update(operand_registers(operand))
        if ins.guard is not None:
            found.add(ins.guard.name)
    return frozenset(found)


def blocks_of(fn: Function) -> list[tuple[int, int]]:
    """``(start, end)`` of each basic block: cut at branch targets and after control instructions."""
    steps = fn.steps
    starts = {0}
    for i, step in enumerate(steps):
        if step.kind == BRA:
            starts.add(step.target)
        if step.kind != PLAIN:
            starts.add(i + 1)
    ordered = sorted(s for s in starts if s < len(steps))
    return [(s, ordered[k + 1] if k + 1 < len(ordered) else len(steps)) for k, s in enumerate(ordered)]


def _defined(ins: Instruction) -> list[str]:
    """The registers an instruction writes for every lane it runs for (none when guarded)."""
    if ins.guard is not None or ins.opcode in _STORES or not ins.operands or isinstance(ins.operands[0], Mem):
        return []
    return operand_registers(ins.operands[0])


def _used(ins: Instruction) -> set[str]:
    sources = ins.operands if ins.opcode in _STORES or (ins.operands and isinstance(ins.operands[0], Mem)) \
        else ins.operands[1:]
    found = {r for o in sources for r in operand_registers(o)}
    if ins.guard is not None:
        found.add(ins.guard.name)
    if ins.guard is not None or ins.opcode in ("atom",):  # a guarded write keeps the old value for some lanes
        found.update(r for o in ins.operands[:1] for r in operand_registers(o) if not isinstance(o, Mem))
    return found


def _live(fn: Function, blocks: list[tuple[int, int]]) -> list[set[str]]:
    """The registers live at the start of each block: read on some path before every lane writes them."""
    steps = fn.steps
    after = successors(fn, blocks)
    uses, defs = [], []
    for start, end in blocks:
        used: set[str] = set()
        defined: set[str] = set()
        for step in steps[start:end]:
            used |= _used(step.ins) - defined
            defined.update(_defined(step.ins) if step.kind == PLAIN else [])
        uses.append(used)
        defs.append(defined)
    live: list[set[str]] = [set() for _ in blocks]
    changed = True
    while changed:
        changed = False
        for k in reversed(range(len(blocks))):
            out = set().union(*(live[j] for j in after[k])) if after[k] else set()
            new = uses[k] | (out - defs[k])
            if new != live[k]:
                live[k], changed = new, True
    return live


def barrier_live(fn: Function, blocks: list[tuple[int, int]]) -> frozenset[str]:
    """Registers live at the start of a block some barrier resumes at (what a waiting warp keeps)."""
    steps, live = fn.steps, _live(fn, blocks)
    index = {start: k for k, (start, _) in enumerate(blocks)}
    resumes = {index[end] for start, end in blocks if steps[end - 1].kind == BAR and end in index}
    return frozenset().union(*(live[k] for k in resumes)) if resumes else frozenset()


def entry_live(fn: Function) -> frozenset[str]:
    """The registers of ``fn`` some path from its entry reads before writing (they read zero)."""
    blocks = blocks_of(fn)
    return frozenset(_live(fn, blocks)[0] & set(fn.zeros)) if blocks else frozenset()


def successors(fn: Function, blocks: list[tuple[int, int]]) -> list[list[int]]:
    """The blocks each block may go on to (by index)."""
    index = {start: k for k, (start, _) in enumerate(blocks)}
    found = []
    for _, end in blocks:
        last = fn.steps[end - 1]
        after = [index[end]] if end in index else []
        if last.kind == BRA:
            found.append([index[last.target], *(after if last.ins.guard is not None else [])])
        elif last.kind in (RET, EXIT, TRAP):
            found.append(after if last.ins.guard is not None else [])
        else:
            found.append(after)
    return found


def looping(fn: Function, blocks: list[tuple[int, int]]) -> frozenset[int]:
    """The blocks on some cycle of the control flow (a loop's body), by index."""
    after = successors(fn, blocks)
    found = set()
    for k in range(len(blocks)):
        seen, todo = set(), list(after[k])
        while todo and k not in seen:
            j = todo.pop()
            if j not in seen:
                seen.add(j)
                todo.extend(after[j])
        if k in seen:
            found.add(k)
    return frozenset(found)


def written_in(fn: Function, blocks: list[tuple[int, int]], chosen: frozenset[int],
               excused: Callable[[Instruction], bool] | None = None) -> frozenset[str]:
    """The registers some instruction of the ``chosen`` blocks writes (for some lanes or all), but
    for the instructions ``excused`` accepts."""
    return frozenset(
        name
        for k in chosen
        for step in fn.steps[blocks[k][0] : blocks[k][1]]
        if step.ins.opcode not in _STORES and step.ins.operands and not isinstance(step.ins.operands[0], Mem)
        and (excused is None or not excused(step.ins))
        for name in operand_registers(step.ins.operands[0])
    )
