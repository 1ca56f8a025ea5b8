"""Loads, stores and atomics (PTX ISA 9.7.9 "Data Movement", 9.7.13 "Parallel Synchronization").

Global, shared, local, constant and kernel-parameter accesses go through
:class:`~.memory.Memory` (bounds-checked); the ``.param`` variables of call
sequences and of device functions are per-thread stores in the frame.
Atomics are applied one thread at a time in thread order, so every thread's
returned old value and the final memory are those of one valid serialization.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .build import Context, Run, op
from .memory import WINDOWS, plus
from .parse import Mem, Reg, Sym, Vec
from .sanitize import ATOMIC, READ, WRITE, synchronizing, watched
from .values import DTYPES, as_array

__all__ = ["apply_atomic"]

_QUALIFIERS = frozenset((
    "weak", "volatile", "relaxed", "acquire", "release", "acq_rel", "mmio", "cta", "gpu", "sys", "cluster",
    "ca", "cg", "cs", "lu", "cv", "wb", "wt", "nc", "global", "shared", "local", "param", "const",
))
_VECTORS = {"v2": 2, "v4": 4, "v8": 8}
_MEM_TYPES = frozenset(t for t in DTYPES if t != "pred")


def _parts(cx: Context, extra: frozenset[str] = frozenset()) -> tuple[str, int, str, set[str]]:
    """``(type, vector count, state space, other flags)`` of a memory instruction."""
    mods = cx.ins.mods
    if not mods or mods[-1] not in _MEM_TYPES:
        raise cx.unsupported(f"needs a type suffix (got {mods})")
    flags = set()
    count = 1
    for mod in mods[:-1]:
        head = mod.split("::")[0]
        if mod in _VECTORS:
            count = _VECTORS[mod]
        elif head in ("L1", "L2") or mod in ("level",):
            continue
        elif head in _QUALIFIERS or mod in extra:
            flags.add(head if head in ("shared", "param") else mod)
        else:
            raise cx.unsupported(f"unsupported modifier .{mod}")
    if "shared" in flags and any(m.startswith("shared::cluster") for m in mods):
        raise cx.unsupported("distributed shared memory (.shared::cluster) is not implemented")
    return mods[-1], count, cx.state_space(flags), flags


def _param_store(cx: Context, mem: Any, space: str) -> tuple[str, int, int] | None:
    """``(name, size, offset)`` when ``mem`` names a per-thread ``.param`` variable."""
    if space != "param" or not isinstance(mem, Mem) or not isinstance(mem.base, Sym):
        return None
    sym = cx.symbol(mem.base.name)
    if sym.space != "param":
        return None
    return mem.base.name, sym.value, mem.offset


def _address(cx: Context, mem: Any, space: str) -> tuple[Callable[[Any], Any], int]:
    """``(closure, offset)``: the access is at ``closure(frame) + offset``.  For ``[%rd+off]`` in a
    space without a window (global, const, generic) the offset stays apart, so that the memory
    checks and gathers the register's own array (no array of sums); else it is in the closure."""
    if (isinstance(mem, Mem) and isinstance(mem.base, Reg) and mem.base.name in cx.registers
            and cx.reg_dtype(mem.base.name).itemsize == 8 and space not in WINDOWS):
        return cx.read(mem.base, "u64"), mem.offset
    return cx.address(mem, space), 0


def _items(operand: Any, count: int) -> list[Any]:
    return list(operand.items) if isinstance(operand, Vec) else [operand] if count == 1 else []


