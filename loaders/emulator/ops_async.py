"""Asynchronous copies and memory barriers (PTX ISA 9.7.9.25 ``cp.async``, 9.7.13.15 ``mbarrier``).

The emulator runs one instruction at a time for all threads, so an
asynchronous copy completes when it is issued: ``cp.async`` copies at once,
``cp.async.commit_group`` / ``wait_group`` / ``wait_all`` have nothing to wait
for.  An ``mbarrier`` object is 8 bytes of shared (or global) memory that
only ``mbarrier`` instructions interpret; here it holds the phase parity (bit
63), the expected arrival count (bits 32-62) and the pending count (bits
0-31).  The state an arrive returns is the object as that thread found it, so
``test_wait`` / ``try_wait`` compare phase parities.  Transaction counts
(``expect_tx``, bulk copies: the Tensor Memory Accelerator) are not
implemented.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .build import Context, Run, op
from .parse import Imm
from .sanitize import WRITE, watched
from .values import as_array

__all__: list[str] = []

_U64 = np.dtype(np.uint64)
_U8 = np.dtype(np.uint8)
_WORDS = {4: (np.dtype(np.uint32), 1), 8: (_U64, 1), 16: (_U64, 2)}
_PHASE = 1 << 63
_COUNT = (1 << 31) - 1
_LOW = 0xFFFFFFFF


def _flags(cx: Context) -> set[str]:
    return {m.split("::")[0] for m in cx.ins.mods}


@op("cp")
def _cp(cx: Context) -> Run:
    flags = _flags(cx)
    if "async" not in flags or flags & {"bulk", "reduce"}:
        raise cx.unsupported("only cp.async (not the bulk / tensor forms) is implemented")
    if flags & {"commit_group", "wait_group", "wait_all"}:
        return lambda fr, m: None  # every copy has already completed
    if "mbarrier" in flags:
        return _copy_arrive(cx, "noinc" in flags)
    if not {"shared", "global"} <= flags:
        raise cx.unsupported("cp.async copies from .global to .shared")
    ops = cx.operands((3, 4, 5))
    size = int(cx.read(ops[2], "u32")(None)) if isinstance(ops[2], Imm) else 0
    if size not in _WORDS:
        raise cx.unsupported(f"cp-size must be 4, 8 or 16 (got {ops[2]})")
    dst, src = cx.address(ops[0], "shared"), cx.address(ops[1], "global")
    extra = ops[3:-1] if "L2::cache_hint" in cx.ins.mods else ops[3:]  # a cache policy comes last
    source_size = None
    if extra:  # src-size (bytes copied, the rest zero-filled) or ignore-src (a predicate: copy nothing)
        is_pred = cx.registers.get(getattr(extra[0], "name", ""), "") == "pred"
        reader = cx.read(extra[0], "pred" if is_pred else "u32")
        source_size = (lambda fr: np.where(reader(fr), 0, size)) if is_pred else reader
    dt, count = _WORDS[size]

    def copy(fr: Any, m: Any) -> None:
        memory = fr.batch.memory
        to, start = dst(fr), src(fr)
        memory.check(to, size, m, write=True)
        partial = None if source_size is None else as_array(np.minimum(source_size(fr), size), fr.batch.n)
        if partial is None or (partial == size).all():
            memory.check(start, size, m, write=False)
            for i in range(count):
                step = np.uint64(i * dt.itemsize)
                memory.store(to + step, dt, memory.load(start + step, dt, m), m)
            return
        for k in range(size):  # src-size < cp-size: copy that many bytes, zero the rest
            step, take = np.uint64(k), partial > k
            reading = take if m is None else take & m
            value = memory.load(start + step, _U8, reading) if reading.any() else np.uint8(0)
            memory.store(to + step, _U8, np.where(take, value, np.uint8(0)), m)

    return watched(cx, copy, ops[0], "shared", size, WRITE) if cx.sanitized else copy


def _copy_arrive(cx: Context, noinc: bool) -> Run:
    """``cp.async.mbarrier.arrive``: an arrive once the thread's copies are done (they are).

    Without ``.noinc`` the pending count is raised by one first, so the pair changes nothing.
    """
    (target,) = cx.operands(1)
    if not noinc:
        cx.address(target, "shared")
        return lambda fr, m: None
    address = cx.address(target, "shared")
    one = np.uint32(1)
    return lambda fr, m: _arrive(fr, m, address(fr), lambda fr: one, drop=False)


def _arrive(fr: Any, m: Any, address: Any, count: Any, drop: bool) -> np.ndarray:
    """Arrive on the barriers at ``address`` in thread order; return each thread's prior state."""
    n = fr.batch.n
    states = np.zeros(n, _U64)
    counts = as_array(np.asarray(count(fr), np.uint32), n)
    for typed, threads, element in fr.batch.memory.elements(address, _U64, m, n):
        for thread, index in zip(threads.tolist(), element.tolist(), strict=True):
            word = int(typed[index])
            states[thread] = word
            phase, expected, pending = word & _PHASE, (word >> 32) & _COUNT, word & _LOW
            arrivals = int(counts[thread])
            pending = max(pending - arrivals, 0)
            if drop:
                expected = max(expected - arrivals, 0)
            if pending == 0:
                phase, pending = phase ^ _PHASE, expected
            typed[index] = phase | (expected << 32) | pending
    return states


