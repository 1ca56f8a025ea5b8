"""Atomics, vector accesses, parameter space and half precision on the CPU emulator (hand-written PTX).

Atomics must behave as one serialization of the threads: every returned old
value and the final memory are checked against such a serialization.
"""

from __future__ import annotations

import numpy as np
import pytest
from _emulator import backend, elementwise, kernel_ptx, launch, ptr
from hypothesis import given, settings
from hypothesis import strategies as st

from ptxbridge.abi.kinds import Opaque

RNG = np.random.default_rng(5)
_ADDRESS = """
    mov.u32 %t, %tid.x;
    ld.param.u64 %rd1, [cell];
    ld.param.u64 %rd2, [old];
    mul.wide.u32 %rd3, %t, {size};
    add.s64 %rd2, %rd2, %rd3;
"""


def atomic(instruction: str, cell: np.ndarray, values: np.ndarray, threads: int) -> np.ndarray:
    """Each thread t runs ``instruction`` on ``cell`` with %v = values[t]; returns the old values."""
    size = values.itemsize
    reg = {4: "b32", 8: "b64"}[size]
    body = _ADDRESS.format(size=size) + f"""
    ld.param.u64 %rd4, [vals];
    add.s64 %rd4, %rd4, %rd3;
    ld.global.{reg} %v, [%rd4];
    {instruction}
    st.global.{reg} [%rd2], %o;
    ret;"""
    regs = f".reg .b32 %t; .reg .b64 %rd<5>; .reg .{reg} %v, %o, %w;"
    be = backend(kernel_ptx(body, ".param .u64 cell, .param .u64 old, .param .u64 vals", regs))
    old = np.zeros(threads, values.dtype)
    launch(be, "k", [ptr("u8")] * 3, [cell.ctypes.data, old.ctypes.data, values.ctypes.data],
           grid=1, block=threads, arrays=[cell, old, values])
    return old


def test_atomic_add_returns_a_prefix_of_a_serialization():
    cell = np.array([1000], np.uint32)
    values = RNG.integers(0, 50, 256).astype(np.uint32)
    old = atomic("atom.global.add.u32 %o, [%rd1], %v;", cell, values, 256)
    order = np.argsort(old)
    assert cell[0] == 1000 + values.sum()
    np.testing.assert_array_equal(old[order], 1000 + np.concatenate([[0], np.cumsum(values[order])[:-1]]))


def test_float_atomic_add_to_one_address_is_sequentially_rounded():
    cell = np.array([0.1], np.float32)
    values = RNG.random(512).astype(np.float32) * 1000
    old = atomic("atom.global.add.f32 %o, [%rd1], %v;", cell, values, 512)
    running = np.add.accumulate(np.concatenate([[np.float32(0.1)], values]), dtype=np.float32)
    np.testing.assert_array_equal(np.sort(old), np.sort(running[:-1]))
    assert cell[0] == running[-1]


def test_compare_and_swap_lets_exactly_one_thread_win():
    cell = np.array([0], np.uint32)
    values = np.arange(1, 129, dtype=np.uint32)
    old = atomic("atom.global.cas.b32 %o, [%rd1], 0, %v;", cell, values, 128)
    winners = np.flatnonzero(old == 0)
    assert len(winners) == 1 and cell[0] == values[winners[0]] and (old[old != 0] == cell[0]).all()


def test_exchange_forms_one_chain():
    cell = np.array([7], np.uint64)
    values = np.arange(100, 164, dtype=np.uint64)
    old = atomic("atom.global.exch.b64 %o, [%rd1], %v;", cell, values, 64)
    assert sorted([*old.tolist(), int(cell[0])]) == sorted([7, *values.tolist()])


@pytest.mark.parametrize(("op", "t", "dtype"), [("min", "s32", np.int32), ("max", "u32", np.uint32),
                                                ("and", "b32", np.uint32), ("or", "b32", np.uint32),
                                                ("xor", "b64", np.uint64)])
def test_min_max_and_bitwise_atomics(op, t, dtype):
    info = np.iinfo(dtype)
    values = RNG.integers(info.min, info.max, 96, dtype=dtype, endpoint=True)
    start = values[0] ^ values[1] if op == "xor" else values[5]
    cell = np.array([start], dtype)
    atomic(f"atom.global.{op}.{t} %o, [%rd1], %v;", cell, values, 96)
    reduce = {"min": np.minimum, "max": np.maximum, "and": np.bitwise_and, "or": np.bitwise_or,
              "xor": np.bitwise_xor}[op]
    assert cell[0] == reduce.reduce(np.concatenate([[start], values]).astype(dtype))


def test_inc_and_dec_wrap_at_the_bound():
    cell = np.array([0], np.uint32)
    old = atomic("atom.global.inc.u32 %o, [%rd1], 9;", cell, np.zeros(64, np.uint32), 64)
    assert sorted(old.tolist()) == sorted([k % 10 for k in range(64)]) and cell[0] == 64 % 10
    cell = np.array([2], np.uint32)
    old = atomic("atom.global.dec.u32 %o, [%rd1], 4;", cell, np.zeros(32, np.uint32), 32)
    sequence = [2]
    for _ in range(32):
        v = sequence[-1]
        sequence.append(4 if v == 0 or v > 4 else v - 1)
    assert sorted(old.tolist()) == sorted(sequence[:-1]) and cell[0] == sequence[-1]


