"""No-alias promises checked at launch (bridge/launch/aliasing.py, docs/safety.md).

Extents from data pointer, shape, strides and element size; which signatures promise what;
refusals naming kernel, both parameters and the bytes, on the CPU loader for each convention;
the C plan declining overlapping tensors; the opt-outs.
"""

from __future__ import annotations

import _rust_fixtures
import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import ptxbridge
from ptxbridge.abi import (
    Access,
    ArgumentError,
    Convention,
    Memory,
    Pointer,
    Promise,
    Scalar,
    Signature,
    access,
    dtype,
)
from ptxbridge.abi.devices import DLPACK_CPU
from ptxbridge.abi.syntax import format_type
from ptxbridge.artifacts.image import Image
from ptxbridge.launch.aliasing import alias_check
from ptxbridge.launch.dlpack import extractor_for
from ptxbridge.launch.extents import ENUMERATE_LIMIT, Extent, Undecided, extent_of, overlap, self_overlap
from ptxbridge.launch.module import Module
from ptxbridge.loaders.base import Backend

toolchain, sysroot = _rust_fixtures.toolchain, _rust_fixtures.sysroot  # session fixtures
OPT_OUT = "pass tensors that do not overlap, or check_aliasing=False to take that responsibility"
SLICES = "#[convention(oxide)] kernel vadd_slices(a: &[f32], b: &[f32], c: &mut [f32])"
SLICES_CU = r"""
extern "C" __global__ void vadd_slices(const float* a, unsigned long long na, const float* b,
                                       unsigned long long nb, float* c, unsigned long long nc) {
    unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < na && i < nb && i < nc) c[i] = a[i] + b[i];
}
"""


def extent(a: np.ndarray) -> Extent:
    return extent_of(extractor_for(type(a))(a, None), a.itemsize)


def span(a: np.ndarray, lo: int, hi: int) -> str:
    """The text of bytes [lo, hi) of ``a``'s buffer, as the messages write it."""
    base = a.__array_interface__["data"][0]
    return f"[{base + lo:#x}, {base + hi:#x}) ({hi - lo} bytes)"


# --- extents -------------------------------------------------------------------------------------

def test_extents_reach_below_the_pointer_for_negative_strides():
    x = np.zeros((4, 6), np.float32)
    base = x.ctypes.data
    e = extent(x[::-1, 1::2])  # data pointer at row 3, column 1
    assert (e.lo, e.hi, e.dense) == (base + 4, base + 96, False)  # x[0, 1] .. x[3, 5]
    empty = extent(x[2:2])
    assert empty.lo == empty.hi and overlap(empty, extent(x)) is None  # no bytes at all
    assert extent(x.T).dense and (extent(x.T).lo, extent(x.T).hi) == (base, base + 96)


def test_interleaved_views_share_no_bytes_but_shifted_ones_do():
    x = np.zeros((8, 8), np.float32)
    evens, odds = extent(x[:, 0::2]), extent(x[:, 1::2])
    assert (evens.lo, evens.hi) != (0, 0) and evens.lo < odds.hi and odds.lo < evens.hi  # spans overlap
    assert overlap(evens, odds) is None
    assert overlap(extent(x[:4]), extent(x[4:])) is None
    base = x.ctypes.data
    assert overlap(extent(x[:5]), extent(x[4:])) == (base + 128, base + 160)
    assert overlap(extent(x[::-1, ::2]), extent(x[3, 2:3])) == (base + 104, base + 108)
    bytes_view = x.view(np.uint8)[0, 30:31]  # one byte inside x[0, 7]
    assert overlap(extent(x[0, 7:8]), extent(bytes_view)) == (base + 30, base + 31)


def test_self_overlap_finds_two_indices_with_one_address():
    y = np.zeros(100, np.float32)
    assert self_overlap(extent(np.broadcast_to(y[:4], (3, 4)))) == ((0, 0), (1, 0))
    windows = as_strided(y, (5, 4), (4, 4))  # sliding windows: x[i, j] = y[i + j]
    assert self_overlap(extent(windows)) == ((0, 1), (1, 0))
    assert self_overlap(extent(as_strided(y, (3, 3), (8, 8)))) == ((0, 1), (1, 0))
    interleaved = as_strided(y, (3, 2), (8, 12))  # offsets 0 2 4 / 3 5 7: distinct though not nested
    assert self_overlap(extent(interleaved)) is None
    assert self_overlap(extent(y.reshape(10, 10)[::-1, ::3].T)) is None


