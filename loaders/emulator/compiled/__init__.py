"""ptxbridge.loaders.emulator.compiled: the CPU loader's compiled tier (PTX -> LLVM IR -> native code).

A kernel becomes one LLVM function over a warp (32 lanes as vectors under an execution mask),
compiled by llvmlite; the interpreter stays the fallback for what the tier does not translate and
the oracle its tests compare against.

Modules::

    tier               the launch: the same contract as the interpreter's run_kernel, fallback
    blocks             a launch's blocks in chunks, on several threads where none sees another's work
    contexts           the memory a launch's blocks run on, one context a thread, readied together
    snapshot           the memory a launch may write, kept for a launch that leaves the compiled code
    kernel             the warp function: blocks, the min-PC scheduler, barriers
    inline             calls of device functions replaced by their bodies
    watch              the watchdog: the step limit, loops that can never end
    flow               block-local and barrier-live registers
    lanes              registers whose lanes follow the lane by constants (one scalar a warp)
    ranges             compares of such a register against one value, as one scalar range test
    emit, values       registers, operands, masks and types as vector IR text
    ops, convert, mem  the instructions (arithmetic, cvt/cvta, loads, stores, atomics)
    warp               shfl, vote, activemask, redux, match, elect: a warp's lanes permuted, reduced
    access, runtime    checked memory helpers (one module every kernel links), the region lookup,
                       the grid driver
    direct             the inline fast paths: remembered checks per instruction, direct, patterned
                       and row moves
    jit                llvmlite, the object cache on disk and in the process
"""

from .tier import CompiledTier

__all__ = ["CompiledTier"]
