"""Which kernel parameter each memory access's address comes from (per-argument provenance).

A bounds check against "every buffer the kernel can reach" misses a read
past the end of a short view (``k(x, x[:10], out)``) that lands inside
another argument's memory.  So each global / generic access whose address
register derives from a kernel parameter is also checked against the extent
of the buffer that parameter points into (:mod:`.extents`).

The analysis is static, flow-insensitive and runs once per function: each
register gets the set of ``.param`` byte offsets its value may derive from,
the union over every instruction that writes it, iterated to a fixpoint
(loop-carried pointers: ``add.s64 %rd7, %rd7, 4``).  ``ld.param`` of 8 bytes
starts a set; every other instruction's result is the union of its register
operands' sets, except ``sub`` of two equal sets (a pointer difference is an
integer).  :data:`OTHER` marks a value that may be some other pointer (a
64-bit load from memory, a variable's address, a call's result): a set
holding it is never checked, so a pointer chosen between an argument and
anything else (``p = c ? a : shared``) raises no false alarm.  A scalar
parameter (a length, numba's shape) has a set too; at launch only
parameters whose value points into their argument's buffer get an extent,
and an access is checked when exactly one member of its set has one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .parse import Instruction, Mem, Not, Operand, Reg, Sym, Vec

__all__ = ["OTHER", "origins"]

OTHER = -1  # "may be a pointer to memory no parameter names"
_EMPTY: frozenset[int] = frozenset()
_MEMORY = ("ld", "ldu", "st", "atom", "red")
_UNCHECKED_SPACES = frozenset(("shared", "local", "param", "const"))  # windows, or no argument's memory


def _registers(operand: Operand) -> list[str]:
    if isinstance(operand, Reg):
        return [operand.name]
    if isinstance(operand, Vec):
        return [name for item in operand.items for name in _registers(item)]
    if isinstance(operand, Not):
        return _registers(operand.inner)
    if isinstance(operand, Mem) and isinstance(operand.base, Reg):
        return [operand.base.name]
    return []


def _wide(ins: Instruction) -> bool:
    return bool(ins.mods) and ins.mods[-1][1:] == "64"


_Evaluate = Callable[[dict], frozenset[int]]


def _definition(ins: Instruction, params: dict[str, int],
                is_register: Callable[[str], bool]) -> tuple[list[str], _Evaluate] | None:
    """``(destinations, evaluate)`` for an instruction that writes registers, else None."""
    if not ins.operands or ins.opcode in ("st", "red", "bra", "call", "ret", "exit", "bar", "barrier"):
        return None
    dst, sources = ins.operands[0], ins.operands[1:]
    targets = [r for r in _registers(dst) if is_register(r)]
    if not targets or isinstance(dst, Mem):
        return None
    if ins.opcode in ("ld", "ldu"):
        src = sources[0] if sources else None
        if (isinstance(src, Mem) and isinstance(src.base, Sym) and src.base.name in params
                and isinstance(dst, Reg) and _wide(ins)):
            start = frozenset((params[src.base.name] + src.offset,))
            return targets, lambda tags: start
        other = frozenset((OTHER,)) if _wide(ins) and not isinstance(dst, Vec) else _EMPTY
        return targets, lambda tags: other
    if ins.opcode == "atom":
        return targets, lambda tags: _EMPTY if not _wide(ins) else frozenset((OTHER,))
    names = [r for s in sources for r in _registers(s) if is_register(r)]
    symbolic = any(isinstance(s, Sym) or (isinstance(s, Mem) and isinstance(s.base, Sym)) for s in sources)
    extra = frozenset((OTHER,)) if symbolic else _EMPTY
    if ins.opcode == "sub" and len(sources) == 2 and all(isinstance(s, Reg) for s in sources):
        first, second = (s.name for s in sources)  # type: ignore[union-attr]

        def difference(tags: dict) -> frozenset[int]:
            a, b = tags.get(first, _EMPTY), tags.get(second, _EMPTY)
            return _EMPTY if a == b else a | b
        return targets, difference

    def union(tags: dict) -> frozenset[int]:
        found = extra
        for name in names:
            found = found | tags.get(name, _EMPTY)
        return found
    return targets, union


def origins(instructions: Sequence[Instruction], params: dict[str, int],
            is_register: Callable[[str], bool]) -> list[frozenset[int] | None]:
    """For each instruction: the parameter offsets its global / generic address may derive from
    (None: not such an access, or its address derives from no parameter alone).  ``params`` maps
    the kernel's ``.param`` names to their byte offsets; ``is_register`` tells registers from
    special registers."""
    definitions = [d for ins in instructions if (d := _definition(ins, params, is_register)) is not None]
    tags: dict[str, frozenset[int]] = {}
    changed = True
    while changed:  # sets only grow, and are bounded: a fixpoint in a few passes
        changed = False
        for targets, evaluate in definitions:
            value = evaluate(tags)
            for name in targets:
                old = tags.get(name, _EMPTY)
                if not value <= old:
                    tags[name] = old | value
                    changed = True
    result: list[frozenset[int] | None] = []
    for ins in instructions:
        found = None
        if ins.opcode in _MEMORY and not _UNCHECKED_SPACES.intersection(m.split("::")[0] for m in ins.mods):
            mem = next((o for o in ins.operands if isinstance(o, Mem)), None)
            if mem is not None and isinstance(mem.base, Reg):
                tag = tags.get(mem.base.name, _EMPTY)
                found = tag if tag and OTHER not in tag else None
        result.append(found)
    return result