def test_irregular_views_too_large_to_search_are_undecided_and_refused():
    n = ENUMERATE_LIMIT // 2 + 1
    y = np.zeros(2 * n + 2, np.float32)
    irregular = as_strided(y, (n, 2), (8, 12))  # offsets 2i + 3j: distinct, but not shown so cheaply
    with pytest.raises(Undecided):
        self_overlap(extent(irregular))
    check = alias_check(Signature.parse("#[convention(cutile)] kernel k(x: TileArray<f32, 2>)"))
    with pytest.raises(ArgumentError, match=rf"^k: argument 'x' \(TileArray<f32, 2, i32>\) cannot be shown "
                                            rf"free of self-overlap \(shape \({n}, 2\), strides \(2, 3\) "):
        check((irregular,))


# --- which signatures promise what -----------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "kernel k(a: *const f32, b: *mut f32, c: *mut f32)",  # raw pointers promise nothing
    "#[convention(numba)] kernel k(a: Array<f32, 1, C>, b: Array<f32, 1, C>)",
    "#[convention(oxide)] kernel k(a: &[f32], b: &[f32], n: u32)",  # shared borrows may overlap
    "#[convention(cutile)] kernel k(a: TileArray<f32, 1>{alias: 0x1, internal_alias}, "
    "b: TileArray<f32, 1>{alias: 0x1, internal_alias})",
    "#[convention(cutile-rs)] kernel k(a: Tensor<f32, 1>, b: Tensor<f32, 1>)",
])
def test_signatures_without_promises_to_check(text):
    assert alias_check(Signature.parse(text)) is None


@pytest.mark.parametrize(("text", "pairs"), [
    ("#[convention(oxide)] kernel k(a: &[f32], c: &mut [f32], x: *const f32, n: u32)", ((1, 0), (1, 2))),
    ("#[convention(oxide)] kernel k(a: &[f32], c: DisjointSlice<f32>)", ((1, 0),)),
    ("#[convention(oxide)] kernel k(a: &[f32], w: *mut f32, r: *const f32)", ((0, 1),)),
    ("#[convention(cutile)] kernel k(a: TileArray<f32, 1>{alias: 0x1, internal_alias}, "
     "b: TileArray<f32, 1>{alias: 0x3, internal_alias}, c: TileArray<f32, 1>{alias: 0x2, internal_alias})",
     ((0, 2),)),
])
def test_pairs_the_c_plan_checks(text, pairs):
    assert alias_check(Signature.parse(text)).argument_pairs() == pairs


def test_promises_inside_lists_partitions_and_tuples_are_python_only():
    for text in ("#[convention(cutile)] kernel k(xs: TileList<TileArray<f32, 1>>)",
                 "#[convention(cutile-rs)] kernel k(x: Tensor<f32, 1>, y: Partition<f32, 1>)",
                 "#[convention(cutile)] kernel k(p: (TileArray<f32, 1>, TileArray<f32, 1>))"):
        check = alias_check(Signature.parse(text))
        assert check is not None and check.argument_pairs() is None, text


# --- the checks, one launch's arguments at a time ---------------------------------------------------

def refusal(text: str, args: tuple) -> str:
    with pytest.raises(ArgumentError) as error:
        alias_check(Signature.parse(text))(args)
    return str(error.value)


