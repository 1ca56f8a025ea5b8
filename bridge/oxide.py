"""ptxbridge.oxide: kernels built by cuda-oxide (the SIMT path of CUDA Rust).

cuda-oxide writes PTX (``cargo oxide build``) or embeds bundles in the host
binary's ``.oxart`` section (PTX, cubin, NVVM IR or LTO-IR payloads).  Neither
carries types, so signatures come from the ``#[kernel]`` functions of the
Rust source, lowered by cuda-oxide's rules (FRONTENDS.md 2, convention
``oxide``), and are checked against the PTX entry or the cubin's KPARAM
records.  Generic kernels are entries ``<name>_TID_<32 hex>``; each is typed by
trying the instantiations the source names (``#[kernel(f32, u64)]``) or the
caller gives (``generics=``) and keeping the one the code agrees with.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path

from ptxbridge.abi.check import check, check_layout
from ptxbridge.abi.cubin import read_cubin
from ptxbridge.abi.errors import AbiMismatchError, FormatError, OptionError
from ptxbridge.abi.oxart import EntryKind, OxartBundle, PayloadKind, read_oxart
from ptxbridge.abi.ptx import read_ptx
from ptxbridge.abi.signature import Convention, Signature
from ptxbridge.artifact import Artifact, CodeKind, Provenance
from ptxbridge.rust.frontend import checked_signatures
from ptxbridge.rust.source import read_crate, split_commas
from ptxbridge.rust.syntax import RustFn, RustType
from ptxbridge.rust.signatures import SourceSignatures, read_signatures
from ptxbridge.rust.types import parse_type, show_type

__all__ = ["load", "merge_ptx"]

_KINDS = {PayloadKind.PTX: CodeKind.PTX, PayloadKind.CUBIN: CodeKind.CUBIN,
          PayloadKind.LTOIR: CodeKind.LTOIR, PayloadKind.NVVM_IR: CodeKind.NVVM}
_PREFERENCE = (PayloadKind.PTX, PayloadKind.CUBIN, PayloadKind.LTOIR, PayloadKind.NVVM_IR)
_PAYLOAD_NAMES = {"ptx": PayloadKind.PTX, "cubin": PayloadKind.CUBIN, "ltoir": PayloadKind.LTOIR,
                  "nvvm": PayloadKind.NVVM_IR}
_HEADER_DIRECTIVE = re.compile(r"\s*\.(version|target|address_size)\b")

Checker = Callable[[Signature], None]


def merge_ptx(texts: list[str]) -> str:
    """One PTX module from several bundles' PTX, as cuda-host's ``load_all_ptx_bundles_merged`` does.

    The first module keeps its header; the ``.version``, ``.target`` and
    ``.address_size`` lines of the others are dropped (a generic kernel
    instantiated in a consuming crate lands in that crate's bundle).
    """
    kept = [texts[0].rstrip("\0")]
    for text in texts[1:]:
        kept += [line for line in text.rstrip("\0").splitlines() if not _HEADER_DIRECTIVE.match(line)]
    return "\n".join(kept) + "\n"


def _selected(bundles: tuple[OxartBundle, ...], bundle: str | None, source: str) -> list[OxartBundle]:
    if bundle is None:
        return list(bundles)
    chosen = [b for b in bundles if b.name == bundle]
    if not chosen:
        names = ", ".join(b.name for b in bundles) or "none"
        raise FormatError(f"no .oxart bundle named {bundle!r} (got {names})", source=source)
    return chosen


def _code(path: Path, bundle: str | None, payload: str | None,
          ) -> tuple[bytes, PayloadKind, str, str, frozenset[str]]:
    """(code, payload kind, target, provenance note, kernel entry records) of a ``.ptx`` file or bundles."""
    data = path.read_bytes()
    if path.suffix == ".ptx":
        return data, PayloadKind.PTX, "", "PTX file", frozenset()
    if payload is not None and payload not in _PAYLOAD_NAMES:
        raise OptionError(f"oxide.load: payload must be one of {', '.join(_PAYLOAD_NAMES)} (got {payload!r})")
    bundles = _selected(read_oxart(data, str(path)), bundle, str(path))
    wanted = (_PAYLOAD_NAMES[payload],) if payload else _PREFERENCE
    if len(bundles) > 1:
        ptx = [b.payload(PayloadKind.PTX) for b in bundles]
        if PayloadKind.PTX not in wanted or None in ptx:
            names = ", ".join(b.name for b in bundles)
            raise FormatError(f"{len(bundles)} .oxart bundles ({names}) can only be merged when every one "
                              f"has a PTX payload; choose one with bundle=", source=str(path))
        targets = {b.target for b in bundles}
        if len(targets) > 1:
            raise FormatError(f".oxart bundles target different archs, choose one with bundle= "
                              f"(got {', '.join(sorted(targets))})", source=str(path))
        merged = merge_ptx([p.data.decode() for p in ptx if p is not None])
        note = "merged .oxart bundles " + ", ".join(b.name for b in bundles)
        return merged.encode(), PayloadKind.PTX, bundles[0].target, note, _entries(bundles)
    only = bundles[0]
    for kind in wanted:
        found = only.payload(kind)
        if found is not None:
            data = found.data.rstrip(b"\0") if kind == PayloadKind.PTX else found.data
            return data, kind, only.target, f".oxart bundle {only.name}", _entries(bundles)
    have = ", ".join(p.kind.name for p in only.payloads) or "none"
    raise FormatError(f".oxart bundle {only.name!r} has no {payload or 'loadable'} payload (got {have})",
                      source=str(path))


def _entries(bundles: list[OxartBundle]) -> frozenset[str]:
    return frozenset(e.symbol for b in bundles for e in b.entries if e.kind == EntryKind.KERNEL)


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
    attr = fn.attr("kernel")
    listed = []
    if attr is not None and len(type_params) == 1:
        parts = [" ".join(t.text for t in part) for part in split_commas(list(attr.args))]
        listed = [p for p in parts if "=" not in p and p != "unchecked_indexing"]
    found: list[dict[str, RustType | str]] = [{type_params[0]: parse_type(t)} for t in listed]
    if not any(_mentions(t, set(fn.generics)) for _, t in fn.params):
        found.append({})
    return found


def _resolve_generic(fn: RustFn, entry: str, found: SourceSignatures,
                     generics: Mapping[str, Mapping[str, str]], checker: Checker | None) -> Signature:
    matching: list[Signature] = []
    problems: list[str] = []
    candidates = _candidates(fn, entry, generics)
    for subst in candidates:
        sig = found.mapper.signature(fn, "kernel", Convention.OXIDE, subst, name=entry)
        try:
            if checker is not None:
                checker(sig)
        except AbiMismatchError as exc:
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


def load(path: str | Path, source: str | Path | None = None, *, bundle: str | None = None,
         payload: str | None = None, generics: Mapping[str, Mapping[str, str]] | None = None) -> Artifact:
    """A typed artifact from cuda-oxide output.

    Parameters
    ----------
    path
        A ``.ptx`` file from cuda-oxide, or a host binary / object whose
        ``.oxart`` section holds bundles (raw concatenated bundle blobs work too).
    source
        The kernel crate's Rust file (its ``mod`` files are followed) or crate
        folder; default: a ``.rs`` beside ``path`` with the same stem.
    bundle
        The bundle (crate) name to take.  Default: the only bundle, or all
        bundles' PTX merged into one module (as cuda-host does).
    payload
        ``"ptx"``, ``"cubin"``, ``"ltoir"`` or ``"nvvm"``; default the first
        present in that order.  NVVM IR and LTO-IR cannot be inspected: their
        kernels are checked against the bundle's entry records only, and the
        parameter layout is checked later, on the linked cubin.
    generics
        ``{entry or kernel name: {type parameter: Rust type}}`` for generic
        kernels the source does not instantiate unambiguously.

    Raises
    ------
    FormatError
        Bad ``.oxart`` data, a missing bundle or payload, or a source type
        ptxbridge cannot type.
    AbiMismatchError
        A ``#[kernel]`` signature disagrees with the code, or is missing from it.
    """
    path = Path(path)
    source_path = Path(source) if source is not None else path.with_suffix(".rs")
    if not source_path.exists():
        raise FormatError("the Rust source of these kernels is needed for their signatures; pass source=",
                          source=str(source_path))
    code, kind, target, note, entries = _code(path, bundle, payload)
    root = source_path / "src/lib.rs" if source_path.is_dir() else source_path
    found = read_signatures(read_crate(root)[0], Convention.OXIDE)
    checker, names, arch, device, imports = _inspect(code, kind, target, entries, found, str(path))
    kernels = dict(found.kernels)
    for signature in kernels.values():
        if checker is not None:
            checker(signature)
        elif signature.name not in names:
            raise AbiMismatchError(f"{signature.name}: the {kind.name} payload's entry records do not list "
                                   f"it (got {', '.join(sorted(names)) or 'none'})")
    for base, fn in found.generic.items():
        instances = [n for n in names if re.fullmatch(rf"{re.escape(base)}_TID_[0-9a-f]{{32}}", n)]
        for entry in sorted(instances):
            kernels[entry] = _resolve_generic(fn, entry, found, generics or {}, checker)
    return Artifact(code=code, kind=_KINDS[kind], arch=arch, kernels=kernels, device_functions=device,
                    imports=imports, name=path.stem,
                    provenance=Provenance("cuda-oxide", note, (), arch))


_Inspected = tuple[Checker | None, set[str], str | None, dict[str, Signature], dict[str, Signature]]


def _inspect(code: bytes, kind: PayloadKind, target: str, entries: frozenset[str],
             found: SourceSignatures, source: str) -> _Inspected:
    """How to check this payload, its kernel names, arch, and checked device functions/imports."""
    if kind == PayloadKind.PTX:
        module = read_ptx(code, source)
        _, device, imports = checked_signatures(
            SourceSignatures({}, found.device_functions, found.imports, {}, found.mapper), module)
        names = {f.name for f in module.entries}
        return (lambda sig: check(sig, module)), names, (module.target[0] if module.target else target
                                                          ) or None, device, imports
    if kind == PayloadKind.CUBIN:
        cubin = read_cubin(code, source)
        kernels = {k.name: k for k in cubin.kernels}

        def check_cubin(sig: Signature) -> None:
            if sig.name not in kernels:
                raise AbiMismatchError(f"{sig.name}: the cubin has no kernel of that name "
                                       f"(got {', '.join(sorted(kernels)) or 'none'})")
            check_layout(sig, kernels[sig.name].declared_params(), f"cubin KPARAM of {sig.name}")

        device = {n: s for n, s in found.device_functions.items()
                  if any(f.name == n for f in cubin.device_functions)}
        return check_cubin, set(kernels), cubin.arch, device, {}
    # NVVM IR / LTO-IR: opaque bitcode; the bundle's entry records name the kernels
    return None, set(entries), target or None, dict(found.device_functions), dict(found.imports)
