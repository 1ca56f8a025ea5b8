"""Slices of any fixed-layout element: what a tensor passed for ``&[T]`` must hold.

A slice is a pointer and a length *in elements* whatever ``T`` is (the
``oxide`` convention passes ``&[T]`` and ``DisjointSlice<T>`` so for any
``T``).  A tensor for a slice of a non-number element holds whole elements as
its *unit* dtype: the one scalar type every byte of ``T`` belongs to when
``T`` is made of one scalar type with no padding (``[f32; 4]``, ``struct V
{ x: f32, y: f32 }``: f32), else ``u8`` (raw bytes).  The length passed is the
tensor's size in units divided by the units per element.

``layout`` is the by-value layout of a kind (the kind table's ``by_value``);
it is passed in so this module needs nothing but the kinds.
"""

from __future__ import annotations

from collections.abc import Callable

from ._flat import record_layout
from .dtypes import DType, dtype
from .kinds import DisjointSlice, ParamType, Pointer, Scalar, Slice, Struct, Tuple

__all__ = ["Layout", "disjoint_slice_of", "slice_of", "unit_dtype", "units_per_element"]

Layout = Callable[[ParamType], tuple[int, int]]


def _leaves(t: ParamType, base: int, layout: Layout) -> list[tuple[int, DType]] | None:
    """(offset, dtype) of every scalar ``t`` is made of, or None when a part is not a scalar."""
    if isinstance(t, Scalar):
        return [(base, t.dtype)]
    if isinstance(t, Pointer):
        return [(base, dtype("u64"))]
    if not isinstance(t, (Struct, Tuple)):
        return None
    members = [f.type for f in t.fields] if isinstance(t, Struct) else list(t.items)
    offsets = record_layout([layout(m) for m in members])[0]
    found: list[tuple[int, DType]] = []
    for member, offset in zip(members, offsets, strict=True):
        inner = _leaves(member, base + offset, layout)
        if inner is None:
            return None
        found += inner
    return found


def unit_dtype(element: ParamType, layout: Layout) -> DType:
    """The scalar a tensor for ``&[element]`` holds: the element's one scalar type, else ``u8``."""
    if isinstance(element, Scalar):
        return element.dtype
    leaves = _leaves(element, 0, layout)
    if leaves:
        first = leaves[0][1]
        if all(dt == first and offset == i * first.itemsize for i, (offset, dt) in enumerate(leaves)) \
                and len(leaves) * first.itemsize == layout(element)[0]:
            return first
    return dtype("u8")


def units_per_element(t: Slice | DisjointSlice, layout: Layout) -> int:
    """How many ``t.dtype`` values one element occupies (1 for a slice of numbers)."""
    return 1 if t.element is None else layout(t.element)[0] // t.dtype.itemsize


def slice_of(element: ParamType, mutable: bool, layout: Layout) -> Slice:
    """``&[element]`` / ``&mut [element]``."""
    return Slice(unit_dtype(element, layout), mutable, element)


def disjoint_slice_of(element: ParamType, rows_2d: bool, layout: Layout) -> DisjointSlice:
    """``DisjointSlice<element>`` (``rows_2d``: a runtime 2-D index space)."""
    return DisjointSlice(unit_dtype(element, layout), rows_2d, element)
