"""Python values -> parameter bytes: scalars (range-checked) and by-value aggregates.

Used by the argument binders (:mod:`ptxbridge.launch.args`) for Scalar parameters and
for structs, tuples and opaque blobs passed by value.  Struct field offsets
come from :func:`ptxbridge.abi.lowering.field_offsets`, the one place that
lays out records.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import struct
from collections.abc import Callable
from typing import Any

from ptxbridge.abi.dtypes import DTYPES, KDL_COMPLEX, DType
from ptxbridge.abi.kind_entries import KINDS
from ptxbridge.abi.kinds import ParamType, Struct, StructField
from ptxbridge.abi.layout import PACK_CODES
from ptxbridge.abi.lowering import FlatParam, field_offsets, lower_param, memory_layout
from ptxbridge.abi.params import Convention

__all__ = ["BF16_MAX", "F16_MAX", "F32_MAX", "ValueProblem", "address_fields", "scalar_converter", "encoder",
           "bf16_bits"]

F32_MAX = 3.4028234663852886e38
F16_MAX = 65504.0
BF16_MAX = 3.3895313892515355e38  # 0x7F7F: larger values round to infinity
_INT_CODES = {8: "b", 16: "h", 32: "i", 64: "q"}


class ValueProblem(Exception):
    """Why a value does not fit; the binder turns it into an ArgumentError naming kernel and argument."""


def bf16_bits(x: float) -> int:
    """IEEE binary32 -> bfloat16 bits, rounded to nearest even (NaN stays a quiet NaN)."""
    if math.isnan(x):
        return 0x7FC0
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def _as_int(value: Any, dt: DType) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueProblem(f"expected an integer for {dt} (got {type(value).__name__} {value!r})")
    value = int(value)
    lo, hi = (-(1 << (dt.bits - 1)), (1 << (dt.bits - 1)) - 1) if dt.is_signed else (0, (1 << dt.bits) - 1)
    if not lo <= value <= hi:
        raise ValueProblem(f"{value} does not fit {dt} (range {lo}..{hi})")
    return value


def _wrapped_int(value: Any, dt: DType) -> int:
    """numba's rule for an integer argument: typed as int64 (uint64 above that), then cast to the
    parameter's width, wrapping two's complement (0xFFFFFFFF for int32 is -1)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueProblem(f"expected an integer for {dt} (got {type(value).__name__} {value!r})")
    value = int(value)
    if not -(1 << 63) <= value < 1 << 64:
        raise ValueProblem(f"{value} fits neither int64 nor uint64, so numba cannot pass it as {dt}")
    value &= (1 << dt.bits) - 1
    return value - (1 << dt.bits) if dt.is_signed and value >> (dt.bits - 1) else value


def _as_float(value: Any, dt: DType, limit: float | None) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueProblem(f"expected a real number for {dt} (got {type(value).__name__} {value!r})")
    try:
        value = float(value)
    except OverflowError:
        bits = int(value).bit_length()
        raise ValueProblem(f"a {bits}-bit integer is outside the finite range of {dt}") from None
    if limit is not None and math.isfinite(value) and abs(value) > limit:
        raise ValueProblem(f"{value!r} is outside the finite range of {dt} (|x| <= {limit})")
    return value


def _as_bool(value: Any, dt: DType) -> int:
    numpy_bool = getattr(getattr(value, "dtype", None), "kind", None) == "b"  # numpy.bool_ is no Integral
    if (numpy_bool or isinstance(value, numbers.Integral)) and int(value) in (0, 1):
        return int(value)
    raise ValueProblem(f"expected a bool (got {type(value).__name__} {value!r})")


def _as_complex(value: Any, dt: DType) -> complex:
    if isinstance(value, bool) or not isinstance(value, numbers.Complex):
        raise ValueProblem(f"expected a complex number for {dt} (got {type(value).__name__} {value!r})")
    try:
        z = complex(value)
    except OverflowError:
        raise ValueProblem(f"a {type(value).__name__} is outside the finite range of {dt}") from None
    if dt.bits == 64 and any(math.isfinite(v) and abs(v) > F32_MAX for v in (z.real, z.imag)):
        raise ValueProblem(f"{value!r} is outside the finite range of {dt} (|part| <= {F32_MAX})")
    return z


