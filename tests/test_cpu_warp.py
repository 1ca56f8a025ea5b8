"""Warp-level instructions on the compiled CPU tier: bit-identical to the interpreter, and right.

The kernels are written as CUDA C++ and numba-cuda users write warp code (``__shfl_down_sync``
reductions, ``__shfl_up_sync`` scans, ballots and votes, ``__reduce_*_sync``, ``__match_*_sync``,
masks that differ from lane to lane, divergent branches), compiled by NVRTC and numba-cuda; the
forms no frontend here emits with run-time operands (shuffles whose lane and clamp operands are
registers, ``elect.sync``, the pre-``.sync`` votes) are hand-written PTX, generated over their
operands.  Every test checks the compiled tier compiled the kernel, compares both tiers bit for
bit, and checks the values against NumPy's reading of the PTX ISA.
"""

from __future__ import annotations

import numpy as np
import pytest
from _emulator import kernel_ptx, ptr
from _tiers import both, cuda_tiers, ptx_both, same, tiers
from hypothesis import given, settings
from hypothesis import strategies as st

WARP_OPS = r"""
extern "C" __global__ void warp_ops(const int* x, unsigned* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31;
    int v = i < n ? x[i] : 0;
    int sum = v;
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_down_sync(0xffffffff, sum, o);
    int scan = v;
    for (int o = 1; o < 32; o <<= 1) {
        int t = __shfl_up_sync(0xffffffff, scan, o);
        if (lane >= o) scan += t;
    }
    int top = v;
    for (int o = 16; o > 0; o >>= 1) top = max(top, __shfl_xor_sync(0xffffffff, top, o));
    int third = __shfl_sync(0xffffffff, v, 3, 8);  // lane 3 of each group of eight
    unsigned positive = __ballot_sync(0xffffffff, v > 0);
    int any = __any_sync(0xffffffff, v > 90), all = __all_sync(0xffffffff, v > -90);
    unsigned active = 0, odd_sum = 0;
    if (lane & 1) {
        active = __activemask();
        odd_sum = __reduce_add_sync(0xaaaaaaaa, v);
    }
    unsigned mask = (lane & 1) ? 0xaaaaaaaau : 0x55555555u;  // each lane names its own half
    unsigned half_max = __reduce_max_sync(mask, v);
    unsigned low = __reduce_min_sync(0xffffffff, (unsigned)v);
    unsigned bits = __reduce_or_sync(0xffffffff, (unsigned)v) ^ __reduce_and_sync(0xffffffff, (unsigned)v)
                  ^ __reduce_xor_sync(0xffffffff, (unsigned)v);
    unsigned same_class = __match_any_sync(0xffffffff, v & 3);
    int uniform;
    unsigned all_same = __match_all_sync(0xffffffff, v >> 16, &uniform);
    unsigned* o = out + 16 * i;
    o[0] = sum; o[1] = scan; o[2] = top; o[3] = third; o[4] = positive; o[5] = any; o[6] = all;
    o[7] = active; o[8] = odd_sum; o[9] = half_max; o[10] = low; o[11] = bits; o[12] = same_class;
    o[13] = all_same; o[14] = uniform; o[15] = lane;
}
"""


def bits(lanes_set: np.ndarray) -> int:
    """32 booleans as a lane mask, lane j at bit j."""
    return int((lanes_set.astype(np.int64) << np.arange(32)).sum())


def _warp_ops_numpy(x: np.ndarray, threads: int) -> np.ndarray:
    """What ``warp_ops`` writes, from NumPy (threads past ``x`` read 0)."""
    v = np.zeros(threads, np.int64)
    v[: x.size] = x
    w = v.reshape(-1, 32)
    want = np.zeros((w.shape[0], 32, 16), np.int64)
    lanes = np.arange(32)
    odd, even = lanes % 2 == 1, lanes % 2 == 0
    for k, row in enumerate(w):
        want[k, 0, 0] = row.sum()  # shfl_down's sum: whole in lane 0, partial elsewhere
        want[k, :, 1] = np.cumsum(row)
        want[k, :, 2] = row.max()
        want[k, :, 3] = row.reshape(4, 8)[:, 3].repeat(8)
        want[k, :, 4] = bits(row > 0)
        want[k, :, 5] = (row > 90).any()
        want[k, :, 6] = (row > -90).all()
        want[k, odd, 7] = bits(odd)
        want[k, odd, 8] = row[odd].sum()
        want[k, odd, 9], want[k, even, 9] = row[odd].max(), row[even].max()
        unsigned = row.astype(np.uint32)
        want[k, :, 10] = unsigned.min()
        want[k, :, 11] = (np.bitwise_or.reduce(unsigned) ^ np.bitwise_and.reduce(unsigned)
                          ^ np.bitwise_xor.reduce(unsigned))
        want[k, :, 12] = [bits((row & 3) == (value & 3)) for value in row]
        uniform = (row >> 16 == row[0] >> 16).all()
        want[k, :, 13], want[k, :, 14], want[k, :, 15] = (1 << 32) - 1 if uniform else 0, uniform, lanes
    return want.reshape(-1, 16).astype(np.uint32)


