"""ptxbridge.loaders: put a linked image on a device (CUDA driver or the CPU PTX interpreter).

The only code that touches a device.  It imports only :mod:`ptxbridge.abi`: :func:`open_backend`
takes any object with an image's fields (:class:`~ptxbridge.loaders.base.LoadableImage`) and returns
a :class:`~ptxbridge.loaders.base.Backend`, which the call path wraps into a user-facing module.

Modules: ``base`` (the Backend interface every loader implements), ``driver`` (what the CUDA
driver states: version, GPUs, archs), ``cuda`` (the CUDA driver through cuda-python), ``emulator``
(the CPU loader).
"""

from __future__ import annotations

import os
import re
from typing import Any

from ptxbridge.abi.errors import ArgumentError, CudaError

from .base import Backend, LoadableImage

__all__ = ["cubin_runs_on", "open_backend", "parse_device"]

_ARCH = re.compile(r"sm_([0-9]+)([0-9])([af]?)")


def parse_device(device: Any) -> tuple[str, int] | None:
    """``("cpu", 0)`` / ``("cuda", N)`` for a device spec, or None for "pick one".

    ========================== ======================
    spec                        result
    ========================== ======================
    None                        None (auto)
    ``"cpu"``                   ("cpu", 0)
    int N >= 0                  ("cuda", N)
    ``"cuda"`` / ``"cuda:N"``   ("cuda", 0) / ("cuda", N)
    torch.device                same, by type and index
    ========================== ======================
    """
    if device is None:
        return None
    if isinstance(device, int) and not isinstance(device, bool):
        if device >= 0:
            return ("cuda", device)
    elif isinstance(device, str):
        kind, _, index = device.strip().lower().partition(":")
        if kind == "cpu" and not index:
            return ("cpu", 0)
        if kind == "cuda" and (not index or index.isdigit()):
            return ("cuda", int(index or 0))
    elif type(device).__module__.startswith("torch") and hasattr(device, "type"):
        return parse_device(device.type if device.index is None else f"{device.type}:{device.index}")
    raise ArgumentError("device must be an int >= 0, 'cuda', 'cuda:N', 'cpu', a torch.device or None "
                        f"(got {device!r})")


def _auto() -> tuple[str, int]:
    """PTXBRIDGE_DEVICE if set, else the first GPU the driver reports, else the CPU loader."""
    spec = os.environ.get("PTXBRIDGE_DEVICE")
    if spec:
        return parse_device(spec) or ("cpu", 0)
    from .driver import device_count

    return ("cuda", 0) if device_count() > 0 else ("cpu", 0)


def cubin_runs_on(built: str, device: str) -> bool:
    """Whether a cubin built for ``built`` runs on a GPU of arch ``device`` (CUDA Programming Guide,
    "Binary Compatibility").

    ==================  ==========================================
    cubin               runs on
    ==================  ==========================================
    ``sm_XY``           ``sm_XZ`` with Z >= Y (same major)
    ``sm_XYf``          the same (family-portable features)
    ``sm_XYa``          ``sm_XY`` only (arch-specific features)
    ==================  ==========================================
    """
    have, want = _ARCH.fullmatch(device), _ARCH.fullmatch(built)
    if have is None or want is None:
        return True  # not an arch name this rule knows: let the driver decide
    if want[3] == "a":
        return (want[1], want[2]) == (have[1], have[2])
    return want[1] == have[1] and int(want[2]) <= int(have[2])


def _check_gpu(image: LoadableImage, index: int) -> None:
    """A CudaError saying what to do when there is no driver, or when the GPU cannot run the cubin."""
    from . import driver

    problem = driver.driver_problem()
    if problem is not None:
        missing = problem.startswith("not found")
        why = problem.removeprefix("not found (").removesuffix(")")
        found = (f"no NVIDIA driver was found (libcuda could not be loaded: {why})" if missing
                 else f"the NVIDIA driver reports no usable GPU ({problem})")
        code = "" if missing else problem.removeprefix("cuInit failed: ")
        raise CudaError(f'cuda:{index}: {found}; device="cpu" runs the kernels on ptxbridge\'s CPU loader '
                        "(a PTX interpreter) instead", code=code)
    arch, built = driver.device_arch(index), image.arch
    if image.cubin is not None and arch and built and not cubin_runs_on(built, arch):
        raise CudaError(f"cuda:{index} is {arch} but the image's cubin is built for {built}, which it cannot "
                        f"run; rebuild the image for {arch}: ptxbridge.link(..., arch={arch!r}) or "
                        f"`ptxbridge link ... --arch {arch} -o FILE`", code="CUDA_ERROR_NO_BINARY_FOR_GPU")


def open_backend(image: LoadableImage, device: Any = None, **options: Any) -> Backend:
    """``image`` loaded on ``device`` (see :func:`parse_device`; None: ``PTXBRIDGE_DEVICE``, else the
    first GPU, else the CPU loader).  ``options`` go to the CPU loader (``max_steps``: its watchdog,
    ``sanitize``: racecheck / initcheck, see :class:`~ptxbridge.loaders.emulator.EmulatorBackend`); the GPU
    takes none (on a GPU, compute-sanitizer is the sanitizer).

    Before the CUDA loader starts, a missing driver and a GPU that cannot run the image's cubin
    (:func:`cubin_runs_on`) are each a :class:`CudaError` that says what to do.
    """
    kind, index = parse_device(device) or _auto()
    if kind == "cpu":
        from .emulator import EmulatorBackend

        return EmulatorBackend(image, **options)
    if options.get("sanitize") is not None:
        raise ArgumentError(f"sanitize={options['sanitize']!r}: the CPU loader's checks; on {kind}:{index} "
                            "run the program under compute-sanitizer (compute-sanitizer --tool racecheck "
                            'python ...), or load on device="cpu"')
    options.pop("sanitize", None)
    if options:
        raise ArgumentError(f"{', '.join(sorted(options))}: an option of the CPU loader; the GPU loader "
                            f"({kind}:{index}) takes none")
    _check_gpu(image, index)
    from .cuda import CudaBackend

    return CudaBackend(image, index)
