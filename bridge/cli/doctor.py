"""``ptxbridge doctor``: what this machine can compile, link and run.

Every probe is independent and never raises: a missing piece is reported
with the command that installs it.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Check", "run_checks", "find_nvidia_tool"]


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    detail: str
    hint: str = ""


def find_nvidia_tool(name: str) -> str | None:
    """A CUDA command-line tool from the pip wheels (``nvidia/cu13/bin``) or PATH."""
    try:
        import nvidia.cu13 as cu13

        for root in cu13.__path__:
            found = shutil.which(name, path=str(Path(root) / "bin"))
            if found:
                return found
    except ImportError:
        pass
    return shutil.which(name)


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _driver() -> list[Check]:
    from ptxbridge.linker.target import max_ptx_isa
    from ptxbridge.loaders import driver

    problem = driver.driver_problem()
    version = driver.driver_version()
    if problem is not None or version is None:
        hint = "no usable GPU" if problem and problem.startswith("cuInit") else "no GPU driver"
        return [Check("CUDA driver", False, problem or "cuDriverGetVersion failed",
                      f"{hint}: kernels run on the CPU loader (image.load('cpu'))")]
    isa = max_ptx_isa(version)
    checks = [Check("CUDA driver", True, f"CUDA {version[0]}.{version[1]}; JIT accepts PTX ISA up to "
                                         f"{isa[0]}.{isa[1]}")]
    checks += [Check(f"GPU {gpu.ordinal}", True, f"{gpu.name}, {gpu.arch}") for gpu in driver.gpus()]
    return checks


def _nvjitlink() -> Check:
    try:
        from cuda.bindings import nvjitlink

        major, minor = nvjitlink.version()
    except Exception as exc:
        return Check("nvJitLink", False, f"unavailable ({exc})", "pip install nvidia-nvjitlink cuda-bindings")
    return Check("nvJitLink", True, f"{major}.{minor}")


def _nvrtc() -> Check:
    try:
        from cuda.bindings import nvrtc

        _, major, minor = nvrtc.nvrtcVersion()
    except Exception as exc:
        return Check("NVRTC", False, f"unavailable ({exc})", "pip install nvidia-cuda-nvrtc cuda-bindings")
    return Check("NVRTC", True, f"{major}.{minor}")


def _libnvvm() -> Check:
    version = _package_version("nvidia-nvvm")
    if version is None:
        return Check("libNVVM", False, "not installed", "pip install nvidia-nvvm (or ptxbridge[numba])")
    return Check("libNVVM", True, version)


def _numba() -> Check:
    version = _package_version("numba-cuda")
    if version is None:
        return Check("numba-cuda", False, "not installed", "pip install 'ptxbridge[numba]'")
    return Check("numba-cuda", True, version)


def _tileiras() -> Check:
    tool = find_nvidia_tool("tileiras")
    if tool is None:
        return Check("tileiras", False, "not found", "pip install 'ptxbridge[tile]' (nvidia-cuda-tileiras)")
    try:
        out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("tileiras", False, f"{tool} does not run ({exc})", "reinstall nvidia-cuda-tileiras")
    release = next((line.strip() for line in out.splitlines() if "release" in line), out.strip()[:60])
    cutile = _package_version("cuda-tile")
    return Check("tileiras", True, f"{release} ({tool}); cuda-tile {cutile or 'not installed'}")


def _rust() -> Check:
    from ptxbridge.abi.errors import ToolchainError
    from ptxbridge.rust.toolchain import find_toolchain

    try:
        toolchain = find_toolchain()
    except ToolchainError as exc:
        return Check("Rust (nvptx64)", False, str(exc), "apt-get install rustc-web rust-web-src")
    return Check("Rust (nvptx64)", True, f"{toolchain.version_line} ({toolchain.rustc})")


PROBES: tuple[Callable[[], Check | list[Check]], ...] = (
    _driver, _nvjitlink, _nvrtc, _libnvvm, _numba, _tileiras, _rust,
)


def run_checks() -> list[Check]:
    """Run every probe; a probe that crashes is reported, not raised."""
    results: list[Check] = []
    for probe in PROBES:
        try:
            found = probe()
        except Exception as exc:
            found = Check(probe.__name__.strip("_"), False, f"probe failed: {type(exc).__name__}: {exc}")
        results.extend(found if isinstance(found, list) else [found])
    return results
