"""The CPU loader as the sanitizer people use without a GPU (issue 24).

Memory errors name the argument an access overran, by how much, and the source line; an access is
checked against its own argument's extent (a read past a short view inside another argument's memory
is caught); ``sanitize="racecheck"`` / ``"initcheck"`` find shared-memory hazards and reads of memory
no thread wrote.  Kernels are CUDA C++ through NVRTC and numba, written the way users write them.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from numba import cuda, float32

import ptxbridge
import ptxbridge.numba as pnumba
from ptxbridge import nvrtc
from ptxbridge.abi.errors import ArgumentError, MemoryAccessError, SanitizerError
from ptxbridge.loaders import open_backend
from ptxbridge.loaders.emulator import EmulatorBackend
from ptxbridge.loaders.emulator.sanitize import Sanitize

MEMORY = r"""
struct Span { const float* data; int n; };
extern "C" __global__ void add(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] + y[i];
}
extern "C" __global__ void shift(const float* x, float* out, int by, int n) {
    int i = threadIdx.x;
    if (i < n) out[i] = x[i + by];
}
extern "C" __global__ void gather(const float* x, const int* index, float* out, int n) {
    int i = threadIdx.x;
    if (i < n) out[i] = x[index[i]];
}
extern "C" __global__ void first_of(Span s, float* out) { out[threadIdx.x] = s.data[threadIdx.x]; }
"""


@pytest.fixture(scope="module")
def memory() -> ptxbridge.Module:
    return ptxbridge.load([nvrtc.compile(MEMORY, options=["-lineinfo"])], device="cpu")


def test_a_read_past_a_short_view_inside_another_arguments_memory_is_caught(memory):
    """``add(x, x[:10], out)`` reads ``y`` past its tenth element, which lies inside ``x``: the bytes
    are the kernel's to read through ``x``, not through ``y``."""
    x, out = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    with pytest.raises(MemoryAccessError) as caught:
        memory.add(x, x[:10], out, 64, grid=1, block=64)
    message = str(caught.value)
    assert re.match(r"kernel 'add': a 4-byte read overruns argument 'y' \(10 float32, 40 bytes at 0x\w+\): "
                    r"just past its end \(element 10; it has 10\)", message), message
    assert "thread (10, 0, 0)" in message and re.search(r"PTX line \d+ \(<source>:5\): `ld\.global", message)
    assert out[10:].max() == 0  # stopped before the faulting thread's store
    memory.add(x[:10], x[10:20], out[:10], 10, grid=1, block=64)  # in bounds: no report
    np.testing.assert_array_equal(out[:10], x[:10] + x[10:20])


def test_each_argument_kind_is_named_with_how_far_it_was_missed(memory):
    x, out = np.arange(32, dtype=np.float32), np.zeros(32, np.float32)
    with pytest.raises(MemoryAccessError, match=r"a 4-byte write overruns argument 'out' \(16 float32, 64 "
                                                r"bytes"
                                                r" at 0x\w+\): just past its end \(element 16; it has 16\)"):
        memory.add(x, x, out[:16], 32, grid=1, block=32)
    with pytest.raises(MemoryAccessError, match=r"read overruns argument 'x' \(32 float32, 128 bytes at "
                                                r"0x\w+\): "
                                                r"12 bytes before its start \(element -3; it has 32\)"):
        memory.shift(x, out, -3, 32, grid=1, block=32)
    index = np.arange(32, dtype=np.int32)
    index[7] = 1000
    with pytest.raises(MemoryAccessError, match=r"overruns argument 'x' .*: 3872 bytes past its end "
                                                r"\(element 1000; it has 32\).*thread \(7, 0, 0\)"):
        memory.gather(x, index, out, 32, grid=1, block=32)
    with pytest.raises(MemoryAccessError, match=r"a 4-byte read overruns argument 's' \(8 float32, 32 bytes"):
        memory.first_of({"data": x[:8], "n": 8}, out, grid=1, block=9)  # a pointer inside a struct
    memory.first_of({"data": x[:8], "n": 8}, out, grid=1, block=8)


def test_numba_arrays_are_named_too():
    def over(x, out):
        i = cuda.threadIdx.x
        out[i] = x[i + 1]

    module = ptxbridge.load([pnumba.compile(over, "void(float32[:], float32[:])")], device="cpu")
    x = np.arange(64, dtype=np.float32)
    with pytest.raises(MemoryAccessError, match=r"kernel 'over': a 4-byte read overruns argument 'x' \(64 "
                                                r"float32,"
                                                r" 256 bytes at 0x\w+\): just past its end \(element 64; it "
                                                r"has 64\)"):
        module.over(x, np.zeros(64, np.float32), grid=1, block=64)


