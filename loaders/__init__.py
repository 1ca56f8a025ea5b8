"""ptxbridge.loaders: put a linked image on a device (CUDA driver or the CPU PTX interpreter).

The only code that touches a device.  It imports only :mod:`ptxbridge.abi`: :func:`open_backend`
takes any object with an image's fields (:class:`~ptxbridge.loaders.base.LoadableImage`) and returns
a :class:`~ptxbridge.loaders.base.Backend`, which the call path wraps into a user-facing module.
"""

from __future__ import annotations

import os
from typing import Any

from ptxbridge.abi.errors import ArgumentError

from .base import Backend, LoadableImage

__all__ = ["open_backend", "parse_device"]


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


def open_backend(image: LoadableImage, device: Any = None, **options: Any) -> Backend:
    """``image`` loaded on ``device`` (see :func:`parse_device`; None: ``PTXBRIDGE_DEVICE``, else the
    first GPU, else the CPU loader).  ``options`` go to the CPU loader (``max_steps``: its watchdog,
    see :class:`~ptxbridge.loaders.emulator.EmulatorBackend`); the GPU takes none."""
    kind, index = parse_device(device) or _auto()
    if kind == "cpu":
        from .emulator import EmulatorBackend

        return EmulatorBackend(image, **options)
    if options:
        raise ArgumentError(f"{', '.join(sorted(options))}: an option of the CPU loader; the GPU loader "
                            f"({kind}:{index}) takes none")
    from .cuda import CudaBackend

    return CudaBackend(image, index)
