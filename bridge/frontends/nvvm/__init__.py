"""NVVM IR -> LTO-IR through libNVVM, with libdevice, under a cuda-oxide compile policy.

``dialect``: NVVM IR text rewritten in the dialect libNVVM reads for the target.

cuda-oxide emits NVVM IR (text ``.ll``, or bitcode inside ``.oxart``) instead
of PTX when a kernel calls libdevice math (``__nv_sinf``...); its host then
compiles that IR with libNVVM, libdevice added, to LTO-IR and links it with
nvJitLink (``cuda-host/src/ltoir.rs``).  This module is that first step, on
the ``nvidia-nvvm`` wheel through ``cuda.bindings.nvvm`` and libdevice found
by ``cuda.pathfinder``; the linker (:mod:`ptxbridge.linker`) does the second.

The compile policy a bundle records (``.oxart`` option bits or the
``.options`` sidecar, :class:`~ptxbridge.abi.oxart.OxartOptions`) must reach
both stages (``cuda-artifact-finalizer/src/options.rs``):

========================  ======================================  ==========================
policy                    libNVVM                                 nvJitLink
========================  ======================================  ==========================
always                    ``-arch=compute_XX -gen-lto``           ``-arch=sm_XX -lto``
FMA contraction on / off  ``-fma=1`` / ``-fma=0``                 ``-fma=1`` / ``-fma=0``
line tables               (nothing)                               ``-lineinfo``
full debug                ``-g -opt=0``                           ``-g``
========================  ======================================  ==========================
"""

from __future__ import annotations

import functools
from importlib import metadata
from pathlib import Path
from typing import Any

from ptxbridge import cache
from ptxbridge.abi.errors import CompileError, ToolchainError
from ptxbridge.abi.oxart import OxartOptions
from ptxbridge.abi.targets import parse_target

__all__ = ["compile_to_ltoir", "ir_version", "libdevice_path", "link_options", "llvm_major", "nvvm_options",
           "policy_of"]

_INSTALL = "pip install nvidia-nvvm cuda-bindings (libNVVM and libdevice come with nvidia-nvvm)"


def _compute(arch: str) -> str:
    return parse_target(arch, who="NVVM IR", like="'sm_90' or 'compute_90'").compute


def nvvm_options(policy: OxartOptions, arch: str) -> list[str]:
    """libNVVM options compiling NVVM IR for ``arch`` under ``policy`` (see the module table)."""
    options = [f"-arch={_compute(arch)}", "-gen-lto", f"-fma={int(not policy.no_fma)}"]
    return options + (["-g", "-opt=0"] if policy.debug else [])


def link_options(policy: OxartOptions) -> tuple[str, ...]:
    """The nvJitLink options ``policy`` asks of the final link (``-fma``, ``-lineinfo`` or ``-g``)."""
    debug = ("-g",) if policy.debug else ("-lineinfo",) if policy.line_tables else ()
    return (f"-fma={int(not policy.no_fma)}", *debug)


def policy_of(options: tuple[str, ...]) -> OxartOptions:
    """The policy :func:`link_options` spelled as ``options`` (the inverse, for the linker)."""
    return OxartOptions(no_fma="-fma=0" in options, line_tables="-lineinfo" in options, debug="-g" in options)


@functools.cache
def libdevice_path() -> Path:
    """``libdevice.10.bc`` of the installed toolkit wheels (``cuda.pathfinder``)."""
    try:
        from cuda.pathfinder import find_bitcode_lib

        return Path(find_bitcode_lib("device"))
    except Exception as exc:  # ImportError, BitcodeLibNotFoundError
        raise ToolchainError(f"libdevice.10.bc was not found ({exc}); {_INSTALL}") from exc


def _nvvm() -> Any:
    try:
        from cuda.bindings import nvvm

        nvvm.version()
        return nvvm
    except Exception as exc:
        raise ToolchainError(f"libNVVM is not available ({exc}); {_INSTALL}") from exc


def llvm_major(arch: str) -> int:
    """The LLVM major version of the IR libNVVM reads for ``arch``: 7 (typed pointers) below sm_100,
    a current LLVM (opaque pointers) from sm_100 on (``nvvmLLVMVersion``)."""
    return int(_nvvm().llvm_version(_compute(arch)))


def ir_version() -> tuple[int, int, int, int]:
    """The NVVM IR and debug-info versions libNVVM reads: what ``!nvvmir.version`` must state."""
    return tuple(_nvvm().ir_version())  # type: ignore[return-value]


def _log(nvvm: Any, program: int) -> str:
    size = nvvm.get_program_log_size(program)
    buffer = bytearray(size)
    nvvm.get_program_log(program, buffer)
    return bytes(buffer).rstrip(b"\0").decode(errors="replace").strip()


def compile_to_ltoir(ir: bytes, name: str, arch: str, policy: OxartOptions | None = None) -> bytes:
    """LTO-IR from NVVM IR (text or bitcode) with libdevice, through the disk cache.

    Raises
    ------
    CompileError
        libNVVM rejected the IR (its log is attached), or IR with opaque
        pointers states what the LLVM 7 dialect libNVVM reads below sm_100
        cannot (text IR is rewritten into it, and given ``!nvvmir.version``
        when it has none: :mod:`ptxbridge.nvvm.dialect`).
    ToolchainError
        libNVVM or libdevice is missing.
    """
    from .dialect import for_libnvvm  # here: it reads ptxbridge.rust, which imports this package

    nvvm = _nvvm()
    options = nvvm_options(policy or OxartOptions(), arch)
    ir = for_libnvvm(ir, llvm_major(arch), ir_version())
    library = libdevice_path().read_bytes()
    version = ".".join(map(str, nvvm.version()))
    entry_key = cache.key("nvvm-ltoir-v1", version, _wheel(), *options, library, ir)

    def produce() -> bytes:
        program = nvvm.create_program()
        try:
            stage = "verifying"
            try:
                nvvm.add_module_to_program(program, library, len(library), "libdevice.10.bc")
                nvvm.add_module_to_program(program, ir, len(ir), name)
                nvvm.verify_program(program, 1, [options[0]])
                stage = "compiling"
                nvvm.compile_program(program, len(options), options)
            except nvvm.nvvmError as exc:
                raise CompileError(f"libNVVM failed {stage} {name} with {' '.join(options)}: {exc}",
                                   log=_log(nvvm, program)) from None
            size = nvvm.get_compiled_result_size(program)
            result = bytearray(size)
            nvvm.get_compiled_result(program, result)
            return bytes(result)
        finally:
            nvvm.destroy_program(program)

    return cache.cached("nvvm", entry_key, produce)


def _wheel() -> str:
    try:
        return metadata.version("nvidia-nvvm")
    except metadata.PackageNotFoundError:
        return "system"