def test_cutile_groups_lists_and_tuples():
    x = np.zeros((8, 8), np.float32)
    groups = ("#[convention(cutile)] kernel k(a: TileArray<f32, 2>{alias: 0x1}, "
              "b: TileArray<f32, 2>{alias: 0x1}, c: TileArray<f32, 2>)")
    alias_check(Signature.parse(groups))((x, x, x[:, :0]))  # same group; nothing in c
    assert refusal(groups, (x[:4], x[:4], x[3:])) == (
        f"k: argument 'a' (TileArray<f32, 2, i32>{{alias: 0x1}}) overlaps argument 'c' "
        f"(TileArray<f32, 2, i32>) in bytes {span(x, 96, 128)}: the kernel was compiled for them in "
        f"different cuTile alias groups (or none); {OPT_OUT}")
    lists = "#[convention(cutile)] kernel k(xs: TileList<TileArray<f32, 1>>, y: TileArray<f32, 1>)"
    alias_check(Signature.parse(lists))(([x[0], x[1], x[2, ::-1]], x[3]))
    assert refusal(lists, ([x[0], x[1], x[1, 3:]], x[3])).startswith(
        "k: argument 'xs[1]' (TileList<TileArray<f32, 1, i32>>) overlaps argument 'xs[2]' (TileList<")
    assert "list items that do not overlap each other" in refusal(lists, ([x[0], x[1], x[1, 3:]], x[3]))
    assert refusal(lists, ([x[0]], x[0, 1:])).startswith(
        "k: argument 'xs[0]' (TileList<TileArray<f32, 1, i32>>) overlaps argument 'y' (TileArray<f32, 1")
    tuples = "#[convention(cutile)] kernel k(p: (TileArray<f32, 1>, TileArray<f32, 1>))"
    assert refusal(tuples, ((x[0], x[0, ::2]),)).startswith("k: argument 'p.0' (TileArray<f32, 1, i32>) "
                                                            "overlaps argument 'p.1'")


def test_cutile_internal_aliasing_and_partitions():
    row = np.zeros(4, np.float32)
    broadcast = np.broadcast_to(row, (3, 4))
    text = "#[convention(cutile)] kernel k(x: TileArray<f32, 2>)"
    assert refusal(text, (broadcast,)) == (
        f"k: argument 'x' (TileArray<f32, 2, i32>) overlaps itself: indices (0, 0) and (1, 0) both address "
        f"{row.ctypes.data:#x} (shape (3, 4), strides (0, 1) elements): the kernel was compiled for an array "
        f"that does not alias internally (may_alias_internally=False); pass a tensor whose indices address "
        f"distinct elements (e.g. .contiguous()), or check_aliasing=False to take that responsibility")
    alias_check(Signature.parse("#[convention(cutile)] kernel k(x: TileArray<f32, 2>, y: TileArray<f32, 1>{"
                                "internal_alias})"))((np.zeros((3, 4), np.float32), broadcast[:, 0]))
    rs = "#[convention(cutile-rs)] kernel k(x: Tensor<f32, 2>, y: Partition<f32, 2>)"
    whole = np.zeros((4, 4), np.float32)
    alias_check(Signature.parse(rs))((whole[:2], (whole[2:], (1, 4), (4, 1))))
    assert "'y' is a &mut Tensor partition, which no other argument may overlap" in refusal(
        rs, (whole[:3], (whole[2:], (1, 4), (4, 1))))
    assert "partition (written tile by tile)" in refusal(rs, (whole[:0], (broadcast, (1, 4), (4, 1))))


def test_raw_integer_addresses_in_structs_have_no_extent():
    x = np.zeros(4, np.float32)
    text = "#[convention(oxide)] kernel k(s: struct S { p: &[f32], n: u64 }, c: &mut [f32])"
    check = alias_check(Signature.parse(text))
    check(({"p": x.ctypes.data, "n": 4}, x))  # an int address: the caller's business
    assert refusal(text, ({"p": x, "n": 4}, x[1:])).startswith("k: argument 'c' (&mut [f32]) overlaps "
                                                               "argument 's.p' (&[f32]) in bytes")


def test_pointer_promises_follow_noalias_and_mutability():
    f32 = Scalar(dtype("f32"))
    assert access(Pointer(f32, True)) == Access(Memory.WRITE)
    assert access(Pointer(f32, True, "borrow")) == access(Pointer(f32, True, "restrict")) == Access(
        Memory.WRITE, Promise.EXCLUSIVE)
    assert access(Pointer(f32, False, "restrict")) == Access(Memory.READ, Promise.SHARED_READ)
    with pytest.raises(ValueError, match="noalias must be one of"):
        Pointer(f32, True, "unique")


