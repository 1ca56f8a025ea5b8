"""Read a cubin (CUDA ELF, ``EM_CUDA``): arch, kernels, device functions and their metadata.

Where the facts live (measured on CUDA 13.5 ptxas/nvJitLink/tileiras output,
cross-checked with ``cuobjdump -elf`` in ``tests/test_cubin.py``):

- SM number: ``e_flags`` bits 8-15 when ``EI_ABIVERSION >= 8`` (every arch
  from CUDA 13 on, sm_75 included), bits 0-7 before (LLVM's ``EF_CUDA_SM``).
- ``sm_XXa``: ``.nv.compat`` ``EICOMPAT_ATTR_CUDA_ACCELERATOR_TARGET == 1``;
  ``e_flags`` is identical for sm_90 and sm_90a.  Older ABIs set
  ``EF_CUDA_ACCELERATORS_V1`` (0x800) instead.
- Kernels: ``STT_FUNC`` symbols with ``STO_CUDA_ENTRY`` (0x10) in
  ``st_other``; per-kernel attributes in ``.nv.info.<name>``; registers,
  frame and stack sizes in ``.nv.info`` keyed by symbol index (``sh_info``
  bits 24-31 of ``.text.<name>`` are 0 with CUDA 13, used only as fallback).
- Static shared memory: the size of ``.nv.shared.<name>``.  For linked
  sm_90+ cubins ptxas includes 1 KiB it reserves at the window start
  (640 B of arrays -> 1664 B); relocatable cubins show the arrays only.
- Language: ``EIATTR_LANGUAGE`` (3 PTX, 7 Tile IR).  Tile IR cubins also
  carry ``.nv.tileir.*`` debug sections, a host object in ``.nv.host`` and
  ``___NV_TILE_LAUNCH_META_DATA___``.
- Embedded PTX: ``.nv_debug_ptx_txt`` (tileiras writes it), lines NUL-separated.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ptxbridge.abi.check import DeclaredParam
from ptxbridge.abi.elf import EM_CUDA, ET_REL, STT_FUNC, Elf, Section, read_elf
from ptxbridge.abi.errors import FormatError
from ptxbridge.abi.layout import MAX_PARAM_BYTES
from ptxbridge.abi.nvinfo import (
    LANGUAGES,
    CompatAttr,
    EiAttr,
    EiFormat,
    KParam,
    NvInfoRecord,
    read_kparam,
    read_nv_info,
    sval_words,
)

__all__ = ["KParam", "Kernel", "DeviceFunction", "Cubin", "read_cubin", "cubin_arch"]

STO_CUDA_ENTRY = 0x10
EF_CUDA_ACCELERATORS_V1 = 0x800
STB_LOCAL = 0
_PER_SYMBOL = (EiAttr.REGCOUNT, EiAttr.FRAME_SIZE, EiAttr.MIN_STACK_SIZE, EiAttr.MAX_STACK_SIZE)
_KPARAMS = (EiAttr.KPARAM_INFO, EiAttr.KPARAM_INFO_V2)


@dataclass(frozen=True, slots=True)
class Kernel:
    """A ``__global__`` entry point and what its cubin records about it.

    ``params`` are sorted by ordinal.  ``param_size`` is
    ``EIATTR_CBANK_PARAM_SIZE`` (None when absent).  ``reqntid`` /
    ``maxntid`` / ``cluster_dims`` are (x, y, z) or None.
    """

    name: str
    params: tuple[KParam, ...]
    param_size: int | None
    reqntid: tuple[int, int, int] | None
    maxntid: tuple[int, int, int] | None
    cluster_dims: tuple[int, int, int] | None
    explicit_cluster: bool
    max_cluster_rank: int | None
    static_shared: int
    registers: int | None
    frame_size: int | None
    min_stack_size: int | None
    language: str | None
    code_size: int

    def declared_params(self) -> tuple[DeclaredParam, ...]:
        """The KPARAM layout as :func:`ptxbridge.abi.check.check_layout` takes it (types unknown)."""
        return tuple(DeclaredParam(p.ordinal, p.offset, p.size) for p in self.params)


@dataclass(frozen=True, slots=True)
class DeviceFunction:
    """A non-entry function (``.func``) with code in this cubin."""

    name: str
    size: int
    is_global: bool
    registers: int | None
    frame_size: int | None


@dataclass(frozen=True, slots=True)
class Cubin:
    """Plain data read from one cubin.  ``arch`` is e.g. ``"sm_90a"``."""

    arch: str
    sm: int
    accelerated: bool
    abi_version: int
    relocatable: bool
    virtual_arch: str | None
    toolkit_version: str | None
    kernels: tuple[Kernel, ...]
    device_functions: tuple[DeviceFunction, ...]
    language: str | None
    has_host_code: bool
    embedded_ptx: str | None

    def kernel(self, name: str) -> Kernel:
        """The kernel called ``name``; KeyError lists the ones there are."""
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(f"no kernel {name!r} in this cubin (kernels: {[k.name for k in self.kernels]})")


def cubin_arch(abi_version: int, e_flags: int, accelerated_note: bool) -> tuple[int, bool]:
    """(SM number, is ``sm_XXa``) from the ELF header and the ``.nv.compat`` marker."""
    if abi_version >= 8:
        return (e_flags >> 8) & 0xFF, accelerated_note
    return e_flags & 0xFF, accelerated_note or bool(e_flags & EF_CUDA_ACCELERATORS_V1)


def _records(elf: Elf, section: Section) -> Iterator[NvInfoRecord]:
    return read_nv_info(elf.section_data(section), elf.source, section.offset)


def _xyz(record: NvInfoRecord, source: str) -> tuple[int, int, int]:
    """A launch dimension record (REQNTID, MAX_THREADS, CTA_PER_CLUSTER): three counts of at least 1."""
    x, y, z = sval_words(record, 3, source)
    if 0 in (x, y, z):
        raise FormatError(f"nv.info attribute {record.attr:#x}: launch dimensions must be >= 1 (got "
                          f"{x}, {y}, {z})", source=source, where=f"offset {record.offset:#x}")
    return x, y, z


def _accelerated(elf: Elf) -> bool:
    compat = elf.section(".nv.compat")
    if compat is None:
        return False
    return any(r.attr == CompatAttr.CUDA_ACCELERATOR_TARGET and r.format == EiFormat.BVAL and r.value == 1
               for r in _records(elf, compat))


def _cuinfo(elf: Elf) -> tuple[str | None, str | None]:
    """(virtual arch, toolkit version) from the ``.note.nv.cuinfo`` ELF note, when well formed."""
    note = elf.section(".note.nv.cuinfo")
    if note is None:
        return None, None
    data = elf.section_data(note)
    if len(data) < 12:
        return None, None
    namesz, descsz, _ = struct.unpack_from("<III", data, 0)
    desc = 12 + (namesz + 3) // 4 * 4
    if descsz < 6 or desc + 6 > len(data):
        return None, None
    _version, vsm, toolkit = struct.unpack_from("<HHH", data, desc)
    return f"compute_{vsm}", f"{toolkit // 10}.{toolkit % 10}"


def _per_symbol(elf: Elf) -> dict[tuple[int, int], int]:
    """(attribute, symbol index) -> value from the global ``.nv.info`` section, for the functions
    there are (records of other symbols are not kept: a crafted section would grow the table)."""
    table: dict[tuple[int, int], int] = {}
    info = elf.section(".nv.info")
    if info is None:
        return table
    functions = {sym.index for sym in elf.symbols if sym.type == STT_FUNC and sym.name}
    for record in _records(elf, info):
        if record.attr in _PER_SYMBOL and record.format == EiFormat.SVAL:
            symbol, value = sval_words(record, 2, elf.source)
            if symbol in functions:
                table[(record.attr, symbol)] = value
    return table


@dataclass(slots=True)
class _Attrs:
    """Mutable scratch for one kernel's ``.nv.info.<name>`` records."""

    params: list[KParam | None] = field(default_factory=list)  # by ordinal; None: no record yet
    param_count: int = 0
    param_size: int | None = None
    reqntid: tuple[int, int, int] | None = None
    maxntid: tuple[int, int, int] | None = None
    cluster_dims: tuple[int, int, int] | None = None
    explicit_cluster: bool = False
    max_cluster_rank: int | None = None
    language: str | None = None


