"""Link options and their nvJitLink argument list (a pure function, tested without a GPU)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from ptxbridge.abi.errors import FormatError, OptionError
from ptxbridge.abi.fatbin import read_fatbin
from ptxbridge.artifacts.artifact import Artifact, CodeKind
from ptxbridge.linker.embedded import host_objects

__all__ = ["LinkOptions", "nvjitlink_args", "use_lto", "with_register_cap"]

_LTO_KINDS = (CodeKind.LTOIR, CodeKind.NVVM)  # NVVM IR is compiled to LTO-IR before the link
_FATBIN_KINDS = (CodeKind.FATBIN, CodeKind.OBJECT)  # a host object's fatbin is its .nv_fatbin section


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkOptions:
    """nvJitLink options (``nvJitLink`` documentation, "Supported Link Options").

    ``ftz``, ``prec_div``, ``prec_sqrt`` and ``fma`` steer code generation of
    LTO-IR and are refused without LTO rather than silently ignored.
    """

    optimization: int | None = None  # -O<n>, nvJitLink's default is 3
    debug: bool = False  # -g
    lineinfo: bool = False  # -lineinfo
    max_registers: int | None = None  # -maxrregcount=<n>; 0: none, not even with_register_cap's
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
            if value is not None and (not isinstance(value, int) or value < 0):
                raise OptionError(f"LinkOptions.{name} must be a non-negative int (got {value!r})")


def nvjitlink_args(options: LinkOptions, arch: str, lto: bool) -> list[str]:
    """The nvJitLink option list for ``options`` linking for ``arch`` (with ``-lto`` when ``lto``)."""
    args = [f"-arch={arch}"] + (["-lto"] if lto else [])
    if options.optimization is not None:
        args.append(f"-O{options.optimization}")
    args += ["-g"] * options.debug + ["-lineinfo"] * options.lineinfo
    if options.max_registers:
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


def with_register_cap(options: LinkOptions, artifacts: Iterable[Artifact]) -> LinkOptions:
    """``options`` with ``max_registers`` set to the largest ``register_cap`` when every artifact that has
    kernels carries one (Rust crates whose panic handler formats the message: ptxas would otherwise give
    each kernel that can panic the registers of ``core::fmt``, called through pointers, and halve its
    occupancy; capped, that cold code spills instead).  A ``max_registers`` of the caller's wins, and
    a kernel from anywhere else leaves the image uncapped: its needs are unknown."""
    caps = [a.register_cap for a in artifacts if a.kernels]
    if options.max_registers is not None or not caps or None in caps:
        return options
    return replace(options, max_registers=max(c for c in caps if c is not None))


def use_lto(inputs: Iterable[Artifact | CodeKind]) -> bool:
    """``lto=None`` means: link-time optimise when any input is LTO-IR, or is a fatbin (or a host
    object's embedded fatbin, also one inside a static library) holding an LTO-IR image, which
    nvJitLink refuses to link without ``-lto``.  A bare kind says only what its kind says."""
    return any(_holds_lto(item) for item in inputs)


def _holds_lto(item: Artifact | CodeKind) -> bool:
    if not isinstance(item, Artifact):
        return CodeKind(item) in _LTO_KINDS
    if item.kind is CodeKind.LIBRARY:
        return any(_fatbin_holds_lto(m.data, f"{item.name}({m.name})") for m in host_objects(item))
    if item.kind in _FATBIN_KINDS:
        return _fatbin_holds_lto(item.code, item.name)
    return item.kind in _LTO_KINDS


def _fatbin_holds_lto(code: bytes, source: str) -> bool:
    try:
        entries = read_fatbin(code, source).entries
    except FormatError:  # a host object without a fatbin holds no LTO-IR; a broken one nvJitLink reports
        return False
    return any(entry.kind == "ltoir" for entry in entries)
