"""The CPU emulator on real compiler output: numba-cuda and NVRTC PTX, checked against NumPy."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from _emulator import backend, launch, numba_array, ptr, scalar
from _toolchain import nvrtc_compile
from cuda.bindings import nvrtc

from ptxbridge.abi.dtypes import dtype
from ptxbridge.abi.errors import LinkError, MemoryAccessError
from ptxbridge.abi.kinds import NumbaArray, Opaque
from ptxbridge.abi.signature import Convention

numba_cuda = pytest.importorskip("numba.cuda")

RNG = np.random.default_rng(7)


def numba_ptx(fn, sig: str, name: str) -> bytes:
    ptx, _ = numba_cuda.compile(fn, sig, cc=(9, 0), output="ptx", device=False, abi="numba",
                                abi_info={"abi_name": name})
    return ptx.encode()


def nvrtc_ptx(source: str) -> bytes:
    return nvrtc_compile(source, ["--gpu-architecture=compute_90", "-rdc=true"])


def arr_kind(t: str, ndim: int, layout: str = "A") -> NumbaArray:
    return NumbaArray(dtype(t), ndim, layout)


# -- numba-cuda ------------------------------------------------------------------------------

def _saxpy(a, x, y, out):
    i = numba_cuda.grid(1)
    if i < x.size:
        out[i] = a * x[i] + y[i]


def test_numba_saxpy_matches_a_single_rounding_fma():
    be = backend(numba_ptx(_saxpy, "void(float32, float32[::1], float32[::1], float32[::1])", "saxpy"))
    n = 10_007  # not a multiple of the block: the bounds check diverges in the last block
    x, y = RNG.random(n, np.float32), RNG.random(n, np.float32)
    out = np.zeros(n, np.float32)
    kinds = [scalar("f32"), *[arr_kind("f32", 1, "C")] * 3]
    launch(be, "saxpy", kinds, [1.75, *numba_array(x), *numba_array(y), *numba_array(out)],
           grid=(n + 255) // 256, block=256, arrays=[x, y, out], readonly=[x, y],
           convention=Convention.NUMBA)
    expected = (x.astype(np.float64) * 1.75 + y).astype(np.float32)  # fma: one rounding
    np.testing.assert_array_equal(out, expected)


def _affine2(a, b):
    i, j = numba_cuda.grid(2)
    if i < a.shape[0] and j < a.shape[1]:
        b[i, j] = a[i, j] * 2 + i - j


@pytest.mark.parametrize("order", ["C", "F", "strided"])
def test_numba_2d_arrays_in_every_layout(order):
    be = backend(numba_ptx(_affine2, "void(float64[:,:], float64[:,:])", "affine2"))
    base = RNG.random((40, 66))
    a = {"C": base[:, :33].copy(), "F": np.asfortranarray(base[:, :33]), "strided": base[::2, ::2]}[order]
    b = np.zeros((60, 50))[:a.shape[0], :a.shape[1]] if order == "strided" else np.zeros_like(a)
    owners = [x if x.base is None else x.base for x in (a, b)]
    launch(be, "affine2", [arr_kind("f64", 2)] * 2, [*numba_array(a), *numba_array(b)],
           grid=(5, 3), block=(8, 16), arrays=owners, convention=Convention.NUMBA)
    i, j = np.indices(a.shape)
    np.testing.assert_array_equal(b, a * 2 + i - j)


def _mix3(a, c):
    i, j, k = numba_cuda.grid(3)
    if i < a.shape[0] and j < a.shape[1] and k < a.shape[2]:
        c[i, j, k] = a[i, j, k] * 7 + i * 100 + j * 10 + k


def test_numba_3d_integer_kernel_is_bit_exact():
    be = backend(numba_ptx(_mix3, "void(int32[:,:,::1], int32[:,:,::1])", "mix3"))
    a = RNG.integers(-2**30, 2**30, (5, 6, 7), dtype=np.int32)
    c = np.zeros_like(a)
    launch(be, "mix3", [arr_kind("i32", 3, "C")] * 2, [*numba_array(a), *numba_array(c)],
           grid=(2, 2, 2), block=(4, 4, 4), arrays=[a, c], convention=Convention.NUMBA)
    i, j, k = np.indices(a.shape)
    np.testing.assert_array_equal(c, (a * 7 + i * 100 + j * 10 + k).astype(np.int32))


def _block_sums(x, out):
    s = numba_cuda.shared.array(128, np.int32)
    t = numba_cuda.threadIdx.x
    i = numba_cuda.grid(1)
    s[t] = x[i] if i < x.size else 0
    numba_cuda.syncthreads()
    k = 64
    while k > 0:
        if t < k:
            s[t] += s[t + k]
        numba_cuda.syncthreads()
        k //= 2
    if t == 0:
        out[numba_cuda.blockIdx.x] = s[0]
        numba_cuda.atomic.add(out, out.size - 1, s[0])


@pytest.mark.parametrize("batch", [1 << 20, 128])
def test_numba_shared_memory_tree_reduction(batch):
    ptx = numba_ptx(_block_sums, "void(int32[::1], int32[::1])", "block_sums")
    be = backend(ptx, max_batch_threads=batch)
    x = RNG.integers(-1000, 1000, 3000, dtype=np.int32)
    out = np.zeros(25, np.int32)
    launch(be, "block_sums", [arr_kind("i32", 1, "C")] * 2, [*numba_array(x), *numba_array(out)],
           grid=24, block=128, arrays=[x, out], convention=Convention.NUMBA)
    padded = np.concatenate([x, np.zeros(24 * 128 - 3000, np.int32)]).reshape(24, 128)
    np.testing.assert_array_equal(out[:24], padded.sum(axis=1))
    assert out[24] == x.sum()


def _math(x, out):
    i = numba_cuda.grid(1)
    if i < x.size:
        v = x[i]
        out[i] = math.sin(v) + math.exp(v / 4) + math.sqrt(abs(v)) + math.floor(v) + math.atan2(v, 3.0)


def test_numba_libdevice_math_within_a_few_ulp():
    be = backend(numba_ptx(_math, "void(float32[::1], float32[::1])", "mathk"))
    x = np.linspace(-20, 20, 999, dtype=np.float32)
    out = np.zeros_like(x)
    launch(be, "mathk", [arr_kind("f32", 1, "C")] * 2, [*numba_array(x), *numba_array(out)],
           grid=4, block=256, arrays=[x, out], convention=Convention.NUMBA)
    x64 = x.astype(np.float64)
    ref = np.sin(x64) + np.exp(x64 / 4) + np.sqrt(abs(x64)) + np.floor(x64) + np.arctan2(x64, 3.0)
    np.testing.assert_allclose(out, ref, rtol=2e-6, atol=2e-5)


def _collatz(x, steps):
    i = numba_cuda.grid(1)
    if i < x.size:
        v = x[i]
        s = 0
        while v != 1:
            v = v // 2 if v % 2 == 0 else 3 * v + 1
            s += 1
        steps[i] = s


def _collatz_reference(v: int) -> int:
    s = 0
    while v != 1:
        v = v // 2 if v % 2 == 0 else 3 * v + 1
        s += 1
    return s


def test_numba_divergent_loops():
    be = backend(numba_ptx(_collatz, "void(int64[::1], int32[::1])", "collatz"))
    x = np.arange(1, 1001, dtype=np.int64)
    steps = np.zeros(1000, np.int32)
    launch(be, "collatz", [arr_kind("i64", 1, "C"), arr_kind("i32", 1, "C")],
           [*numba_array(x), *numba_array(steps)], grid=8, block=128, arrays=[x, steps],
           convention=Convention.NUMBA)
    assert steps.tolist() == [_collatz_reference(int(v)) for v in x]


# -- NVRTC -----------------------------------------------------------------------------------

CUDA = r'''
struct P { float x; int n; double w; };
extern "C" __global__ void reduce(const float* x, float* out, int n) {
  __shared__ float s[256];
  int t = threadIdx.x; int i = blockIdx.x * blockDim.x + t;
  s[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) { if (t < k) s[t] += s[t + k]; __syncthreads(); }
  if (t == 0) out[blockIdx.x] = s[0];
}
extern "C" __global__ void warpsum(const int* x, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = i < n ? x[i] : 0;
  unsigned any = __any_sync(0xffffffff, v == 99), all = __all_sync(0xffffffff, v > -100);
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, v);
  if (threadIdx.x == 0) atomicAdd(out + 1, (any ? 1 : 0) + (all ? 2 : 0));
}
extern "C" __global__ void hist(const unsigned char* x, unsigned int* h, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(&h[x[i]], 1u);
}
extern "C" __global__ void tickets(unsigned int* counter, unsigned int* got) {
  got[blockIdx.x * blockDim.x + threadIdx.x] = atomicInc(counter, 1000000u);
}
extern "C" __global__ void withstruct(P p, float* out) {
  int i = threadIdx.x;
  out[i] = p.x * i + p.n + (float)p.w;
}
__device__ __noinline__ float cube(float v) { return v * v * v; }
extern "C" __global__ void calls(float* a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] = cube(a[i]) + 1.0f;
}
extern "C" __global__ void bits(const unsigned* x, unsigned* out) {
  extern __shared__ unsigned d[];
  unsigned t = threadIdx.x, v = x[t];
  d[t] = v;
  __syncthreads();
  out[t] = d[blockDim.x - 1 - t] ^ (__popc(v) + __clz(v) + __brev(v) + __ballot_sync(0xffffffff, v & 1)
           + __byte_perm(v, t, 0x3715) + __funnelshift_l(v, t, t));
}
'''


@pytest.fixture(scope="module")
def cuda_be():
    return backend(nvrtc_ptx(CUDA))


def test_nvrtc_shared_memory_reduction(cuda_be):
    x = RNG.random(1000, np.float32)
    out = np.zeros(4, np.float32)
    launch(cuda_be, "reduce", [ptr("f32"), ptr("f32"), scalar("i32")], [x.ctypes.data, out.ctypes.data, 1000],
           grid=4, block=256, arrays=[x, out])
    blocks = np.concatenate([x, np.zeros(24, np.float32)]).reshape(4, 256)
    for b in range(4):  # the same pairwise tree, in f32
        level = blocks[b].copy()
        while len(level) > 1:
            level = (level[:len(level) // 2] + level[len(level) // 2:]).astype(np.float32)
        assert out[b] == level[0]


def test_nvrtc_warp_shuffle_and_vote(cuda_be):
    x = RNG.integers(-100, 100, 5000, dtype=np.int32)
    out = np.zeros(2, np.int32)
    launch(cuda_be, "warpsum", [ptr("i32"), ptr("i32"), scalar("i32")],
           [x.ctypes.data, out.ctypes.data, 5000], grid=20, block=256, arrays=[x, out])
    warp0 = [x[b * 256:b * 256 + 32] for b in range(20)]
    votes = sum(int((w == 99).any()) + 2 * int((w > -100).all()) for w in warp0)
    assert out[0] == x.sum() and out[1] == votes and votes > 0


def test_nvrtc_atomic_histogram_is_exact(cuda_be):
    x = RNG.integers(0, 256, 100_000, dtype=np.uint8)
    h = np.zeros(256, np.uint32)
    launch(cuda_be, "hist", [ptr("u8"), ptr("u32"), scalar("i32")], [x.ctypes.data, h.ctypes.data, x.size],
           grid=391, block=256, arrays=[x, h])
    np.testing.assert_array_equal(h, np.bincount(x, minlength=256))


def test_nvrtc_atomic_inc_hands_out_each_ticket_once(cuda_be):
    counter, got = np.zeros(1, np.uint32), np.zeros(512, np.uint32)
    launch(cuda_be, "tickets", [ptr("u32"), ptr("u32")], [counter.ctypes.data, got.ctypes.data],
           grid=4, block=128, arrays=[counter, got])
    assert counter[0] == 512 and sorted(got.tolist()) == list(range(512))


def test_nvrtc_struct_by_value(cuda_be):
    import struct
    out = np.zeros(64, np.float32)
    packed = struct.pack("<fid", 0.5, 7, 2.25)  # struct P {float x; int n; double w;}: 16 bytes
    launch(cuda_be, "withstruct", [Opaque(16, 8), ptr("f32")], [packed, out.ctypes.data], grid=1, block=64,
           arrays=[out])
    i = np.arange(64, dtype=np.float32)
    expected = (np.float32(0.5) * i + np.float32(7)).astype(np.float32) + np.float32(2.25)
    np.testing.assert_array_equal(out, expected)


def test_nvrtc_device_function_call(cuda_be):
    a = np.linspace(-3, 3, 300, dtype=np.float32)
    expected = (a * a * a + np.float32(1)).astype(np.float32)
    launch(cuda_be, "calls", [ptr("f32"), scalar("i32")], [a.ctypes.data, 300], grid=2, block=256, arrays=[a])
    np.testing.assert_array_equal(a, expected)


def test_nvrtc_bit_operations_and_dynamic_shared_memory(cuda_be):
    x = RNG.integers(0, 2**32, 64, dtype=np.uint32)
    out = np.zeros(64, np.uint32)
    launch(cuda_be, "bits", [ptr("u32"), ptr("u32")], [x.ctypes.data, out.ctypes.data], grid=1, block=64,
           arrays=[x, out], shared=64 * 4)
    expected = []
    for t in range(64):
        v = int(x[t])
        warp = x[(t // 32) * 32:(t // 32) * 32 + 32]
        ballot = sum(1 << lane for lane, w in enumerate(warp) if int(w) & 1)
        src = (t << 32) | v
        perm = sum(((src >> (8 * ((0x3715 >> (4 * b)) & 7))) & 0xFF) << (8 * b) for b in range(4))
        funnel = (((t << 32) | v) << (t & 31) >> 32) & 0xFFFFFFFF
        total = (bin(v).count("1") + (32 - v.bit_length()) + int(f"{v:032b}"[::-1], 2) + ballot + perm
                 + funnel) & 0xFFFFFFFF
        expected.append(int(x[63 - t]) ^ total)
    assert out.tolist() == expected


def test_nvrtc_out_of_bounds_store_names_kernel_instruction_and_address(cuda_be):
    a = np.zeros(100, np.float32)
    with pytest.raises(MemoryAccessError) as err:
        launch(cuda_be, "calls", [ptr("f32"), scalar("i32")], [a.ctypes.data, 130], grid=1, block=256,
               arrays=[a])
    message = str(err.value)
    assert "'calls'" in message and "ld.global.f32" in message and "PTX line" in message
    assert f"0x{a.ctypes.data + 400:x}" in message and "thread (100, 0, 0)" in message


def test_nvrtc_write_to_a_read_only_buffer_is_refused(cuda_be):
    a = np.ones(10, np.float32)
    with pytest.raises(MemoryAccessError, match="read-only"):
        launch(cuda_be, "calls", [ptr("f32"), scalar("i32")], [a.ctypes.data, 10], grid=1, block=32,
               arrays=[a], readonly=[a])
    np.testing.assert_array_equal(a, 1)  # nothing was written


def test_device_function_from_another_module_is_linked():
    caller = nvrtc_ptx(r'''
extern "C" __device__ int combine(int a, int b);
extern "C" __global__ void use(int* a) { a[threadIdx.x] = combine(a[threadIdx.x], threadIdx.x); }''')
    callee = nvrtc_ptx(r'extern "C" __device__ int combine(int a, int b) { return a * 3 - b; }')
    be = backend(caller, callee)
    a = np.arange(40, dtype=np.int32)
    launch(be, "use", [ptr("i32")], [a.ctypes.data], grid=1, block=40, arrays=[a])
    np.testing.assert_array_equal(a, np.arange(40) * 3 - np.arange(40))
    with pytest.raises(LinkError, match="combine"):
        backend(caller)


def test_entry_point_guard_against_a_short_parameter_buffer(cuda_be):
    with pytest.raises(Exception, match="parameter buffer"):
        cuda_be.launch("calls", (1, 1, 1), (32, 1, 1), 0, None, b"\0" * 4, [])


CUDA_INCLUDE = str(Path(nvrtc.__file__).parents[2] / "nvidia" / "cu13" / "include")


def test_nvrtc_half_and_bfloat16_arithmetic():
    source = r'''
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void halves(const __half* a, const __nv_bfloat16* b, float* out) {
  int i = threadIdx.x;
  __half h = __hadd(a[i], __float2half(1.5f));
  __half2 p = __floats2half2_rn(__half2float(h), 2.f);
  __nv_bfloat162 q = __floats2bfloat162_rn(__bfloat162float(b[i]), 3.f);
  q = __hmul2(q, q);
  out[i] = __low2float(__hfma2(p, p, p)) + __high2float(__hmax2(p, p)) + __low2float(q) + __high2float(q)
           + __half2float(__hneg(h)) + __bfloat162float(__hadd(b[i], __float2bfloat16(1.5f)));
}'''
    be = backend(nvrtc_compile(source, ["--gpu-architecture=compute_90", f"-I{CUDA_INCLUDE}"]))
    a = np.linspace(-2, 2, 64).astype(np.float16)
    b = (np.linspace(-3, 3, 64).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    out = np.zeros(64, np.float32)
    launch(be, "halves", [ptr("u16"), ptr("u16"), ptr("f32")],
           [a.ctypes.data, b.ctypes.data, out.ctypes.data], grid=1, block=64, arrays=[a, b, out])

    def bf16(x: float) -> np.float32:  # round to nearest even on the upper 16 bits of f32
        bits = int(np.float32(x).view(np.uint32))
        return np.uint32(((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).view(np.float32)

    for i in range(64):
        h = np.float16(np.float64(a[i]) + 1.5)
        fma = np.float16(np.float64(h) * np.float64(h) + np.float64(h))
        bi = np.uint32(int(b[i]) << 16).view(np.float32)
        q_lo, q_hi = bf16(float(bf16(float(bi))) ** 2), bf16(9.0)
        terms = [np.float32(fma), np.float32(2.0), q_lo, q_hi, np.float32(-h), bf16(float(bi) + 1.5)]
        total = np.float32(0)
        for k, term in enumerate(terms):
            total = np.float32(term) if k == 0 else np.float32(total + np.float32(term))
        assert out[i] == total, i


def test_nvrtc_syncthreads_count_and_or():
    source = r'''
extern "C" __global__ void votes(const int* x, int* out) {
  int v = x[blockIdx.x * blockDim.x + threadIdx.x];
  int count = __syncthreads_count(v > 0);
  int any = __syncthreads_or(v == 7);
  if (threadIdx.x == 0) { out[2 * blockIdx.x] = count; out[2 * blockIdx.x + 1] = any; }
}'''
    be = backend(nvrtc_ptx(source))
    x = RNG.integers(-5, 8, 3 * 96, dtype=np.int32)
    out = np.zeros(6, np.int32)
    launch(be, "votes", [ptr("i32"), ptr("i32")], [x.ctypes.data, out.ctypes.data], grid=3, block=96,
           arrays=[x, out])
    blocks = x.reshape(3, 96)
    assert out.tolist() == [v for b in blocks for v in (int((b > 0).sum()), int((b == 7).any()))]


def test_nvrtc_printf_prints_each_thread_in_order(capsys):
    source = r'''
extern "C" __global__ void hello(const double* d) {
  printf("thread %d of block %u: %5.2f %s %llx\n", threadIdx.x, blockIdx.x, d[threadIdx.x], "ok",
         0x123456789abcull);
}'''
    be = backend(nvrtc_ptx(source))
    d = np.array([1.5, -2.25, 3.0])
    launch(be, "hello", [ptr("f64")], [d.ctypes.data], grid=2, block=3, arrays=[d])
    expected = [f"thread {t} of block {b}: {d[t]:5.2f} ok 123456789abc" for b in range(2) for t in range(3)]
    assert capsys.readouterr().out.splitlines() == expected


def test_nvrtc_128_bit_integer_arithmetic():
    source = r'''
extern "C" __global__ void wide(unsigned long long* a) {
  int i = threadIdx.x;
  unsigned __int128 x = (unsigned __int128)a[3 * i] * a[3 * i + 1] + a[3 * i + 2];
  a[3 * i] = (unsigned long long)(x >> 64);
  a[3 * i + 1] = (unsigned long long)x;
  a[3 * i + 2] = (unsigned long long)(x % 1000000007u);
}'''
    be = backend(nvrtc_compile(source, ["--gpu-architecture=compute_90", "--device-int128"]))
    a = RNG.integers(0, 2**64, 3 * 64, dtype=np.uint64, endpoint=False)
    values = [int(v) for v in a]
    launch(be, "wide", [ptr("u64")], [a.ctypes.data], grid=1, block=64, arrays=[a])
    for i in range(64):
        x = values[3 * i] * values[3 * i + 1] + values[3 * i + 2]
        assert a[3 * i: 3 * i + 3].tolist() == [x >> 64, x & (2**64 - 1), x % 1000000007]


def _float_max(x, out):
    i = numba_cuda.grid(1)
    if i < x.size:
        numba_cuda.atomic.max(out, 0, x[i])  # lowered to a compare-and-swap loop on floats
        numba_cuda.atomic.add(out, 1, x[i])


def test_numba_float_atomics_through_cas_loops():
    be = backend(numba_ptx(_float_max, "void(float64[::1], float64[::1])", "float_max"))
    x = RNG.normal(size=700)
    out = np.array([-np.inf, 0.0])
    launch(be, "float_max", [arr_kind("f64", 1, "C")] * 2, [*numba_array(x), *numba_array(out)],
           grid=3, block=256, arrays=[x, out], convention=Convention.NUMBA)
    assert out[0] == x.max()
    assert out[1] == pytest.approx(x.sum(), rel=1e-12)
