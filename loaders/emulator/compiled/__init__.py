"""ptxbridge.loaders.emulator.compiled: the CPU loader's compiled tier (PTX -> LLVM IR -> native code).

A kernel becomes one LLVM function over a warp (32 lanes as vectors under an execution mask,
:mod:`.kernel`), compiled by llvmlite (:mod:`.jit`); the interpreter stays the fallback for what the
tier does not translate and the oracle its tests compare against.
"""

from .tier import CompiledTier

__all__ = ["CompiledTier"]
