"""NVVM IR -> LTO-IR through libNVVM, with libdevice, under a cuda-oxide compile policy.

``dialect``: NVVM IR text rewritten in the dialect libNVVM reads for the target.
``bitcode``: NVVM IR bitcode libNVVM refuses, read as text (llvmlite) for that rewrite.

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


OPAQUE_POINTERS_FROM = 10  # the first major compute capability whose IR libNVVM reads with opaque pointers
LEGACY_LLVM = 7  # the LLVM of libNVVM's typed-pointer dialect
UNREPORTED_LLVM = 0  # llvm_major's answer for "a current LLVM" where libNVVM cannot name it


def llvm_major(arch: str) -> int:
    """The LLVM major version of the IR libNVVM reads for ``arch``: 7 (typed pointers) below sm_100,
    a current LLVM (opaque pointers) from sm_100 on (``nvvmLLVMVersion``).  The libNVVM of CUDA 13.0
    (a toolkit's ``nvvm/``) has no ``nvvmLLVMVersion``: there the split is the same, and a current
    LLVM is :data:`UNREPORTED_LLVM`."""
    nvvm = _nvvm()
    compute = _compute(arch)
    try:
        return int(nvvm.llvm_version(compute))
    except Exception:  # cuda.bindings' FunctionNotFoundError: the entry point is newer than this libNVVM
        legacy = parse_target(compute).major < OPAQUE_POINTERS_FROM
        return LEGACY_LLVM if legacy else UNREPORTED_LLVM


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

    Text IR is first put in the dialect libNVVM reads for ``arch`` (:mod:`ptxbridge.nvvm.dialect`:
    opaque pointers rewritten below sm_100, ``!nvvmir.version`` added when missing).  Bitcode goes
    to libNVVM as it is; bitcode libNVVM refuses is read as text (:mod:`ptxbridge.nvvm.bitcode`)
    and takes the text path.

    Raises
    ------
    CompileError
        libNVVM rejected the IR (its log is attached), or IR with opaque pointers states what
        the LLVM 7 dialect libNVVM reads below sm_100 cannot; the message names ``name``.
    ToolchainError
        libNVVM or libdevice is missing, or llvmlite, for bitcode libNVVM refuses.
    """
    from .bitcode import as_text, is_bitcode, not_as_it_is

    nvvm = _nvvm()
    options = nvvm_options(policy or OxartOptions(), arch)
    major, version = llvm_major(arch), ir_version()
    ir = _in_dialect(ir, name, major, version)
    library = libdevice_path().read_bytes()
    built_by = ".".join(map(str, nvvm.version()))
    entry_key = cache.key("nvvm-ltoir-v2", built_by, _wheel(), *options, library, ir)

    def produce() -> bytes:
        why = not_as_it_is(ir) if is_bitcode(ir) else None
        if why is None:
            try:
                return _compile(nvvm, (library, ir), name, options)
            except CompileError as exc:
                if not is_bitcode(ir):
                    raise
                why = f"libNVVM refused it as it is ({(exc.log.strip().splitlines() or [str(exc)])[0]})"
        text = _in_dialect(as_text(ir, name, why), name, major, version)
        try:
            return _compile(nvvm, (library, text), name, options)
        except CompileError as exc:
            raise CompileError(f"{exc} (the bitcode read as text by llvmlite, because {why})",
                               log=exc.log) from None

    return cache.cached("nvvm", entry_key, produce)


def _in_dialect(ir: bytes, name: str, major: int, version: tuple[int, ...]) -> bytes:
    """:func:`ptxbridge.nvvm.dialect.for_libnvvm`, its refusals naming ``name``."""
    from .dialect import for_libnvvm  # here: it reads ptxbridge.rust, which imports this package

    try:
        return for_libnvvm(ir, major, version)
    except CompileError as exc:
        raise CompileError(f"{name}: {exc}", log=exc.log) from None


def _compile(nvvm: Any, modules: tuple[bytes, bytes], name: str, options: list[str]) -> bytes:
    """libdevice and the IR ``name`` verified and compiled by libNVVM with ``options``."""
    program = nvvm.create_program()
    try:
        stage = "verifying"
        try:
            for module, called in zip(modules, ("libdevice.10.bc", name), strict=True):
                nvvm.add_module_to_program(program, module, len(module), called)
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


def _wheel() -> str:
    try:
        return metadata.version("nvidia-nvvm")
    except metadata.PackageNotFoundError:
        return "system"
