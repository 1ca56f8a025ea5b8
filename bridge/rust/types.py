"""Rust source types -> ptxbridge parameter kinds, and Rust functions -> signatures.

Two conventions read the same source (FRONTENDS.md 1 and 2):

- ``c`` (plain rustc ``extern "ptx-kernel"`` / ``extern "C"``): a slice
  reference is a fat pointer passed as one ``aggregate[16] align 8`` (rustc
  warns it is not FFI-safe; measured with rustc 1.96), so it becomes a
  two-field struct ``{ptr, len}``;
- ``oxide`` (cuda-oxide ``#[kernel]``): ``&[T]``, ``&mut [T]`` and
  ``DisjointSlice<T, Space>`` are a pointer and a length; a ``Space`` with a
  runtime row width (``Runtime2DIndex``, ``RuntimeRowMajorTiles<R, C>``, the
  spaces whose ``SpaceLayout::Data`` is ``u32`` in cuda-device's
  ``disjoint.rs``) adds the u32 row width.

In both, zero-sized types become ``Opaque(0)`` (no PTX parameter), ``#[repr(C)]``
structs become :class:`Struct`, and other aggregates one opaque blob whose
size follows rustc's current layout rule (fields sorted by decreasing
alignment; only ``#[repr(C)]`` is a guarantee).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ptxbridge.abi.dtypes import DType, dtype
from ptxbridge.abi.errors import FormatError
from ptxbridge.abi.kinds import (
    DisjointSlice,
    Opaque,
    ParamType,
    Pointer,
    Scalar,
    Slice,
    Struct,
    StructField,
    Tuple,
)
from ptxbridge.abi.lowering import memory_layout
from ptxbridge.abi.signature import Convention, LaunchMeta, Param, Signature
from ptxbridge.rust.source import parse_source
from ptxbridge.rust.syntax import (
    Attr,
    RustFn,
    RustSource,
    RustStruct,
    RustType,
    TArray,
    TFnPtr,
    TPath,
    TPtr,
    TRef,
    TSlice,
    TTuple,
)

__all__ = ["SourceSignatures", "TypeMapper", "read_signatures", "show_type"]

_PRIMITIVES = {
    "bool": "bool", "i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64", "isize": "i64",
    "u8": "u8", "u16": "u16", "u32": "u32", "u64": "u64", "usize": "u64", "char": "u32",
    "f16": "f16", "bf16": "bf16", "f32": "f32", "f64": "f64",
}
_WIDE = {"i128": Opaque(16, 16), "u128": Opaque(16, 16), "f128": Opaque(16, 16)}
_ZSTS = {"PhantomData", "PhantomPinned"}
_TRANSPARENT = {"MaybeUninit", "ManuallyDrop", "Cell", "UnsafeCell", "Wrapping", "Saturating"}
_RUNTIME_2D_SPACES = {"Runtime2DIndex", "RuntimeRowMajorTiles"}
_INTERIOR = {"Cell", "UnsafeCell", "RefCell", "OnceCell", "SyncUnsafeCell"}  # and Atomic*: written through &
_ZST = Opaque(0, 1)


class _Unsupported(Exception):
    """Internal: a type with no ABI mapping; turned into a FormatError naming the parameter."""


def show_type(t: RustType) -> str:
    """Rust spelling of a parsed type (for messages)."""
    if isinstance(t, TPath):
        args = ", ".join(a if isinstance(a, str) else show_type(a) for a in t.args)
        return "::".join(t.segments) + (f"<{args}>" if args else "")
    if isinstance(t, TRef):
        return "&" + ("mut " if t.mutable else "") + show_type(t.inner)
    if isinstance(t, TPtr):
        return ("*mut " if t.mutable else "*const ") + show_type(t.inner)
    if isinstance(t, TSlice):
        return f"[{show_type(t.inner)}]"
    if isinstance(t, TArray):
        return f"[{show_type(t.inner)}; {t.length}]"
    if isinstance(t, TTuple):
        return "(" + ", ".join(show_type(i) for i in t.items) + ("," if len(t.items) == 1 else "") + ")"
    return "fn(..)"


def _int(text: str) -> int:
    """An integer literal (``256``, ``0x100``, ``1_024u32``)."""
    digits = re.sub(r"(?:[iu](?:8|16|32|64|128|size))$", "", text.replace("_", ""))
    try:
        return int(digits, 0)
    except ValueError:
        raise _Unsupported(f"expected an integer literal (got {text!r})") from None


class TypeMapper:
    """Maps parsed Rust types to kinds, with the structs, enums and aliases of the crate."""

    def __init__(self, units: list[RustSource], convention: Convention):
        self.units, self.convention = units, convention
        self.structs = {name: s for unit in units for name, s in unit.structs.items()}
        self.enums = {name: e for unit in units for name, e in unit.enums.items()}
        self.aliases = {name: a for unit in units for name, a in unit.aliases.items()}

    def kind(self, t: RustType, subst: Mapping[str, RustType | str], depth: int = 0) -> ParamType:
        if depth > 32:
            raise _Unsupported("type nests too deeply (recursive alias or struct?)")
        if isinstance(t, TPath):
            return self._path(t, subst, depth)
        if isinstance(t, (TRef, TPtr)):
            return self._pointer(t, subst, depth)
        if isinstance(t, TFnPtr):
            return Pointer(None, False)
        if isinstance(t, TArray):
            length = subst.get(t.length, t.length)
            count = _int(length if isinstance(length, str) else t.length)
            size, align = memory_layout(self.kind(t.inner, subst, depth + 1))
            return Opaque(size * count, align)
        if isinstance(t, TTuple):
            return self._record([self.kind(i, subst, depth + 1) for i in t.items], tuple_=True)
        raise _Unsupported("an unsized slice can only be passed behind a reference")

    def _path(self, t: TPath, subst: Mapping[str, RustType | str], depth: int) -> ParamType:
        name = t.name
        if len(t.segments) == 1 and not isinstance(subst.get(name, ""), str):
            return self.kind(subst[name], {}, depth + 1)
        if name in self.aliases:
            return self.kind(self.aliases[name], subst, depth + 1)
        if name in self.structs:
            return self._struct(self.structs[name], t, subst, depth)
        if name in self.enums:
            enum = self.enums[name]
            ints = [r for r in enum.repr if r in _PRIMITIVES and r not in ("bool", "char")]
            if enum.fieldless and ints:
                return Scalar(dtype(_PRIMITIVES[ints[0]]))
            raise _Unsupported(f"enum {name} needs to be fieldless with an integer #[repr]")
        if name in _PRIMITIVES:
            return Scalar(dtype(_PRIMITIVES[name]))
        if name in _WIDE:
            return _WIDE[name]
        if name in _ZSTS:
            return _ZST
        types = [a for a in t.args if not isinstance(a, str)]
        if name in _TRANSPARENT and types:
            return self.kind(types[0], subst, depth + 1)
        if name == "NonNull" and types:
            return Pointer(self._pointee(types[0], subst, depth), True)
        if name == "Option" and types and isinstance(types[0], (TRef, TFnPtr, TPath)) \
                and (not isinstance(types[0], TPath) or types[0].name == "NonNull"):
            return self.kind(types[0], subst, depth + 1)  # the null-pointer niche: same ABI
        if name == "DisjointSlice" and types:
            rows_2d = len(types) > 1 and isinstance(types[1], TPath) and types[1].name in _RUNTIME_2D_SPACES
            if self.convention is Convention.OXIDE:
                return DisjointSlice(self._element(types[0], subst, depth), rows_2d)
            raise _Unsupported("DisjointSlice is a cuda-oxide type; load this kernel with ptxbridge.oxide")
        if name in ("c_void",):
            raise _Unsupported("c_void has no size; use it behind a pointer")
        raise _Unsupported(f"unknown type {name!r} (not a primitive, and no struct, enum or type alias "
                           f"of that name in the source)")

    def _struct(self, s: RustStruct, t: TPath, subst: Mapping[str, RustType | str], depth: int) -> ParamType:
        inner = dict(zip(s.generics, t.args, strict=False))
        fields = [(n, self.kind(ft, inner, depth + 1)) for n, ft in s.fields]
        reprs = set(s.repr)
        if "transparent" in reprs:
            sized = [k for _, k in fields if memory_layout(k)[0] > 0]
            return sized[0] if sized else _ZST
        aligns = [int(r[6:-1]) for r in reprs if r.startswith("align(")]
        if "C" in reprs and not aligns and not any(r.startswith("packed") for r in reprs):
            if not fields:
                return _ZST
            return Struct(s.name, tuple(StructField(n, k) for n, k in fields))
        if any(r.startswith("packed") for r in reprs):
            return Opaque(sum(memory_layout(k)[0] for _, k in fields), 1)
        record = self._record([k for _, k in fields], tuple_=False, reorder="C" not in reprs)
        size, align = memory_layout(record)
        align = max([align, *aligns])
        return Opaque(-(-size // align) * align, align)

    def _record(self, kinds: list[ParamType], *, tuple_: bool, reorder: bool = True) -> ParamType:
        """A tuple or non-repr(C) struct: a Tuple when rustc cannot reorder it, else a blob."""
        layouts = [memory_layout(k) for k in kinds]
        if not kinds or all(size == 0 for size, _ in layouts):
            return _ZST
        plain = all(isinstance(k, Scalar) and k.dtype.name != "bool" for k in kinds)
        if tuple_ and plain and len({a for _, a in layouts}) == 1:
            return Tuple(tuple(kinds))
        order = sorted(layouts, key=lambda sa: -sa[1]) if reorder else layouts
        offset, align = 0, 1
        for size, member_align in order:
            offset = -(-offset // member_align) * member_align + size
            align = max(align, member_align)
        return Opaque(-(-offset // align) * align, align)

    def _pointer(self, t: TRef | TPtr, subst: Mapping[str, RustType | str], depth: int) -> ParamType:
        inner = t.inner
        if isinstance(inner, TPath) and inner.name == "str" and len(inner.segments) == 1:
            inner = TSlice(TPath(("u8",)))
        # a reference promises no aliasing (docs/safety.md); a shared one only to a type without UnsafeCell
        borrow = "borrow" if isinstance(t, TRef) and (t.mutable or self._frozen(inner, subst, depth)) else ""
        if isinstance(inner, TSlice):
            if self.convention is Convention.OXIDE:
                return Slice(self._element(inner.inner, subst, depth), t.mutable)
            pointee = self._pointee(inner.inner, subst, depth)
            return Struct("slice", (StructField("ptr", Pointer(pointee, t.mutable, borrow)),
                                    StructField("len", Scalar(dtype("u64")))))
        return Pointer(self._pointee(inner, subst, depth), t.mutable, borrow)

    def _frozen(self, t: RustType, subst: Mapping[str, RustType | str], depth: int) -> bool:
        """Whether ``t`` surely holds no ``UnsafeCell`` (Rust's ``Freeze``): only then does ``&t``
        promise that nothing writes it.  Types from outside the source count as not frozen."""
        if depth > 32:
            return False
        if isinstance(t, (TSlice, TArray)):
            return self._frozen(t.inner, subst, depth + 1)
        if isinstance(t, TTuple):
            return all(self._frozen(item, subst, depth + 1) for item in t.items)
        if not isinstance(t, TPath):
            return True  # references, raw and fn pointers: what they point to is not part of t
        name, args = t.name, [a for a in t.args if not isinstance(a, str)]
        if len(t.segments) == 1 and not isinstance(subst.get(name, ""), str):
            return self._frozen(subst[name], {}, depth + 1)
        if name in self.aliases:
            return self._frozen(self.aliases[name], subst, depth + 1)
        if name in self.structs:
            s = self.structs[name]
            inner = dict(zip(s.generics, t.args, strict=False))
            return all(self._frozen(ft, inner, depth + 1) for _, ft in s.fields)
        if name in _INTERIOR or name.startswith("Atomic"):
            return False
        if name in _PRIMITIVES or name in _WIDE or name in _ZSTS or name in self.enums or name == "c_void":
            return True
        known = name in _TRANSPARENT or name in ("NonNull", "Option")
        return known and all(self._frozen(a, subst, depth + 1) for a in args)

    def _pointee(self, t: RustType, subst: Mapping[str, RustType | str], depth: int) -> ParamType | None:
        try:
            return self.kind(t, subst, depth + 1)
        except _Unsupported:
            return None  # c_void, trait objects, foreign types: an untyped pointer

    def _element(self, t: RustType, subst: Mapping[str, RustType | str], depth: int) -> DType:
        element = self.kind(t, subst, depth + 1)
        if not isinstance(element, Scalar):
            raise _Unsupported(f"slice elements must be numbers for ptxbridge (got {show_type(t)})")
        return element.dtype

    def signature(self, fn: RustFn, kind: str, convention: Convention,
                  subst: Mapping[str, RustType | str] | None = None, name: str | None = None) -> Signature:
        """The signature of ``fn`` (its parameters mapped under this mapper's convention)."""
        subst = subst or {}
        params = []
        for pname, ptype in fn.params:
            try:
                params.append(Param(pname, self.kind(ptype, subst)))
            except _Unsupported as exc:
                raise FormatError(f"{fn.name}: parameter {pname!r}: {exc} (got {show_type(ptype)})",
                                  source=self.units[0].path, where=f"line {fn.line}") from None
        returns = None
        if fn.returns is not None and fn.returns != TTuple(()):
            try:
                returns = self.kind(fn.returns, subst)
            except _Unsupported as exc:
                raise FormatError(f"{fn.name}: return type: {exc} (got {show_type(fn.returns)})",
                                  source=self.units[0].path, where=f"line {fn.line}") from None
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
                values["maxntid"] = (_int(numbers[0]), 1, 1)
                if len(numbers) > 1:
                    values["minnctapersm"] = _int(numbers[1])
            elif attr.path == "cluster_launch" and len(numbers) == 3:
                values["cluster"] = tuple(_int(n) for n in numbers)
            elif attr.path == "launch_contract":
                block = _block_shape(attr)
                if block:
                    values["reqntid"] = block
        except _Unsupported:
            continue
    if "reqntid" in values:
        values.pop("maxntid", None)  # .reqntid replaces .maxntid: ptxas rejects both on one entry
    return LaunchMeta(**values)


def _block_shape(attr: Attr) -> tuple[int, int, int] | None:
    texts = [t.text for t in attr.args]
    for i in range(len(texts) - 2):
        if texts[i] == "block" and texts[i + 1] == "=" and texts[i + 2] == "(":
            close = texts.index(")", i + 3)
            numbers = [_int(x) for x in texts[i + 3:close] if x != ","]
            return tuple((numbers + [1, 1])[:3]) if 0 < len(numbers) <= 3 else None
    return None


@dataclass(frozen=True, slots=True)
class SourceSignatures:
    """Everything a Rust source declares for the bridge.

    ``generic`` holds cuda-oxide kernels with type or const parameters: their
    entries are ``<name>_TID_<32 hex>`` and are matched against the code.
    """

    kernels: dict[str, Signature]
    device_functions: dict[str, Signature]
    imports: dict[str, Signature]
    generic: dict[str, RustFn]
    mapper: TypeMapper


def read_signatures(units: list[RustSource], convention: Convention) -> SourceSignatures:
    """Kernels, exported device functions and imports of a parsed crate.

    ``c``: kernels are ``extern "ptx-kernel"`` functions with a stable name;
    ``oxide``: kernels are ``#[kernel]`` functions.  In both, ``extern "C"``
    functions with ``#[no_mangle]``/``export_name`` are exported device
    functions and ``extern "C" { fn ..; }`` declarations are imports (C ABI).
    """
    mapper = TypeMapper(units, convention)
    kernels: dict[str, Signature] = {}
    device: dict[str, Signature] = {}
    imports: dict[str, Signature] = {}
    generic: dict[str, RustFn] = {}
    for fn in (f for unit in units for f in unit.functions):
        is_kernel = fn.attr("kernel") is not None if convention is Convention.OXIDE \
            else fn.abi == "ptx-kernel"
        if is_kernel and convention is Convention.OXIDE and fn.generics:
            generic[fn.name] = fn
        elif is_kernel and (fn.symbol or convention is Convention.OXIDE):
            kernels[fn.symbol or fn.name] = mapper.signature(fn, "kernel", convention)
        elif fn.abi == "C" and fn.symbol and not fn.generics:
            target = imports if fn.foreign else device
            target[fn.symbol] = mapper.signature(fn, "device", Convention.C)
    return SourceSignatures(kernels, device, imports, generic, mapper)


def parse_type(text: str) -> RustType:
    """A Rust type from its spelling (for generic arguments given by a user)."""
    unit = parse_source(f"type __T = {text};", "<generic argument>")
    return unit.aliases["__T"]
