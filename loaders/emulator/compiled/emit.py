"""The emitter one warp function is written through: registers, operands, masks, memory checks.

Registers are ``alloca`` slots of one vector each (LLVM's mem2reg turns them into SSA values),
but for those live where a barrier resumes, whose slots are in the warp's state; a block loads a
register's slot once on its main line and reuses the value until it stores the register (LLVM's
GVN does not see through the fast and slow paths of every access to do it for the state's);
every write selects the new value for the lanes of the instruction's mask and keeps the others,
as the interpreter's ``np.where`` does, but where no other lane can read what it would keep: a
block's temporaries, and in a block every live lane runs together (:mod:`.lanes`) an unguarded
write of a register no warp-wide instruction reads (the lanes outside the mask have exited).
Memory accesses call ``@resolve`` (:mod:`.runtime`), which checks the active lanes' addresses
against the launch's region table and the extent of the argument the address comes from exactly
as :meth:`~..memory.Memory.resolve` does (alignment, provenance, bounds, writability) and returns
each lane's host pointer; a failing check ends the warp with a fault code and the launch is re-run
on the interpreter, which writes the report.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..memory import WINDOWS
from ..parse import Imm, Instruction, Mem, Not, Operand, Reg, Sink, Sym
from .direct import MAX_RUNS, DirectMoves, runs
from .values import (
    LANES,
    Unsupported,
    bits_of,
    constant_bits,
    elem,
    int_elem,
    is_float,
    is_signed,
    signed_literal,
    vec,
)

__all__ = [
    "Emitter", "CTX", "LAUNCH_WORDS", "FAULT", "TRAP_CODE", "STEPS_CODE", "HANG_CODE", "COLD_CODE",
    "SPECIALS", "LANE_IDS",
]

# the launch context, an array of i64 the runtime fills (see .runtime), a launch's own words first
# (.contexts writes them into every context of a launch in one slice)
LAUNCH_WORDS = ("gx", "gy", "gz", "bx", "by", "bz", "param", "max_steps", "tids", "extents")
CTX = {
    name: i
    for i, name in enumerate(
        (
            *LAUNCH_WORDS,
            "nregions",
            "regions",
            "shared",
            "shared_size",
            "local",
            "local_stride",
            "local_size",
            "state",
            "first_block",
            "end_block",
            "threads",
            "nwarps",
            "err_insn",
            "err_addr",
            "err_thread",
            "err_block",
            "err_reason",
            "err_size",
            "thread_steps",
            "hint",
            "err_extent",
            "err_write",
            "sites",
            "local_used",
        )
    )
}
FAULT, TRAP_CODE, STEPS_CODE, HANG_CODE = 2, 4, 3, 5
COLD_CODE = 6  # a warp reached a call of a function that never returns (.inline): the interpreter takes over
SPECIALS = (
    "%tid.x",
    "%tid.y",
    "%tid.z",
    "%ntid.x",
    "%ntid.y",
    "%ntid.z",
    "%ctaid.x",
    "%ctaid.y",
    "%ctaid.z",
    "%nctaid.x",
    "%nctaid.y",
    "%nctaid.z",
    "%laneid",
    "%warpid",
    "%nwarpid",
    "%warpsize",
)
_CONSTANTS = {"WARP_SZ": 32}
_MASK = vec("i1")
LANE_IDS = "<" + ", ".join(f"i32 {i}" for i in range(LANES)) + ">"


def _patterned(kind: str, count: int, bits: int) -> bool:
    """Whether an access through a register base moves as :func:`.direct.patterned` does."""
    return kind == "load" and bits >= 32


class Emitter(DirectMoves):
    """IR text for one kernel's warp function; ``registers`` maps names to bit widths."""

    def __init__(self, registers: dict[str, int], symbol: Callable[[str], Any], kernel: str):
        self.registers = registers
        self.slots = {name: i for i, name in enumerate(sorted(registers))}
        self.symbol, self.kernel = symbol, kernel
        self.lines: list[str] = []
        self.block = "entry"  # the label of the block being emitted
        self.count = 0
        self.mask = "%m"  # the current block's mask (reloaded at every block start)
        self.insn = 0  # index of the instruction being emitted (fault and watchdog reports)
        self.declarations: set[str] = set()
        self.reads: frozenset[str] = frozenset()  # registers some instruction reads (see .kernel)
        self.param_size = 0  # bytes of parameters the kernel declares
        self.local: frozenset[str] = frozenset()  # registers no block reads before writing (..liveness)
        self.saved: frozenset[str] = frozenset()  # registers live where a barrier resumes (.flow)
        self.uniform: frozenset[str] = frozenset()  # registers a warp keeps as one scalar (.lanes)
        self.lane_offsets: dict[str, tuple[int, ...]] = {}  # of those, whose lanes differ: by how much
        self.spreads: dict[str, str] = {}  # vectors known to hold one scalar in every lane -> the scalar
        self.held: dict[str, str] = {}  # registers -> their slot's value, loaded on the block's main line
        self.tables: dict[str, str] = {}  # thread index registers -> where the warp's lanes' are
        self.main_line: set[str] = set()  # the labels every later part of the block runs through
        self.sums: dict[tuple[str, int, str], str] = {}  # (scalar, lane step, delta) -> the sum
        self.defining = False  # the instruction being emitted defines its destination for all its lanes
        self.converged = False  # every live lane runs the block being emitted (.lanes)
        self.collective: frozenset[str] = frozenset()  # registers a warp-wide instruction reads
        self.spans: dict[
            tuple[str, str], tuple[str, ...]
        ] = {}  # (base register, mask) -> lo, hi, OR this block
        self.base: tuple[str, str, int] | None = None  # the last address's (register, value, offset)
        self.addressed = ""  # the last address's vector
        self.reused: set[str] = set()  # base registers of several accesses in the block being emitted
        self.offsets: dict[str, tuple[int, int]] = {}  # their lowest and highest offsets in the block
        self.deltas: dict[tuple[Any, ...], str] = {}  # a group of the block's accesses -> its check
        self.extents: list[int] = []  # per instruction: the row of the launch's extent table, 0: none
        self.step_tables: dict[tuple[int, ...], str] = {}  # lanes' steps -> their table (_to_addresses)
        self.memos: dict[str, int] = {}  # address base registers -> their span memo's place in the state
        self.looping = False  # the block being emitted is on a cycle of the control flow (a loop's body)
        self.windows: frozenset[str] = frozenset()  # base registers loaded through windows (.direct)
        self.masked_moves = False  # the host masks vector moves in the move itself: AVX-512 (.direct)
        self.stepped: frozenset[str] = frozenset()  # base registers loops only move by a uniform step
        self.shift: tuple[str, Operand] | None = None  # the instruction adds a uniform amount to a base
        self.cold: dict[int, str] = {}  # instructions not compiled (a warp reaching one leaves): why

    def intrinsic(self, declaration: str) -> None:
        self.declarations.add(declaration)

    # -- text ------------------------------------------------------------------------------

    def tmp(self) -> str:
        self.count += 1
        return f"%t{self.count}"

    def label(self, stem: str) -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def emit(self, line: str) -> None:
        self.lines.append("  " + line)

    def put_label(self, name: str) -> None:
        self.lines.append(f"{name}:")
        self.block = name

    def op(self, text: str) -> str:
        """Emit ``%t = text`` and return ``%t``."""
        out = self.tmp()
        self.emit(f"{out} = {text}")
        return out

    # -- registers -------------------------------------------------------------------------

    def slot(self, name: str) -> str:
        return f"%R{self.slots[name]}"

    def memo(self, name: str) -> str:
        """The pointer to register ``name``'s span memo (:meth:`remembered_span`)."""
        return f"%M{self.slots[name]}"

    def reg_type(self, name: str) -> str:
        return vec(int_elem(self.registers[name]))

    def slot_type(self, name: str) -> str:
        """A register whose lanes follow the lane (:func:`.lanes.lane_offsets`) is kept as one scalar:
        lane 0's."""
        return int_elem(self.registers[name]) if name in self.uniform else self.reg_type(name)

    def restart(self, in_block: bool) -> None:
        """Forget what the block loaded: at its start (its first label opens the main line) and at
        its end (outside it, none of that dominates)."""
        self.held, self.sums = {}, {}
        self.main_line = {self.block} if in_block else set()

    def slot_value(self, name: str) -> str:
        """Register ``name``'s slot, loaded once on the block's main line (a barrier's saved
        registers live in the warp's state, where LLVM does not see the reload is redundant)."""
        return self._held(name, f"{self.slot_type(name)}, ptr {self.slot(name)}")

    def _held(self, name: str, what: str) -> str:
        """``load what``, kept as ``name``'s where it is made on the block's main line."""
        value = self.held.get(name)
        if value is None:
            value = self.op(f"load {what}")
            if self.block in self.main_line:
                self.held[name] = value
        return value

    def store_slot(self, name: str, t: str, value: str) -> None:
        """Store register ``name``: a value loaded before is stale."""
        self.held.pop(name, None)
        self.emit(f"store {t} {value}, ptr {self.slot(name)}")

    def load_reg(self, name: str) -> str:
        value = self.slot_value(name)
        if name not in self.uniform:
            return value
        t = int_elem(self.registers[name])
        lanes = self.spread(value, t)
        if name not in self.lane_offsets:
            return lanes
        steps = ", ".join(f"{t} {offset}" for offset in self.signed_offsets(name))
        return self.op(f"add {vec(t)} {lanes}, <{steps}>")

    def _special(self, name: str) -> str:
        """Special register ``name``'s lanes; a thread index is loaded from the launch's table
        where a block reads it (kept from the entry, it would be live, and spilled, throughout)."""
        at = self.tables.get(name)
        return f"%S.{name[1:]}" if at is None else self._held(name, f"{vec('i32')}, ptr {at}, align 4")

    def signed_offsets(self, name: str) -> tuple[int, ...]:
        """What each lane of register ``name`` (one kept as a scalar) adds to lane 0's value, as
        signed integers of the register's width (all 0: one value)."""
        width = self.registers[name]
        return tuple(signed_literal(o, width) for o in self.lane_offsets.get(name, (0,) * LANES))

    def convert(self, value: str, src_bits: int, dst_bits: int, signed: bool) -> str:
        """Integer vector width change: truncate, or sign/zero-extend."""
        if src_bits == dst_bits:
            return value
        if src_bits == 1:
            return self.op(f"zext {vec('i1')} {value} to {vec(int_elem(dst_bits))}")
        if dst_bits == 1:
            return self.op(f"icmp ne {vec(int_elem(src_bits))} {value}, zeroinitializer")
        how = "trunc" if src_bits > dst_bits else "sext" if signed else "zext"
        scalar = self.spreads.get(value)
        if scalar is not None:  # a uniform value converts once (LLVM keeps a cast of a splat a vector)
            converted = self.op(f"{how} {int_elem(src_bits)} {scalar} to {int_elem(dst_bits)}")
            return self.spread(converted, int_elem(dst_bits))
        return self.op(f"{how} {vec(int_elem(src_bits))} {value} to {vec(int_elem(dst_bits))}")

    def from_bits(self, value: str, ptx_type: str) -> str:
        """Integer bits of ``ptx_type``'s width as ``ptx_type`` (a bitcast for floats)."""
        if is_float(ptx_type):
            return self.op(f"bitcast {vec(int_elem(bits_of(ptx_type)))} {value} to {vec(elem(ptx_type))}")
        return value

    def to_bits(self, value: str, ptx_type: str) -> str:
        if is_float(ptx_type):
            return self.op(f"bitcast {vec(elem(ptx_type))} {value} to {vec(int_elem(bits_of(ptx_type)))}")
        return value

    def read(self, operand: Operand, ptx_type: str) -> str:
        """``operand`` as a ``<32 x ptx_type>`` value (the interpreter's ``Context.read``)."""
        if isinstance(operand, Not):
            inner = self.read(operand.inner, "pred")
            return self.op(f"xor {vec('i1')} {inner}, {self.ones('pred')}")
        if isinstance(operand, Reg):
            if operand.name in self.registers:
                width = self.registers[operand.name]
                if (width == 1) != (ptx_type == "pred"):
                    raise Unsupported(f"register {operand.name} read as .{ptx_type}")
                bits = self.convert(self.load_reg(operand.name), width, bits_of(ptx_type), False)
                return self.from_bits(bits, ptx_type)
            if operand.name in SPECIALS:
                return self.from_bits(self.convert(self._special(operand.name), 32, bits_of(ptx_type), False),
                                      ptx_type)
            raise Unsupported(f"special register {operand.name}")
        if isinstance(operand, Imm):
            return self.constant(constant_bits(operand.text, ptx_type), ptx_type)
        if isinstance(operand, Sym):
            if operand.name in _CONSTANTS and self.symbol(operand.name) is None:
                return self.constant(_CONSTANTS[operand.name], ptx_type)
            return self.constant(self.symbol_address(operand) % (1 << bits_of(ptx_type)), ptx_type)
        raise Unsupported(f"operand {operand} read as .{ptx_type}")

    def constant(self, bits: int, ptx_type: str) -> str:
        width = bits_of(ptx_type)
        literal = f"splat ({int_elem(width)} {bits if width > 1 else int(bool(bits))})"
        if is_float(ptx_type):
            return self.op(f"bitcast {vec(int_elem(width))} {literal} to {vec(elem(ptx_type))}")
        return self.op(f"or {vec(int_elem(width))} {literal}, zeroinitializer")

    def ones(self, ptx_type: str) -> str:
        return f"splat ({int_elem(bits_of(ptx_type))} -1)" if ptx_type != "pred" else "splat (i1 true)"

    def symbol_address(self, operand: Sym) -> int:
        sym = self.symbol(operand.name)
        if sym is None or sym.space not in ("shared", "local", "kparam", "global", "const"):
            raise Unsupported(f"the address of {operand.name!r}")
        return sym.value + operand.offset

    def write(self, operand: Operand, value: str, ptx_type: str, mask: str) -> None:
        """Store ``value`` (of ``ptx_type``) into a register for the lanes of ``mask``."""
        if isinstance(operand, Sink):
            return
        if not isinstance(operand, Reg) or operand.name not in self.registers:
            raise Unsupported(f"destination {operand}")
        width = self.registers[operand.name]
        if (width == 1) != (ptx_type == "pred"):
            raise Unsupported(f"register {operand.name} written as .{ptx_type}")
        self.forget(operand.name)
        if self.shift is not None and self.shift[0] == operand.name:
            self._shift_memo(operand.name, self.shift[1], ptx_type, mask)
        elif operand.name in self.memos:  # a new value: its lanes' span is not known
            self.emit(f"store i64 0, ptr {self.memo(operand.name)}")
        bits = self.convert(self.to_bits(value, ptx_type), bits_of(ptx_type), width, is_signed(ptx_type))
        if operand.name in self.uniform:  # lane 0 holds the base every lane's value follows from
            first = self.op(f"extractelement {self.reg_type(operand.name)} {bits}, i32 0")
            self.store_slot(operand.name, self.slot_type(operand.name), first)
            return
        unread = operand.name in self.local or (self.converged and operand.name not in self.collective)
        if self.defining and unread:
            # no other lane reads this value: the block's temporaries, or a block every live lane runs
            # (the others have exited) writing a register no warp-wide instruction reads
            self.store_slot(operand.name, self.reg_type(operand.name), bits)
            return
        old = self.load_reg(operand.name)
        kept = self.op(
            f"select {vec('i1')} {mask}, {self.reg_type(operand.name)} {bits}, "
            f"{self.reg_type(operand.name)} {old}"
        )
        self.store_slot(operand.name, self.reg_type(operand.name), kept)

    def _shift_memo(self, name: str, amount: Operand, ptx_type: str, mask: str) -> None:
        """Register ``name`` moves by the warp-uniform ``amount`` for the lanes of ``mask``: its memo
        (:meth:`remembered_span`) moves too, its lowest and highest address by the amount, its OR
        by OR-ing it in (an alignment it cannot vouch for sends the access to the full check),
        its layout and window indices unchanged; cleared instead when some lane it describes is
        not moved, or when the lowest and the highest address would not wrap around alike."""
        width = bits_of(ptx_type)
        memo = self.memo(name)
        words = [self.op(f"getelementptr i64, ptr {memo}, i64 {k}") for k in range(4)]
        key = self.op(f"load i64, ptr {words[0]}")
        described, moving = self.op(f"trunc i64 {key} to i32"), self.op(f"bitcast {vec('i1')} {mask} to i32")
        left = self.op(f"and i32 {described}, {self.op(f'xor i32 {moving}, -1')}")
        lanes = self.to_bits(self.read(amount, ptx_type), ptx_type)
        step = self.op(f"extractelement {vec(int_elem(width))} {lanes}, i32 0")
        if width == 32:
            step = self.op(f"zext i32 {step} to i64")
        lo, hi, bits_or = (self.op(f"load i64, ptr {w}") for w in words[1:])
        moved = []
        wraps = []
        for old in (lo, hi):
            new = self.op(f"add i64 {old}, {step}")
            if width == 64:
                wraps.append(self.op(f"icmp ult i64 {new}, {old}"))
                moved.append(new)
            else:
                wraps.append(self.op(f"icmp uge i64 {new}, 4294967296"))
                moved.append(self.op(f"and i64 {new}, 4294967295"))
        alike = self.op(f"icmp eq i1 {wraps[0]}, {wraps[1]}")
        kept = self.op(f"and i1 {alike}, {self.op(f'icmp eq i32 {left}, 0')}")
        for word, value in zip(words[1:], (*moved, self.op(f"or i64 {bits_or}, {step}")), strict=True):
            self.emit(f"store i64 {value}, ptr {word}")
        self.emit(f"store i64 {self.op(f'select i1 {kept}, i64 {key}, i64 0')}, ptr {words[0]}")

    def forget(self, name: str) -> None:
        """Drop the block's spans and checks made through register ``name``."""
        self.spans = {key: span for key, span in self.spans.items() if key[0] != name}
        self.deltas = {key: delta for key, delta in self.deltas.items() if key[0] != name}

    def guard(self, ins: Instruction) -> str:
        """The lanes an instruction runs for: the block mask and its guard predicate."""
        if ins.guard is None:
            return self.mask
        p = self.read(ins.guard, "pred")
        if ins.guard_negated:
            p = self.op(f"xor {vec('i1')} {p}, splat (i1 true)")
        return self.op(f"and {vec('i1')} {self.mask}, {p}")

    # -- memory ----------------------------------------------------------------------------

    def address(self, mem: Operand, space: str) -> str:
        """The generic u64 address of ``[base+offset]`` in ``space`` (``Context.address``)."""
        if not isinstance(mem, Mem):
            raise Unsupported(f"address operand {mem}")
        window = WINDOWS.get(space, 0) if space in ("shared", "local", "param") else 0
        base = mem.base
        if isinstance(base, Sym):
            sym = self.symbol(base.name)
            if sym is None or sym.space not in ("shared", "local", "kparam", "global", "const"):
                raise Unsupported(f"address of {base.name!r}")
            window = WINDOWS.get("param" if sym.space == "kparam" else sym.space, 0)
            return self.constant((sym.value + mem.offset + window) % (1 << 64), "u64")
        if isinstance(base, Imm):
            return self.constant((constant_bits(base.text, "u64") + mem.offset + window) % (1 << 64), "u64")
        if base.name not in self.registers:
            raise Unsupported(f"address register {base.name}")
        width = self.registers[base.name]
        value = self.read(base, "u64" if width == 64 else "u32")
        if width != 64:
            value = self.op(f"zext {vec('i32')} {value} to {vec('i64')}")
        offset = (mem.offset + window) % (1 << 64)
        self.base = (base.name, value, offset)
        if offset:
            value = self.op(f"add {vec('i64')} {value}, splat (i64 {signed_literal(offset)})")
        self.addressed = value
        return value

    def lane_address(self, address: str, lane: int, delta: str | None = None) -> str:
        """Lane ``lane``'s element of ``address``, plus ``delta`` (a checked access's host offset);
        where it is the last :meth:`address` and the warp keeps its base register as one scalar,
        made from that scalar (a fast path then does no vector work: the vector is left to the
        full check), with the scalar plus ``delta`` made once on the block's main line, so that the
        accesses at several offsets from one base share it (as the base of their addressing)."""
        name = self._scalar_word(address)
        if name is None:
            value = self.op(f"extractelement {vec('i64')} {address}, i32 {lane}")
            return value if delta is None else self.op(f"add i64 {value}, {delta}")
        width, offset = self.registers[name], self.base[2]  # type: ignore[index]
        t, scalar = int_elem(width), self.slot_value(name)  # the value the address was made of
        step = self.signed_offsets(name)[lane]
        value = self.sums.get((scalar, step, delta))
        if value is None:
            value = self.op(f"add {t} {scalar}, {step}") if step else scalar
            if width != 64:
                value = self.op(f"zext {t} {value} to i64")
            if delta is not None:
                value = self.op(f"add i64 {value}, {delta}")
                if self.block in self.main_line:
                    self.sums[scalar, step, delta] = value
        return self.op(f"add i64 {value}, {signed_literal(offset)}") if offset else value

    def consecutive_lanes(self, address: str, size: int) -> bool:
        """Whether the lanes of ``address`` (the last :meth:`address`) are known to lie ``size``
        bytes apart but for a wrap of the base register (:mod:`.lanes`)."""
        name = self._scalar_base(address)
        return name is not None and self.signed_offsets(name) == tuple(k * size for k in range(LANES))

    def _scalar_base(self, address: str) -> str | None:
        """The base register of ``address`` where it is the last :meth:`address` and the warp keeps
        that register as one scalar (:mod:`.lanes`), else None."""
        name = self.base[0] if self.base is not None and address == self.addressed else None
        return name if name in self.uniform else None

    def _scalar_word(self, address: str) -> str | None:
        """:meth:`_scalar_base` where that register is 32 or 64 bits wide (an address's lanes are
        then made from its scalar), else None."""
        name = self._scalar_base(address)
        return name if name is not None and self.registers[name] in (32, 64) else None

    def move(
        self, kind: str, mem: Operand, space: str, mask: str, bits: int, count: int,
        values: list[str] | None = None,
    ) -> list[str] | None:
        """Check and carry out ``count`` elements of ``bits`` at ``[mem]`` for the lanes of ``mask``:
        a store writes ``values``, a load returns them (zero in lanes that ran none).
        Through a register base several accesses of the block share, the span of the register's
        active lanes is computed once (:mod:`.access`) and checked once for the accesses of the same
        size, kind and state space, over the span of the block's offsets through that register (so
        ``[%r]``, ``[%r+4]`` ... ``[%r+60]`` check ``[lo, hi + 64)`` once), and loads of 32- and
        64-bit elements through any register base are checked so and patterned; other single-element
        accesses of a whole warp's consecutive elements move directly (:mod:`.direct`); the full
        check decides whatever these cannot."""
        whole = bits // 8 * count
        self.base = None
        address = self.address(mem, space)
        done, skip = self.label("moved"), self.label("skip")
        arrived: list[tuple[str, list[str]]] = []  # (block, the values a load got there)
        t = vec(int_elem(bits))
        based = self.base is not None and self.base[2] % whole == 0
        shared = based and self.base[0] in self.reused  # type: ignore[index]
        if kind == "load" and space == "global" and self.looping:  # a load warp after warp runs
            self.prefetch_ahead(address)
        patterned = based and _patterned(kind, count, bits)
        rowed = self._rowed(kind, count, bits) if based else None
        if rowed is not None:  # the lanes' constants say where each lane's element is
            ok, delta = self._rows_checked(address, rowed, bits, mem.offset if shared else None)
            pointer = self.lane_address(address, 0, delta)
            fast, slow = self.label("rowload"), self.label("checked")
            self.emit(f"br i1 {ok}, label %{fast}, label %{slow}")
            self.put_label(fast)
            got = self.moved_rows(pointer, mask, rowed, bits)
            arrived.append((self.block, [got]))
            self.emit(f"br label %{done}")
            self.put_label(slow)
        elif count == 1 and not (shared and self.looping) and not (
                patterned and self.looping and self.base[0] in self.stepped):
            # in a loop, a base register's classification is remembered from the pass before: used alone
            fast, slow = self.label("direct"), self.label("checked")
            if not shared and self.consecutive_lanes(address, bits // 8):  # one vector (but for a wrap)
                ok, pointer = self.direct(address, bits, kind == "store")
                self.emit(f"br i1 {ok}, label %{fast}, label %{slow}")
                self.put_label(fast)
                got = self.moved([self.op(f"inttoptr i64 {pointer} to ptr")], mask, bits,
                                 None if kind == "load" else values[0])  # type: ignore[index]
                moved = [got] if got is not None else []
            else:  # a vector per group of eight lanes; one check for a block's accesses through one base
                ok, delta = (self._groups_checked(address, bits, kind, mem.offset) if shared
                             else self.grouped(address, bits, kind == "store"))
                leads = [self.lane_address(address, 8 * g, delta) for g in range(4)]
                self.emit(f"br i1 {ok}, label %{fast}, label %{slow}")
                self.put_label(fast)
                got = self.moved_groups(leads, mask, bits,
                                        None if kind == "load" else values[0])  # type: ignore[index]
                moved = [got] if got is not None else []
            arrived.append((self.block, moved))
            self.emit(f"br label %{done}")
            self.put_label(slow)
        if rowed is None and (shared or patterned):
            window = (self.base[2] - mem.offset) % (1 << 64)  # type: ignore[union-attr,index]
            if shared and count == 1 and not self.looping:  # behind the groups' check, which dominates
                # the block's later accesses through the register: this path's checks reach none of them
                kept = self.spans, self.deltas
                self.spans, self.deltas = {}, {}
                self._hoisted(kind, mask, bits, count, whole, window, values, done, arrived)
                self.spans, self.deltas = kept
            else:
                self._hoisted(kind, mask, bits, count, whole, window, values, done, arrived)
            if not shared:  # its checks were made on a path later accesses need not pass
                self.forget(self.base[0])  # type: ignore[index]
        self._to_buffer(values, bits)
        _, ok = self.access(kind, address, mask, bits, whole, count, skip)
        arrived.append((ok, self._from_buffer(kind, bits, count)))
        self.emit(f"br label %{done}")
        self.put_label(skip)
        self.emit(f"br label %{done}")
        arrived.append((skip, ["zeroinitializer"] * (count if kind == "load" else 0)))
        self.put_label(done)
        if kind != "load":
            return None
        return [
            self.op(f"phi {t} " + ", ".join(f"[{got[i]}, %{label}]" for label, got in arrived))
            for i in range(count)
        ]

    def _rowed(self, kind: str, count: int, bits: int) -> tuple[int, ...] | None:
        """The signed offsets of the lanes of the access's base register from lane 0's, where they
        are constants (:mod:`.lanes`) that a load moves by (:meth:`.direct.DirectMoves.rows`):
        one element a lane, each aligned, in at most :data:`.direct.MAX_RUNS` distinct runs."""
        name = self.base[0]  # type: ignore[index]
        if kind != "load" or count != 1 or name not in self.uniform:
            return None
        size = bits // 8
        offsets = self.signed_offsets(name)
        if any(o % size for o in offsets) or len(set(runs(offsets, size))) > MAX_RUNS:
            return None
        return offsets

    def _rows_checked(self, address: str, offsets: tuple[int, ...], bits: int,
                      shared: int | None) -> tuple[str, str]:
        """The check of a load :meth:`_rowed` moves: once per block for every load of its element
        size through the same register where the block has several (``shared``: this one's offset
        in the instruction), over the span of their offsets (an unrolled loop's ``[%r]``,
        ``[%r+64]`` ... ``[%r+960]``)."""
        if shared is None:
            return self.rows(address, offsets, bits)
        return self._once_a_block(("rows", bits), shared,
                                  lambda reach: self.rows(address, offsets, bits, reach))

    def _groups_checked(self, address: str, bits: int, kind: str, offset: int) -> tuple[str, str]:
        """The check of :meth:`.direct.DirectMoves.grouped` for an access through a register the block's
        other accesses of its size and kind share: once per block, over the span of their offsets
        (``[%rd2-4]`` and ``[%rd2+4]`` check ``[lo - 4, hi + 4]`` once; this one is at ``offset``)."""
        return self._once_a_block(("groups", bits, kind), offset,
                                  lambda reach: self.grouped(address, bits, kind == "store", reach))

    def _once_a_block(self, kind: tuple[Any, ...], offset: int,
                      check: Callable[[tuple[int, int]], tuple[str, str]]) -> tuple[str, str]:
        """``check(reach)`` made at the block's first access of its ``kind`` through the access's base
        register and reused by the others: ``reach`` spans the block's offsets through the register
        from this access's ``offset``."""
        name = self.base[0]  # type: ignore[index]
        group = (name, *kind, self.extent())
        if group not in self.deltas:
            least, most = self.offsets[name]
            self.deltas[group] = check((least - offset, most - offset))  # type: ignore[assignment]
        return self.deltas[group]  # type: ignore[return-value]

    def _hoisted(
        self, kind: str, mask: str, bits: int, count: int, whole: int, window: int, values: list[str] | None,
        done: str, arrived: list[tuple[str, list[str]]],
    ) -> None:
        """The access through a base register the block shares: its group's check (once per block),
        then a patterned load (:func:`.direct.patterned`) or the helpers' move; leaves the IR in the
        block the full check goes on from."""
        name, value, offset = self.base  # type: ignore[misc]
        key = (name, mask, bits // 8)
        if key not in self.spans:
            self.spans[key] = self.remembered_span(name, value, mask, bits // 8)
        lo, hi, bits_or, pattern, table = self.spans[key]
        group = (name, mask, whole, kind, window, self.extent())
        if group not in self.deltas:  # one check for every access of the group: the offsets' span
            least, most = self.offsets[name]
            low, high = (
                self.op(f"add i64 {x}, {signed_literal((window + o) % (1 << 64))}")
                for x, o in ((lo, least), (hi, most))
            )
            aligned = self.op(f"icmp eq i64 {self.op(f'and i64 {bits_or}, {whole - 1}')}, 0")
            ordered = self.op(f"icmp ule i64 {low}, {high}")
            self.deltas[group] = self.admitted(
                low, high, self.op(f"and i1 {aligned}, {ordered}"), whole, kind == "store"
            )
        delta = self.deltas[group]
        if table is not None and _patterned(kind, count, bits):  # a window, checked: one test a load
            quick = (group, "window")
            if quick not in self.deltas:
                ready = self.op(f"icmp ne i64 {table[0]}, 0")
                self.deltas[quick] = self.op(f"and i1 {ready}, {self.op(f'icmp ne i64 {delta}, -1')}")
            windows, other = self.label("windowed"), self.label("unwindowed")
            self.emit(f"br i1 {self.deltas[quick]}, label %{windows}, label %{other}")
            self.put_label(windows)
            moved = self.op(f"add i64 {delta}, {signed_literal(offset)}")
            arrived.append((self.block, self.windowed(moved, mask, bits, count, table)))
            self.emit(f"br label %{done}")
            self.put_label(other)
        fast, slow = self.label("hoisted"), self.label("checked")
        self.emit(f"br i1 {self.op(f'icmp ne i64 {delta}, -1')}, label %{fast}, label %{slow}")
        self.put_label(fast)
        moved = self.op(f"add i64 {delta}, {signed_literal(offset)}")
        if _patterned(kind, count, bits):
            got = self.patterned(value, self.op(f"trunc i64 {pattern} to i32"), moved, mask, bits, count)
            arrived.append((self.block, got))
        else:
            pointers = self.op(f"add {vec('i64')} {value}, {self.spread(moved, 'i64')}")
            self.emit(f"store {vec('i64')} {pointers}, ptr %addr")
            lanes = self.op(f"bitcast {vec('i1')} {mask} to i32")
            helper = "fetch" if kind == "load" else "put"
            self._to_buffer(values, bits)
            self.emit(f"call void @ptxb.{helper}_i{bits}(ptr %addr, i32 {lanes}, i64 {count}, ptr %val)")
            arrived.append((self.block, self._from_buffer(kind, bits, count)))
        self.emit(f"br label %{done}")
        self.put_label(slow)

    def remembered_span(self, name: str, value: str, mask: str, size: int) -> tuple[Any, ...]:
        """``@ptxb.span``'s four words for base register ``name`` (lanes ``value``) under ``mask`` and
        element ``size``, and its window (:meth:`.direct.DirectMoves.window_of`; None but for the
        registers of ``windows``): from the register's memo in the warp's state when it holds them
        for that mask and size, else computed and remembered. Every write of the register clears
        the memo (a warp-uniform step moves it: :meth:`_shift_memo`), and the state keeps it across
        barriers, so a loop's base that does not change (a row of a shared tile) is classified once
        per warp, not once per pass."""
        memo = self.memo(name)
        lanes = self.op(f"zext i32 {self.op(f'bitcast {_MASK} {mask} to i32')} to i64")
        key = self.op(f"or i64 {lanes}, {(size << 32) | (1 << 48)}")  # never 0, the cleared memo
        known = self.op(f"icmp eq i64 {self.op(f'load i64, ptr {memo}')}, {key}")
        fresh, joined = self.label("classify"), self.label("classified")
        self.emit(f"br i1 {known}, label %{joined}, label %{fresh}")
        self.put_label(fresh)
        self.emit(f"store {vec('i64')} {value}, ptr %spanin")
        self.emit(f"call void @ptxb.span(ptr %spanin, i32 {self.op(f'trunc i64 {lanes} to i32')}, "
                  f"i64 {size}, ptr %spanout)")
        for k in range(4):
            word = self.op(f"load i64, ptr {self.op(f'getelementptr i64, ptr %spanout, i64 {k}')}")
            self.emit(f"store i64 {word}, ptr {self.op(f'getelementptr i64, ptr {memo}, i64 {k + 1}')}")
        windowed = name in self.windows and size in (4, 8)  # the elements a permute moves
        if windowed:
            self.window_of(value, mask, size, memo)
        self.emit(f"store i64 {key}, ptr {memo}")
        self.emit(f"br label %{joined}")
        self.put_label(joined)
        spanned = tuple(self._memo_word(memo, k) for k in range(1, 5))
        if not windowed:
            return (*spanned, None)
        return (*spanned, self.window_parts(memo, 8 * size))

    def _to_buffer(self, values: list[str] | None, bits: int) -> None:
        """A store's values into ``%val``, where the helpers take them from."""
        for i, value in enumerate(values or ()):
            at = self.op(f"getelementptr i8, ptr %val, i64 {256 * i}")
            self.emit(f"store {vec(int_elem(bits))} {value}, ptr {at}, align 8")

    def _from_buffer(self, kind: str, bits: int, count: int) -> list[str]:
        """The ``count`` values a helper's load left in ``%val`` (none for a store)."""
        if kind != "load":
            return []
        t = vec(int_elem(bits))
        return [
            self.op(f"load {t}, ptr {self.op(f'getelementptr i8, ptr %val, i64 {256 * i}')}, align 8")
            for i in range(count)
        ]

    def access(
        self, kind: str, address: str, mask: str, bits: int, whole: int, count: int, skip: str
    ) -> tuple[str, str]:
        """Call ``@load_iN`` / ``@store_iN`` (:mod:`.runtime`) for ``count`` elements of ``bits`` at
        ``address``, checked as one ``whole``-byte access; values travel through ``%val``.  No
        active lane jumps to ``skip``, a failed check ends the warp with the fault code.  Returns the
        labels of the block that jumps to ``skip`` and of the one that goes on."""
        self._to_addresses(address)
        lanes = self.op(f"bitcast {vec('i1')} {mask} to i32")
        status = self.op(
            f"call i32 @ptxb.{kind}_i{bits}(ptr %ctx, ptr %addr, i32 {lanes}, i64 {whole}, i64 {count}, "
            f"i64 {self.extent()}, i32 %first, ptr %val)"
        )
        return self._checked(status, skip)

    def pointers(self, address: str, mask: str, size: int, skip: str) -> str:
        """Each lane's host pointer for a ``size``-byte read-modify-write at ``address`` (atomics)."""
        self._to_addresses(address)
        lanes = self.op(f"bitcast {vec('i1')} {mask} to i32")
        status = self.op(
            f"call i32 @ptxb.access(ptr %ctx, ptr %addr, i32 {lanes}, i64 {size}, i1 true, "
            f"i64 {self.extent()}, i32 %first, ptr %out)"
        )
        self._checked(status, skip)
        return self.op(f"load {vec('i64')}, ptr %out")

    def _to_addresses(self, address: str) -> None:
        """The lanes of ``address`` into ``%addr``, where the checking helpers read them.  Through a
        register the warp keeps as one scalar, ``@ptxb.lanes`` makes them from the scalar and a
        table of the lanes' steps: the vector is then not made on the block's main line (LLVM
        does not sink it into this path, its only user), and this path holds no vector work."""
        name = self._scalar_word(address)
        if name is None:
            self.emit(f"store {vec('i64')} {address}, ptr %addr")
            return
        width, scalar = self.registers[name], self.slot_value(name)
        if width == 32:
            scalar = self.op(f"zext i32 {scalar} to i64")
        steps = self.signed_offsets(name)
        table = self.step_tables.setdefault(steps, f"@steps.{len(self.step_tables)}")
        self.intrinsic(f"{table} = private unnamed_addr constant [{LANES} x i64] "
                       f"[{', '.join(f'i64 {step}' for step in steps)}], align 64")
        self.emit(f"call void @ptxb.lanes(ptr %addr, i64 {scalar}, ptr {table}, "
                  f"i1 {str(width == 32).lower()}, i64 {signed_literal(self.base[2])})")  # type: ignore[index]

    def extent(self) -> int:
        """The extent row the instruction being emitted is checked against (0: none)."""
        return self.extents[self.insn] if self.extents else 0

    def _checked(self, status: str, skip: str) -> tuple[str, str]:
        ok, bad, here = self.label("ok"), self.label("bad"), self.label("check")
        self.emit(f"br label %{here}")
        self.put_label(here)
        self.emit(f"switch i32 {status}, label %{bad} [i32 0, label %{ok} i32 1, label %{skip}]")
        self.put_label(bad)
        self.leave(FAULT)
        self.put_label(ok)
        return here, ok

    def leave(self, code: int) -> None:
        """End the warp with ``code``, naming the instruction being emitted."""
        self.emit(f"store i64 {self.insn}, ptr {self.ctx('err_insn')}")
        self.emit(f"store i32 {code}, ptr %rc")
        self.emit("br label %exit")

    def ctx(self, field: str) -> str:
        """A pointer to the launch context's ``field``."""
        return self.op(f"getelementptr i64, ptr %ctx, i64 {CTX[field]}")

    def spread(self, scalar: str, element: str) -> str:
        """A run-time scalar in every lane."""
        head = self.op(f"insertelement {vec(element)} poison, {element} {scalar}, i32 0")
        lanes = self.op(
            f"shufflevector {vec(element)} {head}, {vec(element)} poison, {vec('i32')} zeroinitializer"
        )
        self.spreads[lanes] = scalar
        return lanes

    def reduce(self, how: str, value: str, element: str) -> str:
        name = f"llvm.vector.reduce.{how}.v32{element}"
        self.intrinsic(f"declare {element} @{name}({vec(element)})")
        return self.op(f"call {element} @{name}({vec(element)} {value})")
