"""Calls on the compiled CPU tier: device functions inlined, bit-identical to the interpreter.

The kernels call device functions as their users write them: CUDA C++ ``__noinline__`` helpers
(structs by value, early returns, loops, local arrays, warp shuffles, calls inside branches and
loops, calls of calls), and one language's kernel calling another's device function (numba-cuda
calling CUDA C++, numba-cuda calling Rust).  Each test checks the compiled tier compiled the
kernel, compares both tiers bit for bit and checks the values against NumPy.  What the tier does
not inline (recursion, ``printf``) runs on the interpreter and says why; a fault or a hang inside a
callee is reported as the interpreter reports it, naming the callee.
"""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest
from _rust_fixtures import RUST_DIR, sysroot, toolchain  # noqa: F401 (session fixtures)
from _tiers import both, cuda_tiers, same, tiers

import ptxbridge
from ptxbridge import nvrtc
from ptxbridge.abi.errors import EmulatorError, KernelRaisedError, MemoryAccessError

HELPERS = r"""
struct Sample { float value; int index; double scale; };

__device__ __noinline__ Sample rescaled(Sample s) {  // a struct in, a struct out
    s.value *= (float)s.scale;
    s.index += 1;
    return s;
}

__device__ __noinline__ float clamped(float x, float lo, float hi) {  // returns from three places
    if (x < lo) return lo;
    if (x > hi) return hi;
    return x;
}

__device__ __noinline__ int collatz(unsigned v) {  // a loop, its trip count per thread
    int steps = 0;
    while (v > 1) { v = (v & 1) ? 3 * v + 1 : v / 2; steps++; }
    return steps;
}

__device__ __noinline__ float median3(const float* p) {  // a local array, indexed at run time
    float window[3] = {p[0], p[1], p[2]};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2 - i; j++)
            if (window[j] > window[j + 1]) {
                float t = window[j];
                window[j] = window[j + 1];
                window[j + 1] = t;
            }
    return window[1];
}

__device__ __noinline__ float warp_sum(float v) {  // a warp reduction inside a callee
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
}

__device__ __noinline__ int nested(int x) { return collatz(x) + collatz(x + 1); }  // calls of calls

__device__ __noinline__ void store_pair(float* out, float a, float b) { out[0] = a; out[1] = b; }

extern "C" __global__ void helpers(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    float total = warp_sum(v);  // every lane of the warp takes part
    if (i >= n) return;
    Sample s = {v, i, 0.5};
    s = rescaled(s);
    float* o = out + 8 * i;
    o[0] = clamped(s.value, 0.1f, 0.4f);
    o[1] = (float)s.index;
    o[2] = (float)collatz(i + 1);
    o[3] = i + 3 <= n ? median3(x + i) : -1.0f;
    o[4] = total;
    o[5] = 0.0f;
    for (int k = 0; k < 3; k++)  // a call in a loop: fresh registers each time
        if ((i + k) & 1) o[5] += clamped(v * k, 0.2f, 0.7f);  // and in a branch some lanes skip
    store_pair(o + 6, (float)nested(i % 50 + 1), v);
}
"""


