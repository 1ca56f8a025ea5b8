"""Read and write cuda-oxide ``.oxart`` artifact bundles (docs/conventions.md, `oxide`).

A bundle blob, little-endian: ``"OXIDEART"``, ``u16 version`` (1 or 2) at 8,
``u16 header length`` (32) at 10, ``u32 total length`` at 12, ``u16`` name,
target, payload-count and entry-count at 16..23, ``u64 option bits`` at 24
(bit 0 no-FMA, bit 1 line tables, bit 2 full debug; version 1 bundles carry
the defaults; the same policy is the ``.options`` file next to loose NVVM IR
and LTO-IR, :meth:`OxartOptions.sidecar_text`), then the name and target strings, then 24-byte payload
records (``u16 kind, u16 flags, u32 data offset, u32 data length, u32 name
offset, u16 name length``) and 24-byte entry records (``u16 kind, u16 flags``
(bit 0: metadata present), ``u64 metadata`` at 4, ``u32 symbol offset`` at
12, ``u16 symbol length`` at 16).  Offsets are from the blob start; blobs are
concatenated in the ``.oxart`` section and an all-zero tail ends the list.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum

from ptxbridge.abi.elf import is_elf, read_elf
from ptxbridge.abi.errors import FormatError

__all__ = [
    "OXART_MAGIC",
    "OXART_SECTION",
    "PayloadKind",
    "EntryKind",
    "OxartOptions",
    "OxartPayload",
    "OxartEntry",
    "OxartBundle",
    "read_oxart",
    "write_oxart",
]

OXART_MAGIC = b"OXIDEART"
OXART_SECTION = ".oxart"
_HEADER = struct.Struct("<8sHHIHHHHQ")
_PAYLOAD = struct.Struct("<HHIIIH6x")
_ENTRY = struct.Struct("<HHQIH6x")
_NO_FMA, _LINE_TABLES, _DEBUG = 1, 2, 4
_KNOWN_OPTIONS = _NO_FMA | _LINE_TABLES | _DEBUG
_HAS_METADATA = 1


class PayloadKind(IntEnum):
    PTX = 0x0100
    NVVM_IR = 0x0110
    LTOIR = 0x0120
    CUBIN = 0x0200


class EntryKind(IntEnum):
    KERNEL = 1
    DEVICE_FUNCTION = 2


@dataclass(frozen=True, slots=True)
class OxartOptions:
    """Compile policy later CUDA stages must keep (line tables and full debug exclude each other)."""

    no_fma: bool = False
    line_tables: bool = False
    debug: bool = False

    def __post_init__(self) -> None:
        if self.line_tables and self.debug:
            raise ValueError("OxartOptions: line_tables and debug exclude each other (got both)")

    @property
    def bits(self) -> int:
        return self.no_fma * _NO_FMA | self.line_tables * _LINE_TABLES | self.debug * _DEBUG

    def sidecar_text(self) -> str:
        """The ``<crate>.options`` file cuda-oxide writes next to NVVM IR / LTO-IR for this policy."""
        if not (self.line_tables or self.debug):
            return f"{_SIDECAR_V1}\nfma-contraction={'off' if self.no_fma else 'on'}\n"
        debug = "line-tables" if self.line_tables else "full"
        return f"{_SIDECAR_V2}\nfma-contraction={'off' if self.no_fma else 'on'}\ndebug={debug}\n"

    @classmethod
    def from_sidecar(cls, text: str, source: str = "<options>") -> OxartOptions:
        """Read a ``.options`` file; only the canonical texts cuda-oxide writes are accepted."""
        for candidate in _POLICIES:
            if candidate.sidecar_text() == text:
                return candidate
        raise FormatError(f"compile options must be one of cuda-oxide's canonical texts ({_SIDECAR_V1} or "
                          f"{_SIDECAR_V2} with fma-contraction=on|off and debug=line-tables|full) "
                          f"(got {text[:80]!r})", source=source)


@dataclass(frozen=True, slots=True)
class OxartPayload:
    kind: PayloadKind
    name: str
    data: bytes
    flags: int = 0


@dataclass(frozen=True, slots=True)
class OxartEntry:
    """A kernel or device function the bundle exports; ``metadata`` is None when the flag is clear."""

    kind: EntryKind
    symbol: str
    metadata: int | None = None
    flags: int | None = None

    @property
    def record_flags(self) -> int:
        """The flags word as stored: given, or bit 0 set exactly when metadata is present."""
        return self.flags if self.flags is not None else int(self.metadata is not None)


@dataclass(frozen=True, slots=True)
class OxartBundle:
    """One bundle.  ``version`` 0 means "choose": 1 for default options, else 2 (as cuda-oxide does)."""

    name: str
    target: str
    payloads: tuple[OxartPayload, ...]
    entries: tuple[OxartEntry, ...] = ()
    options: OxartOptions = OxartOptions()
    version: int = 0

    def payload(self, kind: PayloadKind) -> OxartPayload | None:
        return next((p for p in self.payloads if p.kind == kind), None)


_SIDECAR_V1, _SIDECAR_V2 = "cuda-oxide-compile-options-v1", "cuda-oxide-compile-options-v2"
_POLICIES = tuple(OxartOptions(no_fma, lines, full) for no_fma in (False, True)
                  for lines, full in ((False, False), (True, False), (False, True)))


def _fail(message: str, source: str, offset: int) -> FormatError:
    return FormatError(message, source=source, where=f"offset {offset:#x}")


def _text(blob: bytes, offset: int, length: int, what: str, source: str, base: int) -> str:
    if offset + length > len(blob):
        raise _fail(f"{what} [{offset:#x}, +{length}) runs past the bundle end ({len(blob):#x})",
                    source, base + offset)
    try:
        return blob[offset : offset + length].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _fail(f"{what} is not UTF-8 ({exc.reason})", source, base + offset) from exc


def _options(version: int, bits: int, source: str, base: int) -> OxartOptions:
    if version == 1:
        return OxartOptions()
    if bits & ~_KNOWN_OPTIONS or bits & (_LINE_TABLES | _DEBUG) == _LINE_TABLES | _DEBUG:
        raise _fail(f"option bits must be a subset of no-FMA|line-tables|debug with at most one debug "
                    f"level (got {bits:#x})", source, base + 24)
    return OxartOptions(bool(bits & _NO_FMA), bool(bits & _LINE_TABLES), bool(bits & _DEBUG))


def _kind(enum: type[IntEnum], value: int, what: str, source: str, offset: int) -> IntEnum:
    try:
        return enum(value)
    except ValueError:
        known = ", ".join(f"{k.name} {k.value:#x}" for k in enum)
        raise _fail(f"{what} kind must be one of {known} (got {value:#x})", source, offset) from None


def _bundle(blob: bytes, source: str, base: int) -> OxartBundle:
    _magic, version, hlen, _total, name_len, target_len, npay, nent, bits = _HEADER.unpack_from(blob, 0)
    if version not in (1, 2):
        raise _fail(f"bundle version must be 1 or 2 (got {version})", source, base + 8)
    if hlen != _HEADER.size:
        raise _fail(f"bundle header length must be {_HEADER.size} (got {hlen})", source, base + 10)
    name = _text(blob, hlen, name_len, "bundle name", source, base)
    target = _text(blob, hlen + name_len, target_len, "bundle target", source, base)
    records = hlen + name_len + target_len
    if records + (npay + nent) * 24 > len(blob):
        raise _fail(f"{npay} payload and {nent} entry records run past the bundle end ({len(blob):#x})",
                    source, base + records)
    payloads = []
    for i in range(npay):
        at = records + 24 * i
        kind, flags, data_off, data_len, name_off, pname_len = _PAYLOAD.unpack_from(blob, at)
        if data_off + data_len > len(blob):
            raise _fail(f"payload {i} data [{data_off:#x}, +{data_len}) runs past the bundle end "
                        f"({len(blob):#x})", source, base + at)
        payloads.append(OxartPayload(
            _kind(PayloadKind, kind, f"payload {i}", source, base + at),  # type: ignore[arg-type]
            _text(blob, name_off, pname_len, f"payload {i} name", source, base),
            blob[data_off : data_off + data_len], flags))
    entries = []
    for i in range(nent):
        at = records + 24 * (npay + i)
        kind, flags, metadata, sym_off, sym_len = _ENTRY.unpack_from(blob, at)
        entries.append(OxartEntry(
            _kind(EntryKind, kind, f"entry {i}", source, base + at),  # type: ignore[arg-type]
            _text(blob, sym_off, sym_len, f"entry {i} symbol", source, base),
            metadata if flags & _HAS_METADATA else None, flags))
    return OxartBundle(name, target, tuple(payloads), tuple(entries),
                       _options(version, bits, source, base), version)


def _blobs(data: bytes, source: str, base: int) -> list[OxartBundle]:
    bundles = []
    pos = 0
    while pos < len(data):
        if not any(data[pos : pos + 8]) and not any(data[pos:]):
            break  # the all-zero tail
        if pos + _HEADER.size > len(data):
            raise _fail(f"bundle header needs {_HEADER.size} bytes (got {len(data) - pos})",
                        source, base + pos)
        if data[pos : pos + 8] != OXART_MAGIC:
            raise _fail(f"bundle must start with magic 'OXIDEART' (got {data[pos:pos + 8]!r})", source,
                        base + pos)
        total = struct.unpack_from("<I", data, pos + 12)[0]
        if total < _HEADER.size or pos + total > len(data):
            raise _fail(f"bundle total length must be in [{_HEADER.size}, {len(data) - pos}] (got {total})",
                        source, base + pos + 12)
        bundles.append(_bundle(data[pos : pos + total], source, base + pos))
        pos += total
    return bundles


def read_oxart(data: bytes, source: str = "<oxart>") -> tuple[OxartBundle, ...]:
    """Every bundle in a host ELF's ``.oxart`` sections, or in raw concatenated blobs.

    Raises
    ------
    FormatError
        An ELF without ``.oxart``, bad magic, a length or offset past the
        bundle end, an unknown kind or option bit, or a name that is not UTF-8.
    """
    data = bytes(data)
    if not is_elf(data):
        return tuple(_blobs(data, source, 0))
    elf = read_elf(data, source)
    sections = [s for s in elf.sections if s.name == OXART_SECTION]
    if not sections:
        raise FormatError(f"ELF file has no {OXART_SECTION} section", source=source)
    return tuple(b for s in sections for b in _blobs(elf.section_data(s), source, s.offset))


def _pad8(out: bytearray) -> None:
    out += bytes(-len(out) % 8)


def _u16(value: int, what: str) -> int:
    if not 0 <= value <= 0xFFFF:
        raise ValueError(f"write_oxart: {what} must fit in 16 bits (got {value})")
    return value


def _write_one(bundle: OxartBundle) -> bytes:
    name, target = bundle.name.encode(), bundle.target.encode()
    version = bundle.version or (1 if bundle.options == OxartOptions() else 2)
    if version not in (1, 2):
        raise ValueError(f"write_oxart: version must be 0 (choose), 1 or 2 (got {version})")
    out = bytearray(_HEADER.size) + name + target
    records = len(out)
    out += bytes(24 * (len(bundle.payloads) + len(bundle.entries)))
    for i, p in enumerate(bundle.payloads):
        pname = p.name.encode()
        name_off = len(out)
        out += pname
        _pad8(out)
        data_off = len(out)
        out += p.data
        _pad8(out)
        _PAYLOAD.pack_into(out, records + 24 * i, PayloadKind(p.kind), _u16(p.flags, "payload flags"),
                           data_off, len(p.data), name_off, _u16(len(pname), "payload name length"))
    for i, e in enumerate(bundle.entries):
        symbol = e.symbol.encode()
        sym_off = len(out)
        out += symbol
        _pad8(out)
        _ENTRY.pack_into(out, records + 24 * (len(bundle.payloads) + i), EntryKind(e.kind),
                         _u16(e.record_flags, "entry flags"), e.metadata or 0, sym_off,
                         _u16(len(symbol), "entry symbol length"))
    _HEADER.pack_into(out, 0, OXART_MAGIC, version, _HEADER.size, len(out), _u16(len(name), "name length"),
                      _u16(len(target), "target length"), _u16(len(bundle.payloads), "payload count"),
                      _u16(len(bundle.entries), "entry count"), bundle.options.bits)
    return bytes(out)


def write_oxart(bundles: Iterable[OxartBundle], *, tail: int = 0) -> bytes:
    """Concatenate bundles as cuda-oxide lays them out, then ``tail`` zero bytes.

    The inverse of :func:`read_oxart` on raw blobs; used by tests and the
    cuda-oxide frontend's conformance fixtures.
    """
    return b"".join(_write_one(b) for b in bundles) + bytes(tail)
