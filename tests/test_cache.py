"""The disk cache: round trip, corruption detection, atomic concurrent writers."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from ptxbridge import cache


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PTXBRIDGE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_round_trip_and_miss():
    k = cache.key("source", b"\x00bytes", "sm_90")
    assert cache.get("unit", k) is None
    cache.put("unit", k, b"payload")
    assert cache.get("unit", k) == b"payload"
    assert cache.info().entries == 1


def test_key_parts_are_length_prefixed():
    assert cache.key("ab", "c") != cache.key("a", "bc")


def test_cached_calls_producer_once():
    calls = []
    k = cache.key("x")

    def produce() -> bytes:
        calls.append(1)
        return b"made"

    assert cache.cached("unit", k, produce) == b"made"
    assert cache.cached("unit", k, produce) == b"made"
    assert len(calls) == 1


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "garbage"])
def test_corrupt_entry_is_dropped_and_rebuilt(private_cache: Path, damage: str):
    k = cache.key("victim")
    cache.put("unit", k, b"A" * 1000)
    (path,) = [p for p in private_cache.rglob("*") if p.is_file()]
    blob = bytearray(path.read_bytes())
    if damage == "truncate":
        blob = blob[:-10]
    elif damage == "flip":
        blob[-1] ^= 0xFF
    elif damage == "empty":
        blob = bytearray()
    else:
        blob = bytearray(b"not a cache entry")
    path.write_bytes(bytes(blob))
    assert cache.get("unit", k) is None
    assert not path.exists()
    assert cache.cached("unit", k, lambda: b"rebuilt") == b"rebuilt"


def test_bad_namespace_and_key_rejected():
    with pytest.raises(ValueError, match="namespace"):
        cache.get("../etc", cache.key("x"))
    with pytest.raises(ValueError, match="key"):
        cache.get("unit", "../../passwd")


def _writer(directory: str, index: int) -> None:
    import os

    os.environ["PTXBRIDGE_CACHE_DIR"] = directory
    for _ in range(50):
        cache.put("race", cache.key("shared"), bytes([index]) * 4096)


def test_concurrent_writers_leave_a_whole_entry(private_cache: Path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(private_cache), i)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    data = cache.get("race", cache.key("shared"))
    assert data is not None and len(data) == 4096 and len(set(data)) == 1
    assert not [p for p in private_cache.rglob(".tmp-*")]


def test_cached_dir_builds_once_and_survives_failed_build(private_cache: Path):
    k = cache.key("dir")
    builds = []

    def failing(path: Path) -> None:
        (path / "half").write_text("x")
        raise RuntimeError("build broke")

    with pytest.raises(RuntimeError):
        cache.cached_dir("dirs", k, failing)

    def good(path: Path) -> None:
        builds.append(1)
        (path / "lib.rlib").write_text("ok")

    first = cache.cached_dir("dirs", k, good)
    second = cache.cached_dir("dirs", k, good)
    assert first == second and (first / "lib.rlib").read_text() == "ok"
    assert not (first / "half").exists()
    assert builds == [1]


def test_clear(private_cache: Path):
    cache.put("unit", cache.key("a"), b"1")
    cache.put("unit", cache.key("b"), b"2")
    assert cache.clear() == 2
    assert cache.info().entries == 0


# --- an entry is bound to its key ------------------------------------------------------------------
def test_an_entry_copied_over_another_keys_entry_is_refused(private_cache: Path):
    first, second = cache.key("y += 1"), cache.key("y *= 1000")
    cache.put("unit", first, b"adds")
    cache.put("unit", second, b"multiplies")
    victim = private_cache / "unit" / first[:2] / first
    victim.write_bytes((private_cache / "unit" / second[:2] / second).read_bytes())
    assert cache.get("unit", first) is None and not victim.exists()
    assert cache.get("unit", second) == b"multiplies"
    assert cache.cached("unit", first, lambda: b"adds") == b"adds"


def test_the_same_key_in_another_namespace_is_another_entry(private_cache: Path):
    k = cache.key("shared")
    cache.put("one", k, b"1")
    (private_cache / "two" / k[:2]).mkdir(parents=True)
    (private_cache / "two" / k[:2] / k).write_bytes((private_cache / "one" / k[:2] / k).read_bytes())
    assert cache.get("two", k) is None


def test_nvrtc_output_planted_under_another_source_is_not_run(private_cache: Path):
    """The issue's repro: the cached NVRTC output of ``y *= 1000`` copied over the entry of ``y += 1``."""
    import numpy as np

    import ptxbridge
    import ptxbridge.nvrtc

    def kernel(body: str) -> str:
        return f'extern "C" __global__ void k(float* y) {{ y[threadIdx.x] {body}; }}'

    ptxbridge.nvrtc.compile(kernel("+= 1"), arch="sm_90")
    before = set((private_cache / "nvrtc").rglob("*"))
    ptxbridge.nvrtc.compile(kernel("*= 1000"), arch="sm_90")
    (planted,) = [p for p in set((private_cache / "nvrtc").rglob("*")) - before if p.is_file()]
    (target,) = [p for p in before if p.is_file()]
    target.write_bytes(planted.read_bytes())
    module = ptxbridge.load([ptxbridge.nvrtc.compile(kernel("+= 1"), arch="sm_90")], device="cpu")
    y = np.array([1, 2], np.float32)
    module.k(y, grid=1, block=2)
    assert y.tolist() == [2.0, 3.0]


