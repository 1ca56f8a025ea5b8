"""Tables the signature parser and formatter share, so the two directions cannot drift."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from .kinds import TileArray, TileList

__all__ = [
    "ARRAY_PROMISES", "ATTRIBUTE_NAMES", "DIM3_ATTRIBUTES", "GENERIC_NAMES", "IDENT", "KEYWORDS",
    "LIST_PROMISES", "TILE_ARRAY_DEFAULTS", "TILE_LIST_DEFAULTS",
]

IDENT = r"[A-Za-z_$][A-Za-z0-9_$]*"  # a bare name; anything else is written as a JSON string

# Cross-cutting tables: (text key, dataclass attribute, value form).
# Forms: "ints" [1, 16]; "opt_ints" [_, 128]; "int" 16; "mask" 0x3; "flag" (bare key).
ARRAY_PROMISES = (
    ("shape_div", "shape_divisible_by", "ints"),
    ("stride_div", "stride_divisible_by", "ints"),
    ("static_shape", "static_shape", "opt_ints"),
    ("static_stride", "static_stride", "opt_ints"),
    ("stride_lb", "stride_lower_bound", "opt_ints"),
    ("base_align", "base_align", "int"),
    ("alias", "alias_groups", "mask"),
    ("internal_alias", "may_alias_internally", "flag"),
)
LIST_PROMISES = (
    ("alias", "alias_groups", "mask"),
    ("elements_alias", "elements_may_alias", "flag"),
)
DIM3_ATTRIBUTES = (("reqntid", "reqntid"), ("maxntid", "maxntid"), ("cluster", "cluster"))
GENERIC_NAMES = ("DisjointSlice", "DisjointSlice2d", "Array", "TileArray", "TileList",
                 "Tensor", "Partition", "opaque")
KEYWORDS = frozenset(("kernel", "device", "fn", "struct", "const", "void", "mut") + GENERIC_NAMES)
ATTRIBUTE_NAMES = ("convention", *dict(DIM3_ATTRIBUTES), "minnctapersm", "shared")


def _defaults(cls: type) -> dict[str, Any]:
    return {f.name: f.default for f in fields(cls)}


# A promise equal to its default is left out of the text.
TILE_ARRAY_DEFAULTS = _defaults(TileArray)
TILE_LIST_DEFAULTS = _defaults(TileList)
