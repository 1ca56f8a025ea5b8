"""Read CUDA fatbin containers: list each image (PTX, cubin, LTO-IR) with its arch and bytes.

Layout (little-endian; measured on CUDA 13.5 ``fatbinary`` output, no
official spec exists):

- container: ``u32 magic 0xBA55ED50, u16 version 1, u16 header size 16,
  u64 body size``; containers may follow one another (``.nv_fatbin``).
- image header (``header size`` bytes, 0x40 or more): ``u16 kind`` (1 PTX,
  2 ELF, 8 LTO-IR), ``u16 version``, ``u32 header size``, ``u64 padded payload
  size``, ``u32 compressed size`` at 0x10, ``u16 minor, u16 major`` at 0x18
  (PTX ISA for PTX, ELF ABI for cubins), ``u32 arch`` at 0x1C, ``u64 flags``
  at 0x28, ``u64 uncompressed size`` at 0x38.
- flags: 0x2000 LZ4 block compression (``--compress-mode=speed``), 0x8000
  zstd (the default), 0x10000 on a compressed LTO-IR image (``kind=nvvm``):
  its payload is then neither a zstd frame nor an LZ4 block but an encoding
  only nvJitLink reads, 0x100000 ``sm_XXa``, 0x200000 ``sm_XXf``.

LZ4 blocks are decoded here (the block format is public), in time linear in
the output.  zstd needs the ``zstandard`` package (a dependency) or
``compression.zstd`` (Python 3.14+); without either a zstd image is reported
with ``decompressed=False`` and its compressed bytes, as is an encoded
LTO-IR image (nvJitLink links the fatbin as it is).

Limits (``docs/trust.md``): an image's declared size may be at most 255x its
compressed size for LZ4 (the format cannot expand more) and 1024x for zstd,
and at most 2 GiB; all images of one input together at most 64x its size
plus 64 MiB.  A frame whose own header declares another size than the image
header is refused before anything is allocated.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from ptxbridge.abi.elf import is_elf, read_elf
from ptxbridge.abi.errors import FormatError

__all__ = ["FATBIN_MAGIC", "FatbinEntry", "Fatbin", "read_fatbin", "lz4_block_decompress"]

FATBIN_MAGIC = 0xBA55ED50
_CONTAINER = struct.Struct("<IHHQ")
_ENTRY = struct.Struct("<HHIQIIHHI8xQQQ")  # up to the uncompressed size at 0x38
KINDS = {1: "ptx", 2: "elf", 8: "ltoir"}
FLAG_LZ4, FLAG_ZSTD, FLAG_ENCODED = 0x2000, 0x8000, 0x10000
FLAG_ARCH_SPECIFIC, FLAG_FAMILY = 0x100000, 0x200000
MAX_RATIO = {"lz4": 255, "zstd": 1024}  # declared size over compressed size, per image
MAX_IMAGE_BYTES = 1 << 31
MAX_TOTAL_RATIO, TOTAL_SLACK = 64, 64 << 20  # all images of one input: 64x its size + 64 MiB
_FF_RUN = re.compile(rb"\xff*+")
_FATBIN_SECTIONS = (".nv_fatbin", "__nv_relfatbin")


@dataclass(frozen=True, slots=True)
class FatbinEntry:
    """One image.  ``data`` is the decompressed payload when ``decompressed``.

    ``kind`` is ``"ptx"``, ``"elf"`` (a cubin) or ``"ltoir"``;
    ``compression`` is None, ``"lz4"`` or ``"zstd"``.
    """

    kind: str
    arch: str
    sm: int
    format_version: tuple[int, int]
    flags: int
    compression: str | None
    decompressed: bool
    data: bytes
    offset: int

    @property
    def compressed(self) -> bool:
        return self.compression is not None

    @property
    def encoded(self) -> bool:
        """Compressed LTO-IR in fatbinary's own encoding (flag 0x10000): only nvJitLink reads it."""
        return bool(self.flags & FLAG_ENCODED)

    def text(self) -> str:
        """PTX text (NUL padding dropped); only for decompressed PTX images."""
        if self.kind != "ptx" or not self.decompressed:
            raise ValueError(f"image at {self.offset:#x} is not readable PTX (kind {self.kind}, "
                             f"decompressed {self.decompressed})")
        return self.data.rstrip(b"\0").decode("utf-8", errors="replace")