def _kernel_attrs(elf: Elf, name: str) -> _Attrs:
    attrs = _Attrs()
    info = elf.section(f".nv.info.{name}")
    if info is None:
        return attrs
    source = elf.source
    for r in _records(elf, info):
        sval = r.format == EiFormat.SVAL
        if r.attr in _KPARAMS and sval:
            _add_param(attrs, read_kparam(r, source), name, source, r.offset)
        elif r.attr == EiAttr.CBANK_PARAM_SIZE and isinstance(r.value, int):
            attrs.param_size = r.value
        elif r.attr == EiAttr.REQNTID and sval:
            attrs.reqntid = _xyz(r, source)
        elif r.attr == EiAttr.MAX_THREADS and sval:
            attrs.maxntid = _xyz(r, source)
        elif r.attr == EiAttr.CTA_PER_CLUSTER and sval:
            attrs.cluster_dims = _xyz(r, source)
        elif r.attr == EiAttr.EXPLICIT_CLUSTER:
            attrs.explicit_cluster = True
        elif r.attr == EiAttr.MAX_CLUSTER_RANK and sval:
            attrs.max_cluster_rank = sval_words(r, 1, source)[0]
        elif r.attr == EiAttr.LANGUAGE and sval:
            code = sval_words(r, 1, source)[0]
            attrs.language = LANGUAGES.get(code, f"unknown({code})")
    _check_params(attrs, name, source, lambda ordinal: _param_record(elf, info, ordinal))
    return attrs


