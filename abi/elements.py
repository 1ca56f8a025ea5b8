"""Slices of any fixed-layout element: what a tensor passed for ``&[T]`` must hold.

A slice is a pointer and a length *in elements* whatever ``T`` is (the
``oxide`` convention passes ``&[T]`` and ``DisjointSlice<T>`` so for any
``T``).  A tensor for a slice of a non-number element holds whole elements as
its *unit* dtype: the one scalar type every byte of ``T`` belongs to when
``T`` is made of one scalar type with no padding (``[f32; 4]``, ``struct V
{ x: f32, y: f32 }``: f32), else ``u8`` (raw bytes).  The length passed is the
tensor's size in units divided by the units per element.
"""

from __future__ import annotations

from .dtypes import DType, dtype
from .kinds import DisjointSlice, ParamType, Pointer, Scalar, Slice, Struct, StructField, Tuple
from .lowering import field_offsets, memory_layout

__all__ = ["disjoint_slice_of", "slice_of", "unit_dtype", "units_per_element"]


def _leaves(t: ParamType, base: int) -> list[tuple[int, DType]] | None:
    """(offset, dtype) of every scalar ``t`` is made of, or None when a part is not a scalar."""
    if isinstance(t, Scalar):
        return [(base, t.dtype)]
    if isinstance(t, Pointer):
        return [(base, dtype("u64"))]
    if isinstance(t, (Struct, Tuple)):
        members = [f.type for f in t.fields] if isinstance(t, Struct) else list(t.items)
        offsets = field_offsets(Struct("record", tuple(StructField("_", m) for m in members)))
        found: list[tuple[int, DType]] = []
        for member, offset in zip(members, offsets, strict=True):
            inner = _leaves(member, base + offset)
            if inner is None:
                return None
            found += inner
        return found
    return None


def unit_dtype(element: ParamType) -> DType:
    """The scalar a tensor for ``&[element]`` holds: the element's one scalar type, else ``u8``."""
    if isinstance(element, Scalar):
        return element.dtype
    size = memory_layout(element)[0]
    leaves = _leaves(element, 0)
    if leaves:
        first = leaves[0][1]
        step = first.itemsize
        if all(dt == first and offset == i * step for i, (offset, dt) in enumerate(leaves)) \
                and len(leaves) * step == size:
            return first
    return dtype("u8")


def units_per_element(t: Slice | DisjointSlice) -> int:
    """How many ``t.dtype`` values one element occupies (1 for a slice of numbers)."""
    if t.element is None:
        return 1
    return memory_layout(t.element)[0] // t.dtype.itemsize


def slice_of(element: ParamType, mutable: bool = False) -> Slice:
    """``&[element]`` / ``&mut [element]``."""
    return Slice(unit_dtype(element), mutable, element)


def disjoint_slice_of(element: ParamType, rows_2d: bool = False) -> DisjointSlice:
    """``DisjointSlice<element>`` (``rows_2d``: a runtime 2-D index space)."""
    return DisjointSlice(unit_dtype(element), rows_2d, element)
