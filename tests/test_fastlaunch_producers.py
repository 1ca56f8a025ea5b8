"""The C launch plan for every tensor producer and kind it takes: ``__cuda_array_interface__`` objects
(numba device arrays and any producer; here a small one over host memory, since this machine has no
GPU), CuPy arrays (read through their attributes), torch tensors (DLPack), on pointers, slices,
``DisjointSlice`` and numba arrays of every layout.  The C plan packs exactly the bytes the Python path
packs; it declines what the Python path refuses, whose error still names kernel and argument; and the
C plan's presence is asserted per producer and kind, so a regression to the Python path fails here.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import itertools
import random
import struct
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from test_fastlaunch import _plans, _RecordingCpu, driver, python_calls  # noqa: F401 (fixtures)

from ptxbridge.abi import Param, Pointer, Scalar, Signature, dtype
from ptxbridge.abi.devices import DLPACK_CPU, DLPACK_CUDA
from ptxbridge.abi.elements import disjoint_slice_of, slice_of, units_per_element
from ptxbridge.abi.errors import ArgumentError
from ptxbridge.abi.kind_entries import KINDS
from ptxbridge.abi.kinds import DisjointSlice, NumbaArray, Slice, Struct, StructField, TileArray, Tuple
from ptxbridge.abi.signature import Convention
from ptxbridge.artifacts.image import Image
from ptxbridge.launch import fastpath
from ptxbridge.launch.args import BindContext, make_binder
from ptxbridge.launch.module import Module

pytestmark = pytest.mark.skipif(fastpath._fastlaunch is None, reason="ptxbridge.launch._fastlaunch not built")

DTYPES = ("f32", "f64", "f16", "i32", "u8", "i64", "bool")
SCALAR_DTYPES = ("i32", "i64", "u8", "f32", "f64", "bool", "f16", "bf16")


class Cai:
    """A ``__cuda_array_interface__`` v3 producer over a NumPy array (the interface as numba writes it:
    strides None when C-contiguous, unless ``strides`` says to list them anyway)."""

    def __init__(self, array: np.ndarray, *, readonly: bool = False, strides: bool = False,
                 typestr: str | None = None):
        self.array, self.readonly, self.strides, self.typestr = array, readonly, strides, typestr

    @property
    def __cuda_array_interface__(self) -> dict:
        a = self.array
        listed = self.strides or not a.flags.c_contiguous
        return {"shape": a.shape, "typestr": self.typestr or a.dtype.str, "version": 3, "stream": None,
                "data": (a.__array_interface__["data"][0], self.readonly),
                "strides": a.strides if listed else None}


def _numpy(name: str, shape: tuple[int, ...]) -> np.ndarray:
    return np.zeros(shape, dtype=np.dtype(dtype(name).numpy_name))


def _layout_of(layout: str, base: np.ndarray, rng: random.Random) -> np.ndarray:
    """A view of ``base`` that a numba array of ``layout`` accepts."""
    if layout == "C":
        return base
    if layout == "F":
        return np.asfortranarray(base)
    views = [base, np.asfortranarray(base)]
    if base.ndim >= 1 and base.shape[0] > 1:
        views.append(base[::2])  # strided
        views.append(base[::-1])  # a negative stride
    return rng.choice(views)


def _shape(ndim: int, rng: random.Random) -> tuple[int, ...]:
    return tuple(rng.choice((0, 1, 2, 3, 5)) if rng.random() < 0.2 else rng.choice((1, 2, 3, 4))
                 for _ in range(ndim))


def _signature(rng: random.Random, convention: Convention, numba_only: bool) -> Signature:
    params = []
    for i in range(rng.randint(1, 6)):
        name, choice = rng.choice(DTYPES), rng.random()
        if choice < 0.35:
            params.append(Param(f"p{i}", NumbaArray(dtype(name), rng.randint(1, 3), rng.choice("CFA"))))
        elif numba_only:
            params.append(Param(f"p{i}", Scalar(dtype(rng.choice(SCALAR_DTYPES)))))
        elif choice < 0.55:
            params.append(Param(f"p{i}", Pointer(Scalar(dtype(name)), rng.random() < 0.5)))
        elif choice < 0.7:
            params.append(Param(f"p{i}", Slice(dtype(name), rng.random() < 0.5)))
        elif choice < 0.75:
            params.append(Param(f"p{i}", DisjointSlice(dtype(name), rng.random() < 0.4)))
        elif choice < 0.8:
            params.append(Param(f"p{i}", _element_slice(rng)))
        else:
            params.append(Param(f"p{i}", Scalar(dtype(rng.choice(SCALAR_DTYPES)))))
    return Signature("k", tuple(params), convention=convention)


# elements of slices that are not numbers: a struct of one repeated scalar (a tensor of that scalar) and
# mixed ones (a tensor of bytes), per element 2 to 16 values
ELEMENTS = (Struct("P", (StructField("x", Scalar(dtype("f32"))), StructField("y", Scalar(dtype("f32"))))),
            Struct("M", (StructField("a", Scalar(dtype("f64"))), StructField("n", Scalar(dtype("i32"))))),
            Tuple((Scalar(dtype("i16")), Scalar(dtype("u8")))))


def _element_slice(rng: random.Random):
    element = rng.choice(ELEMENTS)
    if rng.random() < 0.5:
        return slice_of(element, rng.random() < 0.5, KINDS.by_value)
    return disjoint_slice_of(element, rng.random() < 0.5, KINDS.by_value)


def _slice_tensor(t, rng: random.Random) -> np.ndarray:
    """A tensor that a slice, DisjointSlice(2d) of numbers or of elements takes: whole elements, 2-d rows."""
    per = units_per_element(t, KINDS.by_value)
    if getattr(t, "rows_2d", False):
        return _numpy(t.dtype.name, (rng.choice((0, 1, 3)), per * rng.choice((0, 1, 2))))
    return _numpy(t.dtype.name, (per * rng.choice((0, 1, 5)),) if per > 1 else _shape(rng.randint(1, 2), rng))


def _argument(t, rng: random.Random, wrap):
    if isinstance(t, NumbaArray):
        return wrap(_layout_of(t.layout, _numpy(t.dtype.name, _shape(t.ndim, rng)), rng))
    if isinstance(t, (Slice, DisjointSlice)):
        return wrap(_slice_tensor(t, rng))
    if isinstance(t, Pointer):
        return wrap(_numpy(t.pointee.dtype.name, _shape(rng.randint(1, 2), rng)))
    if t.dtype.name == "bool":
        return rng.choice((True, False, 0, 1))
    if t.dtype.is_integer:
        return rng.randint(0, 100)
    return rng.choice(FLOAT_VALUES[t.dtype.name])


def _cai(rng: random.Random):
    return lambda a: Cai(a, strides=rng.random() < 0.5)


def _torch(a: np.ndarray):
    return torch.from_numpy(a if min(a.strides, default=0) >= 0 else a.copy())  # no negative strides


@pytest.mark.parametrize(("producer", "device_type", "convention"), [
    ("cai", DLPACK_CUDA, Convention.OXIDE), ("cai", DLPACK_CUDA, Convention.NUMBA),
    ("torch", DLPACK_CPU, Convention.NUMBA), ("cupy", DLPACK_CUDA, Convention.OXIDE),
    ("cupy", DLPACK_CUDA, Convention.NUMBA),
])
def test_c_plan_packs_the_python_bytes_for_every_producer_and_kind(producer, device_type, convention):
    rng = random.Random(f"{producer}{convention}")
    numba_only = convention is Convention.NUMBA
    for _ in range(150):
        signature = _signature(rng, convention, numba_only)
        wrap = {"cai": _cai(rng), "torch": _torch, "cupy": cupy_array}[producer]
        args = tuple(_argument(p.type, rng, wrap) for p in signature.params)
        plan, python = _plans(signature, args, device_type)  # asserts the C plan takes every argument
        for _ in range(3):
            args = tuple(_argument(p.type, rng, wrap) for p in signature.params)
            assert plan.pack(args) == python(args), (signature, args)


def test_numba_array_struct_fields():
    """meminfo and parent 0, nitems, itemsize, data, shape, strides in bytes: from a CAI producer with a
    negative stride (layout A) and from torch (layout F)."""
    sig = Signature("k", (Param("a", NumbaArray(dtype("f64"), 2, "A")),), convention=Convention.NUMBA)
    base = np.zeros((4, 3))
    view = Cai(base[::-1, ::2])
    plan, python = _plans(sig, (view,), DLPACK_CUDA)
    address = base[::-1, ::2].__array_interface__["data"][0]
    expected = struct.pack("<QQqqQqqqq", 0, 0, 8, 8, address, 4, 2, -24, 16)
    assert plan.pack((view,)) == python((view,)) == expected
    sig_f = Signature("k", (Param("a", NumbaArray(dtype("i32"), 2, "F")),), convention=Convention.NUMBA)
    t = torch.zeros(3, 5, dtype=torch.int32).t()  # F-contiguous (5, 3)
    plan, python = _plans(sig_f, (t,))
    expected = struct.pack("<QQqqQqqqq", 0, 0, 15, 4, t.data_ptr(), 5, 3, 4, 20)
    assert plan.pack((t,)) == python((t,)) == expected


# (argument, the Python path's error after "k: argument 'x' (...) ")
ARRAY = NumbaArray(dtype("f32"), 2, "C")
REFUSALS = {
    "readonly": (Pointer(Scalar(dtype("f32")), True), lambda: Cai(np.zeros(4, np.float32), readonly=True),
                 "is written by the kernel, but got a read-only float32 tensor"),
    "dtype": (Pointer(Scalar(dtype("f32"))), lambda: Cai(np.zeros(4, np.float64)),
              "got float64 tensor on cuda:0; expected float32 on cuda:0"),
    "strided": (Slice(dtype("f32")), lambda: Cai(np.zeros(8, np.float32)[::2]),
                "takes a contiguous tensor for a slice (got shape (4,), strides (2,) elements)"),
    "misaligned": (Pointer(Scalar(dtype("f32"))),
                   lambda: Cai(np.frombuffer(bytearray(20), np.float32, 4, offset=2)),
                   "is not a multiple of 4 bytes; pass an aligned copy"),
    "ndim": (ARRAY, lambda: Cai(np.zeros(4, np.float32)), "takes a 2-d tensor (got 1-d, shape (4,))"),
    "layout": (ARRAY, lambda: Cai(np.zeros((3, 2), np.float32, order="F")),
               "was compiled for C-contiguous arrays (got shape (3, 2), strides (1, 3) elements)"),
    "byte_strides": (NumbaArray(dtype("f32"), 1, "A"),
                     lambda: Cai(np.ndarray((2,), np.float32, np.zeros(3, np.float32), 0, (6,))),
                     "byte strides (6,) are not multiples of the item size 4"),
    "part_element": (slice_of(ELEMENTS[1], False, KINDS.by_value),
                     lambda: Cai(np.zeros(24, np.uint8)),
                     "holds 24 u8 values, not a whole number of elements of 16 u8 each"),
    "element_align": (slice_of(ELEMENTS[1], False, KINDS.by_value),
                      lambda: Cai(np.zeros(40, np.uint8)[4:36]),
                      "is not aligned to 8 bytes, as its element needs"),
    "rows_ndim": (DisjointSlice(dtype("f32"), True), lambda: Cai(np.zeros(4, np.float32)),
                  "takes a 2-d tensor (got 1-d, shape (4,))"),
    "part_row": (disjoint_slice_of(ELEMENTS[0], True, KINDS.by_value),
                 lambda: Cai(np.zeros((2, 3), np.float32)), "holds 3 f32 values, not a whole number"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_c_plan_declines_what_the_python_path_refuses_with_its_message(case):
    t, make, message = REFUSALS[case]
    sig = Signature("k", (Param("x", t),), convention=Convention.NUMBA if isinstance(t, NumbaArray)
                    else Convention.OXIDE)
    if isinstance(t, (Slice, DisjointSlice)):  # whole elements, in rows for a DisjointSlice2d
        per = units_per_element(t, KINDS.by_value)
        good = Cai(_numpy(t.dtype.name, (2, 2 * per) if getattr(t, "rows_2d", False) else (2 * per,)))
    else:
        good = Cai(np.zeros((2, 2) if isinstance(t, NumbaArray) and t.ndim == 2 else 4, np.float32))
    plan, python = _plans(sig, (good,), DLPACK_CUDA)
    assert plan.pack((good,)) == python((good,))
    bad = make()
    assert plan.pack((bad,)) is False
    with pytest.raises(ArgumentError) as info:
        python((bad,))
    assert str(info.value).startswith("k: argument 'x' (") and message in str(info.value), str(info.value)


def test_a_typestr_the_plan_does_not_know_by_heart_goes_to_the_python_path():
    """'=f4' is float32 too: the C plan compares the exact text NumPy writes and declines, the Python
    path parses it and accepts."""
    sig = Signature("k", (Param("x", Pointer(Scalar(dtype("f32")))),))
    a = np.zeros(4, np.float32)
    plan, python = _plans(sig, (Cai(a),), DLPACK_CUDA)
    other = Cai(a, typestr="=f4")
    assert plan.pack((other,)) is False
    assert python((other,)) == struct.pack("<Q", a.__array_interface__["data"][0])


def cupy_array(array: np.ndarray, device_id: int = 0):
    """A real cupy.ndarray over ``array``'s host memory (CuPy makes one without a GPU when handed
    ``UnownedMemory``; nothing here touches the data)."""
    cupy = pytest.importorskip("cupy")
    from cupy.cuda import memory

    base = array.base if array.base is not None else array
    ptr = array.__array_interface__["data"][0]
    start = ptr + sum((n - 1) * s for n, s in zip(array.shape, array.strides, strict=True) if s < 0)
    owner = memory.UnownedMemory(start, max(array.nbytes, base.nbytes), base, device_id=device_id)
    offset = ptr - start
    return cupy.ndarray(array.shape, array.dtype, memory.MemoryPointer(owner, offset), strides=array.strides)


@pytest.mark.parametrize("form", ["pointer", "slice", "numba"])
@pytest.mark.parametrize("shape", [(2, 3), (6,), (1,), (0,)])
def test_cupy_arrays_are_read_through_their_attributes(form, shape):
    t = {"pointer": Pointer(Scalar(dtype("f32"))), "slice": Slice(dtype("f32")),
         "numba": NumbaArray(dtype("f32"), len(shape), "C")}[form]
    sig = Signature("k", (Param("x", t),), convention=Convention.NUMBA)
    a = np.zeros(shape, np.float32)
    plan, python = _plans(sig, (cupy_array(a),), DLPACK_CUDA)
    assert plan.pack((cupy_array(a),)) == python((cupy_array(a),))
    ptr, numel = a.__array_interface__["data"][0], a.size
    if form != "numba":
        assert plan.pack((cupy_array(a),)) == struct.pack("<Q" if form == "pointer" else "<QQ",
                                                          *(ptr, numel)[:1 if form == "pointer" else 2])
    assert plan.pack((cupy_array(a, device_id=1),)) is False  # another GPU
    assert plan.pack((cupy_array(a.astype(np.float64)),)) is False  # another dtype
    if form != "numba":
        for view in (np.zeros((3, 4), np.float32).T, np.zeros(8, np.float32)[::2]):  # not C-contiguous
            assert plan.pack((cupy_array(view),)) is False
            with pytest.raises(ArgumentError, match="takes a contiguous tensor"):
                python((cupy_array(view),))
        # CuPy's own flag decides, on both paths: a unit axis's stride is not looked at
        odd = cupy_array(np.ndarray((1, 4), np.float32, np.zeros(8, np.float32), 0, (6, 4)))
        assert plan.pack((odd,)) == python((odd,))


def _f32(*shape: int) -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)


def _jax(a: np.ndarray):
    return pytest.importorskip("jax.numpy").asarray(a)


# producer -> (the context's device, a tensor of it made from a NumPy array)
PRODUCERS = {"cai": (DLPACK_CUDA, Cai), "cupy": (DLPACK_CUDA, cupy_array), "torch": (DLPACK_CPU, _torch),
             "jax": (DLPACK_CPU, _jax)}
F32 = dtype("f32")
TILE = TileArray(F32, 2, "i32", (16, 1), (1, 1), (None, 4), (None, 1), base_align=16)
SPAN = Struct("Span", (StructField("data", Slice(F32)), StructField("len", Scalar(dtype("u32")))))
_RECORDS = itertools.count()
SPAN_SCALARS = Struct("AK", (StructField("a", Scalar(dtype("f64"))), StructField("k", Scalar(dtype("u8")))))
SCALARS = Struct("Q", (StructField("b", Scalar(dtype("bool"))), StructField("h", Scalar(dtype("f16"))),
                      StructField("g", Scalar(dtype("bf16"))), StructField("data", Slice(F32))))
# kind -> (parameter type, convention, its argument from a producer's maker)
KIND_CASES = {
    "pointer": (Pointer(Scalar(F32)), Convention.OXIDE, lambda m: m(_f32(4))),
    "slice": (Slice(F32), Convention.OXIDE, lambda m: m(_f32(4))),
    "disjoint": (DisjointSlice(F32), Convention.OXIDE, lambda m: m(_f32(4))),
    "numba_C": (NumbaArray(F32, 1, "C"), Convention.NUMBA, lambda m: m(_f32(4))),
    "numba_F": (NumbaArray(F32, 2, "F"), Convention.NUMBA, lambda m: m(np.asfortranarray(_f32(3, 2)))),
    "numba_A": (NumbaArray(F32, 3, "A"), Convention.NUMBA, lambda m: m(_f32(2, 3, 2)[:, ::2])),
    "tile": (TILE, Convention.CUTILE, lambda m: m(_f32(16, 4))),
    "struct": (Struct("S", (StructField("data", Slice(F32)), StructField("p", Pointer(Scalar(F32))),
                            StructField("n", Scalar(dtype("i32"))))), Convention.C,
               lambda m: {"data": m(_f32(4)), "p": m(_f32(2)), "n": 3}),
    "tuple": (Tuple((Slice(F32), Scalar(dtype("f64")), DisjointSlice(F32))), Convention.OXIDE,
              lambda m: (m(_f32(4)), 2.5, m(_f32(3)))),
    "nested": (Struct("Outer", (StructField("inner", SPAN), StructField("k", Scalar(dtype("u8"))))),
               Convention.C, lambda m: {"inner": {"data": m(_f32(5)), "len": 5}, "k": 1}),
    "rows": (DisjointSlice(F32, True), Convention.OXIDE, lambda m: m(_f32(3, 4))),
    "element_slice": (slice_of(ELEMENTS[1], True, KINDS.by_value), Convention.OXIDE,
                      lambda m: m(np.zeros(32, np.uint8))),
    "element_rows": (disjoint_slice_of(ELEMENTS[0], True, KINDS.by_value), Convention.OXIDE,
                     lambda m: m(_f32(2, 6))),
    "prefix": (Slice(F32, True), Convention.OXIDE, lambda m: {"ptr": m(_f32(5)), "len": 3}),
    "record": (SPAN_SCALARS, Convention.C,  # a NumPy structured scalar, each one other bytes
               lambda m: _as_record({"a": 0.5, "k": next(_RECORDS) % 256}, _record_dtype(SPAN_SCALARS))),
    "bool": (Scalar(dtype("bool")), Convention.NUMBA, lambda m: True),
    "f16": (Scalar(dtype("f16")), Convention.C, lambda m: 0.1),  # a 2-byte blob under C
    "bf16": (Scalar(dtype("bf16")), Convention.OXIDE, lambda m: -2.5),  # a b16 value
    "dataclass": (SPAN, Convention.C, lambda m: _dataclass_of(SPAN)(m(_f32(3)), 3)),
    "scalar_members": (SCALARS, Convention.C, lambda m: {"b": True, "h": 0.1, "g": -2.5, "data": m(_f32(4))}),
    "numba_tuple": (Tuple((NumbaArray(F32, 1, "C"), Scalar(dtype("i64")), NumbaArray(F32, 2, "A"))),
                    Convention.NUMBA, lambda m: (m(_f32(4)), 7, m(_f32(2, 3)))),
    "tile_tuple": (Tuple((TILE, TILE)), Convention.CUTILE, lambda m: [m(_f32(16, 4)), m(_f32(16, 4))]),
    "dataclass_item": (Tuple((SPAN, Scalar(dtype("f64")))), Convention.C,
                       lambda m: (_dataclass_of(SPAN)(m(_f32(3)), 3), 2.5)),
    "record_item": (Tuple((Tuple((SPAN_SCALARS, Slice(F32))), Scalar(dtype("u8")))), Convention.C,
                    lambda m: ((_as_record({"a": 0.5, "k": next(_RECORDS) % 256},
                                           _record_dtype(SPAN_SCALARS)), m(_f32(2))), 1)),
    "prefix_member": (SPAN, Convention.C, lambda m: {"data": {"ptr": m(_f32(5)), "len": 3}, "len": 3}),
    "prefix_item": (Tuple((Scalar(dtype("i32")), Slice(F32, True))), Convention.OXIDE,
                    lambda m: (4, {"ptr": m(_f32(5)), "len": 2})),
}


@pytest.mark.parametrize("producer", sorted(PRODUCERS))
@pytest.mark.parametrize("kind", sorted(KIND_CASES))
def test_every_producer_and_kind_gets_a_c_plan(producer, kind):
    """Which (producer, kind) pairs the C plan takes, and that it packs the Python path's bytes there: a
    change that sends one to the Python path fails."""
    if (producer, kind) == ("jax", "numba_F"):
        pytest.skip("JAX arrays are row-major")
    device_type, make = PRODUCERS[producer]
    t, convention, value = KIND_CASES[kind]
    sig = Signature("k", (Param("x", t), Param("n", Scalar(dtype("i32")))), convention=convention)
    args = (value(make), 5)
    plan, python = _plans(sig, args, device_type)  # asserts the C plan takes every argument
    assert plan.pack(args) == python(args)
    again = (value(make), 6)  # other tensors of the same types: read afresh
    assert plan.pack(again) == python(again) != python(args)


# --- the call path: Kernel calls with these producers launch from C --------------------------------

_POINTER_ATTRIBUTE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.c_int,
                                      ctypes.c_uint64)


class _RecordingCuda(_RecordingCpu):
    """As ``_RecordingCpu`` for a GPU: its cuPointerGetAttribute says every pointer is on ``ordinal``."""

    device_type = DLPACK_CUDA

    def __init__(self, ordinal: int = 0):
        super().__init__()
        self.ordinal = ordinal
        self._attribute = _POINTER_ATTRIBUTE(self._device_of)

    def _device_of(self, out, attribute, pointer):
        out[0] = self.ordinal
        return 0 if attribute == 9 else 1  # CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL

    def native_facts(self, function, name):
        entry = ctypes.cast(self._attribute, ctypes.c_void_p).value
        return {**super().native_facts(function, name), "pointer_attribute_entry": entry}


NUMBA_KERNEL = Signature("k", (Param("x", NumbaArray(dtype("f32"), 2, "A")), Param("y", Slice(dtype("i32"))),
                               Param("n", Scalar(dtype("i64")))), convention=Convention.NUMBA)


def test_kernel_calls_with_array_interface_producers_launch_from_c(driver, python_calls):  # noqa: F811
    backend = _RecordingCuda()
    kernel = Module(Image(None, "sm_90", {"k": NUMBA_KERNEL}), backend).k
    x, y = np.zeros((3, 4), np.float32), np.zeros(5, np.int32)
    args = (Cai(x[:, ::2]), Cai(y), 7)
    kernel(*args, grid=2, block=32)  # a miss: the Python path builds and remembers the plan
    assert len(python_calls) == 1
    driver.clear()
    kernel(*args, grid=2, block=32)
    assert len(python_calls) == 1, "the second call ran Python"
    xp, yp = x.__array_interface__["data"][0], y.__array_interface__["data"][0]
    params = struct.pack("<QQqqQqqqqQQq", 0, 0, 6, 4, xp, 3, 2, 16, 8, yp, 5, 7)
    assert driver == [(0xF00, (2, 1, 1), (32, 1, 1), 0, 0, params)]  # no framework: the legacy stream
    assert backend.launched == []


def test_an_array_on_another_gpu_is_the_python_paths_to_judge(driver, python_calls):  # noqa: F811
    backend = _RecordingCuda(ordinal=1)  # the driver places the pointer on cuda:1; the Python path's
    kernel = Module(Image(None, "sm_90", {"k": NUMBA_KERNEL}), backend).k  # pointer_device says -1
    args = (Cai(np.zeros((2, 2), np.float32)), Cai(np.zeros(1, np.int32)), 1)
    for _ in range(2):
        kernel(*args, grid=1, block=1)
    assert driver == [] and len(python_calls) == 2 and len(backend.launched) == 2


# --- cuTile arrays: the C plan judges every promise as tensor_rules.tile_array does ----------------

def _tile_type(rng: random.Random) -> TileArray:
    ndim = rng.randint(1, 3)

    def per_axis(make):
        return tuple(make() for _ in range(ndim)) if rng.random() < 0.5 else ()
    return TileArray(dtype(rng.choice(("f32", "f16", "i64"))), ndim, rng.choice(("i32", "u32", "i64")),
                     per_axis(lambda: rng.choice((1, 2, 4))), per_axis(lambda: rng.choice((1, 2, 3))),
                     per_axis(lambda: rng.choice((None, 1, 2, 4))),
                     per_axis(lambda: rng.choice((None, 1, 3))),
                     per_axis(lambda: rng.choice((None, -1, 1, 2))), rng.choice((1, 2, 16)))


def _tile_argument(t: TileArray, rng: random.Random) -> Cai:
    base = np.zeros(tuple(rng.choice((1, 2, 4, 6)) for _ in range(t.ndim)), np.dtype(t.dtype.numpy_name))
    view = rng.choice([base, np.asfortranarray(base), base[::-1], base[..., ::2]])
    if rng.random() < 0.2:
        view = np.frombuffer(bytearray(view.nbytes + 16), view.dtype, view.size, offset=8).reshape(view.shape)
    return Cai(view)


def test_cuTile_arrays_pack_as_python_or_decline_where_it_refuses():
    rng = random.Random(22)
    accepted = refused = 0
    for _ in range(200):
        t = _tile_type(rng)
        sig = Signature("k", (Param("x", t), Param("n", Scalar(dtype("i32")))), convention=Convention.CUTILE)
        plan, python = _plans(sig, (_tile_argument(t, rng), 1), DLPACK_CUDA)
        for _ in range(4):
            args = (_tile_argument(t, rng), rng.randint(0, 9))
            try:
                expected = python(args)
            except ArgumentError as error:
                assert str(error).startswith("k: argument 'x' (")
                assert plan.pack(args) is False, (t, args[0].array.shape, args[0].array.strides)
                refused += 1
            else:
                assert plan.pack(args) == expected, (t, args[0].array.shape, args[0].array.strides)
                accepted += 1
    assert accepted > 100 and refused > 100  # both sides of every promise were reached


@pytest.mark.parametrize("make", [
    lambda: torch.zeros(2, 5)[:, 1:2], lambda: torch.zeros(4).view(1, 4, 1),
    lambda: torch.zeros(3, 1).expand(3, 1), lambda: torch.zeros(1, 7)[:, ::3],
    lambda: torch.zeros(2, 3).unsqueeze(1), lambda: torch.empty_strided((1, 3), (100, 1)),
], ids=["column", "unit_axes", "expanded", "strided_row", "unsqueezed", "odd_unit_stride"])
def test_torch_unit_axis_strides_reach_numba_arrays_as_torch_reports_them(make):
    """numba's struct carries every stride, unit axes' too: the C plan's (DLPack's) are torch's."""
    t = make()
    sig = Signature("k", (Param("a", NumbaArray(dtype("f32"), t.dim(), "A")),), convention=Convention.NUMBA)
    plan, python = _plans(sig, (t,))
    assert plan.pack((t,)) == python((t,))


