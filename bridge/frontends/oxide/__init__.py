"""ptxbridge.oxide: kernels built by cuda-oxide (the SIMT path of CUDA Rust).

cuda-oxide writes PTX, NVVM IR (when kernels call libdevice math), LTO-IR or
cubins, as loose files with ``.target`` / ``.options`` sidecars or as bundles
in the host binary's ``.oxart`` section; which one loads is chosen as
cuda-host chooses (:mod:`ptxbridge.oxide.payloads`).  None carries types, so
signatures come from the Rust source (``#[kernel]``, ``#[device]``,
``#[device] extern "C"``, ``#[constant]``), lowered by cuda-oxide's rules
(:mod:`ptxbridge.rust.signatures`, ``docs/rust.md``), and are checked against
the code: PTX entries, cubin KPARAM records, and NVVM IR / LTO-IR through the
PTX nvJitLink makes of them.  Generic kernels are entries
``<name>_TID_<32 hex>``; each is typed by trying the instantiations the source
names (``#[kernel(f32, u64)]``) or the caller gives (``generics=``) and
keeping the one the code agrees with.  A kernel that cannot be typed (a
closure parameter, a type with no fixed layout) is left out with the reason,
raised when it is asked for.

``payloads``: cuda-oxide's loose files and ``.oxart`` bundles, chosen as cuda-host chooses.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ptxbridge.abi.check import check, check_layout
from ptxbridge.abi.cubin import read_cubin
from ptxbridge.abi.errors import AbiMismatchError, FormatError, LinkError
from ptxbridge.abi.lowering import memory_layout
from ptxbridge.abi.ltoir import read_ltoir_target
from ptxbridge.abi.oxart import PayloadKind
from ptxbridge.abi.ptx import TYPE_SIZES, PtxModule, read_ptx
from ptxbridge.abi.signature import Convention, Signature
from ptxbridge.abi.targets import parse_target
from ptxbridge.artifacts.artifact import Artifact, CodeKind, Provenance
from ptxbridge.linker.nvjitlink import ptx_from_ltoir
from ptxbridge.linker.target import normalize_arch
from ptxbridge.nvvm import compile_to_ltoir, link_options
from ptxbridge.oxide.payloads import Payload, merge_ptx, read_payload
from ptxbridge.rust.signatures import (
    OxideConstant,
    SourceSignatures,
    fn_signature,
    listed_instantiations,
    read_signatures,
)
from ptxbridge.rust.source import read_crate
from ptxbridge.rust.syntax import RustFn, RustType
from ptxbridge.rust.types import parse_type, show_type

__all__ = ["constants", "load", "merge_ptx"]

_KINDS = {PayloadKind.PTX: CodeKind.PTX, PayloadKind.CUBIN: CodeKind.CUBIN,
          PayloadKind.LTOIR: CodeKind.LTOIR, PayloadKind.NVVM_IR: CodeKind.NVVM}

Checker = Callable[[Signature], None]


@dataclass(frozen=True, slots=True)
class _View:
    """What the code says: how to check a kernel signature, its entry names, arch, and the PTX
    module when there is one (PTX itself, or NVVM IR / LTO-IR finalised to PTX)."""

    check: Checker
    names: set[str]
    arch: str | None
    module: PtxModule | None
    device: set[str]


def _root(source: Path) -> Path:
    """The crate root file of ``source``: the file, or a crate folder's ``src/lib.rs`` / ``src/main.rs``."""
    if not source.is_dir():
        return source
    for candidate in ("src/lib.rs", "src/main.rs"):
        if (source / candidate).is_file():
            return source / candidate
    raise FormatError("a crate folder needs src/lib.rs or src/main.rs", source=str(source))


def _crate_name(root: Path) -> str:
    """The crate name cuda-oxide names the bundle after: Cargo.toml's package, else the file stem."""
    folder = root.parent.parent if root.parent.name == "src" else root.parent
    manifest = folder / "Cargo.toml"
    if manifest.is_file():
        try:
            name = tomllib.loads(manifest.read_text(encoding="utf-8")).get("package", {}).get("name")
        except tomllib.TOMLDecodeError as exc:
            raise FormatError(f"Cargo.toml is not valid TOML ({exc})", source=str(manifest)) from None
        if name:
            return str(name).replace("-", "_")
    return folder.name if root.stem in ("lib", "main") else root.stem


def _default_source(path: Path) -> Path:
    for candidate in (path.with_suffix(".rs"), path.parent / "src/lib.rs", path.parent / "src/main.rs"):
        if candidate.is_file():
            return candidate
    raise FormatError("the Rust source of these kernels is needed for their signatures; pass source=",
                      source=str(path.with_suffix(".rs")))


def _ptx_view(module: PtxModule, arch: str | None) -> _View:
    names = {f.name for f in module.entries}
    device = {f.name for f in module.functions if f.kind == "func" and f.linkage in ("visible", "weak")}
    return _View(lambda sig: check(sig, module), names, (module.target[0] if module.target else None) or arch,
                 module, device)


