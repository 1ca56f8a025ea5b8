"""The CPU loader's NumPy binder reads a plain array through its attributes (``args._numpy_both``):
whatever array a user passes, it gives the values, memory range and error the full check gives.

The full check is what the same binder does for a subclass of ``numpy.ndarray`` (the quick read is
for ``ndarray`` itself), so each generated array is bound both ways and the answers compared."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ptxbridge.abi import ArgumentError, Convention, NumbaArray, Param, Pointer, Scalar, Slice, dtype
from ptxbridge.abi.devices import DLPACK_CPU
from ptxbridge.launch.args import BindContext, make_binder
from ptxbridge.launch.dlpack import host_data


class _Subclass(np.ndarray):
    """A user's ndarray subclass: bound by the full check."""


_DTYPES = ("f32", "f64", "i32", "u8", "i64")
_KINDS = st.one_of(
    st.builds(lambda dt, mutable: Pointer(Scalar(dtype(dt)), mutable), st.sampled_from(_DTYPES),
              st.booleans()),
    st.builds(lambda dt, mutable: Slice(dtype(dt), mutable), st.sampled_from(_DTYPES), st.booleans()),
    st.builds(lambda dt, ndim, layout: NumbaArray(dtype(dt), ndim, layout), st.sampled_from(_DTYPES),
              st.integers(1, 3), st.sampled_from("CFA")),
)


_NUMPY = {"f32": "float32", "f64": "float64", "i32": "int32", "u8": "uint8", "i64": "int64"}


@st.composite
def _arrays(draw: st.DrawFn, kind) -> np.ndarray:
    """Arrays as users make them for ``kind``: mostly of its dtype (and a numba array's ndim), else
    another (byte-swapped too), 0 to 3 axes of any extent (zero and one included), sliced with
    steps, transposed, read-only, a view at a byte offset that misaligns the elements, or a unit axis
    with a stride no element size divides (NumPy calls such an array contiguous)."""
    own = kind.pointee.dtype if isinstance(kind, Pointer) else kind.dtype
    name = draw(st.sampled_from((_NUMPY[own.name],) * 4 + ("float32", "int64", ">f4", "<f8")))
    ndim = draw(st.sampled_from(((kind.ndim,) * 3 if isinstance(kind, NumbaArray) else ()) + (0, 1, 2, 3)))
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=ndim, max_size=ndim)))
    itemsize = np.dtype(name).itemsize
    count = int(np.prod(shape)) if shape else 1
    offset = draw(st.sampled_from((0, 0, 0, 1, 4)))
    raw = np.zeros(count * itemsize + offset + 8, np.uint8)
    a = raw[offset:offset + count * itemsize].view(name).reshape(shape)
    a[...] = np.arange(count).reshape(shape).astype(name) if count else a
    if a.ndim and draw(st.booleans()):
        a = a[tuple(slice(None, None, draw(st.sampled_from((1, 2, -1)))) for _ in range(a.ndim))]
    if a.ndim > 1 and draw(st.booleans()):
        a = a.T
    if 1 in a.shape and itemsize > 1 and draw(st.booleans()):
        pairs = zip(a.shape, a.strides, strict=True)
        strides = tuple(3 if extent == 1 else stride for extent, stride in pairs)
        a = np.lib.stride_tricks.as_strided(a, strides=strides)
    if draw(st.booleans()):
        a.flags.writeable = False
    return a


def _bound(kind, array: np.ndarray, arg_type: type):
    """``(values, buffers without their owner)`` or the error message, binding ``array`` as ``arg_type``."""
    convention = Convention.NUMBA if isinstance(kind, NumbaArray) else Convention.C
    binder = make_binder(BindContext("k", convention, DLPACK_CPU, 0), Param("x", kind), arg_type)
    try:
        values, buffers = binder.both(array if arg_type is np.ndarray else array.view(arg_type), 0)
    except ArgumentError as exc:
        return str(exc)
    return values, [buffer._replace(owner=None) for buffer in buffers]


@pytest.mark.skipif(host_data is None, reason="the launch extension is not built")
@settings(max_examples=400, deadline=None)
@given(kind=_KINDS, data=st.data())
def test_numpy_arrays_bind_as_the_full_check_binds_them(kind, data):
    array = data.draw(_arrays(kind))
    assert _bound(kind, array, np.ndarray) == _bound(kind, array, _Subclass)


def test_the_quick_read_takes_what_users_pass_most():
    """The differential above compares answers; this pins that the common array takes the quick
    read at all (a quick path that always declined would pass it)."""
    kind = Pointer(Scalar(dtype("f32")), True)
    binder = make_binder(BindContext("k", Convention.C, DLPACK_CPU, 0), Param("x", kind), np.ndarray)
    assert binder.both.__name__ == "fast" and binder.both.__qualname__.startswith("_numpy_both")
    a = np.arange(6, dtype=np.float32)
    (ptr,), (buffer,) = binder.both(a, 0)
    assert ptr == a.ctypes.data and buffer.nbytes == 24 and buffer.writable and buffer.owner is a


@pytest.mark.parametrize("layout", ["C", "F", "A"])
def test_numba_layouts_bind_an_array_of_either_order_as_the_full_check(layout):
    kind = NumbaArray(dtype("f32"), 2, layout)
    for array in (np.zeros((3, 4), np.float32), np.asfortranarray(np.zeros((3, 4), np.float32))):
        assert _bound(kind, array, np.ndarray) == _bound(kind, array, _Subclass)
    assert isinstance(_bound(kind, np.zeros((3, 4), np.float32), np.ndarray), str) == (layout == "F")