# --- by-value structs and tuples of scalars and raw pointers ----------------------------------------

RECORD_SCALARS = ("i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64", "f32", "f64", "bool", "f16",
                  "bf16")
# per float dtype: values at its range's edges, rounded (halves: to nearest even), subnormal
FLOAT_VALUES = {"f32": (0.0, -1.5, 3.4e38, 1e-40, 0.1), "f64": (0.0, -1.5, 1e300, 1e-310, 0.1),
                "f16": (0.0, -1.5, 65504.0, 1e-6, 0.1, 2049.0),
                "bf16": (0.0, -1.5, 3.38e38, 1e-40, 0.1, 257.0)}


MEMBER_DTYPES = ("f32", "i32", "u8", "i16")  # what every producer makes (JAX: no 64-bit by default)


def _member_type(rng: random.Random, depth: int = 0):
    choice = rng.random()
    if choice < 0.25:
        return Pointer(Scalar(dtype(rng.choice(MEMBER_DTYPES))), rng.random() < 0.5)
    if choice < 0.4:
        return Slice(dtype(rng.choice(MEMBER_DTYPES)), rng.random() < 0.5)
    if choice < 0.45:
        return DisjointSlice(dtype(rng.choice(MEMBER_DTYPES)), rng.random() < 0.4)
    if choice < 0.5:
        return _element_slice(rng)
    if choice < 0.55 and depth < 2:
        return _record_type(rng, f"N{depth}", depth + 1)
    if choice < 0.6 and depth < 2:  # scalars alone, which a NumPy record may stand for (in a tuple too)
        return Struct(f"R{depth}", tuple(StructField(f"f{k}", Scalar(dtype(rng.choice(RECORD_SCALARS))))
                                         for k in range(rng.randint(1, 3))))
    return Scalar(dtype(rng.choice(RECORD_SCALARS)))


