"""NVVM IR bitcode libNVVM refuses, read as text so the rewrites of :mod:`ptxbridge.nvvm.dialect` apply.

libNVVM reads bitcode itself, so bitcode goes to it as it is first (LLVM 14's typed-pointer
bitcode compiles for every target), unless it states no data layout: libNVVM 13.5 aborts the
process on such IR from compute_100 on (measured), so it takes the text path, which adds one.
libNVVM refuses bitcode of a newer LLVM below compute_100 (its LLVM 7 reader:
"Invalid value (Producer: 'LLVM22.1.0' Reader: 'LLVM 7.0.1')", which is what cuda-oxide's
opaque-pointer IR assembled to bitcode gets) and bitcode without ``!nvvmir.version`` on every
target.  That bitcode is read here with llvmlite (numba's LLVM, 22 for llvmlite 0.50; it reads
the bitcode of its own and older LLVMs) and printed as text, which the dialect rewrite and the
version metadata then take as they take cuda-oxide's text.  LLVM's reader upgrades the
``!nvvm.annotations`` on the way (kernels become ``ptx_kernel``, launch bounds function attributes
such as ``"nvvm.maxntid"="256,1,1"``); the rewrite states them as annotations again.
"""

from __future__ import annotations

from ptxbridge.abi.errors import CompileError, ToolchainError
from ptxbridge.abi.sniff import BITCODE_MAGIC, BITCODE_WRAPPER_MAGIC

__all__ = ["as_text", "is_bitcode", "not_as_it_is"]


def is_bitcode(ir: bytes) -> bool:
    """Whether ``ir`` is LLVM bitcode (raw, or in the bitcode wrapper) rather than text."""
    return ir.startswith((BITCODE_MAGIC, BITCODE_WRAPPER_MAGIC))


def not_as_it_is(ir: bytes) -> str | None:
    """Why the bitcode ``ir`` must not reach libNVVM as it is (it states no data layout), or None:
    it may, or this cannot tell (no llvmlite, or bitcode llvmlite cannot read)."""
    try:
        import llvmlite.binding as llvm

        layout = llvm.parse_bitcode(bytes(ir)).data_layout
    except (ImportError, RuntimeError):
        return None
    return None if layout else "it states no data layout (libNVVM aborts on such IR from compute_100 on)"


def as_text(ir: bytes, name: str, why: str) -> bytes:
    """The bitcode ``ir`` (named ``name``) as LLVM IR text; ``why`` says why it is read.

    Raises
    ------
    ToolchainError
        llvmlite is not installed.
    CompileError
        llvmlite cannot read ``ir`` (not bitcode, or bitcode of a newer LLVM than its own).
    """
    try:
        import llvmlite.binding as llvm
    except ImportError as exc:
        raise ToolchainError(f"NVVM IR bitcode {name}: {why}; reading it to rewrite it needs llvmlite "
                             f"({exc}): pip install llvmlite (numba's dependency, in ptxbridge[numba]), "
                             "or give the IR as text (.ll)") from None
    try:
        module = llvm.parse_bitcode(bytes(ir))
    except RuntimeError as exc:
        major = ".".join(map(str, llvm.llvm_version_info))
        reason = " ".join(str(exc).split())
        raise CompileError(f"NVVM IR bitcode {name}: {why}, and llvmlite (LLVM {major}) cannot read it to "
                           f"rewrite it ({reason}): give the IR as text "
                           f"(.ll), or as bitcode of LLVM {llvm.llvm_version_info[0]} or older") from None
    return str(module).encode()