def _add_param(attrs: _Attrs, param: KParam, name: str, source: str, offset: int) -> None:
    """Keep ``param`` by its ordinal.  Each parameter takes at least one byte of the 32,764, so a
    larger ordinal is refused at once (a crafted section cannot grow the list past that)."""
    ordinal = param.ordinal
    if ordinal >= MAX_PARAM_BYTES:
        raise FormatError(f"kernel {name}: KPARAM record for parameter {ordinal}, but a {MAX_PARAM_BYTES}-"
                          f"byte parameter buffer holds at most {MAX_PARAM_BYTES} parameters",
                          source=source, where=f"offset {offset:#x}")
    if ordinal < len(attrs.params) and attrs.params[ordinal] is not None:
        raise FormatError(f"kernel {name}: two KPARAM_INFO records for parameter {ordinal}",
                          source=source, where=f"offset {offset:#x}")
    attrs.params.extend([None] * (ordinal + 1 - len(attrs.params)))
    attrs.params[ordinal] = param
    attrs.param_count += 1


def _param_record(elf: Elf, info: Section, ordinal: int | None) -> int:
    """The offset of the KPARAM record of ``ordinal`` (None: of the first one), for an error: found
    again rather than kept for every parameter."""
    return next(r.offset for r in _records(elf, info) if r.attr in _KPARAMS and r.format == EiFormat.SVAL
                and (ordinal is None or read_kparam(r, elf.source).ordinal == ordinal))