def _record_type(rng: random.Random, name: str, depth: int = 0):
    members = tuple(_member_type(rng, depth) for _ in range(rng.randint(1, 4)))
    if rng.random() < 0.5:
        return Struct(name, tuple(StructField(f"f{k}", m) for k, m in enumerate(members)))
    return Tuple(members)


def _member_value(t, rng: random.Random, make):
    if isinstance(t, (Struct, Tuple)):
        return _record_value(t, rng, make)
    if isinstance(t, (Pointer, Slice, DisjointSlice)):
        choice = rng.random()
        if isinstance(t, Pointer) and choice < 0.2:
            return None
        if isinstance(t, Pointer) and choice < 0.4:
            return rng.choice((0, 0x7F00_0000_1000, (1 << 64) - 8))  # a raw address
        if isinstance(t, Slice) and choice < 0.3:  # {"ptr", "len"}: a prefix of whole elements
            tensor = _slice_tensor(t, rng)
            count = tensor.size // units_per_element(t, KINDS.by_value)
            return {"ptr": make(tensor), "len": rng.randint(0, count)}
        if not isinstance(t, Pointer):
            return make(_slice_tensor(t, rng))
        return make(np.zeros(rng.choice((0, 1, 6)), np.dtype(dtype(t.pointee.dtype.name).numpy_name)))
    dt = t.dtype
    if dt.name == "bool":
        return rng.choice((True, False, 0, 1))
    if dt.is_integer:
        top = 1 << (dt.bits - 1)
        lo, hi = (-top, top - 1) if dt.is_signed else (0, 2 * top - 1)
        return rng.choice((lo, hi, 0, rng.randint(lo, hi)))
    return rng.choice(FLOAT_VALUES[dt.name])


