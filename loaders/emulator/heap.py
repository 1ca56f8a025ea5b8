"""The device heap: ``malloc`` / ``free`` from device code (``new`` / ``delete`` in CUDA C++).

CUDA gives each context a heap (8 MiB unless the host raises
``cudaLimitMallocHeapSize``); ``malloc`` returns NULL when it is full.  Here
every ``malloc`` executed by a group of threads is one emulator-owned region
of 16-byte aligned blocks, one per thread; blocks outlive the launch, as on
the GPU, and a region becomes unreachable (later accesses fault) once every
block in it is freed.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .memory import PER_GRID, Fault, Region

__all__ = ["Heap", "malloc", "free", "HEAP_BYTES"]

HEAP_BYTES = 8 << 20
_ALIGN = 16
_U64 = np.dtype(np.uint64)


class Heap:
    """Blocks handed out by ``malloc`` and not yet freed, shared by every launch of one backend."""

    def __init__(self, limit: int = HEAP_BYTES):
        self.limit, self.used = limit, 0
        self.regions: list[Region] = []
        self._owner: dict[int, Region] = {}  # block address -> its region
        self._live: dict[int, int] = {}  # id(region) -> blocks not yet freed
        self._lock = threading.Lock()

    def allocate(self, sizes: np.ndarray) -> tuple[np.ndarray, Region | None]:
        """Addresses for blocks of ``sizes`` bytes (0 where the heap is full or the size is 0)."""
        rounded = (sizes + np.uint64(_ALIGN - 1)) // np.uint64(_ALIGN) * np.uint64(_ALIGN)
        with self._lock:
            ends = np.cumsum(rounded, dtype=np.uint64)
            fits = (sizes > 0) & (ends + np.uint64(self.used) <= np.uint64(self.limit))
            rounded = np.where(fits, rounded, np.uint64(0))
            total = int(rounded.sum())
            if not total:
                return np.zeros(len(sizes), _U64), None
            raw = np.zeros(total + _ALIGN, np.uint8)
            start = (-raw.ctypes.data) % _ALIGN
            data = raw[start:start + total]
            region = Region("device heap (malloc)", data.ctypes.data, total, data, PER_GRID)
            offsets = np.cumsum(rounded, dtype=np.uint64) - rounded
            addresses = np.where(fits, np.uint64(region.base) + offsets, np.uint64(0))
            for address in addresses[fits].tolist():
                self._owner[address] = region
            self._live[id(region)] = int(fits.sum())
            self.regions.append(region)
            self.used += total
            return addresses, region

    def release(self, address: int, thread: int) -> Region | None:
        """Free the block at ``address``; return its region when that was the region's last block."""
        with self._lock:
            region = self._owner.pop(address, None)
            if region is None:
                raise Fault(address, 0, thread, "free() of a pointer malloc did not return, or freed twice")
            self._live[id(region)] -= 1
            if self._live[id(region)]:
                return None
            del self._live[id(region)]
            self.regions.remove(region)
            self.used -= region.size
            return region


def malloc(fr: Any, m: Any, params: tuple[str, ...], returns: tuple[str, ...]) -> None:
    """``void* malloc(size_t size)`` for each calling thread."""
    threads = np.arange(fr.batch.n) if m is None else np.flatnonzero(m)
    sizes = fr.params[params[0]].load(0, _U64)[threads]
    addresses, region = fr.batch.heap.allocate(sizes)
    if region is not None:
        fr.batch.memory.add(region)
    result = np.zeros(fr.batch.n, _U64)
    result[threads] = addresses
    fr.params[returns[0]].store(0, _U64, result, m)


def free(fr: Any, m: Any, params: tuple[str, ...], returns: tuple[str, ...]) -> None:
    """``void free(void* ptr)`` for each calling thread, in thread order (``free(NULL)`` does nothing)."""
    pointers = fr.params[params[0]].load(0, _U64)
    threads = range(fr.batch.n) if m is None else np.flatnonzero(m).tolist()
    for thread in threads:
        address = int(pointers[thread])
        if address:
            emptied = fr.batch.heap.release(address, thread)
            if emptied is not None:
                fr.batch.memory.remove(emptied)
