"""Throughput of the CPU PTX emulator, in thread-instructions per second.

    python bench/emulator.py [--repeat 3] [--batch 32768] [--only NAME ...] [--cpu-time] [--emulator-root DIR]
                             [--sanitize racecheck|initcheck] [--versus-interpreter]

Kernels: numba-cuda saxpy over 2**20 float32 elements (the issue's target:
>= 100 million thread-instructions/s on a 2-core machine) and an NVRTC
shared-memory tree reduction with ``__syncthreads`` over 2**20 floats (256
threads per block, one partial sum per block); then the shapes of real
programs (bench/emulator_kernels.py): a binomial option pricer (1024 options,
2048 steps), an all-pairs n-body step (4096 bodies), a tiled matrix product
(320x320 . 320x640), a Jacobi relaxation launched 100 times over 65,536
threads (in CUDA C++, and in numba-cuda with numba's laplace test's error
maximum), and a shared-memory matmul at n=1600 (in CUDA C++ and in numba-cuda).  Each result is checked
against NumPy.  A thread-instruction is one instruction executed by one
thread; the emulator counts them as it runs.  Prints a Markdown table for
bench/RESULTS.md.  ``--emulator-root DIR`` runs the ``emulator`` package found in DIR
instead of the installed one (for before/after comparisons: ``git archive COMMIT
loaders/emulator | tar -x -C /tmp/old`` then ``--emulator-root /tmp/old/loaders``).
``--versus-interpreter`` runs each kernel on the loader's default tier, then on the interpreter, then
on the default tier again (its best of both runs is kept) and prints how many times faster the
default tier is: measured minutes apart in two processes, a shared host's drift moved that ratio by
a third.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from numba import cuda, float32

import ptxbridge
from ptxbridge.abi.dtypes import dtype
from ptxbridge.abi.kinds import NumbaArray, Pointer, Scalar
from ptxbridge.abi.signature import Convention, Param, Signature
from ptxbridge.artifacts.image import Image
from ptxbridge.loaders.base import Buffer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import emulator_kernels as fx

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


CLOCK = time.perf_counter  # --cpu-time: time.process_time, this process's CPU seconds
EmulatorBackend: Any = None  # imported in main(), after --emulator-root has put its package first
OPTIONS: dict[str, Any] = {}  # --sanitize: the loader option, only when given (older packages lack it)


def _measure(be: EmulatorBackend, run, repeat: int) -> tuple[float, int]:
    best, count = float("inf"), 0
    for _ in range(repeat):
        before = be.thread_instructions
        start = CLOCK()
        run()
        best = min(best, CLOCK() - start)
        count = be.thread_instructions - before
    return best, count


def bench_saxpy(repeat: int, batch: int) -> tuple[str, float, int]:
    ptx, _ = cuda.compile(_saxpy, "void(float32, float32[::1], float32[::1], float32[::1])", cc=(9, 0),
                          output="ptx", device=False, abi="numba", abi_info={"abi_name": "saxpy"})
    f32 = dtype("f32")
    array = NumbaArray(f32, 1, "C")
    sig = Signature("saxpy", (Param("a", Scalar(f32)), Param("x", array), Param("y", array),
                              Param("out", array)), convention=Convention.NUMBA)
    be = EmulatorBackend(Image(None, None, {"saxpy": sig}, ptx=(ptx.encode(),)), max_batch_threads=batch,
                         **OPTIONS)
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
    be = EmulatorBackend(image, max_batch_threads=batch, **OPTIONS)
    x = np.random.default_rng(1).random(N, np.float32)
    out = np.zeros(N // 256, np.float32)
    params = sig.layout.packer().pack([x.ctypes.data, out.ctypes.data, N])
    buffers = [Buffer(x.ctypes.data, x.nbytes, False, x), Buffer(out.ctypes.data, out.nbytes, True, out)]
    seconds, count = _measure(be, lambda: be.launch("reduce", (N // 256, 1, 1), (256, 1, 1), 0, None, params,
                                                    buffers), repeat)
    if not np.allclose(out, x.reshape(-1, 256).sum(axis=1), rtol=1e-5):
        raise AssertionError("reduction result is wrong")
    return "shared-memory tree reduction (NVRTC), 2^20 elements", seconds, count


def _module(source: str, batch: int) -> Any:
    image = ptxbridge.link([_nvrtc_ptx_artifact(source)])
    return ptxbridge.Module(image, EmulatorBackend(image, max_batch_threads=batch, **OPTIONS))


def _nvrtc_ptx_artifact(source: str) -> Any:
    from ptxbridge import nvrtc

    return nvrtc.compile(source, arch="sm_90", output="ptx")


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise AssertionError(f"{what}: the CPU loader's result differs from NumPy's")


def bench_binomial(repeat: int, batch: int) -> tuple[str, float, int]:
    m = _module(fx.BINOMIAL, batch)
    options = fx.binomial_inputs(1024)
    m.globals["options"] = options
    value = np.zeros(1024)
    seconds, count = _measure(m.backend, lambda: m.binomial(value, grid=1024, block=128), repeat)
    _check(np.allclose(value[:64], fx.binomial_reference(options[:64]), rtol=1e-9, atol=1e-9), "binomial")
    return "binomial options (NVRTC), 1024 options x 2048 steps", seconds, count


def bench_nbody(repeat: int, batch: int) -> tuple[str, float, int]:
    m = _module(fx.NBODY, batch)
    n, soft2 = 4096, 0.01
    pos = np.random.default_rng(2).random((n, 4), np.float32)
    acc = np.zeros((n, 4), np.float32)
    seconds, count = _measure(m.backend, lambda: m.nbody(pos, acc, n, soft2, grid=n // 256, block=256),
                              repeat)
    _check(np.allclose(acc[:, :3], fx.nbody_reference(pos, soft2), rtol=1e-3, atol=1e-2), "nbody")
    return "all-pairs n-body (NVRTC), 4096 bodies", seconds, count


def bench_matrix_mul(repeat: int, batch: int) -> tuple[str, float, int]:
    m = _module(fx.MATRIX_MUL, batch)
    rng = np.random.default_rng(3)
    a, b = rng.random((320, 320), np.float32), rng.random((320, 640), np.float32)
    c = np.zeros((320, 640), np.float32)
    seconds, count = _measure(
        m.backend, lambda: m.matrix_mul(c, a, b, 320, 640, grid=(20, 10), block=(32, 32)), repeat)
    _check(np.allclose(c, a @ b, rtol=1e-4), "matrix_mul")
    return "tiled matrix product (NVRTC), 320x320 . 320x640", seconds, count


def _relaxation(m: Any, step: Any, repeat: int, what: str) -> tuple[float, int]:
    """100 Jacobi launches over a 256x256 grid hot on one edge, ``step(src, dst)`` each; checked."""
    n, launches = 256, 100
    start = np.zeros((n, n), np.float32)
    start[0, :] = 1.0
    grids = [start.copy(), start.copy()]

    def run() -> None:
        grids[0][:], grids[1][:] = start, start
        for k in range(launches):
            step(grids[k % 2], grids[1 - k % 2])

    seconds, count = _measure(m.backend, run, repeat)
    _check(np.allclose(grids[launches % 2], fx.laplace_reference(start, launches), atol=1e-6), what)
    return seconds, count


RELAXATION = "Jacobi relaxation ({}), 100 launches x 65,536 threads"


def bench_laplace(repeat: int, batch: int) -> tuple[str, float, int]:
    m = _module(fx.LAPLACE, batch)
    return (RELAXATION.format("NVRTC"),
            *_relaxation(m, lambda src, dst: m.jacobi(src, dst, 256, grid=(16, 16), block=(16, 16)), repeat,
                         "jacobi"))


def _numba_module(pyfunc: Any, sig: str, name: str, batch: int) -> Any:
    import ptxbridge.numba as pn

    image = ptxbridge.link([pn.compile(pyfunc, sig, arch="sm_90", name=name)])
    return ptxbridge.Module(image, EmulatorBackend(image, max_batch_threads=batch, **OPTIONS))


def _jacobi_numba(a, anew, error):
    """The 4-point relaxation step of numba-cuda's laplace test, with its per-launch error maximum."""
    j, i = cuda.grid(2)
    n, m = a.shape
    if 0 < j < n - 1 and 0 < i < m - 1:
        anew[j, i] = np.float32(0.25) * (a[j, i + 1] + a[j, i - 1] + a[j - 1, i] + a[j + 1, i])
        cuda.atomic.max(error, 0, abs(anew[j, i] - a[j, i]))


