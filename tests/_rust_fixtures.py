"""Session fixtures for the Rust frontends: the Debian toolchain and its sysroot, built once.

The sysroot lives in the ptxbridge disk cache, so a second test session (and
CI on the same machine) reuses it; the first build takes ~15-30 s.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ptxbridge.abi.errors import ToolchainError
from ptxbridge.rust import toolchain as rust_toolchain

RUST_DIR = Path(__file__).parent / "rust"


@pytest.fixture(scope="session")
def toolchain() -> rust_toolchain.RustToolchain:
    """Debian's rustc with library sources; the tests skip where it is not installed."""
    try:
        return rust_toolchain.find_toolchain()
    except ToolchainError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def sysroot(toolchain: rust_toolchain.RustToolchain) -> Path:
    """The nvptx64 sysroot (core + compiler_builtins), built once and shared through the cache."""
    return rust_toolchain.sysroot(toolchain, progress=True)


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True)


def ptxas(tmp: Path, ptx_text: bytes, arch: str) -> bytes:
    """A cubin assembled by ptxas (from the nvidia-cuda-nvcc wheel, else PATH)."""
    from cuda.bindings import nvrtc

    wheel = Path(nvrtc.__file__).parents[2] / "nvidia" / "cu13" / "bin" / "ptxas"
    tool = str(wheel) if wheel.exists() else shutil.which("ptxas")
    if tool is None:
        pytest.skip("ptxas not found (pip install nvidia-cuda-nvcc)")
    src, out = tmp / f"k_{arch}.ptx", tmp / f"k_{arch}.cubin"
    src.write_bytes(ptx_text)
    _run(tool, f"-arch={arch}", str(src), "-o", str(out))
    return out.read_bytes()


def nvrtc_ltoir(source: str, arch: str) -> bytes:
    """LTO-IR of CUDA C++ ``source`` from NVRTC (``-dlto``); no driver needed."""
    from cuda.core import Program, ProgramOptions

    options = ProgramOptions(arch=arch, link_time_optimization=True, relocatable_device_code=True)
    return Program(source, "c++", options).compile("ltoir").code


def host_object(tmp: Path, blob: bytes) -> bytes:
    """A real x86-64 host object whose ``.oxart`` section gcc emits from a C array."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not found")
    c, obj = tmp / "host.c", tmp / "host.o"
    c.write_text(f'__attribute__((section(".oxart"), used)) static const unsigned char ox[{len(blob)}] = '
                 f"{{{', '.join(map(str, blob))}}};\nint host_side(void) {{ return 1; }}\n")
    _run("gcc", "-c", str(c), "-o", str(obj))
    return obj.read_bytes()