def test_cuda_warp_intrinsics_match_the_interpreter_and_numpy():
    rng = np.random.default_rng(21)
    x = rng.integers(-100, 100, 150, dtype=np.int32)  # the last warp is partly past the end
    x[64:96] = 7 << 16  # one warp whose values all match
    pair = cuda_tiers(WARP_OPS)
    got, want = both(pair, "warp_ops", lambda: [x, np.zeros((160, 16), np.uint32), x.size], grid=5, block=32)
    same(got, want)
    expected = _warp_ops_numpy(x, 160)
    out = got[1]
    assert (out[::32, 0] == expected[::32, 0]).all()
    assert (out[:, 1:] == expected[:, 1:]).all(), np.argwhere(out[:, 1:] != expected[:, 1:])[:5]


DIVERGENT = r"""
extern "C" __global__ void divergent(const int* x, int* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x & 31, v = x[i];
    if (v % 3 == 0) return;  // lanes leave early, data-dependent
    int s = v;
    if (lane < 20) {
        unsigned group = __activemask();
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(group, s, o);
        out[2 * i] = s;
        out[2 * i + 1] = __popc(__ballot_sync(group, s > 0));
    } else {
        out[2 * i] = __reduce_add_sync(__activemask(), v);
        out[2 * i + 1] = __activemask();
    }
}
"""


def test_warp_intrinsics_in_divergent_code_with_early_exits_match():
    x = np.random.default_rng(22).integers(-50, 50, 256, dtype=np.int32)
    got, want = both(cuda_tiers(DIVERGENT), "divergent", lambda: [x, np.zeros(512, np.int32)],
                     grid=2, block=128)
    same(got, want)
    out = got[1].reshape(-1, 2)
    stay = (x % 3 != 0).reshape(-1, 32)
    lanes = np.arange(32)
    for k, row in enumerate(x.reshape(-1, 32)):
        upper = stay[k] & (lanes >= 20)
        mask = int((upper.astype(np.int64) << lanes).sum())
        assert (out.reshape(-1, 32, 2)[k, upper, 1].astype(np.uint32) == mask).all()
        assert (out.reshape(-1, 32, 2)[k, upper, 0] == row[upper].sum()).all()


def test_numba_warp_intrinsics_match_the_interpreter():
    numba = pytest.importorskip("ptxbridge.numba")
    from numba import cuda

    def warp(x, out, flags):
        i = cuda.grid(1)
        lane = cuda.laneid
        v = x[i]
        for offset in (16, 8, 4, 2, 1):
            v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
        out[i, 0] = cuda.shfl_sync(0xFFFFFFFF, v, 0)  # the warp's sum, from lane 0
        out[i, 1] = cuda.shfl_up_sync(0xFFFFFFFF, x[i], 1)
        out[i, 2] = cuda.shfl_xor_sync(0xFFFFFFFF, x[i], 5)
        flags[i, 0] = cuda.ballot_sync(0xFFFFFFFF, x[i] > 0)
        flags[i, 1] = cuda.any_sync(0xFFFFFFFF, x[i] > 2.5)
        flags[i, 2] = cuda.all_sync(0xFFFFFFFF, x[i] > -3.0)
        flags[i, 3] = cuda.eq_sync(0xFFFFFFFF, lane < 40)
        flags[i, 4] = cuda.match_any_sync(0xFFFFFFFF, int(x[i] > 0))
        flags[i, 5] = cuda.activemask()

    artifact = numba.compile(warp, "void(float64[::1], float64[:, ::1], uint32[:, ::1])", arch="sm_90",
                             name="warp")
    x = np.random.default_rng(23).normal(0, 2, 128)
    pair = tiers(artifact)
    got, want = both(pair, "warp", lambda: [x, np.zeros((128, 3)), np.zeros((128, 6), np.uint32)],
                     grid=2, block=64)
    same(got, want)
    out, flags = got[1], got[2]
    rows = x.reshape(-1, 32)
    assert np.allclose(out[:, 0], np.repeat(rows.sum(axis=1), 32))
    lanes = np.arange(128) % 32
    assert (out[:, 1] == np.where(lanes >= 1, np.roll(x, 1), x)).all()
    assert (out[:, 2] == x[(np.arange(128) & ~31) | (lanes ^ 5)]).all()
    positive = ((rows > 0).astype(np.int64) << np.arange(32)).sum(axis=1)
    assert (flags[:, 0] == np.repeat(positive, 32)).all()
    assert (flags[:, 5] == 0xFFFFFFFF).all() and (flags[:, 3] == 1).all()


