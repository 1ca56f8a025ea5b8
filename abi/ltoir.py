"""The target an LTO-IR file (NVRTC ``-dlto``, libNVVM ``-gen-lto``, ``nvcc -dc -gencode ...,code=lto_XX``)
records, read from its header.

No public specification; the layout below is measured on the LTO-IR of libNVVM 13.5, NVRTC 13 and
nvcc 13 for sm_75 ... sm_120a (tests/test_ltoir.py) and is read strictly: anything else is a
:class:`FormatError`, never a guess.  All fields little-endian:

=======  =====  ===============================================================
offset   size   field
=======  =====  ===============================================================
0        4      magic ``0x7F4E43ED`` (:data:`ptxbridge.abi.sniff.LTOIR_MAGIC`)
12       2      where the records start (24)
16       4      where the module starts (just past the end record)
24       4 * n  records of (u16 tag, u16 value): tag 1 the compute capability
                times ten (``900`` is 9.0), tag 0x20 value 1 the ``a`` features;
                tag 0x63 ends them (an 8-byte record)
=======  =====  ===============================================================

The ``f`` (family) suffix is not recorded: LTO-IR for ``compute_100f`` reads as ``sm_100``, and
none could tell them apart (libNVVM's LTO-IR for ``compute_100f`` is byte for byte its LTO-IR for
``compute_100``, nvcc's for ``compute_120f`` its LTO-IR for ``compute_120``).  Where ``f`` is
recorded is outside the file: a fatbin image's flags (:mod:`ptxbridge.abi.fatbin`), cuda-oxide's
``.target`` sidecar and bundle target.
"""

from __future__ import annotations

import struct

from .errors import FormatError
from .sniff import LTOIR_MAGIC
from .targets import Target

__all__ = ["read_ltoir_target"]

_TAG_ARCH, _TAG_ACCELERATED, _TAG_END = 0x01, 0x20, 0x63


def read_ltoir_target(data: bytes, source: str = "<ltoir>") -> Target:
    """The :class:`Target` the LTO-IR ``data`` was built for (see the module table).

    Raises
    ------
    FormatError
        Not LTO-IR, a header cut short, or records that state no target.
    """
    if bytes(data[:4]) != LTOIR_MAGIC:
        raise FormatError(f"not LTO-IR (starts with {bytes(data[:4])!r})", source=source)
    if len(data) < 24:
        raise FormatError(f"LTO-IR header needs 24 bytes (got {len(data)})", source=source)
    (start,), (end,) = struct.unpack_from("<H", data, 12), struct.unpack_from("<I", data, 16)
    if not 24 <= start < end <= len(data):
        raise FormatError(f"LTO-IR records from {start} to {end} do not fit the {len(data)}-byte file",
                          source=source, where="12")
    values: dict[int, int] = {}
    for at in range(start, end - 3, 4):
        tag, value = struct.unpack_from("<HH", data, at)
        if tag == _TAG_END:
            break
        values.setdefault(tag, value)
    else:
        raise FormatError("LTO-IR records have no end record (tag 0x63)", source=source, where=str(start))
    number = values.get(_TAG_ARCH)
    if number is None or number % 10 or not 100 <= number <= 9990:
        raise FormatError(f"LTO-IR records state no compute capability (tag 1 is {number!r})", source=source,
                          where=str(start))
    return Target.from_number(number // 10, "a" if values.get(_TAG_ACCELERATED) == 1 else "")
