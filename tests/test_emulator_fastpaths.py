"""The CPU loader's shortcuts give the general path's results: unmasked writes of block-local
registers in divergent code (liveness.py), shared loads from a cached base register
(Memory.shared_base), and global accesses with the offset kept apart (C gather/scatter)."""

from __future__ import annotations

import numpy as np
import pytest
from _emulator import backend, kernel_ptx, launch, ptr, scalar

from ptxbridge.abi.errors import MemoryAccessError
from ptxbridge.loaders.emulator import memory
from ptxbridge.loaders.emulator.liveness import block_local
from ptxbridge.loaders.emulator.machine import PLAIN
from ptxbridge.loaders.emulator.parse import parse_body


@pytest.fixture(autouse=True)
def _interpreter(monkeypatch):
    """These tests look inside the interpreter's fast paths: pin the tier that has them."""
    monkeypatch.setenv("PTXBRIDGE_CPU_TIER", "interp")

# Each thread loops tid+1 times; %r3 is written at the top of the loop and read after it, so the
# threads that left early must keep their own %r3 while the others go on: not block-local.
# %r4 is a temporary of the loop body (written, then read, in the same block): block-local.
LOOP = """
    .reg .b32 %r<6>; .reg .b64 %rd<4>; .reg .pred %p;
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, 0;
$LOOP:
    add.s32 %r4, %r2, 100;
    add.s32 %r3, %r4, %r1;
    add.s32 %r2, %r2, 1;
    setp.le.u32 %p, %r2, %r1;
    @%p bra $LOOP;
    ld.param.u64 %rd1, [out];
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r3;
    ret;
"""


def test_liveness_keeps_the_mask_for_registers_read_across_blocks():
    body = parse_body(LOOP, 1, "test", "k")
    steps = backend(kernel_ptx(LOOP)).program.functions["k"].steps
    plain = [step.kind == PLAIN for step in steps]
    assert len(plain) == len(body.instructions) and plain.count(False) == 2  # bra, ret
    local = block_local(body.instructions, plain, list(body.labels.values()), list(body.registers))
    assert "%r4" in local and "%rd2" in local and "%rd3" in local
    assert not local & {"%r1", "%r2", "%r3", "%p"}  # live across the loop's back edge or its exit


def test_divergent_loop_keeps_each_threads_registers():
    be = backend(kernel_ptx(LOOP))
    out = np.zeros(96, np.uint32)
    launch(be, "k", [ptr("u32")], [out.ctypes.data], grid=1, block=96, arrays=[out])
    t = np.arange(96, dtype=np.uint32)
    assert out.tolist() == (t + 100 + t).tolist()  # the last iteration's i is tid


# Shared memory read through one base register at several offsets (an unrolled tile loop):
# below and above the base, and a vector; the addresses in 32-bit registers (as NVRTC keeps
# them) or in 64-bit ones (as numba does: ``mov.u64 %rd, smem``).
SHARED_TEMPLATE = """
    .reg .b32 %r<2>; .reg .b64 %rd<4>; .reg .{b} %a<8>; .reg .f32 %f<10>;
    .shared .align 16 .b8 tile[512];
    mov.u32 %r1, %tid.x;
    {widen} %a2, %r1, 4;
    cvt.f32.u32 %f1, %r1;
    mov.{u} %a3, tile;
    add.{u} %a4, %a3, %a2;
    st.shared.f32 [%a4], %f1;
    bar.sync 0;
    and.{b} %a5, %a2, -16;
    add.{u} %a6, %a3, %a5;
    add.{u} %a6, %a6, 16;
    add.{u} %a7, %a3, %a5;
    ld.shared.f32 %f2, [%a6+-16];
    ld.shared.f32 %f3, [%a7+4];
    ld.shared.v2.f32 {{%f4, %f5}}, [%a6+-8];
    ld.shared.f32 %f8, [%a7+12];
    add.f32 %f6, %f2, %f3;
    add.f32 %f6, %f6, %f4;
    add.f32 %f6, %f6, %f5;
    add.f32 %f6, %f6, %f8;
    ld.param.u64 %rd1, [out];
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.f32 [%rd3], %f6;
    ret;
"""
# (kernel, the line after which a test adds a load); the base register of that line is %a6
SHARED_FORMS = {
    "b32": (SHARED_TEMPLATE.format(b="b32", u="u32", widen="mul.lo.u32"), "add.u32 %a6, %a6, 16;"),
    "b64": (SHARED_TEMPLATE.format(b="b64", u="u64", widen="mul.wide.u32"), "add.u64 %a6, %a6, 16;")}


@pytest.mark.parametrize("form", SHARED_FORMS)
@pytest.mark.parametrize("native", [True, False])
def test_shared_loads_from_one_base_register(native, form, monkeypatch):
    if not native:
        monkeypatch.setattr(memory, "native_span", None)
    be = backend(kernel_ptx(SHARED_FORMS[form][0]))
    out = np.zeros(128, np.float32)
    launch(be, "k", [ptr("f32")], [out.ctypes.data], grid=3, block=128, arrays=[out])
    group = np.arange(128) // 4 * 4  # the first of each thread's four-element group
    assert out.tolist() == (group + (group + 1) + (group + 2) + 2 * (group + 3)).astype(np.float32).tolist()