@dataclass(frozen=True, slots=True)
class Fatbin:
    """All images of every container in the input, in file order."""

    entries: tuple[FatbinEntry, ...]

    def cubins(self) -> tuple[FatbinEntry, ...]:
        return tuple(e for e in self.entries if e.kind == "elf")

    def ptx(self) -> tuple[FatbinEntry, ...]:
        return tuple(e for e in self.entries if e.kind == "ptx")


def _fail(message: str, source: str, offset: int) -> FormatError:
    return FormatError(message, source=source, where=f"offset {offset:#x}")


def lz4_block_decompress(src: bytes, size: int, source: str = "<lz4>", base: int = 0) -> bytes:
    """Decode one LZ4 block (lz4 ``doc/lz4_Block_format.md``) of exactly ``size`` output bytes.

    Linear in the output: a run of 255s in a length is one regex step, and a match that overlaps
    its own output (``offset < length``) is copied as a repeated pattern, not byte by byte.
    """
    if size > MAX_RATIO["lz4"] * len(src) + 16:
        raise _fail(f"LZ4 block of {len(src)} bytes cannot decode to {size} bytes (at most "
                    f"{MAX_RATIO['lz4']}x)", source, base)
    out = bytearray()
    pos = 0

    def length(initial: int) -> int:
        nonlocal pos
        if initial != 15:
            return initial
        end = _FF_RUN.match(src, pos).end()  # type: ignore[union-attr]  # always matches
        if end >= len(src):
            raise _fail("LZ4 length runs past the block end", source, base + end)
        n = 15 + 255 * (end - pos) + src[end]
        pos = end + 1
        return n

    while pos < len(src):
        token = src[pos]
        pos += 1
        lit = length(token >> 4)
        if pos + lit > len(src) or len(out) + lit > size:
            raise _fail(f"LZ4 literal run of {lit} bytes overflows the block", source, base + pos)
        out += src[pos : pos + lit]
        pos += lit
        if pos >= len(src):
            break
        if pos + 2 > len(src):
            raise _fail("LZ4 match offset is truncated", source, base + pos)
        back = src[pos] | src[pos + 1] << 8
        pos += 2
        match = length(token & 15) + 4
        if back == 0 or back > len(out) or len(out) + match > size:
            raise _fail(f"LZ4 match (offset {back}, length {match}) is outside the output "
                        f"({len(out)} of {size} bytes)", source, base + pos)
        pattern = out[len(out) - back : len(out) - back + match]
        if match > back:  # overlapping: the last ``back`` bytes repeat
            pattern = pattern * (match // back + 1)
        out += memoryview(pattern)[:match]
    if len(out) != size:
        raise _fail(f"LZ4 block decodes to {len(out)} bytes (header says {size})", source, base)
    return bytes(out)


def _zstd(data: bytes, size: int, source: str, base: int) -> bytes | None:
    """zstd-decode with the ``zstandard`` package (or Python 3.14's stdlib); None when neither exists.

    Never more than ``size`` bytes: a frame whose header declares a size (of any magnitude) other
    than ``size`` is refused before decoding, and the output is capped at ``size + 1``.
    """
    try:
        import zstandard

        try:
            declared = zstandard.frame_content_size(data)
            if declared not in (-1, size):
                raise _fail(f"zstd frame declares {declared} bytes (the image header says {size})", source,
                            base)
            out = zstandard.ZstdDecompressor().decompress(data, max_output_size=size + 1)
        except zstandard.ZstdError as exc:
            raise _fail(f"zstd payload does not decompress ({exc})", source, base) from exc
    except ImportError:
        try:
            from compression import zstd  # Python 3.14+
        except ImportError:
            return None
        try:
            out = zstd.ZstdDecompressor().decompress(data, max_length=size + 1)
        except zstd.ZstdError as exc:
            raise _fail(f"zstd payload does not decompress ({exc})", source, base) from exc
    if len(out) != size:
        raise _fail(f"zstd payload decodes to {len(out)} bytes (header says {size})", source, base)
    return out


def _check_declared(size: int, compressed: int, compression: str, budget: list[int], source: str,
                    where: int) -> None:
    """The expansion limits of the module docstring; ``budget`` holds what the input may still expand to."""
    ratio = MAX_RATIO[compression]
    if size > ratio * compressed + 16 or size > MAX_IMAGE_BYTES:
        raise _fail(f"image declares {size} uncompressed bytes for {compressed} {compression} bytes (at most "
                    f"{ratio}x and {MAX_IMAGE_BYTES} bytes)", source, where)
    if size > budget[0]:
        raise _fail(f"images decompress to more than {MAX_TOTAL_RATIO}x the input's size plus "
                    f"{TOTAL_SLACK >> 20} MiB", source, where)
    budget[0] -= size


def _entry(data: bytes, at: int, end: int, source: str, base: int,
           budget: list[int]) -> tuple[FatbinEntry, int]:
    """The image at ``at`` (``base`` + ``at`` is its file offset, for messages)."""
    where = base + at
    if at + _ENTRY.size > end:
        raise _fail(f"fatbin image header needs {_ENTRY.size} bytes (got {end - at})", source, where)
    kind, _v, hsize, psize, csize, _r, minor, major, arch, flags, _z, usize = _ENTRY.unpack_from(data, at)
    if hsize < _ENTRY.size or at + hsize + psize > end:
        raise _fail(f"fatbin image (header {hsize:#x}, payload {psize:#x} bytes) runs past its container "
                    f"end {end:#x}", source, where)
    payload = data[at + hsize : at + hsize + psize]
    compression = "zstd" if flags & FLAG_ZSTD else "lz4" if flags & FLAG_LZ4 else None
    decoded: bytes | None = payload
    if compression is not None:
        if csize > len(payload):
            raise _fail(f"compressed size {csize} exceeds the payload ({len(payload)} bytes)", source, where)
        _check_declared(usize, csize, compression, budget, source, where)
        if flags & FLAG_ENCODED:  # measured on LTO-IR: not a frame or block this reader decodes
            decoded = None
        elif compression == "lz4":
            decoded = lz4_block_decompress(payload[:csize], usize, source, where + hsize)
        else:
            decoded = _zstd(payload[:csize], usize, source, where + hsize)
    suffix = "a" if flags & FLAG_ARCH_SPECIFIC else "f" if flags & FLAG_FAMILY else ""
    entry = FatbinEntry(
        kind=KINDS.get(kind, f"unknown({kind})"),
        arch=f"sm_{arch}{suffix}",
        sm=arch,
        format_version=(major, minor),
        flags=flags,
        compression=compression,
        decompressed=decoded is not None,
        data=decoded if decoded is not None else payload[:csize],
        offset=where,
    )
    return entry, at + hsize + psize


def _containers(data: bytes, source: str, base: int) -> list[FatbinEntry]:
    entries: list[FatbinEntry] = []
    budget = [MAX_TOTAL_RATIO * len(data) + TOTAL_SLACK]
    pos = 0
    while pos < len(data):
        if not any(data[pos : pos + 8]):  # zero padding between aligned containers
            pos += 8
            continue
        if pos + _CONTAINER.size > len(data):
            raise _fail(f"fatbin header needs {_CONTAINER.size} bytes (got {len(data) - pos})", source,
                        base + pos)
        magic, _version, hsize, body = _CONTAINER.unpack_from(data, pos)
        if magic != FATBIN_MAGIC:
            raise _fail(f"fatbin magic must be 0x{FATBIN_MAGIC:08X} (got 0x{magic:08X})", source, base + pos)
        end = pos + hsize + body
        if hsize < _CONTAINER.size or end > len(data):
            raise _fail(f"fatbin container (header {hsize}, body {body} bytes) runs past the input end "
                        f"({len(data)} bytes)", source, base + pos)
        at = pos + hsize
        while at < end:
            entry, at = _entry(data, at, end, source, base, budget)
            entries.append(entry)
        pos = end
    return entries


def read_fatbin(data: bytes, source: str = "<fatbin>") -> Fatbin:
    """List the images of a fatbin, or of the ``.nv_fatbin`` section of a host ELF.

    Raises
    ------
    FormatError
        Bad magic, a header or payload past the end, an ELF without a
        fatbin section, or a compressed payload that does not decode.
    """
    data = bytes(data)
    if is_elf(data):
        elf = read_elf(data, source)
        section = next((s for name in _FATBIN_SECTIONS if (s := elf.section(name)) is not None), None)
        if section is None:
            raise FormatError(f"ELF file has no fatbin section (looked for {', '.join(_FATBIN_SECTIONS)})",
                              source=source)
        return Fatbin(tuple(_containers(elf.section_data(section), source, section.offset)))
    return Fatbin(tuple(_containers(data, source, 0)))
