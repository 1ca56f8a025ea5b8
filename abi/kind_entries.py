"""The built-in parameter kinds, one :class:`~.kind_table.KindEntry` each, and the table :data:`KINDS`.

Each entry says, for its kind: the manifest fields, the text form, the PTX
parameters per convention (the decision table is in ``docs/kinds.md``), its
by-value layout, the access trait, and how the call path binds an argument to it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from . import tensor_rules
from ._access import NO_MEMORY, Access, Memory, Promise, combine
from ._flat import (
    FLATTENING,
    FlatParam,
    aggregate,
    axes,
    lower_scalar,
    record_layout,
    scalar_layout,
    u64,
)
from ._syntax_tables import ARRAY_PROMISES, IDENT, LIST_PROMISES, TENSOR_PROMISES
from .dtypes import DTYPES
from .elements import disjoint_slice_of, slice_of, units_per_element
from .errors import AbiMismatchError
from .kind_table import Arg, Custom, Generic, KindEntry, KindTable, TensorRule, always
from .kinds import (
    INDEX_WIDTHS,
    Constant,
    DisjointSlice,
    NumbaArray,
    NumbaRecordArray,
    Opaque,
    Pointer,
    Scalar,
    Slice,
    Struct,
    TileArray,
    TileList,
    TileTensor,
    Tuple,
)
from .params import Convention

__all__ = ["KINDS", "quote_name"]

_IDENT = re.compile(IDENT + r"\Z")
_DTYPE = Arg("dtype", "dtype", "an element type")
_NDIM = Arg("ndim", "int", "the number of dimensions")
_READS, _WRITES = Access(Memory.READ, Promise.SHARED_READ), Access(Memory.WRITE, Promise.EXCLUSIVE)
# the promise of a borrow / a __restrict__ pointer, by mutability (aliasing errors)
_BORROW = {True: "a &mut borrow", False: "a shared borrow (&)"}
_RESTRICT = {True: "a __restrict__ pointer", False: "a const __restrict__ pointer"}


def quote_name(name: str) -> str:
    """A name as signature text writes it: bare when an identifier, else a JSON string."""
    return name if _IDENT.match(name) else json.dumps(name)


def _record(members: tuple[Any, ...]) -> tuple[int, int]:
    return record_layout([KINDS.by_value(m) for m in members])[1:]


def _as_aggregate(name: str, t: Any, conv: Convention, source: int) -> list[FlatParam]:
    return aggregate(name, *KINDS.by_value(t), source)


def _combined(members: tuple[Any, ...], conv: Convention | None) -> Access:
    return combine(KINDS.access(m, conv) for m in members)


# -- numbers and raw pointers ------------------------------------------------------------

SCALAR = KindEntry(
    Scalar, "scalar", {"dtype": "dtype"},
    syntax=Custom(tuple(DTYPES), lambda p: Scalar(p.dtype()), lambda t, fmt: t.dtype.name),
    lower=lambda name, t, conv, source: lower_scalar(name, t.dtype, conv, source),
    binding=always("scalar"), by_value=lambda t: scalar_layout(t.dtype), member="scalar")


def _parse_pointer(p: Any) -> Pointer:
    p.expect("*")
    if not p.at("const", "mut"):
        raise p.error("'const' or 'mut'")
    mutable = p.next().text == "mut"
    noalias = "restrict" if p.accept("restrict") else ""
    return Pointer(None if p.accept("void") else p.type(), mutable, noalias)


def _format_pointer(t: Pointer, fmt: Callable[[Any], str]) -> str:
    pointee = "void" if t.pointee is None else fmt(t.pointee)
    if t.noalias == "borrow":
        return f"&{'mut ' if t.mutable else ''}{pointee}"
    return f"*{'mut' if t.mutable else 'const'} {'restrict ' if t.noalias else ''}{pointee}"


POINTER = KindEntry(
    Pointer, "pointer", {"pointee": "opt_type", "mutable": "bool", "noalias": "str"},
    syntax=Custom(("*",), _parse_pointer, _format_pointer),  # a borrow's "&" is the slice entry's start
    lower=lambda name, t, conv, source: [u64(name, source)],
    binding=always("tensor"),
    # a raw pointer promises nothing; a borrow or __restrict__ pointer as much as a slice of its mutability
    access=lambda t, conv: (_WRITES if t.mutable else _READS) if t.noalias else Access(
        Memory.WRITE if t.mutable else Memory.READ),
    by_value=lambda t: (8, 8), member="address",
    children=lambda t: () if t.pointee is None else (("pointee", t.pointee),),
    promise_words=lambda t: _RESTRICT[t.mutable] if t.noalias == "restrict" else _BORROW[t.mutable],
    tensor=TensorRule(tensor_rules.pointer,
                      dtype=lambda t: t.pointee.dtype if isinstance(t.pointee, Scalar) else None,
                      refuses_readonly=lambda t: t.mutable, contiguous=lambda t: "pointer", raw_address=True))

# -- Rust and cuda-oxide slices ----------------------------------------------------------


def _element(p: Any) -> Any:
    """A slice's element: any type with a size (a number, struct, tuple, opaque, pointer)."""
    start = p.peek()
    element = p.type()
    try:
        size = KINDS.by_value(element)[0]
    except AbiMismatchError:
        size = 0
    if size == 0:
        raise p.invalid(start, f"a slice element needs a size (got a zero-sized {type(element).__name__})")
    return element