def _record_signature(rng: random.Random) -> Signature:
    params = []
    for i in range(rng.randint(1, 4)):
        params.append(Param(f"r{i}", _record_type(rng, f"S{i}")))
        if rng.random() < 0.5:
            params.append(Param(f"n{i}", Scalar(dtype("i32"))))
    return Signature("k", tuple(params), convention=Convention.C)


@functools.cache
def _dataclass_of(t: Struct) -> type:
    return dataclasses.make_dataclass(t.name, [f.name for f in t.fields])


@functools.cache
def _record_dtype(t) -> np.dtype | None:
    """The NumPy structured dtype of a struct of scalars (and such structs), else None."""
    if not isinstance(t, Struct):
        return None
    formats = [np.dtype(f.type.dtype.numpy_name) if isinstance(f.type, Scalar) and f.type.dtype.numpy_name
               else _record_dtype(f.type) for f in t.fields]
    if any(f is None for f in formats):
        return None
    return np.dtype({"names": [f.name for f in t.fields], "formats": formats}, align=True)


def _fields(value) -> dict:
    """A struct value's fields by name: a dict's, a dataclass's, a NumPy record's (scalars as Python's)."""
    if isinstance(value, np.void):
        return {n: value[n] if isinstance(value[n], np.void) else value[n].item() for n in value.dtype.names}
    return value if isinstance(value, dict) else vars(value)


