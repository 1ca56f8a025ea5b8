"""The memory a launch may write, kept so that a launch that leaves the compiled code can start over.

A kernel that can reach a call the tier does not compile (:mod:`.inline`'s cold calls: a function
that never returns, such as Rust's panic) runs compiled until a thread gets there; the launch then
runs again on the interpreter, which must see the memory as the launch found it.  Every writable
row of the launch's region table (the caller's writable buffers, module variables, the device
heap) is copied before the run and copied back before the interpreter's: a kernel writes nothing
else (shared and local memory are the context's own, and zeroed per block).  Where every store of
the compiled code derives its address from a pointer argument, only those arguments' extents are
copied (:meth:`.tier.CompiledTier._writable`).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np

__all__ = ["Snapshot"]


class Snapshot:
    """Copies of the writable rows (base, end, host minus base, flags: bit 0 writable) of a region table."""

    def __init__(self, rows: Sequence[tuple[int, int, int, int]]):
        self.copies: list[tuple[int, np.ndarray]] = []
        for base, end, delta, flags in rows:
            if flags & 1 and end > base:
                host, copy = (base + delta) % (1 << 64), np.empty(end - base, np.uint8)
                ctypes.memmove(copy.ctypes.data, host, copy.size)
                self.copies.append((host, copy))

    def restore(self) -> None:
        """Write every kept row back where it was."""
        for host, copy in self.copies:
            ctypes.memmove(host, copy.ctypes.data, copy.size)
