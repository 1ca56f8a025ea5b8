"""The loader interface: everything the call path asks of a device, GPU or CPU.

A loader turns a linked image (:class:`LoadableImage`) into a :class:`Backend`; the call path
(:mod:`ptxbridge.launch`) checks arguments, packs the parameter buffer with the ABI layer's packer
and hands it to :meth:`Backend.launch`.  Every member the call path uses is declared here: the
abstract ones each loader must write, the others with the default a loader without that ability
gets (no prepared launch, no C plan, host memory as device memory, synchronous launches).
"""

from __future__ import annotations

import ctypes
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from ptxbridge.abi.errors import PtxBridgeError
from ptxbridge.abi.layout import Packer
from ptxbridge.abi.signature import Signature

__all__ = ["Backend", "Buffer", "LaunchFn", "LoadableImage", "host_upload"]

Dim3 = tuple[int, int, int]
LaunchFn = Callable[[tuple, Dim3, Dim3, int, int], None]  # (flat values, grid, block, shared_mem, stream)


class LoadableImage(Protocol):
    """What a loader reads of an image (``ptxbridge.Image`` has these fields)."""

    cubin: bytes | None  # machine code for the GPU loader; None when linked for the CPU only
    arch: str | None  # what the cubin was built for (``sm_90``)
    cubins: Mapping[str, bytes]  # every target's cubin (``cubin`` is the first), for the GPU loader
    kernels: Mapping[str, Signature]
    ptx: tuple[bytes, ...]  # every PTX module, for the CPU loader (and the driver's JIT)
    cpu_unavailable: Mapping[str, str]  # kernels the PTX lacks, each with why


class Buffer(NamedTuple):
    """A memory range an argument brought: the CPU loader bounds-checks against these, and names
    the argument (``name``, its elements' ``dtype`` and ``itemsize``) when an access overruns it
    (a named tuple: one is made per tensor per launch)."""

    ptr: int
    nbytes: int
    writable: bool = True
    owner: Any = None  # keeps the producer alive while the kernel may touch it
    name: str = ""  # the kernel parameter it was passed as ('' for scratch memory)
    itemsize: int = 1
    dtype: str = ""


def host_upload(data: bytes, stream: int) -> Buffer:
    """``data`` in fresh host memory: the scratch of a loader that runs on the host."""
    host = ctypes.create_string_buffer(data, len(data))
    return Buffer(ctypes.addressof(host), len(data), False, host)


class Backend(ABC):
    """A loaded image on one device.

    Class facts: ``device_type`` (the DLPack device type arguments must live on,
    :mod:`ptxbridge.abi.devices`), ``needs_buffers`` (the call path collects every argument's
    memory range for :meth:`launch`, for loaders that bounds-check) and ``cooperative_kernels``
    (kernels that must be launched cooperatively, as the image records).
    """

    device_type: int
    device_id: int
    needs_buffers: bool = True
    cooperative_kernels: frozenset[str] = frozenset()

    # --- kernels --------------------------------------------------------------------------------

    @abstractmethod
    def function(self, name: str) -> Any:
        """The handle of kernel ``name``; raises KeyError when the image lacks it."""

    @abstractmethod
    def launch(self, function: Any, grid: Dim3, block: Dim3, shared_mem: int, stream: Any,
               params: bytes, buffers: Sequence[Buffer]) -> None:
        """Launch with the packed parameter buffer ``params`` (exactly the layout's size)."""

    def prepare(self, function: Any, packer: Packer, name: str, cooperative: bool = False) -> LaunchFn | None:
        """A launch function that packs and launches with everything built once, or None when this
        loader has none (the call path then packs and calls :meth:`launch`)."""
        return None

    def native_facts(self, function: Any, name: str) -> dict[str, Any] | None:
        """What the C launch plan needs to call the driver itself, or None: no C plan here."""
        return None

    def launch_error(self, code: int, name: str, grid: Dim3, block: Dim3, shared_mem: int) -> PtxBridgeError:
        """The error for a launch the device refused with ``code`` (from the C plan)."""
        return PtxBridgeError(f"{name}: the launch (grid={grid}, block={block}, shared_mem={shared_mem}) "
                              f"failed with code {code}")

    # --- memory ---------------------------------------------------------------------------------

    def upload(self, data: bytes, stream: int) -> Buffer:
        """Scratch memory holding ``data`` that the kernel can read, alive while the launch needs it.

        Default: host memory, which is device memory for a loader that runs on the host.
        """
        return host_upload(data, stream)

    def pointer_device(self, ptr: int) -> int:
        """The device ordinal a raw pointer belongs to, or -1 when this loader cannot tell."""
        return -1

    def to_device(self, host: Any) -> Any:
        """A copy of a contiguous NumPy array where kernels can use it (synchronous)."""
        return host.copy()

    def to_host(self, array: Any) -> Any:
        """A NumPy copy of an array made by :meth:`to_device`, after the device's work."""
        import numpy

        return numpy.array(array, copy=True)

    def synchronize(self) -> None:
        """Wait for the device (launches of a synchronous loader have already finished)."""
        return None

    def capturing(self, stream: int) -> bool:
        """Whether work queued on ``stream`` is being recorded into a graph instead of run, so nothing
        may wait for it (never, for a loader without graphs)."""
        return False

    # --- module globals -------------------------------------------------------------------------

    @abstractmethod
    def global_address(self, name: str) -> tuple[int, int]:
        """(address, size in bytes) of module variable ``name``; KeyError when absent."""

    @abstractmethod
    def read_global(self, name: str) -> bytes:
        """The bytes of module variable ``name`` (synchronous)."""

    @abstractmethod
    def write_global(self, name: str, data: bytes) -> None:
        """Overwrite module variable ``name`` with exactly its size in bytes (synchronous)."""

    # --- lifetime -------------------------------------------------------------------------------

    @abstractmethod
    def close(self) -> None:
        """Release the device resources; idempotent."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
