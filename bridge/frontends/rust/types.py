"""Rust source types -> ptxbridge parameter kinds (the conventions are in ``docs/rust.md``).

Two conventions read the same source:

- ``c`` (plain rustc ``extern "ptx-kernel"`` / ``extern "C"``): a slice
  reference is a fat pointer passed as one ``aggregate[16] align 8`` (rustc
  warns it is not FFI-safe; measured with rustc 1.96): the slice kind, which
  takes a tensor (its length from the tensor) and lowers to that aggregate
  under this convention; a raw ``*const [T]`` is a two-field struct ``{ptr, len}``;
- ``oxide`` (cuda-oxide ``#[kernel]``): ``&[T]``, ``&mut [T]`` and
  ``DisjointSlice<T, Space>`` are a pointer and a length, for any ``T`` with a
  fixed layout; a ``Space`` with a runtime row width (``Runtime2DIndex``,
  ``RuntimeRowMajorTiles<R, C>``, the spaces whose ``SpaceLayout::Data`` is
  ``u32`` in cuda-device's ``disjoint.rs``) adds the u32 row width.  A struct
  is lowered by cuda-oxide's ``mir-lower`` to an LLVM struct at rustc's
  offsets, whose alignment is its fields' natural one: ``#[repr(align(N))]``
  keeps rustc's size but not the alignment N.

In both, zero-sized types become ``Opaque(0)`` (no PTX parameter),
``#[repr(C)]`` structs become :class:`Struct`, arrays of up to 32 items a
:class:`Tuple` of that many items (the same layout), and other aggregates one
opaque blob whose size follows rustc's layout rule (fields sorted by
decreasing alignment; only ``#[repr(C)]`` is a guarantee).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping

from ptxbridge.abi.dtypes import dtype
from ptxbridge.abi.elements import disjoint_slice_of, slice_of
from ptxbridge.abi.kinds import Opaque, ParamType, Pointer, Scalar, Struct, StructField, Tuple
from ptxbridge.abi.lowering import memory_layout
from ptxbridge.abi.signature import Convention
from ptxbridge.rust.source import parse_source
from ptxbridge.rust.syntax import (
    RustEnum,
    RustSource,
    RustStruct,
    RustType,
    TArray,
    TFnPtr,
    TNoAbi,
    TPath,
    TPtr,
    TRef,
    TSlice,
    TTuple,
)

__all__ = ["TypeMapper", "Unsupported", "const_int", "parse_type", "show_type"]

_PRIMITIVES = {
    "bool": "bool", "i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64", "isize": "i64",
    "u8": "u8", "u16": "u16", "u32": "u32", "u64": "u64", "usize": "u64", "char": "u32",
    "f16": "f16", "bf16": "bf16", "f32": "f32", "f64": "f64",
}
_WIDE = {"i128": Opaque(16, 16), "u128": Opaque(16, 16), "f128": Opaque(16, 16)}
_ZSTS = {"PhantomData", "PhantomPinned"}
# one-field wrappers with their field's layout: core's, and cuda-device's Uniform<T> (uniform.rs)
_TRANSPARENT = {"MaybeUninit", "ManuallyDrop", "Cell", "UnsafeCell", "Wrapping", "Saturating", "Uniform",
                "NonZero"}
# core::sync::atomic and cuda-device's atomic.rs: #[repr(transparent)] over the integer or float
_ATOMIC = re.compile(r"(?:Device|Block|System)?Atomic(Bool|[UI](?:8|16|32|64|size)|F16|F32|F64)")
_NONZERO = re.compile(r"NonZero([UI](?:8|16|32|64|128|size))")
_RUNTIME_2D_SPACES = {"Runtime2DIndex", "RuntimeRowMajorTiles"}
_INTERIOR = {"Cell", "UnsafeCell", "RefCell", "OnceCell", "SyncUnsafeCell"}  # and atomics: written through &
_MAX_TUPLE_ARRAY = 32  # arrays up to this length are Tuples (typed items); longer ones Opaque
_ZST = Opaque(0, 1)
_C_INT = Scalar(dtype("i32"))  # the discriminant of a #[repr(C)] enum (RFC 2195)


class Unsupported(Exception):
    """A type with no ABI mapping; the caller turns it into an error naming the parameter."""


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
    if isinstance(t, TNoAbi):
        return "<no fixed ABI>"
    return "fn(..)"


_OPS = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__, ast.FloorDiv: int.__floordiv__,
        ast.Mod: int.__mod__, ast.LShift: int.__lshift__, ast.RShift: int.__rshift__,
        ast.BitAnd: int.__and__, ast.BitOr: int.__or__, ast.BitXor: int.__xor__}


def const_int(text: str, names: Mapping[str, str], depth: int = 0) -> int:
    """The value of a Rust constant expression of integers (``256``, ``4 * N``, ``{ 1 << 3 }``,
    ``TILE as usize``); ``names`` maps ``const`` items and const generic arguments to their text."""
    if depth > 16:
        raise Unsupported(f"constant {text!r} refers to itself")
    words: list[str] = []
    cast = False
    unqualified = re.sub(r"\b(?:[A-Za-z_]\w*\s*::\s*)+(?=[A-Za-z_])", "", text)  # crate::N -> N
    for tok in re.findall(r"[A-Za-z_][A-Za-z0-9_]*|[0-9][0-9A-Za-z_]*|<<|>>|\S", unqualified):
        if tok in ("{", "}"):
            continue
        if cast or tok == "as":  # `N as usize`: the cast changes no value here
            cast = tok == "as"
            continue
        if tok[0].isdigit():
            digits = re.sub(r"(?:[iu](?:8|16|32|64|128|size))$", "", tok.replace("_", ""))
            try:
                words.append(str(int(digits, 0)))
            except ValueError:
                raise Unsupported(f"expected a constant integer expression (got {text!r})") from None
        elif tok[0].isalpha() or tok[0] == "_":
            if tok not in names:
                raise Unsupported(f"the constant {tok!r} is not defined in the source (got {text!r})")
            words.append(f"({const_int(names[tok], names, depth + 1)})")
        else:
            words.append("//" if tok == "/" else tok)
    expression = " ".join(words)
    try:
        return _evaluate(ast.parse(expression, mode="eval").body)
    except (SyntaxError, ValueError, TypeError, ZeroDivisionError):
        raise Unsupported(f"expected a constant integer expression (got {text!r})") from None


def _evaluate(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    raise ValueError("not an integer expression")


Subst = Mapping[str, RustType | str]


class TypeMapper:
    """Maps parsed Rust types to kinds, with the structs, enums, aliases and consts of the crate."""

    def __init__(self, units: list[RustSource], convention: Convention):
        self.units, self.convention = units, convention
        self.structs = {name: s for unit in units for name, s in unit.structs.items()}
        self.enums = {name: e for unit in units for name, e in unit.enums.items()}
        self.aliases = {name: a for unit in units for name, a in unit.aliases.items()}
        self.consts = {name: c for unit in units for name, c in unit.consts.items()}

    def kind(self, t: RustType, subst: Subst, depth: int = 0) -> ParamType:
        if depth > 32:
            raise Unsupported("type nests too deeply (recursive alias or struct?)")
        if isinstance(t, TNoAbi):
            raise Unsupported(t.reason)
        if isinstance(t, TPath):
            return self._path(t, subst, depth)
        if isinstance(t, (TRef, TPtr)):
            return self._pointer(t, subst, depth)
        if isinstance(t, TFnPtr):
            return Pointer(None, False)
        if isinstance(t, TArray):
            count = self.length(t.length, subst)
            inner = self.kind(t.inner, subst, depth + 1)
            if 0 < count <= _MAX_TUPLE_ARRAY and memory_layout(inner)[0]:
                return Tuple((inner,) * count)
            size, align = memory_layout(inner)
            return Opaque(size * count, align)
        if isinstance(t, TTuple):
            return self._record([self.kind(i, subst, depth + 1) for i in t.items], tuple_=True)
        raise Unsupported("an unsized slice can only be passed behind a reference")

    def length(self, text: str, subst: Subst) -> int:
        """An array length or const generic argument: a literal or a constant expression."""
        names = {**self.consts, **{k: v for k, v in subst.items() if isinstance(v, str)}}
        return const_int(text, names)

    def _path(self, t: TPath, subst: Subst, depth: int) -> ParamType:
        name = t.name
        if len(t.segments) == 1 and name in subst and not isinstance(subst[name], str):
            return self.kind(subst[name], {}, depth + 1)  # type: ignore[arg-type]
        if name in self.aliases:
            return self.kind(self.aliases[name], subst, depth + 1)
        if name in self.structs:
            return self._struct(self.structs[name], t, subst, depth)
        if name in self.enums:
            return self._enum(self.enums[name], subst, depth)
        if name in _PRIMITIVES:
            return Scalar(dtype(_PRIMITIVES[name]))
        if name in _WIDE:
            return _WIDE[name]
        if name in _ZSTS:
            return _ZST
        if (atomic := _ATOMIC.fullmatch(name)) is not None:
            width = atomic.group(1).lower()
            return Scalar(dtype(_PRIMITIVES[width]))
        if (nonzero := _NONZERO.fullmatch(name)) is not None:
            return self._path(TPath((nonzero.group(1).lower(),)), subst, depth)
        types = [a for a in t.args if not isinstance(a, str)]
        if name in _TRANSPARENT and types:
            return self.kind(types[0], subst, depth + 1)
        if name == "NonNull" and types:
            return Pointer(self._pointee(types[0], subst, depth), True)
        if name == "Option" and types:
            return self._option(types[0], subst, depth)
        if name == "DisjointSlice" and types:
            rows_2d = len(types) > 1 and isinstance(types[1], TPath) and types[1].name in _RUNTIME_2D_SPACES
            if self.convention is Convention.OXIDE:
                return disjoint_slice_of(self._element(types[0], subst, depth), rows_2d, memory_layout)
            raise Unsupported("DisjointSlice is a cuda-oxide type; load this kernel with ptxbridge.oxide")
        if name in ("c_void",):
            raise Unsupported("c_void has no size; use it behind a pointer")
        raise Unsupported(f"unknown type {name!r} (not a primitive, and no struct, enum or type alias "
                          f"of that name in the source)")

    def _option(self, inner: RustType, subst: Subst, depth: int) -> ParamType:
        """``Option<T>`` has T's layout exactly when T has a null niche Rust guarantees
        (references, ``NonNull``, ``NonZero*``, function pointers: the ``core::option`` docs)."""
        niche = isinstance(inner, TPath) and (inner.name in ("NonNull", "NonZero")
                                              or _NONZERO.fullmatch(inner.name) is not None)
        guaranteed = isinstance(inner, (TRef, TFnPtr)) or niche
        if not guaranteed:
            raise Unsupported(f"Option<{show_type(inner)}> has no layout Rust guarantees (only Option of "
                              "a reference, NonNull, NonZero* or fn pointer does)")
        return self.kind(inner, subst, depth + 1)

    def _struct(self, s: RustStruct, t: TPath, subst: Subst, depth: int) -> ParamType:
        inner = self._generic_args(s.generics, t, subst)
        fields = [(n, self.kind(ft, inner, depth + 1)) for n, ft in s.fields]
        reprs = set(s.repr)
        if s.union:
            return self._union([k for _, k in fields], reprs)
        if "transparent" in reprs:
            sized = [k for _, k in fields if memory_layout(k)[0] > 0]
            return sized[0] if sized else _ZST
        aligns = [int(r[6:-1]) for r in reprs if r.startswith("align(")]
        if any(r.startswith("packed") for r in reprs):
            return Opaque(sum(memory_layout(k)[0] for _, k in fields), 1)
        record: ParamType = _ZST
        if "C" in reprs and fields:
            record = Struct(s.name, tuple(StructField(n, k) for n, k in fields))
        elif "C" not in reprs:
            record = self._record([k for _, k in fields], tuple_=False)
        size, natural = memory_layout(record)
        rust_align = max([natural, *aligns])
        rust_size = -(-size // rust_align) * rust_align
        oxide = self.convention is Convention.OXIDE
        if rust_size == 0 or (isinstance(record, Struct) and (not aligns or (oxide and rust_size == size))):
            return record  # cuda-oxide passes the LLVM struct: its fields' natural alignment, not align(N)
        return Opaque(rust_size, natural if oxide else rust_align)

    def _generic_args(self, names: tuple[str, ...], t: TPath, subst: Subst) -> dict[str, RustType | str]:
        args: dict[str, RustType | str] = {}
        for name, arg in zip(names, t.args, strict=False):
            if isinstance(arg, TPath) and len(arg.segments) == 1 and arg.name in subst:
                arg = subst[arg.name]  # a generic argument that is the caller's own parameter
            args[name] = arg
        return args

    def _union(self, kinds: list[ParamType], reprs: set[str]) -> ParamType:
        layouts = [memory_layout(k) for k in kinds]
        align = max([a for _, a in layouts] + [1])
        size = max([s for s, _ in layouts] + [0])
        if "C" not in reprs and "transparent" not in reprs:
            raise Unsupported("a union needs #[repr(C)] for a defined layout")
        return Opaque(-(-size // align) * align, align) if size else _ZST

    def _enum(self, enum: RustEnum, subst: Subst, depth: int) -> ParamType:
        """A fieldless enum with an integer repr is that integer; an enum with fields has a layout
        only with ``#[repr(C)]`` or an integer repr (RFC 2195), passed as one blob."""
        ints = [r for r in enum.repr if r in _PRIMITIVES and r not in ("bool", "char", "f16", "bf16", "f32",
                                                                        "f64")]
        tag = Scalar(dtype(_PRIMITIVES[ints[0]])) if ints else (_C_INT if "C" in enum.repr else None)
        if tag is None:
            raise Unsupported(f"enum {enum.name} needs #[repr(C)] or an integer #[repr] for a defined layout")
        if enum.fieldless:
            return tag
        variants = [[self.kind(ft, subst, depth + 1) for _, ft in fields] for fields in enum.variants]
        if ints and "C" not in enum.repr:  # union of #[repr(C)] structs (tag, fields...)
            tagged = [self._record([tag, *v], tuple_=False, reorder=False) for v in variants]
            return self._union(tagged, {"C"})
        payload = self._union([self._record(v, tuple_=False, reorder=False) for v in variants], {"C"})
        return self._record([tag, payload], tuple_=False, reorder=False)

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

    def fields_in_memory_order(self, t: RustType, subst: Subst) -> list[tuple[str, RustType]] | None:
        """The fields of the struct ``t`` names, in rustc's memory order; None when ``t`` is no struct
        (cuda-oxide passes a struct to a device function as these fields, ``mir-lower``)."""
        if isinstance(t, TPath) and len(t.segments) == 1 and t.name in subst \
                and not isinstance(subst[t.name], str):
            return self.fields_in_memory_order(subst[t.name], {})  # type: ignore[arg-type]
        if isinstance(t, TPath) and t.name in self.aliases:
            return self.fields_in_memory_order(self.aliases[t.name], subst)
        if not isinstance(t, TPath) or t.name not in self.structs or self.structs[t.name].union:
            return None
        s = self.structs[t.name]
        inner = self._generic_args(s.generics, t, subst)
        if set(s.repr) & {"C", "transparent"} or any(r.startswith("packed") for r in s.repr):
            return [(n, _bind(ft, inner)) for n, ft in s.fields]
        aligns = [memory_layout(self.kind(ft, inner))[1] for _, ft in s.fields]
        order = sorted(range(len(s.fields)), key=lambda i: -aligns[i])
        return [(s.fields[i][0], _bind(s.fields[i][1], inner)) for i in order]

    def _pointer(self, t: TRef | TPtr, subst: Subst, depth: int) -> ParamType:
        inner = t.inner
        if isinstance(inner, TNoAbi) and inner.fat:
            raise Unsupported(f"a pointer to a trait object is a fat pointer: {inner.reason}")
        if isinstance(inner, TPath) and inner.name == "str" and len(inner.segments) == 1:
            inner = TSlice(TPath(("u8",)))
        # a reference promises no aliasing (docs/safety.md); a shared one only to a type without UnsafeCell
        borrow = "borrow" if isinstance(t, TRef) and (t.mutable or self._frozen(inner, subst, depth)) else ""
        if isinstance(inner, TSlice) and (isinstance(t, TRef) or self.convention is Convention.OXIDE):
            return slice_of(self._element(inner.inner, subst, depth), t.mutable, memory_layout)
        if isinstance(inner, TSlice):  # a raw slice pointer: its fat pointer, taken apart
            pointee = self._pointee(inner.inner, subst, depth)
            return Struct("slice", (StructField("ptr", Pointer(pointee, t.mutable, borrow)),
                                    StructField("len", Scalar(dtype("u64")))))
        if isinstance(inner, TNoAbi) and isinstance(t, TRef):
            raise Unsupported(inner.reason)
        return Pointer(self._pointee(inner, subst, depth), t.mutable, borrow)

    def _frozen(self, t: RustType, subst: Subst, depth: int) -> bool:
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
            return self._frozen(subst[name], {}, depth + 1)  # type: ignore[arg-type]
        if name in self.aliases:
            return self._frozen(self.aliases[name], subst, depth + 1)
        if name in self.structs:
            s = self.structs[name]
            inner = self._generic_args(s.generics, t, subst)
            return all(self._frozen(ft, inner, depth + 1) for _, ft in s.fields)
        if name in _INTERIOR or _ATOMIC.fullmatch(name) is not None:
            return False
        if (name in _PRIMITIVES or name in _WIDE or name in _ZSTS or name in self.enums or name == "c_void"
                or _NONZERO.fullmatch(name) is not None):
            return True
        known = name in _TRANSPARENT or name in ("NonNull", "Option")
        return known and all(self._frozen(a, subst, depth + 1) for a in args)

    def _pointee(self, t: RustType, subst: Subst, depth: int) -> ParamType | None:
        try:
            return self.kind(t, subst, depth + 1)
        except Unsupported:
            return None  # c_void, foreign types: an untyped pointer

    def _element(self, t: RustType, subst: Subst, depth: int) -> ParamType:
        element = self.kind(t, subst, depth + 1)
        if memory_layout(element)[0] == 0:
            raise Unsupported(f"a slice of a zero-sized element ({show_type(t)}) has no length to pass")
        return element


def _bind(t: RustType, args: Mapping[str, RustType | str]) -> RustType:
    """``t`` with the struct's own generic parameters replaced by the arguments it was used with."""
    if not args:
        return t
    if isinstance(t, TPath):
        if len(t.segments) == 1 and t.name in args and not isinstance(args[t.name], str):
            return args[t.name]  # type: ignore[return-value]
        return TPath(t.segments, tuple(a if isinstance(a, str) else _bind(a, args) for a in t.args))
    if isinstance(t, (TRef, TPtr)):
        return type(t)(_bind(t.inner, args), t.mutable)
    if isinstance(t, TSlice):
        return TSlice(_bind(t.inner, args))
    if isinstance(t, TArray):
        length = args.get(t.length, t.length)
        return TArray(_bind(t.inner, args), length if isinstance(length, str) else t.length)
    if isinstance(t, TTuple):
        return TTuple(tuple(_bind(i, args) for i in t.items))
    return t


def parse_type(text: str) -> RustType:
    """A Rust type from its spelling (for generic arguments given by a user)."""
    unit = parse_source(f"type __T = {text};", "<generic argument>")
    return unit.aliases["__T"]
