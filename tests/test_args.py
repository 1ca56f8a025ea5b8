"""Argument binders: values per kind, checks, and the house error format."""

from __future__ import annotations

import ctypes
import dataclasses
import struct

import numpy as np
import pytest

from ptxbridge.abi import (
    ArgumentError,
    Constant,
    Convention,
    DisjointSlice,
    NumbaArray,
    Opaque,
    Param,
    Pointer,
    Scalar,
    Slice,
    Struct,
    StructField,
    TileArray,
    TileList,
    TileTensor,
    Tuple,
    dtype,
)
from ptxbridge.abi.devices import DLPACK_CPU, DLPACK_CUDA
from ptxbridge.launch.args import BindContext, LaunchState, OtherDeviceError, make_binder
from ptxbridge.launch.values import bf16_bits
from ptxbridge.loaders.base import host_upload

F32, I32 = dtype("f32"), dtype("i32")
CPU = BindContext("k", Convention.C, DLPACK_CPU, 0)


def bind(t, value, ctx: BindContext = CPU, name: str = "x"):
    binder = make_binder(ctx, Param(name, t), type(value))
    if binder.stateful:
        state = LaunchState(0, host_upload)
        return binder.values(value, state), state
    return binder.values(value, 0)


def test_house_error_format_names_kernel_argument_type_and_devices():
    ctx = BindContext("saxpy", Convention.C, DLPACK_CUDA, 0)
    with pytest.raises(ArgumentError) as err:
        bind(Slice(F32, mutable=True), np.zeros(4), ctx, name="y")
    assert str(err.value) == ("saxpy: argument 'y' (&mut [f32]) got float64 tensor on cpu; "
                              "expected float32 on cuda:0")


@pytest.mark.parametrize(("dt", "value", "expected"), [
    ("i32", -5, (-5,)), ("u8", 255, (255,)), ("bool", True, (1,)), ("i64", np.int64(-(2**63)), (-(2**63),)),
    ("f64", np.float32(0.5), (0.5,)), ("f32", 3, (3.0,)), ("bool", np.True_, (1,)),
])
def test_scalars_convert(dt, value, expected):
    assert bind(Scalar(dtype(dt)), value) == expected


@pytest.mark.parametrize(("dt", "value", "match"), [
    ("i32", 2**31, "does not fit i32"), ("u8", -1, "does not fit u8"), ("i32", 1.5, "expected an integer"),
    ("f32", 1e39, "outside the finite range"), ("bool", 2, "expected a bool"), ("f32", "1", "real number"),
    ("i16", True, "expected an integer"),
])
def test_scalars_out_of_range_are_argument_errors(dt, value, match):
    with pytest.raises(ArgumentError, match=rf"k: argument 'x' \({dt}\) .*{match}"):
        bind(Scalar(dtype(dt)), value)


@pytest.mark.parametrize(("dt", "value", "expected"), [
    ("i32", 0xFFFFFFFF, -1), ("i32", 2**31, -(2**31)), ("u32", -1, 0xFFFFFFFF), ("i8", 255, -1),
    ("u16", 2**40 + 3, 3), ("i64", 2**64 - 1, -1), ("i32", np.uint32(0xFFFFFFFE), -2),
])
def test_numba_integer_arguments_wrap_to_the_parameter_width(dt, value, expected):
    numba = BindContext("k", Convention.NUMBA, DLPACK_CPU, 0)
    assert bind(Scalar(dtype(dt)), value, numba) == (expected,)
    with pytest.raises(ArgumentError, match=f"does not fit {dt}"):  # other conventions keep refusing
        bind(Scalar(dtype(dt)), value)


@pytest.mark.parametrize("value", [2**64, -(2**63) - 1, True, 1.0])
def test_numba_integer_arguments_numba_cannot_type_are_refused(value):
    numba = BindContext("k", Convention.NUMBA, DLPACK_CPU, 0)
    with pytest.raises(ArgumentError, match=r"k: argument 'x' \(i32\) .*(fits neither|expected an integer)"):
        bind(Scalar(I32), value, numba)


def test_half_precision_and_complex_scalars_follow_the_convention():
    assert bind(Scalar(dtype("f16")), 1.5) == (struct.pack("<e", 1.5),)  # c: aggregate[2]
    numba = BindContext("k", Convention.NUMBA, DLPACK_CPU, 0)
    assert bind(Scalar(dtype("f16")), 1.5, numba) == (0x3E00,)  # numba: b16 bits
    assert bind(Scalar(dtype("c64")), 1 + 2j, numba) == (1.0, 2.0)
    assert bind(Scalar(dtype("c64")), 1 + 2j) == (struct.pack("<ff", 1, 2),)
    oxide = BindContext("k", Convention.OXIDE, DLPACK_CPU, 0)
    assert bind(Scalar(dtype("bf16")), 1.0, oxide) == (0x3F80,)
    assert bf16_bits(1.00390625) == 0x3F80  # ties to even
    assert bf16_bits(float("nan")) == 0x7FC0


