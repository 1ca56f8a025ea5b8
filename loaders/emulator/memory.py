"""Addresses -> bytes: the caller's buffers, module variables, shared, local and parameter space.

Every state space lives in one 64-bit generic address space (PTX ISA 6.4.1
"Generic addressing").  Global and constant memory use real host addresses:
the caller's NumPy / torch memory and the emulator's own arrays for module
variables, so ``cvta`` to and from ``.global`` / ``.const`` is the identity.
Shared, local and kernel-parameter space are windows at addresses no host
mapping uses (above 2**63); their state-space address is the offset in the
window.  Shared memory has one instance per block and local memory one per
thread, so the byte an address names depends on the thread asking.

Every access is checked: the whole ``[address, address + size)`` must lie in
one region, aligned to ``size`` (PTX ISA 6.4 "Alignment"), and a store must
target a writable region.  Failures raise :class:`Fault`, which the machine
turns into a :class:`~ptxbridge.abi.errors.MemoryAccessError` naming the
kernel and the instruction.  An access whose address derives from one
pointer parameter (:mod:`.provenance`) is also checked against that
argument's extent, and a fault names the argument it overran (:mod:`.extents`).
"""

from __future__ import annotations

import bisect
import ctypes
from collections.abc import Iterator
from typing import Any

import numpy as np

from .extents import Extent, extent_of, nearest, overrun

try:
    from ._native import gather as native_gather
    from ._native import scatter as native_scatter
    from ._native import span as native_span
except ImportError:  # built without NumPy's headers, or no C compiler: NumPy passes instead
    native_gather = native_scatter = native_span = None

__all__ = ["WINDOWS", "RESERVED_SMEM", "PER_GRID", "PER_BLOCK", "PER_THREAD", "Region", "Fault", "Memory",
           "host_bytes", "plus", "span"]

WINDOWS = {"shared": 0xA000_0000_0000_0000, "local": 0xB000_0000_0000_0000, "param": 0xC000_0000_0000_0000,
           "func": 0xD000_0000_0000_0000}  # functions have addresses (for indirect calls) but no bytes
RESERVED_SMEM = 1024  # shared memory the driver reserves per block for the system (cooperative groups)
PER_GRID, PER_BLOCK, PER_THREAD = 0, 1, 2
_INSTANCE_ALIGN = 16


def span(values: np.ndarray, m: Any) -> tuple[int, int, int] | None:
    """``(bitwise OR, minimum, maximum)`` of the unsigned ``values`` of the threads in ``m`` (None:
    all), or None when no thread is active: the alignment and bounds of an access in one pass
    (``_native.span``) where the C extension is built, else a compress and three reductions."""
    if native_span is not None and values.flags.c_contiguous and (m is None or m.flags.c_contiguous):
        return native_span(values, m)
    active = values if m is None else values[m]
    if not active.size:
        return None
    return int(np.bitwise_or.reduce(active)), int(active.min()), int(active.max())


def plus(addr: Any, offset: int) -> Any:
    """``addr + offset`` in wrapping u64 arithmetic (``offset`` a Python int, maybe negative)."""
    return addr + np.uint64(offset % (1 << 64)) if offset else addr


def host_bytes(ptr: int, nbytes: int) -> np.ndarray:
    """A writable uint8 view of host memory the caller owns (no copy)."""
    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(ptr))


