"""Session fixtures for the Rust frontends: the Debian toolchain and its sysroot, built once.

The sysroot lives in the ptxbridge disk cache, so a second test session (and
CI on the same machine) reuses it; the first build takes ~15-30 s.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ptxbridge import rust_toolchain
from ptxbridge.abi.errors import ToolchainError

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