RACES = r"""
extern "C" __global__ void reverse(const float* x, float* y, bool sync) {
    __shared__ float tile[64];
    int t = threadIdx.x;
    tile[t] = x[t];
    if (sync) __syncthreads();
    y[t] = tile[63 - t];
}
extern "C" __global__ void last_writer_wins(float* y) {
    __shared__ float slot;
    slot = threadIdx.x;
    __syncthreads();
    y[threadIdx.x] = slot;
}
extern "C" __global__ void everyone_sets_the_flag(float* y) {
    __shared__ int flag;
    if (threadIdx.x == 0) flag = 0;
    __syncthreads();
    flag = 1;
    __syncthreads();
    y[threadIdx.x] = flag;
}
extern "C" __global__ void warp_sum(const float* x, float* y, bool sync) {
    __shared__ float s[64];
    int t = threadIdx.x;
    s[t] = x[t];
    __syncthreads();
    if (t < 32) {
        for (int step = 32; step > 0; step /= 2) {
            float v = s[t] + (t < step ? s[t + step] : 0.0f);
            if (sync) __syncwarp();
            s[t] = v;
            if (sync) __syncwarp();
        }
    }
    if (t == 0) y[0] = s[0];
}
"""


@pytest.fixture(scope="module")
def races() -> ptxbridge.Module:
    return ptxbridge.load([nvrtc.compile(RACES, options=["-lineinfo"])], device="cpu", sanitize="racecheck")


def test_racecheck_read_after_write_names_both_threads_both_lines_and_the_variable(races):
    x, y = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    with pytest.raises(SanitizerError) as caught:
        races.reverse(x, y, False, grid=2, block=64)
    message, error = str(caught.value), caught.value
    assert error.tool == "racecheck" and isinstance(error, ptxbridge.EmulatorError)
    assert re.match(r"kernel 'reverse': racecheck: read-after-write hazard on 4 bytes of shared memory at "
                    r"offset \d+ \(variable 'reverse::tile' \+ 252\): block \(0, 0, 0\), thread \(0, 0, 0\) "
                    r"reads it in reverse, PTX line \d+ \(<source>:7\): `ld\.shared\.f32 .*`, and block "
                    r"\(0, 0, 0\), thread \(63, 0, 0\) wrote it in reverse, PTX line \d+ \(<source>:5\): "
                    r"`st\.shared\.f32 ", message), message
    races.reverse(x, y, True, grid=2, block=64)  # with the barrier: no report, and the right answer
    np.testing.assert_array_equal(y, x[::-1])


def test_racecheck_write_write_and_the_same_value_rule(races):
    y = np.zeros(64, np.float32)
    with pytest.raises(SanitizerError, match=r"write-after-write hazard .*variable 'last_writer_wins::slot' "
                                             r"\+ 0"
                                             r".*thread \(1, 0, 0\) writes it .*thread \(0, 0, 0\) wrote it"):
        races.last_writer_wins(y, grid=1, block=64)
    races.everyone_sets_the_flag(y, grid=1, block=64)  # all write 1 over 0 ... then 1 over 1: benign
    assert (y == 1).all()


def test_racecheck_finds_a_race_a_missing_syncwarp_hides(races):
    """Warp-synchronous code without __syncwarp: lanes of one warp read what others write in the
    same loop step (a race since Volta's independent thread scheduling), though the lockstep
    interpreter gets the sum right."""
    x, y = np.ones(64, np.float32), np.zeros(1, np.float32)
    with pytest.raises(SanitizerError, match=r"read-after-write hazard on 4 bytes of shared memory "
                                             r".*'warp_sum::s'"
                                             r" \+ 64\): block \(0, 0, 0\), thread \(0, 0, 0\) reads it "
                                             r".*<source>:"
                                             r"30\).*thread \(16, 0, 0\) wrote it .*<source>:32\)"):
        races.warp_sum(x, y, False, grid=1, block=64)
    races.warp_sum(x, y, True, grid=1, block=64)
    assert y[0] == 64


def test_racecheck_in_a_numba_kernel():
    def racy(x, out):
        s = cuda.shared.array(64, float32)
        t = cuda.threadIdx.x
        s[t] = x[t]
        out[t] = s[63 - t]

    def fixed(x, out):
        s = cuda.shared.array(64, float32)
        t = cuda.threadIdx.x
        s[t] = x[t]
        cuda.syncthreads()
        out[t] = s[63 - t]

    arts = [pnumba.compile(f, "void(float32[:], float32[:])") for f in (racy, fixed)]
    module = ptxbridge.load(arts, device="cpu", sanitize="racecheck")
    x, out = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    with pytest.raises(SanitizerError, match=r"kernel 'racy': racecheck: read-after-write"):
        module.racy(x, out, grid=1, block=64)
    module.fixed(x, out, grid=1, block=64)
    np.testing.assert_array_equal(out, x[::-1])


