"""ptxbridge.rust.frontend: Rust kernels through rustc's own ``nvptx64-nvidia-cuda`` target.

``compile`` turns a ``.rs`` file, a dependency-free crate folder or source text
into a PTX (or, ``output="ltoir"``, LTO-IR: :mod:`ptxbridge.rust.ltoir`)
:class:`Artifact` whose kernels (``extern "ptx-kernel"``), exported
device functions (``#[no_mangle] extern "C" fn``) and imports
(``extern "C" { fn ..; }``) carry signatures read from the source and checked
against the PTX.  ``from_ptx`` does the same for PTX built elsewhere.
See ``docs/rust.md``.
"""

from __future__ import annotations

import re
import tempfile
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ptxbridge import cache
from ptxbridge.abi.check import check
from ptxbridge.abi.errors import ArgumentError, FormatError, LinkError
from ptxbridge.abi.ptx import PtxModule, read_ptx
from ptxbridge.abi.signature import Convention, Signature
from ptxbridge.abi.targets import parse_target
from ptxbridge.artifacts.artifact import Artifact, CodeKind, Provenance
from ptxbridge.artifacts.signatures import layout_only
from ptxbridge.linker.nvjitlink import kernel_registers
from ptxbridge.linker.target import default_arch
from ptxbridge.rust import ltoir, panic_runtime
from ptxbridge.rust import toolchain as rust_toolchain
from ptxbridge.rust.signatures import SourceSignatures, read_signatures
from ptxbridge.rust.source import parse_source, read_crate
from ptxbridge.rust.syntax import RustSource

__all__ = ["compile", "from_ptx", "localize_panic_handler", "rustc_options"]

_OPT_LEVELS = ("0", "1", "2", "3", "s", "z")
_OUTPUTS = ("ptx", "ltoir")
_EMITS = {"asm": ("rust-ptx", "ptx"), "llvm-ir": ("rust-llvm-ir", "ll")}  # cache namespace, file suffix


@dataclass(frozen=True, slots=True)
class _Crate:
    """What one compile reads: the root file's name, every file's bytes, and the parsed items."""

    name: str
    root: str
    files: tuple[tuple[str, bytes], ...]
    units: list[RustSource]
    edition: str | None


# rustc's nvptx64 target links crates as LLVM bitcode (its objects are bitcode; the linker flavor
# is llvm-bitcode-linker, which Debian does not ship).  `-C lto=fat` has rustc itself link the crate
# with the bitcode of `core` (and ptxbridge_panic) from the sysroot into one module, internalize all
# but the exported symbols and drop what is unused: the PTX (or IR) it then writes calls nothing of
# core from outside.  rustc does LTO only when it links, so `--emit` also names a `link` output, and
# the "linker" it runs on the merged object is `true`: the PTX is the asm output, not the link's.
# compiler_builtins is never in LTO (rustc links it as an rlib), so a use of it (a u128 division)
# stays an import and is reported as one.  Jump tables are turned off: the CPU loader has no
# `brx.idx`, which core::fmt's integer printing (the panic message) would otherwise need.
_LTO = ("-C", "lto=fat", "-C", "linker=true", "-C", "llvm-args=-min-jump-table-entries=2147483647")


def rustc_options(arch: str, *, opt_level: int | str = 3, edition: str = "2021",
                  extra: Sequence[str] = (), emit: str = "asm") -> tuple[str, ...]:
    """The rustc arguments for one compile to PTX (``emit="asm"``) or LLVM IR (``"llvm-ir"``), a pure
    function tested against expected lists (``--emit`` gets its output paths in :func:`_run_rustc`)."""
    arch = parse_target(arch, who="rust", like="'sm_80' or 'sm_90a'").sm
    if str(opt_level) not in _OPT_LEVELS:
        raise ArgumentError(f"rust: opt_level must be one of {', '.join(_OPT_LEVELS)} (got {opt_level!r})")
    if emit not in _EMITS:
        raise ArgumentError(f"rust: emit must be one of {', '.join(_EMITS)} (got {emit!r})")
    return ("--target", rust_toolchain.TARGET, "--crate-type", "cdylib", "--edition", edition,
            "-C", f"target-cpu={arch}", "-C", f"opt-level={opt_level}", "-C", "panic=abort", *_LTO,
            "--emit", emit, *extra)


