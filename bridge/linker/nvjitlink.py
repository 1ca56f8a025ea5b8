"""The linker: artifacts from any frontend -> one cubin for one arch, checked before nvJitLink runs.

Order of work in :func:`link`: turn every input into an :class:`Artifact`;
pick the arch and LTO (pure functions below); match each imported device
function with the one artifact that exports it and compare their lowered
layouts (a :class:`LinkError` naming both sides, not an nvJitLink log);
refuse PTX newer than nvJitLink reads; then link with nvJitLink (pip wheel,
``cuda.bindings.nvjitlink``), through the disk cache.  The result is always
a cubin for the exact arch, so PTX newer than the driver never reaches the
driver (docs/conventions.md, "The driver side").
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ptxbridge import cache
from ptxbridge.abi.cubin import read_cubin
from ptxbridge.abi.errors import LinkError, OptionError, ToolchainError
from ptxbridge.abi.signature import Signature
from ptxbridge.abi.targets import Target, parse_target
from ptxbridge.artifacts.artifact import Artifact, CodeKind, artifact_from_bytes, artifact_from_file
from ptxbridge.artifacts.image import Image
from ptxbridge.artifacts.signatures import with_cubin_facts
from ptxbridge.linker.device_runtime import device_runtime, is_device_runtime, runtime_calls
from ptxbridge.linker.embedded import CONTAINERS, embedded_code
from ptxbridge.linker.finalize import as_ltoir, check_ltoir_targets, policy_args
from ptxbridge.linker.options import LinkOptions, nvjitlink_args, use_lto, with_register_cap
from ptxbridge.linker.symbols import check_symbols, parsed_ptx
from ptxbridge.linker.target import (
    choose_arch,
    device_arch,
    driver_version,
    normalize_arch,
    portable_target,
    ptx_isa_supported,
)

__all__ = ["as_artifact", "kernel_registers", "link", "load", "nvjitlink_version", "ptx_from_ltoir"]

@functools.cache
def nvjitlink_version() -> tuple[int, int]:
    """The nvJitLink library's (major, minor); a :class:`ToolchainError` when it is missing."""
    try:
        from cuda.bindings import nvjitlink

        return tuple(nvjitlink.version())  # type: ignore[return-value]
    except Exception as exc:
        raise ToolchainError(f"nvJitLink is not available: pip install nvidia-nvjitlink (got {exc})") from exc


def _check_isa(artifacts: Sequence[Artifact]) -> None:
    """Refuse PTX newer than nvJitLink reads: the one case no cubin can be made here."""
    linker = nvjitlink_version()
    readable = ptx_isa_supported(linker)
    for artifact in artifacts:
        if artifact.kind != CodeKind.PTX:
            continue
        version = parsed_ptx(artifact.code, artifact.name).version
        if version > readable:
            driver = driver_version()
            where = (f"the driver (CUDA {driver[0]}.{driver[1]}) JIT-compiles up to "
                     f"{'.'.join(map(str, ptx_isa_supported(driver)))}" if driver else "there is no driver")
            raise LinkError(f"{artifact.name}: PTX ISA {version[0]}.{version[1]} is newer than nvJitLink "
                            f"{linker[0]}.{linker[1]} reads ({readable[0]}.{readable[1]}) and {where}; "
                            "upgrade the nvidia-nvjitlink wheel, or compile the input for an older ISA")


_INPUT_TYPES = {CodeKind.PTX: "PTX", CodeKind.LTOIR: "LTOIR", CodeKind.CUBIN: "CUBIN",
                CodeKind.FATBIN: "FATBIN", CodeKind.OBJECT: "OBJECT", CodeKind.LIBRARY: "LIBRARY"}