def instance_stride(size: int, per: int) -> int:
    """Bytes from one instance of a per-block or per-thread region of ``size`` bytes to the next."""
    return -(-size // _INSTANCE_ALIGN) * _INSTANCE_ALIGN if per != PER_GRID else size


class Region:
    """One addressable range: ``size`` bytes at ``base``, one instance per grid, block or thread."""

    __slots__ = ("_views", "base", "data", "name", "per", "size", "stride", "writable")

    def __init__(self, name: str, base: int, size: int, data: np.ndarray, per: int = PER_GRID,
                 writable: bool = True):
        self.name, self.base, self.size, self.per, self.writable = name, base, size, per, writable
        self.stride = instance_stride(size, per)
        self.data = data
        self._views: dict[np.dtype, tuple[int, np.ndarray]] = {}

    @classmethod
    def allocate(cls, name: str, base: int, size: int, instances: int, per: int) -> Region:
        """A zeroed region owned by the emulator (shared, local, module variables)."""
        return cls(name, base, size, np.zeros(max(instance_stride(size, per) * instances, 1), np.uint8), per)

    def view(self, dt: np.dtype) -> tuple[int, np.ndarray]:
        """``(start, typed)``: byte ``start + k * itemsize`` of ``data`` is ``typed[k]``, start aligned."""
        cached = self._views.get(dt)
        if cached is None:
            size = dt.itemsize
            start = (-self.data.ctypes.data) % size
            usable = (len(self.data) - start) // size * size
            cached = self._views[dt] = (start, self.data[start:start + usable].view(dt))
        return cached


class Fault(Exception):
    """An access outside every region, misaligned, or a store to read-only memory."""

    def __init__(self, address: int, size: int, thread: int, reason: str):
        super().__init__(reason)
        self.address, self.size, self.thread, self.reason = address, size, thread, reason


class Memory:
    """The regions one batch of blocks can reach, and checked typed access to them.

    ``block_of[t]`` / ``thread_of[t]`` give the shared / local instance of thread ``t``.
    Masks are boolean arrays over the batch's threads, or None for all of them.
    """

    def __init__(self, regions: list[Region], block_of: Any, thread_of: np.ndarray,
                 arguments: list[Extent] | None = None, by_param: dict[int, Extent] | None = None):
        self.block_of, self.thread_of = block_of, thread_of
        self.arguments = arguments or []  # the named argument buffers, for messages
        self._by_param = by_param or {}  # parameter offset -> its argument's extent (provenance)
        self._origins: dict[frozenset[int], Extent | None] = {}
        self._offsets: dict[tuple[int, int | None], Any] = {}
        self._bases: dict[tuple[int, int, int, int], tuple[Any, ...]] = {}  # see shared_base
        self._index(regions)
        self._shared = next((r for r in self.regions if r.base == WINDOWS["shared"]), None)

    def _index(self, regions: list[Region]) -> None:
        self.regions = sorted(regions, key=lambda r: r.base)
        self.bases = [r.base for r in self.regions]
        self.base_array = np.array(self.bases, dtype=np.uint64)
        self.end_array = np.array([r.base + r.size for r in self.regions], dtype=np.uint64)

    def shared(self, offsets: Any, dt: np.dtype, m: Any, count: int = 1) -> tuple[np.ndarray, Any] | None:
        """``(typed view, element index)`` of ``count`` consecutive ``dt`` values at offsets in the
        shared window (``ld.shared`` / ``st.shared`` through a 32-bit register), checked as
        :meth:`resolve` checks; None when the general path must decide (no shared memory, an
        unaligned view, or a fault, which the general path reports with the generic address)."""
        region = self._shared
        if region is None:
            return None
        start, typed = region.view(dt)
        whole = dt.itemsize * count
        if isinstance(offsets, np.ndarray):
            found = span(offsets, m)
            if found is None:
                return None
            low, _, high = found
        else:
            low = high = int(offsets)
        if start or low & (whole - 1) or high + whole > region.size:
            return None
        return typed, self._shared_index(region, offsets, dt)

    def _shared_index(self, region: Region, offsets: Any, dt: np.dtype) -> Any:
        """Each thread's element of its block's instance of shared memory, as ``dt`` values (int64:
        a u64 offset plus an int64 one would be a float; an inactive thread's garbage offset gives
        a garbage index, which readers clip)."""
        shift = dt.itemsize.bit_length() - 1
        if isinstance(offsets, np.ndarray):
            elements = offsets >> offsets.dtype.type(shift)
            if elements.dtype == np.uint64:
                elements = elements.view(np.int64)
        else:
            elements = np.int64(int(offsets) >> shift)
        return elements + self._instance_offsets(region, dt)

    def shared_base(self, base: Any, dt: np.dtype, m: Any, whole: int) -> tuple[Any, ...] | None:
        """``(typed view, element index, first, low, high, shared size)`` for the u32 offsets
        ``base`` in the shared window, all aligned to ``whole`` bytes: thread ``t``'s value at
        ``base + k * itemsize`` is ``typed[first + k + element[t]]`` if ``low + k * itemsize`` and
        ``high + (k + 1) * itemsize`` lie in ``[0, shared size]`` (``low``/``high``: the lowest and
        highest active offset).  None when :meth:`shared` must decide.

        An unrolled loop reads ``[%r+0]``, ``[%r+4]``, ``[%r+8]``... from one base register: for a
        register array, the alignment check, extremes and index are computed once and kept (with
        the array and the mask, so they are the same objects while the entry is used: registers
        are replaced on write, never changed in place).  A uniform base (a scalar) needs no pass."""
        region = self._shared
        if region is None:
            return None
        start, typed = region.view(dt)
        if start:
            return None
        if not isinstance(base, np.ndarray):
            offset = int(base)
            if offset & (whole - 1):
                return None
            first = offset >> (dt.itemsize.bit_length() - 1)
            return typed, self._instance_offsets(region, dt), first, offset, offset, region.size
        key = (id(base), id(m), dt.itemsize, whole)
        found = self._bases.get(key)
        if found is not None and found[0] is base and found[1] is m:
            return found[2]
        found = span(base, m)
        if found is None or found[0] & (whole - 1):
            result = None
        else:
            result = typed, self._shared_index(region, base, dt), 0, found[1], found[2], region.size
        if len(self._bases) >= 64:
            self._bases.clear()
        self._bases[key] = (base, m, result)
        return result

    def extent(self, origin: frozenset[int] | None) -> Extent | None:
        """The argument extent an access whose address derives from the parameters ``origin``
        must stay in: the one member with an extent (None: no check beyond the regions)."""
        if origin is None or not self._by_param:
            return None
        found = self._origins.get(origin, False)
        if found is False:
            found = self._origins[origin] = extent_of(self._by_param, origin)
        return found  # type: ignore[return-value]

    def add(self, region: Region) -> None:
        """Make ``region`` reachable (device ``malloc``)."""
        self._index([*self.regions, region])

    def remove(self, region: Region) -> None:
        """Make ``region`` unreachable (device ``free``): a later access faults."""
        self._index([r for r in self.regions if r is not region])

    def _fault(self, addr: Any, m: Any, bad: Any, size: int, reason: str) -> Fault:
        if isinstance(addr, np.ndarray):
            chosen = bad if m is None else bad & m
            thread = int(np.flatnonzero(chosen)[0])
            return Fault(int(addr[thread]), size, thread, reason)
        thread = 0 if m is None else int(np.flatnonzero(m)[0])
        return Fault(int(addr), size, thread, reason)

    def resolve(self, addr: Any, size: int, m: Any, write: bool,
                extent: Extent | None = None) -> Iterator[tuple[Region, Any]]:
        """Yield ``(region, selection)`` covering every active thread (selection None: all of ``m``);
        with ``extent``, every access must also lie in it (the argument its address came from)."""
        vector = isinstance(addr, np.ndarray)
        found = span(addr, m) if vector else (int(addr),) * 3
        if found is None:
            return
        bits, lo, hi = found  # a misaligned address sets a low bit of the OR of all of them
        if size > 1 and bits & (size - 1):
            raise self._fault(addr, m, (addr & np.uint64(size - 1)) != 0 if vector else None, size,
                              f"misaligned {size}-byte access")
        if extent is not None and (lo < extent.lo or hi + size > extent.hi):
            full = addr if vector else np.full(len(self.thread_of), addr, np.uint64)
            outside = (full < np.uint64(extent.lo)) | (full > np.uint64(max(extent.hi - size, 0)))
            fault = self._fault(full, m, outside, size, "")
            fault.reason = overrun(extent, fault.address, size, write)
            raise fault
        i = bisect.bisect_right(self.bases, lo) - 1
        if i >= 0 and hi + size <= self.regions[i].base + self.regions[i].size:
            yield self._checked(self.regions[i], addr, m, write, size), m
            return
        full = addr if vector else np.full(len(self.thread_of), addr, np.uint64)
        index = np.searchsorted(self.base_array, full, side="right").astype(np.int64) - 1
        end = self.end_array[np.maximum(index, 0)]  # end - full, not full + size: that wraps at 2**64
        inside = (index >= 0) & (full < end) & (end - full >= np.uint64(size))
        if not (inside.all() if m is None else inside[m].all()):
            fault = self._fault(full, m, ~inside, size, "")
            fault.reason = ("outside every buffer and variable the kernel can reach"
                            + nearest(self.arguments, fault.address, size))
            raise fault
        for r in np.unique(index if m is None else index[m]):
            select = index == r if m is None else (index == r) & m
            yield self._checked(self.regions[int(r)], full, select, write, size), select

    def _checked(self, region: Region, addr: Any, m: Any, write: bool, size: int) -> Region:
        if write and not region.writable:
            raise self._fault(addr, m, np.ones(len(self.thread_of), bool), size,
                              f"store to read-only memory ({region.name})")
        return region

    def _elements(self, addr: Any, dt: np.dtype, m: Any, write: bool,
                  extent: Extent | None = None) -> Iterator[tuple[np.ndarray, Any, Any]]:
        """``(typed view, selection, element index)`` per region: ``typed[index]`` is each thread's value.

        Indices are int64 (computed with wrapping arithmetic, so an inactive thread's garbage
        address gives a garbage index, which readers clip).
        """
        for region, select in self.resolve(addr, dt.itemsize, m, write, extent):
            start, typed = region.view(dt)
            element = self._element_of(addr, (region.base + start) % (1 << 64), dt)
            if region.per != PER_GRID:
                element = element + self._instance_offsets(region, dt)
            yield typed, select, element

    @staticmethod
    def _element_of(addr: Any, origin: int, dt: np.dtype) -> Any:
        """The element of ``typed`` (whose first byte is at ``origin``) each address names, in
        wrapping int64 arithmetic."""
        shift = dt.itemsize.bit_length() - 1
        if isinstance(addr, np.ndarray):
            return (addr.view(np.int64) - np.uint64(origin).view(np.int64)) >> shift
        return np.int64(((int(addr) - origin + (1 << 63)) % (1 << 64) - (1 << 63)) >> shift)

    def _instance_offsets(self, region: Region, dt: np.dtype | None = None) -> Any:
        """Offset of each thread's instance of a per-block or per-thread region: in bytes, or in
        ``dt`` elements (instances are 16-byte aligned, so whole elements)."""
        key = (id(region), None if dt is None else dt.itemsize)
        found = self._offsets.get(key)
        if found is None:
            instance = self.block_of if region.per == PER_BLOCK else self.thread_of
            unit = 1 if dt is None else dt.itemsize
            found = np.asarray(instance).astype(np.int64) * np.int64(region.stride // unit)
            self._offsets[key] = found
        return found

    def check(self, addr: Any, size: int, m: Any, write: bool, extent: Extent | None = None) -> None:
        """Fault unless every active thread may access ``size`` bytes at ``addr`` (aligned to ``size``):
        a vector or multi-word access is checked whole before any part of it is written."""
        for _ in self.resolve(addr, size, m, write, extent):
            pass

    def read_bytes(self, address: int, count: int, thread: int) -> bytes:
        """``count`` bytes at ``address`` as thread ``thread`` sees them (for host-side helpers)."""
        i = bisect.bisect_right(self.bases, address) - 1
        if i < 0 or address + count > self.regions[i].base + self.regions[i].size:
            raise Fault(address, count, thread, "outside every buffer and variable the kernel can reach")
        region = self.regions[i]
        offset = address - region.base
        if region.per != PER_GRID:
            instance = self.block_of if region.per == PER_BLOCK else self.thread_of
            offset += int(instance[thread] if isinstance(instance, np.ndarray) else instance) * region.stride
        return region.data[offset:offset + count].tobytes()

    def load(self, addr: Any, dt: np.dtype, m: Any, offset: int = 0, extent: Extent | None = None) -> Any:
        """The ``dt`` values at ``addr + offset`` (inactive threads read some element: their value
        is unused)."""
        found = self._native(addr, dt, m, False, offset, extent)
        if found is not None:
            result = np.empty(len(addr), dt)
            native_gather(found[0], addr, m, found[1], dt.itemsize.bit_length() - 1, result)
            return result
        result = None
        for typed, select, element in self._elements(plus(addr, offset), dt, m, False, extent):
            values = typed[element] if select is None else np.take(typed, element, mode="clip")
            result = values if result is None or select is None else np.where(select, values, result)
        return result if result is not None else dt.type(0)

    def store(self, addr: Any, dt: np.dtype, values: Any, m: Any, offset: int = 0,
              extent: Extent | None = None) -> None:
        """Write ``values`` at ``addr + offset`` for the active threads (the last thread wins on a tie)."""
        vector = isinstance(values, np.ndarray)
        if values.dtype == dt and (not vector or values.flags.c_contiguous):
            found = self._native(addr, dt, m, True, offset, extent)
            if found is not None:
                native_scatter(found[0], addr, m, found[1], dt.itemsize.bit_length() - 1, values)
                return
        for typed, select, element in self._elements(plus(addr, offset), dt, m, True, extent):
            if isinstance(element, np.ndarray) and element.ndim:
                typed[element if select is None else element[select]] = \
                    values if select is None or not vector else values[select]
            elif vector:  # one address for every thread: the last active thread's value
                typed[element] = values[-1] if select is None else values[np.flatnonzero(select)[-1]]
            else:
                typed[element] = values

    def _native(self, addr: Any, dt: np.dtype, m: Any, write: bool, offset: int,
                extent: Extent | None) -> tuple[np.ndarray, int] | None:
        """``(typed view, origin)`` when the C gather/scatter can make this access: every active
        ``addr + offset`` aligned, in one per-grid region (writable for a store), the arrays
        contiguous; ``typed[(a - origin) >> shift]`` is then the element at address ``a``.  None
        when the general path must decide (it also reports the faults)."""
        if (native_gather is None or not isinstance(addr, np.ndarray) or not addr.flags.c_contiguous
                or addr.dtype != np.uint64 or (m is not None and not m.flags.c_contiguous)):
            return None
        found = span(addr, m)
        size = dt.itemsize
        if found is None or (found[0] | offset) & (size - 1):
            return None
        low, high = found[1] + offset, found[2] + offset
        i = bisect.bisect_right(self.bases, low) - 1
        if low < 0 or i < 0 or (extent is not None and (low < extent.lo or high + size > extent.hi)):
            return None
        region = self.regions[i]
        if high + size > region.base + region.size or region.per != PER_GRID:
            return None
        if write and not region.writable:
            return None
        start, typed = region.view(dt)
        return typed, (region.base + start - offset) % (1 << 64)

    def elements(self, addr: Any, dt: np.dtype, m: Any, n: int,
                 extent: Extent | None = None) -> Iterator[tuple[np.ndarray, np.ndarray, Any]]:
        """For read-modify-write: ``(typed view, active thread ids, element indices)`` per region."""
        for typed, select, element in self._elements(addr, dt, m, True, extent):
            threads = np.arange(n) if select is None else np.flatnonzero(select)
            element = element[threads] if np.ndim(element) else np.full(len(threads), element)
            yield typed, threads, element.astype(np.int64)