@op("ld", "ldu")
def _ld(cx: Context) -> Run:
    t, count, space, _ = _parts(cx)
    d, src = cx.operands(2)
    writers = [cx.write(item) for item in _items(d, count)]
    if len(writers) != count:
        raise cx.unsupported(f"expects {count} destination registers")
    dt, size = DTYPES[t], DTYPES[t].itemsize
    param = _param_store(cx, src, space)
    if param is not None:
        name, total, offset = param
        if offset + count * size > total:
            raise cx.unsupported(f"reads past the end of .param {name} ({total} bytes)")

        def load_param(fr: Any, m: Any) -> None:
            store = fr.param(name, total)
            for i, w in enumerate(writers):
                w(fr, store.load(offset + i * size, dt), m)

        return load_param
    address, offset = _address(cx, src, space)
    steps = [offset + i * size for i in range(count)]
    whole = count * size if count > 1 else 0  # a vector is aligned to its whole size (PTX ISA 5.4.5)
    shared = cx.shared_offset(src) if space == "shared" else None
    based = _shared_base(cx, src, size * count) if shared is not None else None
    if based is not None:
        register, displacement = based
        extent = size * count

        def load_based(fr: Any, m: Any) -> None:
            found = fr.batch.memory.shared_base(fr.regs[register], dt, m, extent)
            if found is None or found[3] + displacement < 0 or found[4] + displacement + extent > found[5]:
                return load_shared(fr, m)  # a fault, or a form the general path decides
            typed, element, first = found[0], found[1], found[2] + displacement // size
            for i, w in enumerate(writers):
                k = first + i
                w(fr, np.take(typed[k:], element, mode="clip") if k >= 0 else
                  np.take(typed, element + k, mode="clip"), m)

    if shared is not None:

        def load_shared(fr: Any, m: Any) -> None:
            found = fr.batch.memory.shared(shared(fr), dt, m, count)
            if found is None:
                return load(fr, m)
            typed, element = found
            for i, w in enumerate(writers):
                at = element + i if i else element
                w(fr, typed[at] if m is None else np.take(typed, at, mode="clip"), m)

    origin = cx.origin

    def load(fr: Any, m: Any) -> None:
        base = address(fr)
        memory = fr.batch.memory
        extent = None if origin is None else memory.extent(origin)
        if whole:
            memory.check(plus(base, offset), whole, m, False, extent)
        for step, w in zip(steps, writers, strict=True):
            w(fr, memory.load(base, dt, m, step, extent), m)

    chosen = load if shared is None else load_shared if based is None else load_based
    if cx.sanitized and space not in ("param", "const"):
        return synchronizing(cx, watched(cx, chosen, src, space, count * size, READ))
    return chosen


_OFFSET_TYPES = (np.dtype(np.uint32), np.dtype(np.uint64))


def _shared_base(cx: Context, mem: Any, whole: int) -> tuple[str, int] | None:
    """For ``[%r+off]`` through a 32- or 64-bit unsigned register with ``off`` a multiple of the
    access's ``whole`` bytes: ``(register, off)``, the form :meth:`Memory.shared_base` speeds up;
    None for other forms."""
    base = mem.base
    if not isinstance(base, Reg) or cx.reg_dtype(base.name) not in _OFFSET_TYPES or mem.offset % whole:
        return None
    return base.name, mem.offset


