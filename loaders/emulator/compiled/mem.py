"""Loads, stores and atomics as vector IR: every access checked by ``@resolve`` first.

A warp's lanes that point at consecutive elements load and store with one masked vector access,
others gather and scatter (LLVM orders a scatter's lanes lowest first, so the highest active
lane wins a shared address, as the interpreter's last thread does).  Atomics (integer add, and,
or, xor, min, max, inc, dec, exch, cas; float add and exch) run lane by lane, in lane order, and
a launch's warps and blocks run in order: where an address takes the atomics of one instruction
that each thread runs once, they land in thread order, as the interpreter's do (the same old
values, the same float sums).  Where an address takes several (a loop, numba's float
``atomic.max`` retrying its ``atom.cas``), the compiled tier runs a warp's before the next
warp's, the interpreter a batch of threads' together: a result that depends on that order (a
race on a GPU) may differ between the tiers, each from an order a GPU could take; one that does
not (a maximum) agrees.  A kernel-parameter load at a constant offset reads the parameter buffer
directly: the ABI has checked that it lies inside.
"""

from __future__ import annotations

from typing import Any

from ..build import Context
from ..ops_mem import _parts
from ..parse import Instruction, Mem, Reg, Sym, Vec
from .emit import Emitter
from .ops import lower
from .values import LANES, Unsupported, bits_of, elem, int_elem, is_float, is_signed, vec

__all__: list[str] = []

_I64 = vec("i64")
_UPDATES = ("add", "and", "or", "xor", "min", "max", "inc", "dec", "cas", "exch")


class _Shim:
    """What :func:`..ops_mem._parts` asks of a build context, for the compiled tier."""

    state_space = staticmethod(Context.state_space)

    def __init__(self, ins: Instruction):
        self.ins = ins

    @staticmethod
    def unsupported(reason: str) -> Unsupported:
        return Unsupported(reason)


def _shape(ins: Instruction, extra: frozenset[str] = frozenset()) -> tuple[str, int, str, set[str]]:
    t, count, space, flags = _parts(_Shim(ins), extra)  # type: ignore[arg-type]
    if t in ("f16", "bf16", "f16x2", "bf16x2", "tf32"):
        raise Unsupported(f"{ins.opcode} of .{t}")
    return t, count, space, flags


def _items(operand: Any, count: int) -> list[Any]:
    items = list(operand.items) if isinstance(operand, Vec) else [operand]
    if len(items) != count:
        raise Unsupported(f"{count} elements expected (got {len(items)})")
    return items


def _param_offset(e: Emitter, mem: Any, space: str, whole: int) -> int | None:
    """The offset of ``[kernel_param+off]`` when it is aligned and inside the declared parameters."""
    if space != "param" or not isinstance(mem, Mem) or not isinstance(mem.base, Sym):
        return None
    sym = e.symbol(mem.base.name)
    if sym is None or sym.space != "kparam":
        raise Unsupported(f".param variable {mem.base.name!r} (a call sequence)")
    offset = sym.value + mem.offset
    if offset < 0 or offset % whole or offset + whole > e.param_size:
        return None
    return offset


@lower("ld", "ldu")
def _ld(e: Emitter, ins: Instruction, m: str) -> None:
    t, count, space, _ = _shape(ins)
    d, src = ins.operands if len(ins.operands) == 2 else (None, None)
    items = _items(d, count)
    size = bits_of(t) // 8
    it = vec(int_elem(8 * size))
    offset = _param_offset(e, src, space, size * count)
    if offset is not None:
        for i, item in enumerate(items):
            at = e.op(f"getelementptr i8, ptr %param, i64 {offset + i * size}")
            value = e.op(f"load i{8 * size}, ptr {at}, align {size}")
            head = e.op(f"insertelement {it} poison, i{8 * size} {value}, i32 0")
            e.write(
                item,
                e.from_bits(e.op(f"shufflevector {it} {head}, {it} poison, {vec('i32')} zeroinitializer"), t),
                t,
                m,
            )
        return
    values = e.move("load", src, space, m, 8 * size, count)
    for item, value in zip(items, values, strict=True):  # lanes that ran none keep their registers
        e.write(item, e.from_bits(value, t), t, m)


@lower("st")
def _st(e: Emitter, ins: Instruction, m: str) -> None:
    t, count, space, _ = _shape(ins)
    dst, src = ins.operands if len(ins.operands) == 2 else (None, None)
    if space == "param":
        raise Unsupported("st.param (a call sequence)")
    size = bits_of(t) // 8
    values = [e.to_bits(e.read(item, t), t) for item in _items(src, count)]
    e.move("store", dst, space, m, 8 * size, count, values)


