"""The Debian Rust toolchain for ``nvptx64-nvidia-cuda``, and its private sysroot.

Debian's ``rustc-web`` package has a rustc whose LLVM includes the NVPTX
backend, and ``rust-web-src`` the library sources, but no prebuilt ``core``
for the target.  :func:`sysroot` builds ``core`` and ``compiler_builtins``
once per (rustc, sources) into the ptxbridge cache (docs/conventions.md, "c"), with
ptxbridge's runtime crates beside them (:mod:`ptxbridge.rust.panic_runtime`).  All three
keep their LLVM bitcode (``-C embed-bitcode=yes``; the target's objects are bitcode anyway),
which a kernel crate's ``-C lto=fat`` links into one module with the kernels.  A rustup
rustc (``~/.cargo/bin``, ``~/.rustup``) is never picked up implicitly: its
targets depend on what that user installed.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ptxbridge import cache
from ptxbridge.abi.errors import CompileError, ToolchainError
from ptxbridge.rust import panic_runtime

__all__ = ["TARGET", "RustToolchain", "find_toolchain", "sysroot", "runtime_rlib", "run_rustc"]

TARGET = "nvptx64-nvidia-cuda"
_INSTALL = "apt-get install rustc-web rust-web-src"
_RUSTUP_MARKERS = ("/.cargo/", "/.rustup/")
_SYSROOT_LAYOUT = f"lib/rustlib/{TARGET}/lib"
_TIMEOUT_S = 900


@dataclass(frozen=True, slots=True)
class RustToolchain:
    """A rustc with its library sources: ``version`` is the ``rustc -vV`` text (for cache keys)."""

    rustc: Path
    version: str
    release: str
    library: Path

    @property
    def version_line(self) -> str:
        return self.version.splitlines()[0]

    @property
    def llvm_major(self) -> int:
        """The major version of rustc's LLVM (``LLVM version: 22.1.8``): the IR it writes; 0 if unstated."""
        found = re.search(r"^LLVM version: (\d+)", self.version, re.MULTILINE)
        return int(found.group(1)) if found else 0


def _env() -> dict[str, str]:
    """rustc's environment: ``RUSTC_BOOTSTRAP=1`` unlocks ``abi_ptx`` on a stable compiler."""
    return {**os.environ, "RUSTC_BOOTSTRAP": "1"}