def _scalar_bytes(dt: DType, value: Any) -> bytes:
    """The little-endian memory image of a scalar of type ``dt``."""
    if dt.name == "bool":
        return bytes([_as_bool(value, dt)])
    if dt.is_integer:
        code = _INT_CODES[dt.bits]
        return struct.pack("<" + (code if dt.is_signed else code.upper()), _as_int(value, dt))
    if dt.code == KDL_COMPLEX:
        z = _as_complex(value, dt)
        return struct.pack("<ff" if dt.bits == 64 else "<dd", z.real, z.imag)
    if dt.name == "f32":
        return struct.pack("<f", _as_float(value, dt, F32_MAX))
    if dt.name == "f64":
        return struct.pack("<d", _as_float(value, dt, None))
    if dt.name == "f16":
        return struct.pack("<e", _as_float(value, dt, F16_MAX))
    if dt.name == "bf16":
        return struct.pack("<H", bf16_bits(_as_float(value, dt, BF16_MAX)))
    # fp8: no portable Python conversion; take raw bits.
    return bytes([_as_int(value, DTYPES["u8"])])


def scalar_converter(dt: DType, flat: list[FlatParam], wrap: bool = False) -> Callable[[Any], tuple]:
    """value -> the values the packer takes for the flat params of one scalar parameter.

    ``wrap``: integers wrap to the parameter's width as numba's dispatcher does (numba
    convention); otherwise an integer out of the parameter's range is refused.
    """
    if len(flat) == 2:  # numba complex: real and imaginary parts as two params
        def split(value: Any) -> tuple:
            z = _as_complex(value, dt)
            return (z.real, z.imag)
        return split
    (param,) = flat
    if param.aggregate:
        return lambda value: (_scalar_bytes(dt, value),)
    if param.ptx_type in ("b16", "b8"):  # raw bits: f16 (numba), bf16 (oxide), fp8
        return lambda value: (int.from_bytes(_scalar_bytes(dt, value), "little"),)
    if dt.name == "bool":
        return lambda value: (_as_bool(value, dt),)
    if dt.is_integer:
        if wrap:
            return lambda value: (_wrapped_int(value, dt),)
        return lambda value: (_as_int(value, dt),)
    limit = F32_MAX if dt.name == "f32" else None
    return lambda value: (_as_float(value, dt, limit),)


def _fields_of(value: Any, struct_type: Struct) -> list[Any]:
    names = [f.name for f in struct_type.fields]
    if isinstance(value, dict):
        missing = [n for n in names if n not in value]
        extra = [k for k in value if k not in names]
        if missing or extra:
            raise ValueProblem(f"struct {struct_type.name} fields are {names} "
                               f"(got missing {missing}, unknown {extra})")
        return [value[n] for n in names]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        try:
            return [getattr(value, n) for n in names]
        except AttributeError as exc:
            raise ValueProblem(f"struct {struct_type.name} fields are {names} (got dataclass "
                               f"{type(value).__name__} without {exc.name!r})") from None
    record_names = getattr(getattr(value, "dtype", None), "names", None)
    if record_names is not None:  # a NumPy structured scalar
        if list(record_names) != names:
            raise ValueProblem(f"struct {struct_type.name} fields are {names} (got record fields "
                               f"{list(record_names)})")
        return [_record_field(value, n) for n in names]
    raise ValueProblem(f"struct {struct_type.name} takes a dict, a dataclass or a NumPy structured "
                       f"scalar (got {type(value).__name__})")


def _record_field(record: Any, name: str) -> Any:
    """A field of a NumPy structured scalar; text fields ('S5', 'U3') as their stored bytes, which
    NumPy would hand back with the padding stripped."""
    dt, offset = record.dtype.fields[name][:2]
    if dt.kind in "SU":
        return memoryview(record.tobytes())[offset:offset + dt.itemsize]
    return record[name]


Pointers = Callable[[Any, ParamType], tuple[int, ...]]
Encoder = Callable[[Any, Pointers], bytes]


