"""The linker: artifacts from any frontend -> one cubin for one arch, checked before nvJitLink runs.

Order of work in :func:`link`: turn every input into an :class:`Artifact`;
pick the arch and LTO (pure functions below); match each imported device
function with the one artifact that exports it and compare their lowered
layouts (a :class:`LinkError` naming both sides, not an nvJitLink log);
refuse PTX newer than nvJitLink reads; then link with nvJitLink (pip wheel,
``cuda.bindings.nvjitlink``), through the disk cache.  The result is always
a cubin for the exact arch, so PTX newer than the driver never reaches the
driver (FRONTENDS.md 4, BASELINES.md "What loads on this driver").
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ptxbridge import cache
from ptxbridge.abi.check import check
from ptxbridge.abi.cubin import read_cubin
from ptxbridge.abi.errors import AbiMismatchError, LinkError, OptionError, ToolchainError
from ptxbridge.abi.kinds import ParamType, Pointer, Scalar
from ptxbridge.abi.lowering import lower_param, lower_params
from ptxbridge.abi.ptx import PtxModule, read_ptx
from ptxbridge.abi.signature import Signature

from .artifact import Artifact, CodeKind
from .device_runtime import device_runtime, runtime_calls
from .files import artifact_from_bytes, artifact_from_file, cubin_signatures
from .image import Image
from .nvrtc import FALLBACK_ARCH, device_arch, normalize_arch
from .ptx_isa import max_ptx_isa

__all__ = ["LinkOptions", "check_symbols", "choose_arch", "link", "load", "nvjitlink_args",
           "nvjitlink_version", "ptx_isa_supported", "use_lto", "with_cubin_facts"]

_LTO_KINDS = (CodeKind.LTOIR,)
_OPAQUE_KINDS = (CodeKind.OBJECT, CodeKind.LIBRARY, CodeKind.FATBIN)


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkOptions:
    """nvJitLink options (``nvJitLink`` documentation, "Supported Link Options").

    ``ftz``, ``prec_div``, ``prec_sqrt`` and ``fma`` steer code generation of
    LTO-IR and are refused without LTO rather than silently ignored.
    """

    optimization: int | None = None  # -O<n>, nvJitLink's default is 3
    debug: bool = False  # -g
    lineinfo: bool = False  # -lineinfo
    max_registers: int | None = None  # -maxrregcount=<n>
    ftz: bool | None = None  # -ftz=<0|1>, LTO only
    prec_div: bool | None = None  # -prec-div=<0|1>, LTO only
    prec_sqrt: bool | None = None  # -prec-sqrt=<0|1>, LTO only
    fma: bool | None = None  # -fma=<0|1>, LTO only
    kernels_used: tuple[str, ...] = ()  # -kernels-used=<name>: others may be dropped under LTO
    variables_used: tuple[str, ...] = ()  # -variables-used=<name>
    optimize_unused_variables: bool = False  # -optimize-unused-variables
    split_compile: int | None = None  # -split-compile=<n> threads, 0 = as many as CPUs
    verbose: bool = False  # -verbose: the info log in Image.log says what was linked
    ptxas_options: tuple[str, ...] = ()  # -Xptxas=<option>
    extra: tuple[str, ...] = ()  # verbatim, for options this class does not name

    def __post_init__(self) -> None:
        for name in ("kernels_used", "variables_used", "ptxas_options", "extra"):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                raise OptionError(f"LinkOptions.{name} must be a sequence of str (got {value!r})")
            object.__setattr__(self, name, tuple(value))
        if self.optimization is not None and self.optimization not in (0, 1, 2, 3):
            raise OptionError(f"LinkOptions.optimization must be 0, 1, 2 or 3 (got {self.optimization!r})")
        for name in ("max_registers", "split_compile"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < (name == "max_registers")):
                raise OptionError(f"LinkOptions.{name} must be a non-negative int (got {value!r})")


def nvjitlink_args(options: LinkOptions, arch: str, lto: bool) -> list[str]:
    """The nvJitLink option list for ``options`` linking for ``arch`` (with ``-lto`` when ``lto``)."""
    args = [f"-arch={arch}"] + (["-lto"] if lto else [])
    if options.optimization is not None:
        args.append(f"-O{options.optimization}")
    args += ["-g"] * options.debug + ["-lineinfo"] * options.lineinfo
    if options.max_registers is not None:
        args.append(f"-maxrregcount={options.max_registers}")
    for name, flag in (("ftz", "-ftz"), ("prec_div", "-prec-div"), ("prec_sqrt", "-prec-sqrt"),
                       ("fma", "-fma")):
        value = getattr(options, name)
        if value is not None:
            if not lto:
                raise OptionError(f"LinkOptions.{name} applies only when linking with LTO (got lto=False)")
            args.append(f"{flag}={int(value)}")
    args += [f"-kernels-used={k}" for k in options.kernels_used]
    args += [f"-variables-used={v}" for v in options.variables_used]
    args += ["-optimize-unused-variables"] * options.optimize_unused_variables
    if options.split_compile is not None:
        args.append(f"-split-compile={options.split_compile}")
    args += ["-verbose"] * options.verbose
    args += [f"-Xptxas={o}" for o in options.ptxas_options]
    return args + list(options.extra)


def choose_arch(requested: str | None, device: str | None, input_archs: Iterable[str | None]) -> str:
    """The arch to link for.

    ==================================  =====================================
    situation                           arch
    ==================================  =====================================
    ``requested`` given                 ``requested``
    else a GPU is present               the GPU's arch (``device``)
    else                                ``sm_90``
    an input is built for ``<arch>a``   ``<arch>a`` (e.g. a tileiras cubin is
    (same SM, arch-specific features)   ``sm_90a``; the plain arch cannot
                                        link it, the ``a`` arch runs all)
    ==================================  =====================================
    """
    arch = normalize_arch(requested or device or FALLBACK_ARCH)
    if arch[-1].isdigit() and any(a and normalize_arch(a) == f"{arch}a" for a in input_archs):
        return f"{arch}a"
    return arch


def use_lto(kinds: Iterable[CodeKind]) -> bool:
    """``lto=None`` means: link-time optimise when any input is LTO-IR."""
    return any(CodeKind(k) in _LTO_KINDS for k in kinds)


def ptx_isa_supported(cuda_version: int | tuple[int, int]) -> tuple[int, int]:
    """The newest PTX ISA a driver, or an nvJitLink, of ``cuda_version`` reads.

    ``cuda_version`` is ``(13, 0)`` or ``cuDriverGetVersion``'s ``13000``.
    The table is :func:`ptxbridge.ptx_isa.max_ptx_isa` (PTX ISA release notes).
    """
    if isinstance(cuda_version, int):
        cuda_version = (cuda_version // 1000, cuda_version % 1000 // 10)
    return max_ptx_isa(cuda_version)


@functools.cache
def nvjitlink_version() -> tuple[int, int]:
    """The nvJitLink library's (major, minor); a :class:`ToolchainError` when it is missing."""
    try:
        from cuda.bindings import nvjitlink

        return tuple(nvjitlink.version())  # type: ignore[return-value]
    except Exception as exc:
        raise ToolchainError(f"nvJitLink is not available: pip install nvidia-nvjitlink (got {exc})") from exc


