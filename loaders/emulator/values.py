"""PTX types as NumPy dtypes, register bit storage, and immediate constants.

A register holds raw bits in an unsigned dtype of its declared width (``bool``
for predicates), one element per thread, or a NumPy scalar when every thread
holds the same value.  An instruction reinterprets those bits as its own type
(PTX ISA 5.2 "Types"; 9.3 "Operand type information": a wider register may
hold a narrower type, which is truncated on read and extended on write).
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

__all__ = [
    "DTYPES", "UINT", "SINT", "INT_TYPES", "FLOAT_TYPES", "dtype_of", "is_signed", "is_float",
    "width", "retype", "to_bits", "immediate", "as_array",
]

UINT = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}
SINT = {1: np.dtype(np.int8), 2: np.dtype(np.int16), 4: np.dtype(np.int32), 8: np.dtype(np.int64)}

DTYPES: dict[str, np.dtype] = {"pred": np.dtype(np.bool_)}
for _bytes in (1, 2, 4, 8):
    DTYPES[f"u{8 * _bytes}"] = DTYPES[f"b{8 * _bytes}"] = UINT[_bytes]
    DTYPES[f"s{8 * _bytes}"] = SINT[_bytes]
DTYPES.update({
    "f16": np.dtype(np.float16), "f32": np.dtype(np.float32), "f64": np.dtype(np.float64),
    # bf16 and the packed pairs are carried as bits; their ops convert explicitly.
    "bf16": UINT[2], "f16x2": UINT[4], "bf16x2": UINT[4], "tf32": UINT[4],
})
INT_TYPES = frozenset(t for t in DTYPES if t[0] in "usb" and t != "bf16" and t != "bf16x2")
FLOAT_TYPES = frozenset(("f16", "f32", "f64"))


def dtype_of(ptx_type: str) -> np.dtype:
    """The NumPy dtype an instruction of ``ptx_type`` computes in (KeyError when unknown)."""
    return DTYPES[ptx_type]


def is_signed(ptx_type: str) -> bool:
    return ptx_type[0] == "s"


def is_float(ptx_type: str) -> bool:
    return ptx_type in FLOAT_TYPES


def width(ptx_type: str) -> int:
    """Size in bytes."""
    return DTYPES[ptx_type].itemsize


def retype(bits: Any, dt: np.dtype) -> Any:
    """Register bits read as ``dt``: reinterpret, truncate, or zero-extend to its width."""
    if bits.dtype == dt:
        return bits
    if bits.dtype.itemsize != dt.itemsize:
        bits = bits.astype(UINT[dt.itemsize])
    return bits.view(dt) if dt.kind != "b" else bits.astype(dt)


def to_bits(value: Any, reg: np.dtype) -> Any:
    """A typed value as the bits of a register of dtype ``reg``.

    Narrower signed values are sign-extended, other narrower values zero-extended,
    wider values truncated (PTX ISA 9.3.1, operand size exceeding instruction type size).
    """
    vt = value.dtype
    if vt == reg:
        return value
    if reg.kind == "b" or vt.kind == "b":
        return value.astype(reg)
    if vt.itemsize == reg.itemsize:
        return value.view(reg)
    if vt.itemsize > reg.itemsize:
        return value.view(UINT[vt.itemsize]).astype(reg)
    if vt.kind == "i":
        return value.astype(SINT[reg.itemsize]).view(reg)
    return value.view(UINT[vt.itemsize]).astype(reg)


def as_array(value: Any, n: int) -> np.ndarray:
    """``value`` as one element per thread (scalars broadcast, arrays unchanged)."""
    if isinstance(value, np.ndarray) and value.ndim == 1:
        return value
    return np.full(n, value, dtype=value.dtype)


def immediate(text: str, ptx_type: str) -> Any:
    """A PTX constant (PTX ISA 4.5.1: decimal, hex, octal, binary, ``0f``/``0d`` floats) as ``ptx_type``.

    Raises ValueError when ``text`` is not a constant.
    """
    dt = DTYPES[ptx_type]
    body = text.strip()
    low = body.lower()
    if low[:2] in ("0f", "0d") and len(body) in (10, 18):
        raw = int(body[2:], 16)
        value = struct.unpack("<f", struct.pack("<I", raw))[0] if low[1] == "f" else \
            struct.unpack("<d", struct.pack("<Q", raw))[0]
        if dt.kind == "f":
            return dt.type(value)
        if dt.itemsize == (4 if low[1] == "f" else 8):  # raw bits into a .b32/.b64 operand
            return dt.type(raw) if dt.kind == "u" else np.array(raw, UINT[dt.itemsize]).view(dt)[()]
        raise ValueError(f"float constant {text!r} for a .{ptx_type} operand")
    if low.endswith("u"):
        low = low[:-1]
    if any(c in low for c in ".e") and not low.startswith(("0x", "-0x")):
        value = float(low)
        if dt.kind != "f":
            raise ValueError(f"float constant {text!r} for a .{ptx_type} operand")
        return dt.type(value)
    number = _integer(low)
    if dt.kind == "f":
        return dt.type(number)
    if dt.kind == "b":
        return np.bool_(number != 0)
    bits = number % (1 << (8 * dt.itemsize))
    return np.array(bits, UINT[dt.itemsize]).view(dt)[()]


def _integer(text: str) -> int:
    """A PTX integer literal: ``0x`` hex, ``0b`` binary, leading-zero octal, else decimal."""
    negative = text.startswith("-")
    digits = text[1:] if negative else text
    if digits.startswith(("0x", "0b")):
        value = int(digits, 0)
    elif len(digits) > 1 and digits[0] == "0":
        value = int(digits, 8)
    else:
        value = int(digits)
    return -value if negative else value
