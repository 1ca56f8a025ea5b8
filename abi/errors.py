"""The one exception hierarchy of ptxbridge.

Every error a user can hit derives from :class:`PtxBridgeError`; each
subclass carries the facts a person needs to act (file and offset, kernel and
argument, tool log, driver code).  Messages read "subject: rule (got ...)".
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AbiMismatchError",
    "ArgumentError",
    "OptionError",
    "CompileError",
    "CudaError",
    "EmulatorError",
    "FormatError",
    "KernelRaisedError",
    "KernelTrapError",
    "LinkError",
    "MemoryAccessError",
    "PtxBridgeError",
    "SanitizerError",
    "SignatureSyntaxError",
    "TargetError",
    "ToolchainError",
    "UnsupportedInstructionError",
]


class PtxBridgeError(Exception):
    """Base of every error ptxbridge raises on purpose."""


class FormatError(PtxBridgeError, ValueError):
    """A code object (PTX, ELF, fatbin, .oxart, manifest) is malformed.

    ``source`` names the file (or ``"<bytes>"``) and ``where`` the byte offset
    or line, so the message says exactly where reading stopped.
    """

    def __init__(self, message: str, *, source: str = "<bytes>", where: str | None = None):
        self.source = source
        self.where = where
        self.reason = message
        location = f"{source}:{where}" if where is not None else source
        super().__init__(f"{location}: {message}")


class SignatureSyntaxError(FormatError):
    """Signature text that does not follow the documented syntax."""


class AbiMismatchError(PtxBridgeError):
    """A signature's lowering disagrees with what the code object declares."""


class ArgumentError(PtxBridgeError, TypeError):
    """A launch argument does not fit its parameter; names kernel and argument."""


class OptionError(PtxBridgeError, ValueError):
    """An option given to a frontend, the linker or a loader is not valid (arch, output, flags)."""


class TargetError(ArgumentError, OptionError):
    """A GPU target that is not one (``sm_9``, ``gfx90a``), or one the code at hand cannot serve.

    One class for every frontend, the linker and the loaders; it is both an :class:`ArgumentError`
    and an :class:`OptionError` (so a ``TypeError`` and a ``ValueError``), which each raised before.
    """


class ToolchainError(PtxBridgeError, RuntimeError):
    """A compiler or library is missing; the message says what to install."""


class CompileError(PtxBridgeError, RuntimeError):
    """A frontend compiler rejected its input; ``log`` holds its output."""

    def __init__(self, message: str, *, log: str = ""):
        self.log = log
        super().__init__(f"{message}\n{log}".rstrip())


class LinkError(CompileError):
    """nvJitLink failed, or cross-artifact symbols disagree; ``log`` holds the linker log."""


class KernelRaisedError(PtxBridgeError, RuntimeError):
    """A thread of a numba kernel compiled with ``debug=True`` raised a Python exception, or a
    thread of a Rust kernel panicked.

    ``exception``: that exception (built-in types; None for others), ``tid`` / ``ctaid``:
    the first raising thread, as numba-cuda's launcher reports them; ``panic``: a Rust panic's
    record (message, file, line, column; ``ptxbridge.abi.panic_record.PanicRecord``), else None.
    """

    exception: BaseException | None = None
    panic: Any = None
    tid: tuple[int, int, int] = (0, 0, 0)
    ctaid: tuple[int, int, int] = (0, 0, 0)


class CudaError(PtxBridgeError, RuntimeError):
    """A CUDA driver call failed; ``code`` is the CUresult name."""

    def __init__(self, message: str, *, code: str = ""):
        self.code = code
        super().__init__(message)


class EmulatorError(PtxBridgeError, RuntimeError):
    """The CPU PTX interpreter cannot run a kernel."""


class KernelTrapError(EmulatorError):
    """A thread executed PTX ``trap`` on the CPU loader (cuda-oxide lowers a panic to it); the message
    names the kernel, the thread and, where the PTX has line info, the source line."""


class UnsupportedInstructionError(EmulatorError):
    """An instruction the emulator does not implement; raised at module load."""


class MemoryAccessError(EmulatorError):
    """A load or store outside every buffer the caller passed."""


class SanitizerError(EmulatorError):
    """A hazard the CPU loader's ``sanitize=`` tools found: ``tool`` is ``"racecheck"`` (two threads of
    a block access one shared address, one writing, with no barrier between) or ``"initcheck"`` (a
    read of shared, local or device-heap memory no thread wrote)."""

    def __init__(self, message: str, tool: str):
        super().__init__(message)
        self.tool = tool