def _view(chosen: Payload, arch: str | None, source: str) -> _View:
    """How to check signatures against ``chosen``; NVVM IR and LTO-IR go through PTX."""
    if chosen.kind == PayloadKind.PTX:
        return _ptx_view(read_ptx(chosen.code, source), chosen.target)
    if chosen.kind == PayloadKind.CUBIN:
        cubin = read_cubin(chosen.code, source)
        kernels = {k.name: k for k in cubin.kernels}

        def check_cubin(sig: Signature) -> None:
            if sig.name not in kernels:
                raise AbiMismatchError(f"{sig.name}: the cubin has no kernel of that name "
                                       f"(got {', '.join(sorted(kernels)) or 'none'})")
            check_layout(sig, kernels[sig.name].declared_params(), f"cubin KPARAM of {sig.name}")

        return _View(check_cubin, set(kernels), cubin.arch, None, {f.name for f in cubin.device_functions})
    target = chosen.target or (normalize_arch(arch) if arch else None)
    if chosen.kind == PayloadKind.LTOIR:
        target = _ltoir_target(chosen, target, source)
    if target is None:
        raise FormatError(f"{chosen.kind.name} does not record the CUDA target it was built for: keep the "
                          ".target file cuda-oxide wrote, or pass arch= (its original target)", source=source)
    ltoir = chosen.code
    if chosen.kind == PayloadKind.NVVM_IR:
        ltoir = compile_to_ltoir(chosen.code, Path(source).name, target, chosen.policy)
    lto = Artifact(code=ltoir, kind=CodeKind.LTOIR, arch=target, name=Path(source).name)
    try:
        ptx = ptx_from_ltoir([lto], target, link_options(chosen.policy))
    except LinkError as exc:
        raise FormatError(f"{chosen.kind.name} could not be finalised to PTX to read its kernels: {exc}",
                          source=source) from None
    view = _ptx_view(read_ptx(ptx, f"{source} (as PTX)"), target)
    return _View(view.check, view.names, target, view.module, view.device)


def _ltoir_target(chosen: Payload, recorded: str | None, source: str) -> str:
    """The target LTO-IR records in its header (:mod:`ptxbridge.abi.ltoir`), which needs no
    ``.target`` file or ``arch=``; one that disagrees with theirs is a FormatError naming both.
    The header states ``a`` but never ``f``, so a recorded ``sm_100f`` agrees with ``sm_100`` and
    is the one kept."""
    built = read_ltoir_target(chosen.code, source)
    given = parse_target(recorded) if recorded else None
    if given is not None and (given.cc, given.suffix == "a") != (built.cc, built.suffix == "a"):
        said = "the recorded target" if chosen.target else "arch="
        raise FormatError(f"LTO-IR built for {built}; {said} is {given}: pass arch={built.sm!r} (or none), "
                          f"or rebuild it for {given}", source=source)
    return recorded or built.sm


def _mentions(t: RustType, names: set[str]) -> bool:
    text = show_type(t)
    return any(re.search(rf"\b{re.escape(n)}\b", text) for n in names)


def _candidates(fn: RustFn, entry: str, generics: Mapping[str, Mapping[str, str]]
                ) -> list[dict[str, RustType | str]]:
    """Substitutions to try for one generic entry: explicit, then ``#[kernel(T..)]``, then none needed."""
    explicit = generics.get(entry) or generics.get(fn.name)
    if explicit is not None:
        return [{k: v if k in fn.const_generics else parse_type(v) for k, v in explicit.items()}]
    type_params = [g for g in fn.generics if g not in fn.const_generics]
    found: list[dict[str, RustType | str]] = [{type_params[0]: parse_type(t)}
                                              for t in listed_instantiations(fn)]
    if not any(_mentions(t, set(fn.generics)) for _, t in fn.params):
        found.append({})
    return found


def _resolve_generic(fn: RustFn, entry: str, found: SourceSignatures,
                     generics: Mapping[str, Mapping[str, str]], checker: Checker) -> Signature:
    matching: list[Signature] = []
    problems: list[str] = []
    candidates = _candidates(fn, entry, generics)
    for subst in candidates:
        try:
            sig = fn_signature(found.mapper, fn, "kernel", Convention.OXIDE, subst, name=entry)
            checker(sig)
        except (AbiMismatchError, FormatError) as exc:
            problems.append(str(exc))
            continue
        if sig not in matching:
            matching.append(sig)
    tried = ", ".join("{" + ", ".join(f"{k}: {v if isinstance(v, str) else show_type(v)}"
                                      for k, v in s.items()) + "}" for s in candidates) or "none"
    if len(matching) == 1:
        return matching[0]
    hint = (f"pass generics={{{entry!r}: {{{', '.join(repr(g) + ': ...' for g in fn.generics)}}}}} "
            f"to oxide.load")
    if not matching:
        detail = "; ".join(problems) if problems else "the source names no instantiation"
        raise AbiMismatchError(f"{entry}: no instantiation of generic kernel {fn.name} fits the code "
                               f"(tried {tried}): {detail}; {hint}")
    raise AbiMismatchError(f"{entry}: several instantiations of generic kernel {fn.name} fit the code "
                           f"equally (tried {tried}); {hint}")


