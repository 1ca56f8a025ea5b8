"""ptxbridge.loaders.emulator: run PTX on the CPU (NumPy-vectorized SIMT interpreter).

Modules::

    backend            the Backend
    parse, program, build          PTX -> linked program of closures
    ops_int, ops_float, ops_half, ops_set, ops_data, ops_mem, ops_async, ops_warp, ops_control,
    float_math, values, builtins   instructions and their exact semantics
    machine, frame, launch, memory threads, warps, blocks, bounds-checked memory
    provenance, extents            which argument an address comes from; errors that name it
    watchdog           the step limit, endless-loop detection, progress on long launches
    sanitize, hazards  sanitize=: racecheck (hazards: the shared-memory shadow) and initcheck
    liveness           block-local registers (masked writes that need no mask)
    compiled/          the compiled tier (its own room, loaders/emulator/compiled/)
    heap               device malloc/free (new/delete)
    lines              source lines from the PTX line table (where a trap is)
    _native.c          optional C loops: exact fma ufunc, one-pass address checks, gather/scatter
    _threads.c         optional: the compiled tier's pool of threads for independent blocks
"""

from .backend import EmulatorBackend

__all__ = ["EmulatorBackend"]
