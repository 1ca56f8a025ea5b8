"""End to end on the CPU: frontends -> ptxbridge.link -> Image.load("cpu") -> kernel calls.

Rust (Debian rustc), numba-cuda and NVRTC kernels, including an NVRTC kernel
calling a Rust ``extern "C"`` device function, run on the emulator with NumPy
arrays and are checked against NumPy.
"""

from __future__ import annotations

import numpy as np
import pytest
from _rust_fixtures import sysroot, toolchain  # noqa: F401  (session fixtures)

import ptxbridge
from ptxbridge import numba as pnumba
from ptxbridge import nvrtc

RUST = r'''
#![no_std]
#![feature(abi_ptx, stdarch_nvptx)]
use core::arch::nvptx::*;
#[panic_handler] fn panic(_: &core::panic::PanicInfo) -> ! { loop {} }

#[unsafe(no_mangle)] pub extern "C" fn rust_scale(x: f32) -> f32 { x * 3.0 + 1.0 }

#[repr(C)] pub struct Affine { a: f32, b: f32, reps: u32 }

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn affine_loop(p: Affine, out: *mut f32, n: u32) {
    let i = _block_idx_x() * _block_dim_x() + _thread_idx_x();
    if i < n {
        let mut acc = 0.0f32;
        let mut j = 0;
        while j < (i & 7) + p.reps { acc += p.a * j as f32 + p.b; j += 1; }
        *out.add(i as usize) = acc;
    }
}
'''

CUDA = r'''
extern "C" __device__ float rust_scale(float v);
extern "C" __global__ void scale_all(float* a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] = rust_scale(a[i]);
}
'''


@pytest.fixture(scope="module")
def rust_artifact(sysroot):  # noqa: F811
    from ptxbridge import rust

    return rust.compile(RUST)


def test_nvrtc_kernel_calls_a_rust_device_function_on_the_cpu(rust_artifact):
    image = ptxbridge.link([nvrtc.compile(CUDA, output="ptx", options=["-rdc=true"]), rust_artifact])
    module = image.load("cpu")
    assert module.device == "cpu"
    a = np.linspace(-4, 4, 1000, dtype=np.float32)
    expected = (a * np.float32(3) + np.float32(1)).astype(np.float32)
    module.scale_all(a, a.size, grid=4, block=256)
    np.testing.assert_array_equal(a, expected)


def test_rust_struct_by_value_and_divergent_loop_on_the_cpu(rust_artifact):
    module = ptxbridge.link([rust_artifact]).load("cpu")
    out = np.zeros(300, np.float32)
    module.affine_loop({"a": 0.5, "b": 1.25, "reps": 3}, out, out.size, grid=3, block=128)
    expected = []
    for i in range(300):
        acc = np.float32(0)
        for j in range((i & 7) + 3):
            acc = np.float32(acc + np.float32(np.float32(0.5) * np.float32(j) + np.float32(1.25)))
        expected.append(acc)
    np.testing.assert_array_equal(out, np.array(expected, np.float32))


def test_numba_kernel_on_strided_and_fortran_arrays_on_the_cpu():
    numba_cuda = pytest.importorskip("numba.cuda")

    def twice_plus_row(x, out):
        i, j = numba_cuda.grid(2)
        if i < x.shape[0] and j < x.shape[1]:
            out[i, j] = x[i, j] * 2 + i

    artifact = pnumba.compile(twice_plus_row, "void(float64[:,:], float64[:,:])")
    module = ptxbridge.link([artifact]).load("cpu")
    base = np.random.default_rng(3).random((50, 40))
    for x in (base[::2, 1::3], np.asfortranarray(base)):
        out = np.zeros_like(x)
        module.twice_plus_row(x, out, grid=(4, 4), block=(16, 16))
        np.testing.assert_array_equal(out, x * 2 + np.arange(x.shape[0])[:, None])


def test_out_of_bounds_through_the_call_path_raises_and_writes_nothing():
    from ptxbridge.abi.errors import MemoryAccessError

    source = r'''
extern "C" __global__ void fill(int* a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] = i;
}'''
    module = ptxbridge.link([nvrtc.compile(source, output="ptx")]).load("cpu")
    guard = np.full(8, -1, np.int32)
    a = guard[:4]
    with pytest.raises(MemoryAccessError, match=r"'fill'.*st\.global"):
        module.fill(a, 8, grid=1, block=32)
    np.testing.assert_array_equal(guard, -1)  # the faulting store was checked before any write


def _module_with_local_helper(kernel: str, value: int) -> bytes:
    """A PTX module whose kernel calls an internal (module-local) .func named ``helper``."""
    return f"""
.version 7.0
.target sm_80
.address_size 64
.func (.param .b32 r) helper()
{{
    st.param.b32 [r], {value};
    ret;
}}
.visible .entry {kernel}(.param .u64 out)
{{
    .reg .b32 %r<2>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    {{
    .param .b32 rv;
    call (rv), helper, ();
    ld.param.b32 %r1, [rv];
    }}
    st.global.u32 [%rd1], %r1;
    ret;
}}
""".encode()


def test_module_local_functions_of_the_same_name_stay_apart():
    from ptxbridge.abi.dtypes import dtype
    from ptxbridge.abi.kinds import Pointer, Scalar
    from ptxbridge.abi.signature import Param, Signature

    out_param = (Param("out", Pointer(Scalar(dtype("u32")))),)
    kernels = {name: Signature(name, out_param) for name in ("one", "two")}
    image = ptxbridge.Image(None, None, kernels,
                            ptx=(_module_with_local_helper("one", 1), _module_with_local_helper("two", 2)))
    module = image.load("cpu")
    out = np.zeros(1, np.uint32)
    module.one(out, grid=1, block=1)
    assert out[0] == 1
    module.two(out, grid=1, block=1)
    assert out[0] == 2
