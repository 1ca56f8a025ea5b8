"""The memory a launch may write, kept so that a launch that leaves the compiled code can start over.

A kernel that can reach a call the tier does not compile (:mod:`.inline`'s cold calls: a function
that never returns, such as Rust's panic) runs compiled until a thread gets there; the launch then
runs again on the interpreter, which must see the memory as the launch found it.  Every writable
row of the launch's region table (the caller's writable buffers, module variables, the device
heap) is copied before the run and copied back before the interpreter's: a kernel writes nothing
else (shared and local memory are the context's own, and zeroed per block).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

__all__ = ["Snapshot"]


class Snapshot:
    """Copies of the writable rows (base, end, host minus base, flags: bit 0 writable) of a region table."""

    def __init__(self, rows: Sequence[tuple[int, int, int, int]]):
        self.copies: list[tuple[int, bytearray]] = []
        for base, end, delta, flags in rows:
            if flags & 1 and end > base:
                host, copy = (base + delta) % (1 << 64), bytearray(end - base)
                ctypes.memmove((ctypes.c_char * len(copy)).from_buffer(copy), host, len(copy))
                self.copies.append((host, copy))

    def restore(self) -> None:
        """Write every kept row back where it was."""
        for host, copy in self.copies:
            ctypes.memmove(host, (ctypes.c_char * len(copy)).from_buffer(copy), len(copy))
