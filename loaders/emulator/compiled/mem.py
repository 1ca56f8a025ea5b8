"""Loads, stores and atomics as vector IR: every access checked by ``@resolve`` first.

A warp's lanes that point at consecutive elements load and store with one masked vector access,
others gather and scatter (LLVM orders a scatter's lanes lowest first, so the highest active
lane wins a shared address, as the interpreter's last thread does).  Atomics run lane by lane,
in lane order; only those whose result no instruction reads and whose operation commutes on
integers (add, and, or, xor, min, max) are compiled, so the final memory cannot depend on the
order warps run in.  A kernel-parameter load at a constant offset reads the parameter buffer
directly: the ABI has checked that it lies inside.
"""

from __future__ import annotations

from typing import Any

from ..build import Context
from ..ops_mem import _parts
from ..parse import Instruction, Mem, Reg, Sym, Vec
from .emit import Emitter
from .ops import lower
from .values import LANES, Unsupported, bits_of, int_elem, is_signed, vec

__all__: list[str] = []

_I64 = vec("i64")
_ATOMICS = {"add": "add", "and": "and", "or": "or", "xor": "xor", "min": "min", "max": "max"}


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
    t, count, space, flags = _shape(ins, frozenset(_ATOMICS) | {"inc", "dec", "cas", "exch", "noftz"})
    names = flags & set(_ATOMICS)
    if count != 1 or len(names) != 1 or t[0] not in "usb" or space not in ("global", "shared", "generic"):
        raise Unsupported(f"{ins.opcode}.{'.'.join(ins.mods)} (only integer add/and/or/xor/min/max)")
    returns = ins.opcode == "atom"
    if returns and isinstance(ins.operands[0], Reg) and ins.operands[0].name in e.reads:
        raise Unsupported(
            f"{ins.opcode}.{'.'.join(ins.mods)} whose old value is read (the order of lanes would show)"
        )
    rest = ins.operands[1:] if returns else ins.operands
    if len(rest) != 2:
        raise Unsupported(f"{ins.opcode} with {len(ins.operands)} operands")
    name = names.pop()
    size, width = bits_of(t) // 8, bits_of(t)
    operand = e.read(rest[1], t)
    skip = e.label("skip")
    pointers = e.pointers(e.address(rest[0], space), m, size, skip)
    before, top, act, after, done = (e.label(s) for s in ("ap", "al", "ad", "an", "ax"))
    e.emit(f"br label %{before}")
    e.put_label(before)
    e.emit(f"br label %{top}")
    e.put_label(top)
    i = e.tmp()
    step = e.tmp()
    e.emit(f"{i} = phi i32 [0, %{before}], [{step}, %{after}]")
    on = e.op(f"extractelement {vec('i1')} {m}, i32 {i}")
    e.emit(f"br i1 {on}, label %{act}, label %{after}")
    e.put_label(act)
    at = e.op(f"inttoptr i64 {e.op(f'extractelement {_I64} {pointers}, i32 {i}')} to ptr")
    b = e.op(f"extractelement {vec(int_elem(width))} {operand}, i32 {i}")
    old = e.op(f"load i{width}, ptr {at}, align {size}")
    if name in ("min", "max"):
        how = ("s" if is_signed(t) else "u") + name
        e.intrinsic(f"declare i{width} @llvm.{how}.i{width}(i{width}, i{width})")
        new = e.op(f"call i{width} @llvm.{how}.i{width}(i{width} {old}, i{width} {b})")
    else:
        new = e.op(f"{_ATOMICS[name]} i{width} {old}, {b}")
    e.emit(f"store i{width} {new}, ptr {at}, align {size}")
    e.emit(f"br label %{after}")
    e.put_label(after)
    e.emit(f"{step} = add i32 {i}, 1")
    e.emit(f"br i1 {e.op(f'icmp ult i32 {step}, {LANES}')}, label %{top}, label %{done}")
    e.put_label(done)
    e.emit(f"br label %{skip}")
    e.put_label(skip)
