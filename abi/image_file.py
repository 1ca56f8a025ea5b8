"""The saved-image file: one linked image (a cubin per target, signatures, PTX) in one checksummed file.

The format is specified in ``docs/image-format.md``; this module is its only reader and writer.
Reading is strict: a wrong magic, an unknown version, a checksum that does not match, a header
that is not the documented JSON, or sections that do not add up to the file's length raise
:class:`FormatError` naming the file and what is wrong.  No I/O here: callers pass bytes.
"""

from __future__ import annotations

import hashlib
import json
import reprlib
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import FormatError
from .manifest import from_manifest, to_manifest
from .signature import Signature
from .targets import known_target

__all__ = ["IMAGE_MAGIC", "IMAGE_VERSION", "ImageFile", "image_file_sections", "is_image_file",
           "read_image_file", "write_image_file"]

IMAGE_MAGIC = b"\x89PTXBIMG"
IMAGE_VERSION = 3
_FIXED = struct.Struct("<8sII32s")  # magic, format version, header length, SHA-256 of the rest
_V1_KEYS = frozenset({"arch", "sections", "signatures", "created_by"})
_FACTS = ("unusable", "cpu_unavailable")  # kernel name -> why (version 2 on)
_NAMES = "name_expressions"  # C++ name expression -> kernel symbol (version 3 on)
_HEADER_KEYS = {1: _V1_KEYS, 2: _V1_KEYS | set(_FACTS), 3: _V1_KEYS | set(_FACTS) | {_NAMES}}  # per version
_MULTI = 3  # from this version on: several cubins, each section of them naming its arch
_SECTION_KINDS = ("cubin", "ptx")


