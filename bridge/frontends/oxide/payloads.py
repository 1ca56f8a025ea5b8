"""cuda-oxide output, found and chosen as cuda-oxide's own host finds and chooses it.

Two ways cuda-oxide leaves device code behind:

- **Loose files** next to the crate (``cargo oxide build``, ``emit-ltoir``):
  ``<crate>.ptx``, ``<crate>.ll`` (NVVM IR text), ``<crate>.ltoir``,
  ``<crate>.cubin`` (and NVVM IR bitcode ``<crate>.bc`` when named: cuda-host
  never picks one), with ``<crate>.target`` (first line the arch; a second
  line ``compile-options=v1`` says ``<crate>.options`` is required) and
  ``<crate>.options`` (the compile policy).  Given a stem rather than a file,
  the choice is cuda-host's ``load_kernel_module``: a recorded target makes
  NVVM IR, then LTO-IR, the output; without one, PTX, then NVVM IR, LTO-IR,
  cubin (``cuda-host/src/ltoir.rs``, ``select_file_artifact``).
- **``.oxart`` bundles** in a host binary (``crates/oxide-artifacts``).  One
  bundle yields its cubin, else PTX, else NVVM IR, else LTO-IR (cuda-host's
  ``load_bundle``).  Of several bundles, a crate with generic kernels loads
  every bundle's PTX merged into one module, bundles without PTX skipped
  (``load_all_ptx_bundles_merged``); any other crate loads the bundle named
  after it (``load_embedded_module``) (``cuda-host/src/embedded.rs``).

NVVM IR and LTO-IR are target-specific: the target is the bundle's or the
``.target`` file's; the legacy bundle targets ``libdevice`` / ``nvvm-ir`` and
loose files without ``.target`` need it from the caller (cuda-host's
``CUDA_OXIDE_TARGET``).  A recorded target wins over the caller's.  LTO-IR
also records its target in its own header (:mod:`ptxbridge.abi.ltoir`), so it
needs neither, and one that disagrees with the header is refused; the header has
no ``f`` suffix, so a recorded family target (``sm_100f``) is what keeps it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ptxbridge.abi.errors import FormatError, OptionError, TargetError
from ptxbridge.abi.oxart import EntryKind, OxartBundle, OxartOptions, PayloadKind, read_oxart
from ptxbridge.abi.sniff import sniff
from ptxbridge.abi.targets import parse_target

__all__ = ["BUNDLE_PREFERENCE", "PAYLOAD_NAMES", "Payload", "bundle_choice", "load_rule", "merge_ptx",
           "read_payload", "read_sidecars"]

BUNDLE_PREFERENCE = (PayloadKind.CUBIN, PayloadKind.PTX, PayloadKind.NVVM_IR, PayloadKind.LTOIR)
PAYLOAD_NAMES = {"cubin": PayloadKind.CUBIN, "ptx": PayloadKind.PTX, "nvvm": PayloadKind.NVVM_IR,
                 "ltoir": PayloadKind.LTOIR}
_LOOSE = {".ptx": PayloadKind.PTX, ".ll": PayloadKind.NVVM_IR, ".ltoir": PayloadKind.LTOIR,
          ".cubin": PayloadKind.CUBIN}
_GIVEN = _LOOSE | {".bc": PayloadKind.NVVM_IR}  # NVVM IR bitcode: loaded when named, never chosen from a stem
_TARGET_MARKER = "compile-options=v1"  # oxide-artifacts COMPILE_OPTIONS_TARGET_MARKER
_LEGACY_TARGETS = ("libdevice", "nvvm-ir")
_HEADER_DIRECTIVE = re.compile(r"\s*\.(version|target|address_size)\b")


@dataclass(frozen=True, slots=True)
class Payload:
    """The device code ``ptxbridge.oxide.load`` types.

    ``target`` is the ``sm_XX`` it was built for (None: not recorded); ``policy`` the compile
    policy later stages must keep; ``entries`` the kernel names a bundle records; ``note``
    says where it came from and why it was chosen.
    """

    code: bytes
    kind: PayloadKind
    target: str | None
    policy: OxartOptions
    note: str
    entries: frozenset[str] = frozenset()


def _sm(target: str, source: str) -> str | None:
    """A recorded target as ``sm_XX``; None for the legacy no-target spellings."""
    if target in _LEGACY_TARGETS:
        return None
    try:
        return parse_target(target.strip()).sm
    except TargetError:
        raise FormatError(f"target must be sm_XX or compute_XX (got {target!r})", source=source) from None


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


def bundle_choice(bundle: OxartBundle, payload: str | None = None) -> PayloadKind | None:
    """The payload cuda-host loads from ``bundle`` (or the one ``payload`` names), if present."""
    wanted = (PAYLOAD_NAMES[payload],) if payload else BUNDLE_PREFERENCE
    return next((kind for kind in wanted if bundle.payload(kind) is not None), None)


def load_rule(bundles: tuple[OxartBundle, ...]) -> str:
    """What cuda-host loads from these bundles, in words (``ptxbridge inspect`` shows it)."""
    if len(bundles) == 1:
        kind = bundle_choice(bundles[0])
        return f"loads bundle {bundles[0].name}'s {kind.name if kind else 'nothing (no payload)'}"
    merged = [b.name for b in bundles if b.payload(PayloadKind.PTX) is not None]
    return (f"a crate with generic kernels loads the PTX of {', '.join(merged) or 'no bundle'} merged; "
            "any other loads the bundle named after it")


def _entries(bundles: list[OxartBundle]) -> frozenset[str]:
    return frozenset(e.symbol for b in bundles for e in b.entries if e.kind == EntryKind.KERNEL)


def _one_bundle(chosen: OxartBundle, payload: str | None, source: str, why: str) -> Payload:
    kind = bundle_choice(chosen, payload)
    if kind is None:
        have = ", ".join(p.kind.name for p in chosen.payloads) or "none"
        raise FormatError(f".oxart bundle {chosen.name!r} has no {payload or 'loadable'} payload "
                          f"(got {have})", source=source)
    data = chosen.payload(kind).data  # type: ignore[union-attr]
    rest = [k.name for k in BUNDLE_PREFERENCE if k != kind and chosen.payload(k) is not None]
    note = f".oxart bundle {chosen.name} ({why}): {kind.name}" + (f", preferred over {', '.join(rest)}"
                                                                     if rest and not payload else "")
    return Payload(data.rstrip(b"\0") if kind == PayloadKind.PTX else data, kind, _sm(chosen.target, source),
                   chosen.options, note, _entries([chosen]))


def _merged(bundles: tuple[OxartBundle, ...], source: str) -> Payload:
    with_ptx = [b for b in bundles if b.payload(PayloadKind.PTX) is not None]
    if not with_ptx:
        raise FormatError(f"{len(bundles)} .oxart bundles and none has PTX to merge (generic kernels load "
                          "merged PTX); choose one with bundle=", source=source)
    targets = {b.target for b in with_ptx}
    if len(targets) > 1:
        raise FormatError(f".oxart bundles target different archs, choose one with bundle= "
                          f"(got {', '.join(sorted(targets))})", source=source)
    merged = merge_ptx([b.payload(PayloadKind.PTX).data.decode() for b in with_ptx])  # type: ignore[union-attr]
    skipped = [b.name for b in bundles if b not in with_ptx]
    note = ("merged PTX of .oxart bundles " + ", ".join(b.name for b in with_ptx)
            + " (the crate has generic kernels)" + (f"; {', '.join(skipped)} have no PTX" if skipped else ""))
    return Payload(merged.encode(), PayloadKind.PTX, _sm(with_ptx[0].target, source), with_ptx[0].options,
                   note, _entries(with_ptx))


def _from_bundles(data: bytes, source: str, bundle: str | None, payload: str | None,
                  generic: bool, crate: str | None) -> Payload:
    bundles = read_oxart(data, source)
    names = ", ".join(b.name for b in bundles) or "none"
    if bundle is not None:
        chosen = [b for b in bundles if b.name == bundle]
        if not chosen:
            raise FormatError(f"no .oxart bundle named {bundle!r} (got {names})", source=source)
        return _one_bundle(chosen[0], payload, source, "bundle= given")
    if not bundles:
        raise FormatError("holds no .oxart bundles", source=source)
    if len(bundles) == 1:
        return _one_bundle(bundles[0], payload, source, "the only bundle")
    if generic and payload in (None, "ptx"):
        return _merged(bundles, source)
    named = [b for b in bundles if b.name == crate]
    if not named:
        raise FormatError(f"{len(bundles)} .oxart bundles ({names}) and none is named after the crate "
                          f"({crate!r}); choose one with bundle=", source=source)
    return _one_bundle(named[0], payload, source, "named after the crate")


def read_sidecars(path: Path) -> tuple[str | None, OxartOptions, str]:
    """(target as sm_XX or None, policy, note) from ``<stem>.target`` and ``<stem>.options``.

    Mirrors cuda-host's ``read_emitted_target``: a ``.target`` with the
    ``compile-options=v1`` line requires ``.options``; without ``.target`` the
    ``.options`` file, if present, still gives the policy.
    """
    target_path, options_path = path.with_suffix(".target"), path.with_suffix(".options")
    policy = OxartOptions()
    if options_path.is_file():
        policy = OxartOptions.from_sidecar(options_path.read_text(encoding="utf-8"), str(options_path))
    if not target_path.is_file():
        return None, policy, f"{path.name}, no {target_path.name}"
    lines = target_path.read_text(encoding="utf-8").splitlines()
    if not lines or len(lines) > 2 or (len(lines) == 2 and lines[1] != _TARGET_MARKER):
        raise FormatError(f"must hold the target and at most the line {_TARGET_MARKER!r} "
                          f"(got {lines!r})", source=str(target_path))
    if len(lines) == 2 and not options_path.is_file():
        raise FormatError(f"records {_TARGET_MARKER}, so {options_path.name} is required and missing",
                          source=str(target_path))
    used = target_path.name + (f" and {options_path.name}" if options_path.is_file() else "")
    return _sm(lines[0], str(target_path)), policy, f"{path.name} with {used}"


def _select_loose(stem: Path) -> Path:
    """cuda-host's ``select_file_artifact`` over ``<stem>.{ptx,ll,ltoir,cubin}``."""
    present = {suffix: stem.with_suffix(suffix) for suffix in _LOOSE if stem.with_suffix(suffix).is_file()}
    recorded = stem.with_suffix(".target").is_file()
    order = (".ll", ".ltoir") if recorded else (".ptx", ".ll", ".ltoir", ".cubin")
    for suffix in order:
        if suffix in present:
            return present[suffix]
    what = (f"{stem.name}.target records NVVM output but neither {stem.name}.ll nor {stem.name}.ltoir exists"
            if recorded else f"none of {', '.join(stem.name + s for s in _LOOSE)} exists")
    raise FormatError(f"no cuda-oxide output: {what}", source=str(stem))