def run_rustc(toolchain: RustToolchain, args: list[str], *, what: str,
              cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run rustc; a failure raises :class:`CompileError` carrying rustc's output."""
    try:
        done = subprocess.run([str(toolchain.rustc), *args], capture_output=True, text=True, env=_env(),
                              cwd=cwd, timeout=_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise CompileError(f"{what}: rustc ran longer than {_TIMEOUT_S} s",
                           log=str(exc.stderr or "")) from None
    if done.returncode != 0:
        raise CompileError(f"{what}: rustc failed (exit status {done.returncode})",
                           log=(done.stdout + done.stderr).strip())
    return done


def _debian_candidates() -> list[Path]:
    """rustc binaries the ``rustc-web`` package installed (``dpkg -L``), then the usual paths."""
    found: list[Path] = []
    if shutil.which("dpkg"):
        listing = subprocess.run(["dpkg", "-L", "rustc-web"], capture_output=True, text=True, check=False)
        found += [Path(p) for p in listing.stdout.split()
                  if re.search(r"/bin/rustc(-web)?(-[0-9.]+)?$", p)]
    found += [Path("/usr/bin/rustc-web"), Path("/usr/bin/rustc")]
    return [p for p in dict.fromkeys(found) if p.is_file() and os.access(p, os.X_OK)]


def _probe(rustc: Path) -> tuple[str, str] | None:
    """``(rustc -vV output, release)``, or None when it does not run."""
    try:
        done = subprocess.run([str(rustc), "-vV"], capture_output=True, text=True, timeout=60, check=False)
    except OSError:
        return None
    release = re.search(r"^release: (\S+)$", done.stdout, re.MULTILINE)
    return (done.stdout.strip(), release.group(1)) if done.returncode == 0 and release else None


def _library_for(release: str, *, explicit_src: bool = True) -> Path | None:
    """The ``library/`` source tree of ``release`` (``rust-web-src`` puts it in /usr/src/rustc-X.Y.Z);
    ``$PTXBRIDGE_RUST_SRC`` first when ``explicit_src``."""
    explicit = os.environ.get("PTXBRIDGE_RUST_SRC") if explicit_src else None
    candidates = [Path(explicit)] if explicit else [Path(f"/usr/src/rustc-{release}/library")]
    for library in candidates:
        if (library / "core/src/lib.rs").is_file() and _builtins_root(library).is_file():
            return library
    return None


def _builtins_root(library: Path) -> Path:
    return library / "compiler-builtins/compiler-builtins/src/lib.rs"


def _usable_debian() -> str | None:
    """The release of an installed Debian ``rustc-web`` with the target and ``rust-web-src``, or None."""
    for rustc in _debian_candidates():
        probed = None if any(m in str(rustc.resolve()) for m in _RUSTUP_MARKERS) else _probe(rustc)
        if probed is not None and TARGET in _targets(rustc) and _library_for(probed[1], explicit_src=False):
            return probed[1]
    return None


def _targets(rustc: Path) -> list[str]:
    return subprocess.run([str(rustc), "--print", "target-list"], capture_output=True, text=True,
                          check=False).stdout.split()


def _remedy(explicit: bool, otherwise: str) -> str:
    """What to do: for a ``$PTXBRIDGE_RUSTC`` compiler, say so when Debian's (used without it) would work."""
    debian = _usable_debian() if explicit else None
    if debian is None:
        return otherwise
    return (f"Debian's rustc-web {debian} and rust-web-src are already installed and are used when "
            f"PTXBRIDGE_RUSTC is unset: unset it")


@functools.cache
def find_toolchain() -> RustToolchain:
    """The rustc to use: ``$PTXBRIDGE_RUSTC`` if set, else Debian's ``rustc-web``.

    Raises
    ------
    ToolchainError
        No usable rustc, a rustup rustc, no NVPTX backend, or no library sources.
    """
    explicit = os.environ.get("PTXBRIDGE_RUSTC")
    if explicit:
        candidates = [Path(explicit)]
    else:
        candidates = [p for p in _debian_candidates()
                      if not any(m in str(p.resolve()) for m in _RUSTUP_MARKERS)]
    if not candidates:
        raise ToolchainError(f"Rust for {TARGET}: no Debian rustc found (looked at `dpkg -L rustc-web`, "
                             f"/usr/bin/rustc-web, /usr/bin/rustc; a rustup rustc is not used); "
                             f"install it with `{_INSTALL}` or set PTXBRIDGE_RUSTC")
    for rustc in candidates:
        probed = _probe(rustc)
        if probed is None:
            continue
        version, release = probed
        named = f"{rustc} (PTXBRIDGE_RUSTC)" if explicit else str(rustc)
        if TARGET not in _targets(rustc):
            raise ToolchainError(f"Rust for {TARGET}: {named} has no {TARGET} target (got "
                                 f"{version.splitlines()[0]}); "
                                 + _remedy(bool(explicit), f"install Debian's with `{_INSTALL}`"))
        library = _library_for(release)
        if library is None:
            looked = os.environ.get("PTXBRIDGE_RUST_SRC") or f"/usr/src/rustc-{release}/library"
            remedy = _remedy(bool(explicit), f"install them with `{_INSTALL}`")
            raise ToolchainError(f"Rust for {TARGET}: no library sources for rustc {release}, {named} "
                                 f"(looked for core and compiler-builtins in {looked}); {remedy}, or set "
                                 f"PTXBRIDGE_RUST_SRC to the library/ folder of rustc {release}")
        return RustToolchain(rustc, version, release, library)
    raise ToolchainError(f"Rust for {TARGET}: none of {', '.join(map(str, candidates))} runs "
                         f"(`rustc -vV` failed); reinstall with `{_INSTALL}`")


def _progress(message: str, enabled: bool) -> None:
    if enabled:
        print(f"ptxbridge: {message}", file=sys.stderr, flush=True)


_BUILD_FLAGS = ("--edition", "2024", "-C", "opt-level=3", "-C", "panic=abort", "-C", "embed-bitcode=yes")


def sysroot(toolchain: RustToolchain, *, progress: bool = True) -> Path:
    """The private sysroot with ``core``, ``compiler_builtins`` and ``ptxbridge_panic`` for the target,
    built once.

    The build takes ~15-30 s and is cached under the key (rustc ``-vV``,
    library path, flags); several processes wait on one builder.  The cache
    keeps every file's SHA-256, so a truncated or deleted ``libcore.rlib`` is
    rebuilt (it used to fail every later compile).
    """
    entry_key = cache.key("rust-sysroot-v3", toolchain.version, str(toolchain.library), TARGET, *_BUILD_FLAGS,
                          *panic_runtime.SOURCES.values(), panic_runtime.MEM_SOURCE)

    def build(root: Path) -> None:
        out = root / _SYSROOT_LAYOUT
        out.mkdir(parents=True)
        started = time.monotonic()
        _progress(f"building Rust core for {TARGET} (once, ~30 s)...", progress)
        common = ["--target", TARGET, "--crate-type", "rlib", *_BUILD_FLAGS, "--out-dir", str(out)]
        with tempfile.TemporaryDirectory(prefix="ptxbridge-rust-") as work:
            run_rustc(toolchain, ["--crate-name", "core", *common, "-A", "warnings",
                                  str(toolchain.library / "core/src/lib.rs")],
                      what=f"building core for {TARGET}", cwd=Path(work))
            _progress(f"core built in {time.monotonic() - started:.0f} s; building compiler_builtins...",
                      progress)
            run_rustc(toolchain, ["--crate-name", "compiler_builtins", *common, "--sysroot", str(root),
                                  "--cfg", 'feature="compiler-builtins"', "--cfg", 'feature="mem"',
                                  "-A", "warnings", str(_builtins_root(toolchain.library))],
                      what=f"building compiler_builtins for {TARGET}", cwd=Path(work))
            for crate, source in (*panic_runtime.SOURCES.items(), (panic_runtime.MEM_CRATE,
                                                                   panic_runtime.MEM_SOURCE)):
                runtime = Path(work) / f"{crate}.rs"
                runtime.write_text(source, encoding="utf-8")
                run_rustc(toolchain, ["--crate-name", crate, *common, "--sysroot", str(root), str(runtime)],
                          what=f"building ptxbridge's {crate} for {TARGET}", cwd=Path(work))
        _progress(f"Rust sysroot ready in {time.monotonic() - started:.0f} s", progress)

    return cache.cached_dir("rust-sysroot", entry_key, build)


def runtime_rlib(root: Path, crate: str) -> Path:
    """The rlib of ptxbridge's runtime ``crate`` (``ptxbridge_panic``, ``ptxbridge_mem``) in the sysroot
    ``root`` (:func:`sysroot`)."""
    return root / _SYSROOT_LAYOUT / f"lib{crate}.rlib"