def _as_record(value, dtype: np.dtype) -> np.void:
    def plain(v):
        return tuple(map(plain, _fields(v).values())) if isinstance(v, (dict, np.void)) or \
            dataclasses.is_dataclass(v) else v
    return np.array(plain(value), dtype)[()]


def _record_value(t, rng: random.Random, make):
    """A dict, dataclass or NumPy record for a struct, a tuple or list for a tuple."""
    if isinstance(t, Struct):
        fields, choice = {f.name: _member_value(f.type, rng, make) for f in t.fields}, rng.random()
        if choice < 0.25:
            return _dataclass_of(t)(**fields)
        return _as_record(fields, _record_dtype(t)) if choice < 0.5 and _record_dtype(t) else fields
    items = [_member_value(m, rng, make) for m in t.items]
    return items if rng.random() < 0.3 else tuple(items)


def _is_prefix(value) -> bool:
    return type(value) is dict and value.keys() == {"ptr", "len"}


def _same_containers(value, like):
    """``value`` with the containers of ``like``, and ``like``'s raw address where it had one and ``value``
    a tensor: a plan reads nested types from the call that built it (its tensor type for a pointer that
    held an address there is torch's)."""
    if isinstance(like, np.void):
        return _as_record(value, like.dtype)
    if _is_prefix(like) != _is_prefix(value):  # a slice given as a tensor or as {"ptr", "len"}
        return {"ptr": value, "len": 0} if _is_prefix(like) else value["ptr"]
    if isinstance(like, dict) or dataclasses.is_dataclass(like):
        fields, like_fields = _fields(value), _fields(like)
        same = {k: _same_containers(v, like_fields[k]) for k, v in fields.items()}
        return same if isinstance(like, dict) else type(like)(**same)
    if isinstance(like, (tuple, list)):
        return type(like)(_same_containers(v, w) for v, w in zip(value, like, strict=True))
    if (like is None or type(like) is int) and not (value is None or isinstance(value, (int, float))):
        return like
    return value