def test_rust_references_record_their_borrow_unless_the_type_has_interior_mutability():
    from ptxbridge.rust.signatures import read_signatures
    from ptxbridge.rust.source import parse_source

    source = """
    use core::cell::Cell;
    use core::sync::atomic::AtomicU32;
    #[repr(C)] pub struct Counter { hits: Cell<u32> }
    #[repr(C)] pub struct Plain { x: f32, next: *mut Counter }
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn k(a: &f32, b: &mut Counter, c: &Cell<f32>, d: &AtomicU32, e: &Counter,
                                        f: &Plain, g: *const f32, h: Option<&[f32; 2]>, s: &mut [f32]) {}
    """
    sig = read_signatures([parse_source(source, "k.rs")], Convention.C).kernels["k"]
    counter = "struct Counter { hits: u32 }"
    assert [format_type(p.type) for p in sig.params] == [
        "&f32", f"&mut {counter}", "*const f32", "*const u32", f"*const {counter}",
        f"&struct Plain {{ x: f32, next: *mut {counter} }}", "*const f32", "&(f32, f32)",
        "&mut [f32]"]


# --- end to end on the CPU loader ----------------------------------------------------------------

RUST_KERNEL = """
#![no_std]
#![feature(abi_ptx, stdarch_nvptx)]
use core::arch::nvptx::{_block_dim_x, _block_idx_x, _thread_idx_x};

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! { loop {} }

/// total += factor * sum(x[..n]), by thread 0.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn accumulate(total: &mut f32, factor: &f32, x: *const f32, n: usize) {
    if _block_idx_x() * _block_dim_x() + _thread_idx_x() == 0 {
        for i in 0..n { *total += *factor * unsafe { *x.add(i) }; }
    }
}

#[unsafe(no_mangle)]
#[allow(improper_ctypes_definitions)]
pub unsafe extern "ptx-kernel" fn copy(x: &[f32], out: &mut [f32]) {
    let i = (_block_idx_x() * _block_dim_x() + _thread_idx_x()) as usize;
    if i < out.len() && i < x.len() { out[i] = x[i]; }
}
"""


def test_plain_rustc_references_on_the_cpu_loader(sysroot):
    import ptxbridge.rust as prust

    art = prust.compile(RUST_KERNEL, progress=False)
    assert str(art.kernels["accumulate"]).endswith("(total: &mut f32, factor: &f32, x: *const f32, n: u64)")
    assert str(art.kernels["copy"]).endswith("(x: &[f32], out: &mut [f32])")
    buf = np.arange(8, dtype=np.float32)
    with ptxbridge.link([art]).load("cpu") as module:
        module.accumulate(buf[7:], buf[2:3], buf[:4], 4, grid=1, block=32)  # factor overlaps x: both read
        assert buf[7] == 7.0 + 2.0 * (0 + 1 + 2 + 3)
        with pytest.raises(ArgumentError) as error:
            module.accumulate(buf[3:4], buf[2:3], buf[:4], 4, grid=1, block=32)
        assert str(error.value) == (
            f"accumulate: argument 'total' (&mut f32) overlaps argument 'x' (*const f32) in bytes "
            f"{span(buf, 12, 16)}: 'total' is a &mut borrow, which no other argument may overlap; {OPT_OUT}")
        for x, out in ((buf[:4], buf[3:7]), ({"ptr": buf[:4], "len": 4}, {"ptr": buf[3:7], "len": 4})):
            with pytest.raises(ArgumentError, match=r"^copy: argument 'out' \(&mut \[f32\]\) overlaps "
                                                    r"argument 'x' \(&\[f32\]\) in bytes"):
                module.copy(x, out, grid=1, block=4)
    assert buf[:7].tolist() == list(range(7)), "a refused launch wrote memory"


def test_cuda_cpp_restrict_pointers_on_the_cpu_loader():
    from ptxbridge import nvrtc

    source = r"""
    extern "C" __global__ void dot3(const float* __restrict__ a, const float* __restrict__ b,
                                    float* __restrict__ out, const float* plain, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) out[i] = a[i] * b[i] + plain[i];
    }"""
    buf = np.arange(16, dtype=np.float32)
    with ptxbridge.load([nvrtc.compile(source, arch="sm_80")], device="cpu") as module:
        module.dot3(buf[:8], buf[:8], buf[8:], buf[4:12][:0], 0, grid=1, block=8)  # const restrict may share
        with pytest.raises(ArgumentError) as error:
            module.dot3(buf[:8], buf[:8], buf[8:], buf[6:10], 8, grid=1, block=8)
        assert str(error.value) == (
            f"dot3: argument 'out' (*mut restrict f32) overlaps argument 'plain' (*const f32) in bytes "
            f"{span(buf, 32, 40)}: 'out' is a __restrict__ pointer, which no other argument may overlap; "
            f"{OPT_OUT}")
    shared = "'a' is a const __restrict__ pointer, which no argument the kernel may write may overlap"
    assert shared in refusal("kernel k(a: *const restrict f32, w: *mut f32, r: *const f32)",
                             (buf[:4], buf[2:6], buf[:4]))

