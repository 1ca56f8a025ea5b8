"""ptxbridge: mix GPU kernels across languages.

Frontends (``ptxbridge.rust.frontend``, ``.oxide``, ``.numba``, ``.tile``, ``.nvrtc``)
turn sources into :class:`Artifact` objects; :func:`link` joins artifacts into
an :class:`Image`; ``Image.load(device)`` returns a module whose kernels take
DLPack tensors.

``python -m ptxbridge`` (``__main__``) is the command line (:mod:`ptxbridge.cli`).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from ptxbridge.abi.errors import (
    AbiMismatchError,
    ArgumentError,
    CompileError,
    CudaError,
    EmulatorError,
    FormatError,
    KernelRaisedError,
    KernelTrapError,
    LinkError,
    MemoryAccessError,
    OptionError,
    PtxBridgeError,
    SanitizerError,
    TargetError,
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
    "KernelRaisedError", "LinkError", "MemoryAccessError", "OptionError", "PtxBridgeError", "SanitizerError",
    "TargetError", "ToolchainError", "KernelTrapError",
    *_LAZY,
]
__version__ = "0.1.0"

# Rooms that live under bridge/frontends/ and bridge/frameworks/ but import as ptxbridge.<room>
# (pyproject.toml's package-dir).  A folder of the same name left in bridge/ itself (an older checkout's
# bridge/rust/__pycache__ survives `git pull`) would be found first, as an empty namespace package.
_ROOMS = ("rust", "oxide", "numba", "nvrtc", "tile", "nvvm", "opspec", "torch", "jax")


def _refuse_shadowing_folders() -> None:
    here = Path(__file__).parent
    stale = [here / room for room in _ROOMS
             if (here / room).is_dir() and not (here / room / "__init__.py").exists()]
    if stale:
        raise ImportError(f"ptxbridge: {', '.join(map(str, stale))} left from an older checkout would hide "
                          "ptxbridge's own modules of that name; delete them (they hold no tracked files)")


_refuse_shadowing_folders()


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