def test_shared_memory_atomics_are_per_block_and_red_returns_nothing():
    body = """
    mov.u32 %t, %tid.x;
    setp.eq.u32 %p, %t, 0;
    @%p st.shared.u32 [total], 0;
    bar.sync 0;
    red.shared.add.u32 [total], %t;
    bar.sync 0;
    @!%p ret;
    ld.shared.u32 %v, [total];
    mov.u32 %b, %ctaid.x;
    ld.param.u64 %rd1, [out];
    mul.wide.u32 %rd2, %b, 4;
    add.s64 %rd1, %rd1, %rd2;
    st.global.u32 [%rd1], %v;
    ret;"""
    be = backend(kernel_ptx(body, regs=".reg .b32 %t, %v, %b; .reg .pred %p; .reg .b64 %rd<3>;",
                            globals_=".shared .align 4 .u32 total;"))
    out = np.zeros(6, np.uint32)
    launch(be, "k", [ptr("u32")], [out.ctypes.data], grid=6, block=100, arrays=[out])
    np.testing.assert_array_equal(out, sum(range(100)))


def test_vector_loads_and_stores():
    x = RNG.random(4 * 64).astype(np.float32)
    body = """
    mov.u32 %t, %tid.x;
    ld.param.u64 %rd1, [out];
    ld.param.v2.u32 {%a, %b}, [pair];
    mul.wide.u32 %rd2, %t, 16;
    add.s64 %rd3, %rd1, %rd2;
    ld.global.v4.f32 {%f0, %f1, %f2, %f3}, [%rd3];
    add.f32 %f0, %f0, %f3;
    cvt.rn.f32.u32 %f3, %a;
    cvt.rn.f32.u32 %f1, %b;
    st.global.v4.f32 [%rd3], {%f3, %f1, %f2, %f0};
    ret;"""
    regs = ".reg .b32 %t, %a, %b; .reg .f32 %f<4>; .reg .b64 %rd<4>;"
    be = backend(kernel_ptx(body, ".param .u64 out, .param .align 8 .b8 pair[8]", regs))
    packed = np.array([3, 9], np.uint32).tobytes()
    y = x.copy()
    launch(be, "k", [ptr("f32"), Opaque(8, 8)], [y.ctypes.data, packed], grid=1, block=64, arrays=[y])
    quads = x.reshape(64, 4)
    expected = np.stack([np.full(64, 3.0), np.full(64, 9.0), quads[:, 2], quads[:, 0] + quads[:, 3]], 1)
    np.testing.assert_array_equal(y.reshape(64, 4), expected.astype(np.float32))


def test_half_precision_arithmetic_rounds_once():
    a = (RNG.random(256) * 50 - 25).astype(np.float16)
    b = (RNG.random(256) * 50 - 25).astype(np.float16)
    c = (RNG.random(256) * 4).astype(np.float16)
    got = elementwise("fma.rn.f16 %d, %a, %b, %c;", np.float16, a, b, c)
    exact = a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)  # exact for f16 inputs
    np.testing.assert_array_equal(got, exact.astype(np.float16))
    added = elementwise("add.f16 %d, %a, %b;", np.float16, a, b)
    np.testing.assert_array_equal(added, (a.astype(np.float64) + b).astype(np.float16))
    widened = elementwise("cvt.f32.f16 %d, %a;", np.float32, a)
    np.testing.assert_array_equal(widened, a.astype(np.float32))


def _serial_cas(cell: np.ndarray, element: np.ndarray, compare: np.ndarray, swap: np.ndarray) -> np.ndarray:
    """atom.cas by one thread after another, in thread order: the reference the loader follows."""
    old = np.empty_like(compare)
    for thread, target in enumerate(element):
        old[thread] = cell[target]
        if cell[target] == compare[thread]:
            cell[target] = swap[thread]
    return old


@given(st.data())
@settings(max_examples=200, deadline=None)
def test_contended_compare_and_swap_matches_a_thread_by_thread_serialization(data):
    """Many threads on few addresses with compare values that often match (chains of successful
    swaps): the loader's vectorized chain must give every thread the old value, and leave the
    final value, of the serialization in thread order."""
    from ptxbridge.loaders.emulator.ops_mem import apply_atomic

    threads = data.draw(st.integers(1, 300))
    cells = data.draw(st.integers(1, 4))
    small = st.integers(0, 5)
    element = np.array(data.draw(st.lists(st.integers(0, cells - 1), min_size=threads, max_size=threads)))
    compare = np.array(data.draw(st.lists(small, min_size=threads, max_size=threads)), np.uint32)
    swap = np.array(data.draw(st.lists(small, min_size=threads, max_size=threads)), np.uint32)
    start = np.array(data.draw(st.lists(small, min_size=cells, max_size=cells)), np.uint32)
    expected_cell = start.copy()
    expected_old = _serial_cas(expected_cell, element, compare, swap)
    cell = start.copy()
    old = apply_atomic(cell, element, compare, swap, "cas")
    np.testing.assert_array_equal(old, expected_old)
    np.testing.assert_array_equal(cell, expected_cell)