def read_payload(path: Path, *, bundle: str | None = None, payload: str | None = None,
                 generic: bool = False, crate: str | None = None) -> Payload:
    """The payload at ``path``: a loose file, a stem of loose files, a host binary or raw bundles.

    ``generic``: the crate has generic kernels (bundles merge); ``crate``: its name (bundle choice).
    """
    if payload is not None and payload not in PAYLOAD_NAMES:
        raise OptionError(f"oxide.load: payload must be one of {', '.join(PAYLOAD_NAMES)} (got {payload!r})")
    if not path.is_file():
        path = _select_loose(path)
    data = path.read_bytes()
    kind = _GIVEN.get(path.suffix)
    if kind is None and sniff(data, str(path)) == "oxart":
        return _from_bundles(data, str(path), bundle, payload, generic, crate)
    if kind is None:
        raise FormatError("expected cuda-oxide output: .ptx, .ll or .bc, .ltoir, .cubin, a host binary "
                          "with an .oxart section, or .oxart bundles", source=str(path))
    if payload is not None and PAYLOAD_NAMES[payload] != kind:
        raise OptionError(f"oxide.load: payload={payload!r} but {path.name} is {kind.name}")
    if kind in (PayloadKind.NVVM_IR, PayloadKind.LTOIR):
        target, policy, note = read_sidecars(path)
        return Payload(data, kind, target, policy, note)
    return Payload(data, kind, None, OxartOptions(), f"{path.name}")
