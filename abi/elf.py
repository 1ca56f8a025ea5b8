"""A minimal ELF64 little-endian reader: header, section headers and names, symbols.

Only what the cubin, fatbin and ``.oxart`` readers need (System V gABI,
"ELF Header", "Sections", "Symbol Table", "Program Header").  Every offset and
count is checked against the input length before it is used, so malformed input
raises :class:`~ptxbridge.abi.errors.FormatError` and no read allocates more than
the input already holds.  The program header table and the file bytes of each
segment are checked too, though no reader uses them: a cubin cut short loses its
program headers (nvJitLink and ptxas write them last), and a file that lost its end
must not read as whole.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ptxbridge.abi.errors import FormatError

__all__ = [
    "ELF_MAGIC",
    "EM_CUDA",
    "ET_REL",
    "ET_EXEC",
    "ET_DYN",
    "SHT_SYMTAB",
    "SHT_NOBITS",
    "STT_FUNC",
    "STT_OBJECT",
    "ElfHeader",
    "Section",
    "Symbol",
    "Elf",
    "is_elf",
    "read_elf",
]

ELF_MAGIC = b"\x7fELF"
EM_CUDA = 190
ET_REL, ET_EXEC, ET_DYN = 1, 2, 3
SHT_SYMTAB, SHT_STRTAB, SHT_NOBITS = 2, 3, 8
STT_OBJECT, STT_FUNC = 1, 2
SHN_UNDEF, SHN_LORESERVE, SHN_XINDEX = 0, 0xFF00, 0xFFFF

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")  # Elf64_Ehdr, 64 bytes
_SHDR = struct.Struct("<IIQQQQIIQQ")  # Elf64_Shdr, 64 bytes
_SYM = struct.Struct("<IBBHQQ")  # Elf64_Sym, 24 bytes
_PHDR = struct.Struct("<IIQQQQQQ")  # Elf64_Phdr, 56 bytes
PN_XNUM = 0xFFFF  # e_phnum's escape: the count is section 0's sh_info


@dataclass(frozen=True, slots=True)
class ElfHeader:
    """The fields of ``Elf64_Ehdr`` that readers use (``e_ident`` split out)."""

    osabi: int
    abi_version: int
    type: int
    machine: int
    flags: int
    shoff: int
    shnum: int
    shstrndx: int
    phoff: int = 0
    phnum: int = 0


@dataclass(frozen=True, slots=True)
class Section:
    """One section header, with its name resolved from ``.shstrtab``."""

    index: int
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    info: int
    addralign: int
    entsize: int


@dataclass(frozen=True, slots=True)
class Symbol:
    """One ``Elf64_Sym``; ``bind`` and ``type`` are split out of ``st_info``."""

    index: int
    name: str
    value: int
    size: int
    bind: int
    type: int
    other: int
    shndx: int


@dataclass(frozen=True, slots=True)
class Elf:
    """A parsed ELF file; ``data`` is the input, kept so sections can be sliced."""

    header: ElfHeader
    sections: tuple[Section, ...]
    symbols: tuple[Symbol, ...]
    data: bytes
    source: str = "<elf>"

    def section(self, name: str) -> Section | None:
        """The first section called ``name``, or None."""
        return next((s for s in self.sections if s.name == name), None)

    def section_data(self, section: Section) -> bytes:
        """The bytes of ``section`` (empty for ``SHT_NOBITS``); bounds were checked at read time."""
        if section.type == SHT_NOBITS:
            return b""
        return self.data[section.offset : section.offset + section.size]


def is_elf(data: bytes) -> bool:
    """True when ``data`` starts with the ELF magic."""
    return data[:4] == ELF_MAGIC


def _fail(message: str, source: str, offset: int) -> FormatError:
    return FormatError(message, source=source, where=f"offset {offset:#x}")


def _string(table: bytes, offset: int, what: str, source: str, table_offset: int) -> str:
    """A NUL-terminated name at ``offset`` inside a string table."""
    if offset == 0 and not table:
        return ""
    if offset >= len(table) and offset != 0:
        raise _fail(f"{what}: name offset outside the string table (got {offset:#x}, "
                    f"table size {len(table):#x})", source, table_offset)
    end = table.find(b"\0", offset)
    if end < 0:
        raise _fail(f"{what}: name is not NUL-terminated", source, table_offset + offset)
    return table[offset:end].decode("utf-8", errors="replace")


def _header(data: bytes, source: str) -> ElfHeader:
    if len(data) < _EHDR.size:
        raise _fail(f"ELF header needs {_EHDR.size} bytes (got {len(data)})", source, 0)
    ident, e_type, machine, _version, _entry, phoff, shoff, flags, ehsize, phentsize, phnum, shentsize, \
        shnum, shstrndx = _EHDR.unpack_from(data, 0)
    if ident[:4] != ELF_MAGIC:
        raise _fail(f"not an ELF file: magic must be 7f 45 4c 46 (got {ident[:4].hex(' ')})", source, 0)
    if ident[4] != 2 or ident[5] != 1:
        raise _fail(f"only ELF64 little-endian is supported (got class {ident[4]}, data {ident[5]})",
                    source, 4)
    if shnum and shentsize != _SHDR.size:
        raise _fail(f"section header size must be {_SHDR.size} (got {shentsize})", source, 0x3A)
    if phnum and phentsize != _PHDR.size:
        raise _fail(f"program header size must be {_PHDR.size} (got {phentsize})", source, 0x36)
    if ehsize < _EHDR.size:
        raise _fail(f"ELF header size must be at least {_EHDR.size} (got {ehsize})", source, 0x34)
    return ElfHeader(ident[7], ident[8], e_type, machine, flags, shoff, shnum, shstrndx, phoff, phnum)


def _table(data: bytes, what: str, offset: int, count: int, entsize: int, source: str, field: int) -> None:
    """A header table of ``count`` entries at ``offset`` lies inside the file."""
    end = offset + count * entsize
    if end > len(data):
        raise _fail(f"{what} [{offset:#x}, {end:#x}) ({count} entries of {entsize} bytes) runs past the "
                    f"end of the file (size {len(data):#x})", source, field)


def _section_count(data: bytes, hdr: ElfHeader, source: str) -> int:
    """``e_shnum``, or section 0's ``sh_size`` when the count overflowed 16 bits (gABI)."""
    if hdr.shoff == 0:
        return 0
    count = hdr.shnum
    if not count:  # the count is section 0's sh_size
        _table(data, "section header table", hdr.shoff, 1, _SHDR.size, source, 0x28)
        count = _SHDR.unpack_from(data, hdr.shoff)[5]
    _table(data, "section header table", hdr.shoff, count, _SHDR.size, source, 0x28)
    return count