def bench_laplace_numba(repeat: int, batch: int) -> tuple[str, float, int]:
    m = _numba_module(_jacobi_numba, "void(float32[:, ::1], float32[:, ::1], float32[::1])", "jacobi", batch)
    error = np.zeros(1, np.float32)

    def step(src: np.ndarray, dst: np.ndarray) -> None:
        error[0] = 0.0
        m.jacobi(src, dst, error, grid=(16, 16), block=(16, 16))

    return (RELAXATION.format("numba-cuda"), *_relaxation(m, step, repeat, "jacobi (numba)"))


TPB = 16


def _matmul_numba(a, b, c):
    """C = A * B through TPB x TPB shared-memory tiles, as numba-cuda's matmul example does."""
    sa = cuda.shared.array((TPB, TPB), float32)
    sb = cuda.shared.array((TPB, TPB), float32)
    x, y = cuda.grid(2)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    tmp = float32(0.0)
    for t in range(a.shape[1] // TPB):
        sa[ty, tx] = a[y, t * TPB + tx]
        sb[ty, tx] = b[t * TPB + ty, x]
        cuda.syncthreads()
        for k in range(TPB):
            tmp += sa[ty, k] * sb[k, tx]
        cuda.syncthreads()
    c[y, x] = tmp


def _matmul(m: Any, multiply: Any, repeat: int, what: str, n: int) -> tuple[float, int]:
    """``multiply(a, b, c)`` of two random n x n matrices into ``c``, timed and checked."""
    rng = np.random.default_rng(4)
    a, b = rng.random((n, n), np.float32), rng.random((n, n), np.float32)
    c = np.zeros((n, n), np.float32)
    seconds, count = _measure(m.backend, lambda: multiply(a, b, c), repeat)
    _check(np.allclose(c, a @ b, rtol=1e-4), what)
    return seconds, count


def bench_matmul_numba(repeat: int, batch: int, n: int = 1600) -> tuple[str, float, int]:
    sig = "void(float32[:, ::1], float32[:, ::1], float32[:, ::1])"
    m = _numba_module(_matmul_numba, sig, "matmul", batch)

    def multiply(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
        m.matmul(a, b, c, grid=(n // TPB, n // TPB), block=(TPB, TPB))

    return (f"shared-memory matmul (numba-cuda), n={n}", *_matmul(m, multiply, repeat, "matmul (numba)", n))


def bench_matmul(repeat: int, batch: int, n: int = 1600) -> tuple[str, float, int]:
    m = _module(fx.MATMUL, batch)

    def multiply(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
        m.matmul(a, b, c, n, grid=(n // TPB, n // TPB), block=(TPB, TPB))

    return (f"shared-memory matmul (NVRTC), n={n}", *_matmul(m, multiply, repeat, "matmul", n))


BENCHES = {"saxpy": bench_saxpy, "reduce": bench_reduce, "binomial": bench_binomial, "nbody": bench_nbody,
           "matrix_mul": bench_matrix_mul, "laplace": bench_laplace, "laplace_numba": bench_laplace_numba,
           "matmul": bench_matmul, "matmul_numba": bench_matmul_numba}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1 << 15, help="max_batch_threads")
    parser.add_argument("--only", nargs="*", choices=sorted(BENCHES), help="run these benchmarks only")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time with this process's CPU seconds (steadier on a machine others share; "
                             "every thread's seconds add up, so set PTXBRIDGE_CPU_THREADS=1 with it)")
    parser.add_argument("--emulator-root", help="a folder holding another `emulator` package to run instead")
    parser.add_argument("--versus-interpreter", action="store_true",
                        help="also run each kernel on the interpreter, in this process, and print the ratio")
    parser.add_argument("--sanitize", help="the CPU loader's sanitize= tools (racecheck, initcheck), to "
                                           "measure their cost")
    args = parser.parse_args()
    if args.sanitize:
        OPTIONS["sanitize"] = args.sanitize
    global CLOCK, EmulatorBackend
    CLOCK = time.process_time if args.cpu_time else time.perf_counter
    if args.emulator_root:
        import ptxbridge.loaders

        ptxbridge.loaders.__path__.insert(0, str(Path(args.emulator_root).resolve()))
    from ptxbridge.loaders.emulator import EmulatorBackend
    clock = "CPU " if args.cpu_time else ""
    if args.versus_interpreter:
        print(f"| kernel | thread-instructions | best {clock}time (s) | interpreter (s) | interpreter / it |")
        print("|---|---:|---:|---:|---:|")
    else:
        print(f"| kernel | thread-instructions | best {clock}time (s) | thread-instructions/s |")
        print("|---|---:|---:|---:|")
    for key in args.only or BENCHES:
        name, seconds, count = BENCHES[key](args.repeat, args.batch)
        if not args.versus_interpreter:
            print(f"| {name} | {count:,} | {seconds:.3f} | {count / seconds / 1e6:,.0f} M |", flush=True)
            continue
        OPTIONS["tier"] = "interp"
        interpreted = BENCHES[key](1, args.batch)[1]
        del OPTIONS["tier"]
        seconds = min(seconds, BENCHES[key](args.repeat, args.batch)[1])
        print(f"| {name} | {count:,} | {seconds:.3f} | {interpreted:.3f} | {interpreted / seconds:.1f}x |",
              flush=True)


if __name__ == "__main__":
    main()
