"""The access trait: memory (none / read / write) and no-alias promise per parameter kind."""

from __future__ import annotations

import pytest

from ptxbridge.abi import Access, Convention, Memory, Promise, access, parse_type

NO_MEMORY = Access(Memory.NONE)


@pytest.mark.parametrize(("text", "expected"), [
    ("f32", NO_MEMORY),
    ("c64", NO_MEMORY),
    ("const 3", NO_MEMORY),
    ("opaque<16, align 8>", NO_MEMORY),
    ("*mut f32", Access(Memory.WRITE)),
    ("*const f32", Access(Memory.READ)),
    ("*mut void", Access(Memory.WRITE)),
    ("&mut [f32]", Access(Memory.WRITE, Promise.EXCLUSIVE)),
    ("&[f32]", Access(Memory.READ, Promise.SHARED_READ)),
    ("DisjointSlice<u32>", Access(Memory.WRITE, Promise.EXCLUSIVE)),
    ("DisjointSlice2d<u32>", Access(Memory.WRITE, Promise.EXCLUSIVE)),
    ("Array<f32, 2, C>", Access(Memory.WRITE)),
    ("Tensor<f32, 2>", Access(Memory.READ, Promise.SHARED_READ)),
    ("Partition<f32, 2>", Access(Memory.WRITE, Promise.EXCLUSIVE)),
    ("TileArray<f32, 1>", Access(Memory.WRITE, Promise.GROUPS)),
    ("TileArray<f32, 1>{alias: 0x5, internal_alias}", Access(Memory.WRITE, Promise.GROUPS, 0b101, True)),
    ("TileList<TileArray<f32, 1>{alias: 0x1}>{alias: 0x2}", Access(Memory.WRITE, Promise.GROUPS, 0b11)),
    ("TileList<TileArray<f32, 1>>{elements_alias}", Access(Memory.WRITE, Promise.GROUPS, 0, True)),
])
def test_access_of_each_kind(text: str, expected: Access) -> None:
    assert access(parse_type(text)) == expected


def test_writes_is_what_a_framework_marks_as_mutated() -> None:
    assert access(parse_type("&mut [f32]")).writes
    assert not access(parse_type("&[f32]")).writes
    assert not access(parse_type("i32")).writes


@pytest.mark.parametrize(("text", "expected"), [
    # the strongest memory; a promise only where all memory-carrying members agree
    ("struct S { a: &mut [f32], b: &[f32], n: u32 }", Access(Memory.WRITE)),
    ("struct S { a: &mut [f32], b: &mut [f32] }", Access(Memory.WRITE, Promise.EXCLUSIVE)),
    ("struct S { a: &[f32], n: u64 }", Access(Memory.READ, Promise.SHARED_READ)),
    ("struct S { n: u64, m: f32 }", NO_MEMORY),
    ("struct S {}", NO_MEMORY),
    ("(*const f32, u32)", Access(Memory.READ)),
    # cuTile groups: the union of the masks; members sharing a group may overlap each other
    ("(TileArray<f32, 1>{alias: 0x1}, TileArray<f32, 1>{alias: 0x2})",
     Access(Memory.WRITE, Promise.GROUPS, 3)),
    ("(TileArray<f32, 1>{alias: 0x1}, TileArray<f32, 1>{alias: 0x1})",
     Access(Memory.WRITE, Promise.GROUPS, 1, True)),
    ("(TileArray<f32, 1>, TileArray<f32, 1>)", Access(Memory.WRITE, Promise.GROUPS)),
    ("(TileArray<f32, 1>, &mut [f32])", Access(Memory.WRITE)),
])
def test_aggregates_combine_their_members(text: str, expected: Access) -> None:
    assert access(parse_type(text)) == expected


def test_numba_records_travel_as_a_copy() -> None:
    record = parse_type("struct R { p: *mut f32, x: f32 }")
    assert access(record, Convention.C) == Access(Memory.WRITE)
    assert access(record, "numba") == NO_MEMORY


def test_not_a_kind_is_refused() -> None:
    with pytest.raises(TypeError, match="not a parameter kind"):
        access("f32")  # type: ignore[arg-type]