UNINITIALIZED = r"""
extern "C" __global__ void half_filled(float* y) {
    __shared__ float acc[64];
    if (threadIdx.x < 32) acc[threadIdx.x] = 1.0f;
    __syncthreads();
    y[threadIdx.x] = acc[threadIdx.x];
}
extern "C" __global__ void count(int* y) {
    __shared__ int total;
    atomicAdd(&total, 1);
    __syncthreads();
    y[threadIdx.x] = total;
}
extern "C" __global__ void count_from_zero(int* y) {
    __shared__ int total;
    if (threadIdx.x == 0) total = 0;
    __syncthreads();
    atomicAdd(&total, 1);
    __syncthreads();
    y[threadIdx.x] = total;
}
extern "C" __global__ void heap(float* y, bool fill) {
    float* scratch = (float*)malloc(4 * sizeof(float));
    if (fill) for (int i = 0; i < 4; ++i) scratch[i] = i;
    y[threadIdx.x] = scratch[threadIdx.x % 4];
    free(scratch);
}
extern "C" __global__ void local_table(float* y, int n) {
    float table[16];
    for (int i = 0; i < n; ++i) table[i] = i;
    y[threadIdx.x] = table[threadIdx.x % 16];
}
"""


@pytest.fixture(scope="module")
def uninitialized() -> ptxbridge.Module:
    return ptxbridge.load([nvrtc.compile(UNINITIALIZED, options=["-lineinfo"])], device="cpu",
                          sanitize="initcheck")


def test_initcheck_shared_memory_no_thread_wrote(uninitialized):
    y = np.zeros(64, np.float32)
    with pytest.raises(SanitizerError) as caught:
        uninitialized.half_filled(y, grid=1, block=64)
    assert caught.value.tool == "initcheck"
    assert re.match(r"kernel 'half_filled': initcheck: a 4-byte read of shared memory at offset \d+ "
                    r"\(variable "
                    r"'half_filled::acc' \+ 128\), which no thread wrote, by block \(0, 0, 0\), thread "
                    r"\(32, 0, 0\)"
                    r" in half_filled, PTX line \d+ \(<source>:6\)", str(caught.value)), str(caught.value)
    counts = np.zeros(64, np.int32)
    with pytest.raises(SanitizerError, match=r"initcheck: an atomic on shared memory .*'count::total' \+ 0"):
        uninitialized.count(counts, grid=1, block=64)
    uninitialized.count_from_zero(counts, grid=1, block=64)
    assert (counts == 64).all()


def test_initcheck_heap_and_local_memory(uninitialized):
    y = np.zeros(8, np.float32)
    with pytest.raises(SanitizerError, match=r"initcheck: a 4-byte read of a device-heap \(malloc\) block"):
        uninitialized.heap(y, False, grid=1, block=8)
    uninitialized.heap(y, True, grid=1, block=8)
    np.testing.assert_array_equal(y, np.arange(8) % 4)
    with pytest.raises(SanitizerError, match=r"initcheck: a 4-byte read of the thread's local memory at "
                                             r"offset "
                                             r"\d+, which no thread wrote, by block \(0, 0, 0\), thread "
                                             r"\(8, 0, 0\)"):
        uninitialized.local_table(y, 8, grid=1, block=16)
    table = np.zeros(16, np.float32)
    uninitialized.local_table(table, 16, grid=1, block=16)
    np.testing.assert_array_equal(table, np.arange(16))


def test_sanitize_option_is_checked_and_reaches_the_loader():
    art = nvrtc.compile(RACES)
    image = ptxbridge.link([art])
    both = image.load("cpu", sanitize="racecheck,initcheck").backend
    assert both.sanitize == Sanitize(racecheck=True, initcheck=True) and both.sanitize.interpreted
    plain = image.load("cpu", sanitize="memcheck").backend
    assert plain.sanitize == Sanitize() and not plain.sanitize.interpreted
    assert EmulatorBackend(image, sanitize=["initcheck"]).sanitize == Sanitize(initcheck=True)
    with pytest.raises(ArgumentError, match=r"sanitize must name tools from memcheck, racecheck, initcheck"):
        image.load("cpu", sanitize="leakcheck")
    with pytest.raises(ArgumentError, match=r"sanitize='racecheck': the CPU loader's checks; on cuda:0 run "
                                            r"the "
                                            r"program under compute-sanitizer"):
        open_backend(image, "cuda:0", sanitize="racecheck")


def test_nothing_is_spent_when_no_tool_is_on():
    """Without a tool the program's closures are the unsanitized ones: no access is wrapped."""
    image = ptxbridge.link([nvrtc.compile(RACES)])
    plain = EmulatorBackend(image).program.functions["reverse"].steps
    watched = EmulatorBackend(image, sanitize="racecheck").program.functions["reverse"].steps
    names = [getattr(s.run, "__name__", "") for s in plain]
    assert "checked" not in names and names.count("checked") == 0
    assert [getattr(s.run, "__name__", "") for s in watched].count("checked") >= 3
