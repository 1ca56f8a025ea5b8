"""What ``ptxbridge inspect`` reports: a code object's kernels, parameter layouts and signatures.

:func:`inspect_path` reads one file into plain, JSON-ready data (the keys are
documented in ``docs/cli.md``); :func:`format_report` prints that data for
people.  The format comes from the bytes (:func:`ptxbridge.abi.sniff.sniff`);
containers (fatbins, host objects, ``.oxart`` bundles, saved ptxbridge images) are read
recursively into ``children``.  ``.rs`` files and crate folders are compiled with
:func:`ptxbridge.rust.frontend.compile`, ``.cu`` files with :func:`ptxbridge.nvrtc.frontend.compile`
(:func:`compile_source`), and the code they produce is inspected.

Signatures come, first match wins, from ``--signatures`` (else a sidecar file,
see :mod:`ptxbridge.artifacts.artifact`), from the frontend that compiled a source or the
saved image that holds the code, or from a cuTile mangled name; each is checked
against the code and the result
("ok" or the :class:`AbiMismatchError` message) is reported beside it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptxbridge.abi.archive import read_archive
from ptxbridge.abi.check import check
from ptxbridge.abi.cubin import Cubin, Kernel, read_cubin
from ptxbridge.abi.cutile_cache import read_cache_entry
from ptxbridge.abi.cutile_names import demangle, is_cutile_symbol
from ptxbridge.abi.errors import ArgumentError, FormatError, PtxBridgeError
from ptxbridge.abi.fatbin import read_fatbin
from ptxbridge.abi.image_file import image_file_sections, is_image_file, read_image_file
from ptxbridge.abi.oxart import OxartBundle, PayloadKind, read_oxart
from ptxbridge.abi.ptx import PtxFunction, PtxModule, read_ptx
from ptxbridge.abi.signature import Signature
from ptxbridge.abi.sniff import sniff
from ptxbridge.artifacts.artifact import Artifact
from ptxbridge.artifacts.signatures import coerce_signatures, sidecar_signatures
from ptxbridge.cli.report import format_report
from ptxbridge.oxide.payloads import bundle_choice, load_rule

__all__ = ["compile_source", "format_report", "inspect_bytes", "inspect_path", "is_source"]

_MAX_FILE = 1 << 31  # as ptxbridge.artifacts.artifact: nothing larger is read into memory
_NO_KERNELS = {
    "ltoir": "NVVM LTO-IR: kernels cannot be listed from LTO-IR without nvJitLink "
             "(link it to a cubin with ptxbridge.link, then inspect the cubin)",
    "nvvm": "NVVM IR (LLVM text or bitcode): kernels cannot be listed without libNVVM/nvJitLink "
            "(ptxbridge.oxide.load reads cuda-oxide's with its Rust source; or link it, then inspect)",
    "object": "a host ELF with no device code (neither .nv_fatbin nor .oxart)",
}


@dataclass(slots=True)
class _Signatures:
    """Where signatures come from, and which given ones matched some code (for the unmatched list)."""

    given: Mapping[str, Signature]
    frontend: Mapping[str, Signature] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)
    origin: str = "frontend"  # what ``frontend`` came from: "frontend" or "image"

    def find(self, name: str) -> tuple[Signature | None, str | None, str | None]:
        """(signature, where it came from, error reading it) for the code symbol ``name``.

        A cutile-rs kernel ``k_entry`` matches a given signature named ``k``.
        """
        for key in (name, name.removesuffix("_entry")):
            if key in self.given:
                self.used.add(key)
                return self.given[key], "given", None
        if name in self.frontend:
            return self.frontend[name], self.origin, None
        if is_cutile_symbol(name):
            try:
                return demangle(name), "cutile-name", None
            except PtxBridgeError as exc:
                return None, "cutile-name", str(exc)
        return None, None, None


def inspect_path(path: str | Path, signatures: str | Path | None = None) -> dict[str, Any]:
    """Inspect one file (or Rust crate folder); ``signatures`` names a signature-text or manifest file.

    Raises
    ------
    ArgumentError
        The file (or the signatures file) cannot be read.
    FormatError
        The file is no code object ptxbridge knows, or is malformed.
    PtxBridgeError
        Compiling a ``.rs`` / ``.cu`` source failed (toolchain missing, compile error).
    """
    path = Path(path)
    sidecar_error = None
    if signatures is not None:
        found = _signatures_file(signatures)
    else:
        try:
            found = sidecar_signatures(path)
        except FormatError as exc:  # e.g. some other tool's .json beside the file: say so, go on
            found, sidecar_error = [], f"sidecar signatures not used: {exc}"
    given = {s.name: s for s in found}
    sigs = _Signatures(given)
    if is_source(path):
        artifact = compile_source(path)
        sigs.frontend = {**artifact.imports, **artifact.device_functions, **artifact.kernels}
        report = {"file": str(path), **inspect_bytes(artifact.code, str(path), sigs)}
        report["compiled_from"] = {"language": "cuda-c++" if path.suffix == ".cu" else "rust",
                                   "compiler": artifact.provenance.compiler,
                                   "version": artifact.provenance.version, "arch": artifact.arch,
                                   "options": list(artifact.provenance.options)}
    else:
        report = {"file": str(path), **inspect_bytes(_read(path), str(path), sigs)}
    report["sidecar_error"] = sidecar_error
    report["unmatched_signatures"] = sorted(set(given) - sigs.used)
    report["ok"] = not report["unmatched_signatures"] and all(
        f["check"] in (None, "ok") for f in iter_functions(report))
    return report


def _read(path: Path) -> bytes:
    try:
        size = path.stat().st_size
        if size > _MAX_FILE:
            raise FormatError(f"file is larger than {_MAX_FILE} bytes (got {size})", source=str(path))
        if path.is_dir():
            raise ArgumentError(f"{path}: a folder, not a code file (a Rust crate folder needs Cargo.toml)")
        return path.read_bytes()
    except OSError as exc:
        raise ArgumentError(f"{path}: cannot read file ({exc.strerror})") from None


def _signatures_file(spec: str | Path) -> list[Signature]:
    """Signatures from a JSON manifest (``.json``) or signature-text file (as artifacts read them)."""
    path = Path(spec)
    if path.suffix == ".json":
        return coerce_signatures(path)
    try:
        return coerce_signatures(path.read_text(encoding="utf-8", errors="replace"))
    except OSError as exc:
        raise ArgumentError(f"{path}: cannot read signatures file ({exc.strerror})") from None


def is_source(path: Path) -> bool:
    """A ``.rs`` / ``.cu`` file or a Rust crate folder: what :func:`compile_source` compiles."""
    return path.suffix in (".rs", ".cu") or (path.is_dir() and (path / "Cargo.toml").is_file())


def compile_source(path: Path, arch: str | None = None) -> Artifact:
    """The PTX artifact a frontend makes from ``path`` for ``arch`` (default: the frontends'), through
    the frontends' disk cache."""
    if path.suffix == ".cu":
        from ptxbridge.nvrtc import frontend as nvrtc

        return nvrtc.compile(path, arch=arch, output="ptx")
    from ptxbridge.rust import frontend as rust

    return rust.compile(path, arch=arch)


def inspect_bytes(data: bytes, source: str, sigs: _Signatures | None = None, *,
                  nested: bool = False) -> dict[str, Any]:
    """The report of one code object (no ``file`` key); containers recurse into ``children``.

    A container inside a container (``nested``) is refused rather than followed: real fatbins
    and .oxart bundles hold PTX and cubins, and crafted input could nest without end.
    """
    sigs = sigs if sigs is not None else _Signatures({})
    if is_image_file(data):
        if nested:
            raise FormatError("a saved image inside a container is not read (expected PTX or a cubin)",
                              source=source)
        return _image(data, source, sigs)
    kind = sniff(data, source)
    if nested and kind in ("fatbin", "oxart", "library"):
        raise FormatError(f"a {kind} inside a container is not read (expected PTX or a cubin)", source=source)
    if kind == "ptx":
        return _ptx(read_ptx(data, source), sigs)
    if kind == "cubin":
        return _cubin(read_cubin(data, source), sigs)
    if kind == "cutile-cache":
        entry = read_cache_entry(data, source)
        return {**_cubin(read_cubin(entry.cubin, source), sigs),
                "note": f"cutile-rs JIT cache entry: compiled for {entry.gpu_name} by tileiras "
                        f"{entry.tileiras_fingerprint!r} at opt level {entry.opt_level}"}
    if kind == "fatbin":
        return _fatbin(data, source, sigs)
    if kind == "library":
        return _library(data, source, sigs)
    if kind == "oxart":
        bundles = read_oxart(data, source)
        return {"format": "oxart", "bundles": [_bundle(b, source, sigs) for b in bundles],
                "load": load_rule(bundles)}
    return {"format": kind, "note": _NO_KERNELS[kind]}


def iter_functions(report: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every kernel / function / import record in a report, children and bundles included."""
    for key in ("kernels", "functions", "imports"):
        yield from report.get(key, ())
    for child in report.get("children", ()):
        yield from iter_functions(child)
    for bundle in report.get("bundles", ()):
        for child in bundle["children"]:
            yield from iter_functions(child)


# --- readers' data -> report dicts ---------------------------------------------------------


def _signature(name: str, code: PtxFunction | Kernel, sigs: _Signatures) -> dict[str, Any]:
    """The signature keys of one function record: text, origin, and the check against ``code``."""
    sig, origin, error = sigs.find(name)
    result = "ok"
    if sig is None:
        result = error
    else:
        try:
            check(sig, code)
        except PtxBridgeError as exc:
            result = str(exc)
    return {"signature": None if sig is None else str(sig), "signature_source": origin, "check": result}


def _xyz(value: tuple[int, ...] | None) -> list[int] | None:
    return None if value is None else list(value)


def _ptx_function(func: PtxFunction, sigs: _Signatures) -> dict[str, Any]:
    params = [{"name": p.name, "type": p.type + (f"[{p.array}]" if p.array is not None else ""),
               "offset": off, "size": p.nbytes, "align": p.param_align, "ptr": p.ptr}
              for p, off in zip(func.params, func.offsets, strict=True)]
    record = {"name": func.name, "kind": func.kind, "linkage": func.linkage or "internal",
              "defined": func.body is not None, "params": params, "param_size": func.size}
    if func.kind == "entry":
        record["launch"] = {"reqntid": _xyz(func.reqntid), "maxntid": _xyz(func.maxntid),
                            "minnctapersm": func.minnctapersm, "cluster": _xyz(func.reqnctapercluster)}
    else:
        record["returns"] = [{"name": p.name, "type": p.type, "size": p.nbytes} for p in func.returns]
    return record | _signature(func.name, func, sigs)


def _ptx(module: PtxModule, sigs: _Signatures) -> dict[str, Any]:
    functions = [_ptx_function(f, sigs) for f in module.functions]
    return {
        "format": "ptx",
        "version": f"{module.version[0]}.{module.version[1]}",
        "target": list(module.target),
        "address_size": module.address_size,
        "kernels": [f for f in functions if f["kind"] == "entry"],
        "functions": [f for f in functions if f["kind"] == "func" and f["linkage"] != "extern"],
        "imports": [f for f in functions if f["kind"] == "func" and f["linkage"] == "extern"],
        "globals": [{"name": g.name, "state_space": g.state_space, "type": g.type, "align": g.align,
                     "array": None if g.array is None else list(g.array), "linkage": g.linkage or "internal"}
                    for g in module.globals],
    }


def _kernel(kernel: Kernel, sigs: _Signatures) -> dict[str, Any]:
    params = [{"ordinal": p.ordinal, "offset": p.offset, "size": p.size} for p in kernel.params]
    end = max((p.offset + p.size for p in kernel.params), default=0)
    return {"name": kernel.name, "params": params,
            "param_size": kernel.param_size if kernel.param_size is not None else end,
            "registers": kernel.registers, "static_shared": kernel.static_shared,
            "reqntid": _xyz(kernel.reqntid), "maxntid": _xyz(kernel.maxntid),
            "cluster": _xyz(kernel.cluster_dims), "language": kernel.language} | _signature(kernel.name,
                                                                                          kernel, sigs)


def _cubin(cubin: Cubin, sigs: _Signatures) -> dict[str, Any]:
    return {"format": "cubin", "arch": cubin.arch, "relocatable": cubin.relocatable,
            "language": cubin.language, "toolkit_version": cubin.toolkit_version,
            "embedded_ptx": cubin.embedded_ptx is not None, "has_host_code": cubin.has_host_code,
            "kernels": [_kernel(k, sigs) for k in cubin.kernels],
            "device_functions": [{"name": f.name, "size": f.size, "registers": f.registers,
                                  "global": f.is_global} for f in cubin.device_functions]}


def _fatbin(data: bytes, source: str, sigs: _Signatures) -> dict[str, Any]:
    children = []
    for i, entry in enumerate(read_fatbin(data, source).entries):
        where = f"{source} image {i} at {entry.offset:#x}"
        image = {"index": i, "kind": entry.kind, "arch": entry.arch, "offset": entry.offset,
                 "compression": entry.compression}
        if entry.decompressed:
            child = inspect_bytes(entry.data if entry.kind != "ptx" else entry.text().encode(), where, sigs,
                                  nested=True)
        elif entry.encoded:
            child = {"format": entry.kind, "note": "compressed LTO-IR that only nvJitLink reads (link it "
                     "with lto=True, then inspect the cubin)"}
        else:
            child = {"format": entry.kind, "note": f"{entry.compression}-compressed and this Python cannot "
                     "decompress it (zstd needs the zstandard package or Python 3.14)"}
        children.append({"image": image, **child})
    return {"format": "fatbin", "host_elf": data[:4] == b"\x7fELF", "children": children}


def _library(data: bytes, source: str, sigs: _Signatures) -> dict[str, Any]:
    """A static library: each member read as a file of its own (its fatbin too); a member that is
    an archive, a saved image or no code object at all is named, not read."""
    children = []
    for member in read_archive(data, source):
        where = f"{source}({member.name}) at {member.offset:#x}"
        try:
            if is_image_file(member.data) or sniff(member.data, where) == "library":
                raise FormatError("an archive or saved image inside an archive is not read", source=where)
            child = inspect_bytes(member.data, where, sigs)
        except FormatError as exc:
            child = {"format": "unread", "note": str(exc)}
        children.append({"member": {"name": member.name, "offset": member.offset}, **child})
    return {"format": "library", "children": children}


def _image(data: bytes, source: str, sigs: _Signatures) -> dict[str, Any]:
    """A saved image: its cubin and PTX modules as children, checked against the saved signatures."""
    found = read_image_file(data, source)
    sigs.frontend, sigs.origin = {**found.device_functions, **found.kernels}, "image"
    children = []
    for i, ((kind, built, code), offset) in enumerate(zip(image_file_sections(found), found.offsets,
                                                          strict=True)):
        child = inspect_bytes(code, f"{source} section {i} at {offset:#x}", sigs, nested=True)
        arch = built if kind == "cubin" else next(iter(child.get("target", ())), None)
        children.append({"image": {"index": i, "kind": "elf" if kind == "cubin" else kind, "arch": arch,
                                   "offset": offset, "compression": None}, **child})
    note = (f"ptxbridge image, format {found.version}, for {', '.join(found.cubins) or 'any arch'} "
            f"({found.created_by or 'creator unknown'}; checksum ok): {len(found.kernels)} kernels, "
            f"{len(found.ptx)} PTX modules for the CPU loader")
    return {"format": "image", "format_version": found.version, "arch": found.arch,
            "created_by": found.created_by, "note": note, "children": children}


def _bundle(bundle: OxartBundle, source: str, sigs: _Signatures) -> dict[str, Any]:
    children = []
    for payload in bundle.payloads:
        if payload.kind in (PayloadKind.PTX, PayloadKind.CUBIN):
            child = inspect_bytes(payload.data, f"{source} bundle {bundle.name} payload {payload.name}", sigs,
                                  nested=True)
        else:
            form = "ltoir" if payload.kind is PayloadKind.LTOIR else "nvvm"
            child = {"format": form, "note": _NO_KERNELS[form]}
        children.append({"payload": {"kind": payload.kind.name.lower(), "name": payload.name}, **child})
    options = bundle.options
    loads = bundle_choice(bundle)
    return {"name": bundle.name, "target": bundle.target, "version": bundle.version,
            "loads": None if loads is None else loads.name.lower(),
            "options": {"no_fma": options.no_fma, "line_tables": options.line_tables, "debug": options.debug},
            "entries": [{"kind": e.kind.name.lower(), "symbol": e.symbol, "metadata": e.metadata}
                        for e in bundle.entries],
            "children": children}
