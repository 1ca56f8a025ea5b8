"""Lowering and layout: the flat PTX parameter lists docs/conventions.md documents."""

from __future__ import annotations

import struct

import pytest

from ptxbridge.abi import (
    Constant,
    Convention,
    DisjointSlice,
    NumbaArray,
    Opaque,
    Param,
    Pointer,
    Scalar,
    Signature,
    Slice,
    Struct,
    StructField,
    TileArray,
    TileList,
    TileTensor,
    Tuple,
    dtype,
    field_offsets,
    memory_layout,
)
from ptxbridge.abi.errors import AbiMismatchError

F32, U8, U16, F64, F16, I32 = (Scalar(dtype(n)) for n in ("f32", "u8", "u16", "f64", "f16", "i32"))


def flat(sig: Signature) -> list[tuple[str, str, int, int]]:
    return [(p.param.name, p.param.ptx_type, p.offset, p.param.size) for p in sig.layout.params]


def test_size_is_end_of_last_param_not_rounded():
    # docs/conventions.md, the driver side: (u64, ..., f32) with the f32 at offset 80 takes 84 bytes, not 88.
    arr = TileArray(dtype("f32"), 2, "i64")
    sig = Signature("k", (Param("a", arr), Param("b", arr), Param("s", F32)), Convention.CUTILE)
    assert sig.layout.params[-1].offset == 80
    assert sig.layout.size == 84
    assert sig.layout.packer().size == 84


def test_rust_slices_lower_to_pointer_and_length():
    sig = Signature("saxpy", (Param("a", F32), Param("x", Slice(dtype("f32"))),
                              Param("y", Slice(dtype("f32"), mutable=True))), Convention.OXIDE)
    assert flat(sig) == [("a", "f32", 0, 4), ("x", "u64", 8, 8), ("x.len", "u64", 16, 8),
                         ("y", "u64", 24, 8), ("y.len", "u64", 32, 8)]


def test_disjoint_slice_2d_adds_u32_row_width():
    sig = Signature("k", (Param("out", DisjointSlice(dtype("f32"), rows_2d=True)), Param("p", Pointer(F32))),
                    Convention.OXIDE)
    assert flat(sig) == [("out", "u64", 0, 8), ("out.len", "u64", 8, 8), ("out.row_width", "u32", 16, 4),
                         ("p", "u64", 24, 8)]


def test_numba_array_is_five_plus_two_ndim_u64():
    sig = Signature("k", (Param("a", NumbaArray(dtype("f32"), 3, "C")), Param("n", I32)), Convention.NUMBA)
    names = [p.param.name for p in sig.layout.params]
    assert names[:5] == ["a.meminfo", "a.parent", "a.nitems", "a.itemsize", "a.data"]
    assert names[5:11] == ["a.shape[0]", "a.shape[1]", "a.shape[2]",
                           "a.strides[0]", "a.strides[1]", "a.strides[2]"]
    assert sig.layout.size == 11 * 8 + 4


def test_tile_array_index_width_picks_u32_or_u64():
    narrow = Signature("k", (Param("a", TileArray(dtype("f16"), 2, "i32")),), Convention.CUTILE)
    wide = Signature("k", (Param("a", TileArray(dtype("f16"), 2, "i64")),), Convention.CUTILE)
    assert [p.param.ptx_type for p in narrow.layout.params] == ["u64", "u32", "u32", "u32", "u32"]
    assert narrow.layout.size == 8 + 16
    assert wide.layout.size == 8 + 32


def test_tile_list_and_constants():
    sig = Signature("k", (Param("xs", TileList(TileArray(dtype("f32"), 1))), Param("c", Constant(256)),
                          Param("n", I32)), Convention.CUTILE)
    assert flat(sig) == [("xs", "u64", 0, 8), ("xs.len", "u32", 8, 4), ("n", "s32", 12, 4)]


def test_cutile_rs_tensor_and_partition():
    sig = Signature("k_entry", (Param("a", TileTensor(dtype("f32"), 2)),
                                Param("b", TileTensor(dtype("f32"), 2, partition=True))),
                    Convention.CUTILE_RS)
    counts = [p.param.name.split("[")[0] for p in sig.layout.params]
    assert counts.count("a.dims") == 2 and counts.count("a.strides") == 2
    assert counts.count("b.partition_dims") == 2 and counts.count("b.partition_strides") == 2
    assert sig.layout.size == 8 + 16 + 8 + 32  # b's pointer is 8-aligned after 24 bytes


