"""The compiled tier's launch: the same contract as :func:`..launch.run_kernel`, in native code.

A kernel is compiled on its first launch, the device functions it calls inlined (:mod:`.inline`),
once for launches whose block's x extent is a multiple of 32 (where ``%tid.x`` follows the lane,
:mod:`.lanes`) and once for others, each when first launched so;
one the tier cannot translate (an instruction it does not lower, a recursive or indirect call, a
call of ``printf`` or ``malloc``, a barrier reduction, grid sync, a half-precision or float min/max atomic)
runs on the interpreter, and the reason is logged once at debug level (logger ``ptxbridge.cpu``).
The memory a launch can reach is the interpreter's: the caller's buffers, module variables, the parameter
buffer, the device heap, and one block's shared and local memory (zeroed for every block, as the
interpreter allocates them).  An access whose address derives from one pointer parameter
(:mod:`..provenance`) must also stay in that argument's extent (:mod:`..extents`): each launch
fills an extent table, a row per address origin of the kernel.  A launch that faults or traps is
run again on the interpreter, whose report (the same :class:`~ptxbridge.abi.errors.MemoryAccessError`
text, naming the thread the interpreter meets first) is raised; the compiled run may have written
memory before the fault, as a GPU may.  The watchdog's verdicts (:mod:`.watch`) are raised here,
in the interpreter's words.  Blocks run in chunks, on several threads where the kernel's blocks
cannot see each other's work (:mod:`.blocks`).
"""

from __future__ import annotations

import ctypes
import functools
import logging
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from ptxbridge.abi.errors import EmulatorError, MemoryAccessError, UnsupportedInstructionError
from ptxbridge.loaders.base import Buffer

from ..extents import Extent, extent_of, named_extents, overrun, parameter_extents
from ..frame import coordinates
from ..heap import Heap
from ..launch import merged_buffers, run_kernel
from ..machine import Machine, instruction_at, stopped
from ..memory import PER_THREAD, WINDOWS, Region
from ..program import Program
from ..watchdog import ENDLESS, step_limit
from .access import runtime_ir
from .blocks import Addressed, dependence, run_blocks, threads
from .contexts import Layout, Row, Teams, layout
from .emit import COLD_CODE, CTX, HANG_CODE, STEPS_CODE
from .inline import Flat, flatten
from .jit import Compiled, compile_ir, has_masked_moves, has_permutes
from .kernel import extent_origins, kernel_ir
from .lanes import SHAPED_GRID, Shape, warp_shape
from .runtime import REASONS
from .snapshot import Snapshot
from .values import Unsupported

__all__ = ["CompiledTier"]

log = logging.getLogger("ptxbridge.cpu")
RUNTIME = runtime_ir()  # the helpers' module, compiled once and linked with every kernel


