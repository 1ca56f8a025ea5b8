"""The compiled tier's uniform and affine registers (kept as one scalar a warp, ``base + lane * k``):
generated index arithmetic over the thread index on both tiers, in one block and across a
divergent branch, and the index code numba and CUDA C++ write, with launches whose block is a
multiple of 32 (where ``%tid.x`` follows the lane) and launches whose block is not."""

from __future__ import annotations

import numpy as np
import pytest
from _emulator import backend, kernel_ptx, launch, ptr, scalar, stored_per_thread
from _tiers import both, cuda_tiers, ptx_both, same, tiers
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import cuda

from ptxbridge.abi.errors import MemoryAccessError
from ptxbridge.loaders.emulator.compiled.flow import blocks_of
from ptxbridge.loaders.emulator.compiled.inline import flatten
from ptxbridge.loaders.emulator.compiled.lanes import UNIFORM, lane_offsets, warp_shape
from ptxbridge.loaders.emulator.liveness import block_local
from ptxbridge.loaders.emulator.machine import BRA, PLAIN

_R, _RD = 8, 8  # the chain's registers %r0..%r7 and %rd0..%rd7 (%r7 is never written: it reads 0)
_TID_Y = 10  # %r10 holds %tid.y (never written by a chain)
_IMM32 = st.sampled_from(["0", "1", "4", "31", "32", "-1", "-16", "2147483647", "-2147483648", "1024"])
_IMM64 = st.sampled_from(["0", "1", "8", "63", "-1", "-32", "1099511627776", "9223372036854775807"])


_CMP32, _CMP64 = (
    st.sampled_from([f"{c}.s{w}" for c in ("eq", "ne", "lt", "le", "gt", "ge")]
                    + [f"{c}.u{w}" for c in ("eq", "ne", "lo", "ls", "hi", "hs", "lt", "ge")])
    for w in (32, 64)
)


def _r(draw: st.DrawFn, written: int) -> str:
    return f"%r{draw(st.sampled_from([*range(written), _R - 1, _TID_Y]))}"


def _rd(draw: st.DrawFn) -> str:
    return f"%rd{draw(st.integers(0, _RD - 1))}"


@st.composite
def _instruction(draw: st.DrawFn, written: int) -> str:
    """One instruction of index arithmetic (``written``: the 32-bit registers written so far)."""
    a32, b32 = _r(draw, written), _r(draw, written) if draw(st.booleans()) else draw(_IMM32)
    a64, b64 = _rd(draw), _rd(draw) if draw(st.booleans()) else draw(_IMM64)
    d32, d64 = f"%r{draw(st.integers(0, min(written, _R - 2)))}", _rd(draw)
    choices = [
        (f"{draw(st.sampled_from(['add', 'sub']))}.s32 {d32}, {a32}, {b32};", False),
        (f"mul.lo.s32 {d32}, {a32}, {b32};", False),
        (f"mad.lo.s32 {d32}, {a32}, {b32}, {_r(draw, written)};", False),
        (f"shl.b32 {d32}, {a32}, {draw(st.integers(0, 31))};", False),
        (f"shr.{draw(st.sampled_from(['s32', 'u32']))} {d32}, {a32}, {draw(st.integers(0, 31))};", False),
        (f"and.b32 {d32}, {a32}, {draw(st.sampled_from(['1023', '31', '-4', '65535']))};", False),
        (f"neg.s32 {d32}, {a32};", False),
        (f"cvt.u32.u64 {d32}, {a64};", False),
        (f"{draw(st.sampled_from(['add', 'sub']))}.s64 {d64}, {a64}, {b64};", True),
        (f"mul.lo.s64 {d64}, {a64}, {b64};", True),
        (f"shl.b64 {d64}, {a64}, {draw(st.integers(0, 63))};", True),
        (f"shr.{draw(st.sampled_from(['s64', 'u64']))} {d64}, {a64}, {draw(st.integers(0, 63))};", True),
        (f"and.b64 {d64}, {a64}, {draw(st.sampled_from(['4095', '-8', '9223372036854775807']))};", True),
        (f"{draw(st.sampled_from(['cvt.s64.s32', 'cvt.u64.u32']))} {d64}, {a32};", True),
        (f"mul.wide.{draw(st.sampled_from(['s32', 'u32']))} {d64}, {a32}, {b32};", True),
        (f"mad.wide.s32 {d64}, {a32}, {b32}, {a64};", True),
        (f"neg.s64 {d64}, {a64};", True),
        (f"setp.{draw(_CMP32)} %p0, {a32}, {b32};\nselp.u32 {d32}, 1, 0, %p0;", False),
        (f"setp.{draw(_CMP64)} %p0, {a64}, {b64};\nselp.u64 {d64}, 1, 0, %p0;", True),
    ]
    return draw(st.sampled_from(choices))[0]