@functools.cache
def _driver_version() -> tuple[int, int] | None:
    try:
        from cuda.bindings import driver

        err, version = driver.cuDriverGetVersion()
    except Exception:  # no libcuda: there is no driver to report
        return None
    return (version // 1000, version % 1000 // 10) if err == driver.CUresult.CUDA_SUCCESS else None


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
def _read_ptx(code: bytes, name: str) -> PtxModule:
    return read_ptx(code, name)


def _exports(artifact: Artifact) -> dict[str, tuple[Signature | None, bool]]:
    """name -> (signature or None when only the PTX declares it, weak) of what ``artifact`` defines."""
    typed = dict(artifact.device_functions)
    if artifact.kind != CodeKind.PTX:
        return {name: (sig, False) for name, sig in typed.items()}
    found = {}
    for function in _read_ptx(artifact.code, artifact.name).functions:
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
                raise LinkError(f"device function {name!r}: {importer.name} imports it as `{wanted}` but no "
                                "input exports it (add the artifact that defines it to the link inputs)")
            exporter, given, _ = exporters[name][0]
            _compare(name, importer, wanted, exporter, given)


def _compare(name: str, importer: Artifact, wanted: Signature, exporter: Artifact,
             given: Signature | None) -> None:
    if given is None:  # untyped PTX: compare with its .func declaration
        try:
            check(replace(wanted, name=name), _read_ptx(exporter.code, exporter.name).function(name))
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
    pairs = [(f"parameter {i + 1}", a.type, b.type)
             for i, (a, b) in enumerate(zip(wanted.params, given.params, strict=True))]
    pairs.append(("the return value", wanted.returns, given.returns))
    for what, mine, theirs in pairs:
        a, b = _scalar_kind(mine), _scalar_kind(theirs)
        if a is not None and b is not None and a != b:
            return f"{what} is {a} on one side and {b} on the other"
    return None


def _check_isa(artifacts: Sequence[Artifact]) -> None:
    """Refuse PTX newer than nvJitLink reads: the one case no cubin can be made here."""
    linker = nvjitlink_version()
    readable = ptx_isa_supported(linker)
    for artifact in artifacts:
        if artifact.kind != CodeKind.PTX:
            continue
        version = _read_ptx(artifact.code, artifact.name).version
        if version > readable:
            driver = _driver_version()
            where = (f"the driver (CUDA {driver[0]}.{driver[1]}) JIT-compiles up to "
                     f"{'.'.join(map(str, ptx_isa_supported(driver)))}" if driver else "there is no driver")
            raise LinkError(f"{artifact.name}: PTX ISA {version[0]}.{version[1]} is newer than nvJitLink "
                            f"{linker[0]}.{linker[1]} reads ({readable[0]}.{readable[1]}) and {where}; "
                            "upgrade the nvidia-nvjitlink wheel, or compile the input for an older ISA")


_INPUT_TYPES = {CodeKind.PTX: "PTX", CodeKind.LTOIR: "LTOIR", CodeKind.CUBIN: "CUBIN",
                CodeKind.FATBIN: "FATBIN", CodeKind.OBJECT: "OBJECT", CodeKind.LIBRARY: "LIBRARY"}


def _run_nvjitlink(args: list[str], artifacts: Sequence[Artifact]) -> bytes:
    """Link with nvJitLink; returns ``json({"log": info log}) + b"\\n" + cubin`` for the cache."""
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
        cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
        nvjitlink.get_linked_cubin(handle, cubin)
        return json.dumps({"log": _log(nvjitlink, handle, "info")}).encode() + b"\n" + bytes(cubin)
    finally:
        nvjitlink.destroy(handle)


def _log(nvjitlink: Any, handle: int, which: str) -> str:
    size = getattr(nvjitlink, f"get_{which}_log_size")(handle)
    buffer = bytearray(size)
    getattr(nvjitlink, f"get_{which}_log")(handle, buffer)
    return bytes(buffer).rstrip(b"\0").decode(errors="replace").strip()


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


def link(inputs: Iterable[Artifact | bytes | str | os.PathLike[str]], arch: str | None = None,
         lto: bool | None = None, *, options: LinkOptions | None = None) -> Image:
    """Link artifacts from any frontend into one :class:`Image`.

    Parameters
    ----------
    inputs
        Artifacts, paths (read with :func:`ptxbridge.files.artifact_from_file`)
        or bytes of PTX, LTO-IR, cubin, fatbin, host objects and ``.a``
        libraries (recognised by content).
    arch
        Target (``"sm_90"``); default: the first GPU's arch, else ``sm_90``;
        raised to ``sm_XXa`` when an input needs it (:func:`choose_arch`).
    lto
        Link-time optimisation; ``None`` turns it on when any input is LTO-IR.
    options
        :class:`LinkOptions`.

    Raises
    ------
    LinkError
        An import has no exporter or disagrees with it (naming both sides),
        a PTX input is newer than nvJitLink reads, or nvJitLink failed (its
        log is ``.log``).
    """
    options = options or LinkOptions()
    artifacts = [as_artifact(item, i) for i, item in enumerate(inputs)]
    if not artifacts:
        raise LinkError("link: needs at least one input (got none)")
    for artifact in artifacts:
        if artifact.kind not in _INPUT_TYPES:
            raise LinkError(f"{artifact.name}: nvJitLink cannot link {artifact.kind.value} input; "
                            "compile NVVM IR to LTO-IR first (got kind={artifact.kind.value!r})")
    kernels: dict[str, Signature] = {}
    device_functions: dict[str, Signature] = {}
    for artifact in artifacts:
        kernels.update(artifact.kernels)
        device_functions.update(artifact.device_functions)
    executable = _executable_cubin(artifacts, arch)
    if executable is not None:
        facts = with_cubin_facts(kernels, executable.code, executable.name)
        return Image(executable.code, executable.arch, facts, device_functions)
    arch = choose_arch(arch, None if arch else device_arch(0), (a.arch for a in artifacts))
    lto = use_lto(a.kind for a in artifacts) if lto is None else lto
    args = nvjitlink_args(options, arch, lto)  # OptionError for options that contradict lto
    check_symbols(artifacts)
    _check_isa(artifacts)
    calls = runtime_calls([_read_ptx(a.code, a.name) for a in artifacts if a.kind == CodeKind.PTX])
    with_runtime = bool(calls) and not any("cudadevrt" in a.name for a in artifacts)
    if with_runtime:
        artifacts.append(device_runtime())  # device-side launches: nvJitLink does not add it itself
    version = nvjitlink_version()
    parts: list[str | bytes] = ["link", f"{version[0]}.{version[1]}", *args, "\0"]
    for artifact in artifacts:
        parts += [artifact.kind.value, artifact.code]
    blob = cache.cached("link", cache.key(*parts), lambda: _run_nvjitlink(args, artifacts))
    header, _, cubin = blob.partition(b"\n")
    facts = with_cubin_facts(kernels, cubin, "<linked cubin>")
    if with_runtime:  # the device runtime's own (static) kernels are not the user's to call
        facts = {name: sig for name, sig in facts.items() if not name.startswith("__nv_static_")}
    return Image(cubin, arch, facts, device_functions,
                 tuple(a.code for a in artifacts if a.kind == CodeKind.PTX), json.loads(header)["log"])


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


def load(inputs: Iterable[Artifact | bytes | str | os.PathLike[str]], device: Any = None,
         **link_kwargs: Any) -> Any:
    """Link ``inputs`` and load the image on ``device`` in one step (see :meth:`Image.load`).

    With an explicit CUDA ``device`` (``N``, ``"cuda:N"``, a torch device) and
    no ``arch=``, the image is linked for that GPU's arch.
    """
    from ptxbridge.loaders import parse_device

    parsed = parse_device(device)
    if parsed is not None and parsed[0] == "cuda" and link_kwargs.get("arch") is None:
        link_kwargs["arch"] = device_arch(parsed[1])
    return link(inputs, **link_kwargs).load(device)


