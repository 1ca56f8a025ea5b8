"""CUDA C++ the way real programs write it, compiled with NVRTC and checked against NumPy.

Each test exercises one construct that real device code uses (``warpSize``, ``cp.async``,
``mbarrier``, grid-wide sync, ``block_tile_memory``, indirect calls, ``new``/``delete``, warp
reductions over member masks, kernels and constants by their C++ names, CCCL headers) on the CPU
loader and, as its ``gpu`` twin, on the first GPU (``pytest -m gpu``).  A kernel the CPU loader
cannot run must fail when it is launched, naming the instruction, the kernel and the PTX line.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

import ptxbridge
from ptxbridge import nvrtc
from ptxbridge.abi.errors import UnsupportedInstructionError

DEVICES = [pytest.param("cpu", id="cpu"), pytest.param("cuda:0", id="gpu", marks=pytest.mark.gpu)]

BASIC = r'''
typedef int (*binary_op)(int, int);
__device__ int add(int a, int b) { return a + b; }
__device__ int mul(int a, int b) { return a * b; }
__device__ binary_op table[2] = {add, mul};

struct Shape { __device__ virtual float area() const = 0; __device__ virtual ~Shape() {} };
struct Square : Shape {
  float s;
  __device__ explicit Square(float s) : s(s) {}
  __device__ float area() const override { return s * s; }
};
struct Disc : Shape {
  float r;
  __device__ explicit Disc(float r) : r(r) {}
  __device__ float area() const override { return 3 * r * r; }
};

struct OptionData { double S, X, T; };
static __constant__ OptionData d_OptionData[4];
__device__ int launches;

extern "C" __global__ void warp_size(int* out) {
  out[threadIdx.x] = warpSize * 1000 + threadIdx.x % warpSize;
}

extern "C" __global__ void function_table(const int* a, int* out) {
  int i = threadIdx.x;
  out[i] = table[i & 1](a[i], 3);
}

extern "C" __global__ void virtual_calls(const float* x, float* out) {
  int i = threadIdx.x;
  Shape* s = (i & 1) ? static_cast<Shape*>(new Square(x[i])) : static_cast<Shape*>(new Disc(x[i]));
  out[i] = s ? s->area() : -1.0f;
  delete s;
}

extern "C" __global__ void masked_warp_ops(const unsigned* v, unsigned* out) {
  unsigned lane = threadIdx.x & 31, x = v[threadIdx.x];
  unsigned mask = (lane & 1) ? 0xAAAAAAAAu : 0x55555555u;  // odd lanes with odd lanes, even with even
  unsigned* row = out + threadIdx.x * 6;
  row[0] = __reduce_add_sync(mask, x);
  row[1] = __reduce_max_sync(mask, x);
  row[2] = __ballot_sync(mask, x % 3 == 0);
  row[3] = __all_sync(mask, x < 1000);
  row[4] = __match_any_sync(mask, x % 4);
  row[5] = __shfl_xor_sync(mask, x, 2);
}

extern "C" __global__ void partial_warp(const unsigned* v, unsigned* out) {
  unsigned lane = threadIdx.x & 31;
  if (lane < 20) {  // only 20 lanes execute: the others are not in the mask
    unsigned mask = (1u << 20) - 1;
    unsigned all = __ballot_sync(mask, 1) == mask ? 1u << 30 : 0u;
    out[threadIdx.x] = __reduce_add_sync(mask, v[threadIdx.x]) + all;
  }
}

extern "C" __global__ void signed_zeros(double* d, float* f) {
  double nz = -0.0, one = 1.0;
  d[0] = fma(nz, one, nz);
  d[1] = sin(nz);
  d[2] = tanh(nz);
  d[3] = log1p(nz);
  f[0] = fmaf(-0.0f, 1.0f, -0.0f);
  f[1] = sinf(-0.0f);
}

extern "C" __global__ void bit_mask(const unsigned* a, const unsigned* b, unsigned* clamp, unsigned* wrap) {
  int i = threadIdx.x;
  asm("bmsk.clamp.b32 %0, %1, %2;" : "=r"(clamp[i]) : "r"(a[i]), "r"(b[i]));
  asm("bmsk.wrap.b32 %0, %1, %2;" : "=r"(wrap[i]) : "r"(a[i]), "r"(b[i]));
}

__global__ void vectorAdd(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

namespace pricing {
__global__ void intrinsic(double* value) {
  int i = threadIdx.x;
  double v = d_OptionData[i].S - d_OptionData[i].X;
  value[i] = v > 0 ? v : 0.0;
  if (i == 0) atomicAdd(&launches, 1);
}
}

template <typename T> __global__ void scale(T* x, T by) { x[threadIdx.x] *= by; }

extern "C" __global__ void waits_for_a_transaction(unsigned long long* bar) {
  unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(bar));
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], 16;" :: "r"(addr));
}
'''

ASYNC = r'''
#include <cuda_pipeline.h>
#include <cuda_awbarrier_primitives.h>

// stage a tile through shared memory with cp.async: 4-byte copies, 16-byte copies, and a
// 16-byte copy of 8 source bytes whose other 8 bytes are zero-filled
extern "C" __global__ void staged(const float* in, float* out, float4* wide_out, float4* tail_out) {
  __shared__ float tile[128];
  __shared__ float4 wide[32];
  __shared__ float4 tail[32];
  int t = threadIdx.x;
  __pipeline_memcpy_async(&tile[t], &in[t], sizeof(float));
  if (t < 32) {
    __pipeline_memcpy_async(&wide[t], &in[4 * t], sizeof(float4));
    __pipeline_memcpy_async(&tail[t], &in[4 * t], sizeof(float4), 8);
  }
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();
  out[t] = tile[127 - t];
  if (t < 32) { wide_out[t] = wide[31 - t]; tail_out[t] = tail[t]; }
}

// two phases of one mbarrier: every thread writes, arrives, waits, reads a neighbour
extern "C" __global__ void phases(float* out) {
  __shared__ __mbarrier_t bar;
  __shared__ float s[128];
  int t = threadIdx.x;
  if (t == 0) __mbarrier_init(&bar, blockDim.x);
  __syncthreads();
  float acc = 0.0f;
  for (int phase = 0; phase < 2; ++phase) {
    s[t] = t + 1000.0f * phase;
    __mbarrier_token_t token = __mbarrier_arrive(&bar);
    while (!__mbarrier_test_wait(&bar, token)) {}
    acc += s[blockDim.x - 1 - t];
    token = __mbarrier_arrive(&bar);  // nobody overwrites s before everyone has read it
    while (!__mbarrier_test_wait(&bar, token)) {}
  }
  out[t] = acc;
}
'''

GROUPS = r'''
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

// every block writes its part, the whole grid waits, then every thread reads another block's part
extern "C" __global__ void grid_reverse(int* scratch, int* out, int n) {
  cg::grid_group grid = cg::this_grid();
  int i = grid.thread_rank();
  if (i < n) scratch[i] = i * i;
  grid.sync();
  if (i < n) out[i] = scratch[n - 1 - i];
}

// 64-thread tiles span two warps: their sync and reduce go through block_tile_memory's scratch
extern "C" __global__ void wide_tiles(const int* in, int* out) {
  __shared__ cg::block_tile_memory<256> scratch;
  cg::thread_block block = cg::this_thread_block(scratch);
  auto tile = cg::tiled_partition<64>(block);
  int v = in[block.thread_rank()];
  tile.sync();
  out[block.thread_rank()] = cg::reduce(tile, v, cg::plus<int>()) * 10 + tile.meta_group_rank();
}
'''

LIBDEVRT = r'''
// what numba-cuda's this_grid().sync() calls: libcudadevrt's entry points (declared by the runtime headers)
extern "C" __global__ void sync_through_devrt(int* scratch, int* out, int* status) {
  int i = blockIdx.x * blockDim.x + threadIdx.x, n = gridDim.x * blockDim.x;
  unsigned long long handle = cudaCGGetIntrinsicHandle(cudaCGScopeGrid);
  scratch[i] = 3 * i;
  status[i] = static_cast<int>(cudaCGSynchronize(handle, 0)) + (handle == 0 ? 100 : 0);
  out[i] = scratch[n - 1 - i];
}
'''

SET_FORMS = r"""
// `set` writes its comparison as a value; one column per form (PTX ISA "set", and its half-precision forms),
// then `setp` on halves (one predicate per lane of a packed pair).
// 16-bit results are stored as 16 bits: on the GPU the upper half of their 32-bit register is not zeroed.
extern "C" __global__ void set_forms(const float* a, const float* b, const int* ia, const int* ib,
                                     const unsigned short* ha, const unsigned short* hb,
                                     const unsigned short* ba, const unsigned short* bb, unsigned* out,
                                     unsigned short* out16) {
  int i = threadIdx.x, odd = i & 1;
  unsigned* row = out + 19 * i;
  unsigned short* row16 = out16 + 4 * i;
  float x = a[i], y = b[i];
  double dx = x, dy = y;
  unsigned short h, hx = ha[i], hy = hb[i], gx = ba[i], gy = bb[i];
  unsigned px = hx | (unsigned)ha[i ^ 1] << 16, py = hy | (unsigned)hb[i ^ 1] << 16;
  unsigned qx = gx | (unsigned)ba[i ^ 1] << 16, qy = gy | (unsigned)bb[i ^ 1] << 16;
  asm("set.lt.u32.f32 %0, %1, %2;" : "=r"(row[0]) : "f"(x), "f"(y));
  asm("set.gtu.f32.f32 %0, %1, %2;" : "=r"(row[1]) : "f"(x), "f"(y));
  asm("set.ne.ftz.s32.f32 %0, %1, %2;" : "=r"(row[2]) : "f"(x), "f"(y));
  asm("set.ne.s32.f32 %0, %1, %2;" : "=r"(row[3]) : "f"(x), "f"(y));
  asm("set.nan.u32.f64 %0, %1, %2;" : "=r"(row[4]) : "d"(dx), "d"(dy));
  asm("set.num.f32.f64 %0, %1, %2;" : "=r"(row[5]) : "d"(dx), "d"(dy));
  asm("{ .reg .pred c; setp.ne.s32 c, %3, 0; set.le.and.u32.s32 %0, %1, %2, !c; }"
      : "=r"(row[6]) : "r"(ia[i]), "r"(ib[i]), "r"(odd));
  asm("set.hi.u32.u32 %0, %1, %2;" : "=r"(row[7]) : "r"(ia[i]), "r"(ib[i]));
  asm("{ .reg .pred c; setp.ne.s32 c, %3, 0; set.equ.or.f32.f32 %0, %1, %2, c; }"
      : "=r"(row[8]) : "f"(x), "f"(y), "r"(odd));
  asm("set.geu.ftz.u32.f16 %0, %1, %2;" : "=r"(row[9]) : "h"(hx), "h"(hy));
  asm("set.geu.u32.f16 %0, %1, %2;" : "=r"(row[10]) : "h"(hx), "h"(hy));
  asm("set.lt.ftz.f16x2.f16x2 %0, %1, %2;" : "=r"(row[11]) : "r"(px), "r"(py));
  asm("{ .reg .pred c; setp.ne.s32 c, %3, 0; set.nan.xor.u32.f16x2 %0, %1, %2, c; }"
      : "=r"(row[12]) : "r"(px), "r"(py), "r"(odd));
  asm("set.le.u32.bf16x2 %0, %1, %2;" : "=r"(row[13]) : "r"(qx), "r"(qy));
  asm("{ .reg .pred p; setp.lt.ftz.f16 p, %1, %2; selp.u32 %0, 1, 0, p; }"
      : "=r"(row[14]) : "h"(hx), "h"(hy));
  asm("{ .reg .pred p, q; setp.geu.f16x2 p|q, %2, %3; selp.u32 %0, 1, 0, p; selp.u32 %1, 1, 0, q; }"
      : "=r"(row[15]), "=r"(row[16]) : "r"(px), "r"(py));
  asm("{ .reg .pred p, q, c; setp.ne.s32 c, %4, 0; setp.gt.and.bf16x2 p|q, %2, %3, c;\n"
      "  selp.u32 %0, 1, 0, p; selp.u32 %1, 1, 0, q; }"
      : "=r"(row[17]), "=r"(row[18]) : "r"(qx), "r"(qy), "r"(odd));
  asm("set.lt.f16.f16 %0, %1, %2;" : "=h"(h) : "h"(hx), "h"(hy)); row16[0] = h;
  asm("set.ltu.s16.f16 %0, %1, %2;" : "=h"(h) : "h"(hx), "h"(hy)); row16[1] = h;
  asm("set.gt.bf16.bf16 %0, %1, %2;" : "=h"(h) : "h"(gx), "h"(gy)); row16[2] = h;
  asm("set.eq.f16.f32 %0, %1, %2;" : "=h"(h) : "f"(x), "f"(y)); row16[3] = h;
}
"""


# warp 0 produces stages into shared memory with cuda::memcpy_async, warp 1 consumes them: a
# cuda::pipeline with shared state and producer/consumer roles, the warp specialization of CUDA's
# MatrixMulAsyncCopyMultiStageSharedState sample (the consumer spins on a phase the producer completes)
PIPELINE = r"""
#include <cuda/pipeline>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

