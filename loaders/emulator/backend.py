"""The CPU loader: an :class:`~ptxbridge.Image`'s PTX compiled to native code (:mod:`.compiled`) or
interpreted on NumPy, behind the Backend interface."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ptxbridge.abi.devices import DLPACK_CPU
from ptxbridge.abi.errors import ArgumentError, EmulatorError, UnsupportedInstructionError
from ptxbridge.loaders.base import Backend, Buffer

from .compiled import CompiledTier
from .heap import Heap
from .launch import run_kernel, shared_bytes
from .machine import Machine
from .memory import RESERVED_SMEM
from .program import Program
from .sanitize import Sanitize

__all__ = ["EmulatorBackend", "MAX_SHARED_BYTES", "DEFAULT_MAX_STEPS", "TIERS", "Sanitize"]

_MAX_GRID = (2**31 - 1, 65535, 65535)  # CUDA's limits, which the compiled tier's index facts rely on
_MAX_BLOCK_THREADS = 1024
_SHAPES = 256  # launch shapes remembered as checked at most
MAX_SHARED_BYTES = 227 * 1024  # shared memory one block may have on sm_90 (with the opt-in attribute)
DEFAULT_MAX_STEPS = 100_000_000
TIERS = ("compiled", "interp")
DEFAULT_TIER = "compiled"  # native code where the tier translates the kernel, else the interpreter


class EmulatorBackend(Backend):
    """Runs an image's PTX on the CPU; arguments are host (DLPack kCPU) memory.

    Parameters
    ----------
    image
        A linked :class:`~ptxbridge.Image`; ``image.ptx`` holds every PTX module, linked here.
    device_id
        Always 0 for the CPU.
    max_batch_threads
        Threads interpreted together (whole blocks); larger batches amortize
        interpretation, smaller ones bound memory.
    max_steps
        Interpreter steps one batch may take before the launch fails with
        EmulatorError (a watchdog against endless loops and spin-waits that
        need independent thread scheduling); ``load(..., max_steps=N)`` sets it.
        None: no limit.  A loop that provably never ends (the same state with
        nothing stored) is stopped long before (:mod:`.watchdog`).
    sanitize
        compute-sanitizer's tools: ``"racecheck"``, ``"initcheck"``, both
        (``"racecheck,initcheck"`` or a sequence), ``"memcheck"`` (always on)
        or None; hazards raise :class:`~ptxbridge.abi.errors.SanitizerError`
        (:mod:`.sanitize`).  ``load(..., sanitize=...)`` sets it.
    tier
        ``"compiled"``: kernels run as native code (:mod:`.compiled`) where the compiled tier
        translates them, on the interpreter otherwise; ``"interp"``: always on the interpreter.
        None: ``$PTXBRIDGE_CPU_TIER``, else :data:`DEFAULT_TIER` (``"compiled"``).  Both tiers make
        the same checks with the same reports; the interpreter also runs every launch with a
        ``sanitize=`` tool.

    Raises
    ------
    LinkError
        A called function or extern variable is defined by no module.

    Notes
    -----
    A kernel that uses PTX the emulator does not implement loads, and its
    launch raises :class:`~ptxbridge.abi.errors.UnsupportedInstructionError`
    naming the instruction, its PTX line and the kernel; the module's other
    kernels run.  Kernels that synchronize the whole grid are listed in
    :attr:`cooperative_kernels` and always run with every block at once.

    Launches are synchronous and ``stream`` is ignored: when ``launch`` returns,
    the kernel has finished and no reference to the arguments is kept.
    """

    device_type = DLPACK_CPU

    def __init__(self, image: Any, device_id: int = 0, *, max_batch_threads: int = 1 << 15,
                 max_steps: int | None = DEFAULT_MAX_STEPS, tier: str | None = None,
                 sanitize: str | Sequence[str] | None = None):
        if device_id != 0:
            raise ArgumentError(f"the CPU emulator has one device, 0 (got device_id={device_id})")
        if not image.ptx:
            reasons = "; ".join(sorted(set(getattr(image, "cpu_unavailable", {}).values())))
            raise EmulatorError("the CPU emulator needs the image's PTX and it has none: "
                                + (reasons or "link PTX, LTO-IR or NVVM IR inputs"))
        if max_batch_threads < 32:
            raise ArgumentError(f"max_batch_threads must be >= 32 (got {max_batch_threads})")
        if max_steps is not None and (not isinstance(max_steps, int) or max_steps < 1):
            raise ArgumentError(f"max_steps must be a positive int or None for no limit (got {max_steps!r})")
        tier = tier or os.environ.get("PTXBRIDGE_CPU_TIER") or DEFAULT_TIER
        if tier not in TIERS:
            raise ArgumentError(f"tier (or $PTXBRIDGE_CPU_TIER) must be one of {', '.join(TIERS)} "
                                f"(got {tier!r})")
        self.image = image
        self.device_id = device_id
        self.max_batch_threads = max_batch_threads
        self.max_steps = max_steps
        self.thread_instructions = 0  # instructions x threads executing them, over all launches
        self.sanitize = Sanitize.parse(sanitize)  # .interpreted: a faster tier must leave the launch here
        self.program = Program(image.ptx, self.sanitize if self.sanitize.interpreted else None)
        self._heap_written: dict[int, Any] = {}  # initcheck: what launches wrote of the device heap
        addresses = {address: key for key, address in self.program.function_addresses.items()}
        self._machine = Machine(self.program.functions, addresses)
        self.tier = tier
        self.compiled_tier = CompiledTier(self.program) if tier == "compiled" else None
        self._run = self.compiled_tier.launch if self.compiled_tier is not None else run_kernel
        self._heap = Heap()
        self.cooperative_kernels = frozenset(
            name for name, fn in self.program.functions.items()
            if name in self.program.entries and fn.refused is None and _reaches_grid_sync(self.program, name))
        self._closed = False
        self._launchable: set[tuple[Any, ...]] = set()  # launch shapes checked (:meth:`_check_shape`)

    def function(self, name: str) -> str:
        """The kernel's name, checked to be an ``.entry`` of the image (KeyError otherwise; an
        :class:`EmulatorError` saying why when the image has the kernel but no PTX for it)."""
        if name not in self.program.entries:
            why = getattr(self.image, "cpu_unavailable", {}).get(name)
            if why is not None:
                raise EmulatorError(f"{name}: the CPU loader cannot run this kernel: {why}")
            raise KeyError(name)
        return name

    def launch(self, function: Any, grid: tuple[int, int, int], block: tuple[int, int, int],
               shared_mem: int, stream: Any, params: bytes, buffers: Sequence[Buffer]) -> None:
        """Run ``function`` over ``grid`` x ``block`` to completion (see ``Backend.launch``)."""
        if self._closed:
            raise EmulatorError("launch on a closed EmulatorBackend")
        grid, block = _dims("grid", grid), _dims("block", block)
        shape = (function, grid, block, shared_mem)
        if shape not in self._launchable:  # a loop of launches checks its shape once
            self._check_shape(function, grid, block, shared_mem)
            if len(self._launchable) >= _SHAPES:
                self._launchable.clear()
            self._launchable.add(shape)
        steps = self.max_steps if self.max_steps is not None else 1 << 62
        run = self._run
        if self.compiled_tier is not None and self.sanitize.interpreted:
            run = run_kernel  # racecheck and initcheck keep shadow state the interpreter's way
        self.thread_instructions += run(self.program, self._machine, function, grid, block, shared_mem,
                                        bytes(params), buffers, self.max_batch_threads, steps, self._heap,
                                        self.image.kernels.get(function), self._heap_written)

    def _check_shape(self, function: str, grid: tuple[int, int, int], block: tuple[int, int, int],
                     shared_mem: int) -> None:
        """Refuse a launch of ``function`` a GPU would refuse: too many threads or blocks, a block
        its ``.reqntid`` does not allow, too much shared memory (an unknown kernel: KeyError)."""
        threads = block[0] * block[1] * block[2]
        if threads > _MAX_BLOCK_THREADS:
            raise ArgumentError(f"{function}: a block has at most {_MAX_BLOCK_THREADS} threads (got {block})")
        if any(d > most for d, most in zip(grid, _MAX_GRID, strict=True)):
            raise ArgumentError(f"{function}: a grid has at most {_MAX_GRID} blocks along x, y, z, as on "
                                f"a GPU (got {grid})")
        entry = self.program.entries[self.function(function)]
        if entry.reqntid is not None and tuple(entry.reqntid) + (1,) * (3 - len(entry.reqntid)) != block:
            raise ArgumentError(f"{function}: .reqntid {entry.reqntid} demands exactly that block "
                                f"(got {block})")
        if shared_mem < 0:
            raise ArgumentError(f"{function}: shared_mem must be >= 0 (got {shared_mem})")
        reserved = RESERVED_SMEM if self.program.reserves else 0
        asked = shared_bytes(self.program, shared_mem) - reserved
        if asked > MAX_SHARED_BYTES:
            static = self.program.shared_static - reserved
            raise ArgumentError(f"{function}: a block may have at most {MAX_SHARED_BYTES} bytes of shared "
                                f"memory (sm_90); this launch needs {asked} ({static} static + {shared_mem} "
                                "dynamic)")

    def global_address(self, name: str) -> tuple[int, int]:
        """(host address, size in bytes) of module variable ``name`` (KeyError when absent)."""
        region = self.program.named[name]
        return region.base, region.size

    def read_global(self, name: str) -> bytes:
        region = self.program.named[name]
        return region.data[:region.size].tobytes()

    def write_global(self, name: str, data: bytes) -> None:
        """Overwrite module variable ``name`` (``.const`` included, as the host may)."""
        region = self.program.named[name]
        if len(data) != region.size:
            raise ArgumentError(f"global {name!r} has {region.size} bytes (got {len(data)})")
        region.data[:region.size] = np.frombuffer(data, np.uint8)

    def close(self) -> None:
        self._closed = True


def _reaches_grid_sync(program: Program, name: str) -> bool:
    try:
        return "grid" in program.check_launch(name)
    except UnsupportedInstructionError:
        return False


def _dims(what: str, value: Any) -> tuple[int, int, int]:
    if value.__class__ is tuple and len(value) == 3:  # as the bridge hands them: checked in one pass
        x, y, z = value
        if x.__class__ is y.__class__ is z.__class__ is int and x > 0 and y > 0 and z > 0:
            return value
    dims = (value,) if isinstance(value, int) else tuple(value)
    if not 1 <= len(dims) <= 3 or any(not isinstance(d, int) or d < 1 for d in dims):
        raise ArgumentError(f"{what} must be a positive int or a tuple of 1 to 3 positive ints "
                            f"(got {value!r})")
    return (*dims, *(1,) * (3 - len(dims)))  # type: ignore[return-value]