@st.composite
def _program(draw: st.DrawFn) -> list[str]:
    """A chain over ``%tid.x``, ``%tid.y``, ``%ctaid.x``, ``%ntid.x``, ``%laneid`` and two parameters."""
    lines, written = [], 7  # %r0..%r6 below
    for _ in range(draw(st.integers(3, 14))):
        lines.append(draw(_instruction(written)))
    return lines


def _kernel(chain: list[str], split: int | None) -> str:
    """Every register of ``chain`` stored per thread (8 bytes each); ``split``: lanes whose
    ``%tid.x`` is below it skip ahead past the chain's second half."""
    head = [
        "mov.u32 %r0, %tid.x;", "mov.u32 %r1, %ctaid.x;", "mov.u32 %r2, %ntid.x;", "mov.u32 %r3, %laneid;",
        "ld.param.u32 %r4, [u];", "ld.param.u64 %rd0, [v];", "cvt.u64.u32 %rd1, %r4;",
        # %tid.y, and the thread's linear index (registers not written before read hold 0)
        "mov.u32 %r10, %tid.y;", "mov.u32 %r9, %ntid.y;", "mul.lo.s32 %r9, %r9, %r2;",
        "mad.lo.s32 %r8, %r10, %r2, %r0;", "mad.lo.s32 %r8, %r1, %r9, %r8;",
    ]
    half = len(chain) // 2 if split is not None else len(chain)
    body = [*head, *chain[:half]]
    if split is not None:
        body += [f"setp.lt.u32 %p1, %r0, {split};", "@%p1 bra SKIP;", *chain[half:]]
    body += ["ld.param.u64 %rd9, [out];", f"mul.wide.u32 %rd10, %r8, {8 * (_R + _RD)};",
             "add.s64 %rd9, %rd9, %rd10;"]
    body += [f"st.global.u32 [%rd9+{8 * k}], %r{k};" for k in range(_R)]
    body += [f"st.global.u64 [%rd9+{8 * (_R + k)}], %rd{k};" for k in range(_RD)]
    body += ["SKIP:", "ret;"] if split is not None else ["ret;"]
    return kernel_ptx("\n".join(body), ".param .u32 u, .param .u64 v, .param .u64 out",
                      ".reg .b32 %r<11>; .reg .b64 %rd<11>; .reg .pred %p<2>;")


_PARAMS = st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1))
# (block, grid): 1-D blocks a multiple of 32 or with a last partial warp, 2-D blocks whose warps hold
# whole rows (the thread index follows the lane by constants), and one whose second warp wraps a row
_SHAPES = [(64, 2), (32, 3), (48, 2), ((16, 4), 2), ((8, 8), 1), ((4, 8), 2), ((16, 3), 1), ((48, 2), 1)]


@settings(max_examples=60, deadline=None)
@given(_program(), _PARAMS, st.sampled_from(_SHAPES), st.sampled_from([None, 0, 13, 40]))
def test_generated_index_arithmetic_over_the_thread_index_matches_the_interpreter(chain, params, shape,
                                                                                   split):
    block, grid = shape
    _match(_kernel(chain, split), params, grid, block)


