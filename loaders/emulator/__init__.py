"""ptxbridge.loaders.emulator: run PTX on the CPU (NumPy-vectorized SIMT interpreter)."""

from .backend import EmulatorBackend

__all__ = ["EmulatorBackend"]
