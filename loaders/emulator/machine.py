"""The SIMT scheduler: one instruction at a time for every thread of a batch that is at it.

While every live thread is at the same instruction the machine runs in
*uniform* mode (one program counter, no masks).  A branch that splits the
threads switches to *divergent* mode with a program counter per thread; each
step then runs the lowest program counter among runnable threads for all
threads at it (the "min-PC" policy, which reconverges structured control flow
at its join points) and returns to uniform mode as soon as all live threads
meet again.  ``bar.sync`` parks threads until no thread can run, then
releases them together: blocks never wait on each other, because a block's
threads only ever wait for their own block's stragglers.  A thread whose
``mbarrier`` wait fails *yields*: it is passed over until no other thread can
run, so a consumer spinning on a phase lets the producer that completes it go
on (on a GPU the two are different warps, scheduled apart).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ptxbridge.abi.errors import (
    EmulatorError,
    KernelTrapError,
    MemoryAccessError,
    UnsupportedInstructionError,
)

from .frame import Frame, source_line
from .lines import source_location
from .memory import Fault
from .parse import Instruction
from .values import as_array

try:
    from ._native import schedule as native_schedule
except ImportError:  # built without NumPy's headers, or no C compiler: NumPy passes instead
    native_schedule = None

__all__ = ["Step", "Function", "Machine", "instruction_at", "stopped", "PLAIN", "BRA", "CALL", "RET", "EXIT",
           "BAR", "TRAP"]

PLAIN, BRA, CALL, RET, EXIT, BAR, TRAP = range(7)
KINDS = {"bra": BRA, "call": CALL, "ret": RET, "exit": EXIT, "bar": BAR, "trap": TRAP}
_SKIP = object()  # a guard no active thread satisfies
_FAR = np.int32(1 << 30)


@dataclass(frozen=True, slots=True)
class Step:
    kind: int
    run: Callable[[Frame, Any], None] | None
    target: Any
    guard: Callable[[Frame], Any] | None
    negated: bool
    ins: Instruction


@dataclass(slots=True)
class Function:
    """A loaded function: its steps, the zero value of each register, its parameter names.

    ``refused`` is why the CPU loader cannot run it (an instruction it does not implement):
    reported when a kernel that reaches the function is launched, never at load.
    ``needs`` names what a launch must provide (``"grid"``: every block at once, for grid-wide sync).
    """

    name: str
    steps: list[Step]
    zeros: dict[str, Any]
    params: tuple[str, ...]
    returns: tuple[str, ...]
    native: Callable[[Frame, Any, tuple[str, ...], tuple[str, ...]], None] | None = None
    refused: UnsupportedInstructionError | None = None
    needs: frozenset[str] = frozenset()
    files: dict[int, str] | None = None  # the module's .file table, for the source lines of .loc
    text: str | bytes = ""  # its module's PTX, for the source line of a trap (:mod:`.lines`)
    origins: tuple[frozenset[int] | None, ...] = ()  # per step: the parameters its address derives from


def _guarded(step: Step, fr: Frame, m: Any) -> Any:
    g = step.guard(fr)
    if step.negated:
        g = ~g
    if not isinstance(g, np.ndarray):
        return m if g else _SKIP
    g = g if m is None else g & m
    return g if g.any() else _SKIP


def _schedule(pc: np.ndarray, runnable: np.ndarray) -> tuple[int, np.ndarray, int, int]:
    """``(lowest, here, count, bound)``: the lowest program counter of the ``runnable`` threads
    (``_FAR``: none), the mask of the threads at it and their number, and the lowest counter of
    the other runnable threads; one pass in ``_native.schedule`` where the extension is built."""
    if native_schedule is not None and pc.dtype == np.int32 and runnable.flags.c_contiguous:
        here = np.empty(len(pc), bool)
        lowest, count, bound = native_schedule(np.ascontiguousarray(pc), runnable, here, int(_FAR))
        return lowest, here, count, bound
    candidates = np.where(runnable, pc, _FAR)
    lowest = int(candidates.min())
    here = candidates == lowest
    return lowest, here, int(np.count_nonzero(here)), int(np.where(here, _FAR, candidates).min())


def instruction_at(fn: Function, step: Step, source: bool = True) -> str:
    """``in fn, PTX line N (file.cu:7): `text```: where a report points (the source line where the
    PTX has line info and ``source``)."""
    at = source_line(fn.files, step.ins) if source else ""
    return f"in {fn.name}, PTX line {step.ins.line}{at}: `{step.ins.text}`"


def stopped(kernel: str, verdict: str, where: str, fn: Function, step: Step) -> EmulatorError:
    """The watchdog's error (:mod:`.watchdog`): why, the thread ``where`` names, and the instruction."""
    return EmulatorError(f"kernel {kernel!r}: {verdict}; at {where}, {instruction_at(fn, step)}")


