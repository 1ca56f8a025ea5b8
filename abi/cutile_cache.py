"""cutile-rs JIT cache entries: the cubins cutile-rs persists, read and written.

cutile-rs stores each compiled kernel as ``<root>/<key[:2]>/<key>.cubin``,
``key`` a SHA-256 over the Tile IR bytecode, GPU name, opt level and tileiras
fingerprint; the value is a header, then the cubin (``cutile-compiler/src/jit_cache.rs``,
"Entry codec"), little-endian:

======  ====  ===========================================
offset  size  field
======  ====  ===========================================
0       12    magic ``CUTILECUBIN\\0``
12      2     format version (1)
14      2     reserved
16      32    SHA-256 of the cubin
48      32    SHA-256 of the Tile IR bytecode
80      2     GPU name length
82      2     tileiras fingerprint length
84      1     opt level
85      3     padding
88      8     cubin length
96      ..    GPU name, tileiras fingerprint (``tileiras --version``), cubin
======  ====  ===========================================
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

from .errors import FormatError

__all__ = ["CUTILE_CACHE_MAGIC", "CutileCacheEntry", "read_cache_entry", "write_cache_entry"]

CUTILE_CACHE_MAGIC = b"CUTILECUBIN\0"
_VERSION = 1
_HEADER = struct.Struct("<12sHH32s32sHHB3xQ")


@dataclass(frozen=True, slots=True)
class CutileCacheEntry:
    """One entry: the cubin and what it was compiled for and by."""

    gpu_name: str
    tileiras_fingerprint: str
    opt_level: int
    bytecode_sha256: bytes
    cubin: bytes


def _fail(message: str, source: str, offset: int) -> FormatError:
    return FormatError(message, source=source, where=f"offset {offset:#x}")


def read_cache_entry(data: bytes, source: str = "<cutile cache entry>") -> CutileCacheEntry:
    """The entry in ``data``, its lengths and the cubin's checksum checked.

    Raises
    ------
    FormatError
        Not an entry (magic), another format version, lengths that do not add
        up to the file, names that are not UTF-8, or a cubin whose SHA-256 is
        not the recorded one (a torn or altered entry).
    """
    data = bytes(data)
    if len(data) < _HEADER.size or not data.startswith(CUTILE_CACHE_MAGIC):
        raise _fail(f"a cutile-rs cache entry starts with {CUTILE_CACHE_MAGIC!r} and a {_HEADER.size}-byte "
                    f"header (got {data[:12]!r}, {len(data)} bytes)", source, 0)
    _, version, _, payload_sha, bc_sha, gpu_len, fp_len, opt, cubin_len = _HEADER.unpack_from(data)
    if version != _VERSION:
        raise _fail(f"cache entry format version must be {_VERSION} (got {version})", source, 12)
    total = _HEADER.size + gpu_len + fp_len + cubin_len
    if total != len(data):
        raise _fail(f"header lengths (GPU name {gpu_len}, fingerprint {fp_len}, cubin {cubin_len}) add up to "
                    f"{total} bytes but the entry has {len(data)}", source, 80)
    names = data[_HEADER.size:_HEADER.size + gpu_len + fp_len]
    cubin = data[_HEADER.size + gpu_len + fp_len:]
    if hashlib.sha256(cubin).digest() != payload_sha:
        raise _fail("the cubin's SHA-256 is not the one the header records (a torn or altered entry)",
                    source, 16)
    try:
        gpu, fingerprint = names[:gpu_len].decode("utf-8"), names[gpu_len:].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _fail(f"GPU name or fingerprint is not UTF-8 ({exc.reason})", source, _HEADER.size) from None
    return CutileCacheEntry(gpu, fingerprint, opt, bc_sha, cubin)


def write_cache_entry(entry: CutileCacheEntry) -> bytes:
    """The bytes cutile-rs's ``encode_entry`` writes for ``entry`` (inverse of :func:`read_cache_entry`)."""
    gpu, fingerprint = entry.gpu_name.encode(), entry.tileiras_fingerprint.encode()
    if len(gpu) > 0xFFFF or len(fingerprint) > 0xFFFF or len(entry.bytecode_sha256) != 32:
        raise ValueError("write_cache_entry: names fit 16 bits and the bytecode digest is 32 bytes")
    digest = hashlib.sha256(entry.cubin).digest()
    header = _HEADER.pack(CUTILE_CACHE_MAGIC, _VERSION, 0, digest, entry.bytecode_sha256, len(gpu),
                          len(fingerprint), entry.opt_level, len(entry.cubin))
    return header + gpu + fingerprint + entry.cubin