def test_repr_c_struct_mixed_alignment_and_nesting():
    inner = Struct("Inner", (StructField("tag", U8), StructField("w", U16)))
    outer = Struct("Outer", (StructField("a", U8), StructField("b", F64), StructField("c", inner),
                             StructField("d", F32)))
    assert field_offsets(inner) == (0, 2)
    assert memory_layout(inner) == (4, 2)
    assert field_offsets(outer) == (0, 8, 16, 20)
    assert memory_layout(outer) == (24, 8)
    sig = Signature("k", (Param("n", U8), Param("s", outer)), Convention.C)
    assert flat(sig) == [("n", "u8", 0, 1), ("s", "b8", 8, 24)]
    assert sig.layout.params[1].param.aggregate and sig.layout.params[1].param.align == 8


def test_numba_records_are_pointers_and_tuples_flatten():
    rec = Struct("R", (StructField("x", F32), StructField("y", F64)))
    sig = Signature("k", (Param("r", rec), Param("t", Tuple((I32, F64)))), Convention.NUMBA)
    assert flat(sig) == [("r", "u64", 0, 8), ("t.0", "s32", 8, 4), ("t.1", "f64", 16, 8)]
    as_c = Signature("k", (Param("t", Tuple((I32, F64))),), Convention.C)
    assert flat(as_c) == [("t", "b8", 0, 16)]


def test_half_precision_depends_on_convention():
    numba = Signature("k", (Param("h", F16),), Convention.NUMBA)
    oxide = Signature("k", (Param("h", F16),), Convention.OXIDE)
    assert [p.param.aggregate for p in numba.layout.params] == [False]
    assert [p.param.aggregate for p in oxide.layout.params] == [True]
    assert numba.layout.size == oxide.layout.size == 2


def test_zero_sized_parameters_are_dropped():
    sig = Signature("k", (Param("marker", Opaque(0)), Param("x", Pointer(F32))), Convention.OXIDE)
    assert flat(sig) == [("x", "u64", 0, 8)]


def test_numba_complex_is_two_params():
    sig = Signature("k", (Param("z", Scalar(dtype("c64"))),), Convention.NUMBA)
    assert flat(sig) == [("z.real", "f32", 0, 4), ("z.imag", "f32", 4, 4)]


def test_packer_writes_padding_and_exact_bytes():
    sig = Signature("k", (Param("flag", Scalar(dtype("bool"))), Param("p", Pointer(F32)),
                          Param("blob", Opaque(3, 1)), Param("x", F32)), Convention.C)
    packed = sig.layout.packer().pack([1, 0x1122334455667788, b"abc", 2.5])
    assert packed == (b"\x01" + b"\x00" * 7 + struct.pack("<Q", 0x1122334455667788) + b"abc" + b"\x00"
                      + struct.pack("<f", 2.5))
    assert len(packed) == sig.layout.size == 24


def test_packer_rejects_wrong_value_count():
    sig = Signature("k", (Param("x", F32),))
    with pytest.raises(struct.error):
        sig.layout.packer().pack([])


def test_signature_validation():
    with pytest.raises(ValueError, match="unique"):
        Signature("k", (Param("x", F32), Param("x", F32)))
    with pytest.raises(ValueError, match="kind"):
        Signature("k", kind="global")
    with pytest.raises(ValueError, match="layout"):
        NumbaArray(dtype("f32"), 1, "Z")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="one entry per axis"):
        TileArray(dtype("f32"), 2, shape_divisible_by=(16,))


@pytest.mark.parametrize("kind", [TileArray(dtype("f32"), 1), NumbaArray(dtype("f32"), 1, "C")])
def test_array_inside_a_by_value_aggregate_is_a_ptxbridge_error(kind):
    """Arrays have no by-value layout: a struct or (c convention) tuple holding one cannot lower."""
    in_struct = Signature("k", (Param("s", Struct("S", (StructField("a", kind),))),), Convention.C)
    in_tuple = Signature("k", (Param("t", Tuple((kind, F32))),), Convention.OXIDE)
    for sig in (in_struct, in_tuple):
        with pytest.raises(AbiMismatchError, match=f"{type(kind).__name__} cannot be passed by value"):
            sig.layout  # noqa: B018
