"""Artifacts: code bytes from one frontend, with the signatures of what they define and use."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType

from ptxbridge.abi.signature import Signature

__all__ = ["Artifact", "CodeKind", "Provenance"]


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


def _frozen(mapping: Mapping[str, Signature] | None) -> Mapping[str, Signature]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True, slots=True)
class Artifact:
    """Code from one frontend.

    ``kernels``: entry name -> signature.  ``device_functions``: the device
    functions it exports (callable from other artifacts).  ``imports``: the
    foreign device functions it calls, which the linker must find elsewhere.
    """

    code: bytes
    kind: CodeKind
    arch: str | None = None
    kernels: Mapping[str, Signature] = field(default_factory=dict)
    device_functions: Mapping[str, Signature] = field(default_factory=dict)
    imports: Mapping[str, Signature] = field(default_factory=dict)
    provenance: Provenance = field(default_factory=lambda: Provenance("unknown"))
    name: str = "<artifact>"

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", CodeKind(self.kind))
        for attr in ("kernels", "device_functions", "imports"):
            object.__setattr__(self, attr, _frozen(getattr(self, attr)))

    @classmethod
    def from_file(cls, path: str | Path, signatures: object = None) -> Artifact:
        """Read a ``.ptx``, ``.cubin``, ``.fatbin``, ``.ltoir`` (...) file; see :mod:`ptxbridge.files`."""
        from ptxbridge.files import artifact_from_file

        return artifact_from_file(path, signatures)