def _record_args(signature: Signature, rng: random.Random, make, like: tuple | None = None) -> tuple:
    args = []
    for k, p in enumerate(signature.params):
        if isinstance(p.type, (Struct, Tuple)):
            value = _record_value(p.type, rng, make)
            args.append(value if like is None else _same_containers(value, like[k]))
        else:
            args.append(rng.randint(-5, 5))
    return tuple(args)


@pytest.mark.parametrize("producer", sorted(PRODUCERS))
def test_structs_and_tuples_pack_in_c_as_in_python(producer):
    """Random by-value structs (dicts, dataclasses, NumPy records) and tuples (nested in each other, with raw
    pointers, slices -- also ``{"ptr", "len"}`` dicts -- and DisjointSlices of one producer's tensors, None
    and raw addresses, bool and half members):
    the C plan takes them and packs the Python bytes."""
    device_type, make = PRODUCERS[producer]
    rng = random.Random(f"records-{producer}")
    for _ in range(80):
        signature = _record_signature(rng)
        first = _record_args(signature, rng, make)
        plan, python = _plans(signature, first, device_type)
        for _ in range(3):
            args = _record_args(signature, rng, make, first)
            assert plan.pack(args) == python(args), (signature, args)


def _items_type(rng: random.Random, tile: bool, depth: int = 0):
    items = []
    for _ in range(rng.randint(1, 4)):
        choice = rng.random()
        if choice < 0.45:
            items.append(_tile_type(rng) if tile else NumbaArray(dtype(rng.choice(("f32", "i32", "u8"))),
                                                                   rng.randint(1, 2), rng.choice("CFA")))
        elif choice < 0.6 and depth < 1:
            items.append(_items_type(rng, tile, depth + 1))
        else:
            items.append(Scalar(dtype(rng.choice(("i32", "i64", "f32", "f64")))))
    return Tuple(tuple(items))


def _items_value(t, rng: random.Random, make):
    found = []
    for item in t.items:
        if isinstance(item, Tuple):
            found.append(_items_value(item, rng, make))
        elif isinstance(item, TileArray):
            found.append(make(_tile_argument(item, rng).array))
        elif isinstance(item, NumbaArray):
            found.append(make(_layout_of(item.layout, _numpy(item.dtype.name, _shape(item.ndim, rng)), rng)))
        else:
            found.append(rng.randint(0, 9) if item.dtype.is_integer else rng.choice((0.5, -2.0)))
    return tuple(found)


@pytest.mark.parametrize("tile", [False, True], ids=["numba", "cutile"])
def test_numba_and_cutile_tuples_pack_in_c_as_in_python(tile):
    """Tuples whose items are parameters of their own (numba, cuTile), nested, of arrays and scalars:
    packed in C as in Python, or declined where the Python path refuses."""
    rng = random.Random(f"items-{tile}")
    accepted = refused = 0
    for _ in range(100):
        t = _items_type(rng, tile)
        sig = Signature("k", (Param("t", t), Param("n", Scalar(dtype("i32")))),
                        convention=Convention.CUTILE if tile else Convention.NUMBA)
        plan, python = _plans(sig, (_items_value(t, rng, Cai), 1), DLPACK_CUDA)
        for _ in range(3):
            args = (_items_value(t, rng, Cai), rng.randint(0, 9))
            try:
                expected = python(args)
            except ArgumentError as error:
                assert str(error).startswith("k: argument 't.") and plan.pack(args) is False
                refused += 1
                continue
            assert plan.pack(args) == expected, (t, args)
            accepted += 1
    assert accepted > 60 and (refused > 30 or not tile)  # cuTile: both sides of its promises


@pytest.mark.parametrize(("value", "message"), [
    ({"a": 1, "p": None, "extra": 2}, "struct S fields are ['a', 'p'] (got missing [], unknown ['extra'])"),
    ({"a": 1}, "struct S fields are ['a', 'p'] (got missing ['p'], unknown [])"),
    ({"a": 1 << 40, "p": None}, "does not fit"),
    ({"a": 1, "p": -8}, "a raw address must fit u64 (got -8)"),
    ({"a": 1, "p": torch.zeros(4, dtype=torch.float64)}, "got float64 tensor on cpu; expected float32"),
    ({"a": 1, "p": torch.zeros(8)[::2]}, "takes a contiguous tensor for a raw pointer"),
])
def test_a_struct_the_python_path_refuses_is_declined_in_c(value, message):
    t = Struct("S", (StructField("a", Scalar(dtype("i32"))), StructField("p", Pointer(Scalar(dtype("f32"))))))
    sig = Signature("k", (Param("s", t),), convention=Convention.C)
    good = {"a": 3, "p": torch.zeros(2)}
    plan, python = _plans(sig, (good,))
    assert plan.pack((good,)) == python((good,))
    assert plan.pack((value,)) is False
    with pytest.raises(ArgumentError) as info:
        python((value,))
    assert str(info.value).startswith("k: argument 's' (") and message in str(info.value), str(info.value)


