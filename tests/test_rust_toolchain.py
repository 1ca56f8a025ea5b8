"""The Debian Rust toolchain: its hints when a ``PTXBRIDGE_RUSTC`` compiler will not do, and a cached
sysroot that is rebuilt, not trusted, once a file in it changed."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest
from _rust_fixtures import sysroot, toolchain  # noqa: F401  (session fixtures)

import ptxbridge.rust
from ptxbridge import cache
from ptxbridge.abi.errors import ToolchainError
from ptxbridge.rust import toolchain as rust_toolchain


@pytest.fixture
def fresh_lookup():
    rust_toolchain.find_toolchain.cache_clear()
    yield
    rust_toolchain.find_toolchain.cache_clear()


def _rustup_like(tmp_path: Path, release: str, targets: str = "nvptx64-nvidia-cuda") -> Path:
    """A compiler where rustup puts one, answering ``-vV`` and ``--print target-list`` like rustc."""
    rustc = tmp_path / ".rustup" / "toolchains" / "stable" / "bin" / "rustc"
    rustc.parent.mkdir(parents=True)
    version = f"rustc {release} (abc 2026-01-01)\\nbinary: rustc\\nrelease: {release}\\n"
    rustc.write_text(f"""#!/bin/sh
case "$1" in
  -vV) printf '{version}';;
  --print) printf '{targets}\\nx86_64-unknown-linux-gnu\\n';;
esac
""")
    rustc.chmod(rustc.stat().st_mode | stat.S_IEXEC)
    return rustc


def test_a_rustup_compiler_without_sources_points_at_the_installed_debian_one(
        toolchain, tmp_path, monkeypatch, fresh_lookup):  # noqa: F811
    monkeypatch.setenv("PTXBRIDGE_RUSTC", str(_rustup_like(tmp_path, "1.2.3")))
    with pytest.raises(ToolchainError) as info:
        rust_toolchain.find_toolchain()
    message = str(info.value)
    assert "no library sources for rustc 1.2.3" in message and "(PTXBRIDGE_RUSTC)" in message
    assert (f"Debian's rustc-web {toolchain.release} and rust-web-src are already installed and are used "
            "when PTXBRIDGE_RUSTC is unset: unset it") in message
    assert "apt-get install" not in message


def test_a_rustup_compiler_without_the_target_points_at_the_debian_one(
        toolchain, tmp_path, monkeypatch, fresh_lookup):  # noqa: F811
    monkeypatch.setenv("PTXBRIDGE_RUSTC", str(_rustup_like(tmp_path, "1.2.3", targets="wasm32-wasip1")))
    with pytest.raises(ToolchainError, match=r"has no nvptx64-nvidia-cuda target .*Debian's rustc-web "
                                             r"\S+ and rust-web-src are already installed"):
        rust_toolchain.find_toolchain()


def test_without_debian_packages_the_hint_says_what_to_install(tmp_path, monkeypatch, fresh_lookup):
    monkeypatch.setenv("PTXBRIDGE_RUSTC", str(_rustup_like(tmp_path, "1.2.3")))
    monkeypatch.setattr(rust_toolchain, "_debian_candidates", lambda: [])
    with pytest.raises(ToolchainError, match=r"install them with `apt-get install rustc-web rust-web-src`, "
                                             r"or set PTXBRIDGE_RUST_SRC to the library/ folder of rustc "
                                             r"1\.2\.3"):
        rust_toolchain.find_toolchain()


def test_a_truncated_libcore_is_rebuilt_not_used(toolchain, sysroot, tmp_path, monkeypatch):  # noqa: F811
    """The issue's repro: a truncated ``libcore.rlib`` failed every later compile with "invalid metadata
    files for crate core" and was never rebuilt.  Here the builds copy the real rlibs (instead of
    spending 30 s in rustc each), and a real compile runs against the repaired sysroot."""
    monkeypatch.setenv("PTXBRIDGE_CACHE_DIR", str(tmp_path / "cache"))
    good = sysroot / f"lib/rustlib/{rust_toolchain.TARGET}/lib"
    builds = []

    def build_by_copying(chain, args, *, what, cwd=None):
        crate = args[args.index("--crate-name") + 1]
        out = Path(args[args.index("--out-dir") + 1])
        shutil.copy(good / f"lib{crate}.rlib", out)
        builds.append(crate)

    with monkeypatch.context() as patched:
        patched.setattr(rust_toolchain, "run_rustc", build_by_copying)
        root = rust_toolchain.sysroot(toolchain, progress=False)
        core = root / f"lib/rustlib/{rust_toolchain.TARGET}/lib/libcore.rlib"
        core.write_bytes(core.read_bytes()[:4096])
        with pytest.warns(cache.CacheWarning, match="changed since it was built"):
            assert rust_toolchain.sysroot(toolchain, progress=False) == root
        core.unlink()
        with pytest.warns(cache.CacheWarning, match="changed since it was built"):
            rust_toolchain.sysroot(toolchain, progress=False)
    assert builds == ["core", "compiler_builtins", "ptxbridge_panic", "ptxbridge_panic_location",
                      "ptxbridge_mem"] * 3
    assert core.read_bytes() == (good / "libcore.rlib").read_bytes()
    saxpy = Path(__file__).parent / "rust" / "saxpy.rs"
    assert "saxpy" in ptxbridge.rust.compile(saxpy, progress=False).kernels
