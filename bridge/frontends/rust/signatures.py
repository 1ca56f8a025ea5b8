"""Rust functions -> signatures: kernels, exported device functions, imports and constants.

``c`` (plain rustc): kernels are ``extern "ptx-kernel"`` functions with a
stable name, ``#[no_mangle] extern "C"`` functions are exported device
functions and ``extern "C" { fn ..; }`` declarations are imports.

``oxide`` (cuda-oxide): kernels are ``#[kernel]`` functions (named as in
the source; generic ones become ``<name>_TID_<32 hex>`` entries, typed at
load), non-generic ``#[device]`` functions are exported under their own name
and ``#[device] extern "C" { .. }`` declarations are imports.  A device
function takes each struct argument as its fields, in memory order, and each
slice as pointer and length (cuda-oxide's ``mir-lower``, the device-function
ABI; kernels keep a struct whole), so its signature lists those flat
parameters (``v.x``, ``v.y``...) and C++, numba or plain-rustc code can call it.
``#[constant]`` statics are module globals under the symbol ``#[constant]``
and ``#[cuda_module]`` give them (cuda-macros, reserved-oxide-symbols).

A function whose parameters have no fixed ABI does not fail the file: it is
recorded in ``failed`` with an error naming it, the parameter and the line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ptxbridge.abi.errors import FormatError
from ptxbridge.abi.kinds import ParamType
from ptxbridge.abi.lowering import memory_layout
from ptxbridge.abi.signature import Convention, LaunchMeta, Param, Signature
from ptxbridge.rust.source import split_commas
from ptxbridge.rust.syntax import Attr, RustFn, RustSource, RustStatic, RustType, TNoAbi, TPath, TTuple
from ptxbridge.rust.types import TypeMapper, Unsupported, const_int, show_type

__all__ = ["OxideConstant", "SourceSignatures", "constant_symbol", "fn_signature", "launch_meta",
           "read_signatures"]

_CONSTANT_PREFIX = "cuda_oxide_const_246e25db_"  # reserved-oxide-symbols CONSTANT_PREFIX
_CLOSURE_BOUND = re.compile(r"(?<![\w])(?:Fn|FnMut|FnOnce)\s*\(")


@dataclass(frozen=True, slots=True)
class OxideConstant:
    """A ``#[constant]`` static: its module-global ``symbol`` and the type of its value
    (``ConstantMemory<T>``'s ``T``; None with ``problem`` saying why when it has no fixed layout)."""

    name: str
    symbol: str
    type: ParamType | None
    line: int
    problem: str | None = None


def constant_symbol(static: RustStatic) -> str:
    """The symbol cuda-oxide gives a ``#[constant]`` static.

    Inside ``#[cuda_module] mod m``: ``cuda_oxide_const_246e25db_{m}_L{line}C{column}_{NAME}``
    (cuda-macros ``cuda_module_constant_symbol``, column 0-based); elsewhere
    ``#[constant(export_name = "..")]`` or ``cuda_oxide_const_246e25db_{NAME}``.
    """
    if static.module is not None:
        return f"{_CONSTANT_PREFIX}{static.module}_L{static.line}C{static.col}_{static.name}"
    attr = next(a for a in static.attrs if a.path == "constant")
    texts = [t.text for t in attr.args]
    if "export_name" in texts and texts[-1].startswith('"'):
        return texts[-1][1:-1]
    return f"{_CONSTANT_PREFIX}{static.name}"


@dataclass(frozen=True, slots=True)
class SourceSignatures:
    """Everything a Rust source declares for the bridge.

    ``generic`` holds cuda-oxide kernels with type or const parameters: their
    entries are ``<name>_TID_<32 hex>`` and are matched against the code.
    ``failed`` maps a kernel or device function that cannot be typed to the
    error that says why; it is raised only when that function is used.
    """

    kernels: dict[str, Signature]
    device_functions: dict[str, Signature]
    imports: dict[str, Signature]
    generic: dict[str, RustFn]
    mapper: TypeMapper
    failed: dict[str, FormatError]
    constants: dict[str, OxideConstant]

    @property
    def unusable(self) -> dict[str, str]:
        """``failed`` as messages (what an artifact keeps for its ``unusable`` kernels)."""
        return {name: str(exc) for name, exc in self.failed.items()}


def _error(fn: RustFn, what: str, line: int, problem: str) -> FormatError:
    return FormatError(f"{fn.name}: {what}: {problem}", source=fn.source or "<rust>", where=f"line {line}")


def _closures(fn: RustFn) -> dict[str, RustType]:
    """Generic parameters bound by ``Fn``/``FnMut``/``FnOnce``: closures, whose types are unnamed."""
    return {name: TNoAbi(f"a closure ({name}: {bounds}): its captures' layout is chosen by rustc")
            for name, bounds in fn.bounds if _CLOSURE_BOUND.search(bounds)}


def fn_signature(mapper: TypeMapper, fn: RustFn, kind: str, convention: Convention,
                 subst: Mapping[str, RustType | str] | None = None, name: str | None = None,
                 flatten: bool = False) -> Signature:
    """The signature of ``fn`` under ``convention`` (FormatError naming the function, parameter and
    line when a type has no mapping).  ``flatten``: pass struct arguments as their fields and
    slices as pointer and length (the cuda-oxide device-function ABI)."""
    subst = {**(subst or {}), **_closures(fn)}  # a closure stays unnamed whatever is given
    if fn.broken is not None:
        raise _error(fn, "its signature could not be read", fn.line, fn.broken)
    params: list[Param] = []
    lines = fn.param_lines or (fn.line,) * len(fn.params)
    for (pname, ptype), line in zip(fn.params, lines, strict=True):
        try:
            fields = mapper.fields_in_memory_order(ptype, subst) if flatten else None
            if fields is None:
                params.append(Param(pname, mapper.kind(ptype, subst)))
                continue
            for fname, ftype in fields:
                field_kind = mapper.kind(ftype, subst)
                if memory_layout(field_kind)[0]:
                    params.append(Param(f"{pname}.{fname}", field_kind))
        except Unsupported as exc:
            raise _error(fn, f"parameter {pname!r}", line, f"{exc} (got {show_type(ptype)})") from None
    returns = None
    if fn.returns is not None and fn.returns != TTuple(()):
        try:
            returns = mapper.kind(fn.returns, subst)
        except Unsupported as exc:
            raise _error(fn, "return type", fn.line, f"{exc} (got {show_type(fn.returns)})") from None
        if memory_layout(returns)[0] == 0:
            returns = None
    launch = launch_meta(fn.attrs) if kind == "kernel" else LaunchMeta()
    return Signature(name or fn.symbol or fn.name, tuple(params), convention, launch, kind, returns)


def launch_meta(attrs: Iterable[Attr]) -> LaunchMeta:
    """cuda-oxide launch attributes -> LaunchMeta (cuda-macros ``launch_bounds``,
    ``launch_contract(block = ..)``, ``cluster_launch``); non-literal arguments are ignored."""
    values: dict[str, object] = {}
    for attr in attrs:
        numbers = [t.text for t in attr.args if t.kind == "num"]
        try:
            if attr.path == "launch_bounds" and numbers and attr.args[0].kind == "num":
                values["maxntid"] = (const_int(numbers[0], {}), 1, 1)
                if len(numbers) > 1:
                    values["minnctapersm"] = const_int(numbers[1], {})
            elif attr.path == "cluster_launch" and len(numbers) == 3:
                values["cluster"] = tuple(const_int(n, {}) for n in numbers)
            elif attr.path == "launch_contract":
                block = _block_shape(attr)
                if block:
                    values["reqntid"] = block
        except Unsupported:
            continue
    if "reqntid" in values:
        values.pop("maxntid", None)  # .reqntid replaces .maxntid: ptxas rejects both on one entry
    return LaunchMeta(**values)


def _block_shape(attr: Attr) -> tuple[int, int, int] | None:
    texts = [t.text for t in attr.args]
    for i in range(len(texts) - 2):
        if texts[i] == "block" and texts[i + 1] == "=" and texts[i + 2] == "(":
            close = texts.index(")", i + 3)
            numbers = [const_int(x, {}) for x in texts[i + 3:close] if x != ","]
            return tuple((numbers + [1, 1])[:3]) if 0 < len(numbers) <= 3 else None
    return None


def _constants(mapper: TypeMapper, statics: Iterable[RustStatic]) -> dict[str, OxideConstant]:
    found = {}
    for static in statics:
        if not any(a.path == "constant" for a in static.attrs):
            continue
        value = static.type  # ConstantMemory<T> holds a T (cuda-device constant.rs, repr(transparent))
        if isinstance(value, TPath) and value.name == "ConstantMemory" and value.args \
                and not isinstance(value.args[0], str):
            value = value.args[0]
        try:
            kind, problem = mapper.kind(value, {}), None
        except Unsupported as exc:
            kind, problem = None, str(exc)
        found[static.name] = OxideConstant(static.name, constant_symbol(static), kind, static.line, problem)
    return found


def read_signatures(units: list[RustSource], convention: Convention) -> SourceSignatures:
    """Kernels, exported device functions, imports and ``#[constant]`` statics of a parsed crate."""
    mapper = TypeMapper(units, convention)
    kernels: dict[str, Signature] = {}
    device: dict[str, Signature] = {}
    imports: dict[str, Signature] = {}
    generic: dict[str, RustFn] = {}
    failed: dict[str, FormatError] = {}
    oxide = convention is Convention.OXIDE
    for fn in (f for unit in units for f in unit.functions):
        if oxide:
            is_kernel = fn.attr("kernel") is not None
            is_device = fn.attr("device") is not None and not fn.generics
        else:
            is_kernel = fn.abi == "ptx-kernel" and fn.symbol is not None
            is_device = fn.abi == "C" and fn.symbol is not None and not fn.generics
        if is_kernel and oxide and fn.generics and fn.broken is None:
            generic[fn.name] = fn
            continue
        if not (is_kernel or is_device):
            continue
        # a #[device] fn is exported under its own name (cuda-macros adds #[no_mangle] to it)
        symbol = fn.name if oxide and is_device and not fn.foreign else (fn.symbol or fn.name)
        table = kernels if is_kernel else imports if fn.foreign else device
        own = convention if is_kernel or oxide else Convention.C
        try:
            table[symbol] = fn_signature(mapper, fn, "kernel" if is_kernel else "device", own, name=symbol,
                                         flatten=oxide and not is_kernel)
        except FormatError as exc:
            failed[symbol] = exc
    statics = [s for unit in units for s in unit.statics]
    return SourceSignatures(kernels, device, imports, generic, mapper, failed,
                            _constants(mapper, statics) if oxide else {})


def listed_instantiations(fn: RustFn) -> list[str]:
    """The types ``#[kernel(f32, u64)]`` names for a kernel with one type parameter."""
    attr = fn.attr("kernel")
    type_params = [g for g in fn.generics if g not in fn.const_generics]
    if attr is None or len(type_params) != 1:
        return []
    parts = [" ".join(t.text for t in part) for part in split_commas(list(attr.args))]
    return [p for p in parts if "=" not in p and p != "unchecked_indexing"]