@pytest.fixture(scope="module")
def slices_module():
    from ptxbridge import nvrtc

    art = nvrtc.compile(SLICES_CU, arch="sm_80", signatures={"vadd_slices": SLICES})
    with ptxbridge.link([art]).load("cpu") as module:
        yield module


def test_rust_slices_on_the_cpu_loader(slices_module):
    buf = np.arange(16, dtype=np.float32)
    kernel = slices_module.vadd_slices
    kernel(buf[:8], buf[:8], buf[8:], grid=1, block=8)  # shared borrows overlap; c is a disjoint view
    assert buf[8:].tolist() == [2.0 * i for i in range(8)]
    with pytest.raises(ArgumentError) as error:
        kernel(buf[:8], buf[8:], buf[4:12], grid=1, block=8)
    assert str(error.value) == (
        f"vadd_slices: argument 'c' (&mut [f32]) overlaps argument 'a' (&[f32]) in bytes "
        f"{span(buf, 16, 32)}: 'c' is a &mut borrow, which no other argument may overlap; {OPT_OUT}")
    assert buf[8:].tolist() == [2.0 * i for i in range(8)], "a refused launch wrote memory"


def test_opt_outs_per_call_and_per_module(slices_module):
    buf = np.ones(8, dtype=np.float32)
    kernel = slices_module.vadd_slices
    kernel(buf, buf, buf, grid=1, block=8, check_aliasing=False)
    assert buf.tolist() == [2.0] * 8
    with pytest.raises(ArgumentError, match="overlaps argument"):
        kernel(buf, buf, buf, grid=1, block=8)
    slices_module.check_aliasing = False
    try:
        kernel(buf, buf, buf, grid=1, block=8)
        assert buf.tolist() == [4.0] * 8
    finally:
        slices_module.check_aliasing = True
    with pytest.raises(ArgumentError, match="overlaps argument"):
        kernel(buf, buf, buf, grid=1, block=8)


def test_load_can_switch_the_check_off():
    from ptxbridge import nvrtc

    art = nvrtc.compile(SLICES_CU, arch="sm_80", signatures={"vadd_slices": SLICES})
    buf = np.ones(8, dtype=np.float32)
    with ptxbridge.load([art], device="cpu", check_aliasing=False) as module:
        assert module.check_aliasing is False
        module.vadd_slices(buf, buf, buf, grid=1, block=8)
    assert buf.tolist() == [2.0] * 8


def test_numba_promises_nothing_on_the_cpu_loader():
    from numba import cuda

    import ptxbridge.numba as pn

    def add(a, b, c):
        i = cuda.grid(1)
        if i < c.size:
            c[i] = a[i] + b[i]

    art = pn.compile(add, "void(float32[::1], float32[::1], float32[::1])", arch="sm_80", name="add")
    buf = np.ones(8, dtype=np.float32)
    with ptxbridge.link([art]).load("cpu") as module:
        module.add(buf, buf, buf, grid=1, block=8)
    assert buf.tolist() == [2.0] * 8


class _Recorder(Backend):
    """A CPU loader stand-in for a cubin the interpreter cannot run: each launch's values are recorded."""

    device_type, device_id = DLPACK_CPU, 0

    def __init__(self):
        self.launched: list[tuple] = []

    def function(self, name):
        return name

    def launch(self, function, grid, block, shared_mem, stream, params, buffers):
        self.launched.append((function, params))

    def global_address(self, name):
        raise KeyError(name)

    read_global = write_global = global_address

    def close(self):
        pass


@pytest.fixture(scope="module")
def tile_groups():
    """A tileiras cubin of ``vadd`` whose a and b share alias group 0 and c is in none (cached on disk)."""
    ct = pytest.importorskip("cuda.tile", reason="needs the tile extra (cuda-tile)")
    vadd = pytest.importorskip("test_tile_frontend").vadd
    from cuda.tile import compilation as tc

    import ptxbridge.tile as pt

    def array(*groups):
        return tc.ArrayConstraint(ct.float32, 1, index_dtype=ct.int32, stride_lower_bound_incl=0,
                                  alias_groups=groups, may_alias_internally=False)

    sig = tc.KernelSignature([array("in"), array("in"), array(), 16], tc.CallingConvention.cutile_python_v1())
    return pt.export(vadd, sig)


