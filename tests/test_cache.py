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
