"""The CPU loader's compiled tier against NumPy doing the same work, in one process.

    python bench/cpu_tier.py [--repeat 5] [--interp] [--threads N]

Kernels (the issue's targets): numba-cuda saxpy over 2**20 float32 (NumPy ``a * x + y``), a
16x16-tiled shared-memory matmul at n=512 in CUDA C++ (NumPy ``@``, BLAS on one thread), a
shared-memory atomic 256-bin histogram of 2**22 bytes (``np.bincount``), and the Collatz step
counts of 2**16 starts, a divergent per-thread loop (a NumPy loop over the still-active values);
then what runs compiled since the tier took warp instructions and calls: per-warp sums of 2**22
floats by ``__shfl_down_sync`` (NumPy's row sums), and a Rust axpy over slices, indexed as Rust
programmers index them (every access bounds-checked, a panic path in the kernel), 2**20 float32,
where Debian's rustc-web is installed.
Each result is checked against NumPy's.  Times are wall seconds, best of ``--repeat`` (the compiled
tier runs independent blocks on several threads: ``--threads`` sets how many, as
``PTXBRIDGE_CPU_THREADS`` does; NumPy's BLAS runs on one); the first launch (compile, or the disk
cache) is reported apart, with the time its compile or disk read took (the runtime's shared helpers
are compiled before, once).  ``--interp`` adds the interpreter's time for each kernel.  Prints a
Markdown table for bench/RESULTS.md, and the time of a launch with next to no work (the floor the
Python call path sets).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # NumPy's BLAS on one thread, as the issue measures

import numpy as np
from numba import cuda

import ptxbridge
from ptxbridge import nvrtc
from ptxbridge.loaders.emulator.compiled.blocks import threads
from ptxbridge.loaders.emulator.compiled.jit import compile_ir
from ptxbridge.loaders.emulator.compiled.tier import RUNTIME

sys.path.insert(0, str(Path(__file__).resolve().parent))
import emulator_kernels as fx


def _saxpy(a, x, y, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = a * x[i] + y[i]


def _best(run: Callable[[], Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def _first(run: Callable[[], Any]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def _load(artifact: Any, tier: str) -> Any:
    return ptxbridge.link([artifact]).load("cpu", tier=tier)


def _collatz_numpy(start: np.ndarray) -> np.ndarray:
    v, steps = start.astype(np.uint64), np.zeros(start.size, np.uint32)
    active = np.flatnonzero(v > 1)
    while active.size:
        x = v[active]
        x = np.where(x & 1, 3 * x + 1, x >> 1)
        v[active] = x
        steps[active] += 1
        active = active[x > 1]
    return steps


RUST_AXPY = """#![no_std]
#![feature(abi_ptx, stdarch_nvptx)]
use core::arch::nvptx::{_block_dim_x, _block_idx_x, _thread_idx_x};