@op("st")
def _st(cx: Context) -> Run:
    t, count, space, _ = _parts(cx)
    dst, value = cx.operands(2)
    items = _items(value, count)
    if len(items) != count:
        raise cx.unsupported(f"expects {count} source values")
    readers = [cx.read(item, t) for item in items]
    dt, size = DTYPES[t], DTYPES[t].itemsize
    param = _param_store(cx, dst, space)
    if param is not None:
        name, total, offset = param
        if offset + count * size > total:
            raise cx.unsupported(f"writes past the end of .param {name} ({total} bytes)")

        def store_param(fr: Any, m: Any) -> None:
            store = fr.param(name, total)
            for i, r in enumerate(readers):
                store.store(offset + i * size, dt, r(fr), m)

        return store_param
    address, offset = _address(cx, dst, space)
    steps = [offset + i * size for i in range(count)]
    whole = count * size if count > 1 else 0
    shared = cx.shared_offset(dst) if space == "shared" else None
    if shared is not None:

        def store_shared(fr: Any, m: Any) -> None:
            found = fr.batch.memory.shared(shared(fr), dt, m, count)
            if found is None or not np.ndim(found[1]):
                return store(fr, m)  # a fault, or one address for every thread: the general path
            typed, element = found
            chosen = element if m is None else element[m]
            for i, r in enumerate(readers):
                values = r(fr)
                if m is not None and isinstance(values, np.ndarray):
                    values = values[m]
                typed[chosen + i if i else chosen] = values

    origin = cx.origin

    def store(fr: Any, m: Any) -> None:
        base = address(fr)
        memory = fr.batch.memory
        extent = None if origin is None else memory.extent(origin)
        if whole:  # checked whole first: a faulting vector store writes none of its elements
            memory.check(plus(base, offset), whole, m, True, extent)
        for step, r in zip(steps, readers, strict=True):
            memory.store(base, dt, r(fr), m, step, extent)

    chosen = store if shared is None else store_shared
    if cx.sanitized:
        return watched(cx, chosen, dst, space, count * size, WRITE, lambda fr: [r(fr) for r in readers])
    return chosen


_ATOMIC_OPS = ("add", "min", "max", "inc", "dec", "cas", "exch", "and", "or", "xor")
_ACCUMULATE: dict[str, Callable[..., Any]] = {
    "add": np.add.accumulate, "min": np.minimum.accumulate, "max": np.maximum.accumulate,
    "and": np.bitwise_and.accumulate, "or": np.bitwise_or.accumulate, "xor": np.bitwise_xor.accumulate,
}


def _update(name: str) -> Callable[[Any, Any, Any], Any]:
    """new = f(old, b, c) for one atomic operation (PTX ISA 9.7.13.5 ``atom``)."""
    return {
        "add": lambda o, b, c: o + b,
        "min": lambda o, b, c: np.minimum(o, b),
        "max": lambda o, b, c: np.maximum(o, b),
        "inc": lambda o, b, c: np.where(o >= b, o.dtype.type(0), o + o.dtype.type(1)).astype(o.dtype),
        "dec": lambda o, b, c: np.where((o == 0) | (o > b), b, o - o.dtype.type(1)).astype(o.dtype),
        "cas": lambda o, b, c: np.where(o == b, c, o).astype(o.dtype),
        "exch": lambda o, b, c: np.broadcast_to(b, o.shape).astype(o.dtype),
        "and": lambda o, b, c: o & b, "or": lambda o, b, c: o | b, "xor": lambda o, b, c: o ^ b,
    }[name]


def apply_atomic(typed: np.ndarray, element: np.ndarray, b: np.ndarray, c: np.ndarray,
                 name: str) -> np.ndarray:
    """Apply atomic ``name`` for each thread in order; return each thread's old value."""
    k = len(element)
    old = np.empty(k, typed.dtype)
    if k == 0:
        return old
    update = _update(name)
    order = np.argsort(element, kind="stable")
    sorted_elements = element[order]
    starts = np.flatnonzero(np.r_[True, sorted_elements[1:] != sorted_elements[:-1]])
    counts = np.diff(np.r_[starts, k])
    longest = int(counts.max())
    firsts = sorted_elements[starts]
    if longest == 1:
        old[:] = typed[element]
        typed[element] = update(old, b, c)
    elif name == "add" and typed.dtype.kind in "iu":  # exact with wrapping prefix sums
        values = b[order]
        inclusive = np.cumsum(values, dtype=typed.dtype)
        exclusive = inclusive - values
        initial = typed[firsts].copy()
        old[order] = np.repeat(initial, counts) + (exclusive - np.repeat(exclusive[starts], counts))
        typed[firsts] = initial + (inclusive[starts + counts - 1] - exclusive[starts])
    elif name == "cas" and len(starts) < longest:  # contended: a chain per address, not a step per thread
        for start, count, target in zip(starts, counts, firsts, strict=True):
            threads = order[start:start + count]
            old[threads], typed[target] = _cas_chain(typed[target], b[threads], c[threads])
    elif (name in _ACCUMULATE or name == "exch") and len(starts) < longest:
        for start, count, target in zip(starts, counts, firsts, strict=True):
            threads = order[start:start + count]
            sequence = np.concatenate(([typed[target]], b[threads])).astype(typed.dtype)
            running = sequence if name == "exch" else _ACCUMULATE[name](sequence, dtype=typed.dtype)
            old[threads] = running[:-1]
            typed[target] = running[-1]
    else:
        for rank in range(longest):
            threads = order[starts[counts > rank] + rank]
            targets = element[threads]
            old[threads] = typed[targets]
            typed[targets] = update(old[threads], b[threads], c[threads])
    return old