def _run_nvjitlink(args: list[str], artifacts: Sequence[Artifact]) -> bytes:
    """Link with nvJitLink; returns ``json({"log": info log}) + b"\\n" + cubin`` (PTX with ``-ptx``)."""
    from cuda.bindings import nvjitlink

    handle = nvjitlink.create(len(args), args)
    try:
        try:
            for artifact in artifacts:
                kind = getattr(nvjitlink.InputType, _INPUT_TYPES[artifact.kind])
                nvjitlink.add_data(handle, kind, artifact.code, len(artifact.code), artifact.name)
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as exc:
            names = ", ".join(a.name for a in artifacts)
            raise LinkError(f"nvJitLink failed linking {names} with {' '.join(args)}: {exc}",
                            log=_log(nvjitlink, handle, "error")) from None
        which = "ptx" if "-ptx" in args else "cubin"
        output = bytearray(getattr(nvjitlink, f"get_linked_{which}_size")(handle))
        getattr(nvjitlink, f"get_linked_{which}")(handle, output)
        log = json.dumps({"log": _log(nvjitlink, handle, "info")}).encode()
        code = bytes(output).rstrip(b"\0") if which == "ptx" else bytes(output)  # an ELF may end in zeros
        return log + b"\n" + code
    finally:
        nvjitlink.destroy(handle)


def _log(nvjitlink: Any, handle: int, which: str) -> str:
    size = getattr(nvjitlink, f"get_{which}_log_size")(handle)
    buffer = bytearray(size)
    getattr(nvjitlink, f"get_{which}_log")(handle, buffer)
    return bytes(buffer).rstrip(b"\0").decode(errors="replace").strip()


def as_artifact(item: Artifact | bytes | str | os.PathLike[str], index: int = 0) -> Artifact:
    """An input of :func:`link` as an artifact: artifacts as they are, paths and bytes read by content."""
    if isinstance(item, Artifact):
        return item
    if isinstance(item, (str, os.PathLike)):
        return artifact_from_file(item)
    if isinstance(item, (bytes, bytearray, memoryview)):
        name = f"<input {index}>"
        return artifact_from_bytes(bytes(item), source=name, name=name)
    raise TypeError(f"link inputs must be Artifacts, paths or bytes (got {type(item).__name__})")


