"""The CPU loader's compiled tier against the interpreter: same outputs bit for bit, same reports.

Each kernel is compiled by the real compilers (NVRTC, numba-cuda) and launched on both tiers of
the CPU loader (``tier="compiled"`` / ``"interp"``, also ``$PTXBRIDGE_CPU_TIER``); the test
checks that the compiled tier really compiled it, so a silent fallback cannot pass for a match.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from _emulator import backend, kernel_ptx, launch, ptr, scalar, stored_per_thread
from _tiers import both, cuda_tiers, ptx_both, same, tiers
from hypothesis import given, settings
from hypothesis import strategies as st

import ptxbridge
from ptxbridge import nvrtc
from ptxbridge.abi.errors import ArgumentError, EmulatorError, MemoryAccessError
from ptxbridge.loaders.emulator.compiled import blocks as compiled_blocks
from ptxbridge.loaders.emulator.compiled import tier as compiled_tier
from ptxbridge.loaders.emulator.compiled.emit import Emitter
from ptxbridge.loaders.emulator.compiled.jit import has_permutes

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import emulator_kernels as fx  # the benchmark's CUDA C++ kernels: matmul, histogram, Collatz

REDUCE = r"""
extern "C" __global__ void reduce(const float* x, float* out, int n) {
  __shared__ float s[128];
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  s[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) { if (t < k) s[t] += s[t + k]; __syncthreads(); }
  if (t == 0) out[blockIdx.x] = s[0];
}
"""
# integer and float corners PTX defines and C leaves undefined: shifts past the width, division by
# zero and INT_MIN / -1 (PTX's div/rem), float -> int conversion of NaN and out-of-range values
CORNERS = r"""
extern "C" __global__ void corners(const int* a, const int* b, const float* f, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int x = a[i], y = b[i]; unsigned ux = x, uy = y;
  int q, r; unsigned uq, ur, sl, sr; int sa;
  asm("div.s32 %0, %1, %2;" : "=r"(q) : "r"(x), "r"(y));
  asm("rem.s32 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
  asm("div.u32 %0, %1, %2;" : "=r"(uq) : "r"(ux), "r"(uy));
  asm("rem.u32 %0, %1, %2;" : "=r"(ur) : "r"(ux), "r"(uy));
  asm("shl.b32 %0, %1, %2;" : "=r"(sl) : "r"(ux), "r"(uy & 63));
  asm("shr.u32 %0, %1, %2;" : "=r"(sr) : "r"(ux), "r"(uy & 63));
  asm("shr.s32 %0, %1, %2;" : "=r"(sa) : "r"(x), "r"(uy & 63));
  out[9 * i + 0] = q; out[9 * i + 1] = r; out[9 * i + 2] = uq; out[9 * i + 3] = ur;
  out[9 * i + 4] = sl; out[9 * i + 5] = sr; out[9 * i + 6] = sa;
  out[9 * i + 7] = (int)f[i]; out[9 * i + 8] = (int)(unsigned short)fminf(f[i], (float)y);
}
"""
CORNER_INTS = np.array([0, 1, -1, 2, 7, -7, 31, 32, 33, 63, 64, 2**31 - 1, -(2**31), 12345, -99999], np.int32)
CORNER_FLOATS = np.array(
    [
        0.0,
        -0.0,
        1.5,
        -1.5,
        2.5,
        3e9,
        -3e9,
        np.inf,
        -np.inf,
        np.nan,
        65535.7,
        1e-40,
        -2147483648.0,
        2147483520.0,
        0.49999997,
    ],
    np.float32,
)


@pytest.fixture(scope="module", autouse=True, params=["blocks in order", "blocks spread over threads"])
def block_order(request):
    """Every test of this module twice: blocks in order on one thread, then with independent blocks
    handed to three threads from the fourth block on (a launch spreads only when the blocks left
    are work enough, which these small launches are not)."""
    spread = request.param != "blocks in order"
    saved = os.environ.get("PTXBRIDGE_CPU_THREADS"), compiled_blocks._SHARE_SECONDS
    os.environ["PTXBRIDGE_CPU_THREADS"] = "3" if spread else "1"
    compiled_blocks._SHARE_SECONDS = 0.0
    yield spread
    if saved[0] is None:
        os.environ.pop("PTXBRIDGE_CPU_THREADS")
    else:
        os.environ["PTXBRIDGE_CPU_THREADS"] = saved[0]
    compiled_blocks._SHARE_SECONDS = saved[1]


@pytest.fixture(params=[False, True], ids=["blended", "masked"])
def moves(request, monkeypatch):
    """Both ways the compiled tier gives 0 in a load's lanes off a warp's mask: a select on the path
    of a warp with lanes off it (AVX2 blends), and AVX-512's masked move (whose IR runs anywhere)."""
    monkeypatch.setattr(compiled_tier, "has_masked_moves", lambda: request.param)
    return request.param


def test_tiled_matmul_with_barriers_is_bit_identical(moves):
    n = 64
    rng = np.random.default_rng(1)
    a, b = rng.random((n, n), np.float32), rng.random((n, n), np.float32)
    got, want = both(
        cuda_tiers(fx.MATMUL),
        "matmul",
        lambda: [a, b, np.zeros((n, n), np.float32), n],
        grid=(n // 16, n // 16),
        block=(16, 16),
    )
    same(got, want)
    assert np.allclose(got[2], a @ b, rtol=1e-5)


def test_histogram_with_shared_and_global_atomics_is_exact():
    data = np.random.default_rng(2).integers(0, 256, 50_000, dtype=np.uint8)
    got, want = both(
        cuda_tiers(fx.HISTOGRAM),
        "histogram",
        lambda: [data, np.zeros(256, np.uint32), data.size],
        grid=13,
        block=192,
    )
    same(got, want)
    assert (got[1] == np.bincount(data, minlength=256)).all()


# atomics whose old value the kernel reads, each thread's once in straight-line code: both tiers
# apply a launch's atomics in thread order (blocks in order, warps in order, lanes in order), so
# the slots handed out, the old values and the float sums' roundings agree bit for bit
RETURNING_ATOMICS = r"""
extern "C" __global__ void returning(const unsigned* keys, const float* x, const double* w, int* counter,
                                     int* order, unsigned* wraps, unsigned* old, int* swapped,
                                     float* total, double* weight, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned k = keys[i] & 7u;
  order[atomicAdd(counter, 1)] = i;
  old[5 * i + 0] = atomicInc(&wraps[k], 5u);
  old[5 * i + 1] = atomicDec(&wraps[8 + k], 3u);
  old[5 * i + 2] = atomicExch(&wraps[16 + k], (unsigned)i);
  old[5 * i + 3] = atomicMax(&wraps[24 + k], keys[i]);
  old[5 * i + 4] = atomicOr(&wraps[32 + k], 1u << (i & 31));
  swapped[i] = atomicCAS(&swapped[n + (int)k], (int)(keys[i] >> 29), i);
  atomicAdd(total, x[i]);
  atomicAdd(&total[1 + k], x[i] * 3.0f);
  weight[i] = atomicAdd(&weight[n], w[i]);
  __shared__ int seen;
  if (threadIdx.x == 0) seen = 0;
  __syncthreads();
  atomicAdd(&order[n + blockIdx.x], atomicAdd(&seen, 1) * 10 + (int)k);
}
"""


def test_atomics_whose_old_value_is_read_match_the_interpreter_bit_for_bit():
    n, rng = 1000, np.random.default_rng(11)
    keys = rng.integers(0, 2**32, n, dtype=np.uint32)
    x, w = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n)
    got, want = both(
        cuda_tiers(RETURNING_ATOMICS),
        "returning",
        lambda: [keys, x, np.r_[w, 0.0], np.zeros(1, np.int32), np.zeros(n + 8, np.int32),
                 np.zeros(40, np.uint32), np.zeros(5 * n, np.uint32), np.zeros(n + 8, np.int32),
                 np.zeros(9, np.float32), np.zeros(n + 1, np.float64), n],
        grid=8,
        block=128,
    )
    same(got, want)
    assert (got[4][:n] == np.arange(n)).all()  # the slots in thread order
    assert got[8][0] == np.add.accumulate(x)[-1]  # sequential float sums, thread by thread
    assert got[9][n] == np.add.accumulate(w)[-1]  # sequential double sums, thread by thread


def test_numba_float_atomic_max_and_min_loops_of_compare_and_swap_match_the_interpreter():
    """numba lowers ``cuda.atomic.max``/``min`` of floats to a loop of ``atom.cas`` on their bits
    (a lane retries while another one's swap came first)."""
    numba = pytest.importorskip("ptxbridge.numba")
    from numba import cuda

    def extremes(x, found):
        i = cuda.grid(1)
        if i < x.size:
            cuda.atomic.max(found, 0, abs(x[i]))
            cuda.atomic.min(found, 1 + i % 4, x[i])

    signature = "void(float32[::1], float32[::1])"
    modules = tiers(numba.compile(extremes, signature, arch="sm_90", name="extremes"))
    x = np.random.default_rng(12).standard_normal(3000).astype(np.float32)
    got, want = both(modules, "extremes", lambda: [x, np.r_[0.0, [np.inf] * 4].astype(np.float32)],
                     grid=12, block=256)
    same(got, want)
    assert got[1][0] == np.abs(x).max()
    assert (got[1][1:] == [x[k::4].min() for k in range(4)]).all()


def test_divergent_collatz_loop_and_early_return_match():
    start = np.arange(1, 3001, dtype=np.uint32)
    got, want = both(
        cuda_tiers(fx.COLLATZ), "collatz", lambda: [start, np.zeros_like(start), start.size],
        grid=12, block=256,
    )  # 72 threads past the end return at once
    same(got, want)
    assert got[1][26] == 111  # 27 takes 111 steps


def test_tree_reduction_with_a_barrier_in_a_loop_matches():
    x = np.random.default_rng(3).random(1000, np.float32)
    got, want = both(
        cuda_tiers(REDUCE), "reduce", lambda: [x, np.zeros(8, np.float32), x.size], grid=8, block=128
    )
    same(got, want)


def test_ptx_corner_cases_of_integer_and_conversion_semantics():
    a = np.repeat(CORNER_INTS, len(CORNER_INTS))
    b = np.tile(CORNER_INTS, len(CORNER_INTS))
    f = np.resize(CORNER_FLOATS, a.size)
    got, want = both(
        cuda_tiers(CORNERS),
        "corners",
        lambda: [a, b, f, np.zeros(9 * a.size, np.int32), a.size],
        grid=-(-a.size // 64),
        block=64,
    )
    same(got, want)
    out = got[3].reshape(-1, 9)
    zero = b == 0
    assert (out[zero, 0] == -1).all() and (out[zero, 1] == a[zero]).all()  # PTX: x / 0 = ~0, x % 0 = x


def test_numba_saxpy_and_matmul_are_bit_identical():
    numba = pytest.importorskip("ptxbridge.numba")
    from numba import cuda, float32

    def saxpy(a, x, y, out):
        i = cuda.grid(1)
        if i < x.size:
            out[i] = a * x[i] + y[i]

    def matmul(a, b, c):
        sa = cuda.shared.array((16, 16), float32)
        sb = cuda.shared.array((16, 16), float32)
        x, y = cuda.grid(2)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        tmp = float32(0.0)
        for t in range(a.shape[1] // 16):
            sa[ty, tx] = a[y, t * 16 + tx]
            sb[ty, tx] = b[t * 16 + ty, x]
            cuda.syncthreads()
            for k in range(16):
                tmp += sa[ty, k] * sb[k, tx]
            cuda.syncthreads()
        c[y, x] = tmp

    vec = "void(float32, float32[::1], float32[::1], float32[::1])"
    mat = "void(float32[:, ::1], float32[:, ::1], float32[:, ::1])"
    modules = tiers(
        numba.compile(saxpy, vec, arch="sm_90", name="saxpy"),
        numba.compile(matmul, mat, arch="sm_90", name="matmul"),
    )
    rng = np.random.default_rng(4)
    x, y = rng.random(5000, np.float32), rng.random(5000, np.float32)
    same(*both(modules, "saxpy", lambda: [np.float32(2.5), x, y, np.zeros_like(x)], grid=20, block=256))
    a, b = rng.random((48, 48), np.float32), rng.random((48, 48), np.float32)
    same(
        *both(modules, "matmul", lambda: [a, b, np.zeros((48, 48), np.float32)], grid=(3, 3), block=(16, 16))
    )


# accesses through a pointer parameter, checked against that argument's own extent: four loads
# through one register (the hoisted check), an atomic whose old value is unused, a plain store
VIEWS = r"""
extern "C" __global__ void sum4(const float* x, const float* all, float* out) {
  int i = threadIdx.x;
  out[i] = x[4 * i] + x[4 * i + 1] + x[4 * i + 2] + x[4 * i + 3] + all[i];
}
extern "C" __global__ void bins(const int* keys, unsigned* counts, const unsigned* all) {
  int i = threadIdx.x;
  atomicAdd(&counts[keys[i]], all[0] + 1u);
}
extern "C" __global__ void fill(float* out, const float* all, int n) {
  int i = threadIdx.x;
  if (i < n) out[i] = all[0];
}
"""


def _reports(modules, kernel, make, **launch_options):
    """The MemoryAccessError text of each tier for one launch (fresh arrays from ``make()``)."""
    messages = []
    for module in modules:
        with pytest.raises(MemoryAccessError) as raised:
            getattr(module, kernel)(*make(), **launch_options)
        messages.append(str(raised.value))
    assert modules[0].backend.compiled_tier.why_interpreted(kernel) is None
    return messages


def test_an_access_past_a_short_view_inside_another_argument_is_caught_with_the_interpreters_report():
    """The bytes past each short view belong to ``all`` (the view's own tensor): in every buffer the
    kernel can reach, outside the argument the address came from."""
    modules = cuda_tiers(VIEWS)
    whole = np.arange(256, dtype=np.float32)
    sums = _reports(modules, "sum4", lambda: [whole[:64], whole, np.zeros(32, np.float32)], grid=1, block=32)
    assert sums[0] == sums[1]
    assert re.match(r"kernel 'sum4': a 4-byte read overruns argument 'x' \(64 float32, 256 bytes at 0x\w+\): "
                    r"just past its end \(element 64; it has 64\).*thread \(16, 0, 0\)", sums[0]), sums[0]
    counts = np.zeros(64, np.uint32)
    keys = np.arange(32, dtype=np.int32)
    atomics = _reports(modules, "bins", lambda: [keys, counts[:16], counts], grid=1, block=32)
    assert atomics[0] == atomics[1]
    assert re.match(r"kernel 'bins': a 4-byte write overruns argument 'counts' \(16 uint32, 64 bytes at "
                    r"0x\w+\): just past its end \(element 16; it has 16\)", atomics[0]), atomics[0]
    stores = _reports(modules, "fill", lambda: [whole[:8], whole, 32], grid=1, block=32)
    assert stores[0] == stores[1] and "a 4-byte write overruns argument 'out' (8 float32" in stores[0]
    out = np.zeros(32, np.float32)
    modules[0].fill(out[:8], out, 8, grid=1, block=32)  # within its view: no report
    assert (out[:8] == 0).all() and modules[0].backend.compiled_tier.why_interpreted("fill") is None



def test_a_launch_over_a_short_view_after_one_over_the_whole_tensor_is_still_checked():
    """The last launch passes the ones' before parameters (the view starts where the tensor does,
    the output is the same array) and has their layout (the tier reuses their memory): nothing
    they checked may let its overrun through, and each launch counts its own steps."""
    modules = cuda_tiers(VIEWS)
    whole, out = np.arange(256, dtype=np.float32), np.zeros(32, np.float32)
    for module in modules:
        for _ in range(3):
            module.sum4(whole, whole, out, grid=1, block=32)
    np.testing.assert_array_equal(out, whole.reshape(-1, 4)[:32].sum(axis=1) + whole[:32])
    assert modules[0].backend.thread_instructions == modules[1].backend.thread_instructions
    sums = _reports(modules, "sum4", lambda: [whole[:64], whole, out], grid=1, block=32)
    assert sums[0] == sums[1] and "overruns argument 'x' (64 float32" in sums[0]


OOB = kernel_ptx(
    """
mov.u32 %r1, %tid.x;
ld.param.u64 %rd1, [out];
mul.wide.u32 %rd2, %r1, 4;
add.s64 %rd3, %rd1, %rd2;
st.global.u32 [%rd3], %r1;
ret;""",
    regs=".reg .b32 %r<2>;\n.reg .b64 %rd<4>;",
)


def test_an_out_of_bounds_store_gives_the_interpreters_report():
    messages = []
    out = np.zeros(40, np.uint32)  # one buffer: the report names its address
    for tier in ("compiled", "interp"):
        be = backend(OOB, tier=tier)
        with pytest.raises(MemoryAccessError) as raised:
            launch(be, "k", [ptr("u32")], [out.ctypes.data], grid=1, block=64, arrays=[out])
        messages.append(str(raised.value))
    assert messages[0] == messages[1]
    assert "thread (40, 0, 0)" in messages[0] and "PTX line" in messages[0]


def test_the_watchdog_stops_a_spinning_compiled_kernel():
    be = backend(kernel_ptx("LOOP:\nbra.uni LOOP;"), max_steps=1000, tier="compiled")
    with pytest.raises(EmulatorError, match="gave up after 1000 interpreter steps"):
        launch(be, "k", [ptr("u32")], [0], grid=1, block=32)
    assert be.compiled_tier.why_interpreted("k") is None


# blocks 3 and 6 spin (on the GPU too): a run in order stops at block 3, and so must a spread one
# that meets both at once, on two threads (blocks 0, then 1-2 alone, then 3-4, 5-6 and 7 on three)
SPIN_IN_TWO_BLOCKS = kernel_ptx(
    """
mov.u32 %r1, %ctaid.x;
setp.eq.u32 %p1, %r1, 3;
setp.eq.u32 %p2, %r1, 6;
or.pred %p3, %p1, %p2;
@%p3 bra LOOP;
ret;
LOOP:
bra.uni LOOP;""",
    regs=".reg .b32 %r<2>;\n.reg .pred %p<4>;",
)


# %r1 lives across the barrier (in the warp's state) and is read there before this launch wrote it
# where `mode` is 0: it holds 0 then, as every register a frame starts with
STALE_ACROSS_A_BARRIER = kernel_ptx(
    """
mov.u32 %r0, %tid.x;
ld.param.u32 %r2, [mode];
setp.eq.u32 %p1, %r2, 0;
@%p1 bra WAIT;
mov.u32 %r1, 77;
WAIT:
bar.sync 0;
add.u32 %r1, %r1, 1;
""" + stored_per_thread("%r1"),
    params=".param .u64 out, .param .u32 mode",
    regs=".reg .b32 %r<3>;\n.reg .b64 %rd<3>;\n.reg .pred %p<2>;",
)


def test_a_reused_arena_does_not_carry_a_warps_registers_into_the_next_launch():
    """The second launch runs on the first one's arena (its warps' state not zeroed again: a warp's
    start zeroes what it may read first)."""
    got = {}
    for tier in ("compiled", "interp"):
        be = backend(STALE_ACROSS_A_BARRIER, tier=tier)
        for mode in (1, 0):
            out = np.zeros(64, np.uint32)
            launch(be, "k", [ptr("u32"), scalar("u32")], [out.ctypes.data, mode], grid=1, block=64,
                   arrays=[out])
            got[tier, mode] = out
    assert (got["compiled", 1] == 78).all() and (got["compiled", 0] == 1).all()
    assert all(got["compiled", m].tobytes() == got["interp", m].tobytes() for m in (0, 1))


# a five-point smoothing step that holds the grid's edge, as a user writes one: the warps on the
# edges run both branches with some lanes off the mask
SMOOTH = r"""
extern "C" __global__ void smooth(const float* in, float* out, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h) return;
  int at = y * w + x;
  if (x == 0 || y == 0 || x == w - 1 || y == h - 1) { out[at] = in[at]; return; }
  out[at] = 0.2f * (in[at] + in[at - 1] + in[at + 1] + in[at - w] + in[at + w]);
}
"""


@pytest.mark.parametrize("block", [(16, 16), (32, 8)])
@pytest.mark.parametrize("width", [37, 48, 64])
def test_a_stencils_edge_warps_move_only_their_active_lanes(width, block, moves):
    """In a warp of the left edge's blocks every lane's address lies in the arrays (one off the
    mask reads the row before's last cell): its groups (16-wide blocks) or its 32 lanes (32-wide:
    one vector) move under the mask, and a lane off it must neither store nor be read for; in the
    last rows and in the last column of blocks of a grid whose width they do not divide a lane off
    the mask points outside the arrays, and the full check takes the access.  Bit-identical to the
    interpreter, and the edge held."""
    rng, height = np.random.default_rng(11), 40
    grid = rng.random((height, width), np.float32)
    got, want = both(cuda_tiers(SMOOTH), "smooth", lambda: [grid, np.full_like(grid, -1.0), width, height],
                     grid=(-(-width // block[0]), -(-height // block[1])), block=block)
    same(got, want)
    inner = np.float32(0.2) * (grid[1:-1, 1:-1] + grid[1:-1, :-2] + grid[1:-1, 2:] + grid[:-2, 1:-1]
                               + grid[2:, 1:-1])
    out = got[1]
    assert np.allclose(out[1:-1, 1:-1], inner, rtol=1e-6)
    assert (out[0] == grid[0]).all() and (out[:, 0] == grid[:, 0]).all() and (out[:, -1] == grid[:, -1]).all()


def test_a_register_loaded_off_a_blocks_main_line_is_loaded_again_after_it():
    """The emitter keeps a register's loaded value for the rest of a block only where it was loaded
    on the block's main line, which every later part of the block runs through: a value loaded in
    one arm of a branch does not dominate the join (LLVM would refuse the module), and a store
    makes the next read load again."""
    e = Emitter({"%r1": 32}, lambda name: None, "k")
    e.put_label("K0")
    e.restart(True)
    e.emit("br i1 true, label %arm, label %join")
    e.put_label("arm")
    inside = e.slot_value("%r1")
    e.emit("br label %join")
    e.put_label("join")
    e.main_line.add("join")  # the next instruction starts here
    after = e.slot_value("%r1")
    assert after != inside and e.slot_value("%r1") == after
    e.store_slot("%r1", "<32 x i32>", "zeroinitializer")
    assert e.slot_value("%r1") != after
    e.restart(False)
    assert not e.held and not e.main_line


EVEN_ONLY = r"""
extern "C" __global__ void even(float* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i % 2 == 0) out[i] = 1.0f;
}
"""


def test_a_lane_off_the_mask_past_the_end_is_no_fault_and_an_active_one_is_reported(moves):
    """The even lanes of a warp store, one vector under the mask: with 127 elements the last
    lane, off the mask, would point past the end (the whole warp's span fails its check, and the
    full check of the active lanes passes); with 106 the active lane 106 overruns, as the
    interpreter reports."""
    modules = cuda_tiers(EVEN_ONLY)
    got, want = both(modules, "even", lambda: [np.zeros(127, np.float32)], grid=4, block=32)
    same(got, want)
    assert (got[0][::2] == 1).all() and (got[0][1::2] == 0).all()
    short = np.zeros(106, np.float32)  # one array: a report names its address
    said = _reports(modules, "even", lambda: [short], grid=4, block=32)
    assert said[0] == said[1] and "block (3, 0, 0)" in said[0] and "thread (10, 0, 0)" in said[0]


WRAPPED = r"""
extern "C" __global__ void wrapped(const float* x, float* out, unsigned start) {
  __shared__ float tile[64];
  unsigned t = threadIdx.x;
  tile[t] = x[t];
  tile[t + 32] = x[t + 32];
  __syncthreads();
  unsigned k = start + t;  // past 2**32 the index wraps, as unsigned arithmetic does
  if (k < 64) out[t] = tile[k];
}
"""


@pytest.mark.parametrize("start", [0, 2**32 - 8, 2**32 - 40, 40])
def test_a_shared_index_that_wraps_around_reads_what_the_interpreter_reads(start):
    """The tile's 32-bit shared addresses follow the lane until the index wraps: the lanes past the
    wrap fail the fast paths' checks, and the full check must see their wrapped addresses (in the
    tile), not lane 0's plus the lane's step (past 4 GiB)."""
    x = np.arange(64, dtype=np.float32) + 1
    got, want = both(cuda_tiers(WRAPPED), "wrapped",
                     lambda: [x, np.zeros(32, np.float32), np.uint32(start)], grid=1, block=32)
    same(got, want)
    k = (start + np.arange(32)) % 2**32
    assert (got[1] == np.where(k < 64, x[np.minimum(k, 63)], 0)).all()


SHIFTED = r"""
extern "C" __global__ void shifted(const unsigned* on, const float* x, float* out, int shift) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (on[i]) out[i + shift] = x[i + shift] * 2.0f + (float)i;
}
"""
_SHIFTED: list = []  # both tiers' modules, compiled by the first example (hypothesis runs many)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 1), min_size=64, max_size=64) | st.just([1] * 64), st.integers(-9, 9),
       st.integers(50, 72), st.integers(50, 72))
def test_consecutive_lanes_under_any_mask_near_the_ends_match_the_interpreter(on, shift, xs, outs):
    """Two warps of consecutive lanes (one vector each when their span passes) under any mask,
    shifted so that lanes, on the mask or off it, may point before the start or past the end of
    ``x`` or ``out``: the same memory, or the same report."""
    flags, x = np.array(on, np.uint32), np.arange(1, xs + 1, dtype=np.float32)
    out = np.zeros(outs, np.float32)  # one array for both tiers: a report names its address
    said = []
    if not _SHIFTED:
        _SHIFTED.extend(cuda_tiers(SHIFTED))
    for module in _SHIFTED:
        out[:] = 0
        try:
            module.shifted(flags, x, out, shift, grid=2, block=32)
            said.append(out.tobytes())
        except MemoryAccessError as raised:
            said.append(str(raised).replace(" (found by the compiled CPU tier", "").split(";")[0])
    assert said[0] == said[1]
    assert _SHIFTED[0].backend.compiled_tier.why_interpreted("shifted") is None


# a tile through shared memory, read back with its rows swapped in pairs (two runs of a row, at
# constants from lane 0's element) by the lanes of a triangle of the tile only
TRIANGLE = r"""
extern "C" __global__ void lower(const float* in, float* out) {
  __shared__ float tile[16][16];
  int tx = threadIdx.x, ty = threadIdx.y, at = (blockIdx.x * 16 + ty) * 16 + tx;
  tile[ty][tx] = in[at];
  __syncthreads();
  if (tx <= ty) out[at] = tile[ty ^ 1][tx] * 2.0f;
}
"""


def test_a_shared_tile_read_by_some_lanes_of_a_warp_matches_the_interpreter(moves):
    """The row loads go by the lanes' constants with lanes off the mask: those lanes' cells of
    ``out`` stay as they were."""
    data = np.random.default_rng(12).random(4 * 256, np.float32)
    got, want = both(cuda_tiers(TRIANGLE), "lower", lambda: [data, np.full_like(data, -1.0)], grid=4,
                     block=(16, 16))
    same(got, want)
    tiles, out = data.reshape(4, 16, 16), got[1].reshape(4, 16, 16)
    below = np.tril(np.ones((16, 16), bool))
    swapped = tiles[:, np.arange(16) ^ 1]
    assert (out[:, below] == (2 * swapped)[:, below]).all() and (out[:, ~below] == -1).all()


def test_spinning_blocks_are_reported_as_a_run_in_order_meets_them(monkeypatch):
    monkeypatch.setenv("PTXBRIDGE_CPU_THREADS", "3")
    monkeypatch.setattr(compiled_blocks, "_SHARE_SECONDS", 0.0)
    said = []
    for tier in ("compiled", "interp"):
        with pytest.raises(EmulatorError) as raised:
            launch(backend(SPIN_IN_TWO_BLOCKS, max_steps=1000, tier=tier), "k", [ptr("u32")], [0], grid=8,
                   block=32)
        said.append(str(raised.value))
    assert said[0] == said[1]
    assert "block (3, 0, 0)" in said[0]


def test_independent_blocks_on_several_threads_end_as_in_order(monkeypatch):
    monkeypatch.setenv("PTXBRIDGE_CPU_THREADS", "4")
    monkeypatch.setattr(compiled_blocks, "_SHARE_SECONDS", 0.0)
    rounds = compiled_blocks.stats["rounds"]
    start = np.arange(1, 20_001, dtype=np.uint32)
    got, want = both(
        cuda_tiers(fx.COLLATZ), "collatz", lambda: [start, np.zeros_like(start), start.size],
        grid=79, block=256,
    )
    same(got, want)
    n, rng = 96, np.random.default_rng(5)
    a, b = rng.random((n, n), np.float32), rng.random((n, n), np.float32)
    got, want = both(cuda_tiers(fx.MATMUL), "matmul", lambda: [a, b, np.zeros((n, n), np.float32), n],
                      grid=(n // 16, n // 16), block=(16, 16))
    same(got, want)
    assert compiled_blocks.stats["rounds"] >= rounds + 2  # both kernels ran rounds across threads


def test_a_forked_child_runs_spread_blocks_on_threads_of_its_own(monkeypatch):
    monkeypatch.setenv("PTXBRIDGE_CPU_THREADS", "3")
    monkeypatch.setattr(compiled_blocks, "_SHARE_SECONDS", 0.0)
    compiled, _ = cuda_tiers(fx.COLLATZ)
    start = np.arange(1, 3073, dtype=np.uint32)
    want = np.zeros_like(start)
    compiled.collatz(start, want, start.size, grid=12, block=256)  # the parent's pool has threads now
    pid = os.fork()
    if pid == 0:  # the child: the parent's pool threads did not come along
        code = 1
        try:
            signal.alarm(60)  # a child that hangs is killed, and the parent sees it
            rounds, got = compiled_blocks.stats["rounds"], np.zeros_like(start)
            compiled.collatz(start, got, start.size, grid=12, block=256)
            code = 0 if got.tobytes() == want.tobytes() and compiled_blocks.stats["rounds"] > rounds else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


def test_without_the_thread_extension_spread_blocks_run_in_order(monkeypatch):
    monkeypatch.setenv("PTXBRIDGE_CPU_THREADS", "3")
    monkeypatch.setattr(compiled_blocks, "_SHARE_SECONDS", 0.0)
    monkeypatch.setattr(compiled_blocks, "_threads", None)
    rounds = compiled_blocks.stats["rounds"]
    start = np.arange(1, 3073, dtype=np.uint32)
    got, want = both(cuda_tiers(fx.COLLATZ), "collatz", lambda: [start, np.zeros_like(start), start.size],
                     grid=12, block=256)
    same(got, want)
    assert compiled_blocks.stats["rounds"] == rounds


UNGUARDED = r"""
extern "C" __global__ void fill(float* out) { out[blockIdx.x * blockDim.x + threadIdx.x] = 1.0f; }
"""


def test_a_fault_in_the_last_block_of_a_round_is_reported_as_in_order(monkeypatch):
    """Twelve blocks over room for eleven and a half: the faulting block, the last, runs in a round
    of pieces three threads claim, and the report comes from the context that ran it."""
    monkeypatch.setenv("PTXBRIDGE_CPU_THREADS", "3")
    monkeypatch.setattr(compiled_blocks, "_SHARE_SECONDS", 0.0)
    rounds = compiled_blocks.stats["rounds"]
    out = np.zeros(11 * 128 + 64, np.float32)
    said = _reports(cuda_tiers(UNGUARDED), "fill", lambda: [out], grid=12, block=128)
    assert said[0] == said[1]
    assert "block (11, 0, 0)" in said[0] and "thread (64, 0, 0)" in said[0]
    assert compiled_blocks.stats["rounds"] > rounds


def test_the_contexts_of_a_round_start_every_launch_fresh(monkeypatch):
    """Three launches over the whole array admit its span in every thread's context (the contexts
    are kept for the next launch); a fourth over a view one row and a half short must still fault
    in its last block, as the interpreter reports, and each launch counts its own steps."""
    monkeypatch.setenv("PTXBRIDGE_CPU_THREADS", "4")
    monkeypatch.setattr(compiled_blocks, "_SHARE_SECONDS", 0.0)
    rounds = compiled_blocks.stats["rounds"]
    modules, out = cuda_tiers(UNGUARDED), np.zeros(12 * 128, np.float32)
    for module in modules:
        for _ in range(3):
            module.fill(out, grid=12, block=128)
    assert (out == 1).all() and compiled_blocks.stats["rounds"] >= rounds + 3
    assert modules[0].backend.thread_instructions == modules[1].backend.thread_instructions
    said = _reports(modules, "fill", lambda: [out[: 11 * 128 - 64]], grid=12, block=128)
    assert said[0] == said[1]
    assert "block (10, 0, 0)" in said[0] and "thread (64, 0, 0)" in said[0]


SPIN_FROM_BLOCK_40 = kernel_ptx(
    """
mov.u32 %r1, %ctaid.x;
setp.ge.u32 %p1, %r1, 40;
@%p1 bra LOOP;
ret;
LOOP:
bra.uni LOOP;""",
    regs=".reg .b32 %r<2>;\n.reg .pred %p<2>;",
)


def test_of_many_failing_blocks_a_round_reports_the_first_in_order(monkeypatch):
    """Blocks 40 to 63 all spin: the threads of a round claim several of them before one stops at
    the step limit, and the report (from the context that ran the piece) is of block 40, as a run
    in order gives."""
    monkeypatch.setenv("PTXBRIDGE_CPU_THREADS", "3")
    monkeypatch.setattr(compiled_blocks, "_SHARE_SECONDS", 0.0)
    monkeypatch.setattr(compiled_blocks, "_PIECES", 1000)  # a block a claim
    be = backend(SPIN_FROM_BLOCK_40, max_steps=20_000)
    for _ in range(5):
        with pytest.raises(EmulatorError, match=r"block \(40, 0, 0\)"):
            launch(be, "k", [ptr("u32")], [0], grid=64, block=32)


def test_the_thread_pool_refuses_a_malformed_round():
    from ptxbridge.loaders.emulator import _threads

    words = np.zeros(4, np.int64)
    for contexts, first, end, piece in (([], 0, 1, 1), ([words.ctypes.data] * 1025, 0, 1, 1),
                                        ([words.ctypes.data], 0, 1, 0), ([words.ctypes.data], 2, 1, 1)):
        with pytest.raises(ValueError, match="1 to 1024 contexts"):
            _threads.run(0, 0, 1, contexts, first, end, piece)
    with pytest.raises(TypeError):
        _threads.run(0, 0, 1, [words.ctypes.data, "a context"], 0, 1, 1)
    with pytest.raises(TypeError):
        _threads.run(0, 0, 1, 7, 0, 1, 1)
    assert not words.any()


DEPENDENT = {
    "atom.global.add.u32 %r2, [%rd1], 1;": "atom.global.add.u32",
    "red.add.u32 [%rd1], 1;": "red.add.u32",  # generic: maybe global
    "ld.volatile.global.u32 %r2, [%rd1];": "ld.volatile.global.u32",
    "st.relaxed.gpu.global.u32 [%rd1], %r1;": "st.relaxed.gpu.global.u32",
    "fence.acq_rel.gpu;": "fence.acq_rel.gpu",
    "membar.gl;": "membar.gl",
    "atom.shared.add.u32 %r2, [%r3], 1;": None,  # a block's own memory
    "ld.volatile.shared.u32 %r2, [%r3];": None,
    "ld.global.u32 %r2, [%rd1];": None,
}


@pytest.mark.parametrize("instruction", DEPENDENT)
def test_blocks_that_may_see_each_others_work_run_in_order(instruction):
    body = f"ld.param.u64 %rd1, [out];\nmov.u32 %r1, 1;\nmov.u32 %r3, 0;\n{instruction}\nret;"
    be = backend(kernel_ptx(body, regs=".reg .b32 %r<4>;\n.reg .b64 %rd<2>;",
                            globals_=".shared .align 4 .b8 s[4];"))
    why = compiled_blocks.dependence(be.compiled_tier.program.functions["k"])
    expected = DEPENDENT[instruction]
    assert why == expected if expected is None else why.startswith(expected)


def test_the_histograms_global_atomics_keep_its_blocks_in_order(monkeypatch, caplog):
    monkeypatch.setenv("PTXBRIDGE_CPU_THREADS", "4")
    monkeypatch.setattr(compiled_blocks, "_SHARE_SECONDS", 0.0)
    rounds = compiled_blocks.stats["rounds"]
    data = np.random.default_rng(3).integers(0, 256, 20_000, dtype=np.uint8)
    with caplog.at_level(logging.DEBUG, logger="ptxbridge.cpu"):
        got, _ = both(cuda_tiers(fx.HISTOGRAM), "histogram",
                      lambda: [data, np.zeros(256, np.uint32), data.size], grid=9, block=128)
    assert (got[1] == np.bincount(data, minlength=256)).all()
    assert compiled_blocks.stats["rounds"] == rounds
    assert any("runs its blocks in order, on one thread: `atom.global.add.u32" in r.getMessage()
               for r in caplog.records)


@pytest.mark.parametrize("given", ["0", "-2", "many"])
def test_a_bad_thread_count_is_refused_by_name(monkeypatch, given):
    monkeypatch.setenv("PTXBRIDGE_CPU_THREADS", given)
    with pytest.raises(ArgumentError, match=r"PTXBRIDGE_CPU_THREADS .* must be a positive integer"):
        launch(backend(SPIN_IN_TWO_BLOCKS, tier="compiled"), "k", [ptr("u32")], [0], grid=2, block=32)


COUNTING_BARRIER = kernel_ptx(  # with count != 0, the odd threads are counted at a barrier
    """
mov.u32 %r1, %tid.x;
ld.param.u64 %rd1, [out];
mul.wide.u32 %rd2, %r1, 4;
add.s64 %rd3, %rd1, %rd2;
ld.param.u32 %r4, [count];
setp.eq.u32 %p2, %r4, 0;
@%p2 bra SKIP;
and.b32 %r3, %r1, 1;
setp.ne.u32 %p1, %r3, 0;
bar.red.popc.u32 %r2, 0, %p1;
st.global.u32 [%rd3], %r2;
SKIP:
ret;""",
    params=".param .u64 out, .param .u32 count",
    regs=".reg .b32 %r<5>;\n.reg .b64 %rd<4>;\n.reg .pred %p<3>;",
)


def test_a_kernel_whose_launches_reach_what_the_tier_does_not_translate_ends_on_the_interpreter(caplog):
    out = np.zeros(32, np.uint32)
    be = backend(COUNTING_BARRIER, tier="compiled")
    with caplog.at_level(logging.DEBUG, logger="ptxbridge.cpu"):
        for count in (0, 1, 0, 1, 1, 1):  # two in a row that reach the barrier reduction: interpreted
            out[:] = 7
            launch(be, "k", [ptr("u32"), scalar("u32")], [out.ctypes.data, count], grid=1, block=32,
                   arrays=[out])
            assert (out == (16 if count else 7)).all()  # the odd threads, counted at the barrier
    said = [r.getMessage() for r in caplog.records]
    assert sum("bar.red.popc.u32" in text and "compiles" in text for text in said) == 1
    assert sum("left the compiled code" in text for text in said) == 3  # the sixth launch does not try
    assert sum("runs on the interpreter: its launches keep reaching" in text for text in said) == 1
    assert "bar.red.popc.u32" in be.compiled_tier.why_interpreted("k")


def test_a_kernel_every_thread_of_which_reaches_what_the_tier_does_not_translate_is_not_compiled():
    be = backend(kernel_ptx("bar.red.popc.u32 %r1, 0, 1;\nret;", regs=".reg .b32 %r1;"), tier="compiled")
    launch(be, "k", [ptr("u32")], [0], grid=1, block=32)
    assert "every thread reaches `bar.red.popc.u32 %r1, 0, 1`" in be.compiled_tier.why_interpreted("k")


def test_a_float_atomic_maximum_leaves_the_compiled_code_with_its_reason_and_the_interpreters_result():
    body = """mov.u32 %r1, %tid.x;
cvt.rn.f32.u32 %f1, %r1;
ld.param.u64 %rd1, [out];
atom.global.max.f32 %f2, [%rd1], %f1;
ret;"""
    out = np.zeros(1, np.float32)
    be = backend(kernel_ptx(body, regs=".reg .b32 %r1;\n.reg .f32 %f<3>;\n.reg .b64 %rd1;"), tier="compiled")
    launch(be, "k", [ptr("f32")], [out.ctypes.data], grid=1, block=64, arrays=[out])
    assert out[0] == 63.0
    assert "atom.global.max.f32" in be.compiled_tier.why_interpreted("k")
    assert "float add and exch" in be.compiled_tier.why_interpreted("k")


def test_the_tier_is_chosen_by_argument_or_environment(monkeypatch):
    monkeypatch.delenv("PTXBRIDGE_CPU_TIER", raising=False)
    assert backend(OOB).compiled_tier is not None  # the compiled tier by default
    monkeypatch.setenv("PTXBRIDGE_CPU_TIER", "interp")
    assert backend(OOB).compiled_tier is None
    assert backend(OOB, tier="compiled").compiled_tier is not None
    monkeypatch.setenv("PTXBRIDGE_CPU_TIER", "compiled")
    assert backend(OOB).compiled_tier is not None
    assert backend(OOB, tier="interp").compiled_tier is None
    views = nvrtc.compile(VIEWS, arch="sm_90", output="ptx")
    assert ptxbridge.load([views], device="cpu", tier="interp").backend.compiled_tier is None  # load()'s too
    monkeypatch.setenv("PTXBRIDGE_CPU_TIER", "fast")
    with pytest.raises(
        ArgumentError, match=r"PTXBRIDGE_CPU_TIER\) must be one of compiled, interp \(got 'fast'\)"
    ):
        backend(OOB)


def test_a_second_process_loads_the_compiled_kernel_from_the_disk_cache(tmp_path):
    script = (
        "import numpy as np, sys; sys.path.insert(0, 'tests')\n"
        "from _emulator import backend, launch, ptr\n"
        "from test_cpu_tier import COPY\n"
        "from ptxbridge.loaders.emulator.compiled import jit\n"
        "a = np.arange(64, dtype=np.uint32); out = np.zeros(64, np.uint32)\n"
        "launch(backend(COPY, tier='compiled'), 'k', [ptr('u32'), ptr('u32')],"
        " [a.ctypes.data, out.ctypes.data],"
        " grid=2, block=32, arrays=[a, out])\n"
        "assert (out == a + 1).all()\n"
        "print(jit.stats['compiled'], jit.stats['disk'])\n"
    )
    env = {**os.environ, "PTXBRIDGE_CACHE_DIR": str(tmp_path)}

    def counts() -> list[str]:
        """(objects compiled, objects read from disk) in a fresh process."""
        return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                              check=True, cwd=os.path.dirname(os.path.dirname(__file__))).stdout.split()

    assert [counts(), counts()] == [["2", "0"], ["0", "2"]]  # the kernel and the runtime's helpers
    for entry in (tmp_path / "cpu-tier").glob("*/*"):
        entry.write_bytes(entry.read_bytes()[:-7])  # a truncated entry is rebuilt, never loaded
    assert counts() == ["2", "0"]


COPY = kernel_ptx(
    """
mov.u32 %r1, %tid.x;
mov.u32 %r2, %ctaid.x;
mad.lo.s32 %r1, %r2, 32, %r1;
mul.wide.u32 %rd2, %r1, 4;
ld.param.u64 %rd1, [a];
add.s64 %rd3, %rd1, %rd2;
ld.global.u32 %r2, [%rd3];
add.u32 %r2, %r2, 1;
ld.param.u64 %rd1, [out];
add.s64 %rd3, %rd1, %rd2;
st.global.u32 [%rd3], %r2;
ret;""",
    params=".param .u64 a, .param .u64 out",
    regs=".reg .b32 %r<3>;\n.reg .b64 %rd<4>;",
)

# straight-line integer PTX on random operands: the instruction, and the types it reads
_OPS = [
    ("add.u32", 3),
    ("sub.u32", 3),
    ("mul.lo.u32", 3),
    ("mul.hi.u32", 3),
    ("mul.hi.s32", 3),
    ("div.u32", 3),
    ("div.s32", 3),
    ("rem.u32", 3),
    ("rem.s32", 3),
    ("shl.b32", 3),
    ("shr.u32", 3),
    ("shr.s32", 3),
    ("and.b32", 3),
    ("or.b32", 3),
    ("xor.b32", 3),
    ("min.s32", 3),
    ("max.u32", 3),
    ("not.b32", 2),
    ("neg.s32", 2),
    ("abs.s32", 2),
    ("popc.b32", 2),
    ("clz.b32", 2),
    ("brev.b32", 2),
    ("mad.lo.s32", 4),
    ("mad.hi.u32", 4),
    ("cvt.u16.u32", 2),
    ("cvt.s8.s32", 2),
    ("cvt.sat.u8.s32", 2),
    ("cvt.sat.s16.s32", 2),
    ("bfe.u32", 4),
    ("bfe.s32", 4),
    ("bfi.b32", 5),
    ("add.cc.u32", 3),
    ("addc.u32", 3),
    ("addc.cc.u32", 3),
    ("sub.cc.u32", 3),
    ("subc.cc.u32", 3),
    ("subc.u32", 3),
    ("mad.lo.cc.u32", 4),
    ("madc.hi.cc.u32", 4),
    ("madc.lo.u32", 4),
]
_program = st.lists(
    st.tuples(st.sampled_from(_OPS), st.integers(0, 5), st.lists(st.integers(0, 5), min_size=4, max_size=4)),
    min_size=1,
    max_size=12,
)
_values = st.lists(st.integers(0, 2**32 - 1), min_size=64, max_size=64)


def _six_registers(body: list[str], regs: str, setup: tuple[str, ...] = (), constants: tuple[str, ...] = (),
                   after: tuple[str, ...] = (), globals_: str = "") -> str:
    """A kernel each thread of which loads ``%x0``, ``%x1`` from ``a[2 * tid]``, sets ``%x2``..``%x5``
    (``constants``), runs ``body`` and stores ``%x0``..``%x5`` to ``out[6 * tid]`` (then ``after``)."""
    lines = [*setup, *(f"ld.global.u32 %x{k}, [%rd3+{4 * k}];" for k in range(2)), *constants, *body,
             *(f"st.global.u32 [%rd4+{4 * k}], %x{k};" for k in range(6)), *after]
    return kernel_ptx(
        """
mov.u32 %r1, %tid.x;
mul.wide.u32 %rd2, %r1, 8;
ld.param.u64 %rd1, [a];
add.s64 %rd3, %rd1, %rd2;
mul.wide.u32 %rd2, %r1, 24;
ld.param.u64 %rd1, [out];
add.s64 %rd4, %rd1, %rd2;
"""
        + "\n".join(lines)
        + "\nret;",
        params=".param .u64 a, .param .u64 out",
        regs=regs,
        globals_=globals_,
    )


def _straight_line(program) -> str:
    lines = []
    for (op, arity), dest, sources in program:
        width = op.split(".")[-2] if op.startswith("cvt") else None
        srcs = ", ".join(f"%x{s}" for s in sources[: arity - 1])
        if width:  # cvt writes a narrow type: through a register of that width's class
            lines.append(f"{op} %h, {srcs};")
            kind = "s" if width[0] == "s" else "u"
            lines.append(f"cvt.{kind}32.{width} %x{dest}, %h;")
        else:
            lines.append(f"{op} %x{dest}, {srcs};")
    return _six_registers(lines, ".reg .b32 %r1, %x<6>;\n.reg .b16 %h;\n.reg .b64 %rd<5>;",
                          constants=tuple(f"mov.u32 %x{k}, {1234567 * k};" for k in range(2, 6)))


@settings(max_examples=25, deadline=None)
@given(_program, _values)
def test_generated_straight_line_integer_ptx_matches_the_interpreter(program, values):
    a = np.array(values, np.uint32)
    ptx_both(_straight_line(program), [ptr("u32"), ptr("u32")], [a], np.zeros(6 * 32, np.uint32), grid=1,
             block=32)


_ATOMIC_FORMS = [  # (operation, operands after the address, whether red has the form)
    ("add.u32", 1, True), ("and.b32", 1, True), ("or.b32", 1, True), ("xor.b32", 1, True),
    ("min.u32", 1, True), ("max.s32", 1, True), ("inc.u32", 1, True), ("dec.u32", 1, True),
    ("exch.b32", 1, False), ("cas.b32", 2, False), ("add.f32", 1, True),
]
_atomics = st.lists(
    st.tuples(st.sampled_from(_ATOMIC_FORMS), st.sampled_from(["global", "shared"]), st.booleans(),
              st.lists(st.integers(0, 5), min_size=4, max_size=4)),
    min_size=1,
    max_size=10,
)


def _atomic_program(program) -> str:
    """One warp's straight-line atomics on an eight-word table in global memory (inside ``out``)
    and one in shared memory, at words the lanes' registers pick; the old values read back into
    the registers, which end in ``out`` per thread with both tables."""
    lines = []
    for (form, count, has_red), space, returns, (dest, at, b, c) in program:
        base = "%rd5" if space == "global" else "%rd6"
        lines += [f"and.b32 %t, %x{at}, 7;", "mul.wide.u32 %rd7, %t, 4;", f"add.s64 %rd7, {base}, %rd7;"]
        if form.endswith("f32"):  # a float operand from an integer (finite, so NaN payloads stay out)
            lines += [f"cvt.rn.f32.u32 %f1, %x{b};", f"atom.{space}.{form} %f2, [%rd7], %f1;",
                      f"mov.b32 %x{dest}, %f2;"]
            continue
        operands = ", ".join(f"%x{r}" for r in (b, c)[:count])
        if returns or not has_red:
            lines.append(f"atom.{space}.{form} %x{dest}, [%rd7], {operands};")
        else:
            lines.append(f"red.{space}.{form} [%rd7], {operands};")
    return _six_registers(
        lines,
        ".reg .b32 %r1, %t, %x<6>;\n.reg .f32 %f<3>;\n.reg .b64 %rd<8>;",
        setup=("add.s64 %rd5, %rd1, 768;", "mov.u64 %rd6, table;"),
        constants=("mov.u32 %x2, %tid.x;", "mov.u32 %x3, 7;", "mov.u32 %x4, 3000000000;", "mov.u32 %x5, 1;"),
        after=("and.b32 %t, %r1, 7;", "mul.wide.u32 %rd7, %t, 4;", "add.s64 %rd2, %rd6, %rd7;",
               "ld.shared.u32 %t, [%rd2];", "add.s64 %rd2, %rd5, %rd7;", "st.global.u32 [%rd2+32], %t;"),
        globals_=".shared .align 4 .b32 table[8];",
    )


@settings(max_examples=25, deadline=None)
@given(_atomics, _values)
def test_generated_atomics_whose_old_values_are_read_match_the_interpreter(program, values):
    """A warp's atomics land lane by lane in both tiers: old values, final words and float sums agree."""
    a = np.array(values, np.uint32)
    ptx_both(_atomic_program(program), [ptr("u32"), ptr("u32")], [a], np.zeros(6 * 32 + 16, np.uint32),
             grid=1, block=32)


def _bit_field(op: str) -> str:
    """``op`` (bfe or bfi of some type) per thread on ``a[i]``, ``b[i]`` and the position and length
    ``pos[i]``, ``len[i]``; the result to ``out[i]``."""
    t = op.split(".")[-1]
    r = f"%w{t[1:]}"
    sources = f"{r}1, {r}2, %p1, %p2" if op.startswith("bfi") else f"{r}1, %p1, %p2"
    return kernel_ptx(
        f"""
mov.u32 %r1, %tid.x;
mul.wide.u32 %rd1, %r1, 8;
mul.wide.u32 %rd2, %r1, 4;
ld.param.u64 %rd3, [a];
add.s64 %rd3, %rd3, %rd1;
ld.global.b{t[1:]} {r}1, [%rd3];
ld.param.u64 %rd3, [b];
add.s64 %rd3, %rd3, %rd1;
ld.global.b{t[1:]} {r}2, [%rd3];
ld.param.u64 %rd3, [pos];
add.s64 %rd3, %rd3, %rd2;
ld.global.u32 %p1, [%rd3];
ld.param.u64 %rd3, [len];
add.s64 %rd3, %rd3, %rd2;
ld.global.u32 %p2, [%rd3];
{op} {r}3, {sources};
ld.param.u64 %rd3, [out];
add.s64 %rd3, %rd3, %rd1;
st.global.b{t[1:]} [%rd3], {r}3;
ret;""",
        params=".param .u64 a, .param .u64 b, .param .u64 pos, .param .u64 len, .param .u64 out",
        regs=".reg .b32 %r1, %p<3>, %w32<4>;\n.reg .b64 %rd<4>, %w64<4>;",
    )


_FIELD_EDGES = [0, 1, 5, 16, 31, 32, 33, 48, 63, 64, 65, 200, 255, 256, 259, 0xFFFFFF1F]


@pytest.mark.parametrize("op", ["bfe.u32", "bfe.s32", "bfe.u64", "bfe.s64", "bfi.b32", "bfi.b64"])
def test_bit_field_extracts_and_inserts_at_every_edge_match_the_interpreter(op):
    pos, length = (np.array(v, np.uint32).ravel() for v in np.meshgrid(_FIELD_EDGES, _FIELD_EDGES))
    rng = np.random.default_rng(31)
    a, b = (rng.integers(0, 2**64, pos.size, dtype=np.uint64) for _ in range(2))
    a[::3] |= np.uint64(1 << 63) | np.uint64(1 << 31)  # set sign bits, for the signed extracts
    ptx_both(_bit_field(op), [ptr("u64")] * 5, [a, b, pos, length], np.zeros(pos.size, np.uint64), grid=1,
             block=pos.size)


_LANE_INPUTS = """mov.u32 %r1, %tid.x;
mul.wide.u32 %rd2, %r1, 4;
ld.param.u64 %rd1, [idx];
add.s64 %rd3, %rd1, %rd2;
ld.global.u32 %r2, [%rd3];
ld.param.u64 %rd1, [on];
add.s64 %rd4, %rd1, %rd2;
ld.global.u32 %r3, [%rd4];
"""  # each thread's idx (%r2) and on (%r3); %rd2 its 4-byte element offset


def _indexed_where_on(param: str, size: int) -> str:
    """The lane inputs, a jump to ``DONE`` where ``on`` is 0, and ``%rd7``: the address of element
    ``idx`` (``size`` bytes each) of pointer parameter ``param``."""
    return f"""{_LANE_INPUTS}setp.eq.u32 %p1, %r3, 0;
@%p1 bra DONE;
ld.param.u64 %rd5, [{param}];
mul.wide.s32 %rd6, %r2, {size};
add.s64 %rd7, %rd5, %rd6;
"""


def _outcome(be, kinds, values, arrays, out) -> bytes | str:
    """What kernel ``k`` leaves in ``out`` on backend ``be`` (one block of 64 threads), or the part of
    its fault report both tiers word alike."""
    try:
        launch(be, "k", kinds, values, grid=1, block=64, arrays=arrays)
        return out.tobytes()
    except MemoryAccessError as raised:
        return str(raised).replace(" (found by the compiled CPU tier", "").split(";")[0]


def _gather(bits: int) -> str:
    """Lane ``i`` adds ``x[idx[i]]``, ``x[idx[i] + 1]`` and 7 ``x[idx[i] ^ 1]`` of ``bits``-wide
    elements into ``out[i]``, where ``on[i]``."""
    size = bits // 8
    return kernel_ptx(
        f"""
{_indexed_where_on("x", size)}ld.global.u{bits} %v1, [%rd7];
ld.global.u{bits} %v2, [%rd7+{size}];
xor.b32 %r7, %r2, 1;
mul.wide.s32 %rd10, %r7, {size};
add.s64 %rd11, %rd5, %rd10;
ld.global.u{bits} %v3, [%rd11];
ld.param.u64 %rd8, [out];
mul.wide.u32 %rd12, %r1, {size};
add.s64 %rd9, %rd8, %rd12;
mul.lo.u{bits} %v3, %v3, 7;
add.u{bits} %v4, %v1, %v2;
add.u{bits} %v4, %v4, %v3;
st.global.u{bits} [%rd9], %v4;
DONE:
ret;""",
        params=".param .u64 idx, .param .u64 on, .param .u64 x, .param .u64 out",
        regs=f".reg .pred %p1;\n.reg .b32 %r<9>;\n.reg .b{bits} %v<5>;\n.reg .b64 %rd<13>;",
    )


GATHER = {bits: _gather(bits) for bits in (32, 64)}


def _permute_choices() -> tuple[bool, ...]:
    """Both ways to load a window of lanes where the host has AVX-512's permutes, else the one."""
    return (True, False) if has_permutes() else (False,)


_group = st.one_of(  # the element indices of eight lanes: consecutive, one, or anything
    st.integers(0, 56).map(lambda first: list(range(first, first + 8))),
    st.integers(0, 62).map(lambda one: [one] * 8),
    st.lists(st.integers(0, 62), min_size=8, max_size=8),
)


@pytest.mark.parametrize("bits", [32, 64])
@settings(max_examples=40, deadline=None)
@given(
    st.lists(_group, min_size=8, max_size=8),
    st.lists(st.integers(0, 1), min_size=64, max_size=64) | st.just([1] * 64),
    st.sampled_from([None, (0, 65), (31, -1), (40, -1), (63, 65)]),
)
def test_loads_of_every_lane_pattern_and_mask_match_the_interpreter(bits, groups, on, past):
    """Each group of eight lanes reads consecutive elements, one element or any, under a full or
    partial mask, two warps with the same instructions; through a base register read twice
    (``[%rd7]``, ``[%rd7+4]``) and once; thread ``past[0]`` reads element ``past[1]``, outside
    ``x`` (in the second warp: after the first one's reads were admitted): the same report, 4- and
    8-byte elements, with and without the permutes of windowed loads."""
    idx, on = np.array([i for g in groups for i in g], np.int32), list(on)
    if past is not None:
        idx[past[0]], on[past[0]] = past[1], 1  # 65: both loads outside; -1: one
    dtype = np.dtype(f"u{bits // 8}")
    x = np.arange(1, 66, dtype=dtype) * dtype.type(1000003)  # element 64 too: [%rd7+4] of element 63
    results = []
    for tier, permutes in [*(("compiled", p) for p in _permute_choices()), ("interp", False)]:
        out = np.zeros(64, dtype)
        flags = np.array(on, np.uint32)
        be = backend(GATHER[bits], tier=tier)
        arrays = [idx, flags, x, out]
        kinds = [ptr("i32"), ptr("u32"), ptr(f"u{bits}"), ptr(f"u{bits}")]
        with mock.patch.object(compiled_tier, "has_permutes", lambda p=permutes: p):
            results.append(_outcome(be, kinds, [a.ctypes.data for a in arrays], arrays, out))
        assert tier == "interp" or be.compiled_tier.why_interpreted("k") is None
    assert all(result == results[-1] for result in results)
    if past is not None:
        assert isinstance(results[0], str) and f"thread ({past[0]}, 0, 0)" in results[0]



def _scatter(bits: int, skew: int = 0) -> str:
    """Lane ``i`` writes ``(i + 1) * 251`` to ``out[idx[i]]`` and one more to ``out[idx[i] + 128]``
    (``bits``-wide elements; in the second warp ``skew`` bytes further) where ``on[i]``."""
    size, wide = bits // 8, max(bits, 16)
    return kernel_ptx(
        f"""
{_indexed_where_on("out", size)}shr.u32 %r5, %r1, 5;
mul.wide.u32 %rd8, %r5, {skew};
add.s64 %rd7, %rd7, %rd8;
add.u32 %r4, %r1, 1;
cvt.u{wide}.u32 %v1, %r4;
mul.lo.u{wide} %v1, %v1, 251;
st.global.u{bits} [%rd7], %v1;
add.u{wide} %v1, %v1, 1;
st.global.u{bits} [%rd7+{128 * size}], %v1;
DONE:
ret;""",
        params=".param .u64 idx, .param .u64 on, .param .u64 out",
        regs=f".reg .pred %p1;\n.reg .b32 %r<6>;\n.reg .b{wide} %v1;\n.reg .b64 %rd<9>;",
    )


_spaced = st.tuples(st.integers(0, 8), st.lists(st.integers(0, 12), min_size=3, max_size=3)).map(
    lambda start: [start[0] + 8 * g + sum(start[1][:g]) + k for g in range(4) for k in range(8)])
_warp_groups = st.one_of(  # per warp: groups of eight in order, apart or adjoining; or any groups
    _spaced, st.lists(_group, min_size=4, max_size=4).map(lambda groups: [i for g in groups for i in g]))


@pytest.mark.parametrize("bits", [8, 16, 32, 64])
@settings(max_examples=40, deadline=None)
@given(
    st.lists(_warp_groups, min_size=2, max_size=2),
    st.lists(st.integers(0, 1), min_size=64, max_size=64) | st.just([1] * 64),
    st.sampled_from([None, (0, 130), (31, -1), (40, 128), (63, 130), (5, -129)]),
)
def test_stores_of_every_lane_pattern_and_mask_match_the_interpreter(bits, warps, on, past):
    """Each group of eight lanes writes consecutive elements (the groups of a warp in order, apart
    or adjoining, or overlapping), one element or any, under a full or partial mask, twice through
    one base register (128 elements apart, past the end of ``out`` for the last of groups far on);
    thread ``past[0]`` writes element ``past[1]`` (and 128 on), outside ``out``: the same memory, or
    the same report."""
    idx, on = np.array([i for warp in warps for i in warp], np.int32), list(on)
    if past is not None:
        idx[past[0]], on[past[0]] = past[1], 1
    out = np.zeros(160, np.dtype(f"u{bits // 8}"))  # one array (a report names its address); the
    # second stores of groups far enough on overrun it
    results = []
    for tier in ("compiled", "interp"):
        out[:] = 0
        flags = np.array(on, np.uint32)
        be = backend(_scatter(bits), tier=tier)
        arrays = [idx, flags, out]
        kinds = [ptr("i32"), ptr("u32"), ptr(f"u{bits}")]
        results.append(_outcome(be, kinds, [a.ctypes.data for a in arrays], arrays, out))
        assert tier == "interp" or be.compiled_tier.why_interpreted("k") is None
    assert results[0] == results[1]
    if past is not None:  # a report (naming the first thread the interpreter meets overrunning)
        assert isinstance(results[0], str) and "outside every buffer" in results[0]


@pytest.mark.parametrize("bits", [16, 32, 64])
def test_a_warp_storing_consecutive_elements_off_their_alignment_gets_the_interpreters_report(bits):
    """The second warp's elements are one byte off those of the first, whose span was admitted."""
    idx, on = np.arange(64, dtype=np.int32), np.ones(64, np.uint32)
    out = np.zeros(256, np.dtype(f"u{bits // 8}"))
    results = []
    for tier in ("compiled", "interp"):
        be = backend(_scatter(bits, skew=1), tier=tier)
        arrays = [idx, on, out]
        kinds = [ptr("i32"), ptr("u32"), ptr(f"u{bits}")]
        results.append(_outcome(be, kinds, [a.ctypes.data for a in arrays], arrays, out))
    assert results[0] == results[1] and "misaligned" in results[0]


ROOTS = kernel_ptx(
    """
mov.u32 %r1, %tid.x;
mul.wide.u32 %rd2, %r1, 4;
ld.param.u64 %rd1, [x];
add.s64 %rd3, %rd1, %rd2;
ld.global.f32 %f1, [%rd3];
mul.wide.u32 %rd4, %r1, 24;
ld.param.u64 %rd1, [out];
add.s64 %rd5, %rd1, %rd4;
rcp.rn.f32 %f2, %f1;
sqrt.rn.f32 %f3, %f1;
rsqrt.approx.f32 %f4, %f1;
st.global.f32 [%rd5], %f2;
st.global.f32 [%rd5+4], %f3;
st.global.f32 [%rd5+8], %f4;
cvt.f64.f32 %fd1, %f1;
rcp.rn.f64 %fd2, %fd1;
rsqrt.approx.f64 %fd3, %fd1;
add.f64 %fd3, %fd3, %fd2;
st.global.f64 [%rd5+16], %fd3;
ret;""",
    params=".param .u64 x, .param .u64 out",
    regs=".reg .b32 %r1;\n.reg .f32 %f<5>;\n.reg .f64 %fd<4>;\n.reg .b64 %rd<6>;",
)


def test_reciprocals_and_roots_of_corner_values_are_bit_identical():
    """rcp, sqrt and rsqrt of zeros, infinities, NaN, subnormals, negatives and extremes, in single
    and double precision: the interpreter's bits."""
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-38, -4.0, 2.0, 3.0, 1e38,
                  0.1, 7.0, 1.5e-39, 65504.0] * 2, np.float32)
    ptx_both(ROOTS, [ptr("f32"), ptr("u32")], [x], np.zeros(32 * 6, np.uint32), grid=1, block=32)


VECTORS = kernel_ptx(
    """
mov.u32 %r1, %tid.x;
mul.wide.u32 %rd2, %r1, 4;
ld.param.u64 %rd1, [idx];
add.s64 %rd3, %rd1, %rd2;
ld.global.u32 %r2, [%rd3];
ld.param.u64 %rd5, [x];
mul.wide.s32 %rd6, %r2, 16;
add.s64 %rd7, %rd5, %rd6;
ld.global.v4.u32 {%r3, %r4, %r5, %r6}, [%rd7];
ld.global.v2.u32 {%r7, %r8}, [%rd7+8];
mul.lo.u32 %r4, %r4, 3;
mul.lo.u32 %r5, %r5, 5;
mul.lo.u32 %r6, %r6, 7;
mul.lo.u32 %r7, %r7, 11;
mul.lo.u32 %r8, %r8, 13;
add.u32 %r3, %r3, %r4;
add.u32 %r3, %r3, %r5;
add.u32 %r3, %r3, %r6;
add.u32 %r3, %r3, %r7;
add.u32 %r3, %r3, %r8;
ld.param.u64 %rd8, [out];
add.s64 %rd9, %rd8, %rd2;
st.global.u32 [%rd9], %r3;
ret;""",
    params=".param .u64 idx, .param .u64 x, .param .u64 out",
    regs=".reg .b32 %r<9>;\n.reg .b64 %rd<10>;",
)


@settings(max_examples=30, deadline=None)
@given(st.lists(_group, min_size=8, max_size=8), st.sampled_from([None, (5, 64), (50, -1)]))
def test_vector_loads_of_every_lane_pattern_match_the_interpreter(groups, past):
    """``ld.v4`` and ``ld.v2`` through one base, each group of eight lanes at consecutive, one or any
    16-byte element (so lanes' elements are never adjacent words); thread ``past[0]`` reads element
    ``past[1]``, partly or wholly outside ``x``: the same report."""
    idx = np.array([i for g in groups for i in g], np.int32)
    if past is not None:
        idx[past[0]] = past[1]
    x = np.arange(1, 4 * 64 + 1, dtype=np.uint32) * np.uint32(2654435761)
    results = []
    for tier in ("compiled", "interp"):
        out = np.zeros(64, np.uint32)
        be = backend(VECTORS, tier=tier)
        arrays = [idx, x, out]
        kinds = [ptr("i32"), ptr("u32"), ptr("u32")]
        results.append(_outcome(be, kinds, [a.ctypes.data for a in arrays], arrays, out))
        assert tier == "interp" or be.compiled_tier.why_interpreted("k") is None
    assert results[0] == results[1]
    if past is not None:
        assert isinstance(results[0], str) and f"thread ({past[0]}, 0, 0)" in results[0]


ROWS = r'''
// each thread sums four neighbours through a pointer into a shared tile that it keeps across
// barriers and that some threads move between passes (the others keep theirs)
extern "C" __global__ void rows(const int* moves, const float* in, float* out, int* moved, int passes) {
  __shared__ float tile[512];
  int t = threadIdx.x;
  for (int i = t; i < 512; i += blockDim.x) tile[i] = in[blockIdx.x * 512 + i];
  __syncthreads();
  const float* row = &tile[t % 32];
  float acc = 0.0f;
  #pragma unroll 1
  for (int p = 0; p < passes; ++p) {
    acc = acc * 0.5f + row[0] + 2.0f * row[1] + 3.0f * row[2] + 4.0f * row[3];
    __syncthreads();
    int to = moves[p * blockDim.x + t];
    if (to >= 0) {
      row = &tile[to];
      moved[blockIdx.x * blockDim.x + t] += 1;
    }
    __syncthreads();
  }
  out[blockIdx.x * blockDim.x + t] = acc;
}
'''
_MOVE = st.one_of(  # where eight threads' pointers go next: nowhere, together, side by side, anywhere
    st.just([-1] * 8),
    st.integers(0, 508).map(lambda at: [at] * 8),
    st.integers(0, 500).map(lambda first: list(range(first, first + 8))),
    st.lists(st.integers(-1, 508), min_size=8, max_size=8),
)


@pytest.fixture(scope="module")
def rows_modules():
    return cuda_tiers(ROWS)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(_MOVE, min_size=8, max_size=8), min_size=1, max_size=4))
def test_pointers_kept_across_barriers_and_moved_by_some_threads_read_what_the_interpreter_reads(
    rows_modules, passes
):
    """A pointer that lives across barriers (first at a warp's 32 consecutive elements) is read in
    every pass; between passes each group of eight threads leaves it, or moves it to one element,
    to consecutive ones or anywhere (a write of some lanes, in a branch): the
    compiled tier, which remembers the lanes' layout while the pointer does not change, reads the
    interpreter's values in every pass (two blocks of 64 threads)."""
    moves = np.array([at for one in passes for group in one for at in group], np.int32)
    data = np.random.default_rng(len(moves)).random(1024, np.float32)
    got, want = both(
        rows_modules, "rows",
        lambda: [moves, data, np.zeros(128, np.float32), np.zeros(128, np.int32), len(passes)],
        grid=2, block=64,
    )
    same(got, want)


def _stepping(space: str) -> str:
    """Each lane reads two neighbours through a pointer that starts at element ``idx[lane]`` of
    ``x`` (a global pointer, or a 32-bit one into a shared copy of ``x``) and, in each of four
    passes, moves by ``step`` elements where bit ``pass`` of ``on[lane]`` is set."""
    shared = space == "shared"
    copy = """
mov.u32 %r12, %r1;
FILL:
mul.wide.u32 %rd9, %r12, 4;
add.s64 %rd10, %rd5, %rd9;
ld.global.u32 %r13, [%rd10];
shl.b32 %r14, %r12, 2;
mov.u32 %r15, tile;
add.u32 %r15, %r15, %r14;
st.shared.u32 [%r15], %r13;
add.u32 %r12, %r12, 64;
setp.lt.u32 %p4, %r12, 256;
@%p4 bra FILL;
bar.sync 0;
mov.u32 %r16, tile;
shl.b32 %r17, %r2, 2;
add.u32 %r18, %r16, %r17;
shl.b32 %r19, %r9, 2;""" if shared else """
mul.wide.s32 %rd6, %r2, 4;
add.s64 %rd7, %rd5, %rd6;
mul.wide.s32 %rd8, %r9, 4;"""
    base, amount, kind = ("%r18", "%r19", "s32") if shared else ("%rd7", "%rd8", "s64")
    return kernel_ptx(
        f"""
{_LANE_INPUTS}ld.param.u32 %r9, [step];
ld.param.u64 %rd5, [x];
{copy}
mov.u32 %r10, 0;
mov.u32 %r6, 0;
LOOP:
ld.{space}.u32 %r4, [{base}];
ld.{space}.u32 %r5, [{base}+4];
mul.lo.u32 %r6, %r6, 3;
add.u32 %r6, %r6, %r4;
mul.lo.u32 %r6, %r6, 5;
add.u32 %r6, %r6, %r5;
shr.u32 %r11, %r3, %r10;
and.b32 %r11, %r11, 1;
setp.ne.u32 %p2, %r11, 0;
@%p2 add.{kind} {base}, {base}, {amount};
add.u32 %r10, %r10, 1;
setp.lt.u32 %p3, %r10, 4;
@%p3 bra LOOP;
ld.param.u64 %rd11, [out];
add.s64 %rd12, %rd11, %rd2;
st.global.u32 [%rd12], %r6;
ret;""",
        params=".param .u64 idx, .param .u64 on, .param .u64 x, .param .u64 out, .param .u32 step",
        regs=".reg .pred %p<5>;\n.reg .b32 %r<20>;\n.reg .b64 %rd<13>;",
        globals_=".shared .align 4 .b8 tile[1024];" if shared else "",
    )


STEPPING = {space: _stepping(space) for space in ("global", "shared")}
_MOVES = st.one_of(st.just([15] * 8), st.just([0] * 8), st.lists(st.integers(0, 15), min_size=8, max_size=8))


@pytest.mark.parametrize("space", ["global", "shared"])
@settings(max_examples=30, deadline=None)
@given(st.lists(_group, min_size=8, max_size=8),
       st.sampled_from([[[15] * 8] * 8, [[5] * 8] * 8]) | st.lists(_MOVES, min_size=8, max_size=8),
       st.sampled_from([1, 4, -3, 8, -8, 16, 0, -16, 64]))
def test_a_pointer_stepping_through_a_loop_reads_what_the_interpreter_reads(space, groups, moves, step):
    """The remembered span of a pointer that a loop advances by a uniform step (``add r, r, s``) moves
    with it (every lane stepping in every pass, or in every other one); where only some lanes step
    (a guarded add), or the step takes some lanes below the start of ``x``, the compiled tier
    reads, or reports, what the interpreter does."""
    idx = np.array([i + 20 for g in groups for i in g], np.int32)  # element 20 + 0..62: -16 or 64 leave x
    on = np.array([m for one in moves for m in one], np.uint32)
    x = np.arange(1, 257, dtype=np.uint32) * np.uint32(2654435761)
    results = []
    for tier in ("compiled", "interp"):
        out = np.zeros(64, np.uint32)
        be = backend(STEPPING[space], tier=tier)
        arrays = [idx, on, x, out]
        kinds = [ptr("i32"), ptr("u32"), ptr("u32"), ptr("u32"), scalar("i32")]
        results.append(_outcome(be, kinds, [*(a.ctypes.data for a in arrays), step], arrays, out))
        assert tier == "interp" or be.compiled_tier.why_interpreted("k") is None
    assert results[0] == results[1]


# every .ftz float form a CUDA fast-math or libdevice build emits, with operands and results that
# are subnormal (flushed: zero of the same sign) or not, and the approximate functions
FLUSHED = r"""
extern "C" __global__ void flushed(const float* x, const float* y, const double* w, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float a = x[i], b = y[i], r[18]; double d = w[i], q; unsigned p;
  asm("add.ftz.f32 %0, %1, %2;" : "=f"(r[0]) : "f"(a), "f"(b));
  asm("sub.ftz.f32 %0, %1, %2;" : "=f"(r[1]) : "f"(a), "f"(b));
  asm("mul.ftz.f32 %0, %1, %2;" : "=f"(r[2]) : "f"(a), "f"(b));
  asm("fma.rn.ftz.f32 %0, %1, %2, %1;" : "=f"(r[3]) : "f"(a), "f"(b));
  asm("div.approx.ftz.f32 %0, %1, %2;" : "=f"(r[4]) : "f"(a), "f"(b));
  asm("min.ftz.f32 %0, %1, %2;" : "=f"(r[5]) : "f"(a), "f"(b));
  asm("max.ftz.f32 %0, %1, %2;" : "=f"(r[6]) : "f"(a), "f"(b));
  asm("abs.ftz.f32 %0, %1;" : "=f"(r[7]) : "f"(a));
  asm("neg.ftz.f32 %0, %1;" : "=f"(r[8]) : "f"(a));
  asm("sqrt.approx.ftz.f32 %0, %1;" : "=f"(r[9]) : "f"(a));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r[10]) : "f"(a));
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r[11]) : "f"(a));
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(r[12]) : "f"(a));
  asm("sin.approx.ftz.f32 %0, %1;" : "=f"(r[13]) : "f"(a));
  asm("cos.approx.f32 %0, %1;" : "=f"(r[14]) : "f"(a));
  asm("tanh.approx.f32 %0, %1;" : "=f"(r[15]) : "f"(a));
  asm("{ .reg .pred t; setp.lt.ftz.f32 t, %1, %2; selp.u32 %0, 1, 0, t; }" : "=r"(p) : "f"(a), "f"(b));
  r[16] = (float)p;
  asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(q) : "d"(d));
  r[17] = (float)q;
  for (int k = 0; k < 18; k++) out[18 * i + k] = r[k];
}
"""
# subnormal f32s, the least normal one, zeros, products that underflow, NaN, infinities, and ex2's
# and lg2's edges (ex2 of -130 is subnormal)
FLUSH_VALUES = np.array([1e-40, -1e-40, 1.17549435e-38, -1.17549435e-38, 5e-39, 0.0, -0.0, 1e-20, -1e-20, 3.0,
                         -2.5, 0.5, -130.0, 128.0, np.nan, np.inf, -np.inf, 1e38, 7.0, 1e-45], np.float32)


def test_flush_to_zero_forms_and_approximate_functions_are_bit_identical():
    rng = np.random.default_rng(11)
    pairs = len(FLUSH_VALUES)
    x = np.concatenate([np.repeat(FLUSH_VALUES, pairs), rng.normal(0, 30, 600).astype(np.float32)])
    y = np.concatenate([np.tile(FLUSH_VALUES, pairs), rng.normal(0, 30, 600).astype(np.float32)])
    w = x.astype(np.float64) * 1e-300  # f64 subnormals too: .ftz leaves f64 alone
    n = len(x)
    same(*both(cuda_tiers(FLUSHED), "flushed", lambda: [x, y, w, np.zeros(18 * n, np.float32), n],
                 grid=-(-n // 128), block=128))


FAST_MATH = r"""
extern "C" __global__ void fast(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  y[6 * i] = expf(v) / (1.0f + v * v);
  y[6 * i + 1] = sinf(v) * cosf(v);
  y[6 * i + 2] = logf(fabsf(v)) + log2f(v);
  y[6 * i + 3] = tanhf(v) + sqrtf(fabsf(v));
  y[6 * i + 4] = v < 2.0f ? fmaxf(v, 0.5f) : powf(v, 0.3f);
  y[6 * i + 5] = 1.0f / (1.0f + __expf(-v));
}
"""


def test_a_fast_math_cuda_kernel_compiles_and_matches_the_interpreter():
    # --use_fast_math: .ftz on all f32 arithmetic, approximate sin/cos/ex2/lg2/tanh, approximate divisions
    modules = tiers(nvrtc.compile(FAST_MATH, arch="sm_90", output="ptx", options=["--use_fast_math"]))
    x = np.concatenate([FLUSH_VALUES, np.random.default_rng(12).normal(0, 20, 3000).astype(np.float32)])
    same(*both(modules, "fast", lambda: [x, np.zeros(6 * len(x), np.float32), len(x)],
                 grid=-(-len(x) // 256), block=256))


def test_numba_math_functions_compile_and_match_the_interpreter():
    # libdevice's expf, tanhf and logf use ex2.approx.ftz.f32 and rcp.approx.ftz, in f64 too; its sinf
    # and cosf reduce large arguments with integer carry chains (madc.hi.cc, addc)
    numba = pytest.importorskip("ptxbridge.numba")
    import math

    from numba import cuda

    def activations(x, y):
        i = cuda.grid(1)
        if i < x.size:
            v = x[i]
            y[i] = v / (1 + math.exp(-v)) + math.tanh(v) + math.log(1 + abs(v))

    def waves(x, y):
        i = cuda.grid(1)
        if i < x.size:
            y[i] = math.sin(x[i] * 1e4) - math.cos(x[i])

    kernels = [("act", activations, t) for t in ("float32", "float64")] + [("waves", waves, "float32")]
    modules = tiers(*(numba.compile(f, f"void({t}[::1], {t}[::1])", arch="sm_90", name=f"{stem}_{t}")
                      for stem, f, t in kernels))
    rng = np.random.default_rng(13)
    for stem, _, t in kernels:
        x = np.concatenate([FLUSH_VALUES.astype(t), rng.normal(0, 10, 2000).astype(t)])
        same(*both(modules, f"{stem}_{t}", lambda x=x: [x, np.zeros_like(x)], grid=-(-len(x) // 128),
                   block=128))


def _directed_fma(mode: str) -> str:
    return kernel_ptx(
        f"""
mov.u32 %r1, %tid.x;
mov.u32 %r2, %ctaid.x;
mad.lo.u32 %r1, %r2, 32, %r1;
mul.wide.u32 %rd2, %r1, 4;
ld.param.u64 %rd1, [x];
add.s64 %rd3, %rd1, %rd2;
ld.global.f32 %f1, [%rd3];
ld.param.u64 %rd1, [y];
add.s64 %rd3, %rd1, %rd2;
ld.global.f32 %f2, [%rd3];
ld.param.u64 %rd1, [z];
add.s64 %rd3, %rd1, %rd2;
ld.global.f32 %f3, [%rd3];
fma.{mode}.f32 %f4, %f1, %f2, %f3;
ld.param.u64 %rd1, [out];
add.s64 %rd3, %rd1, %rd2;
st.global.f32 [%rd3], %f4;
ret;""",
        params=".param .u64 x, .param .u64 y, .param .u64 z, .param .u64 out",
        regs=".reg .b32 %r<3>;\n.reg .f32 %f<5>;\n.reg .b64 %rd<4>;",
    )


@pytest.mark.parametrize("mode", ["rm", "rp", "rz"])
def test_directed_rounding_fma_matches_the_interpreter(mode):
    """fma.rm/.rp/.rz.f32 (libdevice's expf rounds down with one) on corner values, exact cancellations
    (signed zeros), products that underflow, overflows and infinities.  Which of two different NaN
    operands comes out is left open (by LLVM, NumPy and PTX alike), so no lane has two."""
    rng = np.random.default_rng(14)
    n = 32 * 600
    picks = rng.integers(0, 4, (3, n))
    pools = [rng.choice(FLUSH_VALUES, (3, n)), rng.normal(0, 1, (3, n)), rng.normal(0, 1e-20, (3, n)),
             rng.integers(-100, 100, (3, n))]
    x, y, z = np.choose(picks, pools).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):  # inf * 0 and f32 overflows, on purpose
        z = np.where(rng.random(n) < 0.3, -(x.astype(np.float64) * y), z).astype(np.float32)  # exact cancels
        z[np.isnan(z) | np.isnan(np.float64(x) * y)] = 1.0
    ptx_both(_directed_fma(mode), [ptr("f32")] * 4, [x, y, z], np.zeros(n, np.float32), grid=n // 32,
             block=32)


LOCAL_LEFTOVER = kernel_ptx(
    """
.local .align 4 .b8 frame[16];
mov.u32 %r1, %tid.x;
mov.u32 %r2, %ctaid.x;
mov.u32 %r3, %ntid.x;
mad.lo.s32 %r4, %r2, %r3, %r1;
and.b32 %r5, %r1, 3;
shl.b32 %r5, %r5, 2;
mov.u64 %rd1, frame;
cvt.u64.u32 %rd2, %r5;
add.s64 %rd1, %rd1, %rd2;
ld.local.u32 %r6, [%rd1];
ld.param.u64 %rd3, [out];
mul.wide.u32 %rd4, %r4, 4;
add.s64 %rd3, %rd3, %rd4;
st.global.u32 [%rd3], %r6;
setp.ne.u32 %p1, %r2, 1;
@%p1 bra DONE;
st.local.u32 [%rd1], 7;
DONE:
ret;""",
    regs=".reg .b32 %r<7>; .reg .b64 %rd<5>; .reg .pred %p<2>;",
)


@pytest.mark.parametrize("block", [32, 24])
def test_local_memory_a_block_wrote_is_zero_again_for_the_next(block):
    # the compiled tier zeroes local memory only once a block has touched it: block 1 writes it
    out = ptx_both(LOCAL_LEFTOVER, [ptr("u32")], [], np.full(4 * block, 9, np.uint32), grid=4, block=block)
    assert not out.any()


DIVERGENT_BARRIERS = kernel_ptx(
    """
mov.u32 %r0, %tid.x;
and.b32 %r1, %r0, 1;
shl.b32 %r2, %r0, 2;
mov.u32 %r3, box;
add.u32 %r3, %r3, %r2;
setp.ne.u32 %p1, %r1, 0;
@%p1 bra ODD;
st.shared.u32 [%r3], %r0;
bar.sync 0;
mov.u32 %r8, 1000;
bra.uni AFTER;
ODD:
add.u32 %r4, %r0, 100;
st.shared.u32 [%r3], %r4;
bar.sync 0;
mov.u32 %r8, 2000;
AFTER:
xor.b32 %r5, %r0, 1;
shl.b32 %r5, %r5, 2;
mov.u32 %r6, box;
add.u32 %r6, %r6, %r5;
ld.shared.u32 %r7, [%r6];
add.u32 %r7, %r7, %r8;
""" + stored_per_thread("%r7"),
    params=".param .u64 out",
    regs=".reg .pred %p<2>;\n.reg .b32 %r<9>;\n.reg .b64 %rd<3>;",
    globals_=".shared .align 4 .b8 box[512];",
)


@pytest.mark.parametrize("block", [32, 64, 128])
def test_lanes_that_reach_a_barrier_apart_each_resume_after_their_own(block):
    """Even lanes wait at one ``bar.sync`` while odd lanes still run to another: a warp parks whole
    only when no lane waits elsewhere, so each resumes after its own barrier and reads its
    neighbour's value."""
    out = ptx_both(DIVERGENT_BARRIERS, [ptr("u32")], [], np.zeros(block, np.uint32), grid=2, block=block)
    lane = np.arange(block)
    neighbour = lane ^ 1
    after = np.where(lane & 1, 2000, 1000)  # what each lane's own barrier goes on to
    written = np.where(neighbour & 1, neighbour + 100, neighbour)
    np.testing.assert_array_equal(out, (written + after).astype(np.uint32))
