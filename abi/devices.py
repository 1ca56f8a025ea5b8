"""DLPack device types (``DLDeviceType`` in dlpack.h): where an array's memory lives.

The one place these codes are written down; the loaders say which one their kernels take and the
call path compares every argument's ``__dlpack_device__`` with it.
"""

from __future__ import annotations

__all__ = ["DLPACK_CPU", "DLPACK_CUDA", "DLPACK_CUDA_HOST", "DLPACK_CUDA_MANAGED"]

DLPACK_CPU = 1  # kDLCPU
DLPACK_CUDA = 2  # kDLCUDA
DLPACK_CUDA_HOST = 3  # kDLCUDAHost: pinned host memory, addressable from the device
DLPACK_CUDA_MANAGED = 13  # kDLCUDAManaged
