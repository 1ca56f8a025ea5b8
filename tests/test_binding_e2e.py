"""Argument rules real kernels rely on, end to end on the CPU loader (kernels by NVRTC and numba-cuda):
null pointers for optional buffers, NumPy structured arrays of vector elements, and numba's wrapping
of integer arguments (docs/kinds.md, "Arguments")."""

from __future__ import annotations

import numpy as np
import pytest

import ptxbridge
from ptxbridge.abi import ArgumentError

nvrtc = pytest.importorskip("ptxbridge.nvrtc")

OPTIONAL_BIAS = r'''
extern "C" __global__ void add_bias(const float* x, const float* bias, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + (bias ? bias[i] : 0.0f);
}'''

UINT4 = r'''
extern "C" __global__ void mix(uint4* v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { uint4 e = v[i]; v[i] = make_uint4(e.w, e.x + e.y, e.z * 2u, e.x); }
}'''


def test_null_pointer_for_an_optional_buffer() -> None:
    with ptxbridge.link([nvrtc.compile(OPTIONAL_BIAS, output="ptx")]).load("cpu") as module:
        x = np.arange(40, dtype=np.float32)
        bias = np.full(40, 0.5, np.float32)
        for optional, expected in ((bias, x + bias), (None, x), (0, x)):  # NULL as None or as C's 0
            y = np.full(40, -1, np.float32)
            module.add_bias(x, optional, y, 40, grid=2, block=32)
            np.testing.assert_array_equal(y, expected)
        with pytest.raises(ArgumentError, match=r"argument 'bias' .* a raw address is not accepted"):
            module.add_bias(x, 4096, y, 40, grid=2, block=32)


def test_structured_array_of_uint4_covers_its_whole_extent() -> None:
    """Each element is 16 bytes, so the last element's bytes are inside the registered buffer."""
    record = np.dtype([("x", "<u4"), ("y", "<u4"), ("z", "<u4"), ("w", "<u4")])
    v = np.zeros(33, record)
    for lane, name in enumerate(record.names):
        v[name] = np.arange(33, dtype=np.uint32) * 4 + lane
    before = v.copy()
    with ptxbridge.link([nvrtc.compile(UINT4, output="ptx")]).load("cpu") as module:
        module.mix(v, 33, grid=2, block=32)
    np.testing.assert_array_equal(v["x"], before["w"])
    np.testing.assert_array_equal(v["y"], before["x"] + before["y"])
    np.testing.assert_array_equal(v["z"], before["z"] * 2)
    np.testing.assert_array_equal(v["w"], before["x"])


def test_numba_int32_argument_wraps_as_numba_does() -> None:
    numba_cuda = pytest.importorskip("numba.cuda")
    from ptxbridge import numba as pnumba

    def store(out, k):
        if numba_cuda.grid(1) == 0:
            out[0] = k

    artifact = pnumba.compile(store, "void(int32[::1], int32)")
    with ptxbridge.link([artifact]).load("cpu") as module:
        out = np.zeros(1, np.int32)
        module.store(out, 0xFFFFFFFF, grid=1, block=1)
        assert out[0] == -1
        module.store(out, 2**40 + 7, grid=1, block=1)
        assert out[0] == 7
        with pytest.raises(ArgumentError, match="fits neither int64 nor uint64"):
            module.store(out, 2**64, grid=1, block=1)
