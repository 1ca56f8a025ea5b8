"""The CPU loader's limits and failure contract: the watchdog, concurrent launches, vector
accesses checked whole, the shared-memory limit, and IEEE signed zeros in fused multiply-add."""

from __future__ import annotations

import threading
from fractions import Fraction

import numpy as np
import pytest
from _emulator import backend, elementwise, kernel_ptx, launch, ptr

import ptxbridge
from ptxbridge import nvrtc
from ptxbridge.abi.errors import ArgumentError, EmulatorError, MemoryAccessError
from ptxbridge.loaders import open_backend
from ptxbridge.loaders.emulator.backend import MAX_SHARED_BYTES
from ptxbridge.loaders.emulator.compiled.tier import _thread_indices as thread_indices

SPIN = r'''
extern "C" __global__ void spin(volatile int* flag) { while (flag[0] == 0) {} }
'''


def test_max_steps_travels_from_load_to_the_cpu_loader():
    m = ptxbridge.load([nvrtc.compile(SPIN)], "cpu", max_steps=500)
    with pytest.raises(EmulatorError, match=r"kernel 'spin': gave up after 500 interpreter steps"):
        m.spin(np.zeros(1, np.int32), grid=1, block=32)
    m.spin(np.ones(1, np.int32), grid=1, block=32)  # a kernel that ends is not stopped
    unlimited = ptxbridge.link([nvrtc.compile(SPIN)]).load("cpu", max_steps=None)
    assert unlimited.backend.max_steps is None
    with pytest.raises(ArgumentError, match="max_steps must be a positive int"):
        ptxbridge.link([nvrtc.compile(SPIN)]).load("cpu", max_steps=0)
    with pytest.raises(ArgumentError, match=r"max_steps: an option of the CPU loader; the GPU loader"):
        open_backend(unlimited.image, "cuda:0", max_steps=5)


GOOD_BAD = kernel_ptx(
    "ld.param.u64 %rd1, [out];\nmov.u32 %r1, %tid.x;\nmul.wide.u32 %rd2, %r1, 4;\nadd.s64 %rd3, %rd1, %rd2;\n"
    "st.global.u32 [%rd3], %r1;\nret;", regs=".reg .b64 %rd<4>; .reg .b32 %r<2>;", name="good") + \
    kernel_ptx("ld.param.u64 %rd1, [out];\nadd.s64 %rd1, %rd1, 1048576;\nst.global.u32 [%rd1], 7;\nret;",
               regs=".reg .b64 %rd<2>;", name="bad").split(".address_size 64")[1]


def _launch_from_eight_threads(be: object) -> tuple[list[str], list[np.ndarray]]:
    """Eight threads at once, the odd ones launching ``bad``: the errors they met and their outputs."""
    errors: list[str] = []
    outputs = [np.zeros(4096, np.uint32) for _ in range(8)]
    start = threading.Barrier(8)

    def work(index: int) -> None:
        out = outputs[index]
        start.wait()
        try:
            for _ in range(5):
                name = "bad" if index % 2 else "good"
                launch(be, name, [ptr("u32")], [out.ctypes.data], grid=1, block=1024 if name == "good" else 1,
                       arrays=[out])
        except MemoryAccessError as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors, outputs


def test_concurrent_launches_report_their_own_kernel_and_line():
    be = backend(GOOD_BAD)
    bad_line = GOOD_BAD.splitlines().index("st.global.u32 [%rd1], 7;") + 1
    for _ in range(10):  # each round's first launches of a block shape race to fill the tier's table
        thread_indices.cache_clear()
        errors, outputs = _launch_from_eight_threads(be)
        assert len(errors) == 4, errors
        for message in errors:
            assert "kernel 'bad'" in message and f"PTX line {bad_line}" in message and "good" not in message
        for index in range(0, 8, 2):
            np.testing.assert_array_equal(outputs[index][:1024], np.arange(1024))


