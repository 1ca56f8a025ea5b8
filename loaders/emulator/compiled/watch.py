"""The compiled tier's watchdog: the step limit, and the interpreter's endless-loop detector per warp.

Every block adds its length to the warp's steps and compares them with ``%checkat``; past it, the
block jumps to ``%look`` (one copy per kernel) with its index in ``%at``, and ``%look`` returns to
the block through ``%K<index>``.  ``%look`` is :class:`..watchdog.Watchdog` for one warp: past
``max_steps`` the warp ends with the step limit; now and then (:data:`..watchdog.FIRST_LOOK`, then
every :data:`..watchdog.INTERVAL` steps) it snapshots the warp's registers, program counters and
masks at a block's start, and while it watches (:data:`..watchdog.WATCH` steps, doubled after each
look that finds nothing, up to :data:`..watchdog.MAX_WATCH`) it compares the state whenever that
block starts again.  The warp runs alone until it finishes or waits at a barrier, so the same state
with no store, atomic or barrier in between repeats forever: the warp ends with the interpreter's
verdict (:data:`..watchdog.ENDLESS`).  A block that may write memory ends a watch (and a look
does not start at one); a warp that resumes from a barrier starts afresh, as other warps ran.
Registers that no block reads before writing (:mod:`..liveness`) cannot change what the warp does
and are left out of the state.
"""

from __future__ import annotations

from ..machine import Function
from ..watchdog import FIRST_LOOK, INTERVAL, MAX_WATCH, WATCH, writes_memory
from .emit import HANG_CODE, STEPS_CODE, Emitter
from .values import vec

__all__ = ["watch_globals", "watch_start", "watch_ir"]

_M, _I32 = vec("i1"), vec("i32")
_HEADER = 256  # pcs of the lanes elsewhere, then the live, running and blocked lanes' bits


def watch_globals(fn: Function, blocks: list[tuple[int, int]]) -> str:
    """``@starts`` (each block's first instruction, for reports) and ``@writers`` (whether a block may
    write memory), as constants of the module."""
    starts = ", ".join(f"i32 {start}" for start, _ in blocks)
    writers = ", ".join(
        f"i8 {int(any(writes_memory(s.ins) for s in fn.steps[start:end]))}" for start, end in blocks
    )
    n = len(blocks)
    return (
        f"@starts = internal constant [{n} x i32] [{starts}]\n"
        f"@writers = internal constant [{n} x i8] [{writers}]"
    )


def watch_start(e: Emitter, steps: str) -> None:
    """No watch, and the next look ``FIRST_LOOK`` steps after ``steps`` (a fresh or resumed warp)."""
    _put(e, "i1", "false", "%watching")
    _put(e, "i64", f"{WATCH}", "%watchlen")
    _look_after(e, steps, FIRST_LOOK)


def _look_after(e: Emitter, steps: str, interval: int) -> None:
    later = e.op(f"add i64 {steps}, {interval}")
    e.emit(f"store i64 {e.op(f'call i64 @llvm.umin.i64(i64 {later}, i64 %maxsteps)')}, ptr %checkat")
    e.intrinsic("declare i64 @llvm.umin.i64(i64, i64)")


def _slots(e: Emitter, kept: list[str]) -> list[tuple[str, str, str]]:
    """(slot type, the register's slot, its place in ``%snap``) for each register of the state."""
    return [
        (e.slot_type(name), e.slot(name), e.op(f"getelementptr i8, ptr %snap, i64 {_HEADER + 256 * j}"))
        for j, name in enumerate(kept)
    ]


def _header(e: Emitter) -> list[tuple[str, str, int]]:
    """(type, value, offset in ``%snap``) of the scheduler's state: where lanes not running are,
    and which lanes live, run and wait."""
    live, mask, blocked = (e.op(f"load {_M}, ptr {p}") for p in ("%live", "%mask", "%blocked"))
    elsewhere = e.op(f"and {_M} {live}, {e.op(f'xor {_M} {mask}, splat (i1 true)')}")
    pcs = e.op(f"select {_M} {elsewhere}, {_I32} {e.op(f'load {_I32}, ptr %pcs')}, {_I32} zeroinitializer")
    bits = [e.op(f"bitcast {_M} {v} to i32") for v in (live, mask, blocked)]
    return [(_I32, pcs, 0), *(("i32", b, 128 + 4 * k) for k, b in enumerate(bits))]


