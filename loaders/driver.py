"""Facts the CUDA driver states: its version, the GPUs and their archs.

The one place outside the CUDA loader that asks the driver; the linker, the frontends' default arch
and ``ptxbridge doctor`` read these.  Every function answers "nothing" (None, 0, []) on a machine
without libcuda or without a usable GPU, and never raises for that.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ptxbridge.abi.targets import Target

__all__ = ["Gpu", "device_arch", "device_count", "driver_problem", "driver_version", "gpus"]


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU as the driver names it."""

    ordinal: int
    name: str
    arch: str


@functools.cache
def driver_problem() -> str | None:
    """Why there is no usable driver (``"not found (...)"``, ``"cuInit failed: ..."``), or None."""
    try:
        from cuda.bindings import driver

        (err,) = driver.cuInit(0)
    except Exception as exc:  # libcuda.so absent: cuda.pathfinder raises its own error types
        return f"not found ({type(exc).__name__})"
    return None if err == driver.CUresult.CUDA_SUCCESS else f"cuInit failed: {err.name}"


@functools.cache
def driver_version() -> tuple[int, int] | None:
    """The CUDA version of the driver, ``(13, 0)``; None without a usable driver."""
    if driver_problem() is not None:
        return None
    from cuda.bindings import driver

    err, version = driver.cuDriverGetVersion()
    return (version // 1000, version % 1000 // 10) if err == driver.CUresult.CUDA_SUCCESS else None


def device_count() -> int:
    """How many GPUs the driver reports; 0 without a usable driver."""
    if driver_problem() is not None:
        return 0
    from cuda.bindings import driver

    err, count = driver.cuDeviceGetCount()
    return int(count) if err == driver.CUresult.CUDA_SUCCESS else 0


@functools.cache
def device_arch(ordinal: int = 0) -> str | None:
    """``"sm_90"`` for GPU ``ordinal``; None without a driver or without that GPU."""
    if driver_problem() is not None:
        return None
    from cuda.bindings import driver

    attrs = driver.CUdevice_attribute
    err, device = driver.cuDeviceGet(ordinal)
    if err != driver.CUresult.CUDA_SUCCESS:
        return None
    _, major = driver.cuDeviceGetAttribute(attrs.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device)
    _, minor = driver.cuDeviceGetAttribute(attrs.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device)
    return Target(major, minor).sm


def gpus() -> list[Gpu]:
    """Every GPU the driver reports, with its name and arch."""
    from cuda.bindings import driver

    found = []
    for ordinal in range(device_count()):
        _, device = driver.cuDeviceGet(ordinal)
        _, raw_name = driver.cuDeviceGetName(64, device)
        found.append(Gpu(ordinal, raw_name.split(b"\0", 1)[0].decode(), device_arch(ordinal) or "?"))
    return found
