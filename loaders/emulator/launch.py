"""One kernel launch: the grid cut into batches of whole blocks, each run by the machine.

A batch holds up to ``max_threads`` threads, block after block, each block
padded to whole warps (padding threads never run).  Blocks in a batch share
nothing but global memory: shared memory has one instance per block and the
barrier policy of :mod:`.machine` never makes a block wait for another.

A kernel that synchronizes the whole grid (cooperative groups' ``grid.sync()``)
runs as one batch, as a cooperative launch keeps every block resident: its
barrier then waits for every thread of the launch, and ``%envreg1:%envreg2``
hold the address of a zeroed grid workspace, as the driver provides.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from ptxbridge.abi.errors import EmulatorError
from ptxbridge.loaders.base import Buffer

from .extents import named_extents, parameter_extents
from .frame import Batch, Frame
from .heap import Heap
from .machine import Function, Machine
from .memory import PER_BLOCK, PER_GRID, PER_THREAD, RESERVED_SMEM, WINDOWS, Memory, Region, host_bytes
from .program import Program
from .sanitize import Sanitizer, batch_blocks
from .watchdog import Progress

try:
    from ._native import restore as _restore_allocator
    from ._native import use_pool as _use_pool
except ImportError:  # built without NumPy's headers, or no C compiler: NumPy's own allocator
    _use_pool = None

__all__ = ["run_kernel", "buffer_regions", "merged_buffers", "pooled", "shared_bytes"]


@contextmanager
def pooled() -> Iterator[None]:
    """NumPy allocates from ``_native``'s pool meanwhile: each instruction frees and allocates
    batch-sized arrays, which malloc would unmap and map (page faults) every time."""
    if _use_pool is None:
        yield
        return
    previous = _use_pool()
    try:
        yield
    finally:
        _restore_allocator(previous)


def merged_buffers(buffers: Sequence[Buffer]) -> list[tuple[int, int, bool, list[str]]]:
    """``(start, end, writable, names)`` of the caller's memory; overlapping buffers (views of one
    tensor) are merged."""
    spans = sorted((b.ptr, b.ptr + b.nbytes, b.writable, b.name) for b in buffers if b.nbytes > 0)
    merged: list[list[Any]] = []
    for start, end, writable, name in spans:
        if merged and start < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
            merged[-1][2] = merged[-1][2] or writable
            merged[-1][3] += [name] if name and name not in merged[-1][3] else []
        else:
            merged.append([start, end, writable, [name] if name else []])
    return [(start, end, writable, names) for start, end, writable, names in merged]


def buffer_regions(buffers: Sequence[Buffer]) -> list[Region]:
    """The caller's memory as regions (:func:`merged_buffers`)."""
    return [Region(f"argument {', '.join(repr(n) for n in names)} at 0x{start:x}" if names else
                   f"argument buffer at 0x{start:x}", start, end - start, host_bytes(start, end - start),
                   PER_GRID, writable) for start, end, writable, names in merged_buffers(buffers)]