def test_cutile_cubin_with_alias_groups_refuses_overlap_across_groups(tile_groups):
    (name,) = tile_groups.kernels
    assert "_g0_" in name  # the mangled name carries the group
    backend = _Recorder()
    kernel = Module(Image(tile_groups.code, tile_groups.arch, tile_groups.kernels), backend)[name]
    buf = np.zeros(64, np.float32)
    kernel(buf[:32], buf[:32], buf[32:], 16, grid=2)  # a and b share group 0; c is disjoint
    kernel(buf[:32], buf[16:48], buf[48:], 16, grid=1)
    with pytest.raises(ArgumentError) as error:
        kernel(buf[:32], buf[32:], buf[16:48], 16, grid=2)
    assert str(error.value) == (
        f"{name}: argument 'a' (TileArray<f32, 1, i32>{{stride_lb: [0], alias: 0x1}}) overlaps argument 'c' "
        f"(TileArray<f32, 1, i32>{{stride_lb: [0]}}) in bytes {span(buf, 64, 128)}: the kernel was compiled "
        f"for them in different cuTile alias groups (or none); {OPT_OUT}")
    with pytest.raises(ArgumentError, match=r"argument 'c' .* overlaps itself: indices \(0,\) and \(1,\)"):
        kernel(buf[:32], buf[:32], np.broadcast_to(buf[40:41], (32,)), 16, grid=2)
    assert len(backend.launched) == 2
    kernel(buf[:32], buf[32:], buf[16:48], 16, grid=2, check_aliasing=False)
    assert len(backend.launched) == 3


# --- the C plan: overlap declines, Python refuses ---------------------------------------------------

@pytest.fixture
def recorded(monkeypatch):
    """``vadd_slices`` over a CPU loader whose C plans launch into the recording stand-in driver of
    tests/test_fastlaunch.py: (kernel, the driver's launches, the Python path's launches)."""
    pytest.importorskip("torch")
    fast = pytest.importorskip("test_fastlaunch")
    if fast.fastpath._fastlaunch is None:
        pytest.skip("ptxbridge.launch._fastlaunch not built")
    monkeypatch.setenv("PTXBRIDGE_FASTLAUNCH", "1")
    driver = fast.RecordingDriver.current = fast.RecordingDriver()
    backend = fast._RecordingCpu()
    module = Module(Image(None, "sm_90", {"vadd_slices": Signature.parse(SLICES)}), backend)
    return module, driver, backend.launched


def test_c_plan_launches_disjoint_tensors_and_declines_overlapping_ones(recorded):
    import torch

    module, driver, python = recorded
    kernel = module.vadd_slices
    buf = torch.arange(16.0)
    kernel(buf[:8], buf[:8], buf[8:], grid=1, block=8, stream=0)  # the miss builds the C plan, which launches
    kernel(buf[:8], buf[:8], buf[8:], grid=1, block=8, stream=0)  # the hit runs in C
    plan = next(iter(kernel._plans.values()))
    assert plan.native is not None and len(driver) == 2 and python == []
    with pytest.raises(ArgumentError) as error:
        kernel(buf[:8], buf[8:], buf[7:15], grid=1, block=8, stream=0)
    start = buf.data_ptr()
    assert str(error.value) == (
        f"vadd_slices: argument 'c' (&mut [f32]) overlaps argument 'a' (&[f32]) in bytes "
        f"[{start + 28:#x}, {start + 32:#x}) (4 bytes): 'c' is a &mut borrow, which no other argument may "
        f"overlap; {OPT_OUT}")
    assert len(driver) == 2 and python == []
    assert plan.native.pack((buf[:8], buf[8:], buf[7:15])) is False
    assert plan.native.pack((buf[:8], buf[8:], buf[8:8])) is not False  # empty: overlaps nothing
    kernel(buf[:8], buf[8:], buf[7:15], grid=1, block=8, stream=0, check_aliasing=False)
    assert len(driver) == 2 and len(python) == 1  # the keyword is the Python path's
    module.check_aliasing = False
    kernel(buf[:8], buf[8:], buf[7:15], grid=1, block=8, stream=0)
    assert len(driver) == 3 and len(python) == 1  # a C plan without pairs


