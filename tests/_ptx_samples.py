"""Real PTX for the reader, checker and fuzz tests, made by the real compilers without a GPU.

numba-cuda (libNVVM) and NVRTC both compile for a given arch with no driver.
``cuda.core.Program.compile("ptx")`` (cuda-core 1.2) asks the driver whether it
can load the result, so NVRTC is called through ``cuda.bindings.nvrtc``.
Results are cached for the session: each source compiles once.
"""

from __future__ import annotations

import functools

import pytest

try:  # the kernels below name numba.cuda as a global, as numba requires
    from numba import cuda
except ImportError:  # numba_ptx() skips the test
    cuda = None

NVRTC_SOURCE = r"""
struct __align__(2) Half { unsigned short bits; };  // what cuda_fp16.h's __half is to the ABI
struct Mixed { char c; double d; short s; };   // 24 bytes, align 8
struct Small { short a; char b; };             // 4 bytes, align 2

__device__ int counter;
__device__ float table[4] = {1.0f, 2.0f, 3.0f, 4.0f};
__constant__ int cst[2] = {7, 8};

extern "C" __device__ float ext_scale(float x);   // defined in another module (-rdc)
template <class T> __device__ __noinline__ T twice(T x) { return x + x; }

extern "C" __global__ void __launch_bounds__(128, 2)
scalars(float* x, int n, Mixed m, double d, char c, Small s, unsigned long long u, Half h) {
  extern __shared__ float smem[];
  smem[threadIdx.x] = x[threadIdx.x] + m.d + m.c + m.s + table[n & 3] + cst[0] + s.a + s.b + u
                      + h.bits;
  __syncthreads();
  x[threadIdx.x] = smem[(threadIdx.x + 1) % 128] + c + d;
  atomicAdd(&counter, 1);
}

extern "C" __global__ void __cluster_dims__(2, 1, 1) clustered(int* p) { p[blockIdx.x] = 1; }

extern "C" __device__ __noinline__ float dev_mul(float a, float b) { return a * b; }

extern "C" __global__ void caller(float* p, const float* q) {
  p[0] = dev_mul(q[1], q[2]) + ext_scale(q[3]) + twice(q[4]);
}
"""


@functools.cache
def nvrtc_ptx(source: str = NVRTC_SOURCE) -> str:
    """PTX from NVRTC for compute_90 (``-rdc`` so external device functions stay declarations)."""
    return _nvrtc(source, "compute_90", "PTX").decode().rstrip("\0")


@functools.cache
def nvrtc_cubin(source: str = NVRTC_SOURCE) -> bytes:
    """An sm_90 cubin from NVRTC for the same source: its KPARAM records are the driver's view."""
    return _nvrtc(source, "sm_90", "CUBIN")


def _nvrtc(source: str, arch: str, output: str) -> bytes:
    pytest.importorskip("cuda.bindings.nvrtc")
    from _toolchain import nvrtc_compile

    return nvrtc_compile(source, [f"--gpu-architecture={arch}", "-rdc=true", "-default-device"],
                         output.lower())


# numba kernels and device functions, by name: (python function, numba signature text, device)
def _saxpy(a, x, y, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = a * x[i] + y[i]


def _scale2d(m, f):
    i, j = cuda.grid(2)
    if i < m.shape[0] and j < m.shape[1]:
        m[i, j] *= f


def _mixed(flag, z, t, vol, n):
    if flag:
        vol[0, 0, 0] = int(z.real + z.imag) + t[0] + t[1] + n


def _add(a, b):
    return a + b


def _count(a, n):
    return a * n


NUMBA_SAMPLES = {
    "saxpy": (_saxpy, "void(float32, float32[::1], float32[::1], float32[::1])", False),
    "scale2d": (_scale2d, "void(float64[::1, :], float64)", False),
    "mixed": (_mixed, "void(boolean, complex64, UniTuple(int32, 2), int32[:, :, :], int64)", False),
    "add": (_add, "float32(float32, float32)", True),
    "count": (_count, "int64(int64, int32)", True),
}


@functools.cache
def numba_ptx(name: str, debug: bool = False) -> str:
    """PTX of one :data:`NUMBA_SAMPLES` entry, compiled for sm_90 with entry name ``name``.

    ``debug`` adds ``.file``/``.loc``, DWARF ``.section`` blocks and ``__errcode__`` globals.
    """
    pytest.importorskip("numba.cuda")
    pyfunc, signature, device = NUMBA_SAMPLES[name]
    abi = "c" if device else "numba"  # numba-cuda kernels cannot use the C ABI
    ptx, _ = cuda.compile(pyfunc, signature, cc=(9, 0), output="ptx", device=device, abi=abi,
                          abi_info={"abi_name": name}, debug=debug, opt=not debug)
    return ptx