def test_pointer_checks_dtype_and_contiguity_void_takes_any():
    a = np.arange(8, dtype=np.float32)
    assert bind(Pointer(Scalar(F32)), a) == (a.ctypes.data,)
    assert bind(Pointer(None), a.view(np.int32)) == (a.ctypes.data,)
    with pytest.raises(ArgumentError, match="contiguous tensor for a raw pointer"):
        bind(Pointer(Scalar(F32)), a[::2])
    with pytest.raises(ArgumentError, match=r"or None / 0 for a null pointer; a raw address is not accepted "
                                            r"\(got int 1234\)"):
        bind(Pointer(Scalar(F32)), 1234)


@pytest.mark.parametrize("convention", [Convention.C, Convention.OXIDE, Convention.NUMBA])
def test_null_pointers_are_none_and_in_c_also_0(convention):
    ctx = BindContext("k", convention, DLPACK_CPU, 0)
    for null in (None, 0) if convention is Convention.C else (None,):
        binder = make_binder(ctx, Param("p", Pointer(Scalar(F32))), type(null))
        assert binder.values(null, 0) == (0,) and binder.buffers is None  # no memory range to register
    if convention is not Convention.C:
        with pytest.raises(ArgumentError, match=r"or None for a null pointer \(got int\)"):
            bind(Pointer(Scalar(F32)), 0, ctx)
    record = Struct("S", (StructField("p", Pointer(Scalar(F32))), StructField("n", Scalar(I32))))
    assert bind(record, {"p": None, "n": 3}) == (struct.pack("<Qi4x", 0, 3),)


@pytest.mark.parametrize("t", [Slice(F32), DisjointSlice(F32), NumbaArray(F32, 1), TileArray(F32, 1),
                               TileTensor(F32, 1)])
def test_only_raw_pointers_take_a_null(t):
    """Rust references and slices are never null; arrays carry shapes a null cannot give."""
    with pytest.raises(ArgumentError, match=r"takes a tensor \(DLPack, __cuda_array_interface__ or NumPy\) "
                                            r"\(got NoneType\)"):
        bind(t, None)


def test_slices_pass_length_in_elements_and_row_width():
    a = np.zeros((3, 5), np.int32)
    assert bind(Slice(I32), a) == (a.ctypes.data, 15)
    assert bind(DisjointSlice(I32, rows_2d=True), a) == (a.ctypes.data, 15, 5)
    with pytest.raises(ArgumentError, match="takes a 2-d tensor"):
        bind(DisjointSlice(I32, rows_2d=True), a.ravel())


def test_numba_arrays_pass_byte_strides_and_check_layout():
    a = np.zeros((4, 6), np.float32)
    values = bind(NumbaArray(F32, 2, "C"), a)
    assert values == (0, 0, 24, 4, a.ctypes.data, 4, 6, 24, 4)
    f = np.asfortranarray(a)
    assert bind(NumbaArray(F32, 2, "F"), f)[-2:] == (4, 16)
    with pytest.raises(ArgumentError, match="compiled for C-contiguous"):
        bind(NumbaArray(F32, 2, "C"), f)
    with pytest.raises(ArgumentError, match="compiled for Fortran-contiguous"):
        bind(NumbaArray(F32, 2, "F"), a)
    rev = a[::-1, ::2]
    values = bind(NumbaArray(F32, 2, "A"), rev)
    assert values[4] == rev.ctypes.data and values[-2] == (-24) & (2**64 - 1) and values[-1] == 8
    with pytest.raises(ArgumentError, match="takes a 2-d tensor"):
        bind(NumbaArray(F32, 2, "A"), a.ravel())


def test_tile_array_promises():
    t = TileArray(F32, 2, shape_divisible_by=(4, 1), static_stride=(None, 1), base_align=16)
    a = np.zeros((8, 3), np.float32)
    assert bind(t, a) == (a.ctypes.data, 8, 3, 3, 1)
    with pytest.raises(ArgumentError, match=r"shape\[0\] divisible by 4 \(got 6"):
        bind(t, a[:6])
    with pytest.raises(ArgumentError, match=r"static stride\[1\] = 1 \(got 2"):
        bind(t, np.zeros((8, 6), np.float32)[:, ::2])
    with pytest.raises(ArgumentError, match="aligned to 16 bytes"):
        bind(t, np.zeros(25, np.float32)[1:].reshape(8, 3))


