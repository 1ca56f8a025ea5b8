"""Content-addressed disk cache for compiler and linker output.

Entries are keyed by a hash of everything that determines them (inputs,
options, arch, tool versions).  Each file holds a small header with the
payload's length and a SHA-256 over the namespace, the key and the payload,
so an entry is bound to its key: a truncated, corrupted, or copied-over entry
is detected, deleted and rebuilt instead of loaded.  Writes go to a temporary
file in the same directory and are published with ``os.replace``, which is
atomic on POSIX, so several processes may fill the cache at once.  A cached
directory (the Rust sysroot) lists the size and SHA-256 of every file in its
``.complete`` marker and is rebuilt when one no longer matches.

A cache that cannot be read or written (a read-only or full disk, a path that
is not a directory) never fails a compile: the result is used uncached and a
:class:`CacheWarning` is issued once per cache directory.  What a cache shared
between users trusts is in ``docs/trust.md``.

Location: ``$PTXBRIDGE_CACHE_DIR``, else ``$XDG_CACHE_HOME/ptxbridge``, else
``~/.cache/ptxbridge``.

``fingerprint``: what a Python function's compiled code depends on (cache keys of numba and
cuTile compiles).
"""

from __future__ import annotations

import atexit
import fcntl
import hashlib
import json
import os
import shutil
import struct
import tempfile
import warnings
from collections.abc import Callable
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CacheInfo", "CacheWarning", "cache_dir", "cached", "cached_dir", "clear", "get", "info", "key",
           "put"]

_MAGIC = b"PTXBCACHE2"
_HEADER = struct.Struct(f"<{len(_MAGIC)}sQ32s")  # magic, payload length, sha256 of (namespace, key, payload)
_MARKER = ".complete"
_warned: set[str] = set()
_verified: dict[Path, tuple] = {}  # cached directory -> the file stats it had when its digests last matched
_uncached_dirs: dict[tuple[str, str], Path] = {}  # built outside an unusable cache, for this process


class CacheWarning(UserWarning):
    """The disk cache could not be used; results are computed and used without it."""


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


def _checksum(namespace: str, entry_key: str, payload: bytes) -> bytes:
    digest = hashlib.sha256(key(namespace, entry_key).encode())
    digest.update(payload)
    return digest.digest()


def _warn_once(what: str, exc: OSError) -> None:
    root = str(cache_dir())
    if root not in _warned:
        _warned.add(root)
        warnings.warn(f"ptxbridge: the cache {root} cannot be {what} ({exc.strerror or exc}); results are "
                      "used without it (set PTXBRIDGE_CACHE_DIR to a writable directory)", CacheWarning,
                      stacklevel=4)


def get(namespace: str, entry_key: str) -> bytes | None:
    """The cached bytes, or None when absent, unreadable or not this key's (such an entry is removed)."""
    path = _entry_path(namespace, entry_key)
    try:
        blob = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        _warn_once("read", exc)
        return None
    if len(blob) >= _HEADER.size:
        magic, length, checksum = _HEADER.unpack_from(blob)
        payload = blob[_HEADER.size:]
        if (magic == _MAGIC and length == len(payload)
                and _checksum(namespace, entry_key, payload) == checksum):
            return payload
    with suppress(OSError):
        path.unlink(missing_ok=True)
    return None


def put(namespace: str, entry_key: str, data: bytes) -> None:
    """Store ``data`` atomically under ``(namespace, entry_key)``; OSError when the disk refuses."""
    path = _entry_path(namespace, entry_key)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = _HEADER.pack(_MAGIC, len(data), _checksum(namespace, entry_key, data))
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
    """The cached bytes for ``entry_key``, produced (and stored, where the disk allows) on a miss."""
    found = get(namespace, entry_key)
    if found is not None:
        return found
    data = produce()
    try:
        put(namespace, entry_key, data)
    except OSError as exc:
        _warn_once("written", exc)
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


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name != _MARKER)


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _seal(root: Path) -> None:
    """Write the marker: every file's size and SHA-256, relative to ``root``."""
    files = {str(p.relative_to(root)): [p.stat().st_size, _digest(p)] for p in _files(root)}
    (root / _MARKER).write_text(json.dumps({"files": files}))


def _intact(root: Path) -> bool | None:
    """True: complete and every file as sealed; False: sealed but damaged; None: not (yet) complete.

    Files are hashed once per process while their inode, size and mtime stay the same.
    """
    marker = root / _MARKER
    if not marker.exists():
        return None
    try:
        files = json.loads(marker.read_text())["files"]
        stats = tuple((name, (st.st_ino, st.st_size, st.st_mtime_ns))
                      for name in sorted(files) for st in [(root / name).stat()])
        if _verified.get(root) == stats:
            return True
        if any(st[1] != files[name][0] or _digest(root / name) != files[name][1] for name, st in stats):
            return False
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return False
    _verified[root] = stats
    return True


