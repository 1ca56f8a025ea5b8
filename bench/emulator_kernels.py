"""CUDA C++ fixtures for bench/emulator.py: the shapes of kernels people run on the CPU loader.

Written for this benchmark after the shapes of well-known programs (a binomial option pricer,
an all-pairs n-body step, tiled matrix products, a Jacobi relaxation launched many times); each
comes with a NumPy reference the benchmark checks the CPU loader's result against.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BINOMIAL", "NBODY", "MATRIX_MUL", "LAPLACE", "MATMUL", "HISTOGRAM", "COLLATZ", "binomial_inputs",
           "binomial_reference",
           "nbody_reference", "laplace_reference"]

NUM_STEPS = 2048

BINOMIAL = r'''
#define NUM_STEPS 2048
#define BLOCK 128
#define ELEMS (NUM_STEPS / BLOCK)
struct OptionData { double S, X, vDt, puByDf, pdByDf; };
__constant__ OptionData options[1024];
__device__ inline double expiry_call(double S, double X, double vDt, int i) {
  double d = S * exp(vDt * (2.0 * i - NUM_STEPS)) - X;
  return d > 0.0 ? d : 0.0;
}
// one option per block; thread t owns tree nodes [t * ELEMS, (t + 1) * ELEMS)
extern "C" __global__ void binomial(double* value) {
  __shared__ double edge[BLOCK + 1];
  const int t = threadIdx.x;
  const OptionData o = options[blockIdx.x];
  double v[ELEMS + 1];
  for (int i = 0; i < ELEMS; ++i) v[i] = expiry_call(o.S, o.X, o.vDt, t * ELEMS + i);
  if (t == 0) edge[BLOCK] = expiry_call(o.S, o.X, o.vDt, NUM_STEPS);
  int last = max(0, t * ELEMS - 1);
#pragma unroll 16
  for (int i = NUM_STEPS; i > 0; --i) {
    edge[t] = v[0];
    __syncthreads();
    v[ELEMS] = edge[t + 1];
    __syncthreads();
    if (i > last) {
#pragma unroll
      for (int j = 0; j < ELEMS; ++j) v[j] = o.puByDf * v[j + 1] + o.pdByDf * v[j];
    }
  }
  if (t == 0) value[blockIdx.x] = v[0];
}
'''

NBODY = r'''
#define TILE 256
extern "C" __global__ void nbody(const float4* pos, float4* acc, int n, float soft2) {
  __shared__ float4 tile[TILE];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float4 me = pos[i];
  float3 a = {0.0f, 0.0f, 0.0f};
  for (int base = 0; base < n; base += TILE) {
    tile[threadIdx.x] = pos[base + threadIdx.x];
    __syncthreads();
    for (int k = 0; k < TILE; ++k) {
      float4 other = tile[k];
      float3 r = {other.x - me.x, other.y - me.y, other.z - me.z};
      float d2 = r.x * r.x + r.y * r.y + r.z * r.z + soft2;
      float inv = rsqrtf(d2);
      float s = other.w * inv * inv * inv;
      a.x += r.x * s; a.y += r.y * s; a.z += r.z * s;
    }
    __syncthreads();
  }
  acc[i] = make_float4(a.x, a.y, a.z, 0.0f);
}
'''

MATRIX_MUL = r'''
#define BS 32
// C (hA x wB) = A (hA x wA) * B (wA x wB), one BS x BS tile of C per block
extern "C" __global__ void matrix_mul(float* C, const float* A, const float* B, int wA, int wB) {
  __shared__ float As[BS][BS];
  __shared__ float Bs[BS][BS];
  int bx = blockIdx.x, by = blockIdx.y, tx = threadIdx.x, ty = threadIdx.y;
  float sum = 0.0f;
  for (int a = wA * BS * by, b = BS * bx; a < wA * BS * by + wA; a += BS, b += BS * wB) {
    As[ty][tx] = A[a + wA * ty + tx];
    Bs[ty][tx] = B[b + wB * ty + tx];
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BS; ++k) sum += As[ty][k] * Bs[k][tx];
    __syncthreads();
  }
  C[wB * BS * by + BS * bx + wB * ty + tx] = sum;
}
'''

LAPLACE = r'''
// one Jacobi relaxation step on an n x n grid; the boundary is held
extern "C" __global__ void jacobi(const float* in, float* out, int n) {
  int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= n || j >= n) return;
  if (i == 0 || j == 0 || i == n - 1 || j == n - 1) { out[i * n + j] = in[i * n + j]; return; }
  out[i * n + j] = 0.25f * (in[(i - 1) * n + j] + in[(i + 1) * n + j]
                            + in[i * n + j - 1] + in[i * n + j + 1]);
}
'''

MATMUL = r'''
#define TPB 16
// C = A * B for n x n matrices, shared-memory tiles of TPB x TPB, n a multiple of TPB
extern "C" __global__ void matmul(const float* A, const float* B, float* C, int n) {
  __shared__ float sA[TPB][TPB];
  __shared__ float sB[TPB][TPB];
  int x = blockIdx.x * TPB + threadIdx.x, y = blockIdx.y * TPB + threadIdx.y;
  int tx = threadIdx.x, ty = threadIdx.y;
  float tmp = 0.0f;
  for (int t = 0; t < n / TPB; ++t) {
    sA[ty][tx] = A[y * n + t * TPB + tx];
    sB[ty][tx] = B[(t * TPB + ty) * n + x];
    __syncthreads();
    for (int k = 0; k < TPB; ++k) tmp += sA[ty][k] * sB[k][tx];
    __syncthreads();
  }
  C[y * n + x] = tmp;
}
'''

# a shared-memory histogram with atomics (per-block bins, then one global atomic per bin)
HISTOGRAM = r'''
extern "C" __global__ void histogram(const unsigned char* data, unsigned int* bins, int n) {
  __shared__ unsigned int local[256];
  for (int i = threadIdx.x; i < 256; i += blockDim.x) local[i] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    atomicAdd(&local[data[i]], 1u);
  __syncthreads();
  for (int i = threadIdx.x; i < 256; i += blockDim.x) atomicAdd(&bins[i], local[i]);
}
'''

# a divergent per-thread loop: each thread counts the Collatz steps of its start
COLLATZ = r'''
extern "C" __global__ void collatz(const unsigned int* start, unsigned int* steps, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned long long v = start[i]; unsigned int s = 0;
  while (v > 1) { v = (v & 1) ? 3 * v + 1 : v >> 1; ++s; }
  steps[i] = s;
}
'''


WARP_SUMS = r'''
extern "C" __global__ void warp_sums(const float* x, float* sums, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = i < n ? x[i] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
  if ((threadIdx.x & 31) == 0) sums[i / 32] = v;
}
'''


def binomial_inputs(count: int, seed: int = 0) -> np.ndarray:
    """``count`` options as the kernel's ``OptionData`` records (riskless rate 6%, volatility 10%)."""
    rng = np.random.default_rng(seed)
    s, x, t = rng.uniform(5, 30, count), rng.uniform(1, 100, count), rng.uniform(0.25, 10, count)
    dt = t / NUM_STEPS
    v_dt = 0.10 * np.sqrt(dt)
    u, d = np.exp(v_dt), np.exp(-v_dt)
    pu = (np.exp(0.06 * dt) - d) / (u - d)
    df = np.exp(-0.06 * dt)
    records = np.zeros(count, np.dtype([(f, np.float64) for f in ("S", "X", "vDt", "puByDf", "pdByDf")]))
    records["S"], records["X"], records["vDt"] = s, x, v_dt
    records["puByDf"], records["pdByDf"] = pu * df, (1 - pu) * df
    return records


def binomial_reference(options: np.ndarray) -> np.ndarray:
    """Backward induction over the same tree, all options at once."""
    nodes = np.arange(NUM_STEPS + 1)
    v = np.maximum(options["S"][:, None] * np.exp(options["vDt"][:, None] * (2.0 * nodes - NUM_STEPS))
                   - options["X"][:, None], 0.0)
    pu, pd = options["puByDf"][:, None], options["pdByDf"][:, None]
    for i in range(NUM_STEPS, 0, -1):
        v[:, :i] = pu * v[:, 1:i + 1] + pd * v[:, :i]
    return v[:, 0]


def nbody_reference(pos: np.ndarray, soft2: float) -> np.ndarray:
    p = pos.astype(np.float64)
    r = p[None, :, :3] - p[:, None, :3]
    inv = 1.0 / np.sqrt((r * r).sum(axis=2) + soft2)
    return (r * (p[None, :, 3] * inv ** 3)[:, :, None]).sum(axis=1)


def laplace_reference(grid: np.ndarray, steps: int) -> np.ndarray:
    a = grid.copy()
    for _ in range(steps):
        b = a.copy()
        b[1:-1, 1:-1] = np.float32(0.25) * (a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:])
        a = b
    return a