extern "C" __global__ void specialised(const float* in, float* out, int chunks) {
  constexpr int stages = 2;
  __shared__ float buf[stages][32];
  __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, stages> state;
  auto block = cg::this_thread_block();
  const auto role = threadIdx.x < 32 ? cuda::pipeline_role::producer : cuda::pipeline_role::consumer;
  auto pipe = cuda::make_pipeline(block, &state, role);
  int lane = threadIdx.x % 32;
  float acc = 0.0f;
  for (int c = 0; c < chunks; ++c) {
    int s = c % stages;
    if (role == cuda::pipeline_role::producer) {
      pipe.producer_acquire();
      cuda::memcpy_async(&buf[s][lane], &in[c * 32 + lane], sizeof(float), pipe);
      pipe.producer_commit();
    } else {
      pipe.consumer_wait();
      acc = acc * 0.5f + buf[s][lane];
      pipe.consumer_release();
    }
  }
  if (role == cuda::pipeline_role::consumer) out[lane] = acc;
}
"""

_modules: dict[tuple[str, str], ptxbridge.Module] = {}


def _load(source: str, device: str, **options: object) -> ptxbridge.Module:
    key = (source, device)
    if key not in _modules or options:
        module = ptxbridge.load([nvrtc.compile(source)], device, **options)
        if options:
            return module
        _modules[key] = module
    return _modules[key]


def _run(m: ptxbridge.Module, name: str, *arrays: np.ndarray, grid: object, block: object,
         scalars: tuple = ()) -> list[np.ndarray]:
    """Launch with device copies of ``arrays`` (then ``scalars``); return the arrays as they came back."""
    on_device = [m.to_device(a) for a in arrays]
    m[name](*on_device, *scalars, grid=grid, block=block)
    return [m.to_host(a) for a in on_device]


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    return request.param


def test_warp_size(device):
    (out,) = _run(_load(BASIC, device), "warp_size", np.zeros(96, np.int32), grid=1, block=96)
    np.testing.assert_array_equal(out, 32_000 + np.arange(96) % 32)


def test_function_pointer_table(device):
    a = np.arange(64, dtype=np.int32)
    _, out = _run(_load(BASIC, device), "function_table", a, np.zeros(64, np.int32), grid=1, block=64)
    np.testing.assert_array_equal(out, np.where(np.arange(64) & 1, a * 3, a + 3))


def test_virtual_functions_with_device_new_and_delete(device):
    x = np.linspace(0.5, 8, 64, dtype=np.float32)
    _, out = _run(_load(BASIC, device), "virtual_calls", x, np.zeros(64, np.float32), grid=1, block=64)
    np.testing.assert_allclose(out, np.where(np.arange(64) & 1, x * x, 3 * x * x), rtol=1e-6)


def _by_mask(values: np.ndarray, reduce: object) -> np.ndarray:
    """Per thread: ``reduce`` over the lanes of its warp with the same lane parity."""
    lanes = np.arange(len(values)) % 32
    warps = np.arange(len(values)) // 32
    return np.array([reduce(values[(warps == warps[i]) & (lanes % 2 == lanes[i] % 2)])
                     for i in range(len(values))])


def test_warp_reductions_and_votes_honour_each_threads_member_mask(device):
    v = np.random.default_rng(5).integers(0, 500, 64).astype(np.uint32)
    v[37] = 2000  # one odd lane of warp 1 fails __all_sync
    _, out = _run(_load(BASIC, device), "masked_warp_ops", v, np.zeros(64 * 6, np.uint32), grid=1, block=64)
    out = out.reshape(64, 6)
    lanes = np.arange(64) % 32
    np.testing.assert_array_equal(out[:, 0], _by_mask(v, lambda s: s.sum(dtype=np.uint32)))
    np.testing.assert_array_equal(out[:, 1], _by_mask(v, np.max))
    parity = np.where(lanes & 1, 0xAAAAAAAA, 0x55555555).astype(np.uint64)
    ballots = [sum(1 << int(j) for j in range(32) if v[32 * (i // 32) + j] % 3 == 0) for i in range(64)]
    np.testing.assert_array_equal(out[:, 2], np.array(ballots, np.uint64) & parity)
    np.testing.assert_array_equal(out[:, 3], [0 if (i // 32 == 1 and i % 2 == 1) else 1 for i in range(64)])
    same = [sum(1 << j for j in range(32) if j % 2 == lanes[i] % 2 and v[32 * (i // 32) + j] % 4 == v[i] % 4)
            for i in range(64)]
    np.testing.assert_array_equal(out[:, 4], same)
    np.testing.assert_array_equal(out[:, 5], v[np.arange(64) ^ 2])  # lane ^ 2 keeps the parity


def test_warp_ops_of_a_partial_warp(device):
    v = np.arange(64, dtype=np.uint32) * 3
    _, out = _run(_load(BASIC, device), "partial_warp", v, np.zeros(64, np.uint32), grid=1, block=64)
    for warp in range(2):
        lanes = slice(32 * warp, 32 * warp + 20)
        np.testing.assert_array_equal(out[lanes], v[lanes].sum() + (1 << 30))
        np.testing.assert_array_equal(out[32 * warp + 20:32 * warp + 32], 0)


def test_signed_zeros_survive_fma_and_the_math_library(device):
    d, f = _run(_load(BASIC, device), "signed_zeros", np.ones(4), np.ones(2, np.float32), grid=1, block=1)
    assert (d == 0).all() and np.signbit(d).all(), d
    assert (f == 0).all() and np.signbit(f).all(), f


def test_bmsk(device):
    a = np.array([0, 1, 4, 31, 0, 20, 33, 2, 8, 16], np.uint32)
    b = np.array([8, 2, 0, 1, 32, 20, 3, 40, 24, 16], np.uint32)
    _, _, clamp, wrap = _run(_load(BASIC, device), "bit_mask", a, b, np.zeros(10, np.uint32),
                             np.zeros(10, np.uint32), grid=1, block=10)

    def bmsk(start: int, width: int, clamped: bool) -> int:
        if clamped:
            if start >= 32:
                return 0
            width = min(width, 32)
        else:
            start, width = start & 31, width & 31
        return (((1 << min(start + width, 32)) - 1) >> start) << start

    np.testing.assert_array_equal(clamp, [bmsk(int(x), int(y), True) for x, y in zip(a, b, strict=True)])
    np.testing.assert_array_equal(wrap, [bmsk(int(x), int(y), False) for x, y in zip(a, b, strict=True)])


def test_cxx_kernels_and_static_constants_by_their_source_names(device):
    m = _load(BASIC, device)
    a, b = np.arange(100, dtype=np.float32), np.full(100, 0.5, np.float32)
    _, _, c = _run(m, "vectorAdd", a, b, np.zeros(100, np.float32), grid=2, block=64, scalars=(100,))
    np.testing.assert_array_equal(c, a + b)
    assert m.vectorAdd is m["vectorAdd"]
    options = np.array([(30.0, 20.0, 1.0), (10.0, 25.0, 1.0), (5.0, 4.0, 2.0), (7.0, 7.5, 0.5)],
                       np.dtype([("S", "f8"), ("X", "f8"), ("T", "f8")]))
    assert any(re.fullmatch(r"(_ZL12)?d_OptionData", name) for name in m.globals.names), m.globals.names
    m.globals["d_OptionData"] = options
    m.globals["launches"] = np.int32(0)
    (value,) = _run(m, "pricing::intrinsic", np.zeros(4), grid=1, block=4)
    np.testing.assert_array_equal(value, np.maximum(options["S"] - options["X"], 0))
    assert np.frombuffer(m.globals["launches"], np.int32)[0] == 1


def test_template_kernels_by_name_expression(device):
    m = ptxbridge.load([nvrtc.compile(BASIC, name_expressions=["scale<float>", "scale<int>"])], device)
    x, y = np.arange(8, dtype=np.float32), np.arange(8, dtype=np.int32)
    (x2,) = _run(m, "scale<float>", x, grid=1, block=8, scalars=(np.float32(2.5),))
    (y2,) = _run(m, "scale<int>", y, grid=1, block=8, scalars=(3,))
    np.testing.assert_array_equal(x2, x * 2.5)
    np.testing.assert_array_equal(y2, y * 3)


TEMPLATES = r"""
enum Color { RED = 1, GREEN = 2 };
namespace ns { enum class Mode : int { A = 3, B = 7 }; }
__device__ int g_value;
template <typename T, unsigned N, bool Neg> __global__ void block_sum(T* out) { out[0] = Neg ? -(T)N : (T)N; }
template <Color C> __global__ void colored(int* out) { out[0] = (int)C * 10; }
template <ns::Mode M> __global__ void moded(int* out) { out[0] = (int)M * 100; }
template <int* P> __global__ void pointed(int* out) { out[0] = P == &g_value ? 5 : 6; }
namespace ns { template <typename T> __global__ void inner(T* out) { out[0] = (T)42; } }
"""
# expression -> (symbol NVRTC lowers it to, dtype of out, the value the instantiation writes)
EXPRESSIONS = {
    "block_sum<int, 64, true>": ("_Z9block_sumIiLj64ELb1EEvPT_", np.int32, -64),  # demangles as 64u, (bool)1
    "block_sum<unsigned int, 64u, false>": ("_Z9block_sumIjLj64ELb0EEvPT_", np.uint32, 64),
    "colored<GREEN>": ("_Z7coloredIL5Color2EEvPi", np.int32, 20),  # enum: demangles as (Color)2
    "moded<ns::Mode::B>": ("_Z5modedILN2ns4ModeE7EEvPi", np.int32, 700),
    "pointed<&g_value>": ("_Z7pointedIXadL_Z7g_valueEEEvPi", np.int32, 5),  # a pointer argument
    "ns::inner<long long>": ("_ZN2ns5innerIxEEvPT_", np.int64, 42),  # namespace-qualified
}


def test_template_kernels_by_their_exact_name_expression(device, tmp_path):
    """Every kernel is found by the expression it was compiled with (unsigned, bool, enum, scoped enum,
    pointer and namespace-qualified arguments), on the linked image and on a saved one, and runs the
    instantiation the expression names."""
    artifact = nvrtc.compile(TEMPLATES, name_expressions=list(EXPRESSIONS))
    assert dict(artifact.name_expressions) == {e: symbol for e, (symbol, _, _) in EXPRESSIONS.items()}
    image = ptxbridge.link([artifact])
    opened = ptxbridge.Image.open(image.save(tmp_path / "templates.ptxb"))
    assert dict(opened.name_expressions) == dict(image.name_expressions) == dict(artifact.name_expressions)
    for m in (image.load(device), opened.load(device)):
        for expression, (symbol, dtype, value) in EXPRESSIONS.items():
            assert m[expression] is m[symbol]
            (out,) = _run(m, expression, np.zeros(1, dtype), grid=1, block=1)
            assert out[0] == value, expression
        listed = r"; name expressions: block_sum<int, 64, true>, block_sum<unsigned int, 64u, false>, "
        with pytest.raises(KeyError, match=r"no kernel 'block_sum<int, 64, false>' .*" + listed):
            m["block_sum<int, 64, false>"]


def test_cp_async_copies_and_zero_fill(device):
    x = np.arange(128, dtype=np.float32) + 0.5
    _, out, wide, tail = _run(_load(ASYNC, device), "staged", x, np.zeros(128, np.float32),
                              np.zeros((32, 4), np.float32), np.ones((32, 4), np.float32), grid=1, block=128)
    np.testing.assert_array_equal(out, x[::-1])
    np.testing.assert_array_equal(wide, x.reshape(32, 4)[::-1])
    np.testing.assert_array_equal(tail[:, :2], x.reshape(32, 4)[:, :2])
    np.testing.assert_array_equal(tail[:, 2:], 0)


def test_mbarrier_phases(device):
    (out,) = _run(_load(ASYNC, device), "phases", np.zeros(128, np.float32), grid=1, block=128)
    t = np.arange(128)
    np.testing.assert_array_equal(out, (127 - t) + (127 - t + 1000.0))


def test_a_warp_specialised_pipeline_with_shared_state_completes(device):
    """The consumer warp waits on stages the producer warp has not filled yet: it must let the
    producer run (on the CPU loader a failed wait yields), and the stages arrive in order."""
    chunks = 9
    x = np.random.default_rng(5).random(32 * chunks).astype(np.float32)
    _, out = _run(_load(PIPELINE, device), "specialised", x, np.zeros(32, np.float32), grid=1, block=64,
                  scalars=(chunks,))
    want = np.zeros(32, np.float32)
    for row in x.reshape(chunks, 32):
        want = want * np.float32(0.5) + row
    np.testing.assert_array_equal(out, want)


def test_grid_sync(device):
    m = _load(GROUPS, device)
    m.grid_reverse.cooperative = True  # a GPU launch of grid.sync() must be cooperative
    n = 1000
    _, out = _run(m, "grid_reverse", np.zeros(1024, np.int32), np.zeros(1024, np.int32), grid=8, block=128,
                  scalars=(n,))
    np.testing.assert_array_equal(out[:n], (np.arange(n)[::-1]) ** 2)


def test_block_tile_memory_and_tiles_wider_than_a_warp(device):
    x = np.random.default_rng(6).integers(-100, 100, 256).astype(np.int32)
    _, out = _run(_load(GROUPS, device), "wide_tiles", x, np.zeros(256, np.int32), grid=1, block=256)
    tiles = np.repeat(x.reshape(4, 64).sum(axis=1), 64)
    np.testing.assert_array_equal(out, tiles * 10 + np.arange(256) // 64)


def test_cpu_loader_runs_grid_sync_kernels_with_every_block_at_once():
    m = _load(GROUPS, "cpu")
    assert "grid_reverse" in m.backend.cooperative_kernels
    assert "wide_tiles" not in m.backend.cooperative_kernels
    # libcudadevrt's calls, as numba-cuda makes them (relocatable code; no library to link here)
    artifact = nvrtc.compile(LIBDEVRT, options=["--relocatable-device-code=true"])
    image = ptxbridge.Image(None, None, dict(artifact.kernels), ptx=(artifact.code,))
    devrt = image.load("cpu", max_steps=10_000)
    scratch, out, status = (np.zeros(512, np.int32) for _ in range(3))
    devrt.sync_through_devrt(scratch, out, status, grid=4, block=128)
    np.testing.assert_array_equal(out, 3 * np.arange(512)[::-1])
    np.testing.assert_array_equal(status, 0)


def _compare(op: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """PTX comparison ``op`` on NumPy values: ordered float compares are false on NaN, ``...u`` true."""
    unordered = np.isnan(x) | np.isnan(y) if x.dtype.kind == "f" else np.zeros(x.shape, bool)
    if op in ("nan", "num"):
        return unordered if op == "nan" else ~unordered
    base = {"eq": x == y, "ne": x != y, "lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y}[op.rstrip("u")]
    return base | unordered if op.endswith("u") else base & ~unordered


def _ftz(x: np.ndarray) -> np.ndarray:
    tiny = np.finfo(x.dtype).tiny
    return np.where(np.abs(x) < tiny, np.copysign(x.dtype.type(0), x), x).astype(x.dtype)


def test_set_and_setp_on_every_type(device):
    rng = np.random.default_rng(8)
    a = rng.uniform(-4, 4, 64).astype(np.float32)
    b = rng.uniform(-4, 4, 64).astype(np.float32)
    b[40:48] = a[40:48]
    specials = [(1, 2), (2, 2), (np.nan, 1), (0.0, -0.0), (-0.0, 0.0), (1e-40, 0), (-1e-40, 1e-40),
                (np.inf, np.inf), (-np.inf, 5), (3, np.nan), (np.nan, np.nan), (6e-8, 0), (-3e-6, -0.0),
                (65504, 1e5), (0.5, 0.25), (-2, -2), (1e-5, 2e-5), (4e-5, 4e-5)]
    for i, (x, y) in enumerate(specials):
        a[i], b[i] = x, y
    ia, ib = rng.integers(-6, 6, 64).astype(np.int32), rng.integers(-6, 6, 64).astype(np.int32)
    with np.errstate(over="ignore"):  # 1e5 is inf as f16
        ha, hb = a.astype(np.float16), b.astype(np.float16)  # 6e-8, -3e-6, 1e-5: f16 subnormals
    ba, bb = ((v.view(np.uint32) >> 16).astype(np.uint16) for v in (a, b))  # bf16: a's top half
    inputs = (a, b, ia, ib, ha.view(np.uint16), hb.view(np.uint16), ba, bb)
    out, out16 = _run(_load(SET_FORMS, device), "set_forms", *inputs, np.zeros(64 * 19, np.uint32),
                      np.zeros(64 * 4, np.uint16), grid=1, block=64)[-2:]
    odd = np.arange(64) % 2 == 1
    swap = np.arange(64) ^ 1
    ones, f32_one, f16_one, bf16_one = 0xFFFFFFFF, 0x3F800000, 0x3C00, 0x3F80
    as_bf16 = [(v.astype(np.uint32) << 16).view(np.float32) for v in (ba, bb)]

    def lanes(op: str, x: np.ndarray, y: np.ndarray, true: int) -> np.ndarray:
        return np.where(op(x, y), true, 0) | np.where(op(x[swap], y[swap]), true, 0) << 16

    expected = [
        np.where(_compare("lt", a, b), ones, 0),
        np.where(_compare("gtu", a, b), f32_one, 0),
        np.where(_compare("ne", _ftz(a), _ftz(b)), ones, 0),
        np.where(_compare("ne", a, b), ones, 0),
        np.where(_compare("nan", a, b), ones, 0),
        np.where(_compare("num", a, b), f32_one, 0),
        np.where((ia <= ib) & ~odd, ones, 0),
        np.where(ia.view(np.uint32) > ib.view(np.uint32), ones, 0),
        np.where(_compare("equ", a, b) | odd, f32_one, 0),
        np.where(_compare("geu", _ftz(ha), _ftz(hb)), ones, 0),
        np.where(_compare("geu", ha, hb), ones, 0),
        lanes(lambda x, y: _compare("lt", _ftz(x), _ftz(y)), ha, hb, f16_one),
        lanes(lambda x, y: _compare("nan", x, y) ^ odd, ha, hb, 0xFFFF),
        lanes(lambda x, y: _compare("le", x, y), *as_bf16, 0xFFFF),
        _compare("lt", _ftz(ha), _ftz(hb)),
        _compare("geu", ha, hb), _compare("geu", ha[swap], hb[swap]),
        _compare("gt", *as_bf16) & odd, _compare("gt", as_bf16[0][swap], as_bf16[1][swap]) & odd,
    ]
    expected16 = [
        np.where(_compare("lt", ha, hb), f16_one, 0),
        np.where(_compare("ltu", ha, hb), 0xFFFF, 0),
        np.where(_compare("gt", *as_bf16), bf16_one, 0),
        np.where(_compare("eq", a, b), f16_one, 0),
    ]
    np.testing.assert_array_equal(out.reshape(64, 19), np.array(expected, np.uint64).T)
    np.testing.assert_array_equal(out16.reshape(64, 4), np.array(expected16, np.uint64).T)


LINES = r"""
extern "C" __global__ void axpy_rows(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float v = a * x[i];
    for (int k = 0; k < 3; ++k) v += y[i] * (k + 1);
    y[i] = v;
  }
}
"""


@pytest.mark.parametrize("options", [["-lineinfo"], ["-G"]], ids=["lineinfo", "device-debug"])
def test_line_info_hides_no_instruction(device, options):
    art = nvrtc.compile(LINES, options=options)
    assert "\t.loc\t" in art.code.decode()  # `.loc 1 4 0` has no semicolon: a line of its own
    x, y = np.linspace(-2, 2, 100, dtype=np.float32), np.linspace(1, 3, 100, dtype=np.float32)
    m = ptxbridge.load([art], device)
    yd = m.to_device(y)
    m.axpy_rows(np.float32(1.5), m.to_device(x), yd, 100, grid=4, block=32)
    np.testing.assert_allclose(m.to_host(yd), np.float32(1.5) * x + 6 * y, rtol=1e-6)


def test_a_kernel_the_cpu_loader_cannot_run_fails_at_launch_naming_instruction_kernel_and_line():
    m = _load(BASIC, "cpu")  # the module loads, and its other kernels run (every test above)
    ptx = nvrtc.compile(BASIC).code.decode()
    line = next(i for i, text in enumerate(ptx.splitlines(), 1) if "mbarrier.expect_tx" in text)
    with pytest.raises(UnsupportedInstructionError) as error:
        m.waits_for_a_transaction(np.zeros(1, np.uint64), grid=1, block=1)
    message = str(error.value)
    assert "kernel 'waits_for_a_transaction'" in message and f"PTX line {line}" in message
    assert "mbarrier.expect_tx" in message and "transaction counts" in message


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("PTXBRIDGE_SLOW_TESTS"),
                    reason="CUB takes NVRTC half a minute: set PTXBRIDGE_SLOW_TESTS=1")
@pytest.mark.parametrize("where", DEVICES)
def test_cub_block_radix_sort_and_block_reduce(where):
    source = r'''
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_reduce.cuh>
extern "C" __global__ void sort(const unsigned* in, unsigned* out) {
  using Sort = cub::BlockRadixSort<unsigned, 128, 4>;
  __shared__ typename Sort::TempStorage temp;
  unsigned keys[4];
  for (int i = 0; i < 4; ++i) keys[i] = in[blockIdx.x * 512 + threadIdx.x * 4 + i];
  Sort(temp).Sort(keys);
  for (int i = 0; i < 4; ++i) out[blockIdx.x * 512 + threadIdx.x * 4 + i] = keys[i];
}
extern "C" __global__ void block_sum(const int* in, int* out) {
  using Reduce = cub::BlockReduce<int, 128>;
  __shared__ typename Reduce::TempStorage temp;
  int total = Reduce(temp).Sum(in[blockIdx.x * 128 + threadIdx.x]);
  if (threadIdx.x == 0) out[blockIdx.x] = total;
}
'''
    m = ptxbridge.load([nvrtc.compile(source)], where)
    keys = np.random.default_rng(7).integers(0, 2**32, 1024, dtype=np.uint32)
    _, out = _run(m, "sort", keys, np.zeros_like(keys), grid=2, block=128)
    np.testing.assert_array_equal(out.reshape(2, -1), np.sort(keys.reshape(2, -1), axis=1))
    x = np.arange(256, dtype=np.int32) - 100
    _, sums = _run(m, "block_sum", x, np.zeros(2, np.int32), grid=2, block=128)
    np.testing.assert_array_equal(sums, x.reshape(2, -1).sum(axis=1))
