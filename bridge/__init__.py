"""ptxbridge: mix GPU kernels across languages.

Frontends (``ptxbridge.rust``, ``.oxide``, ``.numba``, ``.tile``, ``.nvrtc``)
turn sources into :class:`Artifact` objects; :func:`link` joins artifacts into
an :class:`Image`; ``Image.load(device)`` returns a module whose kernels take
DLPack tensors.
"""

from ptxbridge.abi import (
    AbiMismatchError,
    ArgumentError,
    CompileError,
    Convention,
    CudaError,
    EmulatorError,
    FormatError,
    LinkError,
    OptionError,
    PtxBridgeError,
    Signature,
    ToolchainError,
)

from .artifact import Artifact, CodeKind, Provenance
from .image import Image
from .linker import LinkOptions, link, load
from .module import Kernel, Module

__all__ = [
    "AbiMismatchError", "ArgumentError", "Artifact", "CodeKind", "CompileError", "Convention",
    "CudaError", "EmulatorError", "FormatError", "Image", "LinkError", "OptionError", "Provenance",
    "PtxBridgeError", "Signature", "ToolchainError", "LinkOptions", "link", "load",
    "Kernel", "Module",
]
__version__ = "0.1.0"
