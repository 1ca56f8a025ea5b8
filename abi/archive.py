"""Read Unix ``ar`` archives (static libraries, ``.a``): the name and bytes of each member.

The linker looks inside a library for LTO-IR (nvJitLink links an archive of
``nvcc -gencode arch=compute_90,code=lto_90`` objects only with ``-lto``); the
stdlib has no ``ar`` reader.  Layout (``ar(5)``; the GNU and BSD variants as
GNU ``ar`` and ``llvm-ar --format=bsd`` write them):

- ``!<arch>\\n``, then members, each a 60-byte ASCII header ``name[16]
  mtime[12] uid[6] gid[6] mode[8] size[10] "`\\n"`` (decimal, space padded)
  and ``size`` bytes of data, padded to an even offset with ``\\n``.
- GNU: a name ends with ``/``; ``/`` and ``/SYM64/`` are the symbol index,
  ``//`` the long-name table (names ending ``/\\n``), and ``/N`` the name at
  byte ``N`` of that table.
- BSD: ``#1/N``: the name is the first ``N`` bytes of the data (counted in
  ``size``); ``__.SYMDEF`` (``SORTED``) is the symbol index.

Symbol indexes and the long-name table are not members here.  Thin archives
(``!<thin>\\n``, members in other files) are refused.  Every size is checked
against the input before slicing, and each long-name entry is read once, so
reading is linear in the input.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ptxbridge.abi.errors import FormatError

__all__ = ["AR_MAGIC", "ArchiveMember", "is_archive", "read_archive"]

AR_MAGIC = b"!<arch>\n"
_HEADER = struct.Struct("16s12s6s6s8s10s2s")
_SYMBOL_INDEXES = (b"/", b"/SYM64/", b"__.SYMDEF", b"__.SYMDEF SORTED")


@dataclass(frozen=True, slots=True)
class ArchiveMember:
    """One file of the archive: its name, its bytes and their offset in the archive."""

    name: str
    data: bytes
    offset: int


def _fail(message: str, source: str, offset: int) -> FormatError:
    return FormatError(message, source=source, where=f"offset {offset:#x}")


def is_archive(data: bytes) -> bool:
    return bytes(data[:8]) == AR_MAGIC


def _decimal(field: bytes, what: str, source: str, offset: int) -> int:
    digits = field.rstrip(b" ")
    if not digits.isdigit():
        raise _fail(f"member header {what} must be a decimal number (got {field!r})", source, offset)
    return int(digits)


def _long_name(table: bytes, index: int, source: str, offset: int) -> str:
    """The GNU ``//`` table entry at ``index``.  It must start an entry (``\\n`` before it), so the
    entries read never overlap and all lookups together read the table at most once."""
    if not 0 <= index < len(table) or (index and table[index - 1] != 0x0A):
        raise _fail(f"long name /{index} is not an entry of the archive's // table ({len(table)} bytes)",
                    source, offset)
    end = table.find(b"\n", index)
    return table[index : end if end >= 0 else len(table)].decode("utf-8", errors="replace")


def read_archive(data: bytes, source: str = "<archive>") -> list[ArchiveMember]:
    """The file members of an ``ar`` archive, in archive order.

    Raises
    ------
    FormatError
        Not ``!<arch>\\n``, a member header or its data past the end, a
        header field that is not a decimal number, or a ``/N`` or ``#1/N``
        name outside its table or data.
    """
    data = bytes(data)
    if not is_archive(data):
        thin = " (a thin archive: its members are other files)" if data[:8] == b"!<thin>\n" else ""
        raise _fail(f"archive magic must be {AR_MAGIC!r} (got {data[:8]!r}){thin}", source, 0)
    members: list[ArchiveMember] = []
    table, long_names = b"", {}  # the // member, and the names read from it (one read per entry)
    pos = len(AR_MAGIC)
    while pos < len(data):
        if pos + _HEADER.size > len(data):
            raise _fail(f"member header needs {_HEADER.size} bytes (got {len(data) - pos})", source, pos)
        field, *_, size_field, fmag = _HEADER.unpack_from(data, pos)
        if fmag != b"`\n":
            raise _fail(f"member header must end with b'`\\n' (got {fmag!r})", source, pos + 58)
        size = _decimal(size_field, "size", source, pos + 48)
        start = body = pos + _HEADER.size
        end = start + size
        if end > len(data):
            raise _fail(f"member of {size} bytes runs past the archive end ({len(data)} bytes)", source, pos)
        raw = field.rstrip(b" ")
        if raw.startswith(b"#1/"):
            length = _decimal(raw[3:], "BSD name length", source, pos)
            if length > size:
                raise _fail(f"BSD name of {length} bytes is longer than its member ({size} bytes)",
                            source, pos)
            raw, body = data[start : start + length].rstrip(b"\0"), start + length
        if raw == b"//":
            table = data[start:end]
        elif raw not in _SYMBOL_INDEXES:
            if raw.startswith(b"/"):
                index = _decimal(raw[1:], "long-name index", source, pos)
                if index not in long_names:
                    long_names[index] = _long_name(table, index, source, pos)
                name = long_names[index]
            else:
                name = raw.decode("utf-8", errors="replace")
            members.append(ArchiveMember(name.removesuffix("/"), data[body:end], body))
        pos = end + (size & 1)
    return members
