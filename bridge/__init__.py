"""ptxbridge: mix GPU kernels across languages.

Frontends (``ptxbridge.rust.frontend``, ``.oxide``, ``.numba``, ``.tile``, ``.nvrtc``)
turn sources into :class:`Artifact` objects; :func:`link` joins artifacts into
an :class:`Image`; ``Image.load(device)`` returns a module whose kernels take
DLPack tensors.

``python -m ptxbridge`` (``__main__``) is the command line (:mod:`ptxbridge.cli`).
"""

from __future__ import annotations

import importlib
from typing import Any

from ptxbridge.abi.errors import (
    AbiMismatchError,
    ArgumentError,
    CompileError,
    CudaError,
    EmulatorError,
    FormatError,
    KernelRaisedError,
    LinkError,
    MemoryAccessError,
    OptionError,
    PtxBridgeError,
    ToolchainError,
)

_LAZY = {  # public name -> the module that defines it, imported on first use
    "Artifact": "ptxbridge.artifacts.artifact", "CodeKind": "ptxbridge.artifacts.artifact",
    "Provenance": "ptxbridge.artifacts.artifact", "Image": "ptxbridge.artifacts.image",
    "Kernel": "ptxbridge.launch.module", "Module": "ptxbridge.launch.module",
    "LinkOptions": "ptxbridge.linker", "link": "ptxbridge.linker", "load": "ptxbridge.linker",
    "Convention": "ptxbridge.abi.params", "Signature": "ptxbridge.abi.signature",
}
__all__ = [
    "AbiMismatchError", "ArgumentError", "CompileError", "CudaError", "EmulatorError", "FormatError",
    "KernelRaisedError", "LinkError", "MemoryAccessError", "OptionError", "PtxBridgeError", "ToolchainError",
    *_LAZY,
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """The linker, the call path and NumPy load when first used, so ``import ptxbridge.abi`` or the
    command line's ``--version`` pays for none of them."""
    try:
        module = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'ptxbridge' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