class CompiledTier:
    """Compiled kernels of one program; :meth:`launch` is a drop-in for ``run_kernel``."""

    def __init__(self, program: Program):
        self.program = program
        self.kernels: dict[str, Compiled | str] = {}  # a compiled variant, or why it runs interpreted
        # a kernel's extent tables' rows, and the parameter words they take addresses from
        self.origins: dict[str, tuple[list[frozenset[int]], frozenset[int]]] = {}
        self.sizes: dict[str, int] = {}  # bytes of each kernel's parameters
        self.independent: dict[str, bool] = {}  # whether a kernel's blocks may run on several threads
        self.flat: dict[str, Flat] = {}  # each compiled kernel with its calls inlined
        self.variants: dict[tuple[str, Shape | None], _Variant] = {}  # by kernel and warp shape (.lanes)
        self.misses: dict[str, int] = {}  # launches in a row that left the compiled code, per kernel
        self.arguments: dict[tuple[Any, ...], Any] = {}  # :meth:`_arguments`, by launch
        self.teams = Teams()  # the contexts' memory, reused by later launches
        self.layouts: dict[tuple[Any, ...], Layout] = {}  # by kernel, block, shared memory, rows
        self.variable_rows: list[Row] | None = None  # :meth:`_variable_rows`

    def compiled(self, name: str, shape: Shape | None = None) -> Compiled | None:
        """The kernel's native code for launches of warp ``shape`` (:func:`.lanes.warp_shape`; None:
        the thread index does not follow the lane), or None when it runs on the interpreter (logged
        once)."""
        known = self.kernels.get(name)
        if isinstance(known, str):
            return None
        variant = self.variants.get((name, shape))
        if variant is not None:
            return variant.code
        try:
            if "grid" in self.program.check_launch(name):
                raise Unsupported("grid-wide synchronization")
            entry = self.program.entries[name]
            flat = self.flat.get(name) or flatten(self.program.functions, self.program.symbols, name)
            self.flat[name] = flat
            made = kernel_ir(flat.function, flat.symbols, entry.size, has_permutes(), flat.cold, shape,
                             has_masked_moves())
            code = compile_ir(made.text, RUNTIME)
            self.variants[(name, shape)] = _Variant(code, made.cold, made.stores)
            self.kernels[name] = code
            if made.cold and known is None:
                log.debug("kernel %r compiles; a launch that reaches any of %s runs on the interpreter",
                          name, "; ".join(made.cold.values()))
            return code
        except Unsupported as exc:
            found = f"{exc}"
            log.debug("kernel %r runs on the interpreter: %s", name, exc)
        except ImportError as exc:  # llvmlite comes with numba, an optional extra
            found = f"llvmlite is not installed ({exc})"
            log.debug("kernel %r runs on the interpreter: %s", name, found)
        except UnsupportedInstructionError as exc:
            found = f"{exc}"  # the interpreter raises it at launch
        except RuntimeError as exc:  # LLVM refused the IR: the tier's fault, not the kernel's
            found = f"the compiled tier could not compile it ({str(exc).splitlines()[-1]})"
            log.warning("kernel %r runs on the interpreter: %s", name, found)
        self.kernels[name] = found
        return None

    def why_interpreted(self, name: str) -> str | None:
        """None when kernel ``name`` runs compiled, else why it runs on the interpreter."""
        if name not in self.kernels:
            self.compiled(name)
        found = self.kernels[name]
        return found if isinstance(found, str) else None

    def launch(
        self,
        program: Program,
        machine: Machine,
        name: str,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_mem: int,
        params: bytes,
        buffers: Sequence[Buffer],
        max_threads: int,
        max_steps: int,
        heap: Heap,
        signature: Any = None,
        heap_written: dict[int, Any] | None = None,
    ) -> int:
        """Run kernel ``name`` to completion; return the thread-instructions run (``signature`` and
        ``heap_written`` go to the interpreter when it runs the launch: :func:`run_kernel`)."""
        shape = warp_shape(block) if max(grid) < SHAPED_GRID else None
        compiled = self.compiled(name, shape)
        if compiled is None or len(params) < self._param_size(name):
            return run_kernel(
                program, machine, name, grid, block, shared_mem, params, buffers, max_threads, max_steps,
                heap, signature, heap_written,
            )
        flat = self.flat[name]
        extents, extent_rows, rows = self._arguments(name, signature, params, buffers)
        param_data = ctypes.create_string_buffer(params, len(params))  # read only, one for the grid
        param_address, param_base = ctypes.addressof(param_data), WINDOWS["param"]
        rows = [*rows, *self._variable_rows(), *(_row(r, r.data.ctypes.data) for r in heap.regions),
                (param_base, param_base + len(params), (param_address - param_base) % (1 << 64), 0)]
        # held for the launch: two threads missing the cache at once get arrays it keeps only one of
        tids = _thread_indices(block)
        fields = (grid[0], grid[1], grid[2], block[0], block[1], block[2], param_address, max_steps,
                  tids.address, extents.address)
        key = (name, block, shared_mem, len(rows))
        shaped = self.layouts.get(key) or self.layouts.setdefault(
            key, layout(program, flat, block, shared_mem, len(rows)))
        blocks = grid[0] * grid[1] * grid[2]
        team = self.teams.take(shaped, threads() if blocks > 1 and self._independent(name) else 1)
        team.launch(np.array(rows, np.uint64), fields)

        def helpers(count: int) -> list[Addressed]:
            return team.ready(1, 1 + count)

        variant = self.variants[(name, shape)]
        cold = variant.cold
        # a cold instruction sends the launch to the interpreter, which must find memory as it was
        before = Snapshot(self._writable(name, variant.stores, rows, extent_rows)) if cold else None
        status, found, contexts = run_blocks(compiled, team.ready(0, 1)[0], blocks,
                                             helpers, len(team.contexts) - 1)
        if status == 0:
            self.misses[name] = 0
            steps = sum(int(c.array[_THREAD_STEPS]) for c in contexts)
            self.teams.give(team)  # a failed launch's is left to the collector: its report reads it
            return steps
        ctx = found.array
        fn, step = flat.origin[int(ctx[CTX["err_insn"]])]  # the instruction as its own function has it
        where = instruction_at(fn, step)
        if before is not None:
            before.restore()
        if status == COLD_CODE:  # the interpreter runs the launch from the start
            self._missed(name, cold.get(int(ctx[CTX["err_insn"]]), f"`{step.ins.text}`"))
            return run_kernel(
                program, machine, name, grid, block, shared_mem, params, buffers, max_threads, max_steps,
                heap, signature, heap_written,
            )
        if status in (STEPS_CODE, HANG_CODE):  # the watchdog's verdict, as the interpreter words it
            verdict = step_limit(max_steps) if status == STEPS_CODE else ENDLESS
            raise stopped(name, verdict, _thread(grid, block, ctx), fn, step)
        # a fault or a trap: the interpreter runs the launch again and writes the report
        run_kernel(
            program, machine, name, grid, block, shared_mem, params, buffers, max_threads, max_steps, heap,
            signature, heap_written,
        )
        if status != 2:
            raise EmulatorError(f"kernel {name!r}: trap executed {where}")
        size, reason = int(ctx[CTX["err_size"]]), int(ctx[CTX["err_reason"]])
        if reason == 4 and extent_rows[int(ctx[CTX["err_extent"]])] is not None:  # the interpreter's words
            extent = extent_rows[int(ctx[CTX["err_extent"]])]
            said = overrun(extent, int(ctx[CTX["err_addr"]]), size, bool(ctx[CTX["err_write"]]))
        else:
            said = REASONS.get(reason, "bad access").format(size=size)
        raise MemoryAccessError(
            f"kernel {name!r}: {said}: address 0x{int(ctx[CTX['err_addr']]):x} "
            f"({size} bytes) in block {int(ctx[CTX['err_block']])} "
            f"(linear); {where} (found by the compiled CPU tier; the interpreter's "
            "re-run of the launch did not meet it, as the kernel had changed memory)"
        )

    def _missed(self, name: str, why: str) -> None:
        """A launch of ``name`` left the compiled code at ``why``; after :data:`_MISSES` in a row the
        kernel runs on the interpreter for good (each such launch ran twice)."""
        self.misses[name] = self.misses.get(name, 0) + 1
        log.debug("kernel %r left the compiled code at %s: the launch runs on the interpreter", name, why)
        if self.misses[name] >= _MISSES:
            self.kernels[name] = f"its launches keep reaching {why}"
            log.debug("kernel %r runs on the interpreter: %s", name, self.kernels[name])

    def _independent(self, name: str) -> bool:
        """Whether kernel ``name``'s blocks may run on several threads (:func:`.blocks.dependence`;
        why not is logged once)."""
        found = self.independent.get(name)
        if found is None:
            why = dependence(self.flat[name].function)
            if why is not None:
                log.debug("kernel %r runs its blocks in order, on one thread: `%s`", name, why)
            found = self.independent[name] = why is None
        return found

    def _variable_rows(self) -> list[Row]:
        """The region table's rows of the program's module variables (their memory never moves)."""
        if self.variable_rows is None:
            self.variable_rows = [_row(r, r.data.ctypes.data) for r in self.program.variables]
        return self.variable_rows

    def _param_size(self, name: str) -> int:
        size = self.sizes.get(name)
        if size is None:
            size = self.sizes[name] = self.program.entries[name].size
        return size

    def _writable(self, name: str, stores: frozenset[Any], rows: list[Row],
                  extents: list[Extent | None]) -> list[Row]:
        """The rows of ``rows`` kernel ``name``'s compiled code may write: the extents of the arguments
        its stores' addresses derive from, where every store outside shared and local memory has
        one (:mod:`..provenance`; the tier keeps each such access inside it), else every writable row."""
        rows_of = {origin: k + 1 for k, origin in enumerate(self.origins[name][0])}
        found = {rows_of.get(origin) for origin in stores}
        if None in found or any(extents[k] is None for k in found):
            return rows
        return [(extents[k].lo, extents[k].hi, 0, 1) for k in sorted(found)]

    def _arguments(
        self, name: str, signature: Any, params: bytes, buffers: Sequence[Buffer]
    ) -> tuple[Addressed, list[Extent | None], list[Row]]:
        """The launch's extent table, its extents and the region table's rows of the caller's buffers
        (:meth:`_extents`), remembered for launches with the same parameters and buffers (a loop of
        launches repeats them; the table is read only)."""
        key = (name, params, *((b.ptr, b.nbytes, b.writable, b.name, b.itemsize, b.dtype) for b in buffers))
        found = self.arguments.get(key)
        if found is None:
            if len(self.arguments) >= _ARGUMENTS:
                self.arguments.clear()
            # the caller's buffers are host memory at their own addresses: host minus base is 0
            rows = [(start, end, 0, int(writable)) for start, end, writable, _ in merged_buffers(buffers)]
            found = self.arguments[key] = (*self._extents(name, signature, params, buffers), rows)
        return found

    def _extents(
        self, name: str, signature: Any, params: bytes, buffers: Sequence[Buffer]
    ) -> tuple[Addressed, list[Extent | None]]:
        """The launch's extent table and its extents: row ``k`` (start, end and two unused words,
        the shape of the region table's rows) is the extent of the argument the kernel's ``k``-th
        address origin points into (:func:`.kernel.extent_origins`), end 0 where there is none
        (checked against the regions only, as the interpreter's :meth:`~..memory.Memory.extent`)."""
        found = self.origins.get(name)
        if found is None:
            origins = extent_origins(self.flat[name].function)
            found = self.origins[name] = (origins, frozenset().union(*origins))
        origins, words = found
        by_param = parameter_extents(signature, params, named_extents(buffers), words) if origins else {}
        rows: list[Extent | None] = [None, *(extent_of(by_param, origin) for origin in origins)]
        table = np.zeros((len(rows), 4), np.uint64)
        for k, extent in enumerate(rows):
            if extent is not None:
                table[k, :2] = extent.lo, extent.hi
        return Addressed(table, table.ctypes.data), rows


