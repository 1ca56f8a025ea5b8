"""ptxbridge: mix GPU kernels across languages.

Frontends (``ptxbridge.rust.frontend``, ``.oxide``, ``.numba``, ``.tile``, ``.nvrtc``)
turn sources into :class:`Artifact` objects; :func:`link` joins artifacts into
an :class:`Image`; ``Image.load(device)`` returns a module whose kernels take
DLPack tensors.

``python -m ptxbridge`` (``__main__``) is the command line (:mod:`ptxbridge.cli`).
"""

from ptxbridge.abi import (
    AbiMismatchError,
    ArgumentError,
    CompileError,
    Convention,
    CudaError,
    EmulatorError,
    FormatError,
    KernelRaisedError,
    LinkError,
    MemoryAccessError,
    OptionError,
    PtxBridgeError,
    SanitizerError,
    Signature,
    ToolchainError,
)
from ptxbridge.artifacts.artifact import Artifact, CodeKind, Provenance
from ptxbridge.artifacts.image import Image
from ptxbridge.launch.module import Kernel, Module
from ptxbridge.linker import LinkOptions, link, load

__all__ = [
    "AbiMismatchError", "ArgumentError", "Artifact", "CodeKind", "CompileError", "Convention",
    "CudaError", "EmulatorError", "FormatError", "Image", "LinkError", "OptionError", "Provenance",
    "KernelRaisedError", "PtxBridgeError", "Signature", "ToolchainError", "LinkOptions", "link", "load",
    "MemoryAccessError", "SanitizerError", "Kernel", "Module",
]
__version__ = "0.1.0"
