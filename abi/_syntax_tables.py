"""Tables the signature parser and formatter share, so the two directions cannot drift.

Which words start which parameter type is the kind table's (:mod:`.kind_entries`);
these are the grammar's own words and the cuTile promise tables the kinds name.
"""

from __future__ import annotations

__all__ = ["ARRAY_PROMISES", "ATTRIBUTE_NAMES", "DIM3_ATTRIBUTES", "GRAMMAR_WORDS", "IDENT", "LIST_PROMISES",
           "TENSOR_PROMISES"]

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
TENSOR_PROMISES = (  # cutile-rs specialisation (kinds.TileTensor)
    ("static_shape", "static_shape", "opt_ints"),
    ("static_stride", "static_stride", "opt_ints"),
    ("shape_div", "shape_divisible_by", "ints"),
    ("stride_div", "stride_divisible_by", "ints"),
    ("base_align", "base_align", "int"),
    ("own_strides", "own_strides", "flag"),
)
LIST_PROMISES = (
    ("alias", "alias_groups", "mask"),
    ("elements_alias", "elements_may_alias", "flag"),
)
DIM3_ATTRIBUTES = (("reqntid", "reqntid"), ("maxntid", "maxntid"), ("cluster", "cluster"))
# words of the grammar itself; with the kinds' start words, no declared struct may take them
GRAMMAR_WORDS = frozenset(("kernel", "device", "fn", "struct", "const", "void", "mut", "restrict"))
ATTRIBUTE_NAMES = ("convention", *dict(DIM3_ATTRIBUTES), "minnctapersm", "shared")
