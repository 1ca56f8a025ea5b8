"""Signature and type text from the data (the inverse of the parser in ``_syntax_parse``)."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from ._syntax_tables import (
    ARRAY_PROMISES,
    DIM3_ATTRIBUTES,
    IDENT,
    LIST_PROMISES,
    TILE_ARRAY_DEFAULTS,
    TILE_LIST_DEFAULTS,
)
from .kinds import (
    Constant,
    DisjointSlice,
    NumbaArray,
    Opaque,
    ParamType,
    Pointer,
    Scalar,
    Slice,
    Struct,
    TileArray,
    TileList,
    TileTensor,
    Tuple,
)

if TYPE_CHECKING:
    from .signature import Signature

__all__ = ["format_signature", "format_type"]

_IDENT = re.compile(IDENT + r"\Z")


def _name(name: str) -> str:
    return name if _IDENT.match(name) else json.dumps(name)


def _format_value(value: Any, form: str) -> str:
    if form.endswith("ints"):
        return "[" + ", ".join("_" if v is None else str(v) for v in value) + "]"
    if form == "mask":
        return f"-{-value:#x}" if value < 0 else f"{value:#x}"
    return str(value)


def _format_promises(obj: Any, table: tuple[tuple[str, str, str], ...], defaults: dict[str, Any]) -> str:
    parts = []
    for key, attr, form in table:
        value = getattr(obj, attr)
        if value == defaults[attr]:
            continue
        parts.append(key if form == "flag" else f"{key}: {_format_value(value, form)}")
    return "{" + ", ".join(parts) + "}" if parts else ""


def _format_constant(value: bool | int | float) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)  # floats keep '.', 'e', 'inf' or 'nan', so they re-read as floats


def _element(t: Slice | DisjointSlice) -> str:
    return t.dtype.name if t.element is None else format_type(t.element)


def format_type(t: ParamType) -> str:
    """The text of one parameter type (the inverse of :func:`parse_type`)."""
    if isinstance(t, Scalar):
        return t.dtype.name
    if isinstance(t, Pointer):
        return f"*{'mut' if t.mutable else 'const'} {'void' if t.pointee is None else format_type(t.pointee)}"
    if isinstance(t, Slice):
        return f"&{'mut ' if t.mutable else ''}[{_element(t)}]"
    if isinstance(t, DisjointSlice):
        return f"DisjointSlice{'2d' if t.rows_2d else ''}<{_element(t)}>"
    if isinstance(t, NumbaArray):
        return f"Array<{t.dtype}, {t.ndim}, {t.layout}>"
    if isinstance(t, TileArray):
        return (f"TileArray<{t.dtype}, {t.ndim}, {t.index}>"
                + _format_promises(t, ARRAY_PROMISES, TILE_ARRAY_DEFAULTS))
    if isinstance(t, TileList):
        promises = _format_promises(t, LIST_PROMISES, TILE_LIST_DEFAULTS)
        return f"TileList<{format_type(t.element)}>{promises}"
    if isinstance(t, TileTensor):
        return f"{'Partition' if t.partition else 'Tensor'}<{t.dtype}, {t.rank}>"
    if isinstance(t, Struct):
        body = ", ".join(f"{_name(f.name)}: {format_type(f.type)}" for f in t.fields)
        return f"struct {_name(t.name)} {{ {body} }}" if body else f"struct {_name(t.name)} {{}}"
    if isinstance(t, Opaque):
        return f"opaque<{t.size}, align {t.align}>"
    if isinstance(t, Tuple):
        if len(t.items) == 1:
            return f"({format_type(t.items[0])},)"
        return "(" + ", ".join(format_type(item) for item in t.items) + ")"
    if isinstance(t, Constant):
        return f"const {_format_constant(t.value)}"
    raise TypeError(f"format_type: not a parameter kind (got {type(t).__name__})")


def _format_attributes(sig: Signature) -> list[str]:
    attrs = [f"#[convention({sig.convention.value})]"]
    for name, attr in DIM3_ATTRIBUTES:
        dims = getattr(sig.launch, attr)
        if dims is not None:
            shown = list(dims)
            while len(shown) > 1 and shown[-1] == 1:
                shown.pop()
            attrs.append(f"#[{name}({', '.join(map(str, shown))})]")
    if sig.launch.minnctapersm is not None:
        attrs.append(f"#[minnctapersm({sig.launch.minnctapersm})]")
    sizes = [f"{which} = {getattr(sig.launch, f'{which}_shared')}" for which in ("static", "dynamic")
             if getattr(sig.launch, f"{which}_shared")]
    if sizes:
        attrs.append(f"#[shared({', '.join(sizes)})]")
    return attrs


def format_signature(sig: Signature) -> str:
    """One line of text that :func:`parse_signature` reads back to an equal signature."""
    head = "kernel" if sig.kind == "kernel" else "device fn"
    params = ", ".join(f"{_name(p.name)}: {format_type(p.type)}" for p in sig.params)
    returns = "" if sig.returns is None else f" -> {format_type(sig.returns)}"
    return " ".join([*_format_attributes(sig), f"{head} {_name(sig.name)}({params}){returns}"])
