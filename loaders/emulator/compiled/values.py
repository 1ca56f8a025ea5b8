"""Warp-wide values in LLVM IR text: 32 lanes as vectors, PTX types as LLVM element types.

A register holds raw bits in an integer vector of its declared width (``<32 x i1>`` for
predicates), as the interpreter's registers hold bits in an unsigned dtype (:mod:`..values`);
instructions read those bits as their own type and write results back with the interpreter's
extension and truncation rules (PTX ISA 9.3.1).
"""

from __future__ import annotations

import numpy as np

from ..values import DTYPES, immediate

__all__ = [
    "LANES",
    "Unsupported",
    "vec",
    "elem",
    "bits_of",
    "is_float",
    "is_signed",
    "int_elem",
    "splat",
    "constant_bits",
    "signed_literal",
]

LANES = 32


class Unsupported(Exception):
    """PTX the compiled tier does not translate: the kernel runs on the interpreter instead."""


def vec(element: str) -> str:
    return f"<{LANES} x {element}>"


def bits_of(ptx_type: str) -> int:
    if ptx_type == "pred":
        return 1
    if ptx_type not in DTYPES:
        raise Unsupported(f"type .{ptx_type}")
    return 8 * DTYPES[ptx_type].itemsize


def is_float(ptx_type: str) -> bool:
    return ptx_type in ("f32", "f64")


def is_signed(ptx_type: str) -> bool:
    return ptx_type[0] == "s"


def int_elem(bits: int) -> str:
    return f"i{bits}"


def elem(ptx_type: str) -> str:
    """The LLVM element type an instruction of ``ptx_type`` computes in."""
    if ptx_type == "pred":
        return "i1"
    if ptx_type == "f32":
        return "float"
    if ptx_type == "f64":
        return "double"
    if ptx_type[0] in "usb" and ptx_type[1:] in ("8", "16", "32", "64"):
        return f"i{ptx_type[1:]}"
    raise Unsupported(f"type .{ptx_type} is not compiled")


def splat(element: str, literal: str) -> str:
    return f"splat ({element} {literal})"


def constant_bits(text: str, ptx_type: str) -> int:
    """A PTX constant as the unsigned bits of ``ptx_type`` (the interpreter's :func:`immediate`)."""
    try:
        value = immediate(text, ptx_type)
    except (ValueError, KeyError) as exc:
        raise Unsupported(f"constant {text!r}: {exc}") from None
    if ptx_type == "pred":
        return int(bool(value))
    width = DTYPES[ptx_type].itemsize
    return int(
        np.array(value, DTYPES[ptx_type]).view(
            {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[width]
        )[()]
    )


def signed_literal(value: int, width: int = 64) -> int:
    """``value`` modulo ``2**width`` as LLVM's literal of that width (its two's-complement value)."""
    value %= 1 << width
    return value - (1 << width) if value >> (width - 1) else value