#[unsafe(no_mangle)]
pub extern "ptx-kernel" fn axpy(a: f32, x: &[f32], y: &[f32], out: &mut [f32]) {
    let i = unsafe { (_block_idx_x() * _block_dim_x() + _thread_idx_x()) as usize };
    if i < out.len() {
        out[i] = a * x[i] + y[i];
    }
}
"""


def _rust_axpy() -> Any:
    """The Rust axpy's artifact, or None where Debian's rustc is not installed."""
    import ptxbridge.rust
    from ptxbridge.abi.errors import ToolchainError

    try:
        return ptxbridge.rust.compile(RUST_AXPY, arch="sm_90", progress=False)
    except ToolchainError:
        return None


def cases() -> list[tuple[str, Any, Callable[[Any], Any], Callable[[], Any], Callable[[Any], bool]]]:
    """(name, artifact, launch(module), numpy(), check(module result)) per kernel."""
    import ptxbridge.numba as pn

    rng = np.random.default_rng(0)
    n = 1 << 20
    x, y, out = rng.random(n, np.float32), rng.random(n, np.float32), np.zeros(n, np.float32)
    size = 512
    a, b, c = (
        rng.random((size, size), np.float32),
        rng.random((size, size), np.float32),
        np.zeros((size, size), np.float32),
    )
    data, bins = rng.integers(0, 256, 1 << 22, dtype=np.uint8), np.zeros(256, np.uint32)
    starts, steps = np.arange(1, (1 << 16) + 1, dtype=np.uint32), np.zeros(1 << 16, np.uint32)
    saxpy = pn.compile(
        _saxpy, "void(float32, float32[::1], float32[::1], float32[::1])", arch="sm_90", name="saxpy"
    )

    def histogram(m: Any) -> None:
        bins[:] = 0
        m.histogram(data, bins, data.size, grid=256, block=256)

    floats = rng.random(1 << 22, np.float32)
    sums = np.zeros(floats.size // 32, np.float32)
    rust = _rust_axpy()
    rows = [
        (
            "saxpy (numba-cuda), 2^20 float32",
            saxpy,
            lambda m: m.saxpy(np.float32(2.0), x, y, out, grid=n // 256, block=256),
            lambda: np.float32(2.0) * x + y,
            lambda m: np.array_equal(out, np.float32(2.0) * x + y),
        ),
        (
            "16x16-tiled shared-memory matmul (NVRTC), n=512",
            nvrtc.compile(fx.MATMUL, arch="sm_90", output="ptx"),
            lambda m: m.matmul(a, b, c, size, grid=(size // 16, size // 16), block=(16, 16)),
            lambda: a @ b,
            lambda m: np.allclose(c, a @ b, rtol=1e-4),
        ),
        (
            "shared-memory atomic histogram, 256 bins of 2^22 bytes",
            nvrtc.compile(fx.HISTOGRAM, arch="sm_90", output="ptx"),
            histogram,
            lambda: np.bincount(data, minlength=256),
            lambda m: np.array_equal(bins, np.bincount(data, minlength=256)),
        ),
        (
            "Collatz steps of 2^16 starts (divergent loop)",
            nvrtc.compile(fx.COLLATZ, arch="sm_90", output="ptx"),
            lambda m: m.collatz(starts, steps, starts.size, grid=starts.size // 256, block=256),
            lambda: _collatz_numpy(starts),
            lambda m: np.array_equal(steps, _collatz_numpy(starts)),
        ),
        (
            "warp sums by __shfl_down_sync (NVRTC), 2^22 float32",
            nvrtc.compile(fx.WARP_SUMS, arch="sm_90", output="ptx"),
            lambda m: m.warp_sums(floats, sums, floats.size, grid=floats.size // 256, block=256),
            lambda: floats.reshape(-1, 32).sum(axis=1),
            lambda m: np.allclose(sums, floats.reshape(-1, 32).sum(axis=1), rtol=1e-5),
        ),
    ]
    if rust is not None:
        rows.append((
            "bounds-checked Rust axpy over slices, 2^20 float32",
            rust,
            lambda m: m.axpy(np.float32(2.0), x, y, out, grid=n // 256, block=256),
            lambda: np.float32(2.0) * x + y,
            lambda m: np.array_equal(out, np.float32(2.0) * x + y),
        ))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--interp", action="store_true", help="also time the interpreter")
    parser.add_argument("--threads", type=int, help="threads for independent blocks (default: every CPU)")
    args = parser.parse_args()
    if args.threads is not None:
        os.environ["PTXBRIDGE_CPU_THREADS"] = str(args.threads)
    print(f"Compiled tier threads for independent blocks: {threads()}\n")
    compile_ir("define i32 @launch(ptr %ctx) {\n  ret i32 0\n}", RUNTIME)  # the helpers, once, first
    print(
        "| kernel | first launch (s) | of it, compile or disk cache (s) | compiled (s) | NumPy (s) "
        "| compiled / NumPy |" + (" interpreter (s) | interpreter / compiled |" if args.interp else "")
    )
    print("|---|---:|---:|---:|---:|---:|" + ("---:|---:|" if args.interp else ""))
    floor = float("nan")
    for name, artifact, run, numpy, check in cases():
        module = _load(artifact, "compiled")
        first = _first(lambda m=module, r=run: r(m))
        kernel = next(iter(module.image.kernels))
        tier = module.backend.compiled_tier
        why = tier.why_interpreted(kernel)
        if why is not None:
            raise AssertionError(f"{name}: runs on the interpreter: {why}")
        # the variant compiled for the launch's warp shape (.lanes)
        made = next(v.code.seconds for (k, _), v in tier.variants.items() if k == kernel)
        compiled = _best(lambda m=module, r=run: r(m), args.repeat)
        if not check(module):
            raise AssertionError(f"{name}: the compiled tier's result differs from NumPy's")
        reference = _best(numpy, args.repeat)
        row = (f"| {name} | {first:.3f} | {made:.3f} | {compiled:.4f} | {reference:.4f} "
               f"| {compiled / reference:.2f}x |")
        if args.interp:
            slow = _load(artifact, "interp")
            interp = _best(lambda m=slow, r=run: r(m), 1)
            row += f" {interp:.3f} | {interp / compiled:.0f}x |"
        print(row, flush=True)
        if name.startswith("saxpy"):
            floor = _launch_floor(module, args.repeat)
    print(f"\nThe Python launch (saxpy over one block of 256 floats, best of {100 * args.repeat}): "
          f"{floor * 1e3:.3f} ms")


def _launch_floor(module: Any, repeat: int) -> float:
    """Seconds of one launch that does next to no work: what every launch costs in Python."""
    x = np.ones(256, np.float32)
    out = np.zeros(256, np.float32)
    return _best(lambda: module.saxpy(np.float32(2.0), x, x, out, grid=1, block=256), 100 * repeat)


if __name__ == "__main__":
    main()
