"""Lowering: one signature parameter -> the flat PTX parameters its convention makes.

This is the only place that knows each frontend's calling convention
(FRONTENDS.md sections 1-5).  Decision table, per parameter kind:

============== ======================================================== =====================
kind           c / oxide                                                numba / cutile
============== ======================================================== =====================
Scalar         natural width; f16 (and bf16 in c) an aggregate[2]      natural width; f16 b16
               align 2; bf16 u16 bits in oxide; complex one aggregate  (numba); complex two
Pointer        u64                                                      u64
Slice          u64 pointer, u64 length                                  same
DisjointSlice  u64 pointer, u64 length (+ u32 row width when 2-D)       same
NumbaArray     meminfo, parent, nitems, itemsize, data, shape, strides  same (all u64)
TileArray      u64 pointer, ndim shapes, ndim strides (u32, or u64     same
               for i64 index)
TileList       u64 pointer, u32 count                                   same
TileTensor     u64 pointer, rank s32 dims, rank s32 strides (+ rank    same
               s32 partition dims and strides for partitions)
Struct         one aggregate with repr(C) layout; size 0 dropped        numba: u64 pointer
Tuple          one aggregate (repr(C) order)                            flattened
Opaque         one aggregate; size 0 (a ZST) dropped                    same
Constant       nothing                                                  nothing
============== ======================================================== =====================
"""

from __future__ import annotations

from dataclasses import dataclass

from .dtypes import KDL_COMPLEX, DType, dtype
from .errors import AbiMismatchError
from .kinds import (
    Constant,
    DisjointSlice,
    NumbaArray,
    Opaque,
    ParamType,
    Pointer,
    Scalar,
    Slice,
    Struct,
    TileArray,
    TileList,
    TileTensor,
    Tuple,
)
from .params import Convention, Param

__all__ = ["FlatParam", "field_offsets", "lower_param", "lower_params", "memory_layout"]

_FLATTENING = (Convention.NUMBA, Convention.CUTILE)


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


def _scalar_ptx_type(dt: DType) -> str:
    if dt.name == "bool":
        return "u8"
    if dt.is_float and dt.bits in (32, 64):
        return f"f{dt.bits}"
    if dt.is_signed:
        return f"s{dt.bits}"
    if dt.is_integer:
        return f"u{dt.bits}"
    return f"b{dt.bits}"  # f16, bf16, fp8: raw bits


def memory_layout(t: ParamType) -> tuple[int, int]:
    """(size, align) of a value of type ``t`` in memory (repr(C) / C rules)."""
    if isinstance(t, Scalar):
        if t.dtype.code == KDL_COMPLEX:
            return t.dtype.itemsize, t.dtype.itemsize // 2
        return t.dtype.itemsize, t.dtype.itemsize
    if isinstance(t, Pointer):
        return 8, 8
    if isinstance(t, (Slice, DisjointSlice)):
        return 16, 8
    if isinstance(t, Opaque):
        return t.size, t.align
    if isinstance(t, Struct):
        return _record_layout([f.type for f in t.fields])[1:]
    if isinstance(t, Tuple):
        return _record_layout(list(t.items))[1:]
    if isinstance(t, Constant):
        return 0, 1
    raise AbiMismatchError(f"{type(t).__name__} cannot be passed by value (it is a struct field or "
                           f"tuple item under a convention that passes those as one aggregate)")