def _shuffle(mode: str) -> str:
    """``shfl.sync.{mode}`` of each lane's value 1000 + lane with the lane and clamp operands taken
    from registers (per lane: ``b[tid]``, ``c[tid]``); writes the value and the in-range predicate."""
    return kernel_ptx(
        f"""
mov.u32 %r1, %tid.x;
ld.param.u64 %rd1, [b];
mul.wide.u32 %rd2, %r1, 4;
add.s64 %rd3, %rd1, %rd2;
ld.global.u32 %r2, [%rd3];
ld.param.u64 %rd4, [c];
add.s64 %rd5, %rd4, %rd2;
ld.global.u32 %r3, [%rd5];
add.u32 %r4, %r1, 1000;
shfl.sync.{mode}.b32 %r5|%p1, %r4, %r2, %r3, -1;
selp.u32 %r6, 1, 0, %p1;
ld.param.u64 %rd6, [out];
mul.wide.u32 %rd7, %r1, 8;
add.s64 %rd8, %rd6, %rd7;
st.global.v2.u32 [%rd8], {{%r5, %r6}};
ret;""",
        params=".param .u64 b, .param .u64 c, .param .u64 out",
        regs=".reg .b32 %r<7>;\n.reg .b64 %rd<9>;\n.reg .pred %p<2>;",
    )


SHUFFLES = {mode: _shuffle(mode) for mode in ("up", "down", "bfly", "idx")}