@lower("atom", "red")
def _atom(e: Emitter, ins: Instruction, m: str) -> None:
    t, count, space, flags = _shape(ins, frozenset(_UPDATES) | {"noftz"})
    names = flags & set(_UPDATES)
    name = names.pop() if len(names) == 1 else None
    floating = is_float(t)
    if (count != 1 or name is None or space not in ("global", "shared", "generic")
            or (floating and name not in ("add", "exch")) or (t[0] == "s" and name in ("inc", "dec"))):
        raise Unsupported(f"{ins.opcode}.{'.'.join(ins.mods)} (compiled: one integer, or float add and exch, "
                          "on global, shared or generic memory)")
    returns = ins.opcode == "atom"
    rest = ins.operands[1:] if returns else ins.operands
    read = returns and isinstance(ins.operands[0], Reg) and ins.operands[0].name in e.reads
    if len(rest) != (3 if name == "cas" else 2):
        raise Unsupported(f"{ins.opcode} with {len(ins.operands)} operands")
    size, scalar = bits_of(t) // 8, elem(t)
    operands = [e.read(operand, t) for operand in rest[1:]]
    skip = e.label("skip")
    pointers = e.pointers(e.address(rest[0], space), m, size, skip)
    before, top, act, after, done = (e.label(s) for s in ("ap", "al", "ad", "an", "ax"))
    e.emit(f"br label %{before}")
    e.put_label(before)
    e.emit(f"br label %{top}")
    e.put_label(top)
    i, step, olds, kept, updated = e.tmp(), e.tmp(), e.tmp(), e.tmp(), e.tmp()
    e.emit(f"{i} = phi i32 [0, %{before}], [{step}, %{after}]")
    if read:  # each lane's old value, gathered as the lanes go
        e.emit(f"{olds} = phi {vec(scalar)} [zeroinitializer, %{before}], [{kept}, %{after}]")
    on = e.op(f"extractelement {vec('i1')} {m}, i32 {i}")
    e.emit(f"br i1 {on}, label %{act}, label %{after}")
    e.put_label(act)
    at = e.op(f"inttoptr i64 {e.op(f'extractelement {_I64} {pointers}, i32 {i}')} to ptr")
    values = [e.op(f"extractelement {vec(scalar)} {operand}, i32 {i}") for operand in operands]
    old = e.op(f"load {scalar}, ptr {at}, align {size}")
    e.emit(f"store {scalar} {_updated(e, name, t, old, values[0], values[-1])}, ptr {at}, align {size}")
    if read:
        e.emit(f"{updated} = insertelement {vec(scalar)} {olds}, {scalar} {old}, i32 {i}")
    e.emit(f"br label %{after}")
    e.put_label(after)
    if read:
        e.emit(f"{kept} = phi {vec(scalar)} [{olds}, %{top}], [{updated}, %{act}]")
    e.emit(f"{step} = add i32 {i}, 1")
    e.emit(f"br i1 {e.op(f'icmp ult i32 {step}, {LANES}')}, label %{top}, label %{done}")
    e.put_label(done)
    if read:
        e.write(ins.operands[0], kept, t, m)
    e.emit(f"br label %{skip}")
    e.put_label(skip)


def _updated(e: Emitter, name: str, t: str, old: str, b: str, c: str) -> str:
    """The value atomic ``name`` leaves where ``old`` was, as the interpreter's ``_update`` has it."""
    width, scalar = bits_of(t), elem(t)
    if name == "exch":
        return b
    if name == "cas":
        return e.op(f"select i1 {e.op(f'icmp eq {scalar} {old}, {b}')}, {scalar} {c}, {scalar} {old}")
    if name == "inc":  # old >= b ? 0 : old + 1
        wraps = e.op(f"icmp uge {scalar} {old}, {b}")
        return e.op(f"select i1 {wraps}, {scalar} 0, {scalar} {e.op(f'add {scalar} {old}, 1')}")
    if name == "dec":  # old == 0 or old > b ? b : old - 1
        wraps = e.op(f"or i1 {e.op(f'icmp eq {scalar} {old}, 0')}, {e.op(f'icmp ugt {scalar} {old}, {b}')}")
        return e.op(f"select i1 {wraps}, {scalar} {b}, {scalar} {e.op(f'sub {scalar} {old}, 1')}")
    if name in ("min", "max"):
        how = ("s" if is_signed(t) else "u") + name
        e.intrinsic(f"declare i{width} @llvm.{how}.i{width}(i{width}, i{width})")
        return e.op(f"call i{width} @llvm.{how}.i{width}(i{width} {old}, i{width} {b})")
    return e.op(f"{'fadd' if is_float(t) else name} {scalar} {old}, {b}")