def _check_params(attrs: _Attrs, name: str, source: str, record_of: Callable[[int | None], int]) -> None:
    """KPARAM records must describe a parameter buffer: ordinals 0..n-1, each parameter after the
    previous one, inside the recorded total and the driver's 32,764-byte limit."""
    limit = min(MAX_PARAM_BYTES if attrs.param_size is None else attrs.param_size, MAX_PARAM_BYTES)
    end = 0
    for ordinal, param in enumerate(attrs.params):
        if param is None:
            record = record_of(None)
            problem = f"is missing (records must number the parameters 0 to {attrs.param_count - 1})"
        else:
            problem = ("has size 0" if param.size == 0 else
                       f"starts at byte {param.offset}, inside the previous parameter (which ends at {end})"
                       if param.offset < end else
                       f"ends at byte {param.offset + param.size}, past the {limit}-byte parameter buffer"
                       if param.offset + param.size > limit else None)
            record = record_of(ordinal) if problem is not None else 0
        if problem is not None:
            raise FormatError(f"kernel {name}: the KPARAM record of parameter {ordinal} {problem}",
                              source=source, where=f"offset {record:#x}")
        end = param.offset + param.size


def _text_registers(elf: Elf, name: str) -> int | None:
    text = elf.section(f".text.{name}")
    if text is None:
        return None
    return (text.info >> 24) or None


def _shared_size(elf: Elf, name: str) -> int:
    shared = elf.section(f".nv.shared.{name}")
    return shared.size if shared is not None else 0


def _embedded_ptx(elf: Elf) -> str | None:
    section = elf.section(".nv_debug_ptx_txt")
    if section is None:
        return None
    text = elf.section_data(section).lstrip(b"\0").replace(b"\0", b"\n")
    return text.decode("utf-8", errors="replace")


def read_cubin(data: bytes, source: str = "<cubin>") -> Cubin:
    """Read a cubin's arch, kernels (with KPARAM layout and launch metadata) and device functions.

    Raises
    ------
    FormatError
        Not a CUDA ELF, or a section, symbol or ``.nv.info`` record is malformed.
    """
    elf = read_elf(data, source)
    if elf.header.machine != EM_CUDA:
        raise FormatError(f"not a cubin: e_machine must be EM_CUDA ({EM_CUDA}) (got {elf.header.machine})",
                          source=source, where="offset 0x12")
    accelerated = _accelerated(elf)
    sm, accelerated = cubin_arch(elf.header.abi_version, elf.header.flags, accelerated)
    per_symbol = _per_symbol(elf)
    kernels, functions = [], []
    for sym in elf.symbols:
        if sym.type != STT_FUNC or not sym.name:
            continue
        regs = per_symbol.get((EiAttr.REGCOUNT, sym.index)) or _text_registers(elf, sym.name)
        frame = per_symbol.get((EiAttr.FRAME_SIZE, sym.index))
        if not sym.other & STO_CUDA_ENTRY:
            functions.append(DeviceFunction(sym.name, sym.size, sym.bind != STB_LOCAL, regs, frame))
            continue
        attrs = _kernel_attrs(elf, sym.name)
        kernels.append(Kernel(
            name=sym.name,
            params=tuple(p for p in attrs.params if p is not None),  # none missing: checked
            param_size=attrs.param_size,
            reqntid=attrs.reqntid,
            maxntid=attrs.maxntid,
            cluster_dims=attrs.cluster_dims,
            explicit_cluster=attrs.explicit_cluster,
            max_cluster_rank=attrs.max_cluster_rank,
            static_shared=_shared_size(elf, sym.name),
            registers=regs,
            frame_size=frame,
            min_stack_size=per_symbol.get((EiAttr.MIN_STACK_SIZE, sym.index)),
            language=attrs.language,
            code_size=sym.size,
        ))
    languages = {k.language for k in kernels if k.language}
    virtual_arch, toolkit = _cuinfo(elf)
    return Cubin(
        arch=f"sm_{sm}{'a' if accelerated else ''}",
        sm=sm,
        accelerated=accelerated,
        abi_version=elf.header.abi_version,
        relocatable=elf.header.type == ET_REL,
        virtual_arch=virtual_arch,
        toolkit_version=toolkit,
        kernels=tuple(kernels),
        device_functions=tuple(functions),
        language="tileir" if "tileir" in languages else next(iter(languages), None),
        has_host_code=elf.section(".nv.host") is not None,
        embedded_ptx=_embedded_ptx(elf),
    )