def _record_layout(members: list[ParamType]) -> tuple[list[int], int, int]:
    """Offsets, size and alignment of a repr(C) record: natural alignment, size padded."""
    offsets: list[int] = []
    offset, align = 0, 1
    for member in members:
        size, member_align = memory_layout(member)
        offset = -(-offset // member_align) * member_align
        offsets.append(offset)
        offset += size
        align = max(align, member_align)
    return offsets, -(-offset // align) * align, align


def field_offsets(struct: Struct) -> tuple[int, ...]:
    """Byte offset of each field of a repr(C) struct, in declaration order."""
    return tuple(_record_layout([f.type for f in struct.fields])[0])


def _aggregate(name: str, size: int, align: int, source: int) -> list[FlatParam]:
    if size == 0:  # zero-sized types produce no PTX parameter (cuda-oxide, FRONTENDS.md 2)
        return []
    return [FlatParam(name, "b8", size, align, source, aggregate=True)]


def _u64(name: str, source: int) -> FlatParam:
    return FlatParam(name, "u64", 8, 8, source)


def _lower_scalar(name: str, dt: DType, conv: Convention, source: int) -> list[FlatParam]:
    if dt.code == KDL_COMPLEX:
        if conv is Convention.NUMBA:
            part = dtype("f32" if dt.bits == 64 else "f64")
            return [FlatParam(f"{name}.real", _scalar_ptx_type(part), part.itemsize, part.itemsize, source),
                    FlatParam(f"{name}.imag", _scalar_ptx_type(part), part.itemsize, part.itemsize, source)]
        align = dt.itemsize if conv is Convention.C else dt.itemsize // 2
        return _aggregate(name, dt.itemsize, align, source)
    if dt.name == "f16" and conv is not Convention.NUMBA:
        return _aggregate(name, 2, 2, source)
    if dt.name == "bf16" and conv in (Convention.C, Convention.CUTILE):
        return _aggregate(name, 2, 2, source)
    return [FlatParam(name, _scalar_ptx_type(dt), dt.itemsize, dt.itemsize, source)]


def _axes(prefix: str, ndim: int, ptx_type: str, size: int, source: int) -> list[FlatParam]:
    return [FlatParam(f"{prefix}[{i}]", ptx_type, size, size, source) for i in range(ndim)]


def lower_param(name: str, t: ParamType, conv: Convention, source: int = 0) -> list[FlatParam]:
    """The flat PTX parameters of one parameter ``name: t`` under ``conv``."""
    if isinstance(t, Scalar):
        return _lower_scalar(name, t.dtype, conv, source)
    if isinstance(t, Pointer):
        return [_u64(name, source)]
    if isinstance(t, Slice):
        return [_u64(name, source), _u64(f"{name}.len", source)]
    if isinstance(t, DisjointSlice):
        flat = [_u64(name, source), _u64(f"{name}.len", source)]
        if t.rows_2d:
            flat.append(FlatParam(f"{name}.row_width", "u32", 4, 4, source))
        return flat
    if isinstance(t, NumbaArray):
        head = [_u64(f"{name}.{part}", source)
                for part in ("meminfo", "parent", "nitems", "itemsize", "data")]
        return (head + _axes(f"{name}.shape", t.ndim, "u64", 8, source)
                + _axes(f"{name}.strides", t.ndim, "u64", 8, source))
    if isinstance(t, TileArray):
        ptx_type, size = ("u64", 8) if t.index == "i64" else ("u32", 4)
        return ([_u64(name, source)] + _axes(f"{name}.shape", t.ndim, ptx_type, size, source)
                + _axes(f"{name}.strides", t.ndim, ptx_type, size, source))
    if isinstance(t, TileList):
        return [_u64(name, source), FlatParam(f"{name}.len", "u32", 4, 4, source)]
    if isinstance(t, TileTensor):
        parts = ["dims", "strides"] + (["partition_dims", "partition_strides"] if t.partition else [])
        flat = [_u64(name, source)]
        for part in parts:
            flat += _axes(f"{name}.{part}", t.rank, "s32", 4, source)
        return flat
    if isinstance(t, Struct):
        if conv is Convention.NUMBA:
            return [_u64(name, source)]  # numba passes records by device pointer
        return _aggregate(name, *memory_layout(t), source)
    if isinstance(t, Tuple):
        if conv in _FLATTENING:
            flat: list[FlatParam] = []
            for i, item in enumerate(t.items):
                flat += lower_param(f"{name}.{i}", item, conv, source)
            return flat
        return _aggregate(name, *memory_layout(t), source)
    if isinstance(t, Opaque):
        return _aggregate(name, t.size, t.align, source)
    if isinstance(t, Constant):
        return []
    raise TypeError(f"parameter {name!r}: unknown parameter kind {type(t).__name__}")


def lower_params(params: tuple[Param, ...], conv: Convention) -> list[FlatParam]:
    """Flat PTX parameters of a whole parameter list, in declaration order."""
    flat: list[FlatParam] = []
    for index, param in enumerate(params):
        flat += lower_param(param.name, param.type, conv, index)
    return flat
