"""Run-time state: a batch of threads, one function activation's registers and parameters."""

from __future__ import annotations

from typing import Any

import numpy as np

from .memory import Memory
from .watchdog import Progress, Watchdog

__all__ = ["Batch", "Frame", "ParamStore", "coordinates", "source_line"]


class Batch:
    """The threads executing together: whole blocks, each padded to a multiple of 32 threads.

    ``special`` maps special-register names (``%tid.x``, ``%laneid``...) to
    per-thread arrays, or scalars where every thread agrees.
    """

    __slots__ = ("block_threads", "heap", "kernel", "max_steps", "memory", "n", "sanitizer", "special",
                 "steps", "thread_steps", "watchdog", "yielding")

    def __init__(self, n: int, block_threads: int, memory: Memory, special: dict[str, Any], kernel: str,
                 max_steps: int, heap: Any = None, progress: Progress | None = None):
        self.n, self.memory, self.special, self.kernel = n, memory, special, kernel
        self.heap = heap  # the device heap (malloc / free), shared by every launch of a backend
        self.block_threads = block_threads  # per block, padded to whole warps
        self.steps = 0
        self.thread_steps = 0  # sum over steps of the threads at the instruction
        self.max_steps = max_steps
        self.watchdog = Watchdog(max_steps, progress)  # the machine asks it when steps pass check_at
        self.sanitizer: Any = None  # racecheck / initcheck shadow state, when a tool is on
        self.yielding: Any = None  # threads whose wait just failed (an mbarrier phase not complete)

    def where(self, thread: int) -> str:
        """``block (x, y, z), thread (x, y, z)`` of batch thread ``thread``, for messages."""
        def axis(name: str) -> int:
            value = self.special[name]
            return int(value[thread] if isinstance(value, np.ndarray) else value)

        return coordinates(tuple(axis(f"%ctaid.{c}") for c in "xyz"), tuple(axis(f"%tid.{c}") for c in "xyz"))


def coordinates(block: tuple[int, ...], thread: tuple[int, ...]) -> str:
    """``block (x, y, z), thread (x, y, z)``: a thread as reports name it."""
    return f"block {block}, thread {thread}"


def source_line(files: dict[int, str] | None, ins: Any) -> str:
    """`` (kernel.cu:7)`` where the PTX has line info (``.loc``) for the instruction, else ''."""
    if ins.source is None:
        return ""
    number, line = ins.source
    name = (files or {}).get(number, f"file {number}")
    return f" ({name.rsplit('/', 1)[-1]}:{line})"


class ParamStore:
    """A ``.param`` variable of a call sequence: ``size`` bytes per thread."""

    __slots__ = ("data",)

    def __init__(self, n: int, size: int):
        self.data = np.zeros((n, max(size, 1)), np.uint8)

    def column(self, offset: int, dt: np.dtype) -> np.ndarray:
        if offset < 0 or offset + dt.itemsize > self.data.shape[1]:
            raise IndexError(offset)
        return self.data[:, offset:offset + dt.itemsize].view(dt)[:, 0]

    def load(self, offset: int, dt: np.dtype) -> np.ndarray:
        return self.column(offset, dt).copy()

    def store(self, offset: int, dt: np.dtype, values: Any, m: Any) -> None:
        column = self.column(offset, dt)
        if m is None:
            column[:] = values
        else:
            column[m] = values[m] if isinstance(values, np.ndarray) else values


class Frame:
    """One activation of a function for the whole batch: its registers and its ``.param`` variables."""

    __slots__ = ("batch", "params", "regs")

    def __init__(self, regs: dict[str, Any], params: dict[str, ParamStore], batch: Batch):
        self.regs, self.params, self.batch = regs, params, batch

    def param(self, name: str, size: int) -> ParamStore:
        store = self.params.get(name)
        if store is None:
            store = self.params[name] = ParamStore(self.batch.n, size)
        return store