def _element_text(t: Slice | DisjointSlice, fmt: Callable[[Any], str]) -> str:
    return t.dtype.name if t.element is None else fmt(t.element)


def _parse_reference(p: Any) -> Slice | Pointer:
    """``&[T]`` / ``&mut [T]`` (a slice), else ``&T`` / ``&mut T`` (a borrowed pointer)."""
    p.expect("&")
    mutable = p.accept("mut")
    if not p.accept("["):
        return Pointer(None if p.accept("void") else p.type(), mutable, "borrow")
    element = _element(p)
    p.expect("]")
    return slice_of(element, mutable, KINDS.by_value)


def _slice_values(rule: Callable[..., tuple[int, ...]]) -> Callable[[Any, Any], tuple[int, ...]]:
    """A slice rule that counts whole elements of a non-number element (``abi/elements.py``)."""
    def values(facts: Any, t: Any) -> tuple[int, ...]:
        if t.element is None:
            return rule(facts, t)
        return rule(facts, t, units_per_element(t, KINDS.by_value), KINDS.by_value(t.element)[1])
    return values


SLICE = KindEntry(
    Slice, "slice", {"dtype": "dtype", "mutable": "bool", "element": "opt_type"},
    syntax=Custom(("&",), _parse_reference,
                  lambda t, fmt: f"&{'mut ' if t.mutable else ''}[{_element_text(t, fmt)}]"),
    lower=lambda name, t, conv, source: [u64(name, source), u64(f"{name}.len", source)],
    binding=always("tensor"), access=lambda t, conv: _WRITES if t.mutable else _READS,
    by_value=lambda t: (16, 8), member="address",
    children=lambda t: () if t.element is None else (("element", t.element),),
    promise_words=lambda t: _BORROW[t.mutable],
    tensor=TensorRule(_slice_values(tensor_rules.slice_), refuses_readonly=lambda t: t.mutable,
                      contiguous=lambda t: "slice" if t.element is None else None))


def _parse_disjoint(p: Any) -> DisjointSlice:
    rows_2d = p.next().text == "DisjointSlice2d"
    p.expect("<", "'<'")
    element = _element(p)
    p.expect(">")
    return disjoint_slice_of(element, rows_2d, KINDS.by_value)


def _lower_disjoint(name: str, t: DisjointSlice, conv: Convention, source: int) -> list[FlatParam]:
    flat = [u64(name, source), u64(f"{name}.len", source)]
    if t.rows_2d:
        flat.append(FlatParam(f"{name}.row_width", "u32", 4, 4, source))
    return flat


DISJOINT_SLICE = KindEntry(
    DisjointSlice, "disjoint_slice", {"dtype": "dtype", "rows_2d": "bool", "element": "opt_type"},
    syntax=Custom(("DisjointSlice", "DisjointSlice2d"), _parse_disjoint, lambda t, fmt: (
        f"DisjointSlice{'2d' if t.rows_2d else ''}<{_element_text(t, fmt)}>")),
    lower=_lower_disjoint, binding=always("tensor"), access=lambda t, conv: _WRITES,
    by_value=lambda t: (24, 8) if t.rows_2d else (16, 8), member="address",  # {ptr, len(, u32)} padded
    children=lambda t: () if t.element is None else (("element", t.element),),
    promise_words=lambda t: "a DisjointSlice (each element written by one thread)",
    tensor=TensorRule(_slice_values(tensor_rules.disjoint_slice), refuses_readonly=lambda t: True,
                      contiguous=lambda t: "slice" if t.element is None and not t.rows_2d else None))

# -- arrays with shapes: numba, cuTile, cutile-rs -----------------------------------------


