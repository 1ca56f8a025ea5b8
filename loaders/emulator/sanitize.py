"""``sanitize=``: compute-sanitizer's tools on the CPU loader.

``memcheck`` is always on (every access is bounds-checked, :mod:`.memory`).
``racecheck`` and ``initcheck`` are chosen when the backend is made
(``load(..., device="cpu", sanitize="racecheck")``): the program is then built
with each load, store, atomic and ``cp.async`` preceded by a look at the
access (:func:`watched`), so with no tool on the closures are the ones an
unsanitized program runs and nothing is spent.  A sanitized launch runs on
this interpreter: a faster tier checks :attr:`Sanitize.interpreted` and hands
such a launch back.

What each tool reports (the first hazard raises :class:`SanitizerError`):

- racecheck (:mod:`.hazards`): two threads of a block access one byte of
  shared memory, at least one writing, with no barrier between them
  (``bar.sync`` for the block, or a completed ``mbarrier`` phase;
  ``bar.warp.sync`` orders a warp's own threads; a fence or an acquire /
  release access counts as a barrier, :func:`synchronizing`); writing the
  value the byte already holds is no hazard, and atomics are not hazards with
  each other.
- initcheck: a read (or atomic) of shared, local or device-heap memory no
  thread wrote: shared and local memory start unwritten at each launch
  (but for the shared memory the system reserves, cooperative groups'), a
  ``malloc`` block when it is allocated.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ptxbridge.abi.cxx_names import cxx_name
from ptxbridge.abi.errors import ArgumentError, SanitizerError

from .hazards import Races
from .memory import PER_BLOCK, WINDOWS
from .values import as_array

__all__ = ["Sanitize", "Sanitizer", "TOOLS", "watched", "synchronizing", "READ", "WRITE", "ATOMIC",
           "SHADOW_BYTES", "batch_blocks"]

TOOLS = ("memcheck", "racecheck", "initcheck")
READ, WRITE, ATOMIC = 0, 1, 2
SHADOW_BYTES = 1 << 28  # racecheck keeps 36 bytes per byte of a batch's shared memory: bound the batch


@dataclass(frozen=True, slots=True)
class Sanitize:
    """Which of compute-sanitizer's tools a CPU launch runs (memcheck always)."""

    racecheck: bool = False
    initcheck: bool = False

    @property
    def interpreted(self) -> bool:
        """Whether launches must run on the interpreter (a tool watches every access)."""
        return self.racecheck or self.initcheck

    @classmethod
    def parse(cls, value: str | Iterable[str] | None) -> Sanitize:
        """``None`` (then ``$PTXBRIDGE_SANITIZE``, if set: a test suite runs sanitized unchanged), a
        tool name, ``"racecheck,initcheck"`` or a sequence of names."""
        if value is None:
            value = os.environ.get("PTXBRIDGE_SANITIZE") or None
        if value is None:
            return cls()
        names = value.split(",") if isinstance(value, str) else list(value)
        names = [n.strip() if isinstance(n, str) else n for n in names]
        unknown = [n for n in names if n not in TOOLS]
        if unknown or not names:
            raise ArgumentError(f"sanitize must name tools from {', '.join(TOOLS)}, as a string or a sequence"
                                " "
                                f"(got {value!r})")
        return cls("racecheck" in names, "initcheck" in names)


def watched(cx: Any, run: Callable[[Any, Any], None], mem: Any, space: str, nbytes: int, kind: int,
            values: Callable[[Any], list[Any]] | None = None) -> Callable[[Any, Any], None]:
    """``run`` (an access of ``nbytes`` at ``mem``) preceded by the sanitizer's look at it; built only
    when a tool is on.  ``values`` gives a store's values (for racecheck's same-value rule)."""
    address = cx.address(mem, space)
    site = cx.site()

    def checked(fr: Any, m: Any) -> None:
        stored = None if values is None else values(fr)
        fr.batch.sanitizer.access(fr, m, address(fr), nbytes, kind, stored, site)
        run(fr, m)
    return checked


_ORDERING = frozenset(("acquire", "release", "acq_rel"))