def _keep_for_this_process(namespace: str, entry_key: str, root: Path) -> Path:
    atexit.register(shutil.rmtree, root, True)
    _uncached_dirs[(namespace, entry_key)] = root
    return root


def _build_uncached(namespace: str, entry_key: str, build: Callable[[Path], None]) -> Path:
    """Build into a private temporary directory that lives as long as this process."""
    found = _uncached_dirs.get((namespace, entry_key))
    if found is not None:
        return found
    root = Path(tempfile.mkdtemp(prefix=f"ptxbridge-{namespace}-"))
    try:
        build(root)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return _keep_for_this_process(namespace, entry_key, root)


def cached_dir(namespace: str, entry_key: str, build: Callable[[Path], None]) -> Path:
    """A cached directory, built once by ``build(tmpdir)`` and renamed into place.

    A lock file serialises concurrent builders; a directory is complete only once it carries its
    marker, so an interrupted build is redone, and one whose files changed since is rebuilt.
    """
    final = _entry_path(namespace, entry_key)
    if _intact(final):
        return final
    with ExitStack() as stack:
        try:
            stack.enter_context(_locked(final.parent / f".{entry_key}.lock"))
        except OSError as exc:
            _warn_once("written", exc)
            return _build_uncached(namespace, entry_key, build)
        state = _intact(final)
        if state:
            return final
        if state is False:
            warnings.warn(f"ptxbridge: the cached {namespace} at {final} changed since it was built (a "
                          "file is missing or differs); rebuilding it", CacheWarning, stacklevel=2)
        try:
            shutil.rmtree(final, ignore_errors=True)
            staging = Path(tempfile.mkdtemp(dir=final.parent, prefix=".build-"))
        except OSError as exc:
            _warn_once("written", exc)
            return _build_uncached(namespace, entry_key, build)
        try:
            build(staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        try:
            _seal(staging)
            os.replace(staging, final)
        except OSError as exc:  # built but not publishable (a full disk): this process uses it as it is
            _warn_once("written", exc)
            return _keep_for_this_process(namespace, entry_key, staging)
    return final


def _entries(root: Path) -> list[Path]:
    """Every entry, file or directory, at ``namespace/xx/key`` (temporary files and locks are not)."""
    if not root.is_dir():
        return []
    return [entry for namespace in root.iterdir() if namespace.is_dir()
            for shard in namespace.iterdir() if shard.is_dir()
            for entry in shard.iterdir() if not entry.name.startswith(".")]


def info() -> CacheInfo:
    """How many entries the cache holds (what :func:`clear` would remove) and the bytes it takes."""
    root = cache_dir()
    return CacheInfo(root, len(_entries(root)), sum(map(_size, root.rglob("*"))) if root.is_dir() else 0)


def _size(path: Path) -> int:
    """A file's size; 0 for a directory or a file another process removed meanwhile."""
    try:
        return path.stat().st_size if path.is_file() else 0
    except OSError:
        return 0


def kept_directories() -> list[Path]:
    """The cached directories (built toolchains: the Rust sysroot) that :func:`clear` keeps."""
    return [entry for entry in _entries(cache_dir()) if entry.is_dir()]


def clear(*, toolchains: bool = False) -> int:
    """Remove the cached compile and link results; returns how many entries it removed (as
    :func:`info` counts them).  Cached directories (built toolchains: the Rust sysroot, which takes
    25 s to rebuild) stay unless ``toolchains`` is true, which removes the whole cache."""
    root = cache_dir()
    entries = _entries(root)
    _verified.clear()
    if toolchains:
        shutil.rmtree(root, ignore_errors=True)
        return len(entries)
    kept = {entry.parent for entry in entries if entry.is_dir()}  # a shard holding a toolchain
    removed = 0
    for entry in entries:
        if not entry.is_dir():
            with suppress(OSError):
                entry.unlink()
                removed += 1
    for shard in {entry.parent for entry in entries} - kept:
        shutil.rmtree(shard, ignore_errors=True)  # leftovers of interrupted writes with it
    for namespace in (root.iterdir() if root.is_dir() else ()):
        with suppress(OSError):
            namespace.rmdir()  # only when empty
    with suppress(OSError):
        root.rmdir()
    return removed
