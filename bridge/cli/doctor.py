"""``ptxbridge doctor``: what this machine can compile, link and run.

Every probe is independent and never raises: a missing piece is reported
with the command that installs it.
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Check", "run_checks", "find_nvidia_tool", "toolkit_libnvvm"]


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


def toolkit_libnvvm(roots: Sequence[str | os.PathLike[str]]) -> Path | None:
    """``nvvm/lib64/libnvvm.so*`` of the first CUDA toolkit in ``roots`` that has one."""
    for root in roots:
        found = sorted(Path(root, "nvvm", "lib64").glob("libnvvm.so*"))
        if found:
            return found[0]
    return None


def _toolkit_roots() -> list[str]:
    """Where a CUDA toolkit may be: ``$CUDA_HOME``, ``$CUDA_PATH``, then ``/usr/local/cuda``."""
    return [*(v for k in ("CUDA_HOME", "CUDA_PATH") if (v := os.environ.get(k))), "/usr/local/cuda"]


def _libnvvm() -> Check:
    """libNVVM as the nvvm frontend loads it (``cuda.bindings.nvvm``, found by ``cuda.pathfinder`` in
    the pip wheels or under ``$CUDA_HOME``), so a toolkit's ``/usr/local/cuda/nvvm`` counts."""
    try:
        from cuda.bindings import nvvm

        major, minor = nvvm.version()
        from cuda.pathfinder import load_nvidia_dynamic_lib

        where = load_nvidia_dynamic_lib("nvvm").abs_path
        return Check("libNVVM", True, f"{major}.{minor} ({where})")
    except Exception as exc:
        toolkit = toolkit_libnvvm(_toolkit_roots())
        if toolkit is not None:
            root = toolkit.parent.parent.parent
            return Check("libNVVM", False, f"{toolkit} is there but cuda-bindings does not find it ({exc})",
                         f"export CUDA_HOME={root}")
        return Check("libNVVM", False, f"not found ({exc})", "pip install nvidia-nvvm (or ptxbridge[numba])")


_EXTENSIONS = (  # (module, what runs without it)
    ("ptxbridge.launch._fastlaunch", "kernel calls take the Python launch path"),
    ("ptxbridge.loaders.emulator._native", "the CPU loader checks and gathers memory with NumPy (slower)"),
    ("ptxbridge.loaders.emulator._threads", "the CPU loader runs a launch's blocks on one thread"),
    ("ptxbridge.jax._xla_ffi", "ptxbridge.jax cannot register its XLA handler (built only with jaxlib)"),
)


def _extensions() -> list[Check]:
    """Which optional C extensions this install built (found next to their package, not imported:
    importing ``ptxbridge.jax`` would import JAX)."""
    checks = []
    for module, without in _EXTENSIONS:
        package, _, name = module.rpartition(".")
        spec = importlib.util.find_spec(package)
        folders = list(spec.submodule_search_locations or ()) if spec is not None else []
        built = next((path for folder in folders for suffix in importlib.machinery.EXTENSION_SUFFIXES
                      if (path := Path(folder, name + suffix)).is_file()), None)
        checks.append(Check(f"C extension {name}", built is not None,
                            str(built) if built else f"not built: {without}",
                            "" if built else "reinstall with a C compiler and the Python headers "
                                             "(pip install --no-build-isolation -e .)"))
    return checks


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
    _driver, _nvjitlink, _nvrtc, _libnvvm, _numba, _tileiras, _rust, _extensions,
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