def _check_constants(found: SourceSignatures, module: PtxModule | None) -> None:
    """Each ``#[constant]`` the PTX defines must have the size of its Rust type."""
    if module is None:
        return
    sizes = {g.name: TYPE_SIZES.get(g.type, 1) * _count(g.array) for g in module.globals}
    for constant in found.constants.values():
        if constant.symbol not in sizes or constant.type is None:
            continue
        want, have = memory_layout(constant.type)[0], sizes[constant.symbol]
        if have != want:
            raise AbiMismatchError(f"#[constant] {constant.name}: {constant.symbol} has {have} bytes in the "
                                   f"code but {want} in the source (line {constant.line})")


def _count(dims: tuple[int, ...] | None) -> int:
    total = 1
    for dim in dims or ():
        total *= dim
    return total


def load(path: str | Path, source: str | Path | None = None, *, bundle: str | None = None,
         payload: str | None = None, generics: Mapping[str, Mapping[str, str]] | None = None,
         arch: str | None = None) -> Artifact:
    """A typed artifact from cuda-oxide output.

    Parameters
    ----------
    path
        A cuda-oxide output file: ``.ptx``, ``.ll`` (NVVM IR; ``.bc`` its bitcode), ``.ltoir``,
        ``.cubin`` (``.target`` / ``.options`` beside them are read), or a host
        binary / object with an ``.oxart`` section (raw bundle blobs too); or
        the stem ``dir/<crate>`` of loose files, chosen as cuda-host does.
    source
        The kernel crate's Rust file (its ``mod`` files are followed) or crate
        folder; default: a ``.rs`` beside ``path`` with the same stem, else
        ``src/lib.rs`` / ``src/main.rs`` beside it.
    bundle
        The bundle (crate) name to take.  Default: the only bundle; with
        several, every bundle's PTX merged when the crate has generic kernels,
        else the bundle named after the crate (as cuda-host does).
    payload
        ``"cubin"``, ``"ptx"``, ``"nvvm"`` or ``"ltoir"``; default the first a
        bundle has in that order.
    generics
        ``{entry or kernel name: {type parameter: Rust type}}`` for generic
        kernels the source does not instantiate unambiguously.
    arch
        The target NVVM IR / LTO-IR was built for, when neither the bundle nor
        a ``.target`` file records it (cuda-host's ``CUDA_OXIDE_TARGET``).

    Raises
    ------
    FormatError
        Bad ``.oxart`` data or sidecars, a missing bundle or payload, no
        recorded target for NVVM IR / LTO-IR.
    AbiMismatchError
        A signature disagrees with the code, or a typed kernel is missing from it.
    """
    path = Path(path)
    root = _root(Path(source) if source is not None else _default_source(path))
    found = read_signatures(read_crate(root)[0], Convention.OXIDE)
    chosen = read_payload(path, bundle=bundle, payload=payload, generic=bool(found.generic),
                          crate=_crate_name(root))
    view = _view(chosen, arch, str(path))
    names = view.names | chosen.entries
    for signature in found.kernels.values():
        view.check(signature)
    kernels = dict(found.kernels)
    unusable = {name: str(exc) for name, exc in found.failed.items() if name in names}
    for base, fn in found.generic.items():
        for entry in sorted(n for n in names if re.fullmatch(rf"{re.escape(base)}_TID_[0-9a-f]{{32}}", n)):
            try:
                kernels[entry] = _resolve_generic(fn, entry, found, generics or {}, view.check)
            except AbiMismatchError as exc:
                unusable[entry] = str(exc)
    device = {n: s for n, s in found.device_functions.items() if n in view.device}
    missing = set(found.device_functions) - view.device
    if view.module is not None and missing:
        raise AbiMismatchError(f"#[device] functions {sorted(missing)} are not visible .func in the code "
                               f"(got {', '.join(sorted(view.device)) or 'none'})")
    if view.module is not None:
        for signature in device.values():
            check(signature, view.module)
    declared = {f.name for f in view.module.functions if f.kind == "func"} if view.module else set()
    imports = {n: s for n, s in found.imports.items() if n in declared or view.module is None}
    for signature in (s for n, s in imports.items() if n in declared):
        check(signature, view.module)  # type: ignore[arg-type]
    _check_constants(found, view.module)
    kind = _KINDS[chosen.kind]
    lto = kind in (CodeKind.LTOIR, CodeKind.NVVM)
    provenance = Provenance("cuda-oxide", chosen.note, (), view.arch)
    return Artifact(code=chosen.code, kind=kind, arch=view.arch, kernels=kernels, device_functions=device,
                    imports=imports, name=path.stem, provenance=provenance,
                    link_options=link_options(chosen.policy) if lto else (), unusable=unusable)


def constants(source: str | Path) -> dict[str, OxideConstant]:
    """The ``#[constant]`` statics of a cuda-oxide crate, by Rust name, with their module-global symbols.

    Set one on a loaded module with ``module.globals[c.symbol] = value_bytes``
    (what cuda-oxide's ``module.set_<name>`` does).
    """
    root = _root(Path(source))
    return read_signatures(read_crate(root)[0], Convention.OXIDE).constants
