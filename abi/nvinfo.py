"""CUDA ELF ``.nv.info`` / ``.nv.compat`` attribute records and their numbers.

A record is ``u8 format, u8 attribute`` then, for ``EIFMT_SVAL``, a ``u16``
size and that many payload bytes; every other format carries one ``u16``
value (``EIFMT_NVAL`` too: its value is padding), so records stay 4-byte
aligned.  The attribute numbers come from the public reverse-engineered enum
(the ``EIATTR_*`` order also printed by ``cuobjdump``) and each one used here
is checked against ``cuobjdump -elf`` on CUDA 13.5 cubins in
``tests/test_cubin.py``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum

from ptxbridge.abi.errors import FormatError

__all__ = [
    "EiFormat", "EiAttr", "CompatAttr", "LANGUAGES", "NvInfoRecord", "KParam",
    "read_nv_info", "read_kparam", "sval_words",
]


_HEAD = struct.Struct("<BBH")  # format, attribute, SVAL size or the value


class EiFormat(IntEnum):
    NVAL = 1
    BVAL = 2
    HVAL = 3
    SVAL = 4


class EiAttr(IntEnum):
    """``EIATTR_*`` numbers ptxbridge reads (verified against ``cuobjdump -elf``)."""

    MAX_THREADS = 0x05  # SVAL u32 x,y,z: PTX .maxntid / __launch_bounds__
    PARAM_CBANK = 0x0A  # SVAL u32 constant-bank section symbol, u16 offset, u16 size
    REQNTID = 0x10  # SVAL u32 x,y,z: PTX .reqntid
    FRAME_SIZE = 0x11  # SVAL u32 symbol, u32 bytes (in .nv.info)
    MIN_STACK_SIZE = 0x12  # SVAL u32 symbol, u32 bytes (in .nv.info)
    KPARAM_INFO = 0x17  # SVAL 12 bytes, see KParam
    CBANK_PARAM_SIZE = 0x19  # HVAL: total parameter bytes
    MAX_STACK_SIZE = 0x23  # SVAL u32 symbol, u32 bytes (in .nv.info)
    REGCOUNT = 0x2F  # SVAL u32 symbol, u32 registers (in .nv.info)
    KPARAM_INFO_V2 = 0x45  # SVAL 12 bytes, see KParam; what ptxas writes once a kernel's params pass 4 KiB
    CTA_PER_CLUSTER = 0x3D  # SVAL u32 x,y,z: __cluster_dims__ / .reqnctapercluster
    EXPLICIT_CLUSTER = 0x3E  # NVAL: .explicitcluster
    MAX_CLUSTER_RANK = 0x3F  # SVAL u32: .maxclusterrank
    LANGUAGE = 0x66  # SVAL u32: 3 PTX, 7 Tile IR (measured)


class CompatAttr(IntEnum):
    """``EICOMPAT_ATTR_*`` numbers in ``.nv.compat`` (verified against ``cuobjdump -elf``)."""

    CUDA_ACCELERATOR_TARGET = 0x09  # BVAL 1 for sm_XXa code


LANGUAGES = {3: "ptx", 7: "tileir"}


@dataclass(frozen=True, slots=True)
class NvInfoRecord:
    """One attribute: ``value`` is the u16 for NVAL/BVAL/HVAL, the payload bytes for SVAL."""

    offset: int
    format: int
    attr: int
    value: int | bytes


@dataclass(frozen=True, slots=True)
class KParam:
    """One ``EIATTR_KPARAM_INFO`` (or ``_V2``) record: a kernel parameter as the machine code sees it.

    Both start ``u32 index, u16 ordinal, u16 offset``.  In ``KPARAM_INFO`` the
    packed word at byte 8 holds, low to high: pointee log2 alignment (8 bits),
    space (4), constant bank (5), a cbank flag (1) and the size in bytes (14
    bits, from bit 18).  ``KPARAM_INFO_V2`` (ptxas writes it for every
    parameter of a kernel whose parameters take more than 4 KiB, up to the
    32,764 bytes CUDA 12.1 allows) has ``u16 size, u8 log2 alignment, u8
    space`` there instead (measured on CUDA 13.5 ptxas, checked against
    ``cuobjdump -elf`` in ``tests/test_cubin.py``).
    """

    ordinal: int
    offset: int
    size: int
    index: int = 0
    log_alignment: int = 0
    space: int = 0


def read_nv_info(data: bytes, source: str, base: int) -> Iterator[NvInfoRecord]:
    """The records of an ``.nv.info*`` or ``.nv.compat`` section, one at a time.

    A generator, so a reader keeps only the records it wants: a section of 4-byte
    records held as objects would take about 20x its size.  A malformed record raises
    :class:`FormatError` when the iteration reaches it.  ``base`` is the section's file
    offset, used only for error locations.
    """
    view = memoryview(data)
    pos, end = 0, len(view)
    while pos < end:
        if pos + 4 > end:
            raise FormatError(f"nv.info record needs 4 bytes (got {end - pos})", source=source,
                              where=f"offset {base + pos:#x}")
        fmt, attr, word = _HEAD.unpack_from(view, pos)
        if fmt == EiFormat.SVAL:
            if pos + 4 + word > end:
                raise FormatError(f"nv.info attribute {attr:#x}: payload of {word} bytes runs past the "
                                  f"section end", source=source, where=f"offset {base + pos:#x}")
            yield NvInfoRecord(base + pos, fmt, attr, bytes(view[pos + 4 : pos + 4 + word]))
            pos += 4 + word
        elif EiFormat.NVAL <= fmt < EiFormat.SVAL:
            yield NvInfoRecord(base + pos, fmt, attr, word)
            pos += 4
        else:
            raise FormatError(f"nv.info record format must be 1..4 (got {fmt})", source=source,
                              where=f"offset {base + pos:#x}")


def sval_words(record: NvInfoRecord, count: int, source: str) -> tuple[int, ...]:
    """The first ``count`` u32 words of an SVAL record, checked."""
    payload = record.value
    if not isinstance(payload, bytes) or len(payload) < 4 * count:
        got = len(payload) if isinstance(payload, bytes) else "a u16 value"
        raise FormatError(f"nv.info attribute {record.attr:#x}: needs {4 * count} payload bytes (got {got})",
                          source=source, where=f"offset {record.offset:#x}")
    return struct.unpack_from(f"<{count}I", payload, 0)


def read_kparam(record: NvInfoRecord, source: str) -> KParam:
    """Decode an ``EIATTR_KPARAM_INFO`` or ``EIATTR_KPARAM_INFO_V2`` SVAL payload (12 bytes)."""
    index, _, _ = sval_words(record, 3, source)
    if record.attr == EiAttr.KPARAM_INFO_V2:
        ordinal, offset, size, log_alignment, space = struct.unpack_from("<HHHBB", record.value, 4)
        return KParam(ordinal, offset, size, index, log_alignment, space)
    ordinal, offset, packed = struct.unpack_from("<HHI", record.value, 4)
    return KParam(ordinal, offset, packed >> 18, index, packed & 0xFF, (packed >> 8) & 0xF)