@pytest.mark.parametrize("form", SHARED_FORMS)
def test_a_shared_load_past_the_end_through_a_cached_base_faults(form):
    kernel, anchor = SHARED_FORMS[form]
    body = kernel.replace(anchor, f"{anchor}\n    ld.shared.f32 %f9, [%a6+496];")
    be = backend(kernel_ptx(body))
    out = np.zeros(128, np.float32)
    with pytest.raises(MemoryAccessError, match=r"PTX line \d+: `ld.shared.f32 %f9, \[%a6\+496\]`"):
        launch(be, "k", [ptr("f32")], [out.ctypes.data], grid=1, block=128, arrays=[out])


@pytest.mark.parametrize("form", SHARED_FORMS)
def test_a_faulting_vector_shared_load_reports_the_address_it_names(form):
    """A vector load that leaves the cached-base path is checked whole, at base + offset: the
    same address a scalar load there reports."""
    kernel, anchor = SHARED_FORMS[form]

    def fault(load: str) -> str:
        body = kernel.replace(anchor, f"{anchor}\n    {load}, [%a6+65536];")
        out = np.zeros(128, np.float32)
        with pytest.raises(MemoryAccessError) as caught:
            launch(backend(kernel_ptx(body)), "k", [ptr("f32")], [out.ctypes.data], grid=1, block=128,
                   arrays=[out])
        return str(caught.value).split("address ")[1].split()[0]

    assert fault("ld.shared.v2.f32 {%f9, %f7}") == fault("ld.shared.f32 %f9")


# A stencil: [%rd+-4] and [%rd+4] keep the offset apart from the register (C gather), under a mask.
STENCIL = """
    .reg .b32 %r<4>; .reg .b64 %rd<8>; .reg .f32 %f<4>; .reg .pred %p;
    mov.u32 %r1, %tid.x;
    ld.param.u32 %r2, [n];
    add.u32 %r3, %r2, -1;
    setp.eq.u32 %p, %r1, 0;
    @%p bra $DONE;
    setp.ge.u32 %p, %r1, %r3;
    @%p bra $DONE;
    ld.param.u64 %rd1, [src];
    ld.param.u64 %rd2, [dst];
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd1, %rd3;
    add.s64 %rd5, %rd2, %rd3;
    ld.global.f32 %f1, [%rd4+-4];
    ld.global.f32 %f2, [%rd4+4];
    add.f32 %f3, %f1, %f2;
    st.global.f32 [%rd5+0], %f3;
$DONE:
    ret;
"""


@pytest.mark.parametrize("native", [True, False])
def test_global_stencil_with_offsets_under_a_mask(native, monkeypatch):
    if not native:
        monkeypatch.setattr(memory, "native_gather", None)
    be = backend(kernel_ptx(STENCIL, ".param .u64 src, .param .u64 dst, .param .u32 n"))
    x = np.random.default_rng(5).random(200).astype(np.float32)
    y = np.full(200, -1, np.float32)
    launch(be, "k", [ptr("f32"), ptr("f32"), scalar("u32")], [x.ctypes.data, y.ctypes.data, 200],
           grid=1, block=200, arrays=[x, y])
    assert y[0] == -1 and y[-1] == -1
    assert np.array_equal(y[1:-1], x[:-2] + x[2:])


def test_global_load_one_past_the_buffer_faults_with_the_final_address():
    be = backend(kernel_ptx(STENCIL.replace("add.u32 %r3, %r2, -1;", "mov.u32 %r3, %r2;"),
                            ".param .u64 src, .param .u64 dst, .param .u32 n"))
    x, y = np.zeros(64, np.float32), np.zeros(64, np.float32)
    with pytest.raises(MemoryAccessError, match=f"address 0x{x.ctypes.data + 256:x} .4 bytes. at block "
                                                r"\(0, 0, 0\), thread \(63, 0, 0\)"):
        launch(be, "k", [ptr("f32"), ptr("f32"), scalar("u32")], [x.ctypes.data, y.ctypes.data, 64],
               grid=1, block=64, arrays=[x, y])


@pytest.mark.parametrize("dt", [np.uint32, np.uint64])
def test_span_in_c_matches_numpy(dt, monkeypatch):
    if memory.native_span is None:
        pytest.skip("the C extension (loaders/emulator/_native.c) was not built")
    rng = np.random.default_rng(9)
    values = rng.integers(0, np.iinfo(dt).max, 1000, dtype=dt, endpoint=True)
    values[:3] = [0, np.iinfo(dt).max, 1]
    masks = [None, rng.random(1000) < 0.5, np.zeros(1000, bool), np.arange(1000) == 999]
    native = [memory.span(values, m) for m in masks]
    monkeypatch.setattr(memory, "native_span", None)
    assert native == [memory.span(values, m) for m in masks]
    assert native[2] is None and native[3] == (int(values[999]),) * 3