def synchronizing(cx: Any, run: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    """``run``, then a barrier for racecheck when the instruction orders memory itself (a fence, an
    acquire load, a release or acquire atomic: cooperative groups' tile barriers are made of these).
    racecheck does not model the memory model, so it forgets what came before rather than report
    accesses that such a protocol orders."""
    if not cx.sanitized or not (cx.ins.opcode in ("fence", "membar") or _ORDERING & set(cx.ins.mods)):
        return run

    def ordered(fr: Any, m: Any) -> None:
        run(fr, m)
        fr.batch.sanitizer.barrier()
    return ordered


def batch_blocks(blocks: int, shared_bytes: int) -> int:
    """At most ``blocks`` per batch, fewer where racecheck's shadow of their shared memory would pass
    :data:`SHADOW_BYTES`."""
    return max(1, min(blocks, SHADOW_BYTES // (36 * max(shared_bytes, 1))))


class Sanitizer:
    """The shadow state of one batch: who touched each shared byte since the last barrier (racecheck)
    and which shared, local and heap bytes were written (initcheck)."""

    def __init__(self, options: Sanitize, batch: Any, kernel: str, shared_names: list[tuple[int, int, str]],
                 heap_written: dict[int, tuple[Any, np.ndarray]], reserved: int = 0):
        self.options, self.batch, self.kernel = options, batch, kernel
        memory = batch.memory
        self.shared = next((r for r in memory.regions if r.base == WINDOWS["shared"]), None)
        self.local = next((r for r in memory.regions if r.base == WINDOWS["local"]), None)
        self.shared_names = shared_names
        self.races = Races(len(self.shared.data), batch.n) if options.racecheck and self.shared else None
        self.written = {}  # region -> bool per byte (initcheck)
        if options.initcheck:
            for region in (self.shared, self.local):
                if region is not None:
                    self.written[id(region)] = (region, np.zeros(len(region.data), bool))
            if self.shared is not None and reserved:  # the system's (cooperative groups'), set up for it
                bits = self.written[id(self.shared)][1].reshape(-1, self.shared.stride)
                bits[:, :reserved] = True
        self.heap_written = heap_written  # device heap blocks outlive launches, and so does what was written

    # -- the hooks the program and the machine call ------------------------------------------------

    def barrier(self) -> None:
        """Every block of the batch passed a barrier: earlier accesses are ordered before later ones."""
        if self.races is not None:
            self.races.barrier()

    def warp_sync(self, m: Any) -> None:
        """``bar.warp.sync`` by the threads in ``m``: their warps' earlier accesses are ordered."""
        if self.races is not None:
            threads = np.arange(self.batch.n) if m is None else np.flatnonzero(m)
            self.races.warp_sync(threads)

    def access(self, fr: Any, m: Any, addr: Any, nbytes: int, kind: int, values: list[Any] | None,
               site: str) -> None:
        n = self.batch.n
        threads = np.arange(n) if m is None else np.flatnonzero(m)
        if not threads.size:
            return
        addresses = as_array(addr, n).astype(np.uint64)[threads]
        for region, inside in self._regions(addresses, nbytes):
            chosen, offsets = threads[inside], (addresses[inside] - np.uint64(region.base)).astype(np.int64)
            index = self._instance(region, chosen) + offsets
            index = (index[:, None] + np.arange(nbytes)).reshape(-1)  # every byte of every access
            owners = np.repeat(chosen, nbytes)
            if self.races is not None and region is self.shared and kind != ATOMIC:
                self._race(fr, region, index, owners, kind, values, threads, inside, nbytes, site)
            if self.options.initcheck:
                self._init(region, index, owners, kind, nbytes, site)

    # -- internals ---------------------------------------------------------------------------------

    def _regions(self, addresses: np.ndarray, nbytes: int) -> Iterable[tuple[Any, np.ndarray]]:
        """The watched regions the addresses fall in, each with its mask; bytes outside every region
        are memcheck's to report, when the access itself runs."""
        candidates = [r for r in (self.shared, self.local) if r is not None]
        if self.options.initcheck:
            candidates += [r for r in self.batch.heap.regions] if self.batch.heap is not None else []
        for region in candidates:
            base = np.uint64(region.base)
            inside = (addresses >= base) & (addresses - base <= np.uint64(max(region.size - nbytes, 0)))
            inside &= region.size >= nbytes
            if inside.any():
                yield region, inside

    def _instance(self, region: Any, threads: np.ndarray) -> np.ndarray:
        if region is self.shared or region is self.local:
            instance = self.batch.memory.block_of if region.per == PER_BLOCK else self.batch.memory.thread_of
            which = np.asarray(instance)
            which = which[threads] if which.ndim else np.full(len(threads), int(which))
            return which.astype(np.int64) * region.stride
        return np.zeros(len(threads), np.int64)

    def _race(self, fr: Any, region: Any, index: np.ndarray, owners: np.ndarray, kind: int,
              values: list[Any] | None, threads: np.ndarray, inside: np.ndarray, nbytes: int,
              site: str) -> None:
        if kind == READ:
            found = self.races.read(index, owners, site)
        else:
            new = None
            if values is not None:  # each thread's bytes, element after element
                n = self.batch.n
                parts = [as_array(v, n)[threads[inside]].view(np.uint8).reshape(-1, np.asarray(v).itemsize)
                         for v in values]
                new = np.concatenate(parts, axis=1).reshape(-1) if len(parts) > 1 else parts[0].reshape(-1)
                if len(new) != len(index):
                    new = None
            found = self.races.write(index, owners, site, new, region.data[index])
        if found is not None:
            raise self._hazard(region, found, nbytes)

    def _hazard(self, region: Any, found: tuple, nbytes: int) -> SanitizerError:
        what, byte, thread, site, other, other_site = found
        block_offset = int(byte) % region.stride
        block_offset -= block_offset % nbytes  # where the access starts (accesses are aligned)
        verb = {"read-after-write": ("reads", "wrote"), "write-after-read": ("writes", "read"),
                "write-after-write": ("writes", "wrote")}[what]
        return SanitizerError(
            f"kernel {self.kernel!r}: racecheck: {what} hazard on {nbytes} bytes of shared memory at offset "
            f"{block_offset} "
            f"({self._variable(block_offset)}): {self.batch.where(int(thread))} {verb[0]} it in {site}, and "
            f"{self.batch.where(int(other))} {verb[1]} it in {other_site}, with no barrier between them "
            "(__syncthreads() for the block, __syncwarp() within a warp)", "racecheck")

    def _init(self, region: Any, index: np.ndarray, owners: np.ndarray, kind: int, nbytes: int,
              site: str) -> None:
        written = self._written(region)
        if kind != WRITE:
            unwritten = ~written[index]
            if unwritten.any():
                first = int(np.flatnonzero(unwritten)[0])
                raise self._uninitialized(region, int(index[first]), int(owners[first]), nbytes, kind, site)
        written[index] = True

    def _written(self, region: Any) -> np.ndarray:
        found = self.written.get(id(region)) or self.heap_written.get(id(region))
        if found is not None and found[0] is region:
            return found[1]
        bits = np.zeros(len(region.data), bool)  # a heap block no launch has written yet
        self.heap_written[id(region)] = (region, bits)
        return bits

    def _uninitialized(self, region: Any, byte: int, thread: int, nbytes: int, kind: int,
                       site: str) -> SanitizerError:
        if region is self.shared:
            offset = byte % region.stride
            where = f"shared memory at offset {offset} ({self._variable(offset)})"
        elif region is self.local:
            where = f"the thread's local memory at offset {byte % region.stride}"
        else:
            where = f"a device-heap (malloc) block at 0x{region.base + byte:x}"
        access = "an atomic on" if kind == ATOMIC else f"a {nbytes}-byte read of"
        return SanitizerError(f"kernel {self.kernel!r}: initcheck: {access} {where}, which no thread wrote, "
                              f"by {self.batch.where(thread)} in {site}", "initcheck")

    def _variable(self, offset: int) -> str:
        for start, size, name in self.shared_names:
            if start <= offset < start + max(size, 1) or (size == 0 and offset >= start):
                return f"variable {cxx_name(name) or name!r} + {offset - start}"
        return "no named variable"