def _match(ptx: str, params: tuple[int, int], grid: int, block: int | tuple[int, int]) -> None:
    """Kernel ``k`` of :func:`_kernel` on both tiers: the registers every thread stored, bit for bit."""
    outs = []
    threads = block if isinstance(block, int) else block[0] * block[1]
    for tier in ("compiled", "interp"):
        be = backend(ptx, tier=tier)
        out = np.zeros((grid * threads, _R + _RD), np.uint64)
        launch(be, "k", [scalar("u32"), scalar("u64"), ptr("u64")], [*params, out.ctypes.data], grid=grid,
               block=block, arrays=[out])
        outs.append(out)
        if tier == "compiled":
            assert be.compiled_tier.why_interpreted("k") is None
    assert outs[0].tobytes() == outs[1].tobytes()


EDGES = [
    ["shr.u32 %r5, %r0, 3;"],  # lanes of a warp shift to different values
    ["shr.u32 %r5, %r0, 10;", "shl.b32 %r6, %r5, 4;"],  # ... and to one
    ["add.s32 %r5, %r0, 2147483632;", "cvt.s64.s32 %rd2, %r5;"],  # a sign extension across the wrap
    ["add.s32 %r5, %r0, -40;", "shr.s32 %r6, %r5, 31;", "cvt.u64.u32 %rd2, %r5;"],  # a sign that differs
    ["sub.s32 %r5, %r0, 20;", "mul.wide.s32 %rd2, %r5, 4;", "mul.wide.u32 %rd3, %r5, 8;"],
    ["and.b32 %r5, %r0, 15;", "and.b32 %r6, %r0, 1023;"],  # a mask that cuts the range, one that does not
    # read before its write: 0 then, not 100 (which would make the shifted sign one value in a warp)
    ["add.s32 %r6, %r7, %r0;", "mov.u32 %r7, 100;", "sub.s32 %r5, %r6, 40;", "shr.s32 %r4, %r5, 31;"],
    ["neg.s32 %r5, %r0;", "neg.s64 %rd2, %rd1;"],
    ["mov.u32 %r6, 1023;", "sub.s32 %r5, %r6, %r0;", "cvt.s64.s32 %rd2, %r5;", "mul.wide.s32 %rd3, %r5, 4;"],
    ["mad.lo.s32 %r5, %r0, 3, %r4;", "shl.b32 %r6, %r5, 30;", "cvt.u64.u32 %rd2, %r6;"],
    ["cvt.u64.u32 %rd2, %r3;", "shl.b64 %rd3, %rd2, 62;", "shr.s64 %rd4, %rd3, 63;", "neg.s64 %rd5, %rd4;"],
    ["mul.wide.u32 %rd2, %r0, %r4;", "mad.wide.s32 %rd3, %r0, -3, %rd0;", "cvt.u32.u64 %r5, %rd3;"],
    ["mov.u32 %r5, %r0;", "mov.u32 %r5, %r1;"],  # two writes: a stride, then none
    # compares of a register that follows the lane against one value: lanes' values that wrap within
    # the warp (signed, unsigned), the one value on either side, negative offsets, extreme immediates
    ["add.s32 %r5, %r0, 2147483632;", "setp.lt.s32 %p0, %r5, %r4;", "selp.u32 %r6, 1, 0, %p0;"],
    ["add.s32 %r5, %r0, -16;", "setp.hs.u32 %p0, %r5, 4294967290;", "selp.u32 %r6, 1, 0, %p0;"],
    ["setp.lt.s32 %p0, %r4, %r0;", "selp.u32 %r6, 1, 0, %p0;", "setp.ne.s32 %p0, %r0, 17;",
     "selp.u32 %r5, 1, 0, %p0;"],
    ["neg.s32 %r5, %r0;", "setp.le.s32 %p0, %r5, -20;", "selp.u32 %r6, 1, 0, %p0;"],
    ["cvt.u64.u32 %rd2, %r0;", "add.s64 %rd3, %rd2, %rd0;", "setp.hs.u64 %p0, %rd3, %rd0;",
     "selp.u64 %rd4, 1, 0, %p0;", "setp.gt.s64 %p0, %rd3, %rd0;", "selp.u64 %rd5, 1, 0, %p0;"],
    ["cvt.u64.u32 %rd2, %r0;", "setp.lt.s64 %p0, %rd2, -9223372036854775808;", "selp.u64 %rd3, 1, 0, %p0;",
     "setp.ls.u64 %p0, %rd2, 18446744073709551615;", "selp.u64 %rd4, 1, 0, %p0;"],
]