def test_launches_allocate_from_the_pool_and_give_numpy_its_allocator_back():
    from ptxbridge.loaders.emulator.launch import pooled

    if memory.native_span is None:  # the same extension
        pytest.skip("the C extension (loaders/emulator/_native.c) was not built")
    handler = np._core.multiarray.get_handler_name
    outside = handler()
    with pooled():
        assert handler() == "ptxbridge_emulator_pool"
        kept = np.arange(1 << 15, dtype=np.float64)  # 256 KiB: pooled sizes
        for _ in range(3):
            scratch = np.full(1 << 15, 7.0)
            del scratch
            assert not np.zeros(1 << 15).any()  # a reused block is zeroed for calloc
            assert np.empty(1 << 15).nbytes == 1 << 18
    assert handler() == outside
    assert kept.sum() == (1 << 15) * ((1 << 15) - 1) / 2  # freed later, by the pool's free
    del kept


def test_schedule_in_c_matches_numpy(monkeypatch):
    from ptxbridge.loaders.emulator import machine

    if machine.native_schedule is None:
        pytest.skip("the C extension (loaders/emulator/_native.c) was not built")
    rng = np.random.default_rng(3)
    far = int(machine._FAR)
    pcs = [rng.integers(0, 40, 500).astype(np.int32), np.full(500, far, np.int32), np.full(500, 7, np.int32)]
    masks = [rng.random(500) < 0.3, np.ones(500, bool), np.zeros(500, bool)]
    cases = [(pc, m) for pc in pcs for m in masks]
    native = [machine._schedule(pc, m) for pc, m in cases]
    monkeypatch.setattr(machine, "native_schedule", None)
    for (pc, m), (lowest, here, count, bound) in zip(cases, native, strict=True):
        expected = machine._schedule(pc, m)
        assert (lowest, bound) == (expected[0], expected[3])
        if lowest != far:  # nobody runnable: the machine looks at neither mask nor count
            assert count == expected[2] and np.array_equal(here, expected[1])


@pytest.mark.parametrize("native", [True, False])
def test_a_64_bit_shared_address_past_4_gib_faults_instead_of_wrapping(native, monkeypatch):
    """A 64-bit register reaching past the window by a multiple of 2**32 must not alias the tile
    (a u32 view of the register would wrap it back into the window)."""
    if not native:
        monkeypatch.setattr(memory, "native_span", None)
    kernel, anchor = SHARED_FORMS["b64"]
    body = kernel.replace(anchor, f"{anchor}\n    add.u64 %a1, %a7, 4294967296;\n"
                                  "    ld.shared.f32 %f9, [%a1+4];")
    out = np.zeros(128, np.float32)
    with pytest.raises(MemoryAccessError, match=r"`ld.shared.f32 %f9, \[%a1\+4\]`"):
        launch(backend(kernel_ptx(body)), "k", [ptr("f32")], [out.ctypes.data], grid=1, block=128,
               arrays=[out])


@pytest.mark.parametrize("form", SHARED_FORMS)
def test_shared_loads_through_either_register_width_take_the_cached_base_path(form, monkeypatch):
    """The four loads of the kernel go through Memory.shared_base whatever the register width
    (numba's 64-bit shared addresses used to take the general path: 2.4x slower on its matmul)."""
    seen = []
    original = memory.Memory.shared_base

    def counted(self, *args, **kwargs):
        seen.append(args)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(memory.Memory, "shared_base", counted)
    out = np.zeros(128, np.float32)
    launch(backend(kernel_ptx(SHARED_FORMS[form][0])), "k", [ptr("f32")], [out.ctypes.data], grid=1,
           block=128, arrays=[out])
    assert len(seen) == 4


@pytest.mark.parametrize("form", SHARED_FORMS)
def test_every_thread_storing_to_one_address_leaves_the_last_threads_value(form):
    """All 128 threads store their own value through one address every thread holds (a racy but
    legal store; ``[%a+-4]``, the offset wrapping at the register's width): the last thread wins,
    as on every other store path.  It used to raise NumPy's "setting an array element with a
    sequence".  Thread 127 wrote the same value there before, so the sums do not change."""
    kernel, anchor = SHARED_FORMS[form]
    u = "u32" if form == "b32" else "u64"
    body = kernel.replace(anchor, f"{anchor}\n    mov.{u} %a1, tile;\n    add.{u} %a1, %a1, 512;\n"
                                  "    st.shared.f32 [%a1+-4], %f1;")
    out = np.zeros(128, np.float32)
    launch(backend(kernel_ptx(body)), "k", [ptr("f32")], [out.ctypes.data], grid=1, block=128, arrays=[out])
    group = np.arange(128) // 4 * 4
    assert out.tolist() == (group + (group + 1) + (group + 2) + 2 * (group + 3)).astype(np.float32).tolist()