class _Variant(NamedTuple):
    """A kernel compiled for one kind of launch: its code, cold steps and stores' address origins."""

    code: Compiled
    cold: dict[int, str]
    stores: frozenset[Any]


_THREAD_STEPS = CTX["thread_steps"]
_ARGUMENTS = 64  # launches' arguments remembered at most (:meth:`CompiledTier._arguments`)
_MISSES = 2  # launches in a row that leave the compiled code before a kernel stays on the interpreter


def _row(region: Region, host: int) -> Row:
    """A region table row: base, end, host address minus base, flags (writable; per thread)."""
    return (region.base, region.base + region.size, (host - region.base) % (1 << 64),
            int(region.writable) | (2 if region.per == PER_THREAD else 0))


@functools.lru_cache(maxsize=64)
def _thread_indices(block: tuple[int, int, int]) -> Addressed:
    """The table of every padded thread's x, y and z index a block shape has (read-only: shared by
    the launches of that shape)."""
    warps = -(-block[0] * block[1] * block[2] // 32)
    lin = np.arange(32 * warps, dtype=np.uint32)
    tids = np.concatenate([lin % block[0], lin // block[0] % block[1], lin // (block[0] * block[1])])
    tids.flags.writeable = False
    return Addressed(tids, tids.ctypes.data)


def _thread(grid: tuple[int, int, int], block: tuple[int, int, int], ctx: np.ndarray) -> str:
    """``block (x, y, z), thread (x, y, z)`` of the context's failing block and thread (linear)."""
    b, t = int(ctx[CTX["err_block"]]), int(ctx[CTX["err_thread"]])
    return coordinates(
        (b % grid[0], b // grid[0] % grid[1], b // (grid[0] * grid[1])),
        (t % block[0], t // block[0] % block[1], t // (block[0] * block[1])),
    )