def link(inputs: Iterable[Artifact | bytes | str | os.PathLike[str]],
         arch: str | tuple[int, int] | Sequence[str] | None = None, lto: bool | None = None, *,
         options: LinkOptions | None = None) -> Image:
    """Link artifacts from any frontend into one :class:`Image`.

    Parameters
    ----------
    inputs
        Artifacts, paths (read with :func:`ptxbridge.artifacts.artifact.artifact_from_file`)
        or bytes of PTX, LTO-IR, cubin, fatbin, host objects and ``.a``
        libraries (recognised by content).
    arch
        Target (``"sm_90"``); default: the first GPU's arch, else ``sm_90``;
        raised to ``sm_XXa`` when an input needs it (:func:`choose_arch`).  A
        list of targets (``["sm_80", "sm_90", "sm_100"]``) links a cubin for
        each (``Image.cubins``); the PTX is the oldest plain target's (one
        without ``a`` / ``f``: :func:`portable_target`), so a GPU with none of
        them can JIT-compile it (``Image.load``).  Inputs must then be built
        for that target (PTX and LTO-IR link for newer ones).
    lto
        Link-time optimisation; ``None`` turns it on when any input is or holds LTO-IR (:func:`use_lto`).
    options
        :class:`LinkOptions`.

    Raises
    ------
    LinkError
        An import has no exporter or disagrees with it (naming both sides),
        a PTX input is newer than nvJitLink reads, or nvJitLink failed (its
        log is ``.log``).
    """
    targets = _targets(arch)
    if targets is not None:
        return _link_targets([as_artifact(item, i) for i, item in enumerate(inputs)], targets, lto, options)
    options = options or LinkOptions()
    artifacts = _with_libraries([as_artifact(item, i) for i, item in enumerate(inputs)])
    if not artifacts:
        raise LinkError("link: needs at least one input (got none)")
    for artifact in artifacts:
        if artifact.kind not in _INPUT_TYPES and artifact.kind != CodeKind.NVVM:
            raise LinkError(f"{artifact.name}: nvJitLink cannot link {artifact.kind.value} input "
                            f"(got kind={artifact.kind.value!r})")
    kernels: dict[str, Signature] = {}
    device_functions: dict[str, Signature] = {}
    unusable: dict[str, str] = {}
    raises: dict[str, Any] = {}
    for artifact in artifacts:
        kernels.update(artifact.kernels)
        device_functions.update(artifact.device_functions)
        unusable.update(artifact.unusable)
        raises.update(artifact.raises)
    executable = _executable_cubin(artifacts, arch)
    if executable is not None:
        facts = _usable(with_cubin_facts(kernels, executable.code, executable.name), unusable)
        return Image(executable.code, executable.arch, facts, device_functions, unusable=unusable,
                     cpu_unavailable=_machine_code_only(artifacts), raises=raises,
                     name_expressions=_name_expressions(artifacts, facts))
    arch = choose_arch(arch, None if arch else device_arch(0), (a.arch for a in artifacts))
    artifacts = [as_ltoir(a, arch) for a in artifacts]  # NVVM IR through libNVVM
    check_ltoir_targets(artifacts, arch)
    lto = use_lto(artifacts) if lto is None else lto
    options = with_register_cap(options, artifacts)
    args = nvjitlink_args(options, arch, lto)  # OptionError for options that contradict lto
    args += policy_args(artifacts, options)
    check_symbols(artifacts)
    _check_isa(artifacts)
    calls = runtime_calls([parsed_ptx(a.code, a.name) for a in artifacts if a.kind == CodeKind.PTX])
    with_runtime = bool(calls) and not any(map(is_device_runtime, artifacts))
    if with_runtime:
        artifacts.append(device_runtime())  # device-side launches: nvJitLink does not add it itself
    version = nvjitlink_version()
    # "whole-cubin": entries made while cubins lost their trailing zero bytes are not reused
    parts: list[str | bytes] = ["link", "whole-cubin", f"{version[0]}.{version[1]}", *args, "\0"]
    for artifact in artifacts:
        parts += [artifact.kind.value, artifact.code]
    blob = cache.cached("link", cache.key(*parts), lambda: _run_nvjitlink(args, artifacts))
    header, _, cubin = blob.partition(b"\n")
    facts = _usable(with_cubin_facts(kernels, cubin, "<linked cubin>"), unusable)
    hidden = _library_kernels(artifacts)
    if with_runtime or hidden:  # the device runtime's (static) and libraries' kernels are not the user's
        facts = {name: sig for name, sig in facts.items()
                 if not name.startswith("__nv_static_") and name not in hidden}
    ptx, cpu_unavailable = _cpu_ptx(artifacts, arch, args)
    return Image(cubin, arch, facts, device_functions, ptx, json.loads(header)["log"], unusable=unusable,
                 cpu_unavailable=cpu_unavailable, raises=raises,
                 name_expressions=_name_expressions(artifacts, facts))


def _targets(arch: Any) -> list[Target] | None:
    """The targets of a list of them (``(9, 0)`` is one target, not a list); None for one target."""
    if not isinstance(arch, (list, tuple)) or (len(arch) == 2 and all(isinstance(v, int) for v in arch)):
        return None
    if not arch:
        raise OptionError("link: arch= lists no target (got an empty list); give one or more, e.g. "
                          "['sm_80', 'sm_90']")
    return sorted({parse_target(a, like="'sm_90', 'sm_90a' or (9, 0)") for a in arch})


def _link_targets(artifacts: list[Artifact], targets: list[Target], lto: bool | None,
                  options: LinkOptions | None) -> Image:
    """One link per target, oldest first: the :func:`portable_target`'s image (its PTX, its
    ``arch``), with every target's cubin, its own first (two targets an input raises to one ``a``
    arch are one)."""
    images = [link(artifacts, target.sm, lto, options=options) for target in targets]
    portable = images[targets.index(portable_target(targets))]
    cubins = {image.arch: image.cubin for image in [portable, *images] if image.cubin is not None}
    log = "\n".join(f"{image.arch}: {image.log}" for image in images if image.log)
    return replace(portable, cubins=cubins, log=log)


