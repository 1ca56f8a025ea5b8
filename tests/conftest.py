"""Shared pytest setup: the ``gpu`` marker skips cleanly on machines without a CUDA GPU."""

from __future__ import annotations

import functools

import pytest


@functools.cache
def gpu_count() -> int:
    """Number of CUDA devices the driver reports; 0 without a driver or GPU."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return 0
    try:
        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return 0
        err, count = driver.cuDeviceGetCount()
    except Exception:  # no libcuda.so at all
        return 0
    return count if err == driver.CUresult.CUDA_SUCCESS else 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if gpu_count():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (no CUDA driver or device on this machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