def test_a_misaligned_vector_store_writes_none_of_its_elements():
    body = ("ld.param.u64 %rd1, [out];\nld.param.u64 %rd2, [at];\nadd.s64 %rd1, %rd1, %rd2;\n"
            "st.global.v4.u32 [%rd1], {1, 2, 3, 4};\nret;")
    be = backend(kernel_ptx(body, ".param .u64 out, .param .u64 at", ".reg .b64 %rd<3>;"))
    buf = np.zeros(8, np.uint32)  # 32 bytes; NumPy aligns the data to at least 16
    with pytest.raises(MemoryAccessError, match="misaligned 16-byte access"):
        launch(be, "k", [ptr("u32"), ptr("u64")], [buf.ctypes.data, 24], grid=1, block=1, arrays=[buf])
    np.testing.assert_array_equal(buf, 0)  # the in-bounds lanes at 24..31 were not written first
    with pytest.raises(MemoryAccessError, match="outside every buffer"):
        launch(be, "k", [ptr("u32"), ptr("u64")], [buf.ctypes.data, 32], grid=1, block=1, arrays=[buf])
    launch(be, "k", [ptr("u32"), ptr("u64")], [buf.ctypes.data, 16], grid=1, block=1, arrays=[buf])
    np.testing.assert_array_equal(buf, [0, 0, 0, 0, 1, 2, 3, 4])


def test_shared_memory_beyond_the_device_limit_is_refused_before_launch():
    """Refused every time (a shape that passed is remembered as checked; one that failed is not)."""
    be = backend(kernel_ptx("ret;", ".param .u64 out"))
    limit = rf"k: a block may have at most {MAX_SHARED_BYTES} bytes of shared memory \(sm_90\)"
    for _ in range(2):
        with pytest.raises(ArgumentError, match=limit):
            launch(be, "k", [ptr("u8")], [0], grid=1, block=1, shared=1 << 40)
        launch(be, "k", [ptr("u8")], [0], grid=1, block=1, shared=MAX_SHARED_BYTES)


@pytest.mark.parametrize(("instruction", "dtype"), [
    ("fma.rn.f64 %d, %a, %b, %c;", np.float64),
    ("fma.rn.f32 %d, %a, %b, %c;", np.float32),
    ("fma.rn.f16 %d, %a, %b, %c;", np.float16),
    ("fma.rn.ftz.f32 %d, %a, %b, %c;", np.float32),
])
def test_fma_keeps_the_sign_of_an_exact_zero(instruction, dtype):
    zeros, ones = np.array([-0.0, -0.0, 0.0, 0.0], dtype), np.array([1, -1, 1, -1], dtype)
    addends = np.array([-0.0, 0.0, -0.0, -0.0], dtype)
    got = elementwise(instruction, dtype, zeros, ones, addends)
    # (-0)(1) + -0 = -0; (-0)(-1) + 0 = +0; (+0)(1) + -0 = +0; (+0)(-1) + -0 = -0
    assert np.signbit(got).tolist() == [True, False, False, True]
    assert (got == 0).all()


def test_an_exact_zero_sum_is_negative_only_when_rounding_down():
    a, b = np.array([3.0, 3.0]), np.array([1.0, 1.0])
    c = np.array([-3.0, -3.0])
    assert not np.signbit(elementwise("fma.rn.f64 %d, %a, %b, %c;", np.float64, a, b, c)).any()
    assert np.signbit(elementwise("fma.rm.f64 %d, %a, %b, %c;", np.float64, a, b, c)).all()
    assert np.signbit(elementwise("fma.rm.f32 %d, %a, %b, %c;", np.float32, *(x.astype(np.float32)
                                                                               for x in (a, b, c)))).all()


def test_fma_f64_of_a_few_threads_of_a_divergent_group():
    # 8 of 64 threads run it: computed on their elements only, the others keep their register
    rng = np.random.default_rng(8)
    a, b, c = (rng.standard_normal(64) for _ in range(3))
    got = elementwise("setp.lt.u32 %q, %t, 8; @%q fma.rn.f64 %d, %a, %b, %c;", np.float64, a, b, c)
    want = [float(Fraction(x) * Fraction(y) + Fraction(z))  # exact, then rounded once
            for x, y, z in zip(a[:8], b[:8], c[:8], strict=True)]
    assert got[:8].tolist() == want
    assert (got[8:] == 0).all()


@pytest.mark.parametrize("grid", [(2**31, 1, 1), (1, 65536, 1), (1, 1, 65536)])
def test_a_grid_past_cudas_limits_is_refused_before_it_runs(grid):
    be = backend(GOOD_BAD)
    out = np.zeros(1024, np.uint32)
    with pytest.raises(ArgumentError, match=r"good: a grid has at most \(2147483647, 65535, 65535\) blocks"):
        launch(be, "good", [ptr("u32")], [out.ctypes.data], grid=grid, block=32, arrays=[out])
    assert not out.any()