def _lower_numba_array(name: str, t: NumbaArray | NumbaRecordArray, conv: Convention,
                       source: int) -> list[FlatParam]:
    head = [u64(f"{name}.{part}", source) for part in ("meminfo", "parent", "nitems", "itemsize", "data")]
    return head + axes(f"{name}.shape", t.ndim, "u64", 8, source) + axes(f"{name}.strides", t.ndim, "u64", 8,
                                                                         source)


_LAYOUT = Arg("layout", "word", "the layout (C, F or A)", choices=("C", "F", "A"))
NUMBA_ARRAY = KindEntry(
    NumbaArray, "numba_array", {"dtype": "dtype", "ndim": "int", "layout": "str"},
    syntax=Generic({"Array": {}}, (_DTYPE, _NDIM, _LAYOUT)),
    lower=_lower_numba_array, binding=always("tensor"), access=lambda t, conv: Access(Memory.WRITE),
    tensor=TensorRule(tensor_rules.numba_array))
NUMBA_RECORD_ARRAY = KindEntry(
    NumbaRecordArray, "numba_record_array", {"record": "type", "ndim": "int", "layout": "str"},
    syntax=Generic({"RecordArray": {}}, (Arg("record", "type", "the record (a struct)", kind=Struct), _NDIM,
                                         _LAYOUT)),
    lower=_lower_numba_array, binding=always("tensor"), access=lambda t, conv: Access(Memory.WRITE),
    children=lambda t: (("record", t.record),),
    tensor=TensorRule(lambda info, t: tensor_rules.numba_record_array(info, t, KINDS.by_value(t.record)[0]),
                      dtype=lambda t: None))


def _lower_tile_array(name: str, t: TileArray, conv: Convention, source: int) -> list[FlatParam]:
    ptx_type, size = ("u64", 8) if t.index == "i64" else ("u32", 4)
    return ([u64(name, source)] + axes(f"{name}.shape", t.ndim, ptx_type, size, source)
            + axes(f"{name}.strides", t.ndim, ptx_type, size, source))


TILE_ARRAY = KindEntry(
    TileArray, "tile_array", {
        "dtype": "dtype", "ndim": "int", "index": "str", "shape_divisible_by": "ints",
        "stride_divisible_by": "ints", "static_shape": "opt_ints", "static_stride": "opt_ints",
        "stride_lower_bound": "opt_ints", "base_align": "int", "alias_groups": "int",
        "may_alias_internally": "bool"},
    syntax=Generic({"TileArray": {}}, (_DTYPE, _NDIM, Arg(
        "index", "word", f"an index width ({', '.join(INDEX_WIDTHS)})", choices=INDEX_WIDTHS,
        optional="<index width>")), ARRAY_PROMISES),
    lower=_lower_tile_array, binding=always("tensor"),
    access=lambda t, conv: Access(Memory.WRITE, Promise.GROUPS, t.alias_groups, t.may_alias_internally),
    tensor=TensorRule(tensor_rules.tile_array))

TILE_LIST = KindEntry(
    TileList, "tile_list", {"element": "type", "alias_groups": "int", "elements_may_alias": "bool"},
    syntax=Generic({"TileList": {}}, (Arg("element", "type", "elements", kind=TileArray),), LIST_PROMISES),
    lower=lambda name, t, conv, source: [u64(name, source), FlatParam(f"{name}.len", "u32", 4, 4, source)],
    binding=always("tile-list"),
    access=lambda t, conv: Access(Memory.WRITE, Promise.GROUPS, t.alias_groups | t.element.alias_groups,
                                  t.elements_may_alias or t.element.may_alias_internally),
    children=lambda t: (("element", t.element),))


def _lower_tile_tensor(name: str, t: TileTensor, conv: Convention, source: int) -> list[FlatParam]:
    parts = ["dims", "strides"] + (["partition_dims", "partition_strides"] if t.partition else [])
    flat = [u64(name, source)]
    for part in parts:
        flat += axes(f"{name}.{part}", t.rank, "s32", 4, source)
    return flat


TILE_TENSOR = KindEntry(
    TileTensor, "tile_tensor", {
        "dtype": "dtype", "rank": "int", "partition": "bool", "static_shape": "opt_ints",
        "static_stride": "opt_ints", "shape_divisible_by": "ints", "stride_divisible_by": "ints",
        "base_align": "int", "own_strides": "bool"},
    syntax=Generic({"Tensor": {"partition": False}, "Partition": {"partition": True}},
                   (_DTYPE, Arg("rank", "int", "the number of dimensions")), TENSOR_PROMISES),
    lower=_lower_tile_tensor, binding=lambda t, conv: "partition" if t.partition else "tensor",
    access=lambda t, conv: _WRITES if t.partition else _READS,  # &mut Tensor / &Tensor
    promise_words=lambda t: "a &mut Tensor partition" if t.partition else "a &Tensor (shared borrow)",
    tensor=TensorRule(tensor_rules.tile_tensor))

