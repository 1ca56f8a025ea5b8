"""Content-addressed disk cache for compiler and linker output.

Entries are keyed by a hash of everything that determines them (inputs,
options, arch, tool versions).  Each file holds a small header with the
payload's length and SHA-256, so a truncated or corrupted entry is detected,
deleted and rebuilt instead of loaded.  Writes go to a temporary file in the
same directory and are published with ``os.replace``, which is atomic on
POSIX, so several processes may fill the cache at once.

Location: ``$PTXBRIDGE_CACHE_DIR``, else ``$XDG_CACHE_HOME/ptxbridge``, else
``~/.cache/ptxbridge``.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import struct
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CacheInfo", "cache_dir", "cached", "cached_dir", "clear", "get", "info", "key", "put"]

_MAGIC = b"PTXBCACHE1"
_HEADER = struct.Struct(f"<{len(_MAGIC)}sQ32s")  # magic, payload length, sha256 of payload


@dataclass(frozen=True, slots=True)
class CacheInfo:
    path: Path
    entries: int
    bytes: int


def cache_dir() -> Path:
    """The cache root (created on first use)."""
    explicit = os.environ.get("PTXBRIDGE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ptxbridge"


def key(*parts: str | bytes) -> str:
    """A hex digest over ``parts``; each part is length-prefixed so boundaries count."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else bytes(part)
        digest.update(struct.pack("<Q", len(data)))
        digest.update(data)
    return digest.hexdigest()


def _entry_path(namespace: str, entry_key: str) -> Path:
    if not namespace.replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"cache namespace must be alphanumeric with '-'/'_' (got {namespace!r})")
    if len(entry_key) < 8 or not all(c in "0123456789abcdef" for c in entry_key):
        raise ValueError(f"cache key must be a hex digest from cache.key() (got {entry_key!r})")
    return cache_dir() / namespace / entry_key[:2] / entry_key


def get(namespace: str, entry_key: str) -> bytes | None:
    """The cached bytes, or None when absent or corrupt (a corrupt entry is removed)."""
    path = _entry_path(namespace, entry_key)
    try:
        blob = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None
    if len(blob) >= _HEADER.size:
        magic, length, checksum = _HEADER.unpack_from(blob)
        payload = blob[_HEADER.size:]
        if magic == _MAGIC and length == len(payload) and hashlib.sha256(payload).digest() == checksum:
            return payload
    path.unlink(missing_ok=True)
    return None


def put(namespace: str, entry_key: str, data: bytes) -> None:
    """Store ``data`` atomically under ``(namespace, entry_key)``."""
    path = _entry_path(namespace, entry_key)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = _HEADER.pack(_MAGIC, len(data), hashlib.sha256(data).digest())
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(header)
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def cached(namespace: str, entry_key: str, produce: Callable[[], bytes]) -> bytes:
    """The cached bytes for ``entry_key``, produced (and stored) on a miss."""
    found = get(namespace, entry_key)
    if found is not None:
        return found
    data = produce()
    put(namespace, entry_key, data)
    return data


@contextmanager
def _locked(lock_path: Path):
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def cached_dir(namespace: str, entry_key: str, build: Callable[[Path], None]) -> Path:
    """A cached directory, built once by ``build(tmpdir)`` and renamed into place.

    A lock file serialises concurrent builders; a directory is complete only
    once it carries its ``.complete`` marker, so an interrupted build is redone.
    """
    final = _entry_path(namespace, entry_key)
    marker = final / ".complete"
    if marker.exists():
        return final
    with _locked(final.parent / f".{entry_key}.lock"):
        if marker.exists():
            return final
        shutil.rmtree(final, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(dir=final.parent, prefix=".build-"))
        try:
            build(staging)
            (staging / ".complete").touch()
            os.replace(staging, final)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return final


def info() -> CacheInfo:
    """How many entries the cache holds and their total size."""
    root = cache_dir()
    entries = total = 0
    if root.exists():
        for path in root.rglob("*"):
            if path.is_file() and not path.name.startswith("."):
                entries += 1
                total += path.stat().st_size
    return CacheInfo(root, entries, total)


def clear() -> int:
    """Remove every entry; returns how many files were removed."""
    root = cache_dir()
    removed = sum(1 for p in root.rglob("*") if p.is_file()) if root.exists() else 0
    shutil.rmtree(root, ignore_errors=True)
    return removed