# --- a cache that cannot be used: results uncached, one warning -------------------------------------
@pytest.fixture
def unusable_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache path under a regular file: every mkdir fails (NotADirectoryError), even for root."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("PTXBRIDGE_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setattr(cache, "_warned", set())
    return blocker / "cache"


def test_an_unwritable_cache_warns_once_and_uses_the_result(unusable_cache: Path):
    calls = []
    with pytest.warns(cache.CacheWarning, match=r"cache .*a-file/cache cannot be written \(Not a directory\)"
                                                r"; results are used without it") as warned:
        for word in ("a", "b", "a"):
            assert cache.cached("unit", cache.key(word), lambda w=word: calls.append(w) or w.encode()) \
                == word.encode()
    assert calls == ["a", "b", "a"] and len(warned) == 1
    assert cache.info().entries == 0 and cache.clear() == 0


def test_a_full_disk_warns_once_and_uses_the_result(private_cache: Path, monkeypatch: pytest.MonkeyPatch):
    import errno

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cache.os, "replace", full)
    monkeypatch.setattr(cache, "_warned", set())
    with pytest.warns(cache.CacheWarning, match="No space left on device") as warned:
        assert cache.cached("unit", cache.key("x"), lambda: b"made") == b"made"
        assert cache.cached("unit", cache.key("y"), lambda: b"made too") == b"made too"
    assert len(warned) == 1 and not list(private_cache.rglob(".tmp-*"))


def test_an_unreadable_entry_is_a_miss(private_cache: Path, monkeypatch: pytest.MonkeyPatch):
    k = cache.key("dir in the way")
    (private_cache / "unit" / k[:2] / k).mkdir(parents=True)  # reading it: IsADirectoryError
    monkeypatch.setattr(cache, "_warned", set())
    with pytest.warns(cache.CacheWarning, match="cannot be read"):
        assert cache.cached("unit", k, lambda: b"made") == b"made"


def test_cached_dir_builds_outside_an_unusable_cache_once_per_process(unusable_cache: Path):
    builds = []

    def build(path: Path) -> None:
        builds.append(path)
        (path / "lib.rlib").write_text("ok")

    with pytest.warns(cache.CacheWarning):
        first = cache.cached_dir("dirs", cache.key("d"), build)
    assert cache.cached_dir("dirs", cache.key("d"), build) == first
    assert (first / "lib.rlib").read_text() == "ok" and len(builds) == 1
    assert not str(first).startswith(str(unusable_cache))


# --- cached directories keep a checksum of every file --------------------------------------------
@pytest.mark.parametrize("damage", ["truncate", "delete", "replace"])
def test_a_damaged_cached_dir_is_rebuilt(private_cache: Path, damage: str):
    builds = []

    def build(path: Path) -> None:
        builds.append(1)
        (path / "lib").mkdir()
        (path / "lib" / "libcore.rlib").write_bytes(b"core" * 1000)
        (path / "lib" / "libcompiler_builtins.rlib").write_bytes(b"builtins")

    k = cache.key("sysroot")
    root = cache.cached_dir("dirs", k, build)
    core = root / "lib" / "libcore.rlib"
    if damage == "truncate":
        core.write_bytes(core.read_bytes()[:100])
    elif damage == "delete":
        core.unlink()
    else:  # same size, other bytes
        core.write_bytes(b"CORE" * 1000)
    with pytest.warns(cache.CacheWarning, match="changed since it was built"):
        again = cache.cached_dir("dirs", k, build)
    assert again == root and core.read_bytes() == b"core" * 1000 and builds == [1, 1]
    assert cache.cached_dir("dirs", k, build) == root and builds == [1, 1]


# --- info and clear count the same entries --------------------------------------------------------
def test_info_and_clear_count_the_same_entries(private_cache: Path):
    """``cache info`` said 5 entries and ``cache clear`` removed 7: locks, markers and a directory's
    files were counted by one and not the other."""
    for word in ("a", "b", "c"):
        cache.put("unit", cache.key(word), word.encode())

    def build(path: Path) -> None:
        (path / "one").write_text("1")
        (path / "two").write_text("2")

    cache.cached_dir("dirs", cache.key("d"), build)
    (private_cache / "unit" / "zz").mkdir()
    (private_cache / "unit" / "zz" / ".tmp-leftover").write_text("half a write")
    found = cache.info()
    assert found.entries == 4 and found.bytes > 0
    assert cache.clear(toolchains=True) == 4
    assert cache.info().entries == 0 and not private_cache.exists()


def test_clear_keeps_built_toolchains(private_cache: Path):
    """``ptxbridge cache clear`` deleted the 42 MB Rust sysroot too, so the next Rust compile took 25 s
    again: built directories stay unless asked for (``--all``)."""
    cache.put("unit", cache.key("a"), b"1")

    def build(path: Path) -> None:
        (path / "libcore.rlib").write_text("core")

    kept = cache.cached_dir("rust-sysroot", cache.key("toolchain"), build)
    assert cache.clear() == 1
    assert (kept / "libcore.rlib").read_text() == "core" and cache.kept_directories() == [kept]
    assert cache.get("unit", cache.key("a")) is None
    assert cache.cached_dir("rust-sysroot", cache.key("toolchain"), build) == kept  # still intact
    assert cache.clear(toolchains=True) == 1 and not kept.exists()