# where a {"ptr", "len"} slice of type t sits: (the parameter's type, its value around the dict)
PREFIX_PLACES = {
    "argument": (lambda t: t, lambda d: d),
    "member": (lambda t: Struct("S", (StructField("k", Scalar(dtype("u8"))), StructField("data", t))),
               lambda d: {"k": 7, "data": d}),
    "item": (lambda t: Tuple((t, Scalar(dtype("f32")))), lambda d: (d, 0.5)),
}


@pytest.mark.parametrize("place", sorted(PREFIX_PLACES))
@pytest.mark.parametrize("producer", sorted(PRODUCERS))
def test_slice_prefix_dicts_pack_in_c_as_in_python(producer, place):
    """``{"ptr": tensor, "len": n}`` for a slice (of numbers or of elements; an argument, a struct member or
    a tuple item), next to an ``&mut`` slice it must not overlap: the C plan packs the Python bytes for every
    n up to the tensor's length, and declines a longer one, a bool, a missing key, where the Python path
    raises naming the argument."""
    device_type, make = PRODUCERS[producer]
    outer, around = PREFIX_PLACES[place]
    rng = random.Random(f"prefix-{producer}")
    for t in (Slice(F32), slice_of(ELEMENTS[0], False, KINDS.by_value)):
        sig = Signature("k", (Param("x", outer(t)), Param("y", Slice(F32, True))),
                        convention=Convention.OXIDE)
        per = units_per_element(t, KINDS.by_value)

        def call(n: int, per: int = per) -> tuple:
            return around({"ptr": make(_f32(4 * per)), "len": n}), make(_f32(3))
        plan, python = _plans(sig, call(2), device_type)
        for _ in range(10):
            args = call(rng.randint(0, 4))
            assert plan.pack(args) == python(args), args
        shared = make(_f32(4 * per))
        for bad in ({"ptr": shared, "len": 5}, {"ptr": shared, "len": True}, {"ptr": shared, "n": 1},
                    {"ptr": shared, "len": -1}):
            assert plan.pack((around(bad), make(_f32(3)))) is False
            with pytest.raises(ArgumentError, match=r"^k: argument 'x' "):
                python((around(bad), make(_f32(3))))


@pytest.mark.parametrize("place", sorted(PREFIX_PLACES))
def test_a_slice_prefix_dict_launches_from_c_under_its_no_alias_promise(place, driver, python_calls):  # noqa: F811
    """A kernel call with a ``{"ptr", "len"}`` dict (an argument, a struct member, a tuple item) next to an
    ``&mut`` slice runs from C; an overlap of the dict's tensor with the slice declines there and the Python
    path names both."""
    outer, around = PREFIX_PLACES[place]
    sig = Signature("k", (Param("x", outer(Slice(F32))), Param("y", Slice(F32, True))),
                    convention=Convention.OXIDE)
    kernel = Module(Image(None, "sm_90", {"k": sig}), _RecordingCpu()).k
    whole = torch.zeros(8)
    for _ in range(3):
        kernel(around({"ptr": whole[:4], "len": 2}), whole[4:], grid=1, block=1)
    assert len(kernel._cached()) == 1 and len(python_calls) == 1 and len(driver) == 3
    with pytest.raises(ArgumentError, match=r"^k: argument 'y' .* overlaps argument 'x"):
        kernel(around({"ptr": whole[:5], "len": 2}), whole[4:], grid=1, block=1)
    assert len(python_calls) == 2 and len(driver) == 3


RECORD = Struct("R", (StructField("x", Scalar(dtype("f32"))), StructField("n", Scalar(dtype("i64"))),
                      StructField("b", Scalar(dtype("bool"))), StructField("h", Scalar(dtype("f16"))),
                      StructField("s", SPAN_SCALARS)))


def test_numpy_records_copy_their_fields_in_c():
    """A struct given as a NumPy structured scalar whose fields have the members' dtypes (any offsets, a
    nested record): the C plan copies the fields' bytes, as the Python path converts them; a NaN or a
    bool byte other than 0 / 1 declines to the Python path, and a record of other field dtypes gets no C
    plan (its fields are converted, range-checked, in Python)."""
    sig = Signature("k", (Param("r", RECORD), Param("n", Scalar(dtype("i32")))), convention=Convention.C)
    fields = [("x", "<f4"), ("n", "<i8"), ("b", "?"), ("h", "<f2"), ("s", [("a", "<f8"), ("k", "u1")])]
    packed = np.dtype(fields)  # no padding: other offsets than the struct's
    rng = random.Random("records")
    for layout in (packed, _record_dtype(RECORD)):
        def value(x: float = 1.5, layout: np.dtype = layout) -> np.void:
            return np.array((x, rng.randint(-1 << 63, (1 << 63) - 1), rng.random() < 0.5, rng.random(),
                             (rng.random(), rng.randint(0, 255))), layout)[()]
        plan, python = _plans(sig, (value(), 1))
        for x in (0.0, -0.0, float("inf"), 3.4e38, 1e-45):
            args = (value(x), rng.randint(-9, 9))
            assert plan.pack(args) == python(args), args
        assert plan.pack((value(float("nan")), 1)) is False and python((value(float("nan")), 1))
        odd = np.array([value()])
        odd.view(np.uint8)[layout.fields["b"][1]] = 2
        assert plan.pack((odd[0], 1)) is False and python((odd[0], 1))
    other = np.array((1.5, 2, True, 0.5, (0.25, 3)), [("x", "<f8"), *fields[1:]])[()]  # x: float64
    binders = tuple(make_binder(BindContext("k", Convention.C, DLPACK_CPU, 0), p, type(a))
                    for p, a in zip(sig.params, (other, 1), strict=True))
    assert fastpath.native_specs(binders, (other, 1), sig.layout) is None


@dataclasses.dataclass
class _AP:
    a: Any
    p: Any


def _without_p() -> _AP:
    value = _AP(1, None)
    del value.p
    return value


@pytest.mark.parametrize(("value", "message"), [
    (lambda: _AP(1 << 40, None), "does not fit"),
    (lambda: _AP(1, torch.zeros(8)[::2]), "takes a contiguous tensor for a raw pointer"),
    (lambda: _AP(True, None), "expected an integer for i32 (got bool True)"),
    (_without_p, "struct S fields are ['a', 'p'] (got dataclass _AP without 'p')"),
])
def test_a_dataclass_the_python_path_refuses_is_declined_in_c(value, message):
    t = Struct("S", (StructField("a", Scalar(dtype("i32"))), StructField("p", Pointer(Scalar(dtype("f32"))))))
    sig = Signature("k", (Param("s", t),), convention=Convention.C)
    good = _AP(3, torch.zeros(2))
    plan, python = _plans(sig, (good,))
    assert plan.pack((good,)) == python((good,))
    assert plan.pack((value(),)) is False
    with pytest.raises(ArgumentError) as info:
        python((value(),))
    assert str(info.value).startswith("k: argument 's' (") and message in str(info.value), str(info.value)


