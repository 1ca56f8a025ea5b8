"""Which registers a masked write may overwrite for every thread: the block-local ones.

In divergent code an instruction runs for the group at its program counter, and a register it
writes keeps its old value in the other threads: an ``np.where`` over the batch per write.  Most
registers a compiler emits are temporaries, written and read within one straight-line block.  If
no block reads a register before writing it (the register is never live on entry to a block),
its value in a thread outside the group is dead: that thread, wherever it resumes, starts a block
(:mod:`.machine` parks threads only at block starts, as cut here) and writes the register before
reading it.  Writes to such registers skip the mask.

Blocks are cut at branch targets and around every instruction the scheduler carries out itself
(branches, calls, barriers, returns): a barrier parks threads on it and releases them after it.
Only unguarded instructions of the opcodes in ``PURE_DESTINATION`` count as writes; every other
appearance of a register, guard predicates included, counts as a read.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from .parse import Group, Instruction, Mem, Not, Operand, Pair, Reg, Vec

__all__ = ["PURE_DESTINATION", "block_local", "writes"]

# opcodes whose first operand is only written, for the step's threads, through Context.write
PURE_DESTINATION = frozenset((
    "add", "sub", "mul", "mad", "fma", "div", "rem", "abs", "neg", "min", "max", "addc", "subc", "madc",
    "and", "or", "xor", "not", "cnot", "shl", "shr", "bfe", "bfi", "popc", "clz", "brev", "bfind", "bmsk",
    "prmt", "lop3", "shf", "setp", "selp", "slct", "mov", "cvta", "cvt", "ld", "ldu", "rcp", "sqrt", "rsqrt",
    "sin", "cos", "lg2", "ex2", "tanh", "testp", "copysign", "isspacep",
))


def _registers(operand: Operand) -> Iterator[str]:
    if isinstance(operand, Reg):
        yield operand.name
    elif isinstance(operand, Mem) and isinstance(operand.base, Reg):
        yield operand.base.name
    elif isinstance(operand, (Vec, Group)):  # Group: a call's argument or return list
        for item in operand.items:
            yield from _registers(item)
    elif isinstance(operand, Not):
        yield from _registers(operand.inner)
    elif isinstance(operand, Pair):
        yield from _registers(operand.first)
        yield from _registers(operand.second)


def writes(ins: Instruction, plain: bool) -> bool:
    """Whether ``ins`` (``plain``: run as a closure, not by the scheduler) defines its destination
    registers for every thread it runs for."""
    return plain and ins.guard is None and ins.opcode in PURE_DESTINATION and bool(ins.operands) and \
        not isinstance(ins.operands[0], Mem)


def block_local(instructions: Sequence[Instruction], plain: Sequence[bool], targets: Sequence[int],
                registers: Sequence[str]) -> frozenset[str]:
    """The ``registers`` no block reads before writing; ``plain[i]``: instruction ``i`` is run as a
    closure (not by the scheduler); ``targets``: the instruction indices of labels."""
    starts = set(targets) | {0}
    for i, is_plain in enumerate(plain):
        if not is_plain:
            starts.update((i, i + 1))
    exposed: set[str] = set()
    defined: set[str] = set()
    for i, ins in enumerate(instructions):
        if i in starts:
            defined = set()
        defines = writes(ins, plain[i])
        sources = ins.operands[1:] if defines else ins.operands
        reads = {name for operand in sources for name in _registers(operand)}
        if ins.guard is not None:
            reads.add(ins.guard.name)
        exposed |= reads - defined
        if defines:
            defined.update(_registers(ins.operands[0]))
    return frozenset(registers) - exposed