def address_fields(t: ParamType) -> list[tuple[int, str]]:
    """(byte offset, PTX type) of each value a pointer, slice... carries inside an aggregate: its C
    lowering, each value at its natural alignment (the C launch plan writes them at these places too)."""
    fields, cursor = [], 0
    for flat in lower_param("", t, Convention.C):
        offset = -(-cursor // flat.align) * flat.align
        fields.append((offset, flat.ptx_type))
        cursor = offset + flat.size
    return fields


def _address_encoder(t: ParamType) -> Encoder:
    """A pointer, slice... inside an aggregate: the values a tensor gives at :func:`address_fields`,
    padded to the kind's by-value size."""
    size, _align = memory_layout(t)
    fmt, cursor = ["<"], 0
    for offset, ptx_type in address_fields(t):
        fmt += [f"{offset - cursor}x", PACK_CODES[ptx_type]]
        cursor = offset + struct.calcsize("<" + PACK_CODES[ptx_type])
    fmt.append(f"{size - cursor}x")
    pack = struct.Struct("".join(fmt)).pack
    return lambda value, pointer: pack(*pointer(value, t))


def _bytes_encoder(t: ParamType) -> Encoder:
    def encode(value: Any, pointer: Pointers) -> bytes:
        try:  # bytes(5) would be five zero bytes: only buffer-protocol objects are data
            # None and () (Rust's unit) stand for the empty value of a zero-sized parameter
            empty = value is None or (isinstance(value, tuple) and not value)  # ndarray == () broadcasts
            data = b"" if empty else bytes(memoryview(value))
        except TypeError:
            raise ValueProblem(f"opaque value takes bytes or a buffer (got {type(value).__name__})") from None
        if len(data) != t.size:
            raise ValueProblem(f"opaque value needs exactly {t.size} bytes (got {len(data)})")
        return data
    return encode


def _constant_encoder(t: ParamType) -> Encoder:
    def encode(value: Any, pointer: Pointers) -> bytes:
        if value != t.value:
            raise ValueProblem(f"the kernel was compiled for the constant {t.value!r} (got {value!r})")
        return b""
    return encode


def _record_encoder(t: ParamType, members: tuple[ParamType, ...], offsets: tuple[int, ...],
                    values_of: Callable[[Any], list[Any]]) -> Encoder:
    size, _align = memory_layout(t)
    parts = [(encoder(member), offset) for member, offset in zip(members, offsets, strict=True)]

    def encode(value: Any, pointer: Pointers) -> bytes:
        image = bytearray(size)
        for (encode_member, offset), member_value in zip(parts, values_of(value), strict=False):
            data = encode_member(member_value, pointer)
            image[offset:offset + len(data)] = data
        return bytes(image)
    return encode


def _struct_encoder(t: Struct) -> Encoder:
    return _record_encoder(t, tuple(f.type for f in t.fields), field_offsets(t), lambda v: _fields_of(v, t))


def _tuple_encoder(t: ParamType) -> Encoder:
    members = KINDS.children(t)
    offsets = field_offsets(Struct("tuple", tuple(StructField(str(i), m) for i, m in enumerate(members))))

    def items(value: Any) -> list[Any]:
        found = list(value) if isinstance(value, (tuple, list)) else []
        if len(found) != len(members):
            raise ValueProblem(f"expected a tuple of {len(members)} items (got {value!r})")
        return found
    return _record_encoder(t, members, offsets, items)


def _not_by_value(t: ParamType) -> Encoder:
    def encode(value: Any, pointer: Pointers) -> bytes:
        raise ValueProblem(f"{type(t).__name__} cannot be passed by value")
    return encode


# a kind entry's ``member`` form -> the encoder of its values inside aggregates
_MEMBER_FORMS: dict[str, Callable[[Any], Encoder]] = {
    "scalar": lambda t: lambda value, pointer: _scalar_bytes(t.dtype, value),
    "address": _address_encoder,
    "bytes": _bytes_encoder,
    "constant": _constant_encoder,
    "struct": _struct_encoder,
    "tuple": _tuple_encoder,
}


def encoder(t: ParamType) -> Encoder:
    """``encode(value, pointer)``: the memory image of ``value`` as a by-value ``t`` (struct,
    tuple, opaque, scalar...), built once per parameter.

    ``pointer(value, t)`` resolves tensors inside aggregates to their flat values
    (address, and length for slices), checking device and dtype like a top-level argument.
    """
    form = _MEMBER_FORMS.get(KINDS.entry_of(t).member or "")
    return _not_by_value(t) if form is None else form(t)