SPANS = "#[convention(oxide)] kernel k(s: (&[f32], &mut [f32]), t: (&[f32], u32))"  # promises in tuples


def test_c_plan_checks_promises_inside_structs_and_tuples(recorded):
    """A ``&mut`` slice inside a tuple overlaps no other tensor, inside or outside a tuple: the C plan
    checks the members' byte ranges, declines an overlap, and the Python path raises its message."""
    import torch

    module, driver, python = recorded
    kernel = Module(Image(None, "sm_90", {"k": Signature.parse(SPANS)}), module.backend).k
    buf = torch.arange(24.0)
    kernel((buf[:8], buf[8:16]), (buf[16:], 8), grid=1, block=8, stream=0)
    kernel((buf[:8], buf[8:16]), (buf[:8], 8), grid=1, block=8, stream=0)  # two shared reads may overlap
    plan = next(iter(kernel._plans.values()))
    assert plan.native is not None and len(driver) == 2 and python == []
    with pytest.raises(ArgumentError) as error:
        kernel((buf[:8], buf[8:16]), (buf[15:], 8), grid=1, block=8, stream=0)
    start = buf.data_ptr()
    assert str(error.value) == (
        f"k: argument 's.1' (&mut [f32]) overlaps argument 't.0' (&[f32]) in bytes "
        f"[{start + 60:#x}, {start + 64:#x}) (4 bytes): 's.1' is a &mut borrow, which no other argument may "
        f"overlap; {OPT_OUT}")
    assert plan.native.pack(((buf[:8], buf[8:16]), (buf[15:], 8))) is False
    assert plan.native.pack(((buf[:8], buf[8:16]), (buf[16:], 8))) is not False
    assert len(driver) == 2 and python == []


def test_c_plan_declines_a_cutile_array_that_overlaps_itself(recorded):
    """A cuTile array (no ``may_alias_internally``) must not address one element twice: the C plan
    declines a broadcast view, the Python path names it."""
    import torch

    from ptxbridge.abi import Param, Scalar, dtype
    from ptxbridge.abi.kinds import TileArray

    module, driver, python = recorded
    sig = Signature("k", (Param("x", TileArray(dtype("f32"), 2, "i32")), Param("n", Scalar(dtype("i32")))),
                    convention=Convention.CUTILE)
    kernel = Module(Image(None, "sm_90", {"k": sig}), module.backend).k
    kernel(torch.zeros(4, 3), 1, grid=1, block=1, stream=0)
    kernel(torch.zeros(4, 3)[::2, ::2], 1, grid=1, block=1, stream=0)  # strided, each element once
    assert next(iter(kernel._plans.values())).native is not None and len(driver) == 2 and python == []
    with pytest.raises(ArgumentError, match=r"^k: argument 'x' .* overlaps itself"):
        kernel(torch.zeros(3).expand(4, 3), 1, grid=1, block=1, stream=0)
    assert len(driver) == 2


def test_the_generated_python_plan_tests_byte_ranges_inline(monkeypatch):
    torch = pytest.importorskip("torch")
    fast = pytest.importorskip("test_fastlaunch")
    monkeypatch.setenv("PTXBRIDGE_FASTLAUNCH", "0")
    backend = fast._RecordingCpu()
    kernel = Module(Image(None, "sm_90", {"vadd_slices": Signature.parse(SLICES)}), backend).vadd_slices
    buf = torch.arange(16.0)
    kernel(buf[:8], buf[:8], buf[8:], grid=1, block=8, stream=0)
    with pytest.raises(ArgumentError, match=r"^vadd_slices: argument 'c' \(&mut \[f32\]\) overlaps "
                                            r"argument 'b'"):
        kernel(buf[:4], buf[4:12], buf[11:], grid=1, block=8, stream=0)
    kernel(buf[:4], buf[4:12], buf[11:], grid=1, block=8, stream=0, check_aliasing=False)
    plan = next(iter(kernel._plans.values()))
    assert plan.native is None and plan.bound is not None and len(backend.launched) == 2