@dataclass(frozen=True, slots=True)
class ImageFile:
    """What a saved-image file holds: ``cubins`` maps each target (``sm_90``) to its cubin, in file
    order, ``arch`` / ``cubin`` are the first (None: none; a version 1 or 2 file has at most one);
    ``kernels`` and ``device_functions`` map names to signatures; ``unusable`` and
    ``cpu_unavailable`` map kernel names to why no signature could be made / why the CPU loader
    cannot run them (empty in a version 1 file, which did not keep them); ``name_expressions`` maps
    NVRTC name expressions to kernel symbols (empty before version 3).  Given ``arch`` and
    ``cubin`` alone, ``cubins`` is that one."""

    arch: str | None
    cubin: bytes | None
    ptx: tuple[bytes, ...] = ()
    kernels: Mapping[str, Signature] = field(default_factory=dict)
    device_functions: Mapping[str, Signature] = field(default_factory=dict)
    created_by: str = ""
    unusable: Mapping[str, str] = field(default_factory=dict)
    cpu_unavailable: Mapping[str, str] = field(default_factory=dict)
    version: int = IMAGE_VERSION
    name_expressions: Mapping[str, str] = field(default_factory=dict)
    offsets: tuple[int, ...] = ()  # where each section (cubins first, then PTX) starts in the file; read only
    cubins: Mapping[str, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.cubins and self.cubin is not None and self.arch is not None:
            object.__setattr__(self, "cubins", {self.arch: self.cubin})


def is_image_file(data: bytes) -> bool:
    """``data`` starts with the saved-image magic (the rest may still be corrupt)."""
    return bytes(data[:len(IMAGE_MAGIC)]) == IMAGE_MAGIC


def write_image_file(image: ImageFile) -> bytes:
    """The bytes of ``image`` in format :data:`IMAGE_VERSION` (``docs/image-format.md``)."""
    for arch in [image.arch, *image.cubins]:
        if arch is not None and not _is_sm_name(arch):
            raise ValueError(f"arch must look like 'sm_90' or 'sm_90a' (got {arch!r})")
    if image.cubin is not None and (image.arch is None or next(iter(image.cubins.items())) != (image.arch,
                                                                                            image.cubin)):
        raise ValueError("a cubin needs its arch, and cubins must start with (arch, cubin)")
    sections = list(image_file_sections(image))
    header = {
        "arch": image.arch,
        "created_by": image.created_by,
        "sections": [{"kind": kind, "size": len(data), **({"arch": arch} if arch else {})}
                     for kind, arch, data in sections],
        "signatures": to_manifest([*image.kernels.values(), *image.device_functions.values()]),
        "unusable": dict(image.unusable),
        "cpu_unavailable": dict(image.cpu_unavailable),
        _NAMES: dict(image.name_expressions),
    }
    body = json.dumps(header, sort_keys=True, allow_nan=False).encode() + b"".join(d for *_, d in sections)
    header_size = len(body) - sum(len(d) for *_, d in sections)
    return _FIXED.pack(IMAGE_MAGIC, IMAGE_VERSION, header_size, hashlib.sha256(body).digest()) + body


def read_image_file(data: bytes, source: str = "<bytes>") -> ImageFile:
    """Parse a saved-image file.

    Raises
    ------
    FormatError
        Not a saved image, a format version this reader does not know, a checksum mismatch
        (corrupt or truncated), or a header or section table that breaks the format.
    """
    data = bytes(data)
    if len(data) < _FIXED.size:
        raise FormatError(f"truncated: a ptxbridge image file is at least {_FIXED.size} bytes "
                          f"(got {len(data)})", source=source)
    magic, version, header_size, digest = _FIXED.unpack_from(data)
    if magic != IMAGE_MAGIC:
        raise FormatError(f"not a ptxbridge image file (starts with {magic!r}, expected {IMAGE_MAGIC!r})",
                          source=source)
    if version not in _HEADER_KEYS:
        newer = " (written by a newer ptxbridge: upgrade to read it)" if version > IMAGE_VERSION else ""
        raise FormatError(f"image format version {version} is not supported (this ptxbridge reads versions "
                          f"1 to {IMAGE_VERSION}){newer}", source=source, where="8")
    body = data[_FIXED.size:]
    if hashlib.sha256(body).digest() != digest:
        raise FormatError("checksum mismatch: the file is corrupt or truncated (the SHA-256 of bytes "
                          f"{_FIXED.size}.. is not the one recorded at byte 16); save the image again",
                          source=source)
    if header_size > len(body):
        raise FormatError(f"header of {header_size} bytes runs past the end of the file", source=source,
                          where="12")
    header = _header(body[:header_size], _HEADER_KEYS[version], source)
    return _parse(header, body[header_size:], source, _FIXED.size + header_size, version)


def _is_sm_name(arch: Any) -> bool:
    """``arch`` is a target's ``sm_`` name as written (``sm_90a``; not ``compute_90`` or ``90``)."""
    target = known_target(arch)
    return target is not None and target.sm == arch


def _fail(path: str, message: str, source: str) -> FormatError:
    return FormatError(message, source=source, where=f"header.{path}")


def _header(raw: bytes, keys: frozenset[str], source: str) -> dict[str, Any]:
    try:
        header = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # bad UTF-8 or JSON; nesting beyond Python's stack
        raise FormatError(f"header is not valid JSON ({exc})", source=source,
                          where=str(_FIXED.size)) from None
    if not isinstance(header, dict):
        raise _fail("$", f"must be a JSON object (got {reprlib.repr(header)})", source)
    unknown = sorted(set(header) - keys)
    missing = sorted(keys - set(header))
    if unknown or missing:
        problem = f"unknown key {unknown[0]!r}" if unknown else f"missing key {missing[0]!r}"
        raise _fail("$", f"{problem} (keys: {', '.join(sorted(keys))})", source)
    return header


def _strings(header: dict[str, Any], key: str, source: str,
             what: str = "kernel name -> reason") -> dict[str, str]:
    """An object of strings (a kernel's reason, an expression's symbol); absent (empty) in older versions."""
    value = header.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise _fail(key, f"must be an object of {what} string (got {reprlib.repr(value)})", source)
    return value


def _parse(header: dict[str, Any], payload: bytes, source: str, start: int, version: int) -> ImageFile:
    arch = header["arch"]
    if arch is not None and not _is_sm_name(arch):
        raise _fail("arch", f"must be null or look like 'sm_90' or 'sm_90a' (got {reprlib.repr(arch)})",
                    source)
    if not isinstance(header["created_by"], str):
        raise _fail("created_by", f"must be a string (got {reprlib.repr(header['created_by'])})", source)
    cubins, ptx, offsets = _sections(header["sections"], payload, source, version)
    cubin = next(iter(cubins.values()), None)
    if not isinstance(header["signatures"], dict):
        raise _fail("signatures", "must be a signature manifest object (docs/manifest.md)", source)
    signatures = from_manifest(header["signatures"], source=f"{source} header.signatures")
    kernels = {s.name: s for s in signatures if s.kind == "kernel"}
    device = {s.name: s for s in signatures if s.kind == "device"}
    unusable, cpu_unavailable = (_strings(header, key, source) for key in _FACTS)
    names = _strings(header, _NAMES, source, "name expression -> kernel symbol")
    if unknown := sorted(set(names.values()) - set(kernels)):
        raise _fail(_NAMES, f"names no kernel of the image (got {reprlib.repr(unknown[0])})", source)
    if "" not in cubins and arch != next(iter(cubins), None):
        raise _fail("arch", f"must be the first cubin's arch, {next(iter(cubins), None)!r} "
                            f"(got {reprlib.repr(arch)})", source)
    cubins = ({arch: cubin} if arch is not None else {}) if "" in cubins else cubins
    return ImageFile(arch, cubin, ptx, kernels, device, header["created_by"], unusable, cpu_unavailable,
                     version, names, offsets=tuple(start + offset for offset in offsets), cubins=cubins)


def _sections(table: Any, payload: bytes, source: str, version: int
              ) -> tuple[dict[str, bytes], tuple[bytes, ...], list[int]]:
    """The cubins by arch (a section without one, the only cubin, keys it ``""``), the PTX modules,
    and where each starts in ``payload`` (cubins first, as :func:`image_file_sections` orders them)."""
    if not isinstance(table, list):
        raise _fail("sections", f"must be a list (got {reprlib.repr(table)})", source)
    cubins: dict[str, bytes] = {}
    ptx, offset = [], 0
    starts: dict[str, list[int]] = {"cubin": [], "ptx": []}
    for i, entry in enumerate(table):
        where = f"sections[{i}]"
        kind = entry.get("kind") if isinstance(entry, dict) else None
        keys = {"kind", "size", "arch"} if version >= _MULTI and kind == "cubin" else {"kind", "size"}
        if not isinstance(entry, dict) or not {"kind", "size"} <= set(entry) <= keys:
            raise _fail(where, f"must be an object with keys {', '.join(sorted(keys))} "
                               f"(got {reprlib.repr(entry)})", source)
        size = entry["size"]
        if kind not in _SECTION_KINDS:
            raise _fail(f"{where}.kind", f"must be one of {', '.join(_SECTION_KINDS)} "
                                         f"(got {reprlib.repr(kind)})", source)
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= len(payload) - offset:
            left = len(payload) - offset
            raise _fail(f"{where}.size", f"must be an integer from 0 to the {left} bytes left "
                                         f"(got {reprlib.repr(size)})", source)
        data = payload[offset:offset + size]
        starts[kind].append(offset)
        offset += size
        if kind == "ptx":
            ptx.append(data)
            continue
        arch = entry.get("arch", "")  # none: the header's (before version 3, and its first writers)
        if "arch" in entry and not _is_sm_name(arch):
            raise _fail(f"{where}.arch", f"must look like 'sm_90' or 'sm_90a' (got {reprlib.repr(arch)})",
                        source)
        if arch in cubins or (cubins and "" in (arch, *cubins)):
            raise _fail(where, f"a second cubin for {arch} (an image has one per target)" if arch in cubins
                        and arch else "a second cubin section (one without arch is the image's only one)",
                        source)
        if version >= _MULTI and len(starts["ptx"]):
            raise _fail(where, "a cubin section after a ptx section (cubins come first)", source)
        cubins[arch] = data
    if offset != len(payload):
        raise _fail("sections", f"sections cover {offset} bytes but {len(payload)} follow the header", source)
    return cubins, tuple(ptx), starts["cubin"] + starts["ptx"]


def image_file_sections(image: ImageFile) -> Iterable[tuple[str, str | None, bytes]]:
    """(kind, arch, bytes) of every section in file order: each cubin with its arch, then each PTX
    module (arch None)."""
    cubins = image.cubins or ({image.arch: image.cubin} if image.cubin is not None else {})
    for arch, cubin in cubins.items():
        yield "cubin", arch, cubin
    for module in image.ptx:
        yield "ptx", None, module
