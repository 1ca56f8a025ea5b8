"""ptxbridge.loaders: put a linked image on a device (CUDA driver or the CPU PTX interpreter).

The only code that touches a device.  It imports only :mod:`ptxbridge.abi`: :func:`open_backend`
takes any object with an image's fields (:class:`~ptxbridge.loaders.base.LoadableImage`) and returns
a :class:`~ptxbridge.loaders.base.Backend`, which the call path wraps into a user-facing module.

Modules: ``base`` (the Backend interface every loader implements), ``driver`` (what the CUDA
driver states: version, GPUs, archs), ``choice`` (which code of an image a GPU loads), ``cuda``
(the CUDA driver through cuda-python), ``emulator`` (the CPU loader).
"""

from __future__ import annotations

import os
from typing import Any

from ptxbridge.abi.errors import ArgumentError, CudaError
from ptxbridge.abi.ptx import read_ptx
from ptxbridge.abi.targets import known_target

from .base import Backend, LoadableImage
from .choice import CodeChoice, PtxFacts, choose_code

__all__ = ["cubin_runs_on", "open_backend", "parse_device", "ptx_facts"]

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

    The rule is :meth:`ptxbridge.abi.targets.Target.cubin_runs_on`:

    ==================  ==========================================
    cubin               runs on
    ==================  ==========================================
    ``sm_XY``           ``sm_XZ`` with Z >= Y (same major)
    ``sm_XYf``          the same (family-portable features)
    ``sm_XYa``          ``sm_XY`` only (arch-specific features)
    ==================  ==========================================
    """
    have, want = known_target(device), known_target(built)
    if have is None or want is None:
        return True  # not an arch name this rule knows: let the driver decide
    return want.cubin_runs_on(have)


def _check_gpu(image: LoadableImage, index: int) -> CodeChoice:
    """The code GPU ``index`` loads (:func:`~ptxbridge.loaders.choice.choose_code`), or a CudaError
    saying what to do when there is no driver or nothing of the image runs on the GPU."""
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
    cubins = image.cubins or ({image.arch or "": image.cubin} if image.cubin is not None else {})
    return choose_code(driver.device_arch(index), index, cubins, lambda: ptx_facts(image),
                       driver.driver_version())


def ptx_facts(image: LoadableImage) -> PtxFacts | None:
    """The newest ``.target`` and ``.version`` of the image's PTX modules (None: it has none)."""
    if not image.ptx:
        return None
    modules = [read_ptx(code, "<image PTX>") for code in image.ptx]
    targets = [t for t in (known_target(m.target[0]) for m in modules if m.target) if t is not None]
    return PtxFacts(max(targets).sm if targets else None, max(m.version for m in modules),
                    tuple(image.cpu_unavailable))


def open_backend(image: LoadableImage, device: Any = None, **options: Any) -> Backend:
    """``image`` loaded on ``device`` (see :func:`parse_device`; None: ``PTXBRIDGE_DEVICE``, else the
    first GPU, else the CPU loader).  ``options`` go to the CPU loader (``max_steps``: its watchdog,
    ``sanitize``: racecheck / initcheck, see :class:`~ptxbridge.loaders.emulator.EmulatorBackend`); the GPU
    takes none (on a GPU, compute-sanitizer is the sanitizer).

    On a GPU the image's cubin for it loads, else one it runs (:func:`cubin_runs_on`), else its
    PTX JIT-compiled by the driver when the driver reads its ISA
    (:func:`~ptxbridge.loaders.choice.choose_code`); a missing driver, and an image with nothing the
    GPU runs, are each a :class:`CudaError` that says what to do before the CUDA loader starts.
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
    choice = _check_gpu(image, index)
    from .cuda import CudaBackend

    return CudaBackend(image, index, choice)
