"""Argument rules real kernels rely on, end to end on the CPU loader (kernels by NVRTC, numba-cuda and
plain rustc): null pointers for optional buffers, NumPy structured arrays of vector elements, numba's
wrapping of integer arguments (docs/kinds.md, "Arguments"), and tensors inside by-value structs (a
rustc ``&[T]`` is a ``{ptr, len}`` struct) bounds-checked against their own memory."""

from __future__ import annotations

import _rust_fixtures
import numpy as np
import pytest

import ptxbridge
from ptxbridge.abi import ArgumentError
from ptxbridge.abi.syntax import format_type

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


RUST_SLICES = r'''#![no_std]
#![feature(abi_ptx, stdarch_nvptx)]
use core::arch::nvptx::{_block_dim_x, _block_idx_x, _thread_idx_x};
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! { loop {} }

fn index() -> usize { unsafe { (_block_idx_x() * _block_dim_x() + _thread_idx_x()) as usize } }

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn scale(x: &mut [f32], s: f32) {
    let i = index();
    if i < x.len() { x[i] *= s; }
}

#[repr(C)]
pub struct Pair<'a> { pub src: &'a [f32], pub dst: &'a mut [f32] }

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn shift(p: Pair, n: u32) {
    let i = index();
    if i < n as usize && i < p.src.len() && i < p.dst.len() { p.dst[i] = p.src[i] + 1.0; }
}
'''
toolchain, sysroot = _rust_fixtures.toolchain, _rust_fixtures.sysroot  # session fixtures


@pytest.mark.usefixtures("sysroot")
def test_tensors_inside_structs_are_the_cpu_loaders_buffers() -> None:
    """Slices inside a struct take tensors (or ``{"ptr", "len"}``, ``len`` checked against the tensor):
    the CPU loader registers the tensors a struct carries, so accesses through them run (they were
    "outside every buffer"), and a length past the tensor is refused before the launch."""
    import ptxbridge.rust

    artifact = ptxbridge.rust.compile(RUST_SLICES, progress=False)
    pair = format_type(artifact.kernels["shift"].params[0].type)
    assert pair == "struct Pair { src: &[f32], dst: &mut [f32] }"
    with ptxbridge.link([artifact]).load("cpu") as module:
        x = np.arange(40, dtype=np.float32)
        module.scale(x, 2.0, grid=2, block=32)
        np.testing.assert_array_equal(x, 2.0 * np.arange(40))
        module.scale({"ptr": x, "len": 20}, 0.5, grid=2, block=32)  # a prefix
        np.testing.assert_array_equal(x, np.r_[np.arange(20), 2.0 * np.arange(20, 40)])
        src, dst = np.arange(40, dtype=np.float32), np.zeros(40, np.float32)
        module.shift({"src": src, "dst": {"ptr": dst, "len": 40}}, 40, grid=2, block=32)
        np.testing.assert_array_equal(dst, np.arange(40) + 1.0)
        with pytest.raises(ArgumentError, match=r"shift: argument 'p' .* 'len' must be an int from 0 to the "
                                                r"tensor's 20 elements \(got 40\)"):
            module.shift({"src": {"ptr": src[:20], "len": 40}, "dst": dst}, 40, grid=1, block=40)


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