def _collatz(v: int) -> int:
    steps = 0
    while v > 1:
        v, steps = (3 * v + 1 if v & 1 else v // 2), steps + 1
    return steps


def test_cuda_device_functions_are_inlined_and_match_the_interpreter_and_numpy():
    n = 300
    x = np.random.default_rng(41).random(n, dtype=np.float32)
    got, want = both(cuda_tiers(HELPERS), "helpers", lambda: [x, np.zeros((n, 8), np.float32), n],
                     grid=3, block=128)
    same(got, want)
    out, i = got[1], np.arange(n)
    scaled = (x * np.float32(0.5)).astype(np.float32)
    assert (out[:, 0] == np.clip(scaled, np.float32(0.1), np.float32(0.4))).all()
    assert (out[:, 1] == i + 1).all()
    assert (out[:, 2] == [_collatz(k + 1) for k in i]).all()
    assert (out[: n - 2, 3] == np.median(np.lib.stride_tricks.sliding_window_view(x, 3), axis=1)).all()
    padded = np.concatenate([x, np.zeros(384 - n, np.float32)]).reshape(-1, 32)
    assert np.allclose(out[:, 4], np.repeat(padded.sum(axis=1), 32)[:n], rtol=1e-5)
    assert (out[:, 6] == [_collatz(k % 50 + 1) + _collatz(k % 50 + 2) for k in i]).all()
    assert (out[:, 7] == x).all()


def test_a_numba_kernel_calling_a_cuda_cpp_device_function_is_compiled_whole():
    numba = pytest.importorskip("ptxbridge.numba")
    from numba import cuda

    cpp_scale = cuda.declare_device("cpp_scale", "float32(float32, int32)", abi="c")

    def scale_all(x, out):
        i = cuda.grid(1)
        if i < x.size:
            out[i] = cpp_scale(x[i], i)

    kernel = numba.compile(scale_all, "void(float32[::1], float32[::1])", arch="sm_90", name="scale_all")
    source = 'extern "C" __device__ float cpp_scale(float v, int i) { return v * (i % 7) - 1.0f; }'
    helper = nvrtc.compile(source, arch="sm_90", output="ptx")
    x = np.random.default_rng(42).random(1000, dtype=np.float32)
    got, want = both(tiers(kernel, helper), "scale_all", lambda: [x, np.zeros_like(x)], grid=4, block=256)
    same(got, want)
    fused = x.astype(np.float64) * (np.arange(1000) % 7) - 1  # NVRTC fuses the two: one rounding
    assert (got[1] == fused.astype(np.float32)).all()


@pytest.mark.usefixtures("sysroot")  # skips where Debian's rustc-web is not installed
def test_a_numba_kernel_calling_a_rust_device_function_is_compiled_whole():
    numba = pytest.importorskip("ptxbridge.numba")
    from numba import cuda

    rust_fma = cuda.declare_device("rust_fma", "float32(float32, float32, float32)", abi="c")

    def calls_rust(x):
        i = cuda.grid(1)
        if i < x.size:
            x[i] = rust_fma(x[i], 2.0, 1.0)

    rust = ptxbridge.rust.compile(RUST_DIR / "device_fn.rs", arch="sm_80")
    kernel = numba.compile(calls_rust, "void(float32[::1])", arch="sm_90", name="calls_rust")
    x = np.random.default_rng(43).random(500, dtype=np.float32)
    got, want = both(tiers(kernel, rust), "calls_rust", lambda: [x.copy()], grid=2, block=256)
    same(got, want)
    assert (got[0] == x * np.float32(2) + np.float32(1)).all()


RECURSIVE = r"""
__device__ __noinline__ int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
extern "C" __global__ void recursive(int* out) { out[threadIdx.x] = fib(threadIdx.x % 12); }
"""

PRINTS = r"""
extern "C" __global__ void prints(int* out) { if (threadIdx.x == 0) printf("hi\n"); out[threadIdx.x] = 1; }
"""


@pytest.mark.parametrize(("source", "kernel", "why"), [(RECURSIVE, "recursive", "a recursive call"),
                                                       (PRINTS, "prints", "implements itself")])
def test_launches_reaching_a_call_the_tier_does_not_inline_end_on_the_interpreter(source, kernel, why):
    compiled, interpreted = cuda_tiers(source)
    for _ in range(2):  # each launch reaches the call: the second sends the kernel to the interpreter
        outs = []
        for module in (compiled, interpreted):
            out = np.zeros(32, np.int32)
            getattr(module, kernel)(out, grid=1, block=32)
            outs.append(out)
        assert (outs[0] == outs[1]).all() and outs[0].any()
    assert why in compiled.backend.compiled_tier.why_interpreted(kernel)


BUMP = r"""
extern "C" __global__ void bump(int* x, int reach) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    x[i] += 1;
    if (i == reach) printf("thread %d got here\n", i);
}
"""


def test_a_launch_that_leaves_the_compiled_code_runs_again_from_the_memory_it_found(capfd):
    compiled, _ = cuda_tiers(BUMP)
    x = np.arange(256, dtype=np.int32)
    compiled.bump(x, -1, grid=4, block=64)  # no thread prints: compiled through
    assert (x == np.arange(256) + 1).all() and capfd.readouterr().out == ""
    compiled.bump(x, 200, grid=4, block=64)  # blocks 0-2 ran compiled before block 3 got there
    assert (x == np.arange(256) + 2).all()  # each element bumped once: the interpreter's run
    assert capfd.readouterr().out == "thread 200 got here\n"
    assert compiled.backend.compiled_tier.why_interpreted("bump") is None  # one miss: still compiled


FAULTS = r"""
__device__ __noinline__ void put(float* p, int i, float v) { p[i] = v; }
__device__ __noinline__ int spin(volatile int* flag) { int k = 0; while (*flag == 0) k++; return k; }
extern "C" __global__ void overrun(float* x, int n) { put(x, threadIdx.x + n - 8, 1.0f); }
extern "C" __global__ void hangs(int* flag, int* out) { out[threadIdx.x] = spin(flag); }
"""


def test_a_fault_inside_a_callee_is_reported_as_the_interpreter_reports_it():
    compiled, interpreted = cuda_tiers(FAULTS)
    said = []
    for module in (compiled, interpreted):
        with pytest.raises(MemoryAccessError) as raised:
            module.overrun(np.zeros(16, np.float32), 16, grid=1, block=32)
        said.append(str(raised.value))
    addresses = re.compile(r"0x[0-9a-f]+")  # each tier's launch had arrays of its own
    assert addresses.sub("@", said[0]) == addresses.sub("@", said[1]) and "_Z3putPfif" in said[0]
    assert compiled.backend.compiled_tier.why_interpreted("overrun") is None


def test_a_hang_inside_a_callee_is_stopped_and_named_as_the_interpreter_names_it():
    image = ptxbridge.link([nvrtc.compile(FAULTS, arch="sm_90", output="ptx")])
    said = []
    for tier in ("compiled", "interp"):
        module = image.load("cpu", tier=tier, max_steps=5000)
        with pytest.raises(EmulatorError, match="gave up after 5000 interpreter steps") as raised:
            module.hangs(np.zeros(1, np.int32), np.zeros(32, np.int32), grid=1, block=32)
        said.append(str(raised.value))
        if tier == "compiled":
            assert module.backend.compiled_tier.why_interpreted("hangs") is None
    # the same thread, in the callee (each tier looks at the loop from its own instruction)
    assert [text.split("at block (0, 0, 0), thread (0, 0, 0), in _Z4spinPVi, PTX line ")[1:] != []
            for text in said] == [True, True]


@pytest.mark.usefixtures("sysroot")  # skips where Debian's rustc-web is not installed
@pytest.mark.parametrize("output", ["ptx", "ltoir"])  # LTO-IR: the panic path inlined into the kernel
def test_bounds_checked_rust_kernels_compile_and_a_panicking_launch_ends_as_the_interpreters(caplog, output):
    art = ptxbridge.rust.compile(RUST_DIR / "idiomatic.rs", arch="sm_90", output=output, progress=False)
    compiled, interpreted = tiers(art)
    x, y = np.random.default_rng(44).random((2, 4096), dtype=np.float32)
    with caplog.at_level(logging.DEBUG, logger="ptxbridge.cpu"):
        got, want = both((compiled, interpreted), "axpy", lambda: [np.float32(1.5), x, y.copy()], grid=16,
                         block=256)
    same(got, want)  # bounds-checked indexing, compiled through: no thread panicked
    assert not [r for r in caplog.records if "left the compiled code" in r.getMessage()]
    said, ys = [], []
    for module in (compiled, interpreted):  # x one short: thread 4095, in the last block, panics
        ys.append(y.copy())
        with pytest.raises(KernelRaisedError) as raised:
            module.axpy(np.float32(1.5), x[:-1], ys[-1], grid=16, block=256)
        said.append(str(raised.value))
    assert said[0] == said[1] and "index out of bounds: the len is 4095 but the index is 4095" in said[0]
    assert ys[0].tobytes() == ys[1].tobytes()  # the blocks run compiled before it were undone, run again
    assert (ys[0][:-1] == np.float32(1.5) * x[:-1] + y[:-1]).all() and ys[0][-1] == y[-1]