class _Specials(dict):
    """Special registers (PTX ISA 10) of a batch of ``count`` blocks starting at linear block ``first``.

    The per-thread ones (``%tid``, ``%ctaid``, ``%laneid``, lane masks...) are built when an
    instruction first reads them: most kernels read three or four.
    """

    def __init__(self, first: int, count: int, grid: tuple[int, int, int], block: tuple[int, int, int],
                 padded: int, shared: tuple[int, int], workspace: int):
        super().__init__()
        self.first, self.count, self.grid, self.block, self.padded = first, count, grid, block, padded
        for i, c in enumerate("xyz"):
            self[f"%ntid.{c}"] = np.uint32(block[i])
            self[f"%nctaid.{c}"] = np.uint32(grid[i])
        self.update({f"%envreg{i}": np.uint32(0) for i in range(32)})
        self.update({
            "%nwarpid": np.uint32(padded // 32), "%smid": np.uint32(0), "%nsmid": np.uint32(1),
            "%gridid": np.uint64(0), "%warpsize": np.uint32(32),
            "%dynamic_smem_size": np.uint32(shared[1]), "%total_smem_size": np.uint32(sum(shared)),
            "%reserved_smem_offset_begin": np.uint32(0), "%reserved_smem_offset_0": np.uint32(0),
            "%reserved_smem_offset_1": np.uint32(RESERVED_SMEM // 2),
            "%reserved_smem_offset_end": np.uint32(RESERVED_SMEM),
            "%reserved_smem_offset_cap": np.uint32(RESERVED_SMEM),
            "%envreg1": np.uint32(workspace >> 32), "%envreg2": np.uint32(workspace & 0xFFFFFFFF),
        })

    def __missing__(self, name: str) -> Any:
        value = _special(name, self.first, self.count, self.grid, self.block, self.padded)
        self[name] = value
        return value


@functools.lru_cache(maxsize=64)
def _special(name: str, first: int, count: int, grid: tuple[int, int, int], block: tuple[int, int, int],
             padded: int) -> Any:
    """A per-thread special register of a batch, built once per launch shape: a kernel launched
    again and again (a relaxation loop) meets the same batches.  Read-only, as registers are never
    changed in place (an instruction replaces a register's array)."""
    linear = np.arange(padded, dtype=np.uint32)
    bx, by, _ = block
    per_block = {"%tid.x": linear % bx, "%tid.y": (linear // bx) % by, "%tid.z": linear // (bx * by),
                 "%laneid": linear % 32, "%warpid": linear // 32}
    if name in per_block:
        value = np.tile(per_block[name], count)
    elif name.startswith("%ctaid."):
        blocks = np.arange(first, first + count, dtype=np.uint64)
        gx, gy, _ = grid
        axis = {"x": blocks % gx, "y": (blocks // gx) % gy, "z": blocks // (gx * gy)}[name[-1]]
        axis = axis.astype(np.uint32)
        value = axis[0] if count == 1 else np.repeat(axis, padded)
    elif name.startswith("%lanemask_"):
        eq = np.uint64(1) << _special("%laneid", first, count, grid, block, padded).astype(np.uint64)
        below, through = eq - np.uint64(1), (eq << np.uint64(1)) - np.uint64(1)
        mask32 = np.uint64(0xFFFFFFFF)
        value = {"eq": eq, "lt": below, "le": through & mask32, "gt": ~through & mask32,
                 "ge": ~below & mask32}[name[len("%lanemask_"):]].astype(np.uint32)
    else:
        raise KeyError(name)
    if isinstance(value, np.ndarray):
        value.flags.writeable = False
    return value


def shared_bytes(program: Program, shared_mem: int) -> int:
    """Shared memory per block: static (with the reserved part) plus ``shared_mem`` dynamic bytes."""
    return program.dynamic_offset + shared_mem if shared_mem else program.shared_static


def run_kernel(program: Program, machine: Machine, name: str, grid: tuple[int, int, int],
               block: tuple[int, int, int], shared_mem: int, params: bytes, buffers: Sequence[Buffer],
               max_threads: int, max_steps: int, heap: Heap, signature: Any = None,
               heap_written: dict[int, Any] | None = None) -> int:
    """Run kernel ``name`` to completion (launches are synchronous); return the thread-instructions run.
    ``signature`` (the image's, when it has one) lets faults name the argument an access overran;
    with a ``sanitize=`` tool on (``program.sanitize``), each batch gets its shadow state, and
    ``heap_written`` keeps initcheck's record of the device heap between launches."""
    sanitize = program.sanitize if program.sanitize is not None and program.sanitize.interpreted else None
    needs = program.check_launch(name)
    fn: Function = program.functions[name]
    entry = program.entries[name]
    if len(params) < entry.size:
        raise EmulatorError(f"kernel {name!r}: the parameter buffer has {len(params)} bytes, "
                            f"the PTX declares {entry.size}")
    param_region = Region("kernel parameters", WINDOWS["param"], len(params),
                          np.frombuffer(bytearray(params), np.uint8), PER_GRID, writable=False)
    grid_regions = [*buffer_regions(buffers), *program.variables, param_region]
    arguments = named_extents(buffers)
    by_param = parameter_extents(signature, params, arguments)
    per_block = block[0] * block[1] * block[2]
    padded = -(-per_block // 32) * 32
    blocks = grid[0] * grid[1] * grid[2]
    per_batch = max(1, max_threads // padded)
    workspace = 0
    if "grid" in needs:  # grid-wide sync: every block at once, and the driver's grid workspace
        per_batch = blocks
        data = np.zeros(16, np.uint8)
        workspace = data.ctypes.data
        grid_regions.append(Region("grid workspace (cooperative groups)", workspace, len(data), data))
    shared_size = shared_bytes(program, shared_mem)
    if sanitize is not None and "grid" not in needs:
        per_batch = batch_blocks(per_batch, shared_size)
    valid = np.arange(padded) < per_block
    executed = 0
    progress = Progress.for_launch(name, blocks)
    with np.errstate(all="ignore"), pooled(), _finishing(progress):
        for first in range(0, blocks, per_batch):
            count = min(per_batch, blocks - first)
            n = count * padded
            regions = list(grid_regions)
            if shared_size:
                regions.append(Region.allocate("shared memory", WINDOWS["shared"], shared_size, count,
                                               PER_BLOCK))
            if program.local_size:
                regions.append(Region.allocate("local memory", WINDOWS["local"], program.local_size, n,
                                               PER_THREAD))
            thread_of = np.arange(n, dtype=np.uint64)
            block_of = np.uint64(0) if count == 1 else thread_of // np.uint64(padded)
            special = _Specials(first, count, grid, block, padded, (program.shared_static, shared_mem),
                                workspace)
            regions += heap.regions
            memory = Memory(regions, block_of, thread_of, arguments, by_param)
            batch = Batch(n, padded, memory, special, name, max_steps, heap, progress)
            if sanitize is not None:
                batch.sanitizer = Sanitizer(sanitize, batch, name, program.shared_names,
                                            {} if heap_written is None else heap_written,
                                            RESERVED_SMEM if program.reserves else 0)
            live = None if padded == per_block else np.tile(valid, count)
            machine.run(fn, Frame(dict(fn.zeros), {}, batch), live)
            executed += batch.thread_steps
            if progress is not None:
                progress.beat(first + count)
    return executed


@contextmanager
def _finishing(progress: Progress | None) -> Iterator[None]:
    """The progress line ends whether the launch finishes or fails."""
    try:
        yield
    finally:
        if progress is not None:
            progress.finish()
