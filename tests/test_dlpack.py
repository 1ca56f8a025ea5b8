"""Tensor facts per producer type, DLPack capsules (versioned and legacy), streams."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ptxbridge.abi import ArgumentError, dtype
from ptxbridge.abi.devices import DLPACK_CPU, DLPACK_CUDA
from ptxbridge.launch.dlpack import (
    TensorInfo,
    default_stream_for,
    device_name,
    extractor_for,
    stream_handle,
)


class OnlyDLPack:
    """A producer that speaks nothing but the DLPack protocol (delegating to NumPy)."""

    def __init__(self, array: np.ndarray, legacy: bool = False):
        self.array, self.legacy, self.calls = array, legacy, []

    def __dlpack__(self, stream=None, max_version=None, **kwargs):
        if self.legacy and max_version is not None:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        self.calls.append((stream, max_version))
        if max_version is None:  # NumPy itself takes only stream=None
            return self.array.__dlpack__()
        return self.array.__dlpack__(max_version=max_version)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


class FakeCAI:
    """Like numba device arrays: the interface is a property of the class."""

    def __init__(self, ptr: int, shape, typestr: str, strides=None, readonly=False):
        self.interface = {"data": (ptr, readonly), "shape": shape, "typestr": typestr,
                          "strides": strides, "version": 3}

    @property
    def __cuda_array_interface__(self):
        return self.interface


def facts(obj) -> TensorInfo:
    return extractor_for(type(obj))(obj, None)


def test_numpy_facts_give_element_strides_and_offset_pointer():
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    view = base[1:, ::2]
    info = facts(view)
    assert info.ptr == base.ctypes.data + 6 * 4
    assert (info.dtype, info.shape, info.strides) == (dtype("f32"), (3, 3), (6, 2))
    assert (info.device_type, info.readonly) == (DLPACK_CPU, False)
    assert not info.c_contiguous() and not info.f_contiguous()


def test_numpy_readonly_and_contiguity_of_unit_axes():
    a = np.zeros((1, 5), np.int16)
    a.flags.writeable = False
    info = facts(a)
    assert info.readonly and info.c_contiguous()
    assert facts(np.asfortranarray(np.zeros((3, 4)))).f_contiguous()
    odd = TensorInfo(0, dtype("f32"), "float32", (1, 4), (99, 1), DLPACK_CPU, 0, False, None)
    assert odd.c_contiguous()  # a unit axis may carry any stride


def test_span_covers_negative_strides():
    a = np.arange(10, dtype=np.float64)
    info = facts(a[::-2])
    low, nbytes = info.span()
    assert low == a.ctypes.data + 8 and nbytes == 9 * 8


def test_span_of_structured_elements_uses_their_itemsize():
    """A record of four u32 has no ptxbridge dtype; its 16 bytes per element still count."""
    v = np.zeros(10, np.dtype([("x", "<u4"), ("y", "<u4"), ("z", "<u4"), ("w", "<u4")]))
    info = facts(v[::3])
    assert info.dtype is None and info.strides == (3,)
    assert info.span() == (v.ctypes.data, (3 * 3 + 1) * 16)


@pytest.mark.parametrize("legacy", [False, True])
def test_dlpack_capsule_matches_numpy(legacy):
    array = np.arange(12, dtype=np.int64).reshape(3, 4)[:, 1:]
    producer = OnlyDLPack(array, legacy=legacy)
    info = facts(producer)
    assert info.ptr == array.ctypes.data
    assert (info.dtype, info.shape, info.strides) == (dtype("i64"), (3, 3), (4, 1))
    assert (info.device_type, info.device_id) == (DLPACK_CPU, 0)
    assert producer.calls[-1] == (None, None if legacy else (1, 1))  # CPU: stream None
    assert facts(producer).ptr == info.ptr  # each launch reads a fresh capsule


def test_dlpack_versioned_capsule_reports_read_only():
    array = np.ones(3, np.float32)
    array.flags.writeable = False
    assert facts(OnlyDLPack(array)).readonly


def test_dlpack_device_disagreeing_with_capsule_is_an_error():
    class Liar(OnlyDLPack):
        def __dlpack_device__(self):
            return (DLPACK_CUDA, 0)

    liar = Liar(np.ones(2))
    with pytest.raises(ArgumentError, match="__dlpack_device__ says"):
        facts(liar)
    assert liar.calls[-1][0] == 1  # a CUDA producer is asked for the legacy default stream


def test_cuda_array_interface_facts():
    info = facts(FakeCAI(0x7000, (4, 3), "<f2", strides=(2, 8)))
    assert (info.ptr, info.dtype, info.shape, info.strides) == (0x7000, dtype("f16"), (4, 3), (1, 4))
    assert (info.device_type, info.device_id) == (DLPACK_CUDA, -1)
    c_order = facts(FakeCAI(0x7000, (2, 5), "<i4"))
    assert c_order.strides == (5, 1) and c_order.c_contiguous()
    with pytest.raises(ArgumentError, match="not multiples of the item size"):
        facts(FakeCAI(0x7000, (2,), "<f4", strides=(6,)))


def test_non_tensor_types_have_no_extractor_and_choice_is_cached():
    assert extractor_for(int) is None and extractor_for(dict) is None
    assert extractor_for(np.ndarray) is extractor_for(np.ndarray)


def test_stream_handles():
    class CudaStream:
        def __cuda_stream__(self):
            return (0, 0xABC)

    class TorchLike:
        cuda_stream = 0x55

    class CupyLike:
        ptr = 0x66

    assert stream_handle(7) == 7
    assert stream_handle(CudaStream()) == 0xABC
    assert stream_handle(TorchLike()) == 0x55 and stream_handle(CupyLike()) == 0x66
    with pytest.raises(ArgumentError, match=r"stream= must be .*\(got str\)"):
        stream_handle("default")


def test_default_stream_is_decided_by_the_arguments_struct_members_included():
    assert default_stream_for((np.zeros(2), 1.0)) is None
    assert default_stream_for(({"data": np.zeros(2), "len": 2},)) is None
    torch = pytest.importorskip("torch")
    assert callable(default_stream_for((torch.zeros(2), 1)))
    assert callable(default_stream_for(({"data": torch.zeros(2), "len": 2}, (1, [torch.zeros(1)]))))
    span = dataclasses.make_dataclass("Span", ["data", "len"])
    assert default_stream_for(((span(np.zeros(2), 2), 1),)) is None
    assert callable(default_stream_for(((span({"ptr": torch.zeros(2), "len": 1}, 1), 1),)))  # in a tuple


def test_device_names():
    assert device_name(DLPACK_CPU, 0) == "cpu" and device_name(DLPACK_CUDA, 3) == "cuda:3"


def test_torch_cpu_facts():
    torch = pytest.importorskip("torch")
    t = torch.arange(20, dtype=torch.float32).reshape(4, 5).t()[1:]
    info = facts(t)
    assert info.ptr == t.data_ptr()
    assert (info.dtype, info.shape, info.strides) == (dtype("f32"), (4, 4), (1, 5))
    assert (info.device_type, info.dtype_name) == (DLPACK_CPU, "float32")
    assert facts(torch.zeros(2, dtype=torch.bfloat16)).dtype == dtype("bf16")
