"""The code the CPU loader can take out of a container input: a fatbin, a host object or a library.

nvcc embeds PTX next to the machine code (``nvcc -dc -arch=sm_90``: sm_90
SASS and compute_90 PTX; ``-gencode`` for several virtual archs: one PTX
each, every one defining the same kernels).  Each piece (the fatbin, the
object, each host-object member of a library) gives one PTX image: the one
for the highest arch not above the link's, else the lowest, so no kernel is
defined twice.  A piece with LTO-IR and no PTX (``code=lto_90``) is handed
back whole: nvJitLink finalises it to PTX (``-lto -ptx`` reads fatbinary's
compressed LTO-IR encoding too, which nothing here decodes).  What a piece
with neither holds (SASS, PTX this Python cannot decompress) is kept for
the reason its kernels do not run on the CPU loader.  An unreadable
container holds nothing here: nvJitLink has already reported it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ptxbridge.abi.archive import ArchiveMember, read_archive
from ptxbridge.abi.cubin import read_cubin
from ptxbridge.abi.elf import is_elf
from ptxbridge.abi.errors import FormatError
from ptxbridge.abi.fatbin import FatbinEntry, read_fatbin
from ptxbridge.abi.targets import parse_target
from ptxbridge.artifacts.artifact import Artifact, CodeKind
from ptxbridge.linker.symbols import parsed_ptx

__all__ = ["CONTAINERS", "Embedded", "embedded_code", "host_objects"]

CONTAINERS = {CodeKind.FATBIN: "fatbin", CodeKind.OBJECT: "host object", CodeKind.LIBRARY: "static library"}


@dataclass(frozen=True, slots=True)
class Embedded:
    """``ptx``: one module per piece that has PTX; ``ltoir``: the pieces with LTO-IR but no PTX (to
    finalise); ``held``: what the other pieces hold instead; ``kernels``: the entries of their SASS."""

    ptx: tuple[bytes, ...] = ()
    ltoir: tuple[Artifact, ...] = ()
    held: tuple[str, ...] = ()
    kernels: tuple[str, ...] = ()

    def missing(self, container: Artifact, entries: set[str]) -> dict[str, str]:
        """The kernels of ``container`` no PTX for the CPU loader defines (none of ``entries``), with why."""
        held = f"only {', '.join(self.held)}" if self.held else "no PTX"
        reason = (f"it comes from {container.name}, a {CONTAINERS[container.kind]} holding {held} for it, "
                  "and the CPU loader interprets PTX; embed PTX in it (nvcc -gencode arch=compute_XX,"
                  "code=compute_XX) or link its PTX, LTO-IR or NVVM IR instead")
        return {name: reason for name in (*container.kernels, *self.kernels) if name not in entries}


def host_objects(library: Artifact) -> list[ArchiveMember]:
    """The ELF members of a static library (none when it is malformed: nvJitLink reports that)."""
    try:
        return [m for m in read_archive(library.code, library.name) if is_elf(m.data)]
    except FormatError:
        return []


def embedded_code(container: Artifact, arch: str) -> Embedded:
    """What ``container`` (a fatbin, host object or library) gives the CPU loader for a link for ``arch``."""
    if container.kind is CodeKind.LIBRARY:
        pieces = [(f"{container.name}({m.name})", m.data) for m in host_objects(container)]
    else:
        pieces = [(container.name, container.code)]
    ptx: list[bytes] = []
    ltoir: list[Artifact] = []
    held: list[str] = []
    kernels: list[str] = []
    for name, code in pieces:
        try:
            entries = read_fatbin(code, name).entries
        except FormatError:  # no device code, or a broken container nvJitLink has reported
            continue
        text, unreadable = _ptx(entries, arch, name)
        if text is not None:
            ptx.append(text)
        elif any(e.kind == "ltoir" for e in entries):
            ltoir.append(Artifact(code, CodeKind.OBJECT if is_elf(code) else CodeKind.FATBIN, name=name))
        else:
            held += [_describe(e) for e in entries if e.kind != "ptx" or not e.decompressed] + unreadable
            kernels += [k for e in entries if e.kind == "elf" for k in _sass_kernels(e, name)]
    return Embedded(tuple(ptx), tuple(ltoir), tuple(dict.fromkeys(held)), tuple(dict.fromkeys(kernels)))


def _ptx(entries: Sequence[FatbinEntry], arch: str, name: str) -> tuple[bytes | None, list[str]]:
    """The piece's PTX for ``arch`` (:func:`_pick`), checked to parse; else None and why it is unreadable."""
    readable = [e for e in entries if e.kind == "ptx" and e.decompressed]
    if not readable:
        return None, []
    text = _pick(readable, arch).data.rstrip(b"\0")
    try:
        parsed_ptx(text, name)
    except FormatError as exc:
        return None, [f"PTX that ptxbridge cannot read ({exc})"]
    return text, []


def _pick(images: Sequence[FatbinEntry], arch: str) -> FatbinEntry:
    """The image for the highest arch not above ``arch``, else the lowest one."""
    target = parse_target(arch).number
    fitting = [e for e in images if e.sm <= target]
    return max(fitting, key=lambda e: e.sm) if fitting else min(images, key=lambda e: e.sm)


def _describe(entry: FatbinEntry) -> str:
    if entry.kind == "elf":
        return f"{entry.arch} SASS"
    if entry.kind == "ptx":
        return f"{entry.compression}-compressed PTX that needs the zstandard package to read"
    return f"a {entry.kind} image"


def _sass_kernels(entry: FatbinEntry, name: str) -> list[str]:
    try:
        return [k.name for k in read_cubin(entry.data, name).kernels]
    except FormatError:
        return []
