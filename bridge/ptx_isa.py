"""Which PTX ISA a CUDA driver can JIT, and whether a PTX file needs linking to cubin.

PTX ISA releases by CUDA version (PTX ISA manual, "Release Notes"):

=========  =====  =========  =====
CUDA       ISA    CUDA       ISA
=========  =====  =========  =====
11.0-11.8  7.0-7.8 (minor = minor)
12.0-12.5  8.0-8.5 (minor = minor)
12.6       8.5    12.8       8.7
12.9       8.8    13.x       9.x
=========  =====  =========  =====

A driver newer than the table is assumed to accept at least the newest ISA listed.
"""

from __future__ import annotations

__all__ = ["max_ptx_isa", "needs_cubin"]

_SPECIAL = {(12, 6): (8, 5), (12, 7): (8, 6), (12, 8): (8, 7), (12, 9): (8, 8)}


def max_ptx_isa(cuda_version: tuple[int, int]) -> tuple[int, int]:
    """The newest PTX ISA the driver of ``cuda_version`` (major, minor) can JIT."""
    major, minor = cuda_version
    if cuda_version in _SPECIAL:
        return _SPECIAL[cuda_version]
    if major == 11 or (major == 12 and minor <= 5) or major == 13:
        return major - 4, minor
    if major > 13:
        return 9, 9
    raise ValueError(f"CUDA {major}.{minor} is older than ptxbridge supports (needs 11.0 or newer)")


def needs_cubin(ptx_version: tuple[int, int], cuda_version: tuple[int, int]) -> bool:
    """True when the driver cannot JIT PTX of ``ptx_version``: link it to a cubin instead."""
    return ptx_version > max_ptx_isa(cuda_version)