def ptx_from_ltoir(inputs: Sequence[Artifact], arch: str, args: Sequence[str]) -> bytes:
    """One PTX module from the LTO-IR ``inputs``: ``nvJitLink -arch -lto -ptx`` with ``args``, cached.

    nvJitLink makes PTX from LTO-IR inputs only; the CPU loader interprets it, and
    :func:`ptxbridge.oxide.load` reads an LTO-IR payload's kernels from it.
    """
    full = [f"-arch={arch}", "-lto", "-ptx", *(a for a in args if a not in ("-lto", f"-arch={arch}"))]
    parts: list[str | bytes] = ["ptx-from-ltoir", *full, "\0"]
    for artifact in inputs:
        parts += [artifact.name, artifact.code]
    blob = cache.cached("ltoir-ptx", cache.key(*parts), lambda: _run_nvjitlink(full, inputs))
    return blob.partition(b"\n")[2]


def kernel_registers(code: bytes, kind: CodeKind, arch: str, name: str,
                     options: Sequence[str] = ()) -> dict[str, int]:
    """The registers of each kernel of one PTX or LTO-IR module compiled alone for ``arch`` (with the
    nvJitLink ``options`` it must be linked with), cached."""
    args = [f"-arch={arch}", *(["-lto"] if kind == CodeKind.LTOIR else []), *options]
    artifact = Artifact(code=code, kind=kind, arch=arch, name=name)
    blob = cache.cached("link", cache.key("registers", *args, code), lambda: _run_nvjitlink(args, [artifact]))
    cubin = read_cubin(blob.partition(b"\n")[2], name)
    return {k.name: k.registers or 0 for k in cubin.kernels}


def _name_expressions(artifacts: Sequence[Artifact], kernels: Mapping[str, Signature]) -> dict[str, str]:
    """The inputs' NVRTC name expressions of linked kernels; an expression two inputs lowered to
    different symbols is left out (the module then finds neither by it, only by symbol)."""
    found: dict[str, str] = {}
    clashing: set[str] = set()
    for artifact in artifacts:
        for expression, symbol in artifact.name_expressions.items():
            if found.setdefault(expression, symbol) != symbol:
                clashing.add(expression)
    return {e: symbol for e, symbol in found.items() if e not in clashing and symbol in kernels}


def _usable(facts: dict[str, Signature], unusable: dict[str, str]) -> dict[str, Signature]:
    """The linked kernels less those no signature could be made for (asking for one raises why)."""
    return {name: sig for name, sig in facts.items() if name not in unusable}


_NOT_FOR_PTX = ("-Xptxas=", "-maxrregcount=", "-split-compile=", "-verbose")


def _cpu_ptx(artifacts: Sequence[Artifact], arch: str, args: Sequence[str]) -> tuple[tuple[bytes, ...],
                                                                                   dict[str, str]]:
    """The PTX the CPU loader interprets: PTX inputs, one PTX image of each container piece
    (:func:`embedded_code`), and the LTO-IR inputs and pieces finalised to PTX together; with the
    kernels that have none, each with the reason."""
    ptx = [a.code for a in artifacts if a.kind == CodeKind.PTX]
    lto = [a for a in artifacts if a.kind == CodeKind.LTOIR]
    unavailable = _machine_code_only(artifacts)
    containers = {id(a): embedded_code(a, arch) for a in artifacts
                  if a.kind in CONTAINERS and not is_device_runtime(a)}
    for found in containers.values():
        ptx += found.ptx
        lto += found.ltoir
    if lto:
        try:
            ptx.append(ptx_from_ltoir(lto, arch, [a for a in args if not a.startswith(_NOT_FOR_PTX)]))
        except LinkError as exc:
            reason = f"finalising its LTO-IR to PTX for the CPU loader failed: {exc}"
            unavailable.update({name: reason for a in artifacts if a.kind == CodeKind.LTOIR or
                                (id(a) in containers and containers[id(a)].ltoir) for name in a.kernels})
    entries = {f.name for code in ptx for f in parsed_ptx(code, "<PTX for the CPU loader>").functions
               if f.kind == "entry"}
    for artifact in (a for a in artifacts if id(a) in containers):
        missing = containers[id(artifact)].missing(artifact, entries)
        unavailable.update({name: why for name, why in missing.items() if name not in unavailable})
    return tuple(ptx), unavailable