@pytest.mark.parametrize("chain", EDGES, ids=range(len(EDGES)))
@pytest.mark.parametrize("split", [None, 13])
@pytest.mark.parametrize("block", [64, (16, 4)])
def test_index_arithmetic_at_the_edges_of_its_rules_matches_the_interpreter(chain, split, block):
    for params in ((7, 2**63 + 5), (2**32 - 3, 1)):
        _match(_kernel(chain, split), params, grid=2, block=block)


def _saxpy(a, x, y, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = a * x[i] + y[i]


def _saxpy_facts(shaped: bool) -> tuple[dict[str, tuple[int, ...]], list[str]]:
    """The lane facts of numba-cuda's saxpy and its PTX."""
    import ptxbridge
    import ptxbridge.numba as pn

    art = pn.compile(_saxpy, "void(float32, float32[::1], float32[::1], float32[::1])", arch="sm_90")
    program = ptxbridge.load([art], "cpu").backend.program
    fn = flatten(program.functions, program.symbols, next(iter(program.entries))).function
    widths = {n: 1 if z.dtype.kind == "b" else 8 * z.dtype.itemsize for n, z in fn.zeros.items()}
    steps = fn.steps
    local = block_local([s.ins for s in steps], [s.kind == PLAIN for s in steps],
                        [s.target for s in steps if s.kind == BRA], list(widths))
    shape = warp_shape((256, 1, 1)) if shaped else None
    return lane_offsets(fn, blocks_of(fn), local, widths, shape).offsets, [s.ins.text for s in steps]


def test_numbas_array_indexing_is_one_scalar_a_warp_and_its_accesses_consecutive():
    facts, text = _saxpy_facts(shaped=True)
    accesses = [line for line in text if line.startswith(("ld.global", "st.global"))]
    addresses = [line.split("[")[1].split("]")[0] for line in accesses]
    consecutive = tuple(range(0, 128, 4))  # f32 per lane
    assert len(addresses) == 3 and all(facts[a] == consecutive for a in addresses)
    # the wraparound of a negative index: the sign of an index known nonnegative is 0 in every lane
    shifts = [line for line in text if line.startswith("shr.s64 ") and line.endswith(" 63")]
    signs = [line.split()[1].rstrip(",") for line in shifts]
    assert signs and all(facts[s] == UNIFORM for s in signs)
    unshaped, _ = _saxpy_facts(shaped=False)  # %tid.x does not follow the lane: no affine registers
    assert all(v == UNIFORM for v in unshaped.values()) and all(unshaped[s] == UNIFORM for s in signs)


def _shifted(a, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i - 16] + a[-1 - i]  # negative indices wrap around, some lanes of a warp only


@pytest.mark.parametrize("block", [32, 64, 48])
def test_numba_indices_whose_sign_differs_across_a_warp_wrap_around_as_numpy(block):
    import ptxbridge.numba as pn

    art = pn.compile(_shifted, "void(float32[::1], float32[::1])", arch="sm_90")
    pair = tiers(art)
    a = np.arange(96, dtype=np.float32)
    compiled, interpreted = both(pair, "_shifted", lambda: [a, np.zeros(96, np.float32)],
                                 grid=-(-96 // block), block=block)
    same(compiled, interpreted)
    i = np.arange(96)
    np.testing.assert_array_equal(compiled[1], a[i - 16] + a[-1 - i])


REVERSE = r'''
extern "C" __global__ void reverse_axpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[n - 1 - i] + y[i];
}
extern "C" __global__ void strided(const int* in, int* out, int n, int stride) {
    unsigned i = (blockIdx.x * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[(i * stride) % n] + (int)(threadIdx.x >> 3) + (int)(threadIdx.y * 7);
}
'''


@pytest.mark.parametrize("block", [(32, 1), (64, 1), (40, 1), (32, 4)])
def test_cuda_index_arithmetic_with_a_block_of_any_shape_matches(block):
    pair = cuda_tiers(REVERSE)
    n = 1000
    x = np.random.default_rng(1).random(n, np.float32)
    grid = -(-n // block[0])
    compiled, interpreted = both(pair, "reverse_axpy", lambda: [np.float32(3.0), x, np.ones(n, np.float32),
                                                                np.int32(n)], grid=grid, block=block[0])
    same(compiled, interpreted)
    np.testing.assert_array_equal(compiled[2], np.float32(3.0) * x[::-1] + np.float32(1.0))
    data = np.arange(n * 4, dtype=np.int32) * 3
    threads = block[0] * block[1]
    compiled, interpreted = both(pair, "strided",
                                 lambda: [data, np.zeros(n * 4, np.int32), np.int32(n * 4), np.int32(7)],
                                 grid=-(-n * 4 // threads), block=block)
    same(compiled, interpreted)
    i = np.arange(n * 4)
    tid = i % threads
    expected = data[(i * 7) % (n * 4)] + (tid % block[0] >> 3) + (tid // block[0]) * 7
    np.testing.assert_array_equal(compiled[1], expected)


def test_a_shuffle_of_a_register_that_follows_the_lane_reads_each_lanes_value():
    body = """
mov.u32 %r1, %laneid;
add.u32 %r2, %r1, 5;
shfl.sync.idx.b32 %r3, %r2, 3, 31, -1;
mov.u32 %r0, %tid.x;
""" + stored_per_thread("%r3")
    ptx = kernel_ptx(body, ".param .u64 out", ".reg .b32 %r<4>; .reg .b64 %rd<3>;")
    out = ptx_both(ptx, [ptr("u32")], [], np.zeros(64, np.uint32), grid=1, block=64)
    np.testing.assert_array_equal(out, np.full(64, 8, np.uint32))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 70), st.integers(1, 9), st.integers(1, 4))
def test_a_warp_shape_is_how_every_warps_thread_index_follows_its_lanes(bx, by, bz):
    threads = bx * by * bz
    index = [(t % bx, t // bx % by, t // (bx * by)) for t in range(threads)]
    warps = [  # per warp, each running lane's thread index less the warp's first
        [tuple(index[first + lane][axis] - index[first][axis] for axis in range(3))
         for lane in range(min(32, threads - first))]
        for first in range(0, threads, 32)
    ]
    alike = all(lanes == warps[0][: len(lanes)] for lanes in warps)
    shape = warp_shape((bx, by, bz))
    assert (shape is not None) == alike
    if shape is not None:
        assert all(lanes == [tuple(shape[axis][lane] for axis in range(3)) for lane in range(len(lanes))]
                   for lanes in warps)
    if bx % 32 == 0 or (32 % bx == 0 and (bx * by) % 32 == 0):  # whole rows, or warps within a row
        assert shape is not None


TILES = r'''
extern "C" __global__ void rows_and_columns(const float* in, float* out, int n) {
  __shared__ float t[32][32];
  int tx = threadIdx.x, ty = threadIdx.y;
  int x = blockIdx.x * blockDim.x + tx, y = blockIdx.y * blockDim.y + ty;
  bool inside = x < n && y < n;
  t[ty][tx] = inside ? in[y * n + x] : 0.0f;
  __syncthreads();
  float s = 0.0f;
  for (int k = 0; k < blockDim.x; ++k) s += t[ty][k] * (k + 1);  // one element a row of lanes
  for (int k = 0; k < blockDim.y; ++k) s += t[k][tx];            // a row's consecutive elements
  if (inside) out[y * n + x] = s;
}
extern "C" __global__ void two_rows(const float* in, float* out) {
  int tx = threadIdx.x, ty = threadIdx.y;
  out[ty * 16 + tx] = in[ty * 64 + tx];  // rows 256 bytes apart
}
extern "C" __global__ void three_loads(const float* in, float* out) {
  int tx = threadIdx.x, ty = threadIdx.y;
  const float* p = in + ty * 64 + tx;    // three loads through one register: one check for all
  out[ty * 16 + tx] = p[0] + p[16] * 2.0f + p[48] * 4.0f;
}
'''


@pytest.mark.parametrize("block", [(16, 16), (8, 8), (16, 4), (32, 4), (4, 8), (16, 3), (2, 16)])
def test_tile_rows_and_columns_read_by_blocks_of_whole_rows_match_numpy(block):
    """A 16-wide block's ``t[ty][k]`` is two elements a warp, ``t[k][tx]`` one run of 16 twice: both
    load as the lanes' constants say; a 4-wide one's row reads eight elements (moved otherwise)."""
    pair = cuda_tiers(TILES)
    n = 40  # blocks at the edges have threads outside the matrix
    a = np.random.default_rng(2).random((n, n), np.float32)
    grid = (-(-n // block[0]), -(-n // block[1]))
    make = lambda: [a, np.zeros((n, n), np.float32), np.int32(n)]  # noqa: E731
    compiled, interpreted = both(pair, "rows_and_columns", make, grid=grid, block=block)
    same(compiled, interpreted)
    bx, by = block
    expected = np.zeros((n, n), np.float32)
    padded = np.zeros((grid[1] * by, grid[0] * bx), np.float32)
    padded[:n, :n] = a
    for y in range(n):
        for x in range(n):
            r0, c0 = y - y % by, x - x % bx
            row = padded[y, c0:c0 + bx].astype(np.float64) @ np.arange(1, bx + 1)
            expected[y, x] = row + padded[r0:r0 + by, x].astype(np.float64).sum()
    np.testing.assert_allclose(compiled[1], expected, rtol=1e-5)  # the sums are fused as NVRTC fuses


@pytest.mark.parametrize(("kernel", "short"), [("two_rows", 72), ("three_loads", 120)])
def test_a_row_load_past_its_argument_gives_the_interpreters_report(kernel, short):
    pair = cuda_tiers(TILES)
    messages = []
    data, out = np.zeros(short, np.float32), np.zeros(32, np.float32)  # the reports name their addresses
    for module in pair:
        with pytest.raises(MemoryAccessError) as raised:
            getattr(module, kernel)(data, out, grid=1, block=(16, 2))
        messages.append(str(raised.value))
    assert pair[0].backend.compiled_tier.why_interpreted(kernel) is None
    assert messages[0] == messages[1]
    assert "overruns argument 'in'" in messages[0] and "thread (8, 1, 0)" in messages[0], messages[0]
    whole = np.arange(128, dtype=np.float32)
    getattr(pair[0], kernel)(whole, out, grid=1, block=(16, 2))
    p = whole[np.r_[np.arange(16), np.arange(64, 80)]]
    expected = p if kernel == "two_rows" else p + whole[np.r_[np.arange(16), np.arange(64, 80)] + 16] * 2 \
        + whole[np.r_[np.arange(16), np.arange(64, 80)] + 48] * 4
    np.testing.assert_array_equal(out, expected)


CONVERGENCE = r'''
extern "C" __global__ void walk(const int* in, int* out, int steps, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int* p = in + threadIdx.x;        // moves in a loop all lanes run together ...
  int s = 0;
  for (int k = 0; k < steps; ++k, p += 32) s += *p;
  const int* q = in + threadIdx.x;        // ... and in one whose trip count differs by lane
  for (int k = 0; k < (threadIdx.x & 7); ++k, q += 32) s += *q * 3;
  s += *q;                                 // where each lane's loop left it
  int k = threadIdx.x;                     // an index a lane's data moves: lanes leave apart
  while (k < 250 && in[k] % 5 != 0) k += 32;
  s += k * 1000;
  int j = threadIdx.x;
  if (threadIdx.x % 3 == 0) j = 5 * threadIdx.x + 1;  // written on a divergent path
  if (i < n) out[i] = s + in[j % 64];
}
'''


@pytest.mark.parametrize("block", [32, 64, (16, 2)])
def test_registers_moved_in_converged_and_divergent_loops_match_numpy(block):
    pair = cuda_tiers(CONVERGENCE)
    data = np.arange(32 * 9, dtype=np.int32) * 7 - 100
    n = 64
    bx = block if isinstance(block, int) else block[0]  # a 2-D block's rows write the same elements
    compiled, interpreted = both(pair, "walk", lambda: [data, np.zeros(n, np.int32), np.int32(5),
                                                        np.int32(n)], grid=n // bx, block=block)
    same(compiled, interpreted)
    i = np.arange(n)
    tx = i % bx
    expected = sum(data[tx + 32 * k] for k in range(5))
    expected += sum(np.where(k < (tx & 7), data[tx + 32 * k] * 3, 0) for k in range(8))
    expected += data[tx + 32 * (tx & 7)]
    k = tx.copy()
    while ((k < 250) & (data[np.minimum(k, 250)] % 5 != 0)).any():
        k = np.where((k < 250) & (data[np.minimum(k, 250)] % 5 != 0), k + 32, k)
    expected += k * 1000
    j = np.where(tx % 3 == 0, 5 * tx + 1, tx)
    np.testing.assert_array_equal(compiled[1], expected + data[j % 64])


def test_a_block_reached_only_through_lanes_that_diverged_is_not_run_by_all_of_them():
    """``MID`` follows a divergent branch by an unconditional one: only the lanes that branched run
    it, so the value it writes is not the warp's (the others read 0 at ``SKIP``)."""
    body = """
mov.u32 %r0, %tid.x;
setp.lt.u32 %p1, %r0, 13;
@%p1 bra SKIP;
bra.uni MID;
MID:
mov.u32 %r1, 5;
SKIP:
""" + stored_per_thread("%r1")
    ptx = kernel_ptx(body, ".param .u64 out", ".reg .b32 %r<2>; .reg .b64 %rd<3>; .reg .pred %p<2>;")
    out = ptx_both(ptx, [ptr("u32")], [], np.zeros(64, np.uint32), grid=1, block=64)
    np.testing.assert_array_equal(out, np.where(np.arange(64) < 13, 0, 5).astype(np.uint32))


def test_a_kernel_is_compiled_once_for_each_warp_shape_it_is_launched_with():
    """The tile kernel over 16x16, 256x1 and 48x2 blocks (the last's warps differ: no shape), and
    16x16 again: three variants, the first reused, every launch as the interpreter's."""
    pair = cuda_tiers(TILES)
    n = 32
    a = np.random.default_rng(3).random((n, n), np.float32)
    make = lambda: [a, np.zeros((n, n), np.float32), np.int32(n)]  # noqa: E731
    for block in [(16, 16), (256, 1), (48, 2), (16, 16)]:
        grid = (-(-n // block[0]), -(-n // block[1]))
        compiled, interpreted = both(pair, "rows_and_columns", make, grid=grid, block=block)
        same(compiled, interpreted)
    shapes = [shape for name, shape in pair[0].backend.compiled_tier.variants if name == "rows_and_columns"]
    assert shapes == [warp_shape((16, 16, 1)), warp_shape((256, 1, 1)), None]


def test_a_register_a_shuffle_reads_keeps_the_value_of_lanes_that_exited():
    """After lanes 20-31 exit, the others run the loop together: its writes need not keep the
    exited lanes' values, but those of a register a shuffle reads do (the shuffle reads lane 25,
    whose last value the interpreter keeps), while the sum, which no warp-wide instruction reads,
    is written for the whole warp."""
    body = """
mov.u32 %r0, %tid.x;
mov.u32 %r1, %laneid;
mul.lo.u32 %r2, %r1, 3;
mov.u32 %r5, 0;
mov.u32 %r6, 0;
setp.ge.u32 %p1, %r1, 20;
@%p1 ret;
LOOP:
shfl.sync.idx.b32 %r3, %r2, 25, 31, 1048575;
add.u32 %r5, %r5, %r3;
add.u32 %r2, %r2, 100;
add.u32 %r6, %r6, 1;
setp.lt.u32 %p2, %r6, 3;
@%p2 bra LOOP;
add.u32 %r5, %r5, %r2;
""" + stored_per_thread("%r5")
    ptx = kernel_ptx(body, ".param .u64 out", ".reg .b32 %r<7>; .reg .b64 %rd<3>; .reg .pred %p<3>;")
    out = ptx_both(ptx, [ptr("u32")], [], np.zeros(64, np.uint32), grid=1, block=64)
    lane = np.arange(64) % 32
    np.testing.assert_array_equal(out, np.where(lane < 20, 3 * 75 + 3 * lane + 300, 0).astype(np.uint32))
