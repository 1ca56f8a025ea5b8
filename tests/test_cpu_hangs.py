"""No silent hangs on the CPU loader (issue 24): a loop that can never end is stopped within seconds,
naming the kernel, the thread and the line, on both tiers with the same words; a long kernel that
does work runs to the end and, with ``PTXBRIDGE_PROGRESS=1`` (or on a terminal), says how far it got
(the interpreter: a compiled launch is done before the first line).  CUDA C++ through NVRTC."""

from __future__ import annotations

import itertools
import re
import signal
import threading
import types

import numpy as np
import pytest

import ptxbridge
from ptxbridge import nvrtc
from ptxbridge.abi.errors import EmulatorError
from ptxbridge.loaders.emulator import watchdog
from ptxbridge.loaders.emulator.watchdog import FIRST_LOOK, INTERVAL

SOURCE = r"""
extern "C" __global__ void wait_for_host(volatile int* flag, int* out) {
    while (flag[0] == 0) { }
    out[threadIdx.x] = 1;
}
extern "C" __global__ void wait_for_thread0(int* flag, int* out) {
    volatile int* f = flag;
    if (threadIdx.x == 1) { while (f[0] == 0) { } }
    if (threadIdx.x == 0) { f[0] = 1; }
    out[threadIdx.x] = 1;
}
extern "C" __global__ void count_up(float* out, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; ++i) s += 1.0f;
    out[threadIdx.x] = s;
}
extern "C" __global__ void poll_a_counter(int* counter, int n) {  // a counter per block
    for (int i = 0; i < n; ++i) { if (threadIdx.x == 0) counter[blockIdx.x] += 1; }
}
"""


@pytest.fixture(scope="module")
def image() -> ptxbridge.Image:
    return ptxbridge.link([nvrtc.compile(SOURCE, options=["-lineinfo"])])


@pytest.fixture(scope="module", params=["compiled", "interp"])
def module(image, request) -> ptxbridge.Module:
    loaded = image.load("cpu", tier=request.param)
    if request.param == "compiled":  # really compiled: a fallback would test the interpreter twice
        tier = loaded.backend.compiled_tier
        assert all(tier.why_interpreted(k) is None for k in loaded.backend.program.entries)
    return loaded


def test_a_spin_on_a_flag_nobody_sets_is_stopped_naming_kernel_thread_and_line(module):
    flag, out = np.zeros(1, np.int32), np.zeros(64, np.int32)
    with pytest.raises(EmulatorError) as caught:
        module.wait_for_host(flag, out, grid=2, block=64)
    message = str(caught.value)
    assert re.match(r"kernel 'wait_for_host': stopped a loop that can never end: the threads came back to "
                    r"this instruction with every register as before and nothing stored in between", message)
    assert re.search(r"at block \(0, 0, 0\), thread \(0, 0, 0\), in wait_for_host, PTX line \d+ "
                     r"\(<source>:3\)", message), message
    assert "gave up after" not in message  # found, not the step limit (100 million steps)


def test_a_spin_on_another_thread_of_the_block_is_stopped_and_says_why(module):
    """The machine runs the lowest program counter first, so thread 0's store is never reached."""
    flag, out = np.zeros(1, np.int32), np.zeros(32, np.int32)
    stopped = (r"kernel 'wait_for_thread0': stopped a loop .* the CPU loader runs the lowest program counter "
               r"first.*thread \(1, 0, 0\), in wait_for_thread0, PTX line \d+ \(<source>:8\)")
    with pytest.raises(EmulatorError, match=stopped):
        module.wait_for_thread0(flag, out, grid=1, block=32)


WAITS = r"""
extern "C" __global__ void waits_for_no_one(int* out) {
    __shared__ unsigned long long bar;
    unsigned at = static_cast<unsigned>(__cvta_generic_to_shared(&bar));
    if (threadIdx.x == 0) asm volatile("mbarrier.init.shared.b64 [%0], %1;" :: "r"(at), "r"(64));
    __syncthreads();
    unsigned done = 0;
    while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n"
                     "  selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(at));
    out[threadIdx.x] = 1;
}
"""


def test_a_wait_on_an_mbarrier_phase_nobody_completes_is_stopped():
    """Every thread waits for a phase no thread arrives at: the failed waits yield to each other
    and come back with nothing changed, which is the watchdog's endless loop, not the step limit."""
    module = ptxbridge.link([nvrtc.compile(WAITS)]).load("cpu")
    with pytest.raises(EmulatorError, match=r"kernel 'waits_for_no_one': stopped a loop that can never end"):
        module.waits_for_no_one(np.zeros(64, np.int32), grid=1, block=64)


def test_long_kernels_that_work_run_to_the_end(module):
    """Past the first look and several more: a loop whose counter changes, and one that stores, are
    never stopped."""
    n = (FIRST_LOOK + 3 * INTERVAL) // 4  # each iteration is at least 4 steps
    out = np.zeros(32, np.float32)
    module.count_up(out, n, grid=1, block=32)
    assert (out == n).all()
    counter = np.zeros(1, np.int32)
    module.poll_a_counter(counter, FIRST_LOOK // 4, grid=1, block=32)
    assert counter[0] == FIRST_LOOK // 4


def test_a_long_interpreted_launch_shows_progress(image, monkeypatch, capsys):
    """With PTXBRIDGE_PROGRESS=1 a launch over three seconds prints blocks done (on a clock that
    moves three seconds per reading, so a fast machine shows it too)."""
    monkeypatch.setenv("PTXBRIDGE_PROGRESS", "1")
    readings = itertools.count()
    clock = types.SimpleNamespace(monotonic=lambda: watchdog.PROGRESS_AFTER * next(readings))
    monkeypatch.setattr(watchdog, "time", clock)
    n = (FIRST_LOOK + 3 * INTERVAL) // 4
    out = np.zeros(32, np.float32)
    image.load("cpu", tier="interp").count_up(out, n, grid=1, block=32)
    assert (out == n).all()
    err = capsys.readouterr().err
    assert re.search(r"ptxbridge CPU loader: kernel 'count_up': 0 of 1 blocks done \(\d+ s\)", err), err
    assert re.search(r"kernel 'count_up': 1 of 1 blocks done, finished after \d+ s", err), err


def test_no_progress_line_when_asked_not_to(module, monkeypatch, capsys):
    monkeypatch.setenv("PTXBRIDGE_PROGRESS", "0")
    flag, out = np.zeros(1, np.int32), np.zeros(64, np.int32)
    with pytest.raises(EmulatorError, match="stopped a loop"):
        module.wait_for_host(flag, out, grid=1, block=64)
    assert "ptxbridge CPU loader" not in capsys.readouterr().err


def test_ctrl_c_interrupts_a_long_compiled_launch(image):
    """Native code cannot take a signal: the compiled tier runs blocks in chunks and Python raises
    KeyboardInterrupt between two, so a launch that would take seconds (256 blocks, each adding
    2**20 to its counter one by one) stops after the blocks it is running (on one thread or more)."""
    module = image.load("cpu", tier="compiled")
    counter, n = np.zeros(256, np.int32), 1 << 20
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's, whatever ran before
    blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    main = threading.main_thread().ident  # to this thread: a library's thread may wait for SIGINT itself
    timer = threading.Timer(0.3, signal.pthread_kill, (main, signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            module.poll_a_counter(counter, n, grid=256, block=32)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    assert set(counter.tolist()) == {0, n}, counter  # whole blocks, some but not all
