"""Signature and type text from the data (the inverse of the parser in ``_syntax_parse``).

A kind's text form is its entry's (:mod:`.kind_entries`): a :class:`~.kind_table.Generic`
form ``Head<args>{promises}`` is written here from its description, a
:class:`~.kind_table.Custom` form by the entry's own ``format``.
"""

from __future__ import annotations

from dataclasses import fields
from functools import cache
from typing import Any

from ._syntax_tables import DIM3_ATTRIBUTES
from .kind_entries import KINDS, quote_name
from .kind_table import Generic
from .kinds import ParamType
from .params import SignatureFields

__all__ = ["format_signature", "format_type"]


def _format_value(value: Any, form: str) -> str:
    if form.endswith("ints"):
        return "[" + ", ".join("_" if v is None else str(v) for v in value) + "]"
    if form == "mask":
        return f"-{-value:#x}" if value < 0 else f"{value:#x}"
    return str(value)


@cache
def _defaults(cls: type) -> dict[str, Any]:
    return {f.name: f.default for f in fields(cls)}


def _format_promises(obj: Any, table: tuple[tuple[str, str, str], ...]) -> str:
    """``{key: value, flag}`` for the promises that differ from the kind's defaults; "" for none."""
    defaults = _defaults(type(obj))
    parts = []
    for key, attr, form in table:
        value = getattr(obj, attr)
        if value == defaults[attr]:
            continue
        parts.append(key if form == "flag" else f"{key}: {_format_value(value, form)}")
    return "{" + ", ".join(parts) + "}" if parts else ""


def _format_generic(t: Any, syntax: Generic) -> str:
    args = []
    for arg in syntax.args:
        value = getattr(t, arg.attr)
        text = format_type(value) if arg.form == "type" else str(value)
        args.append(f"{arg.keyword} {text}" if arg.keyword else text)
    return f"{syntax.head_of(t)}<{', '.join(args)}>" + _format_promises(t, syntax.promises)


def format_type(t: ParamType) -> str:
    """The text of one parameter type (the inverse of :func:`parse_type`)."""
    try:
        syntax = KINDS.entry_of(t).syntax
    except TypeError as exc:
        raise TypeError(f"format_type: {exc}") from None
    if isinstance(syntax, Generic):
        return _format_generic(t, syntax)
    return syntax.format(t, format_type)


def _format_attributes(sig: SignatureFields) -> list[str]:
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


def format_signature(sig: SignatureFields) -> str:
    """One line of text that :func:`parse_signature` reads back to an equal signature."""
    head = "kernel" if sig.kind == "kernel" else "device fn"
    params = ", ".join(f"{quote_name(p.name)}: {format_type(p.type)}" for p in sig.params)
    returns = "" if sig.returns is None else f" -> {format_type(sig.returns)}"
    return " ".join([*_format_attributes(sig), f"{head} {quote_name(sig.name)}({params}){returns}"])
