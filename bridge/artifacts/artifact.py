"""Artifacts: code bytes from one frontend, with the signatures of what they define and use.

Plain files become artifacts here too: ``.ptx``, ``.cubin``, ``.fatbin``, ``.ltoir``, ``.o``, ``.a``.
The format comes from the bytes (:func:`ptxbridge.abi.sniff.sniff`), not the name; the signatures
are given, read from a sidecar, checked or recovered by :mod:`.signatures`.  LTO-IR and archives
declare no parameters, so their signatures are taken as given.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ptxbridge.abi.cubin import read_cubin
from ptxbridge.abi.errors import AbiMismatchError, ArgumentError, FormatError
from ptxbridge.abi.image_file import is_image_file
from ptxbridge.abi.ltoir import read_ltoir_target
from ptxbridge.abi.ptx import read_ptx
from ptxbridge.abi.raised import RaisedException
from ptxbridge.abi.signature import Signature
from ptxbridge.abi.sniff import sniff

from .signatures import (
    coerce_signatures,
    cubin_signatures,
    device_by_name,
    fatbin_signatures,
    ptx_signatures,
    sidecar_signatures,
)

__all__ = ["Artifact", "CodeKind", "Provenance", "artifact_from_bytes", "artifact_from_file", "describe_code"]


class CodeKind(StrEnum):
    PTX = "ptx"
    LTOIR = "ltoir"
    NVVM = "nvvm"
    CUBIN = "cubin"
    FATBIN = "fatbin"
    OBJECT = "object"
    LIBRARY = "library"


@dataclass(frozen=True, slots=True)
class Provenance:
    """Which compiler made the code, with which options, for which arch."""

    compiler: str
    version: str = ""
    options: tuple[str, ...] = ()
    arch: str | None = None


def describe_code(kind: str, arch: str | None, size: int, kernels: Mapping[str, Any]) -> str:
    """``ptx for sm_80, 2481 bytes, kernels: saxpy, square``: the middle of the Artifact and Image reprs."""
    names = list(kernels)
    shown = ", ".join(names[:6]) + (f", ... ({len(names)} in all)" if len(names) > 6 else "")
    return f"{kind} for {arch or 'any arch'}, {size} bytes, kernels: {shown or 'none'}"


def _frozen(mapping: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True, slots=True, repr=False)
class Artifact:
    """Code from one frontend.

    ``kernels``: entry name -> signature.  ``device_functions``: the device
    functions it exports (callable from other artifacts).  ``imports``: the
    foreign device functions it calls, which the linker must find elsewhere.
    ``link_options``: nvJitLink options the code must be finalised with (a
    cuda-oxide bundle's ``-fma=0``, ``-lineinfo``, ``-g``).  ``unusable``:
    kernels the code defines but that cannot be typed, each with the reason,
    raised when the kernel is asked for on a loaded module.
    ``libraries``: code the frontend links with this code and that is not the
    user's to supply (numba-cuda's runtime and float16 wrappers, ``link=`` files);
    :func:`ptxbridge.link` adds each library once.  ``raises``: per kernel compiled
    with numba's ``debug=True``, its exception table (:mod:`ptxbridge.launch.raised`).
    ``name_expressions``: C++ name expression -> the kernel symbol NVRTC lowered it to
    (``"block_sum<int, 64, true>"`` -> ``"_Z9block_sumIiLj64ELb1EEvPT_"``), so a loaded module
    finds a template kernel by the exact expression it was compiled with.
    ``register_cap``: the registers its kernels need on the path no thread panics, when code only
    a panic reaches would take more (a Rust crate whose panic handler formats the message):
    :func:`ptxbridge.link` caps an image of such artifacts at that
    (:func:`~ptxbridge.linker.options.with_register_cap`).
    """

    code: bytes
    kind: CodeKind
    arch: str | None = None
    kernels: Mapping[str, Signature] = field(default_factory=dict)
    device_functions: Mapping[str, Signature] = field(default_factory=dict)
    imports: Mapping[str, Signature] = field(default_factory=dict)
    provenance: Provenance = field(default_factory=lambda: Provenance("unknown"))
    name: str = "<artifact>"
    link_options: tuple[str, ...] = ()
    unusable: Mapping[str, str] = field(default_factory=dict)
    libraries: tuple[Artifact, ...] = ()
    raises: Mapping[str, Mapping[int, RaisedException]] = field(default_factory=dict)
    name_expressions: Mapping[str, str] = field(default_factory=dict)
    register_cap: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", CodeKind(self.kind))
        object.__setattr__(self, "link_options", tuple(self.link_options))
        object.__setattr__(self, "libraries", tuple(self.libraries))
        for attr in ("kernels", "device_functions", "imports", "unusable", "raises", "name_expressions"):
            object.__setattr__(self, attr, _frozen(getattr(self, attr)))

    @classmethod
    def from_file(cls, path: str | Path, signatures: object = None) -> Artifact:
        """Read a ``.ptx``, ``.cubin``, ``.fatbin``, ``.ltoir`` (...) file: :func:`artifact_from_file`."""
        return artifact_from_file(path, signatures)

    def __repr__(self) -> str:
        code = describe_code(self.kind.value, self.arch, len(self.code), self.kernels)
        text = f"<ptxbridge.Artifact {self.name!r}: {code}"
        for what, names in (("device functions", self.device_functions), ("imports", self.imports)):
            if names:
                text += f"; {what}: {', '.join(names)}"
        return text + ">"


_MAX_FILE = 1 << 31  # refuse to read anything larger into memory


def artifact_from_file(path: str | Path, signatures: Any = None) -> Artifact:
    """Read one code file; ``signatures`` as in :func:`coerce_signatures`, else a sidecar.

    A ``str`` with a line break is never a file name: PTX text is read as PTX (so ``load([ptx_text])``
    works), anything else is an :class:`ArgumentError` asking for bytes or a path.
    """
    if isinstance(path, str) and ("\n" in path or "\0" in path):
        return _from_text(path, signatures)
    path = Path(path)
    try:
        if path.stat().st_size > _MAX_FILE:
            raise FormatError(f"file is larger than {_MAX_FILE} bytes (got {path.stat().st_size})",
                              source=str(path))
        data = path.read_bytes()
    except OSError as exc:
        raise ArgumentError(f"cannot read code file {str(path)!r}: {exc.strerror}") from exc
    given = coerce_signatures(signatures) if signatures is not None else sidecar_signatures(path)
    return artifact_from_bytes(data, given, source=str(path), name=path.name)


def _from_text(text: str, signatures: Any) -> Artifact:
    given = coerce_signatures(signatures) if signatures is not None else []
    data = text.encode()
    try:
        is_ptx = sniff(data, "<str>") == "ptx"
    except FormatError:
        is_ptx = False
    if not is_ptx:
        raise ArgumentError(f"got a str of {len(text)} characters with line breaks, which is neither a "
                            f"file name nor PTX text (starts {text[:40]!r}); pass PTX as str, other code as "
                            "bytes, or a path")
    return artifact_from_bytes(data, given, source="<PTX text>", name="<PTX text>")


def artifact_from_bytes(data: bytes, signatures: Iterable[Signature] = (), *, source: str = "<bytes>",
                        name: str = "<artifact>") -> Artifact:
    """An artifact from code bytes, with ``signatures`` checked against the code."""
    given = {s.name: s for s in signatures}
    kind = _kind(data, source)
    arch, kernels, exports, imports = None, {}, {}, {}
    if kind is CodeKind.PTX:
        module = read_ptx(data, source)
        arch = module.target[0] if module.target else None
        kernels, exports, imports = ptx_signatures(module, given)
    elif kind is CodeKind.CUBIN:
        cubin = read_cubin(data, source)
        arch, kernels = cubin.arch, cubin_signatures(cubin, given, source)
        exports = device_by_name(given, {f.name for f in cubin.device_functions})
    elif kind in (CodeKind.FATBIN, CodeKind.OBJECT):  # a host object's .nv_fatbin reads the same
        arch, kernels, exports = fatbin_signatures(data, given, source)
    else:  # LTO-IR, NVVM IR, archives: nothing to read parameters from
        arch = _ltoir_arch(data, source) if kind is CodeKind.LTOIR else None
        kernels = {n: s for n, s in given.items() if s.kind == "kernel"}
        exports = {n: s for n, s in given.items() if s.kind == "device"}
    defined = {*kernels, *exports, *imports}
    unused = {n for n in given if n not in defined and f"{n}_entry" not in kernels}  # cutile-rs names
    if unused:
        raise AbiMismatchError(f"{source}: signatures given for {sorted(unused)} but the code defines no "
                               f"such kernel (has {sorted(kernels) or 'none'})")
    return Artifact(code=bytes(data), kind=kind, arch=arch, kernels=kernels, device_functions=exports,
                    imports=imports, provenance=Provenance(f"file {name}", arch=arch), name=name)


def _ltoir_arch(data: bytes, source: str) -> str | None:
    """The target LTO-IR records; None for a header of a layout not measured (nvJitLink reads it)."""
    try:
        return read_ltoir_target(data, source).sm
    except FormatError:
        return None


def _kind(data: bytes, source: str) -> CodeKind:
    if is_image_file(data):
        raise FormatError("a saved ptxbridge image, not one code object: open it with "
                          "ptxbridge.Image.open(path) and load that", source=source)
    found = sniff(data, source)
    if found == "fatbin" and data[:4] == b"\x7fELF":  # a host object carrying device code
        return CodeKind.OBJECT
    if found == "oxart":
        raise FormatError("a cuda-oxide artifact: read it with ptxbridge.oxide.load", source=source)
    if found == "cutile-cache":
        raise FormatError("a cutile-rs JIT cache entry: read it with ptxbridge.tile.load", source=source)
    return CodeKind(found)
