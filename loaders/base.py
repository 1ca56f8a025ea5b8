"""The loader interface: what the call path needs from a device, GPU or CPU.

A loader turns an :class:`~ptxbridge.Image` into a :class:`Backend`; the call
path (:mod:`ptxbridge.launch.module`) checks arguments, packs the parameter buffer
with the ABI layer's packer and hands it to :meth:`Backend.launch`.  Neither
side knows which loader it talks to.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["DLPACK_CPU", "DLPACK_CUDA", "Backend", "Buffer"]

DLPACK_CPU = 1  # DLDeviceType kDLCPU
DLPACK_CUDA = 2  # DLDeviceType kDLCUDA


@dataclass(frozen=True, slots=True)
class Buffer:
    """A memory range an argument brought: the CPU loader bounds-checks against these."""

    ptr: int
    nbytes: int
    writable: bool = True
    owner: Any = None  # keeps the producer alive while the kernel may touch it


class Backend(Protocol):
    """A loaded image on one device."""

    device_type: int  # DLPack device type the arguments must live on
    device_id: int

    def function(self, name: str) -> Any:
        """The handle of kernel ``name``; raises KeyError when the image lacks it."""

    def launch(self, function: Any, grid: tuple[int, int, int], block: tuple[int, int, int],
               shared_mem: int, stream: Any, params: bytes, buffers: Sequence[Buffer]) -> None:
        """Launch with the packed parameter buffer ``params`` (exactly the layout's size)."""

    def close(self) -> None:
        """Release the device resources; idempotent."""