def _machine_code_only(artifacts: Sequence[Artifact]) -> dict[str, str]:
    """Kernels that come only as a cubin: no PTX to interpret."""
    return {name: f"it comes from {a.name}, a cubin (machine code), and the CPU loader interprets PTX; link "
                  "its PTX, LTO-IR or NVVM IR instead"
            for a in artifacts if a.kind is CodeKind.CUBIN for name in a.kernels}


def _with_libraries(artifacts: list[Artifact]) -> list[Artifact]:
    """The inputs, then every library they carry (``Artifact.libraries``), each code once."""
    seen = {(a.kind, a.code) for a in artifacts}
    result = list(artifacts)
    for library in (lib for a in artifacts for lib in a.libraries):
        if (library.kind, library.code) not in seen:
            seen.add((library.kind, library.code))
            result.append(library)
    return result


def _library_kernels(artifacts: Sequence[Artifact]) -> set[str]:
    """Entries only carried libraries define (numba's ``NRT_MemSys_set``): not the user's to launch."""
    libraries = {id(lib) for a in artifacts for lib in a.libraries}
    return {f.name for a in artifacts if id(a) in libraries and a.kind == CodeKind.PTX
            for f in parsed_ptx(a.code, a.name).functions if f.kind == "entry"}


def _executable_cubin(artifacts: Sequence[Artifact], arch: str | None) -> Artifact | None:
    """A lone executable (non-relocatable) cubin is the image itself; with other inputs it is an error.

    nvJitLink silently drops executable cubins from a link (measured with
    nvJitLink 13.5: the kernel is missing from the output), and tileiras and
    plain NVRTC cubins are executable.
    """
    found = [a for a in artifacts if a.kind == CodeKind.CUBIN and not read_cubin(a.code, a.name).relocatable]
    if not found:
        return None
    if len(artifacts) > 1:
        raise LinkError(f"{found[0].name}: an executable (non-relocatable) cubin cannot be linked with other "
                        "inputs (nvJitLink drops it); load it alone, or rebuild it with relocatable device "
                        "code (-rdc)")
    built = read_cubin(found[0].code, found[0].name).arch
    if arch is not None and choose_arch(arch, None, [built]) != built:
        raise LinkError(f"{found[0].name}: an executable cubin for {built} cannot be relinked for "
                        f"{normalize_arch(arch)}; pass arch={built!r} or rebuild it")
    return replace(found[0], arch=built)


_LOADER_OPTIONS = ("max_steps", "sanitize")  # keywords of load() that go to the loader, not to link()


def load(inputs: Iterable[Artifact | bytes | str | os.PathLike[str]], device: Any = None, *,
         check_aliasing: bool = True, nvtx: bool | None = None, panics: str = "raise",
         **link_kwargs: Any) -> Any:
    """Link ``inputs`` and load the image on ``device`` in one step (see :meth:`Image.load`;
    ``check_aliasing=False``: no no-alias check at launch, docs/safety.md; ``nvtx=True``: an NVTX
    range per launch; ``panics="defer"``: Rust panics raised at ``Module.synchronize()``).

    With an explicit CUDA ``device`` (``N``, ``"cuda:N"``, a torch device) and
    no ``arch=``, the image is linked for that GPU's arch.  ``max_steps=`` is
    the CPU loader's watchdog (interpreter steps per batch of blocks; None: none) and
    ``sanitize=`` its compute-sanitizer tools (``"racecheck"``, ``"initcheck"``).
    """
    from ptxbridge.loaders import parse_device

    options = {name: link_kwargs.pop(name) for name in _LOADER_OPTIONS if name in link_kwargs}
    parsed = parse_device(device)
    if parsed is not None and parsed[0] == "cuda" and link_kwargs.get("arch") is None:
        link_kwargs["arch"] = device_arch(parsed[1])
    return link(inputs, **link_kwargs).load(device, check_aliasing=check_aliasing, nvtx=nvtx, panics=panics,
                                            **options)