@op("mbarrier")
def _mbarrier(cx: Context) -> Run:
    flags = _flags(cx)
    space = "shared" if "shared" in flags else "generic"
    if flags & {"expect_tx", "complete_tx"}:
        raise cx.unsupported("mbarrier transaction counts (expect_tx / complete_tx) are not implemented")
    if "init" in flags:
        target, count = cx.operands(2)
        address, rcount = cx.address(target, space), cx.read(count, "u32")

        def init(fr: Any, m: Any) -> None:
            counts = np.asarray(rcount(fr), np.uint64) & np.uint64(_COUNT)
            fr.batch.memory.store(address(fr), _U64, (counts << np.uint64(32)) | counts, m)

        return init
    if "inval" in flags:
        (target,) = cx.operands(1)
        address = cx.address(target, space)
        zero = np.uint64(0)
        return lambda fr, m: fr.batch.memory.store(address(fr), _U64, zero, m)
    if "arrive" in flags or "arrive_drop" in flags:
        ops = cx.operands((2, 3))
        write, address = cx.write(ops[0]), cx.address(ops[1], space)
        count = cx.read(ops[2], "u32") if len(ops) == 3 else (lambda fr: np.uint32(1))
        drop = "arrive_drop" in flags
        return lambda fr, m: write(fr, _arrive(fr, m, address(fr), count, drop), m)
    if "test_wait" in flags or "try_wait" in flags:
        ops = cx.operands((3, 4))  # try_wait may add a suspend-time hint, which changes nothing here
        write, address = cx.write(ops[0]), cx.address(ops[1], space)
        parity = "parity" in flags
        expected = cx.read(ops[2], "u32" if parity else "b64")

        def wait(fr: Any, m: Any) -> None:
            current = fr.batch.memory.load(address(fr), _U64, m) >> np.uint64(63)
            before = np.asarray(expected(fr)).astype(np.uint64) & np.uint64(1) if parity else \
                np.asarray(expected(fr), np.uint64) >> np.uint64(63)
            done = current != before
            write(fr, done, m)  # that phase has completed
            waiting = ~done if m is None else m & ~done
            if np.any(waiting):  # let the threads that would complete it run first (.machine)
                fr.batch.yielding = np.broadcast_to(waiting, (fr.batch.n,))
            if cx.sanitized and np.any(done):  # a completed phase orders the threads that arrived
                fr.batch.sanitizer.barrier()

        return wait
    if "pending_count" in flags:
        d, state = cx.operands(2)
        write, rstate = cx.write(d), cx.read(state, "b64")
        low = np.uint64(_LOW)
        return lambda fr, m: write(fr, (np.asarray(rstate(fr), np.uint64) & low).astype(np.uint32), m)
    raise cx.unsupported("mbarrier needs one of .init/.inval/.arrive/.arrive_drop/.test_wait/.try_wait/"
                         ".pending_count")
