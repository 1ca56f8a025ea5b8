"""Recognise a code object's format from its first bytes (and, for ELF, its section names).

========  ==============================================================
result    recognised by
========  ==============================================================
ptx       text whose first directive is ``.version`` (comments allowed)
cubin     ELF with ``e_machine == EM_CUDA`` (190)
fatbin    magic ``0xBA55ED50``, or a host ELF with ``.nv_fatbin`` /
          ``__nv_relfatbin`` (read both with :func:`read_fatbin`)
oxart     a cuda-oxide blob (``OXIDEART``) or a host ELF with ``.oxart``
cutile-cache  a cutile-rs JIT cache entry (``CUTILECUBIN\\0``, a header then a cubin)
ltoir     NVVM LTO-IR magic ``0x7F4E43ED`` (what NVRTC ``-dlto`` and
          ``fatbinary kind=nvvm`` images start with; measured, CUDA 13.5)
nvvm      LLVM bitcode ``BC\\xC0\\xDE`` or its wrapper ``0x0B17C0DE``, or LLVM IR
          text for NVPTX (``; ModuleID`` / ``source_filename`` / ``target``
          lines first, as cuda-oxide's ``.ll`` starts, and an ``nvptx`` triple)
object    any other ELF (a host object with no device code)
library   a Unix ``ar`` archive (``!<arch>\n``: a static library of objects)
========  ==============================================================
"""

from __future__ import annotations

import re
import struct

from ptxbridge.abi.archive import is_archive
from ptxbridge.abi.cutile_cache import CUTILE_CACHE_MAGIC
from ptxbridge.abi.elf import EM_CUDA, is_elf, read_elf
from ptxbridge.abi.errors import FormatError
from ptxbridge.abi.fatbin import FATBIN_MAGIC
from ptxbridge.abi.oxart import OXART_MAGIC, OXART_SECTION

__all__ = ["LTOIR_MAGIC", "BITCODE_MAGIC", "BITCODE_WRAPPER_MAGIC", "sniff"]

LTOIR_MAGIC = struct.pack("<I", 0x7F4E43ED)
BITCODE_MAGIC = b"BC\xc0\xde"
BITCODE_WRAPPER_MAGIC = struct.pack("<I", 0x0B17C0DE)
# Possessive quantifiers: once a run of blanks or comments is read it is never split another way, so a
# mismatch costs one pass (``(?:\s+|...)*`` backtracked exponentially on a run of newlines).
_PTX_HEAD = re.compile(rb"\A(?:\s++|//[^\n]*+\n|/\*.*?\*/)*+\.version\s++\d++\.\d", re.DOTALL)
_LL_HEAD = re.compile(rb"\A(?:\s++|;[^\n]*+\n)*+(?:source_filename|target\s++(?:datalayout|triple))\s*+=")


def _elf_kind(data: bytes, source: str) -> str:
    elf = read_elf(data, source)
    if elf.header.machine == EM_CUDA:
        return "cubin"
    names = {s.name for s in elf.sections}
    if OXART_SECTION in names:
        return "oxart"
    if names & {".nv_fatbin", "__nv_relfatbin"}:
        return "fatbin"
    return "object"


def sniff(data: bytes, source: str = "<bytes>") -> str:
    """The format of ``data``: one of the names in the module docstring.

    Raises
    ------
    FormatError
        ``data`` is none of them (or an ELF whose headers are malformed).
    """
    head = bytes(data[:4])
    if is_elf(head):
        return _elf_kind(bytes(data), source)
    if head == struct.pack("<I", FATBIN_MAGIC):
        return "fatbin"
    if head == LTOIR_MAGIC:
        return "ltoir"
    if head in (BITCODE_MAGIC, BITCODE_WRAPPER_MAGIC):
        return "nvvm"
    if bytes(data[:8]) == OXART_MAGIC:
        return "oxart"
    if bytes(data[:12]) == CUTILE_CACHE_MAGIC:
        return "cutile-cache"
    if is_archive(data):
        return "library"
    head = bytes(data[:65536]).lstrip(b"\xef\xbb\xbf")
    if _PTX_HEAD.match(head):
        return "ptx"
    if _LL_HEAD.match(head) and b"nvptx" in head:
        return "nvvm"
    raise FormatError(f"unrecognised code object: expected PTX text, a cubin, fatbin, LTO-IR, NVVM IR, "
                      f".oxart, ELF or an ar archive (first bytes {bytes(data[:16]).hex(' ') or 'none'})",
                      source=source, where="offset 0x0")