def _crate(path_or_source: str | Path) -> _Crate:
    """Read a crate folder (``Cargo.toml`` + ``src/lib.rs``), a ``.rs`` file, or source text."""
    # a str is a path when it is one line naming a .rs file or an existing folder, else source text
    one_line = isinstance(path_or_source, str) and "\n" not in path_or_source
    looks_like_path = isinstance(path_or_source, Path) or (one_line and (
        path_or_source.strip().endswith(".rs") or Path(path_or_source).is_dir()))
    path = Path(path_or_source) if looks_like_path else None
    if path is None:
        text = str(path_or_source)
        return _Crate("kernel", "kernel.rs", (("kernel.rs", text.encode()),),
                      [parse_source(text, "<rust source>")], None)
    edition = None
    if path.is_dir():
        manifest = path / "Cargo.toml"
        if not manifest.is_file() or not (path / "src/lib.rs").is_file():
            raise FormatError("a Rust crate folder needs Cargo.toml and src/lib.rs", source=str(path))
        try:
            toml = tomllib.loads(manifest.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise FormatError(f"Cargo.toml is not valid TOML ({exc})", source=str(manifest)) from None
        package = toml.get("package", {})
        if toml.get("dependencies"):
            raise FormatError("ptxbridge compiles dependency-free crates only (crates.io is not used; "
                              "got [dependencies])", source=str(manifest))
        edition = str(package.get("edition", "2021"))
        name = str(package.get("name", path.name))
        path = (path / "src/lib.rs").resolve()
    elif not path.is_file():
        raise FormatError("no such Rust source file", source=str(path))
    else:
        name = path.stem
        path = path.resolve()
    units, paths = read_crate(path)
    base = path.parent
    files = tuple((str(p.relative_to(base)) if p.is_relative_to(base) else str(p), p.read_bytes())
                  for p in sorted(paths))
    return _Crate(re.sub(r"\W", "_", name), str(path), files, units, edition)


def _run_rustc(crate: _Crate, options: tuple[str, ...], toolchain: rust_toolchain.RustToolchain,
               progress: bool, panic_crate: str = panic_runtime.CRATE) -> bytes:
    """rustc -> PTX or LLVM IR text (what ``options``' ``--emit`` names), through the disk cache (a hit
    runs no rustc).  A crate with no ``#[panic_handler]`` is linked with ptxbridge's ``panic_crate``."""
    at = options.index("--emit") + 1
    namespace, suffix = _EMITS[options[at]]
    ours = not panic_runtime.handled_by_crate(crate.units)
    blobs = [part for rel, data in crate.files for part in (rel, data)]
    # the library sources pick the sysroot the PTX is built against, so they are part of the key
    entry_key = cache.key(f"{namespace}-v2", toolchain.version, str(toolchain.library), crate.name,
                          crate.root, *options, panic_runtime.MEM_SOURCE,
                          panic_runtime.SOURCES[panic_crate] if ours else "own panic handler", *blobs)

    def produce() -> bytes:
        root = rust_toolchain.sysroot(toolchain, progress=progress)
        with tempfile.TemporaryDirectory(prefix="ptxbridge-rustc-") as work:
            out = Path(work) / f"{crate.name}.{suffix}"
            emit = (*options[:at], f"{options[at]}={out},link={Path(work) / 'linked'}", *options[at + 1:])
            crates = (panic_runtime.MEM_CRATE, *((panic_crate,) if ours else ()))
            runtime = ["-Z", "unstable-options"]
            for linked in crates:  # `force`: linked although the kernel never names the crate
                runtime += ["--extern", f"force:{linked}={rust_toolchain.runtime_rlib(root, linked)}"]
            source = crate.root  # a panic reports this path (a relative one for source text)
            if not Path(source).is_file():  # source text: write it out for rustc
                (Path(work) / crate.root).write_bytes(crate.files[0][1])
            rust_toolchain.run_rustc(toolchain, ["--crate-name", crate.name, "--sysroot", str(root),
                                                 *emit, *runtime, source],
                                     what=f"compiling {crate.root}", cwd=Path(work))
            return out.read_bytes()

    return cache.cached(namespace, entry_key, produce)


# rustc defines the crate's #[panic_handler] as a visible function under one fixed name
# (``_RNv..._7___rustc17rust_begin_unwind``) in every crate, so two Rust artifacts in one
# link would define it twice.  Each crate's handler is only called from its own code, so
# giving it internal linkage (no linkage directive, PTX ISA 11.6) keeps every crate's own
# handler and lets any number of Rust artifacts link together.  ``compile``'s fat LTO makes it
# internal already; ``from_ptx`` takes PTX built without it.
_PANIC_HANDLER = re.compile(rb"^\.visible\s+(\.func\s+[\w$]*___rustc17rust_begin_unwind\b)", re.MULTILINE)


def localize_panic_handler(ptx: bytes) -> bytes:
    """rustc PTX with its panic handler made module-local (see ``_PANIC_HANDLER``)."""
    return _PANIC_HANDLER.sub(rb"\1", ptx)


def _require_stable_kernel_names(units: list[RustSource]) -> None:
    """A FormatError for the first kernel rustc would mangle: it would be missing from the PTX."""
    for unit in units:
        for fn in unit.functions:
            if fn.abi == "ptx-kernel" and fn.symbol is None and not fn.foreign:
                raise FormatError(f"kernel {fn.name!r} has no #[unsafe(no_mangle)] (#[no_mangle] before "
                                  "edition 2024): rustc mangles its name and leaves it out of the PTX, so it "
                                  "could not be launched; add the attribute (or "
                                  "#[unsafe(export_name = \"...\")])",
                                  source=unit.path, where=str(fn.line))


def checked_signatures(found: SourceSignatures, module: PtxModule,
                       ) -> tuple[dict[str, Signature], dict[str, Signature], dict[str, Signature]]:
    """Kernels, device functions and imports, each checked against the PTX.

    Imports the PTX never declares (rustc drops unused foreign functions) are
    left out; everything else must be there and agree, else
    :class:`AbiMismatchError`.  Every other function the PTX declares but does
    not define (a ``compiler_builtins`` routine, a symbol of a crate that was
    not linked) is an import too, typed from its PTX declaration, so the link
    names it (``LinkError``) instead of nvJitLink failing on it.
    """
    for signature in (*found.kernels.values(), *found.device_functions.values()):
        check(signature, module)
    declared = {f.name for f in module.functions if f.kind == "func"}
    imports = {name: sig for name, sig in found.imports.items() if name in declared}
    for signature in imports.values():
        check(signature, module)
    for function in module.functions:
        if function.kind == "func" and function.linkage == "extern" and function.name not in imports:
            imports[function.name] = layout_only(function)
    return dict(found.kernels), dict(found.device_functions), imports


def compile(path_or_source: str | Path, *, arch: str | None = None, output: str = "ptx",
            options: Sequence[str] = (), opt_level: int | str = 3, progress: bool = True,
            edition: str | None = None, panic_messages: str = "full") -> Artifact:
    """Compile Rust to a typed PTX or LTO-IR artifact.

    Parameters
    ----------
    path_or_source
        A ``.rs`` file, a dependency-free crate folder (``Cargo.toml`` and
        ``src/lib.rs``), or Rust source text.  The crate is ``#![no_std]``
        with ``#![feature(abi_ptx)]`` and a ``#[panic_handler]``.
    arch
        ``sm_XY`` for ``-C target-cpu`` (default: the GPU's, else ``sm_90``).
    options, opt_level, edition
        Extra rustc arguments, ``-C opt-level`` and ``--edition`` (default: the
        crate's, else 2021), all part of the cache key.
    progress
        Print progress lines to stderr while the one-time sysroot builds.
    panic_messages
        For a crate without its own ``#[panic_handler]``: ``"full"`` has the panicking thread format
        the message with ``core::fmt``; ``"location"`` keeps only where and which thread (the
        message reads ``(message not kept: panic_messages="location")``), so no formatting code
        is linked and a kernel that can panic keeps the registers of one that cannot (see
        docs/rust.md).
    output
        ``"ptx"``, or ``"ltoir"``: LTO-IR from rustc's LLVM IR through
        libNVVM, which ``nvJitLink -lto`` inlines into callers in other
        languages (below sm_100 rewritten in libNVVM's LLVM 7 dialect; see
        :mod:`ptxbridge.rust.ltoir`).  Signatures are checked against the
        crate's PTX either way.

    Raises
    ------
    ToolchainError
        Debian's ``rustc-web`` / ``rust-web-src`` are missing.
    CompileError
        rustc rejected the source (its log is attached); for ``output="ltoir"``,
        libNVVM rejected the IR or the LLVM 7 rewrite cannot state a construct.
    FormatError
        The source uses a parameter type ptxbridge cannot type.
    AbiMismatchError
        A signature read from the source disagrees with the PTX.
    FormatError
        An ``extern "ptx-kernel"`` function has no ``#[unsafe(no_mangle)]`` (rustc would mangle its
        name and drop it from the PTX, so it could never be launched).
    ArgumentError
        ``output`` is neither ``"ptx"`` nor ``"ltoir"``.
    """
    if output not in _OUTPUTS:
        raise ArgumentError(f"rust.compile: output must be one of {_OUTPUTS} (got {output!r})")
    panic_crate = panic_runtime.panic_crate(panic_messages)
    arch = arch or default_arch()
    crate = _crate(path_or_source)
    _require_stable_kernel_names(crate.units)
    chosen = {"opt_level": opt_level, "edition": edition or crate.edition or "2021",
              "extra": tuple(options)}
    rustc_args = rustc_options(arch, **chosen)
    toolchain = rust_toolchain.find_toolchain()
    code = _run_rustc(crate, rustc_args, toolchain, progress, panic_crate)
    module = read_ptx(code, crate.root)
    found = read_signatures(crate.units, Convention.C)
    kernels, device, imports = checked_signatures(found, module)
    kind, link_options = CodeKind.PTX, ()
    if output == "ltoir":
        rustc_args = rustc_options(arch, **chosen, emit="llvm-ir")
        ir = _run_rustc(crate, rustc_args, toolchain, progress, panic_crate)
        code = ltoir.compile_ltoir(ir, crate.name, arch, toolchain.llvm_major)
        kind, link_options = CodeKind.LTOIR, ltoir.LINK_OPTIONS
    register_cap = None
    if panic_crate == panic_runtime.CRATE and not panic_runtime.handled_by_crate(crate.units):
        register_cap = _register_cap(crate, rustc_args, toolchain, progress, arch, kind)
    return Artifact(code=code, kind=kind, arch=arch, kernels=kernels, device_functions=device,
                    imports=imports, name=crate.name, unusable=found.unusable, link_options=link_options,
                    provenance=Provenance(str(toolchain.rustc), toolchain.version_line, rustc_args, arch),
                    register_cap=register_cap)


def _register_cap(crate: _Crate, rustc_args: tuple[str, ...], toolchain: rust_toolchain.RustToolchain,
                  progress: bool, arch: str, kind: CodeKind) -> int | None:
    """The registers the crate's kernels need when no thread panics: built with the handler that keeps no
    message (no formatter linked), compiled alone, the most any kernel takes, rounded up to ptxas's unit
    of 8 (LTO-IR: compiled with LTO, as the link will).  Linking at that cap keeps the message while its
    formatting code spills (docs/rust.md).  None for a crate that calls functions of other artifacts: it
    cannot be compiled alone."""
    lean = _run_rustc(crate, rustc_args, toolchain, progress, panic_runtime.LOCATION_CRATE)
    if kind == CodeKind.LTOIR:
        lean = ltoir.compile_ltoir(lean, crate.name, arch, toolchain.llvm_major)
    try:
        options = ltoir.LINK_OPTIONS if kind == CodeKind.LTOIR else ()
        most = max(kernel_registers(lean, kind, arch, crate.root, options).values(), default=0)
    except LinkError:
        return None
    return max(-(-most // 8) * 8, 8)


def from_ptx(ptx_path: str | Path, source_path: str | Path) -> Artifact:
    """An artifact from PTX built elsewhere by rustc, typed from its Rust source.

    The arch is the PTX ``.target``; every signature is checked against the PTX.
    """
    ptx_path = Path(ptx_path)
    try:
        code = localize_panic_handler(ptx_path.read_bytes())
    except OSError as exc:
        raise ArgumentError(f"rust.from_ptx: cannot read PTX file {str(ptx_path)!r}: {exc.strerror}") from exc
    module = read_ptx(code, str(ptx_path))
    crate = _crate(Path(source_path))
    found = read_signatures(crate.units, Convention.C)
    kernels, device, imports = checked_signatures(found, module)
    arch = module.target[0] if module.target else None
    return Artifact(code=code, kind=CodeKind.PTX, arch=arch, kernels=kernels, device_functions=device,
                    imports=imports, name=ptx_path.stem, unusable=found.unusable,
                    provenance=Provenance("rustc (prebuilt PTX)", f"PTX ISA {module.version[0]}."
                                          f"{module.version[1]}", (), arch))
