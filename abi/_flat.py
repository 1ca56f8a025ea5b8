"""Flat PTX parameters and the small builders every kind's lowering rule is written with.

The rules themselves (which kind becomes which flat parameters under which
convention) are in the kind table, :mod:`.kind_entries`; the public face is
:mod:`.lowering`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .dtypes import KDL_COMPLEX, DType, dtype
from .params import Convention

__all__ = ["FLATTENING", "FlatParam", "aggregate", "axes", "lower_scalar", "record_layout", "scalar_layout",
           "u64"]

FLATTENING = (Convention.NUMBA, Convention.CUTILE)  # conventions that pass tuple items one by one


@dataclass(frozen=True, slots=True)
class FlatParam:
    """One PTX ``.param``: name (``y``, ``y.len``, ``a.shape[1]``), PTX type, size, alignment.

    ``ptx_type`` is a PTX fundamental type (``u64``, ``s32``, ``f32``, ``b16``)
    or ``b8`` for an aggregate ``.param .align A .b8 name[size]``.
    ``source`` is the index of the signature parameter it came from.
    """

    name: str
    ptx_type: str
    size: int
    align: int
    source: int
    aggregate: bool = False


def scalar_ptx_type(dt: DType) -> str:
    if dt.name == "bool":
        return "u8"
    if dt.is_float and dt.bits in (32, 64):
        return f"f{dt.bits}"
    if dt.is_signed:
        return f"s{dt.bits}"
    if dt.is_integer:
        return f"u{dt.bits}"
    return f"b{dt.bits}"  # f16, bf16, fp8: raw bits


def aggregate(name: str, size: int, align: int, source: int) -> list[FlatParam]:
    """One ``.b8`` array parameter; zero-sized types produce none (cuda-oxide drops ZSTs)."""
    if size == 0:
        return []
    return [FlatParam(name, "b8", size, align, source, aggregate=True)]


def u64(name: str, source: int) -> FlatParam:
    return FlatParam(name, "u64", 8, 8, source)


def axes(prefix: str, ndim: int, ptx_type: str, size: int, source: int) -> list[FlatParam]:
    """``prefix[0]`` .. ``prefix[ndim-1]``, one parameter per axis."""
    return [FlatParam(f"{prefix}[{i}]", ptx_type, size, size, source) for i in range(ndim)]


def scalar_layout(dt: DType) -> tuple[int, int]:
    """(size, align) of a scalar in memory; a complex number aligns like one of its parts."""
    if dt.code == KDL_COMPLEX:
        return dt.itemsize, dt.itemsize // 2
    return dt.itemsize, dt.itemsize


def lower_scalar(name: str, dt: DType, conv: Convention, source: int) -> list[FlatParam]:
    """A number by value: natural width; f16 (and bf16 in c / cutile) an aggregate[2] of align 2;
    complex one aggregate, or two parts in numba."""
    if dt.code == KDL_COMPLEX:
        if conv is Convention.NUMBA:
            part = dtype("f32" if dt.bits == 64 else "f64")
            return [FlatParam(f"{name}.real", scalar_ptx_type(part), part.itemsize, part.itemsize, source),
                    FlatParam(f"{name}.imag", scalar_ptx_type(part), part.itemsize, part.itemsize, source)]
        align = dt.itemsize if conv is Convention.C else dt.itemsize // 2
        return aggregate(name, dt.itemsize, align, source)
    if dt.name == "f16" and conv is not Convention.NUMBA:
        return aggregate(name, 2, 2, source)
    if dt.name == "bf16" and conv in (Convention.C, Convention.CUTILE):
        return aggregate(name, 2, 2, source)
    return [FlatParam(name, scalar_ptx_type(dt), dt.itemsize, dt.itemsize, source)]


def record_layout(members: Sequence[tuple[int, int]]) -> tuple[list[int], int, int]:
    """Offsets, size and alignment of a repr(C) record of members (size, align): natural
    alignment, size padded to the record's alignment."""
    offsets: list[int] = []
    offset, align = 0, 1
    for size, member_align in members:
        offset = -(-offset // member_align) * member_align
        offsets.append(offset)
        offset += size
        align = max(align, member_align)
    return offsets, -(-offset // align) * align, align