def _where(fr: Frame, m: Any) -> str:
    thread = 0 if m is None or m is _SKIP else int(np.flatnonzero(m)[0])
    return _coordinates(fr, thread)


def _coordinates(fr: Frame, thread: int) -> str:
    return fr.batch.where(thread)


class Machine:
    """Runs functions of one linked program on batches; ``functions`` maps names to :class:`Function`."""

    def __init__(self, functions: dict[str, Function], addresses: dict[int, str] | None = None):
        self.functions = functions
        self.addresses = addresses or {}  # function address -> function key, for indirect calls

    def run(self, fn: Function, fr: Frame, live: Any) -> Any:
        """Execute ``fn`` for the threads in ``live`` (None: all); return the mask of threads that exited.

        The machine keeps no state between calls: launches from several host threads may share it.
        """
        return self._execute(fn, fr, live)

    def _fault(self, fr: Frame, fn: Function, step: Step, fault: Fault) -> MemoryAccessError:
        return MemoryAccessError(
            f"kernel {fr.batch.kernel!r}: {fault.reason}: address 0x{fault.address:x} "
            f"({fault.size} bytes) at {_coordinates(fr, fault.thread)}; {instruction_at(fn, step)}")

    def _trap(self, fr: Frame, fn: Function, step: Step, m: Any) -> KernelTrapError:
        """``trap``: the thread, the source line where the PTX has line info, and what a GPU does."""
        at = source_location(fn.text, step.ins.line)
        where = f" at {at}" if at else " (no line info in the PTX: compile with line tables to see the line)"
        return KernelTrapError(
            f"kernel {fr.batch.kernel!r}: {_where(fr, m)} executed trap{where}, "
            f"{instruction_at(fn, step, source=False)}; "
            "a panic compiled by cuda-oxide (or an explicit trap) lowers to this. On a GPU it is "
            "CUDA_ERROR_ILLEGAL_INSTRUCTION, and the CUDA context is lost")

    def _execute(self, fn: Function, fr: Frame, live: Any) -> Any:
        """Run ``fn`` for ``live``; return the mask of threads that exited (None: none did).

        The threads at the lowest program counter form the *group*, which runs with one scalar
        program counter ``upc`` until it reaches ``bound``, the lowest counter of any other
        runnable thread (or branches apart, parks at a barrier, or ends): only then are the
        per-thread counters ``pc`` written and the next group chosen.  While every live thread
        is in the group, ``pc`` is None and ``group`` is ``live``.
        """
        n = fr.batch.n
        steps, count = fn.steps, len(fn.steps)
        batch = fr.batch
        live_count = n if live is None else int(np.count_nonzero(live))
        exited = None
        pc: np.ndarray | None = None
        group, group_count, upc, bound = live, live_count, 0, _FAR
        blocked = yielded = None  # threads at a barrier; threads whose wait failed (run them last)
        votes, pending = None, []  # bar.red votes and the reductions waiting for their barrier
        while live_count:
            if upc >= bound or group_count == 0 or upc >= count:
                if pc is None:  # every live thread ran off the end together
                    break
                if group_count:
                    pc[group] = upc
                runnable = live if blocked is None else live & ~blocked
                if yielded is not None:
                    runnable = runnable & ~yielded
                lowest, here, group_count, next_bound = _schedule(pc, runnable)
                if lowest == _FAR and yielded is not None:  # only waiting threads: they try again
                    yielded, group_count = None, 0
                    continue
                if lowest == _FAR:
                    if blocked is None:
                        break
                    if batch.sanitizer is not None:  # every waiting thread passes its barrier
                        batch.sanitizer.barrier()
                    pc = np.where(blocked, pc + 1, pc).astype(np.int32)
                    for reduction, arrived in pending:
                        reduction.finish(fr, votes, blocked, arrived)
                    blocked, pending, group_count = None, [], 0
                    continue
                if lowest >= count:  # these threads ran off the end: an implicit return
                    live = live & ~here
                    live_count, group_count = int(np.count_nonzero(live)), 0
                    continue
                if blocked is None and yielded is None and group_count == live_count:
                    pc, group, bound = None, live, _FAR
                else:
                    group, bound = here, next_bound
                upc = lowest
            step = steps[upc]
            batch.thread_steps += group_count
            batch.steps += 1
            if batch.steps > batch.watchdog.check_at:  # the step limit, and now and then a look for a loop
                state = (pc, group, live, blocked, yielded, bound, votes, len(pending))
                verdict = batch.watchdog.check(batch.steps, fr, upc, step, step.kind == CALL, state)
                if verdict is not None:
                    raise stopped(batch.kernel, verdict, _where(fr, group), fn, step)
            m = group
            g = m if step.guard is None else _guarded(step, fr, m)
            kind = step.kind
            if kind == PLAIN:
                if g is not _SKIP:
                    try:
                        step.run(fr, g)
                    except Fault as fault:
                        raise self._fault(fr, fn, step, fault) from None
                upc += 1
                if batch.yielding is not None:  # a wait failed: those threads go on after the others
                    waiting, batch.yielding = batch.yielding, None
                    if pc is None:  # every live thread is here: they leave uniform mode
                        live = np.ones(n, bool) if live is None else live
                        pc = np.where(live, np.int32(upc), _FAR).astype(np.int32)
                    else:
                        pc[group] = upc
                    yielded = waiting.copy() if yielded is None else yielded | waiting
                    group_count = 0
            elif kind == BRA:
                if g is _SKIP:
                    upc += 1
                elif g is m or int(np.count_nonzero(g)) == group_count:
                    upc = step.target
                else:  # the group splits: some threads take the branch
                    if pc is None and live is None:  # every thread: one pass
                        pc = np.where(g, np.int32(step.target), np.int32(upc + 1))
                        live = group = np.ones(n, bool)
                    else:
                        if pc is None:
                            pc = np.full(n, _FAR, np.int32)
                        pc[group] = upc + 1
                        pc[g] = step.target
                    group_count = 0
            elif kind in (RET, EXIT):
                if g is not _SKIP:
                    leaving = np.ones(n, bool) if g is None else g
                    live = ~leaving if live is None else live & ~leaving
                    live_count = int(np.count_nonzero(live))
                    group = group & ~leaving if group is not None else live
                    group_count = int(np.count_nonzero(group))
                    if kind == EXIT:
                        exited = leaving if exited is None else exited | leaving
                upc += 1
            elif kind == BAR:
                reduction = step.target
                if reduction is not None and g is not _SKIP:  # bar.red: each thread votes on arrival
                    votes = reduction.arrive(fr, g, votes)
                    if pc is None:
                        reduction.finish(fr, votes, live, g)
                    else:
                        pending.append((reduction, g))
                if pc is not None and g is not _SKIP:  # park at the barrier until no thread can run
                    blocked = g if blocked is None else blocked | g
                    pc[group] = upc + 1
                    pc[g] = upc
                    group_count = 0
                else:
                    if g is not _SKIP and batch.sanitizer is not None:  # all live threads at once
                        batch.sanitizer.barrier()
                    upc += 1
            elif kind == CALL:
                if g is not _SKIP:
                    gone = self._call(fn, step, fr, g)
                    if gone is not None:
                        live = ~gone if live is None else live & ~gone
                        live_count = int(np.count_nonzero(live))
                        group = group & ~gone if group is not None else live
                        group_count = int(np.count_nonzero(group))
                        exited = gone if exited is None else exited | gone
                upc += 1
            elif kind == TRAP:
                if g is not _SKIP:
                    raise self._trap(fr, fn, step, g)
                upc += 1
            else:
                upc += 1
        return exited

    def _call(self, fn: Function, step: Step, fr: Frame, m: Any) -> Any:
        target = step.target
        if target.function is not None:
            return self._enter(fn, step, self.functions[target.function], fr, m)
        pointers = as_array(target.pointer(fr), fr.batch.n)  # an indirect call: one callee per pointer
        chosen = np.ones(fr.batch.n, bool) if m is None else m
        gone = None
        for address in np.unique(pointers[chosen]).tolist():
            key = self.addresses.get(address)
            if key is None:
                thread = int(np.flatnonzero(chosen & (pointers == address))[0])
                raise EmulatorError(f"kernel {fr.batch.kernel!r}: call through 0x{address:x}, which is no "
                                    f"function's address, at {_coordinates(fr, thread)}; "
                                    f"{instruction_at(fn, step)}")
            exited = self._enter(fn, step, self.functions[key], fr, chosen & (pointers == address))
            if exited is not None:
                gone = exited if gone is None else gone | exited
        return gone

    def _enter(self, fn: Function, step: Step, callee: Function, fr: Frame, m: Any) -> Any:
        """Run ``callee`` for the threads in ``m`` with the caller's ``.param`` variables as its own."""
        target = step.target
        if (len(target.arguments), len(target.returns)) != (len(callee.params), len(callee.returns)):
            raise EmulatorError(
                f"kernel {fr.batch.kernel!r}: {instruction_at(fn, step)} passes {len(target.arguments)} "
                f"arguments and {len(target.returns)} return values; {callee.name} declares "
                f"{len(callee.params)} and {len(callee.returns)}")
        if callee.refused is not None:
            raise callee.refused
        params = {}
        for own, (name, size) in zip(callee.params, target.arguments, strict=True):
            params[own] = fr.param(name, size)
        for own, (name, size) in zip(callee.returns, target.returns, strict=True):
            params[own] = fr.param(name, size)
        frame = Frame(dict(callee.zeros), params, fr.batch)
        if callee.native is not None:
            try:
                callee.native(frame, m, callee.params, callee.returns)
            except Fault as fault:
                raise self._fault(fr, fn, step, fault) from None
            return None
        return self._execute(callee, frame, m)
