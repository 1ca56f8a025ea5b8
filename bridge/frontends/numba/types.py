"""numba types -> ptxbridge parameter kinds."""

from __future__ import annotations

from typing import Any

from ptxbridge.abi.dtypes import DType, dtype
from ptxbridge.abi.errors import ArgumentError
from ptxbridge.abi.kinds import (
    NumbaArray,
    NumbaRecordArray,
    Opaque,
    ParamType,
    Pointer,
    Scalar,
    Struct,
    StructField,
    Tuple,
)
from ptxbridge.abi.lowering import field_offsets, memory_layout

__all__ = ["to_dtype", "to_param_type"]

_SUPPORTED = "booleans, integers, enum members, floats, complex, arrays, records, tuples and pointers"


def to_dtype(nbtype: Any, where: str) -> DType:
    """The element type of a numba scalar type (``float32`` -> ``f32``)."""
    from numba.cuda import types

    if isinstance(nbtype, types.Boolean):
        return dtype("bool")
    if isinstance(nbtype, types.Integer):
        return dtype(f"{'i' if nbtype.signed else 'u'}{nbtype.bitwidth}")
    if isinstance(nbtype, types.Float):
        return dtype(f"f{nbtype.bitwidth}")
    if isinstance(nbtype, types.Complex):
        return dtype(f"c{nbtype.bitwidth}")
    raise ArgumentError(f"{where}: numba type {nbtype} is not a number type ptxbridge knows "
                        f"(supported: {_SUPPORTED})")


def to_param_type(nbtype: Any, where: str, *, c_abi: bool = False) -> ParamType:
    """The parameter kind of a numba argument type.

    ``c_abi``: the type is in a device function exported with ``abi="c"``, where
    only scalars, pointers and arrays have one agreed lowering across languages.
    """
    from numba.cuda import types

    if isinstance(nbtype, types.Array):
        if nbtype.layout not in ("C", "F", "A"):
            raise ArgumentError(f"{where}: array layout must be C, F or A (got {nbtype.layout!r})")
        if isinstance(nbtype.dtype, types.Record):  # numba.cuda.random's xoroshiro128p states
            record = _record(nbtype.dtype, f"{where} (array element)")
            return NumbaRecordArray(record, nbtype.ndim, nbtype.layout)
        return NumbaArray(to_dtype(nbtype.dtype, f"{where} (array element)"), nbtype.ndim, nbtype.layout)
    if isinstance(nbtype, types.CPointer):
        return Pointer(to_param_type(nbtype.dtype, f"{where} (pointee)", c_abi=c_abi))
    if isinstance(nbtype, types.RawPointer):
        return Pointer(None)
    if c_abi and isinstance(nbtype, (types.Complex, types.Record, types.BaseTuple)):
        raise ArgumentError(f"{where}: {nbtype} has no portable C-ABI lowering; a device function "
                            f"exported with abi='c' takes scalars, pointers and arrays")
    if isinstance(nbtype, types.Record):
        return _record(nbtype, where)
    if isinstance(nbtype, types.BaseTuple):
        return Tuple(tuple(to_param_type(t, f"{where} item {i}") for i, t in enumerate(nbtype.types)))
    if isinstance(nbtype, types.EnumMember):  # Enum and IntEnum: passed as the value, as numba does
        return to_param_type(nbtype.dtype, f"{where} ({nbtype.instance_class.__name__} value)", c_abi=c_abi)
    return Scalar(to_dtype(nbtype, where))


def _record(nbtype: Any, where: str) -> Struct:
    """A numba Record as a repr(C) struct; a packed record has no such layout and is refused."""
    from numba.cuda import types

    fields = []
    for fname, field in nbtype.fields.items():
        ftype = field.type
        if isinstance(ftype, types.NestedArray):  # fixed-size array member: bytes of the element type
            size, align = memory_layout(to_param_type(ftype.dtype, f"{where} field {fname!r}"))
            fields.append(StructField(fname, Opaque(ftype.nitems * size, align)))
        elif isinstance(ftype, (types.CharSeq, types.UnicodeCharSeq)):  # NumPy 'S5' / 'U3': bytes, UCS-4
            unit = 1 if isinstance(ftype, types.CharSeq) else 4
            fields.append(StructField(fname, Opaque(ftype.count * unit, unit)))
        else:
            fields.append(StructField(fname, to_param_type(ftype, f"{where} field {fname!r}")))
    struct = Struct("record", tuple(fields))
    offsets = tuple(field.offset for field in nbtype.fields.values())
    if offsets != field_offsets(struct) or nbtype.size != memory_layout(struct)[0]:
        raise ArgumentError(
            f"{where}: record {nbtype} is not laid out like a C struct (offsets {list(offsets)}, "
            f"size {nbtype.size}); build its NumPy dtype with align=True")
    return struct