MEMBER_REFUSALS = {  # a {data: &mut [f32], n: u32} struct's slice given...
    "readonly": (lambda: Cai(np.zeros(4, np.float32), readonly=True), "is written by the kernel"),
    "dtype": (lambda: cupy_array(np.zeros(4, np.float64)), "got float64 tensor on cuda:0; expected float32"),
    "strided": (lambda: Cai(np.zeros(8, np.float32)[::2]), "takes a contiguous tensor for a slice"),
    "other_gpu": (lambda: cupy_array(np.zeros(4, np.float32), device_id=1), "tensor on cuda:1"),
    "raw_address": (lambda: 0x1000, "takes a tensor"),
}


@pytest.mark.parametrize("case", sorted(MEMBER_REFUSALS))
def test_a_slice_member_the_python_path_refuses_is_declined_in_c(case):
    make, message = MEMBER_REFUSALS[case]
    t = Struct("S", (StructField("data", Slice(dtype("f32"), True)), StructField("n", Scalar(dtype("u32")))))
    sig = Signature("k", (Param("s", t),), convention=Convention.OXIDE)
    for good in (Cai(np.zeros(4, np.float32)), cupy_array(np.zeros(4, np.float32))):
        plan, python = _plans(sig, ({"data": good, "n": 4},), DLPACK_CUDA)
        assert plan.pack(({"data": good, "n": 4},)) == python(({"data": good, "n": 4},))
        bad = ({"data": make(), "n": 4},)
        assert plan.pack(bad) is False
        with pytest.raises(ArgumentError) as info:
            python(bad)
        assert str(info.value).startswith("k: argument 's' (") and message in str(info.value), str(info.value)


def test_jax_arrays_are_read_through_a_capsule_per_launch():
    """Any __dlpack__ producer (JAX here, on the CPU): a fresh capsule per launch, read and released."""
    jnp = pytest.importorskip("jax.numpy")
    rng = random.Random(7)
    names = ("f32", "i32", "u8", "f16", "bool")
    for _ in range(60):
        params = []
        for i in range(rng.randint(1, 4)):
            name, choice = rng.choice(names), rng.random()
            params.append(Param(f"p{i}", NumbaArray(dtype(name), rng.randint(1, 3), rng.choice("CA"))
                                if choice < 0.4 else Slice(dtype(name)) if choice < 0.7
                                else Pointer(Scalar(dtype(name)))))
        sig = Signature("k", tuple(params), convention=Convention.NUMBA)

        def make(t):
            ndim = t.ndim if isinstance(t, NumbaArray) else rng.randint(1, 2)
            name = t.dtype.name if not isinstance(t, Pointer) else t.pointee.dtype.name
            return jnp.asarray(_numpy(name, _shape(ndim, rng)))
        plan, python = _plans(sig, tuple(make(p.type) for p in params))
        for _ in range(2):
            args = tuple(make(p.type) for p in params)
            assert plan.pack(args) == python(args), (sig, [a.shape for a in args])
    wrong = jnp.zeros(4, jnp.int32)
    sig = Signature("k", (Param("x", Pointer(Scalar(dtype("f32")))),), convention=Convention.NUMBA)
    plan, python = _plans(sig, (jnp.zeros(4, jnp.float32),))
    assert plan.pack((wrong,)) is False
    with pytest.raises(ArgumentError, match=r"^k: argument 'x' \(\*mut f32\) got i32 tensor on cpu"):
        python((wrong,))


def test_a_bad_tuple_item_leaves_the_error_to_the_python_path_in_its_order(driver, python_calls):  # noqa: F811
    """An item of a type no binder takes makes no C plan; the Python path raises, argument by argument."""
    sig = Signature("k", (Param("x", NumbaArray(dtype("f32"), 1, "C")),
                          Param("t", Tuple((NumbaArray(dtype("f32"), 1, "C"), Scalar(dtype("i32")))))),
                    convention=Convention.NUMBA)
    kernel = Module(Image(None, "sm_90", {"k": sig}), _RecordingCpu()).k
    with pytest.raises(ArgumentError, match=r"^k: argument 'x' .* got float64 tensor"):
        kernel(torch.zeros(3, dtype=torch.float64), ("seven", 7), grid=1, block=1)
    with pytest.raises(ArgumentError, match=r"^k: argument 't\.0' .* \(got str\)"):
        kernel(torch.zeros(3), ("seven", 7), grid=1, block=1)
    assert kernel._cached() == () and driver == []


def test_structs_of_another_producer_get_their_own_c_plan(driver, python_calls):  # noqa: F811
    """The C launcher keeps one plan per top-level types, and a struct is a dict whichever tensors it
    holds: dicts of JAX arrays after dicts of torch tensors take Python once, then C, and back."""
    jnp = pytest.importorskip("jax.numpy")
    sig = Signature("k", (Param("s", SPAN),), convention=Convention.C)
    kernel = Module(Image(None, "sm_90", {"k": sig}), _RecordingCpu()).k
    makers = {"torch": lambda: {"data": torch.zeros(4), "len": 4},
              "jax": lambda: {"data": jnp.zeros(4, jnp.float32), "len": 4}}
    for producer in ("torch", "jax", "torch", "jax"):
        before = len(python_calls)
        for _ in range(3):
            kernel(makers[producer](), grid=1, block=1)
        assert len(python_calls) == before + 1, f"{producer}: only the first call of a switch runs Python"
    assert kernel._cached() == ((dict,),) and len(driver) == 12  # the Python path launches the C plan too


@pytest.mark.parametrize("kind", ["dataclass_item", "record_item", "prefix_member", "prefix_item"])
def test_structs_and_tuples_of_every_member_kind_launch_from_c(kind, driver, python_calls):  # noqa: F811
    """Kernel calls with dataclasses and NumPy records inside tuples and ``{"ptr", "len"}`` slices inside
    structs and tuples: the first call builds the plan in Python, the rest launch from C."""
    t, convention, value = KIND_CASES[kind]
    sig = Signature("k", (Param("x", t), Param("n", Scalar(dtype("i32")))), convention=convention)
    kernel = Module(Image(None, "sm_90", {"k": sig}), _RecordingCpu()).k
    for _ in range(3):
        kernel(value(_torch), 5, grid=1, block=1)
    assert len(python_calls) == 1 and len(driver) == 3