def test_tile_array_values_must_fit_the_index_width():
    a = np.zeros(4, np.float32)
    huge = np.lib.stride_tricks.as_strided(a, shape=(2,), strides=(4 * 2**33,))  # never read
    with pytest.raises(ArgumentError, match=r"stride\[0\] = 8589934592 does not fit the i32 index"):
        bind(TileArray(F32, 1), huge)
    assert bind(TileArray(F32, 1, index="i64"), huge) == (a.ctypes.data, 2, 2**33)


def test_tile_list_builds_int64_words_in_scratch_memory():
    arrays = [np.zeros((2, 3), np.float32), np.zeros((4, 1), np.float32)]
    (ptr, count), state = bind(TileList(TileArray(F32, 2)), arrays)
    assert count == 2 and len(state.buffers) == 1 and state.buffers[0].ptr == ptr
    words = list((ctypes.c_int64 * 10).from_address(ptr))
    assert words == [arrays[0].ctypes.data, 2, 3, 3, 1, arrays[1].ctypes.data, 4, 1, 1, 1]
    with pytest.raises(ArgumentError, match=r"argument 'x\[1\]'"):
        bind(TileList(TileArray(F32, 2)), [arrays[0], np.zeros((2, 2))])
    reversed_view = np.zeros(5, np.float32)[::-1]  # a negative stride stays negative in its int64 word
    (ptr, _), _ = bind(TileList(TileArray(F32, 1)), [reversed_view])
    assert list((ctypes.c_int64 * 3).from_address(ptr)) == [reversed_view.ctypes.data, 5, -1]


POINT = Struct("Point", (StructField("tag", Scalar(dtype("u8"))), StructField("x", Scalar(dtype("f64"))),
                         StructField("n", Scalar(I32))))


@dataclasses.dataclass
class Point:
    tag: int
    x: float
    n: int


def test_structs_from_dict_dataclass_and_numpy_record():
    expected = struct.pack("<B7xdi4x", 7, 2.5, -3)
    assert bind(POINT, {"tag": 7, "x": 2.5, "n": -3}) == (expected,)
    assert bind(POINT, Point(7, 2.5, -3)) == (expected,)
    record = np.array([(7, 2.5, -3)], dtype=[("tag", "u1"), ("x", "f8"), ("n", "i4")])[0]
    assert bind(POINT, record) == (expected,)
    with pytest.raises(ArgumentError, match=r"struct Point fields are .*missing \['n'\]"):
        bind(POINT, {"tag": 7, "x": 2.5})
    with pytest.raises(ArgumentError, match="does not fit u8"):
        bind(POINT, {"tag": 300, "x": 2.5, "n": 0})


def test_numba_records_travel_by_pointer_to_scratch():
    numba = BindContext("k", Convention.NUMBA, DLPACK_CPU, 0)
    (ptr,), state = bind(POINT, {"tag": 1, "x": 0.5, "n": 9}, numba)
    assert ctypes.string_at(ptr, 24) == struct.pack("<B7xdi4x", 1, 0.5, 9)
    assert state.buffers[0].nbytes == 24


def test_tuples_flatten_for_numba_and_pack_as_one_aggregate_for_c():
    t = Tuple((Scalar(I32), Slice(F32)))
    a = np.zeros(3, np.float32)
    numba = BindContext("k", Convention.NUMBA, DLPACK_CPU, 0)
    assert bind(t, (5, a), numba) == (5, a.ctypes.data, 3)  # no item needs scratch: no launch state
    binder = make_binder(numba, Param("x", t), tuple)
    assert not binder.stateful and binder.buffers((5, a), 0)[0].ptr == a.ctypes.data
    assert bind(t, (5, a)) == (struct.pack("<i4xQQ", 5, a.ctypes.data, 3),)


def test_a_2d_disjoint_slice_inside_a_struct_is_pointer_length_row_width_padded():
    """{u64, u64, u32} is 24 bytes with align 8: the next field starts after the padding."""
    rows = np.zeros((2, 3), np.int32)
    t = Struct("S", (StructField("out", DisjointSlice(I32, rows_2d=True)), StructField("k", Scalar(I32))))
    oxide = BindContext("k", Convention.OXIDE, DLPACK_CPU, 0)
    assert bind(t, {"out": rows, "k": 9}, oxide) == (struct.pack("<QQI4xi4x", rows.ctypes.data, 6, 3, 9),)


