"""Throughput of the CPU PTX emulator, in thread-instructions per second.

    python bench/emulator.py [--repeat 3] [--batch 1048576]

Kernels: numba-cuda saxpy over 2**20 float32 elements (the issue's target:
>= 100 million thread-instructions/s on a 2-core machine) and an NVRTC
shared-memory tree reduction with ``__syncthreads`` over 2**20 floats (256
threads per block, one partial sum per block).  A thread-instruction is one
instruction executed by one thread; the emulator counts them as it runs.
Prints a Markdown table for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from numba import cuda

from ptxbridge.abi.dtypes import dtype
from ptxbridge.abi.kinds import NumbaArray, Pointer, Scalar
from ptxbridge.abi.signature import Convention, Param, Signature
from ptxbridge.image import Image
from ptxbridge.loaders.base import Buffer
from ptxbridge.loaders.emulator import EmulatorBackend

N = 1 << 20
REDUCE = r'''
extern "C" __global__ void reduce(const float* x, float* out, int n) {
  __shared__ float s[256];
  int t = threadIdx.x; int i = blockIdx.x * blockDim.x + t;
  s[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) { if (t < k) s[t] += s[t + k]; __syncthreads(); }
  if (t == 0) out[blockIdx.x] = s[0];
}
'''


def _saxpy(a, x, y, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = a * x[i] + y[i]


def _nvrtc_ptx(source: str) -> bytes:
    from ptxbridge import nvrtc

    return nvrtc.compile(source, arch="sm_90", output="ptx").code


def _array(a: np.ndarray) -> list[int]:
    return [0, 0, a.size, a.itemsize, a.ctypes.data, *a.shape, *a.strides]


def _measure(be: EmulatorBackend, run, repeat: int) -> tuple[float, int]:
    best, count = float("inf"), 0
    for _ in range(repeat):
        before = be.thread_instructions
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
        count = be.thread_instructions - before
    return best, count


def bench_saxpy(repeat: int, batch: int) -> tuple[str, float, int]:
    ptx, _ = cuda.compile(_saxpy, "void(float32, float32[::1], float32[::1], float32[::1])", cc=(9, 0),
                          output="ptx", device=False, abi="numba", abi_info={"abi_name": "saxpy"})
    f32 = dtype("f32")
    array = NumbaArray(f32, 1, "C")
    sig = Signature("saxpy", (Param("a", Scalar(f32)), Param("x", array), Param("y", array),
                              Param("out", array)), convention=Convention.NUMBA)
    be = EmulatorBackend(Image(None, None, {"saxpy": sig}, ptx=(ptx.encode(),)), max_batch_threads=batch)
    rng = np.random.default_rng(0)
    x, y, out = rng.random(N, np.float32), rng.random(N, np.float32), np.zeros(N, np.float32)
    params = sig.layout.packer().pack([2.0, *_array(x), *_array(y), *_array(out)])
    buffers = [Buffer(a.ctypes.data, a.nbytes, a is out, a) for a in (x, y, out)]
    seconds, count = _measure(be, lambda: be.launch("saxpy", (N // 256, 1, 1), (256, 1, 1), 0, None, params,
                                                    buffers), repeat)
    if not np.array_equal(out, (x.astype(np.float64) * 2 + y).astype(np.float32)):
        raise AssertionError("saxpy result is wrong")
    return "saxpy (numba-cuda), 2^20 elements", seconds, count


def bench_reduce(repeat: int, batch: int) -> tuple[str, float, int]:
    f32 = Pointer(Scalar(dtype("f32")))
    sig = Signature("reduce", (Param("x", f32), Param("out", f32), Param("n", Scalar(dtype("i32")))))
    image = Image(None, None, {"reduce": sig}, ptx=(_nvrtc_ptx(REDUCE),))
    be = EmulatorBackend(image, max_batch_threads=batch)
    x = np.random.default_rng(1).random(N, np.float32)
    out = np.zeros(N // 256, np.float32)
    params = sig.layout.packer().pack([x.ctypes.data, out.ctypes.data, N])
    buffers = [Buffer(x.ctypes.data, x.nbytes, False, x), Buffer(out.ctypes.data, out.nbytes, True, out)]
    seconds, count = _measure(be, lambda: be.launch("reduce", (N // 256, 1, 1), (256, 1, 1), 0, None, params,
                                                    buffers), repeat)
    if not np.allclose(out, x.reshape(-1, 256).sum(axis=1), rtol=1e-5):
        raise AssertionError("reduction result is wrong")
    return "shared-memory tree reduction (NVRTC), 2^20 elements", seconds, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1 << 15, help="max_batch_threads")
    args = parser.parse_args()
    print("| kernel | thread-instructions | best time (s) | thread-instructions/s |")
    print("|---|---:|---:|---:|")
    for bench in (bench_saxpy, bench_reduce):
        name, seconds, count = bench(args.repeat, args.batch)
        print(f"| {name} | {count:,} | {seconds:.3f} | {count / seconds / 1e6:,.0f} M |")


if __name__ == "__main__":
    main()
