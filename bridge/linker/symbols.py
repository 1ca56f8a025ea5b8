"""Cross-artifact symbol checks: every imported device function against the one artifact exporting it.

Layouts are compared after lowering (what the PTX call sees), then the value types of both typed
sides, so a mismatch is a :class:`LinkError` naming both artifacts before nvJitLink runs.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import replace

from ptxbridge.abi.check import check
from ptxbridge.abi.errors import AbiMismatchError, LinkError
from ptxbridge.abi.kinds import ParamType, Pointer, Scalar
from ptxbridge.abi.lowering import lower_param, lower_params
from ptxbridge.abi.ptx import PtxModule, read_ptx
from ptxbridge.abi.rust_names import rust_path
from ptxbridge.abi.signature import Signature
from ptxbridge.artifacts.artifact import Artifact, CodeKind

__all__ = ["check_symbols", "parsed_ptx"]

_OPAQUE_KINDS = (CodeKind.OBJECT, CodeKind.LIBRARY, CodeKind.FATBIN)


def _shape(sig: Signature) -> tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]:
    """What the PTX call sees: (size, align) of each parameter and of the return value.

    Types are not compared, as in :mod:`ptxbridge.abi.check`: a float is
    ``.f32`` in numba PTX and ``.b32`` in NVRTC's, and an untyped PTX input
    only tells widths.
    """
    ret = lower_param("return", sig.returns, sig.convention) if sig.returns is not None else []
    return (tuple((p.size, p.align) for p in lower_params(sig.params, sig.convention)),
            tuple((p.size, p.align) for p in ret))


@functools.lru_cache(maxsize=64)
def parsed_ptx(code: bytes, name: str) -> PtxModule:
    """``read_ptx``, remembered: the linker reads each PTX input for symbols, ISA and runtime calls."""
    return read_ptx(code, name)


def _exports(artifact: Artifact) -> dict[str, tuple[Signature | None, bool]]:
    """name -> (signature or None when only the PTX declares it, weak) of what ``artifact`` defines."""
    typed = dict(artifact.device_functions)
    if artifact.kind != CodeKind.PTX:
        return {name: (sig, False) for name, sig in typed.items()}
    found = {}
    for function in parsed_ptx(artifact.code, artifact.name).functions:
        if function.kind == "func" and function.body is not None and function.linkage in ("visible", "weak"):
            found[function.name] = (typed.get(function.name), function.linkage == "weak")
    return found


def check_symbols(artifacts: Sequence[Artifact]) -> None:
    """Match every import with its exporter and compare lowered layouts (return included).

    An exporter is an artifact listing the function in ``device_functions``
    or, for PTX, defining a visible or weak ``.func`` of that name (checked
    against the import when no signature came with it).  Two strong
    definitions are an error; a missing exporter is one too, unless an
    object, library or fatbin input (whose symbols are not read here) may
    define it.
    """
    exporters: dict[str, list[tuple[Artifact, Signature | None, bool]]] = {}
    for artifact in artifacts:
        for name, (sig, weak) in _exports(artifact).items():
            exporters.setdefault(name, []).append((artifact, sig, weak))
    for name, found in exporters.items():
        strong = [a for a, _, weak in found if not weak]
        if len(strong) > 1:
            raise LinkError(f"device function {name!r} is defined by both {strong[0].name} and "
                            f"{strong[1].name}; link only one of them")
    opaque = [a for a in artifacts if a.kind in _OPAQUE_KINDS]
    for importer in artifacts:
        for name, wanted in importer.imports.items():
            if name not in exporters:
                if opaque:
                    continue  # nvJitLink resolves it from the object/library, or reports it
                raise LinkError(f"device function {name!r}{_rust_name(name)}: {importer.name} imports it as "
                                f"`{wanted}` but no input exports it (add the artifact that defines it to "
                                "the link inputs)")
            exporter, given, _ = exporters[name][0]
            _compare(name, importer, wanted, exporter, given)


def _rust_name(symbol: str) -> str:
    """`` (the Rust function core::x::y ...)`` for a Rust v0 symbol, else nothing; for ``core`` and
    ``alloc``, how to get them linked in."""
    path = rust_path(symbol)
    if path is None:
        return ""
    crate = path.split("::", 1)[0]
    linked = (f"; rustc's PTX calls into {crate}, which no input holds: ptxbridge.rust.compile links "
              f"{crate} into the kernel's module") if crate in ("core", "alloc", "compiler_builtins") else ""
    return f" (the Rust function {path}{linked})"


def _compare(name: str, importer: Artifact, wanted: Signature, exporter: Artifact,
             given: Signature | None) -> None:
    if given is None:  # untyped PTX: compare with its .func declaration
        try:
            check(replace(wanted, name=name), parsed_ptx(exporter.code, exporter.name).function(name))
        except AbiMismatchError as exc:
            raise LinkError(f"device function {name!r}: {importer.name} imports it as `{wanted}` but "
                            f"{exporter.name} defines it differently: {exc}") from None
    elif _shape(wanted) != _shape(given):
        raise LinkError(f"device function {name!r}: {importer.name} imports it as `{wanted}` but "
                        f"{exporter.name} exports `{given}`; their PTX parameter layouts differ")
    elif (differs := _value_mismatch(wanted, given)) is not None:
        raise LinkError(f"device function {name!r}: {importer.name} imports it as `{wanted}` but "
                        f"{exporter.name} exports `{given}`; {differs}")


def _scalar_kind(t: ParamType | None) -> str | None:
    """The element type a call passes by value (``f32``), or the pointee of a pointer (``*f32``).

    None when there is nothing to compare: structs, opaque blobs and ``void*``
    (their layouts are compared by :func:`_shape`), and pointer constness,
    which C lets either side drop.
    """
    if isinstance(t, Scalar):
        return t.dtype.name
    if isinstance(t, Pointer) and isinstance(t.pointee, Scalar):
        return f"*{t.pointee.dtype.name}"
    return None


def _value_mismatch(wanted: Signature, given: Signature) -> str | None:
    """Where two layout-equal signatures still disagree on a value's type (f32 vs i32, *f32 vs *u32).

    Both sides are typed here (each came with a signature), so a float passed
    where the callee reads an int is a bug to report, not a PTX detail.
    """
    if len(wanted.params) != len(given.params):  # an aggregate on one side (a numba array is 7
        return None  # words) is several parameters on the other: the lowered layouts matched already
    pairs = [(f"parameter {i + 1}", a.type, b.type)
             for i, (a, b) in enumerate(zip(wanted.params, given.params, strict=True))]
    pairs.append(("the return value", wanted.returns, given.returns))
    for what, mine, theirs in pairs:
        a, b = _scalar_kind(mine), _scalar_kind(theirs)
        if a is not None and b is not None and a != b:
            return f"{what} is {a} on one side and {b} on the other"
    return None
