"""Target facts in one place: arch names, the one default arch, and which PTX ISA a driver reads.

Every frontend and the linker default to :func:`default_arch`: the first GPU's arch when the driver
reports one, else ``sm_90`` (:data:`DEFAULT_ARCH`).  Driver facts come from
:mod:`ptxbridge.loaders.driver`, the one module that asks the driver.

Which PTX ISA a driver reads is :func:`ptxbridge.abi.targets.max_ptx_isa` (re-exported here).
"""

from __future__ import annotations

from collections.abc import Iterable

from ptxbridge.abi.targets import Target, known_target, max_ptx_isa, parse_target
from ptxbridge.loaders import driver

__all__ = ["DEFAULT_ARCH", "choose_arch", "default_arch", "device_arch", "driver_version",
           "max_ptx_isa", "needs_cubin", "normalize_arch", "portable_target", "ptx_isa_supported"]

DEFAULT_ARCH = "sm_90"


def needs_cubin(ptx_version: tuple[int, int], cuda_version: tuple[int, int]) -> bool:
    """True when the driver cannot JIT PTX of ``ptx_version``: link it to a cubin instead."""
    return ptx_version > max_ptx_isa(cuda_version)


def normalize_arch(arch: str | tuple[int, int]) -> str:
    """``"sm_90"``, ``"sm_90a"``, ``"compute_90"``, ``"90"`` or ``(9, 0)`` -> ``"sm_90"`` / ``"sm_90a"``
    (:func:`ptxbridge.abi.targets.parse_target`)."""
    return parse_target(arch, like="'sm_90', 'sm_90a' or (9, 0)").sm


def device_arch(ordinal: int = 0) -> str | None:
    """The arch of GPU ``ordinal`` as the driver reports it, or None without a driver or GPU."""
    return driver.device_arch(ordinal)


def driver_version() -> tuple[int, int] | None:
    """The driver's CUDA version (major, minor), or None without a driver."""
    return driver.driver_version()


def default_arch() -> str:
    """The arch of the first GPU when the driver reports one, else :data:`DEFAULT_ARCH`."""
    return device_arch(0) or DEFAULT_ARCH


def choose_arch(requested: str | None, device: str | None, input_archs: Iterable[str | None]) -> str:
    """The arch to link for.

    ==================================  =====================================
    situation                           arch
    ==================================  =====================================
    ``requested`` given                 ``requested``
    else a GPU is present               the GPU's arch (``device``)
    else                                ``sm_90``, or the newest arch an input
                                        is built for when that is newer (code
                                        for sm_100 never links for sm_90)
    an input is built for ``<arch>a``   ``<arch>a`` (e.g. a tileiras cubin is
    (same SM, arch-specific features)   ``sm_90a``; the plain arch cannot
                                        link it, the ``a`` arch runs all)
    ==================================  =====================================
    """
    inputs = [t for t in map(known_target, input_archs) if t is not None]
    given = requested or device
    arch = parse_target(given, like="'sm_90', 'sm_90a' or (9, 0)") if given else max(
        [parse_target(DEFAULT_ARCH), *inputs], key=lambda t: t.number)
    specific = Target(arch.major, arch.minor, "a")
    return (specific if not arch.suffix and specific in inputs else arch).sm


def portable_target(targets: Iterable[str | Target]) -> Target:
    """Of the targets of a multi-target image, the one its PTX is built for: the oldest without an
    ``a`` / ``f`` suffix (PTX for those JIT-compiles for one GPU or one family only), else the
    oldest.  Inputs compiled for it link for every listed target."""
    listed = sorted(parse_target(t, like="'sm_90', 'sm_90a' or (9, 0)") for t in targets)
    return next((t for t in listed if not t.suffix), listed[0])


def ptx_isa_supported(cuda_version: int | tuple[int, int]) -> tuple[int, int]:
    """The newest PTX ISA a driver, or an nvJitLink, of ``cuda_version`` reads.

    ``cuda_version`` is ``(13, 0)`` or ``cuDriverGetVersion``'s ``13000``.
    The table is :func:`ptxbridge.abi.targets.max_ptx_isa` (PTX ISA release notes).
    """
    if isinstance(cuda_version, int):
        cuda_version = (cuda_version // 1000, cuda_version % 1000 // 10)
    return max_ptx_isa(cuda_version)
