"""Calls flattened for the compiled tier: every direct call of a device function becomes its body.

The interpreter runs a call as one step: the calling threads run the callee to its end, under its
own min-PC schedule, before any other thread of the caller moves.  Put in place of the call, the
callee's instructions keep that order: the other threads wait at higher program counters until
the callee's threads leave it (a guarded call is a branch around the body for the threads whose
guard fails).  Each inlined call has its own registers (renamed ``name@k``), zeroed on entry where
the callee may read them before writing, as the interpreter's fresh frame holds zeros; ``ret``
is a branch to the instruction after the call.

A call the tier does not inline is marked *cold*: a launch whose thread reaches it leaves the
compiled code, and the tier runs the launch again on the interpreter from the memory it started
with (:mod:`.tier`).  Such calls are those of a function that never returns (no ``ret``: Rust's
panics, which format their message through trait objects and end the thread), indirect calls,
recursion and the built-ins the loader implements natively (``vprintf``, ``malloc``).

The ``.param`` variables of call sequences (the caller's arguments and return values, which the
callee reads and writes as its own parameters) are per-thread memory: ``ld.param``/``st.param`` of
them become local accesses of a region of their own, apart from the kernel's local variables so
that an access past either is still a fault.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ..build import Context, Symbol
from ..machine import BRA, CALL, PLAIN, RET, TRAP, Function, Step
from ..parse import Group, Imm, Instruction, Mem, Not, Operand, Pair, Reg, Sym, Vec
from .flow import entry_live
from .values import Unsupported

__all__ = ["Flat", "flatten", "CALL_PARAMETERS"]

CALL_PARAMETERS = 1 << 40  # where call sequences' .param variables lie in the local window
_SLOT_ALIGN = 16


@dataclass(frozen=True, slots=True)
class Flat:
    """A kernel with its calls inlined: what the emitter compiles, and where each step came from."""

    function: Function
    symbols: Callable[[str], Symbol | None]
    call_bytes: int  # per thread: the call sequences' .param variables
    origin: tuple[tuple[Function, Step], ...]  # per step: the function and step a report names
    cold: dict[int, str]  # the trap steps standing for calls not inlined, and why


def flatten(functions: dict[str, Function], symbols: dict[str, Callable[[str], Symbol | None]],
            kernel: str) -> Flat:
    """Kernel ``kernel`` of a program (its ``functions`` and their ``symbols``) with every call inlined;
    raises :class:`Unsupported` for a ``.param`` variable used where it cannot be placed."""
    fn = functions[kernel]
    if not any(step.kind == CALL for step in fn.steps):
        return Flat(fn, symbols[kernel], 0, tuple((fn, step) for step in fn.steps), {})
    flat = _Flattener(functions, symbols)
    flat.expand(fn, _Scope(symbols[kernel], fn.zeros, "", {}, flat), (kernel,))
    steps = tuple(flat.steps)
    inlined = replace(fn, steps=list(steps), zeros=flat.zeros, origins=tuple(flat.provenance))
    names, kernel_names = flat.names, symbols[kernel]
    return Flat(inlined, lambda name: names.get(name) or kernel_names(name), flat.size, tuple(flat.origin),
                flat.cold)


@dataclass(slots=True)
class _Scope:
    """How one function's names read once inlined: its resolver, its registers' suffix, and the final
    names of its parameters (the caller's argument variables)."""

    resolve: Callable[[str], Symbol | None]
    registers: dict[str, Any]  # the function's registers (their zeros)
    suffix: str
    parameters: dict[str, str]
    flat: _Flattener

    def register(self, name: str) -> str:
        return name + self.suffix if name in self.registers else name

    def symbol(self, name: str, ins: Instruction) -> str:
        """The final name of symbol ``name`` (its meaning recorded), per the instruction using it."""
        found = self.resolve(name)
        if found is None:
            return name  # a constant such as WARP_SZ
        if found.space == "param":
            if ins.opcode not in ("ld", "st", "call"):
                raise Unsupported(f"`{ins.text}` (the address of a .param variable)")
            final = self.parameters.get(name) or name + self.suffix
            self.flat.slot(final, found.value)
            return final
        if not self.suffix:
            return name  # the kernel's own names resolve as they do
        final = name + self.suffix
        self.flat.names.setdefault(final, found)
        return final


class _Flattener:
    def __init__(self, functions: dict[str, Function], symbols: dict[str, Callable[[str], Symbol | None]]):
        self.functions, self.symbols = functions, symbols
        self.steps: list[Step] = []
        self.origin: list[tuple[Function, Step]] = []
        self.provenance: list[Any] = []
        self.zeros: dict[str, Any] = {}
        self.names: dict[str, Symbol] = {}  # inlined and .param names -> what they mean
        self.offsets: dict[str, int] = {}  # .param variables -> their offset in the call region
        self.size = 0
        self.calls = 0
        self.cold: dict[int, str] = {}

    def slot(self, name: str, size: int) -> None:
        if name not in self.offsets:
            offset = -(-self.size // _SLOT_ALIGN) * _SLOT_ALIGN
            self.offsets[name], self.size = offset, offset + max(size, 1)
            self.names[name] = Symbol("local", CALL_PARAMETERS + offset)

    def append(self, step: Step, fn: Function, source: Step, provenance: Any = None) -> None:
        self.steps.append(step)
        self.origin.append((fn, source))
        self.provenance.append(provenance)

    def expand(self, fn: Function, scope: _Scope, stack: tuple[str, ...]) -> None:
        """Append ``fn``'s steps (its calls expanded), names as ``scope`` reads them; a callee's ``ret``
        goes to the end of its body."""
        self.zeros.update({scope.register(name): zero for name, zero in fn.zeros.items()})
        at: list[int] = []
        jumps: list[tuple[int, int | None]] = []  # (flat step, fn step it goes to; None: fn's end)
        kernel = not scope.suffix
        for i, step in enumerate(fn.steps):
            at.append(len(self.steps))
            ins = _renamed(step.ins, scope)
            if step.kind == CALL:
                self._call(fn, step, ins, scope, stack)
            elif step.kind == RET and not kernel:
                jumps.append((len(self.steps), None))
                self.append(Step(BRA, None, None, step.guard, step.negated, _branch(ins, False)), fn, step)
            else:
                if step.kind == BRA:
                    jumps.append((len(self.steps), step.target))
                provenance = fn.origins[i] if kernel and i < len(fn.origins) else None
                self.append(replace(step, ins=ins), fn, step, provenance)
        at.append(len(self.steps))  # the end: where ret goes
        for k, target in jumps:
            self.steps[k] = replace(self.steps[k], target=at[-1] if target is None else at[target])

    def _call(self, fn: Function, step: Step, ins: Instruction, scope: _Scope,
              stack: tuple[str, ...]) -> None:
        target = step.target
        callee = self.functions.get(target.function) if target.function is not None else None
        why = (
            "an indirect call" if callee is None
            else "a call of a function the CPU loader implements itself" if callee.native is not None
            else "a call of a function that never returns" if not any(s.kind == RET for s in callee.steps)
            else "a recursive call" if target.function in stack
            else f"its arguments do not match {callee.name}'s parameters"
            if (len(target.arguments), len(target.returns)) != (len(callee.params), len(callee.returns))
            else None
        )
        if why is not None:  # a thread that gets here sends the launch to the interpreter
            self.cold[len(self.steps)] = f"`{step.ins.text}` ({why})"
            self.append(Step(TRAP, None, None, step.guard, step.negated, ins), fn, step)
            return
        skip = None
        if step.ins.guard is not None:  # the threads whose guard fails go round the body
            skip = len(self.steps)
            self.append(Step(BRA, None, None, step.guard, not step.negated, _branch(ins, True)), fn, step)
        self.calls += 1
        passed = [name for name, _ in (*target.arguments, *target.returns)]
        own = (*callee.params, *callee.returns)
        arguments = {mine: scope.symbol(theirs, ins) for mine, theirs in zip(own, passed, strict=True)}
        inner = _Scope(self.symbols[callee.name], callee.zeros, f"@{self.calls}", arguments, self)
        for name in sorted(entry_live(callee)):  # read before written: zero, as a fresh frame
            zero = _zeroing(inner.register(name), callee.zeros[name], step.ins)
            self.append(Step(PLAIN, None, None, None, False, zero), callee, callee.steps[0])
        self.expand(callee, inner, (*stack, target.function))
        if skip is not None:
            self.steps[skip] = replace(self.steps[skip], target=len(self.steps))


def _branch(ins: Instruction, negate: bool) -> Instruction:
    """A branch standing for ``ins`` (a ``ret`` leaving a callee, or a guarded call's way round it)."""
    return Instruction(ins.line, ins.text, "bra", (), (Sym("(inlined)"),), ins.guard,
                       ins.guard_negated != negate, ins.source)


def _zeroing(register: str, zero: Any, at: Instruction) -> Instruction:
    kind = "pred" if zero.dtype.kind == "b" else f"b{8 * zero.dtype.itemsize}"
    return Instruction(at.line, at.text, "mov", (kind,), (Reg(register), Imm("0")), source=at.source)


def _renamed(ins: Instruction, scope: _Scope) -> Instruction:
    """``ins`` with its registers and symbols as ``scope`` names them, a ``.param`` variable's access
    made a local one."""
    operands = tuple(_operand(o, scope, ins) for o in ins.operands)
    mods = ins.mods
    if ins.opcode in ("ld", "st") and Context.state_space(set(mods)) == "param":
        memory = next((o for o in ins.operands if isinstance(o, Mem)), None)
        if memory is not None and isinstance(memory.base, Sym):
            meaning = scope.resolve(memory.base.name)
            if meaning is not None and meaning.space == "param":
                mods = tuple("local" if m == "param" else m for m in mods)
        elif scope.suffix:
            raise Unsupported(f"`{ins.text}` (a .param access through a register)")
    guard = Reg(scope.register(ins.guard.name)) if ins.guard is not None else None
    if operands == ins.operands and mods == ins.mods and guard == ins.guard:
        return ins
    return replace(ins, operands=operands, mods=mods, guard=guard)


def _operand(operand: Operand, scope: _Scope, ins: Instruction) -> Operand:
    if isinstance(operand, Reg):
        return Reg(scope.register(operand.name))
    if isinstance(operand, Sym):
        return Sym(scope.symbol(operand.name, ins), operand.offset)
    if isinstance(operand, Mem):
        return Mem(_operand(operand.base, scope, ins), operand.offset)
    if isinstance(operand, Vec):
        return Vec(tuple(_operand(o, scope, ins) for o in operand.items))
    if isinstance(operand, Group):
        return Group(tuple(_operand(o, scope, ins) for o in operand.items))
    if isinstance(operand, Not):
        return Not(_operand(operand.inner, scope, ins))
    if isinstance(operand, Pair):
        return Pair(_operand(operand.first, scope, ins), _operand(operand.second, scope, ins))
    return operand