# -- by-value aggregates --------------------------------------------------------------------


def _format_struct(t: Struct, fmt: Callable[[Any], str]) -> str:
    body = ", ".join(f"{quote_name(f.name)}: {fmt(f.type)}" for f in t.fields)
    return f"struct {quote_name(t.name)} {{ {body} }}" if body else f"struct {quote_name(t.name)} {{}}"


def _parse_struct(p: Any) -> Struct:
    p.expect("struct")
    return p.struct_body(p.name("a struct name"))


STRUCT = KindEntry(
    Struct, "struct", {"name": "str", "fields": "fields"},
    syntax=Custom(("struct",), _parse_struct, _format_struct),
    # numba passes records by device pointer (to a copy: the caller's data is never written)
    lower=lambda name, t, conv, source: (
        [u64(name, source)] if conv is Convention.NUMBA else _as_aggregate(name, t, conv, source)),
    binding=lambda t, conv: "by-pointer" if conv is Convention.NUMBA else "by-value",
    access=lambda t, conv: NO_MEMORY if conv is Convention.NUMBA else _combined(KINDS.children(t), conv),
    by_value=lambda t: _record(KINDS.children(t)), member="struct",
    children=lambda t: tuple((f.name, f.type) for f in t.fields))


def _parse_tuple(p: Any) -> Tuple:
    start = p.expect("(")
    items: list[Any] = []
    trailing = False
    while not p.accept(")"):
        items.append(p.type())
        trailing = p.accept(",")
        if not trailing and not p.at(")"):
            raise p.error("',' or ')'")
    if len(items) == 1 and not trailing:
        raise p.invalid(start, "a one-item tuple is written '(T,)' (got no ',')")
    return Tuple(tuple(items))


def _format_tuple(t: Tuple, fmt: Callable[[Any], str]) -> str:
    if len(t.items) == 1:
        return f"({fmt(t.items[0])},)"
    return "(" + ", ".join(fmt(item) for item in t.items) + ")"


def _lower_tuple(name: str, t: Tuple, conv: Convention, source: int) -> list[FlatParam]:
    if conv not in FLATTENING:
        return _as_aggregate(name, t, conv, source)  # one aggregate, repr(C) order
    flat: list[FlatParam] = []
    for i, item in enumerate(t.items):
        flat += KINDS.lower(f"{name}.{i}", item, conv, source)
    return flat


TUPLE = KindEntry(
    Tuple, "tuple", {"items": "types"},
    syntax=Custom(("(",), _parse_tuple, _format_tuple),
    lower=_lower_tuple, binding=lambda t, conv: "items" if conv in FLATTENING else "by-value",
    access=lambda t, conv: _combined(t.items, conv), by_value=lambda t: _record(t.items), member="tuple",
    children=lambda t: tuple(enumerate(t.items)))

OPAQUE = KindEntry(
    Opaque, "opaque", {"size": "int", "align": "int"},
    syntax=Generic({"opaque": {}}, (
        Arg("size", "int", "the size in bytes"),
        Arg("align", "int", "the alignment", keyword="align", optional="align N"))),
    lower=lambda name, t, conv, source: aggregate(name, t.size, t.align, source),
    binding=always("by-value"), by_value=lambda t: (t.size, t.align), member="bytes")


def _format_constant(value: bool | int | float) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)  # floats keep '.', 'e', 'inf' or 'nan', so they re-read as floats


def _parse_constant(p: Any) -> Constant:
    p.expect("const")
    return Constant(p.constant())


CONSTANT = KindEntry(
    Constant, "constant", {"value": "value"},
    syntax=Custom(("const",), _parse_constant, lambda t, fmt: f"const {_format_constant(t.value)}"),
    lower=lambda name, t, conv, source: [],  # compiled in: no PTX parameter
    binding=always("by-value"), by_value=lambda t: (0, 1), member="constant")

KINDS = KindTable((SCALAR, POINTER, SLICE, DISJOINT_SLICE, NUMBA_ARRAY, NUMBA_RECORD_ARRAY, TILE_ARRAY,
                   TILE_LIST, TILE_TENSOR, STRUCT, OPAQUE, TUPLE, CONSTANT))
"""The table every module consults; :meth:`~.kind_table.KindTable.register` adds a kind."""
