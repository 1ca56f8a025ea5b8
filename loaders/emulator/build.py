"""Load-time translation of one decoded instruction into a closure over NumPy.

Each opcode has a builder (registered with :func:`op`) that checks the
modifiers and operand kinds once, when the module loads, and returns either a
closure ``run(frame, mask)`` or a :class:`Control` the scheduler interprets
(branches, calls, barriers...).  Anything a builder does not understand raises
:class:`~ptxbridge.abi.errors.UnsupportedInstructionError` naming the
instruction and its PTX line; the program keeps the function as refused and a
kernel that needs it fails at launch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ptxbridge.abi.errors import UnsupportedInstructionError

from .frame import source_line
from .memory import WINDOWS
from .parse import Imm, Instruction, Mem, Not, Operand, Reg, Sink, Sym
from .values import DTYPES, UINT, immediate, retype, to_bits

__all__ = ["Control", "Symbol", "Context", "OPS", "op", "Run"]

Run = Callable[[Any, Any], None]


@dataclass(frozen=True, slots=True)
class Control:
    """An instruction the scheduler carries out: ``bra``, ``call``, ``ret``, ``exit``, ``bar``, ``trap``."""

    kind: str
    target: Any = None


@dataclass(frozen=True, slots=True)
class Symbol:
    """What a name means in a function: ``space`` and ``value``.

    spaces: ``label`` (instruction index), ``shared`` / ``local`` / ``kparam``
    (offset in that window), ``global`` / ``const`` (host address), ``param``
    (a per-thread ``.param`` variable: value is its byte size), ``func``.
    """

    space: str
    value: Any


SPECIAL_REGISTERS = frozenset(
    [f"%{r}.{c}" for r in ("tid", "ntid", "ctaid", "nctaid") for c in "xyz"]
    + [f"%{r}" for r in ("laneid", "warpid", "nwarpid", "smid", "nsmid", "gridid", "clock", "clock64",
                         "globaltimer", "globaltimer_lo", "globaltimer_hi", "lanemask_eq", "lanemask_lt",
                         "lanemask_le", "lanemask_gt", "lanemask_ge", "dynamic_smem_size",
                         "total_smem_size", "warpsize", "reserved_smem_offset_begin",
                         "reserved_smem_offset_end", "reserved_smem_offset_cap", "reserved_smem_offset_0",
                         "reserved_smem_offset_1")]
    + [f"%envreg{i}" for i in range(32)]
)
_GRID_REGISTERS = frozenset(("%envreg1", "%envreg2"))  # the grid workspace cooperative groups sync through
_CONSTANTS = {"WARP_SZ": 32}  # PTX ISA 10: the constant `warpSize` compiles to
# Clocks count interpreter steps; the global timer is the host's nanosecond clock.
_COUNTERS: dict[str, Callable[[Any], Any]] = {
    "%clock": lambda fr: np.uint32(fr.batch.steps & 0xFFFFFFFF),
    "%clock64": lambda fr: np.uint64(fr.batch.steps),
    "%globaltimer": lambda fr: np.uint64(time.time_ns()),
    "%globaltimer_lo": lambda fr: np.uint32(time.time_ns() & 0xFFFFFFFF),
    "%globaltimer_hi": lambda fr: np.uint32(time.time_ns() >> 32),
}
_ADDRESS_SPACES = ("global", "shared", "local", "param", "const", "generic")


class Context:
    """What builders may ask about the function being loaded."""

    def __init__(self, function: str, registers: dict[str, str], symbol: Callable[[str], Symbol | None],
                 ins: Instruction, function_addresses: dict[str, int] | None = None,
                 origin: frozenset[int] | None = None, sanitize: Any = None,
                 files: dict[int, str] | None = None):
        self.function, self.registers, self._symbol, self.ins = function, registers, symbol, ins
        self.origin = origin  # the parameters this access's address derives from (see provenance)
        self.sanitize = sanitize  # the sanitize= tools (None: none), see .sanitize
        self.files = files or {}  # the module's .file table
        self.function_addresses = function_addresses or {}
        self.needs: set[str] = set()  # what a launch must provide ("grid": every block in one batch)
        self.writes: list[tuple[str, list[bool]]] = []  # per register written: [unmasked] (see liveness)

    @property
    def sanitized(self) -> bool:
        """Whether builders wrap accesses for a sanitizer tool (:func:`.sanitize.watched`)."""
        return self.sanitize is not None and self.sanitize.interpreted

    def site(self) -> str:
        """``fn, PTX line N (file.cu:7): `text``` for messages about this instruction."""
        ins = self.ins
        return f"{self.function}, PTX line {ins.line}{source_line(self.files, ins)}: `{ins.text}`"

    def unsupported(self, reason: str) -> UnsupportedInstructionError:
        return UnsupportedInstructionError(
            f"{self.function}, PTX line {self.ins.line}: `{self.ins.text}`: {reason}")

    def symbol(self, name: str) -> Symbol:
        found = self._symbol(name)
        if found is None:
            raise self.unsupported(f"unknown symbol {name!r}")
        return found

    def operands(self, count: int | tuple[int, ...]) -> tuple[Operand, ...]:
        counts = (count,) if isinstance(count, int) else count
        if len(self.ins.operands) not in counts:
            raise self.unsupported(f"expects {' or '.join(map(str, counts))} operands "
                                   f"(got {len(self.ins.operands)})")
        return self.ins.operands

    def split_mods(self, allowed: frozenset[str] | set[str], types: frozenset[str] | set[str],
                   ntypes: int = 1) -> tuple[set[str], list[str]]:
        """Separate flags from the trailing type suffixes; reject anything else."""
        mods = self.ins.mods
        if len(mods) < ntypes or any(t not in types for t in mods[len(mods) - ntypes:]):
            raise self.unsupported(f"needs {ntypes} type suffix(es) from {sorted(types)} (got {mods})")
        flags = set(mods[:len(mods) - ntypes])
        unknown = flags - set(allowed)
        if unknown:
            raise self.unsupported(f"unsupported modifier(s) {sorted('.' + u for u in unknown)}")
        return flags, list(mods[len(mods) - ntypes:])

    # -- operands --------------------------------------------------------------------------

    def reg_dtype(self, name: str) -> np.dtype:
        return DTYPES[self.registers[name]] if self.registers[name] != "pred" else DTYPES["pred"]

    def read(self, operand: Operand, ptx_type: str) -> Callable[[Any], Any]:
        """A closure ``frame -> value`` reading ``operand`` as ``ptx_type``."""
        dt = DTYPES[ptx_type]
        if isinstance(operand, Not):
            inner = self.read(operand.inner, "pred")
            return lambda fr: ~inner(fr)
        if isinstance(operand, Reg):
            name = operand.name
            if name in self.registers:
                rd = self.reg_dtype(name)
                if rd == dt:
                    return lambda fr: fr.regs[name]
                if rd.itemsize == dt.itemsize and rd.kind != "b" and dt.kind != "b":
                    return lambda fr: fr.regs[name].view(dt)
                return lambda fr: retype(fr.regs[name], dt)
            if name in _COUNTERS:
                return lambda fr: retype(_COUNTERS[name](fr), dt)
            if name in SPECIAL_REGISTERS:
                if name in _GRID_REGISTERS:
                    self.needs.add("grid")
                return lambda fr: retype(fr.batch.special[name], dt)
            raise self.unsupported(f"unknown register {name}")
        if isinstance(operand, Imm):
            try:
                value = immediate(operand.text, ptx_type)
            except ValueError as exc:
                raise self.unsupported(f"bad constant {operand.text!r}: {exc}") from None
            return lambda fr: value
        if isinstance(operand, Sym) and operand.name in _CONSTANTS and self._symbol(operand.name) is None:
            constant = dt.type(_CONSTANTS[operand.name])
            return lambda fr: constant
        if isinstance(operand, Sym):
            value = self.symbol_address(operand)
            cast = np.array(value % (1 << 64), np.uint64).astype(dt)[()]
            return lambda fr: cast
        raise self.unsupported(f"operand {operand} cannot be read as .{ptx_type}")

    def symbol_address(self, operand: Sym) -> int:
        """The state-space address a variable or parameter name stands for (``mov r, name``)."""
        sym = self.symbol(operand.name)
        if sym.space in ("shared", "local", "kparam", "global", "const"):
            return sym.value + operand.offset
        if sym.space == "func" and sym.value in self.function_addresses:
            return self.function_addresses[sym.value] + operand.offset
        raise self.unsupported(f"the address of {sym.space} symbol {operand.name!r} is not available")

    def write(self, operand: Operand, ptx_type: str | None = None) -> Callable[[Any, Any, Any], None]:
        """A closure ``(frame, value, mask)`` storing into a register for the masked threads."""
        if isinstance(operand, Sink):
            return lambda fr, value, m: None
        if not isinstance(operand, Reg) or operand.name not in self.registers:
            raise self.unsupported(f"destination must be a register (got {operand})")
        name, rd = operand.name, self.reg_dtype(operand.name)
        unmasked = [False]  # set once the function is loaded, for block-local registers (.liveness)
        self.writes.append((name, unmasked))

        def write(fr: Any, value: Any, m: Any) -> None:
            bits = value if value.dtype == rd else to_bits(value, rd)
            if type(bits) is np.ndarray and not bits.shape:  # np.where on scalars gives 0-d arrays
                bits = bits[()]
            fr.regs[name] = bits if m is None or unmasked[0] else np.where(m, bits, fr.regs[name])

        return write

    def address(self, mem: Operand, space: str) -> Callable[[Any], Any]:
        """A closure ``frame -> generic u64 address`` for ``[base+offset]`` in state space ``space``."""
        if not isinstance(mem, Mem):
            raise self.unsupported(f"expects an address operand [..] (got {mem})")
        window = WINDOWS.get("param" if space == "param" else space, 0)
        base = mem.base
        if isinstance(base, Sym):
            sym = self.symbol(base.name)
            if sym.space not in ("shared", "local", "kparam", "global", "const"):
                raise self.unsupported(f"cannot address {sym.space} symbol {base.name!r} here")
            window = WINDOWS.get("param" if sym.space == "kparam" else sym.space, 0)
            value = np.uint64((sym.value + mem.offset + window) % (1 << 64))
            return lambda fr: value
        offset = np.uint64((mem.offset + window) % (1 << 64))
        if isinstance(base, Imm):
            value = np.uint64((int(immediate(base.text, "u64")) + int(offset)) % (1 << 64))
            return lambda fr: value
        width = self.reg_dtype(base.name).itemsize if base.name in self.registers else 8
        reader = self.read(base, "u64" if width == 8 else "u32")
        if width == 8:
            return (lambda fr: reader(fr) + offset) if offset else reader
        return lambda fr: reader(fr).astype(UINT[8]) + offset

    def shared_offset(self, mem: Operand) -> Callable[[Any], Any] | None:
        """For ``[%r+off]`` with a 32- or 64-bit register in ``.shared`` (NVRTC keeps shared
        addresses in ``.b32`` registers, numba in ``.b64`` ones): a closure giving the offsets in
        the shared window, unsigned and wrapping at the register's width (the fast path of
        :meth:`Memory.shared`); None for other forms."""
        if not isinstance(mem, Mem) or not isinstance(mem.base, Reg) or mem.base.name not in self.registers:
            return None
        width = self.reg_dtype(mem.base.name).itemsize
        if width not in (4, 8):
            return None
        reader = self.read(mem.base, "u32" if width == 4 else "u64")
        if not mem.offset:
            return reader
        offset = (np.uint32 if width == 4 else np.uint64)(mem.offset % (1 << (8 * width)))
        return lambda fr: reader(fr) + offset

    @staticmethod
    def state_space(mods: set[str]) -> str:
        spaces = [m.split("::")[0] for m in mods if m.split("::")[0] in _ADDRESS_SPACES]
        return spaces[0] if spaces else "generic"


OPS: dict[str, Callable[[Context], Run | Control]] = {}


def op(*names: str) -> Callable:
    """Register a builder for the given opcodes."""

    def register(builder: Callable[[Context], Run | Control]) -> Callable[[Context], Run | Control]:
        for name in names:
            OPS[name] = builder
        return builder

    return register
