"""Signatures of the kernels and device functions in a code object: given, checked, or recovered.

Given ones come from the caller (a :class:`Signature`, a list, signature text, a JSON manifest path or
dict) or from a sidecar named after the whole file name (``k.ptx.sig`` as text, ``k.ptx.json`` as a
manifest; ``k.json`` is some other tool's file and is never read).  Each is checked against the code
where the code declares its parameters (PTX entries and functions, cubin ``EIATTR_KPARAM_INFO``; a
host object through its embedded fatbin).  Without one, a kernel is still listed where the code shows
its parameters: each becomes an :class:`Opaque` of its size and alignment (layout only), and cuTile
kernels get their full signature from their mangled names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ptxbridge.abi.check import check, check_layout
from ptxbridge.abi.cubin import Cubin, Kernel, read_cubin
from ptxbridge.abi.cutile_names import demangle, is_cutile_symbol
from ptxbridge.abi.dtypes import dtype
from ptxbridge.abi.errors import AbiMismatchError, ArgumentError, FormatError, LinkError
from ptxbridge.abi.fatbin import read_fatbin
from ptxbridge.abi.kinds import Opaque, ParamType, Scalar
from ptxbridge.abi.ptx import PtxFunction, PtxModule, PtxParam, read_ptx
from ptxbridge.abi.signature import Convention, LaunchMeta, Param, Signature

__all__ = ["coerce_signatures", "cubin_signatures", "device_by_name", "fatbin_signatures", "layout_only",
           "ptx_launch", "ptx_signatures", "sidecar_signatures", "with_cubin_facts"]

_SIDECARS = ((".sig", "text"), (".json", "manifest"))  # appended to the whole file name


# --- signatures given by the caller --------------------------------------------------------


def coerce_signatures(spec: Any) -> list[Signature]:
    """Signatures from a Signature, a list of them, signature text, JSON manifest text, or a
    manifest path (``.json``) or dict."""
    from ptxbridge.abi.manifest import from_manifest
    from ptxbridge.abi.syntax import parse_signatures

    if isinstance(spec, Signature):
        return [spec]
    if isinstance(spec, Mapping):
        return from_manifest(dict(spec))
    if isinstance(spec, Path) or (isinstance(spec, str) and spec.endswith(".json") and "\n" not in spec):
        return _manifest_file(Path(spec))
    if isinstance(spec, str):
        return from_manifest(spec) if spec.lstrip().startswith("{") else parse_signatures(spec)
    if isinstance(spec, Iterable):
        items = list(spec)
        if all(isinstance(s, Signature) for s in items):
            return items
    raise ArgumentError("signatures must be a Signature, a list of them, signature text, or a JSON "
                        f"manifest path or dict (got {type(spec).__name__})")


def _manifest_file(path: Path) -> list[Signature]:
    from ptxbridge.abi.manifest import loads

    try:
        return loads(path.read_bytes(), source=str(path))
    except OSError as exc:
        raise ArgumentError(f"cannot read manifest {str(path)!r}: {exc.strerror}") from exc


def sidecar_signatures(path: Path) -> list[Signature]:
    """Signatures from ``<file>.sig`` (text) or ``<file>.json`` (manifest), if present: ``k.ptx.sig``,
    ``k.ptx.json``.  A file named after the stem (``k.json``) is not read: it may be anything."""
    from ptxbridge.abi.syntax import parse_signatures

    for suffix, form in _SIDECARS:
        candidate = path.with_name(path.name + suffix)
        if candidate.is_file():
            if form == "manifest":
                return _manifest_file(candidate)
            return parse_signatures(candidate.read_text(errors="replace"))
    return []


# --- PTX ---------------------------------------------------------------------------------


def ptx_signatures(module: PtxModule, given: Mapping[str, Signature]) -> tuple[dict, dict, dict]:
    """(kernels, exported device functions, imports) of a PTX module, given ones checked."""
    kernels, exports, imports = {}, {}, {}
    for func in module.functions:
        table = (kernels if func.kind == "entry" else imports if func.linkage == "extern"
                 else exports if func.linkage in ("visible", "weak") else None)
        if table is None:  # internal .func: not visible to other artifacts
            continue
        sig = given.get(func.name)
        if sig is not None:
            check(sig, func)
        else:
            sig = layout_only(func)
        table[func.name] = sig
    return kernels, exports, imports


def layout_only(func: PtxFunction) -> Signature:
    """A signature knowing only what the PTX says: Opaque for ``.entry``, PTX types for ``.func``."""
    if func.kind == "entry":
        params = tuple(Param(f"p{i}", Opaque(p.nbytes, p.param_align)) for i, p in enumerate(func.params))
        return Signature(func.name, params, Convention.C, launch=ptx_launch(func))
    params = tuple(Param(f"p{i}", _bits(p)) for i, p in enumerate(func.params))
    returns = _bits(func.returns[0]) if func.returns else None
    return Signature(func.name, params, Convention.C, kind="device", returns=returns)


def _bits(param: PtxParam) -> ParamType:
    """A ``.func`` parameter as typed as its PTX type says: ``.f32`` a float, ``.s32`` an int,
    ``.b32`` only 4 bytes (an int or a float: Opaque, so the linker compares its width only)."""
    width = int(param.type[1:]) if param.type[1:].isdigit() else 0
    if param.array is not None or not width or param.type.startswith("b"):
        return Opaque(param.nbytes, param.param_align)
    if param.type.startswith("f"):
        return Scalar(dtype(param.type))
    return Scalar(dtype(f"{'i' if param.type.startswith('s') else 'u'}{width}"))


def ptx_launch(entry: PtxFunction) -> LaunchMeta:
    """Launch demands a PTX entry declares (``.reqntid``, ``.maxntid``, ``.minnctapersm``, cluster)."""

    def dim3(value: tuple[int, ...] | None) -> tuple[int, int, int] | None:
        return None if value is None else (tuple(value) + (1, 1))[:3]  # type: ignore[return-value]

    return LaunchMeta(reqntid=dim3(entry.reqntid), maxntid=dim3(entry.maxntid),
                      minnctapersm=entry.minnctapersm, cluster=dim3(entry.reqnctapercluster))


# --- cubin and fatbin ---------------------------------------------------------------------


def cubin_signatures(cubin: Cubin, given: Mapping[str, Signature], source: str) -> dict[str, Signature]:
    """Each kernel's signature: given (cutile-rs ``name`` matches ``name_entry``), from a cuTile
    symbol, or layout-only from its KPARAM records; all checked against KPARAM, with launch metadata."""
    result = {}
    for kernel in cubin.kernels:
        sig = given.get(kernel.name) or given.get(kernel.name.removesuffix("_entry"))
        if sig is None:
            sig = demangle(kernel.name) if is_cutile_symbol(kernel.name) else _kparam_only(kernel)
        if sig.kind != "kernel":
            raise AbiMismatchError(f"{sig.name}: a device-function signature given for cubin kernel "
                                   f"{kernel.name} in {source}")
        sig = dataclasses.replace(sig, name=kernel.name, launch=_cubin_launch(sig, kernel))
        check_layout(sig, kernel.declared_params(), f"cubin KPARAM of {kernel.name} in {source}")
        result[kernel.name] = sig
    return result


def _kparam_only(kernel: Kernel) -> Signature:
    """Opaque parameters reproducing the KPARAM offsets: each aligned to what its offset allows."""
    params = []
    for i, p in enumerate(kernel.declared_params()):
        align = 1
        while align < 16 and p.size % (align * 2) == 0 and p.offset % (align * 2) == 0:
            align *= 2
        params.append(Param(f"p{i}", Opaque(p.size, align)))
    return Signature(kernel.name, tuple(params), Convention.C)


def _cubin_launch(sig: Signature, kernel: Kernel) -> LaunchMeta:
    """Launch demands from the cubin; a tile kernel (Tile IR, cutile-rs) with no REQNTID takes
    block (1,1,1) only (docs/conventions.md, "cutile")."""
    launch = sig.launch
    if None not in (kernel.reqntid, launch.reqntid) and kernel.reqntid != launch.reqntid:
        raise AbiMismatchError(f"{kernel.name}: the signature's reqntid is {launch.reqntid} but the cubin "
                               f"declares {kernel.reqntid}")
    reqntid = kernel.reqntid or launch.reqntid
    if reqntid is None and (kernel.language == "tileir" or sig.convention is Convention.CUTILE_RS):
        reqntid = (1, 1, 1)
    return dataclasses.replace(launch, reqntid=reqntid, maxntid=kernel.maxntid or launch.maxntid,
                               cluster=kernel.cluster_dims or launch.cluster,
                               static_shared=kernel.static_shared)


def device_by_name(given: Mapping[str, Signature], defined: set[str]) -> dict[str, Signature]:
    """Given device-function signatures for functions a cubin defines (a cubin has no param records)."""
    return {n: s for n, s in given.items() if s.kind == "device" and n in defined}


def fatbin_signatures(data: bytes, given: Mapping[str, Signature],
                       source: str) -> tuple[str | None, dict, dict]:
    """Signatures from a fatbin's (or host object's) PTX and cubin images; arch of the first image.

    Images this machine cannot decompress (zstd without the ``zstandard``
    module) cannot be checked: given signatures not found elsewhere are taken as given.
    """
    fatbin = read_fatbin(data, source)
    if not fatbin.entries:
        raise FormatError("holds no device code images", source=source)
    kernels: dict[str, Signature] = {}
    exports: dict[str, Signature] = {}
    unread = False
    for entry in fatbin.entries:
        where = f"{source} image at {entry.offset:#x}"
        if not entry.decompressed:
            unread = True
            continue
        if entry.kind == "ptx":
            found, more, _ = ptx_signatures(read_ptx(entry.text(), where), given)
            exports.update(more)
        elif entry.kind == "elf":
            found = cubin_signatures(read_cubin(entry.data, where), given, where)
        else:  # LTO-IR images: nothing to read
            unread = True
            continue
        for name, sig in found.items():
            kernels.setdefault(name, sig)
    if unread:
        for name, sig in given.items():
            (kernels if sig.kind == "kernel" else exports).setdefault(name, sig)
    return fatbin.entries[0].arch, kernels, exports


def with_cubin_facts(kernels: Mapping[str, Signature], cubin: bytes, source: str) -> dict[str, Signature]:
    """Every kernel of ``cubin``, typed by ``kernels`` where known, checked against its KPARAM records.

    Launch facts the cubin states (REQNTID, MAXNTID, cluster, static shared
    memory) are added; a kernel in ``kernels`` but not in the cubin is an error.
    """
    parsed = read_cubin(cubin, source)
    given = {sig.name: sig for sig in kernels.values()}
    missing = set(given) - {k.name for k in parsed.kernels}
    if missing:
        raise LinkError(f"kernels {sorted(missing)} are not in {source} (dropped by "
                        "LinkOptions.kernels_used, or a signature names the wrong entry?)")
    return cubin_signatures(parsed, given, source)
