"""The arguments' memory, by name: which argument an access overran, and by how much.

The call path hands the loader each argument's memory range labelled with the
argument's name (:class:`~ptxbridge.loaders.base.Buffer`); the image's
:class:`~ptxbridge.abi.signature.Signature` lays out the parameter buffer
(:func:`~ptxbridge.abi.layout.layout_of`).  Together they say, for every
8-byte parameter whose value points into its own argument's buffer, that
buffer's extent: what :mod:`.provenance` checks an access against, and what an
error names ("overruns argument 'x' (10 float32, 40 bytes at 0x...) by 4 bytes").
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ptxbridge.abi.layout import layout_of

__all__ = ["Extent", "parameter_extents", "named_extents", "extent_of", "miss", "overrun", "nearest"]


@dataclass(frozen=True, slots=True)
class Extent:
    """``[lo, hi)``: the bytes argument ``name`` brought, of ``itemsize``-byte ``dtype`` elements."""

    lo: int
    hi: int
    name: str
    itemsize: int = 1
    dtype: str = ""

    def describe(self) -> str:
        size = self.hi - self.lo
        count = f"{size // self.itemsize} {self.dtype}, " if self.dtype and self.itemsize > 1 else ""
        return f"argument '{self.name}' ({count}{size} bytes at 0x{self.lo:x})"


def named_extents(buffers: Sequence[Any]) -> list[Extent]:
    """Every labelled buffer as an extent (unlabelled ones, scratch memory, are not arguments)."""
    return [Extent(b.ptr, b.ptr + b.nbytes, b.name, b.itemsize, b.dtype) for b in buffers
            if getattr(b, "name", "")]


def parameter_extents(
    signature: Any, params: bytes, extents: Sequence[Extent], words: frozenset[int] | None = None
) -> dict[int, Extent]:
    """Parameter byte offset -> the extent of the argument buffer its 8-byte value points into
    (the argument's own buffers only, so a short view is not mistaken for the tensor it views); a
    struct's words too, for its pointer fields.  ``words``: only these offsets (the ones a kernel
    takes addresses from), so a launch does not test every word of every struct."""
    if signature is None or not extents:
        return {}
    owned: dict[str, list[Extent]] = {}
    for extent in extents:
        if extent.hi > extent.lo:
            owned.setdefault(extent.name, []).append(extent)
    found: dict[int, Extent] = {}
    for offset, name in _words_of(signature, len(params), words):
        own = owned.get(name)
        if own:
            (value,) = struct.unpack_from("<Q", params, offset)
            mine = [e for e in own if e.lo <= value <= e.hi]
            if mine:
                found[offset] = max(mine, key=lambda e: e.hi - e.lo)
    return found


@lru_cache(maxsize=1024)
def _words_of(signature: Any, size: int, words: frozenset[int] | None) -> tuple[tuple[int, str], ...]:
    """(offset, argument name) of every aligned 8-byte word of a ``size``-byte parameter buffer
    (of ``words`` only, when given): a pointer, or a struct's pointer field.  Cached, as launches
    repeat signatures; none for a signature that has no layout."""
    try:
        layout = layout_of(signature)
    except Exception:
        return ()
    found = []
    for laid in layout.params:
        start = -(-laid.offset // 8) * 8
        for offset in range(start, min(laid.end, size) - 7, 8):
            if words is None or offset in words:
                found.append((offset, signature.params[laid.param.source].name))
    return tuple(found)


def extent_of(by_param: dict[int, Extent], origin: frozenset[int] | None) -> Extent | None:
    """The extent an access whose address derives from the parameters ``origin``
    (:func:`.provenance.origins`) must stay in: the one member that has an extent, else None (no
    check beyond the regions)."""
    if origin is None:
        return None
    candidates = {by_param[o] for o in origin if o in by_param}
    return candidates.pop() if len(candidates) == 1 else None


def miss(extent: Extent, address: int, size: int) -> str:
    """Where ``size`` bytes at ``address`` fall outside ``extent``: how many bytes, which element."""
    itemsize = max(extent.itemsize, 1)
    elements = (extent.hi - extent.lo) // itemsize
    if address < extent.lo:
        gap = extent.lo - address
        return f"{gap} bytes before its start (element -{-(-gap // itemsize)}; it has {elements})"
    where = f"(element {(address - extent.lo) // itemsize}; it has {elements})"
    if address >= extent.hi:
        gap = address - extent.hi
        return f"{gap} bytes past its end {where}" if gap else f"just past its end {where}"
    return f"its last {address + size - extent.hi} bytes past its end {where}"


def overrun(extent: Extent, address: int, size: int, write: bool) -> str:
    """The reason of a fault on an access that left the argument its address came from."""
    return (f"a {size}-byte {'write' if write else 'read'} overruns {extent.describe()}: "
            f"{miss(extent, address, size)}")


def nearest(extents: Sequence[Extent], address: int, size: int) -> str:
    """``; the nearest argument is ...`` for an address no region holds ('' with no arguments)."""
    if not extents:
        return ""

    def distance(e: Extent) -> int:
        return e.lo - address if address < e.lo else max(address + size - e.hi, 0)
    best = min(extents, key=distance)
    return f"; the nearest is {best.describe()}, {miss(best, address, size)}"