def watch_ir(e: Emitter, count: int, kept: list[str]) -> None:
    """``%look`` and the ``%K`` resume points of ``count`` blocks (see the module docstring)."""
    e.intrinsic("declare i32 @llvm.cttz.i32(i32, i1)")
    e.put_label("look")
    k, steps = e.op("load i32, ptr %at"), e.op("load i64, ptr %steps")
    e.emit(f"br i1 {e.op(f'icmp ugt i64 {steps}, %maxsteps')}, label %limit, label %look.on")
    e.put_label("limit")
    _end(e, k, count, STEPS_CODE)
    e.put_label("look.on")
    writes = e.op(f"load i8, ptr {e.op(f'getelementptr [{count} x i8], ptr @writers, i32 0, i32 {k}')}")
    writing = e.op(f"icmp ne i8 {writes}, 0")
    e.emit(f"br i1 {_get(e, 'i1', '%watching')}, label %look.watch, label %look.start")
    e.put_label("look.start")
    e.emit(f"br i1 {writing}, label %look.stop, label %look.snap")
    e.put_label("look.snap")  # the state at this block's start, watched for the next steps
    for t, value, offset in _header(e):
        _put(e, t, value, e.op(f"getelementptr i8, ptr %snap, i64 {offset}"))
    for t, slot, at in _slots(e, kept):
        _put(e, t, e.op(f"load {t}, ptr {slot}"), at)
    _put(e, "i32", k, "%snapk")
    _put(e, "i1", "true", "%watching")
    length = _get(e, "i64", "%watchlen")
    _put(e, "i64", e.op(f"add i64 {steps}, {length}"), "%until")
    e.emit(f"store i64 {steps}, ptr %checkat")
    e.emit("br label %look.resume")
    e.put_label("look.watch")
    e.emit(f"br i1 {writing}, label %look.stop, label %look.same")
    e.put_label("look.same")
    snapped = _get(e, "i32", "%snapk")
    e.emit(f"br i1 {e.op(f'icmp eq i32 {k}, {snapped}')}, label %look.cmp, label %look.wait")
    e.put_label("look.cmp")
    same = "true"
    for t, value, offset in _header(e):
        old = _get(e, t, e.op(f"getelementptr i8, ptr %snap, i64 {offset}"))
        same = _and_equal(e, same, t, value, old)
    for t, slot, at in _slots(e, kept):
        same = _and_equal(e, same, t, e.op(f"load {t}, ptr {slot}"), _get(e, t, at))
    e.emit(f"br i1 {same}, label %look.hang, label %look.wait")
    e.put_label("look.hang")
    _end(e, k, count, HANG_CODE)
    e.put_label("look.wait")
    until = _get(e, "i64", "%until")
    e.emit(f"br i1 {e.op(f'icmp uge i64 {steps}, {until}')}, label %look.grow, label %look.keep")
    e.put_label("look.grow")  # no repeat in this look: the next one watches longer
    longer = e.op(f"shl i64 {_get(e, 'i64', '%watchlen')}, 1")
    _put(e, "i64", e.op(f"call i64 @llvm.umin.i64(i64 {longer}, i64 {MAX_WATCH})"), "%watchlen")
    e.emit("br label %look.stop")
    e.put_label("look.keep")
    e.emit(f"store i64 {steps}, ptr %checkat")
    e.emit("br label %look.resume")
    e.put_label("look.stop")
    _put(e, "i1", "false", "%watching")
    _look_after(e, steps, INTERVAL)
    e.emit("br label %look.resume")
    e.put_label("look.resume")
    cases = " ".join(f"i32 {b}, label %K{b}" for b in range(count))
    e.emit(f"switch i32 {k}, label %K0 [{cases}]")


def _get(e: Emitter, t: str, ptr: str) -> str:
    """A load of the watch's state, kept in memory (volatile), as :func:`_put` stores it."""
    return e.op(f"load volatile {t}, ptr {ptr}, align 4")


def _put(e: Emitter, t: str, value: str, ptr: str) -> None:
    """A store to the watch's state (the snapshot, ``%watching``, ``%watchlen``, ``%until``,
    ``%snapk``), volatile so the optimizer keeps it in memory: promoted to registers it would be
    carried through every block of the kernel (a phi per field per block), only for ``%look`` to
    read, which slowed compiles by a sixth and crowded the blocks' registers."""
    e.emit(f"store volatile {t} {value}, ptr {ptr}, align 4")


def _and_equal(e: Emitter, acc: str, t: str, a: str, b: str) -> str:
    """``acc`` and whether ``a`` and ``b`` (scalars, or vectors of every lane) are equal."""
    equal = e.op(f"icmp eq {t} {a}, {b}")
    if t.startswith("<"):
        equal = e.reduce("and", equal, "i1")
    return e.op(f"and i1 {acc}, {equal}")


def _end(e: Emitter, k: str, count: int, code: int) -> None:
    """End the warp with ``code``, naming block ``k``'s first instruction and its first running lane."""
    start = e.op(f"load i32, ptr {e.op(f'getelementptr [{count} x i32], ptr @starts, i32 0, i32 {k}')}")
    e.emit(f"store i64 {e.op(f'zext i32 {start} to i64')}, ptr {e.ctx('err_insn')}")
    bits = e.op(f"bitcast {_M} {e.op(f'load {_M}, ptr %mask')} to i32")
    lane = e.op(f"call i32 @llvm.cttz.i32(i32 {bits}, i1 false)")
    thread = e.op(f"add i32 {e.op('mul i32 %w, 32')}, {lane}")
    e.emit(f"store i64 {e.op(f'zext i32 {thread} to i64')}, ptr {e.ctx('err_thread')}")
    e.emit(f"store i32 {code}, ptr %rc")
    e.emit("br label %exit")