def _check_segments(data: bytes, hdr: ElfHeader, sections: tuple[Section, ...], source: str) -> None:
    """The program header table and every segment's file bytes lie inside the file."""
    count = sections[0].info if hdr.phnum == PN_XNUM and sections else hdr.phnum
    if not count:
        return
    _table(data, "program header table", hdr.phoff, count, _PHDR.size, source, 0x20)
    for i in range(count):
        at = hdr.phoff + i * _PHDR.size
        _type, _flags, offset, _vaddr, _paddr, filesz, _memsz, _align = _PHDR.unpack_from(data, at)
        if offset + filesz > len(data):
            raise _fail(f"program header {i}: segment [{offset:#x}, {offset + filesz:#x}) runs past the end "
                        f"of the file (size {len(data):#x})", source, at)


def _sections(data: bytes, hdr: ElfHeader, source: str) -> tuple[Section, ...]:
    count = _section_count(data, hdr, source)
    raw = [_SHDR.unpack_from(data, hdr.shoff + i * _SHDR.size) for i in range(count)]
    for i, (_n, s_type, _f, _a, offset, size, *_rest) in enumerate(raw):
        if s_type != SHT_NOBITS and offset + size > len(data):
            raise _fail(f"section {i} [{offset:#x}, {offset + size:#x}) runs past the end of "
                        f"the file (size {len(data):#x})", source, hdr.shoff + i * _SHDR.size)
    if not count:
        return ()
    strndx = hdr.shstrndx
    if strndx == SHN_XINDEX:
        strndx = raw[0][7]
    if strndx >= count:
        raise _fail(f"section name table index out of range (got {strndx}, {count} sections)",
                    source, 0x3E)
    table_offset, table_size = raw[strndx][4], raw[strndx][5]
    table = data[table_offset : table_offset + table_size]
    return tuple(
        Section(i, _string(table, r[0], f"section {i}", source, table_offset), *r[1:])
        for i, r in enumerate(raw)
    )


def _symbols(data: bytes, sections: tuple[Section, ...], source: str) -> tuple[Symbol, ...]:
    symtab = next((s for s in sections if s.type == SHT_SYMTAB), None)
    if symtab is None:
        return ()
    if symtab.entsize != _SYM.size:
        raise _fail(f"symbol table entry size must be {_SYM.size} (got {symtab.entsize})",
                    source, symtab.offset)
    if symtab.link >= len(sections):
        raise _fail(f"symbol table's string table index out of range (got {symtab.link})",
                    source, symtab.offset)
    strtab = sections[symtab.link]
    table = data[strtab.offset : strtab.offset + strtab.size]
    symbols = []
    for i in range(symtab.size // _SYM.size):
        at = symtab.offset + i * _SYM.size
        name, info, other, shndx, value, size = _SYM.unpack_from(data, at)
        symbols.append(Symbol(i, _string(table, name, f"symbol {i}", source, strtab.offset),
                              value, size, info >> 4, info & 0xF, other, shndx))
    return tuple(symbols)


def read_elf(data: bytes, source: str = "<elf>") -> Elf:
    """Parse an ELF64 little-endian file's header, sections and symbols.

    Raises
    ------
    FormatError
        The header, a section or program header (or the bytes it describes), a name or
        the symbol table is out of bounds or not ELF64 little-endian.
    """
    data = bytes(data)
    hdr = _header(data, source)
    sections = _sections(data, hdr, source)
    _check_segments(data, hdr, sections, source)
    return Elf(hdr, sections, _symbols(data, sections, source), data, source)