def test_opaque_constant_and_partitions():
    assert bind(Opaque(4, 4), b"\x01\x02\x03\x04") == (b"\x01\x02\x03\x04",)
    assert bind(Opaque(0), None) == () and bind(Opaque(0), ()) == ()  # a ZST takes None or Rust's ()
    with pytest.raises(ArgumentError, match=r"exactly 4 bytes \(got 2\)"):
        bind(Opaque(4, 4), b"ab")
    assert bind(Constant(256), 256) == ()
    with pytest.raises(ArgumentError, match=r"compiled for the constant 256 \(got 128\)"):
        bind(Constant(256), 128)
    a = np.zeros((4, 8), np.float32)
    part = TileTensor(F32, 2, partition=True)
    assert bind(part, (a, (2, 4), (4, 1))) == (a.ctypes.data, 4, 8, 8, 1, 2, 4, 4, 1)
    with pytest.raises(ArgumentError, match="partition_dims"):
        bind(part, a)
    for bad in ((a, 2, (4, 1)), (a, (2.7, 4), (4, 1)), (a, (2, 4), (4,)), (a, (True, 4), (4, 1))):
        with pytest.raises(ArgumentError, match="partition_dims"):
            bind(part, bad)


def test_other_gpu_is_reported_for_the_module_to_redirect():
    class OnGpu1:
        @property
        def __cuda_array_interface__(self):
            return {"data": (0x1000, False), "shape": (4,), "typestr": "<f4", "version": 3}

    ctx = BindContext("k", Convention.C, DLPACK_CUDA, 0, pointer_device=lambda ptr: 1)
    with pytest.raises(OtherDeviceError) as err:
        bind(Pointer(Scalar(F32)), OnGpu1(), ctx)
    assert err.value.device_id == 1 and "on cuda:1; expected float32 on cuda:0" in str(err.value)


def test_torch_fast_path_accepts_and_falls_back_to_full_checks():
    torch = pytest.importorskip("torch")
    t = torch.arange(6, dtype=torch.float32)
    assert bind(Slice(F32), t) == (t.data_ptr(), 6)
    assert bind(Pointer(Scalar(F32)), t.reshape(6, 1).t()) == (t.data_ptr(),)  # unit-axis strides
    with pytest.raises(ArgumentError, match=r"got int64 tensor on cpu; expected float32 on cpu"):
        bind(Pointer(Scalar(F32)), torch.zeros(2, dtype=torch.int64))
    with pytest.raises(ArgumentError, match="contiguous"):
        bind(Slice(F32), t[::2])


@pytest.mark.parametrize(("t", "value", "match"), [
    (Scalar(F32), 10**400, "1329-bit integer is outside the finite range of f32"),
    (Scalar(dtype("f64")), -(10**400), "outside the finite range of f64"),
    (Scalar(dtype("c64")), 1e300 + 0j, "outside the finite range of c64"),
    (Scalar(dtype("c64")), complex(0, -1e39), "outside the finite range of c64"),
    (Scalar(dtype("c128")), 10**400, "outside the finite range of c128"),
    (Scalar(dtype("bf16")), 3.4e38, "outside the finite range of bf16"),
    (Opaque(16, 8), 16, "takes bytes or a buffer \\(got int\\)"),
    (Opaque(4, 4), "abcd", "takes bytes or a buffer \\(got str\\)"),
    (Struct("S", (StructField("p", Pointer(Scalar(F32))),)), {"p": -1}, "must fit u64 \\(got -1\\)"),
    (Struct("S", (StructField("p", Pointer(Scalar(F32))),)), {"p": 1 << 64}, "must fit u64"),
    (Struct("S", (StructField("p", Pointer(Scalar(F32))),)), {"p": True}, "takes a tensor \\(got bool\\)"),
])
def test_values_that_do_not_fit_are_argument_errors_not_crashes(t, value, match):
    with pytest.raises(ArgumentError, match=match):
        bind(t, value)


def test_numba_complex_halves_are_range_checked():
    ctx = BindContext("k", Convention.NUMBA, DLPACK_CPU, 0)
    with pytest.raises(ArgumentError, match="outside the finite range of c64"):
        bind(Scalar(dtype("c64")), 1e300 + 0j, ctx)
    assert bind(Scalar(dtype("c64")), 1.5 - 2j, ctx) == (1.5, -2.0)


def test_byte_swapped_numpy_arrays_are_refused():
    with pytest.raises(ArgumentError, match=r"got float32 \(>f4, byte-swapped\) tensor on cpu; expected"):
        bind(Pointer(Scalar(F32), mutable=True), np.arange(4, dtype=">f4"))
    assert bind(Pointer(Scalar(F32)), np.arange(4, dtype="<f4"))[0] > 0


def test_torch_lazy_views_and_meta_tensors_are_refused():
    torch = pytest.importorskip("torch")
    c64 = Pointer(Scalar(dtype("c64")), mutable=True)
    with pytest.raises(ArgumentError, match="lazy conjugate/negative view"):
        bind(c64, torch.ones(3, dtype=torch.complex64).conj())
    assert bind(c64, torch.ones(3, dtype=torch.complex64).conj().resolve_conj())[0] > 0
    for t in (Pointer(Scalar(F32)), Slice(F32)):
        with pytest.raises(ArgumentError, match="torch tensor on meta"):
            bind(t, torch.empty(4, device="meta"))