def _cas_chain(value: Any, compare: np.ndarray, swap: np.ndarray) -> tuple[np.ndarray, Any]:
    """Compare-and-swaps on one address by threads in order: each one's old value, and the last value.

    Every thread sees the value the successful swaps before it left; a thread succeeds where its
    compare value equals that value.  One vectorized search per success: a compare-and-swap loop
    (numba's float atomics) has a batch of threads that all read the same old value, so only the
    first succeeds per round, where a step per thread would loop over the whole batch in Python.
    """
    old = np.empty_like(compare)
    at = 0
    while at < len(compare):
        hits = np.flatnonzero(compare[at:] == value)
        if hits.size == 0:
            old[at:] = value
            break
        won = at + int(hits[0])
        old[at:won + 1] = value
        value, at = swap[won], won + 1
    return old, value


@op("atom", "red")
def _atom(cx: Context) -> Run:
    t, count, space, flags = _parts(cx, frozenset(_ATOMIC_OPS) | {"noftz"})
    names = flags & set(_ATOMIC_OPS)
    if count != 1 or len(names) != 1:
        raise cx.unsupported("needs exactly one operation from " + ", ".join(_ATOMIC_OPS))
    name = names.pop()
    if space not in ("global", "shared", "generic"):
        raise cx.unsupported(f"atomics on .{space} are not supported")
    if t in ("f16", "bf16", "f16x2", "bf16x2") or (t in ("f32", "f64") and name not in
                                                   ("add", "exch", "min", "max")):
        raise cx.unsupported(f"atom.{name}.{t} is not implemented")
    returns = cx.ins.opcode == "atom"
    operands = cx.operands((4 if name == "cas" else 3) if returns else (3 if name == "cas" else 2))
    w = cx.write(operands[0]) if returns else None
    rest = operands[1:] if returns else operands
    address = cx.address(rest[0], space)
    rb = cx.read(rest[1], t)
    rc = cx.read(rest[2], t) if name == "cas" else (lambda fr: rb(fr))
    dt = DTYPES[t]
    origin = cx.origin

    def run(fr: Any, m: Any) -> None:
        n = fr.batch.n
        result = np.zeros(n, dt)
        b, c = as_array(rb(fr), n), as_array(rc(fr), n)
        memory = fr.batch.memory
        extent = None if origin is None else memory.extent(origin)
        for typed, threads, element in memory.elements(address(fr), dt, m, n, extent):
            result[threads] = apply_atomic(typed, element, b[threads], c[threads], name)
        if w is not None:
            w(fr, result, m)

    return synchronizing(cx, watched(cx, run, rest[0], space, dt.itemsize, ATOMIC)) if cx.sanitized else run


@op("prefetch", "prefetchu", "discard", "applypriority")
def _hint(cx: Context) -> Run:
    return lambda fr, m: None


@op("createpolicy")
def _createpolicy(cx: Context) -> Run:
    w = cx.write(cx.ins.operands[0])
    zero = np.uint64(0)
    return lambda fr, m: w(fr, zero, m)
