"""Control flow and synchronization (PTX ISA 9.7.12 "Control Flow", 9.7.13 bar/membar/fence).

These builders return :class:`~.build.Control` records; :mod:`.machine`
carries them out.  Memory ordering instructions are no-ops: the interpreter
executes one instruction at a time for all threads, which is sequentially
consistent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .build import Context, Control, Run, op
from .builtins import GRID_SYNC
from .parse import Group, Imm, Reg, Sym
from .sanitize import synchronizing
from .values import as_array

__all__ = ["BarrierReduction", "CallTarget", "GridSync"]


@dataclass(frozen=True, slots=True)
class CallTarget:
    """``call (rets), function, (args)``: callee name and the caller's ``.param`` names and sizes.

    An indirect call (``call (rets), %rd, (args), prototype``) has no ``function`` but a
    ``pointer`` reader: each thread calls the function whose address it holds.
    """

    function: str | None
    returns: tuple[tuple[str, int], ...]
    arguments: tuple[tuple[str, int], ...]
    pointer: Callable[[Any], Any] | None = None


@op("bra")
def _bra(cx: Context) -> Control:
    cx.split_mods({"uni"}, set(), ntypes=0)
    (target,) = cx.operands(1)
    if not isinstance(target, Sym):
        raise cx.unsupported("branch target must be a label")
    sym = cx.symbol(target.name)
    if sym.space != "label":
        raise cx.unsupported(f"{target.name!r} is not a label")
    return Control("bra", sym.value)


def _params(cx: Context, group: object) -> tuple[tuple[str, int], ...]:
    if not isinstance(group, Group):
        raise cx.unsupported(f"expects a parenthesised parameter list (got {group})")
    names = []
    for item in group.items:
        if not isinstance(item, Sym) or cx.symbol(item.name).space != "param":
            raise cx.unsupported(f"call arguments must be .param variables (got {item})")
        names.append((item.name, cx.symbol(item.name).value))
    return tuple(names)


@op("call")
def _call(cx: Context) -> Control:
    cx.split_mods({"uni"}, set(), ntypes=0)
    ops = list(cx.ins.operands)
    returns: tuple[tuple[str, int], ...] = ()
    if ops and isinstance(ops[0], Group):
        returns = _params(cx, ops.pop(0))
    if not ops:
        raise cx.unsupported("call without a target")
    callee = ops.pop(0)
    arguments = _params(cx, ops.pop(0)) if ops and isinstance(ops[0], Group) else ()
    if isinstance(callee, Reg):  # indirect: the last operand names a .callprototype (or a target list)
        if len(ops) != 1 or not isinstance(ops[0], Sym):
            raise cx.unsupported("an indirect call needs a prototype or a target list as its last operand")
        return Control("call", CallTarget(None, returns, arguments, cx.read(callee, "u64")))
    if ops:
        raise cx.unsupported(f"unexpected operands after the argument list (got {ops})")
    if not isinstance(callee, Sym) or cx.symbol(callee.name).space != "func":
        raise cx.unsupported(f"call target must be a function (got {callee})")
    key = cx.symbol(callee.name).value  # the linked program's key: module-local functions are qualified
    if key == GRID_SYNC:
        cx.needs.add("grid")
        return Control("bar", GridSync(returns))
    return Control("call", CallTarget(key, returns, arguments))


@op("ret", "exit", "trap")
def _leave(cx: Context) -> Control:
    cx.split_mods({"uni"}, set(), ntypes=0)
    cx.operands(0)
    return Control(cx.ins.opcode)


@dataclass(frozen=True, slots=True)
class BarrierReduction:
    """``bar.red.{popc,and,or}``: a block-wide vote delivered when the barrier completes."""

    op: str
    vote: Callable[[Any], Any]
    write: Callable[[Any, Any, Any], None]

    def arrive(self, fr: Any, m: Any, votes: Any) -> Any:
        value = as_array(np.asarray(self.vote(fr), bool), fr.batch.n)
        if votes is None or m is None:
            return value.copy()
        return np.where(m, value, votes)

    def finish(self, fr: Any, votes: Any, arrived: Any, m: Any) -> None:
        per_block = fr.batch.block_threads
        arrived = np.ones(fr.batch.n, bool) if arrived is None else arrived
        yes = (votes & arrived).reshape(-1, per_block)
        if self.op == "popc":
            result = yes.sum(axis=1).astype(np.uint32)
        elif self.op == "and":
            result = ~(arrived & ~votes).reshape(-1, per_block).any(axis=1)
        else:
            result = yes.any(axis=1)
        self.write(fr, np.repeat(result, per_block), m)


@dataclass(frozen=True, slots=True)
class GridSync:
    """``call (status), cudaCGSynchronize, (handle, flags)``: a barrier over every thread of the launch
    (a grid-sync launch runs as one batch), which returns 0 (``cudaSuccess``)."""

    returns: tuple[tuple[str, int], ...]

    def arrive(self, fr: Any, m: Any, votes: Any) -> Any:
        return votes

    def finish(self, fr: Any, votes: Any, arrived: Any, m: Any) -> None:
        for name, size in self.returns:
            fr.param(name, size).store(0, np.dtype(np.int32), np.int32(0), m)


@op("bar", "barrier")
def _bar(cx: Context) -> Control | Run:
    flags = set(cx.ins.mods)
    if "warp" in flags:  # bar.warp.sync: lanes already execute in lockstep here
        if cx.sanitized:  # but it orders the warp's shared accesses for racecheck
            return lambda fr, m: fr.batch.sanitizer.warp_sync(m)
        return lambda fr, m: None
    if "red" in flags:
        names = flags & {"popc", "and", "or"}
        if len(names) != 1 or flags - {"red", "popc", "and", "or", "u32", "pred", "aligned", "cta", "sync"}:
            raise cx.unsupported("bar.red needs one of .popc.u32, .and.pred, .or.pred")
        ops = cx.operands((3, 4))
        return Control("bar", BarrierReduction(names.pop(), cx.read(ops[-1], "pred"), cx.write(ops[0])))
    if flags - {"sync", "cta", "aligned"} or (flags and "sync" not in flags):
        raise cx.unsupported("only bar.sync / barrier.sync / bar.red (whole-block barriers) are implemented")
    ops = cx.operands((1, 2))
    if not isinstance(ops[0], (Imm, Reg)):
        raise cx.unsupported(f"barrier id must be a number or register (got {ops[0]})")
    return Control("bar")


@op("membar", "fence", "nanosleep", "pmevent", "brkpt")
def _nop(cx: Context) -> Run:
    return synchronizing(cx, lambda fr, m: None)
