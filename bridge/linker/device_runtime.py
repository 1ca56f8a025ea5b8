"""The CUDA device runtime (``libcudadevrt.a``), linked in when PTX calls it.

Device-side kernel launches (dynamic parallelism) compile to calls of
runtime functions (``__cudaCDP2LaunchDeviceV2``, ``__cudaCDP2GetParameterBufferV2``,
``cudaGetParameterBufferV2``...) that only ``libcudadevrt.a`` defines; nvJitLink
does not add it by itself ("Undefined reference to '__cudaCDP2LaunchDeviceV2'").
The library comes from the ``nvidia-cuda-runtime`` wheel, found with cuda.pathfinder.
"""

from __future__ import annotations

from collections.abc import Sequence

from ptxbridge.abi.errors import ToolchainError
from ptxbridge.abi.ptx import PtxModule
from ptxbridge.artifacts.artifact import Artifact, CodeKind, artifact_from_file

__all__ = ["device_runtime", "is_device_runtime", "runtime_calls"]

_RUNTIME_PREFIXES = ("cuda", "__cuda")


def runtime_calls(modules: Sequence[PtxModule]) -> list[str]:
    """Device-runtime functions the PTX ``modules`` declare and none of them defines.

    Decision: a ``.extern .func`` whose name starts with ``cuda`` / ``__cuda`` is a
    CUDA runtime entry point (user code cannot define names in that reserved space).
    """
    defined = {f.name for m in modules for f in m.functions if f.body is not None}
    return sorted({f.name for m in modules for f in m.functions
                   if f.body is None and f.linkage == "extern" and f.name.startswith(_RUNTIME_PREFIXES)
                   and f.name not in defined})


def is_device_runtime(artifact: Artifact) -> bool:
    """Whether ``artifact`` is ``libcudadevrt.a`` (added here, or by numba-cuda for grid sync).  The CPU
    loader implements the calls it serves itself, so none of its embedded code is for the CPU loader."""
    return artifact.kind is CodeKind.LIBRARY and "cudadevrt" in artifact.name


def device_runtime() -> Artifact:
    """``libcudadevrt.a`` from the CUDA runtime wheel, as a library artifact."""
    try:
        from cuda.pathfinder import find_static_lib

        path = find_static_lib("cudadevrt")
    except Exception as exc:  # pathfinder missing, or no wheel/toolkit provides the library
        raise ToolchainError("the PTX launches kernels from the device, which needs libcudadevrt.a: "
                             f"pip install nvidia-cuda-runtime cuda-pathfinder ({exc})") from exc
    artifact = artifact_from_file(path)
    if artifact.kind is not CodeKind.LIBRARY:
        raise ToolchainError(f"{path} is not a static library (got {artifact.kind.value})")
    return artifact