def _shfl_numpy(mode: str, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The PTX ISA's shfl.sync for one warp, lane by lane."""
    out = np.zeros((32, 2), np.uint32)
    for lane in range(32):
        shift, clamp = int(b[lane]) & 31, int(c[lane])
        segmask = (clamp >> 8) & 31
        least = lane & segmask
        most = least | ((clamp & 31) & ~segmask)
        j = {"up": lane - shift, "down": lane + shift, "bfly": lane ^ shift,
             "idx": least | (shift & ~segmask)}[mode]
        ok = j >= most if mode == "up" else j <= most
        out[lane] = (1000 + (j if ok else lane), ok)
    return out


_LANE_WORDS = st.lists(st.integers(0, 2**32 - 1) | st.integers(0, 40), min_size=32, max_size=32)
_CLAMPS = st.lists(st.sampled_from([31, 0x1F, 0x181F, 0x101F, 0x1C1F, 0x0F, 0x3, 0x1807]) |
                   st.integers(0, 2**32 - 1), min_size=32, max_size=32)


@pytest.mark.parametrize("mode", sorted(SHUFFLES))
@settings(max_examples=12, deadline=None)
@given(shifts=_LANE_WORDS, clamps=_CLAMPS)
def test_shuffles_with_run_time_lane_and_clamp_operands_match(mode, shifts, clamps):
    b, c = np.array(shifts, np.uint32), np.array(clamps, np.uint32)
    out = ptx_both(SHUFFLES[mode], [ptr("u32")] * 3, [b, c], np.zeros((32, 2), np.uint32), grid=1, block=32)
    assert (out == _shfl_numpy(mode, b, c)).all()


# every membermask-taking form under a guard, each lane passing its own mask: mask[i], whether lane i
# executes (on[i]) and its value (v[i]) come from memory; ten words out per lane
MASKED = kernel_ptx(
    """
mov.u32 %r1, %tid.x;
mul.wide.u32 %rd1, %r1, 4;
ld.param.u64 %rd2, [args];
mul.wide.u32 %rd3, %r1, 16;
add.s64 %rd2, %rd2, %rd3;
ld.global.v4.u32 {%r2, %r3, %r4, %r5}, [%rd2];
setp.ne.u32 %p1, %r3, 0;
setp.gt.s32 %p2, %r4, 0;
cvt.u64.u32 %rd4, %r4;
shl.b64 %rd4, %rd4, 40;
mov.u32 %r10, 0;
mov.u32 %r11, 0;
mov.u32 %r12, 0;
mov.u32 %r13, 0;
mov.u32 %r14, 0;
mov.u32 %r15, 0;
mov.u32 %r16, 0;
mov.u32 %r17, 0;
mov.u32 %r18, 0;
mov.u32 %r19, 0;
@%p1 vote.sync.ballot.b32 %r10, %p2, %r2;
@%p1 vote.sync.uni.pred %p3, %p2, %r2;
@%p1 selp.u32 %r11, 1, 0, %p3;
@%p1 redux.sync.add.u32 %r12, %r4, %r2;
@%p1 redux.sync.min.s32 %r13, %r4, %r2;
@%p1 redux.sync.max.u32 %r14, %r4, %r2;
@%p1 match.sync.any.b64 %r15, %rd4, %r2;
@%p1 match.sync.all.b32 %r16|%p4, %r5, %r2;
@%p1 selp.u32 %r17, 1, 0, %p4;
@%p1 elect.sync %r18|%p5, %r2;
@%p1 selp.u32 %r20, 1, 0, %p5;
@%p1 shl.b32 %r20, %r20, 8;
@%p1 or.b32 %r18, %r18, %r20;
@%p1 vote.ballot.b32 %r19, %p2;
ld.param.u64 %rd5, [out];
mul.wide.u32 %rd6, %r1, 40;
add.s64 %rd5, %rd5, %rd6;
st.global.v2.u32 [%rd5], {%r10, %r11};
st.global.v2.u32 [%rd5+8], {%r12, %r13};
st.global.v2.u32 [%rd5+16], {%r14, %r15};
st.global.v2.u32 [%rd5+24], {%r16, %r17};
st.global.v2.u32 [%rd5+32], {%r18, %r19};
ret;""",
    params=".param .u64 args, .param .u64 out",
    regs=".reg .b32 %r<21>;\n.reg .b64 %rd<7>;\n.reg .pred %p<6>;",
)

_MASKS = st.sampled_from([0xFFFFFFFF, 0x55555555, 0xAAAAAAAA, 0x0000FFFF, 0x80000001, 0]) | st.integers(
    0, 2**32 - 1
)
_VALUES = st.sampled_from([-5, 0, 3, 7]) | st.integers(-(2**31), 2**31 - 1)


@settings(max_examples=30, deadline=None)
@given(
    masks=st.one_of(_MASKS.map(lambda m: [m] * 32), st.lists(_MASKS, min_size=32, max_size=32)),
    on=st.lists(st.booleans(), min_size=32, max_size=32),
    values=st.lists(_VALUES, min_size=32, max_size=32),
)
def test_membermasks_that_differ_by_lane_under_a_guard_match(masks, on, values):
    args = np.zeros((32, 4), np.uint32)
    args[:, 0], args[:, 1] = masks, on
    args[:, 2] = np.array(values, np.int32).view(np.uint32)
    args[:, 3] = np.array(values, np.int32).view(np.uint32) & 3
    out = ptx_both(MASKED, [ptr("u32")] * 2, [args], np.zeros((32, 10), np.uint32), grid=1, block=32)
    executing = int((np.array(on, np.int64) << np.arange(32)).sum())
    positive = int(((np.array(values) > 0).astype(np.int64) << np.arange(32)).sum())
    for lane in np.flatnonzero(on):
        members = masks[lane] & executing
        assert out[lane, 0] == positive & members  # the ballot of the lanes this lane names
        assert out[lane, 8] & 0xFF == ((members & -members).bit_length() - 1 if members else 0)
        assert out[lane, 9] == positive & executing  # vote.ballot without .sync: every lane
