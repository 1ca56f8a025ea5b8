"""Offsets of the flat PTX parameters, and the packer built from them once.

Parameters are packed in order, each at the next multiple of its alignment;
the buffer size is the end of the last parameter, *not* rounded up to the
largest alignment (the driver rejects a rounded size, docs/conventions.md, "The driver side").
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .lowering import FlatParam, lower_params
from .params import SignatureFields

__all__ = ["MAX_PARAM_BYTES", "PACK_CODES", "LaidParam", "Layout", "Packer", "layout_of"]

# The most parameter bytes a kernel may take: CUDA 12.1+ on Volta and newer (the CUDA C++
# Programming Guide, "Function Parameters"; 4,096 bytes before).  ptxas writes EIATTR_KPARAM_INFO_V2
# records for kernels past 4 KiB (abi/nvinfo.py).
MAX_PARAM_BYTES = 32764

# struct module codes for the non-aggregate PTX types; aggregates pack as bytes.
PACK_CODES = {
    "u8": "B", "s8": "b", "b8": "B",
    "u16": "H", "s16": "h", "b16": "H",
    "u32": "I", "s32": "i", "b32": "I",
    "u64": "Q", "s64": "q", "b64": "Q",
    "f32": "f", "f64": "d",
}


@dataclass(frozen=True, slots=True)
class LaidParam:
    """A flat parameter at its byte offset in the parameter buffer."""

    param: FlatParam
    offset: int

    @property
    def end(self) -> int:
        return self.offset + self.param.size


@dataclass(frozen=True, slots=True)
class Layout:
    """The whole parameter buffer: every flat parameter at its offset, and the total size."""

    params: tuple[LaidParam, ...]
    size: int

    def packer(self) -> Packer:
        return _packer_for(self)


def _place(flat: Sequence[FlatParam]) -> Layout:
    laid: list[LaidParam] = []
    offset = 0
    for param in flat:
        offset = -(-offset // param.align) * param.align
        laid.append(LaidParam(param, offset))
        offset += param.size
    return Layout(tuple(laid), offset)


@lru_cache(maxsize=4096)
def layout_of(signature: SignatureFields) -> Layout:
    """The parameter layout of ``signature`` (cached: signatures are immutable)."""
    return _place(lower_params(signature.params, signature.convention))


class Packer:
    """Turns one value per flat parameter into the exact parameter buffer.

    Built once per layout: a single precompiled :class:`struct.Struct` with
    explicit padding, so packing a launch is one C call.  Integer and float
    parameters take Python ints/floats; aggregates (and raw-bit ``b16``
    scalars given as bytes) take ``bytes`` of exactly their size.
    """

    __slots__ = ("_struct", "layout", "size")

    def __init__(self, layout: Layout):
        self.layout = layout
        fmt = ["<"]
        cursor = 0
        for laid in layout.params:
            if laid.offset > cursor:
                fmt.append(f"{laid.offset - cursor}x")
            fmt.append(f"{laid.param.size}s" if laid.param.aggregate else PACK_CODES[laid.param.ptx_type])
            cursor = laid.end
        self._struct = struct.Struct("".join(fmt))
        self.size = self._struct.size
        assert self.size == layout.size  # construction invariant, not input validation

    def pack(self, values: Sequence[Any]) -> bytes:
        """Pack ``values`` (one per flat parameter, in order) into the buffer."""
        return self._struct.pack(*values)

    def pack_into(self, buffer: bytearray | memoryview, values: Sequence[Any]) -> None:
        self._struct.pack_into(buffer, 0, *values)


@lru_cache(maxsize=4096)
def _packer_for(layout: Layout) -> Packer:
    return Packer(layout)
