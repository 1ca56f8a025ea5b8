"""The signature text syntax: parse and format (grammar in ``docs/signature-syntax.md``).

Rust-flavoured and exact: ``parse_signature(format_signature(sig)) == sig`` for
every signature.  One table per family of fields (launch attributes, cuTile
promises, generic types) drives both directions, so the two cannot drift.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from .dtypes import DTYPES, DType
from .errors import SignatureSyntaxError
from .kinds import (
    INDEX_WIDTHS,
    Constant,
    DisjointSlice,
    NumbaArray,
    Opaque,
    ParamType,
    Pointer,
    Scalar,
    Slice,
    Struct,
    StructField,
    TileArray,
    TileList,
    TileTensor,
    Tuple,
)
from .signature import Convention, LaunchMeta, Param, Signature

__all__ = ["parse_signature", "parse_signatures", "parse_type", "format_signature", "format_type"]

_SOURCE = "<signature>"
_MAX_DEPTH = 64  # types nested deeper than this are rejected, not recursed into
_MAX_EXPANDED = 1 << 16  # struct-type nodes that references to declared structs may expand to
_MAX_DIGITS = 400  # longest number literal (a float's repr needs at most ~25)

_TOKEN = re.compile(r"""
    (?P<skip>\s+|//[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<number>0[xX][0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)
  | (?P<ident>[A-Za-z_$][A-Za-z0-9_$]*)
  | (?P<punct>\#\[|->|[\[\](){}<>,:;&*=\-])
""", re.VERBOSE)
_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*\Z")

# Cross-cutting tables: (text key, dataclass attribute, value form).
# Forms: "ints" [1, 16]; "opt_ints" [_, 128]; "int" 16; "mask" 0x3; "flag" (bare key).
_ARRAY_PROMISES = (
    ("shape_div", "shape_divisible_by", "ints"),
    ("stride_div", "stride_divisible_by", "ints"),
    ("static_shape", "static_shape", "opt_ints"),
    ("static_stride", "static_stride", "opt_ints"),
    ("stride_lb", "stride_lower_bound", "opt_ints"),
    ("base_align", "base_align", "int"),
    ("alias", "alias_groups", "mask"),
    ("internal_alias", "may_alias_internally", "flag"),
)
_LIST_PROMISES = (
    ("alias", "alias_groups", "mask"),
    ("elements_alias", "elements_may_alias", "flag"),
)
_DIM3_ATTRIBUTES = (("reqntid", "reqntid"), ("maxntid", "maxntid"), ("cluster", "cluster"))
_GENERIC_NAMES = ("DisjointSlice", "DisjointSlice2d", "Array", "TileArray", "TileList",
                  "Tensor", "Partition", "opaque")
_KEYWORDS = frozenset(("kernel", "device", "fn", "struct", "const", "void", "mut") + _GENERIC_NAMES)
_ATTRIBUTE_NAMES = ("convention", *dict(_DIM3_ATTRIBUTES), "minnctapersm", "shared")


def _defaults(cls: type) -> dict[str, Any]:
    return {f.name: f.default for f in fields(cls)}


_TILE_ARRAY_DEFAULTS = _defaults(TileArray)
_TILE_LIST_DEFAULTS = _defaults(TileList)


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # string, number, ident, punct, eof
    text: str
    line: int
    col: int


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos, line, line_start = 0, 1, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise SignatureSyntaxError(f"unexpected character {text[pos]!r}", source=_SOURCE,
                                       where=f"{line}:{pos - line_start + 1}")
        if m.lastgroup != "skip":
            tokens.append(_Token(m.lastgroup or "", m.group(), line, pos - line_start + 1))
        newlines = m.group().count("\n")
        if newlines:
            line += newlines
            line_start = pos + m.group().rindex("\n") + 1
        pos = m.end()
    tokens.append(_Token("eof", "", line, pos - line_start + 1))
    return tokens


class _Parser:
    """Recursive descent over the token list; ``structs`` holds declared struct names."""

    def __init__(self, text: str):
        self.tokens = _tokenize(text)
        self.i = 0
        self.depth = 0
        self.structs: dict[str, Struct] = {}
        self.shapes: dict[str, tuple[int, int]] = {}  # declared struct -> (depth, nodes) when expanded
        self.expanded = 0

    # -- token plumbing -------------------------------------------------
    def peek(self) -> _Token:
        return self.tokens[self.i]

    def at(self, *texts: str) -> bool:
        tok = self.peek()
        return tok.kind in ("ident", "punct") and tok.text in texts

    def next(self) -> _Token:
        tok = self.tokens[self.i]
        if tok.kind != "eof":
            self.i += 1
        return tok

    def error(self, what: str) -> SignatureSyntaxError:
        """'expected WHAT after PREVIOUS (got CURRENT)' at the current token."""
        tok = self.peek()
        got = "end of text" if tok.kind == "eof" else repr(tok.text)
        after = f" after {self.tokens[self.i - 1].text!r}" if self.i > 0 else ""
        return SignatureSyntaxError(f"expected {what}{after} (got {got})", source=_SOURCE,
                                    where=f"{tok.line}:{tok.col}")

    def invalid(self, tok: _Token, message: str) -> SignatureSyntaxError:
        return SignatureSyntaxError(message, source=_SOURCE, where=f"{tok.line}:{tok.col}")

    def expect(self, text: str, what: str | None = None) -> _Token:
        if not self.at(text):
            raise self.error(what or repr(text))
        return self.next()

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.next()
            return True
        return False

    def comma_list(self, close: str, item: Callable[[], Any]) -> list[Any]:
        """Items separated by ',' up to ``close`` (trailing comma allowed); consumes ``close``."""
        items: list[Any] = []
        while not self.accept(close):
            items.append(item())
            if not self.at(close):
                self.expect(",", f"',' or {close!r}")
        return items

    # -- literals -------------------------------------------------------
    def name(self, what: str) -> str:
        tok = self.peek()
        if tok.kind == "ident":
            return self.next().text
        if tok.kind == "string":
            self.next()
            try:
                return json.loads(tok.text)
            except json.JSONDecodeError as exc:
                raise self.invalid(tok, f"bad escape in quoted name {tok.text} ({exc.msg})") from None
        raise self.error(what)

    def number(self) -> int | float:
        """The current number token's value; length-capped, as int() refuses over 4300 digits."""
        tok = self.next()
        if len(tok.text) > _MAX_DIGITS:
            raise self.invalid(tok, f"numbers have at most {_MAX_DIGITS} characters (got {len(tok.text)})")
        if _is_float(tok.text):
            return float(tok.text)
        return int(tok.text, 16) if tok.text[:2].lower() == "0x" else int(tok.text)

    def integer(self, what: str = "an integer") -> int:
        negative = self.accept("-")
        tok = self.peek()
        if tok.kind != "number" or _is_float(tok.text):
            raise self.error(what)
        value = self.number()
        return -value if negative else value  # type: ignore[return-value]

    def constant(self) -> bool | int | float:
        if self.at("true", "false"):
            return self.next().text == "true"
        negative = self.accept("-")
        tok = self.peek()
        if self.at("inf", "nan"):
            value: int | float = float(self.next().text)
        elif tok.kind == "number":
            value = self.number()
        else:
            raise self.error("a constant (true, false, an integer or a float)")
        return -value if negative else value

    def dtype(self) -> DType:
        tok = self.peek()
        if tok.kind == "ident" and tok.text in DTYPES:
            return DTYPES[self.next().text]
        raise self.error(f"an element type ({', '.join(DTYPES)})")

    def int_list(self, optional: bool) -> tuple[int | None, ...]:
        self.expect("[", "'['")

        def item() -> int | None:
            if optional and self.accept("_"):
                return None
            return self.integer("an integer or '_'" if optional else "an integer")
        return tuple(self.comma_list("]", item))

    # -- types ----------------------------------------------------------
    def type(self) -> ParamType:
        if self.depth >= _MAX_DEPTH:
            raise self.invalid(self.peek(), f"types nest at most {_MAX_DEPTH} deep")
        self.depth += 1
        try:
            return self._type()
        finally:
            self.depth -= 1

    def _type(self) -> ParamType:
        tok = self.peek()
        if tok.kind == "ident" and tok.text in DTYPES:
            return Scalar(self.dtype())
        if self.accept("*"):
            if not self.at("const", "mut"):
                raise self.error("'const' or 'mut'")
            mutable = self.next().text == "mut"
            return Pointer(None if self.accept("void") else self.type(), mutable)
        if self.accept("&"):
            mutable = self.accept("mut")
            self.expect("[", "'[' (a slice)")
            dt = self.dtype()
            self.expect("]")
            return Slice(dt, mutable)
        if self.accept("("):
            return self.tuple()
        if self.accept("const"):
            return Constant(self.constant())
        if self.accept("struct"):
            return self.struct_body(self.name("a struct name"))
        if tok.kind == "ident" and tok.text in _GENERIC_NAMES:
            return self.generic(self.next())
        if tok.kind == "ident" and tok.text in self.structs:
            return self.reference(self.next())
        raise self.error("a type")

    def reference(self, tok: _Token) -> Struct:
        """A declared struct by name, bounded: sharing one declaration must not nest or grow without limit."""
        depth, nodes = self.shapes[tok.text]
        self.expanded += nodes
        if self.depth + depth > _MAX_DEPTH:
            raise self.invalid(tok, f"types nest at most {_MAX_DEPTH} deep (struct {tok.text!r} "
                                    f"nests {depth} at depth {self.depth})")
        if self.expanded > _MAX_EXPANDED:
            raise self.invalid(tok, f"declared structs expand to at most {_MAX_EXPANDED} types in all "
                                    f"(got {self.expanded})")
        return self.structs[tok.text]

    def shape(self, t: ParamType) -> tuple[int, int]:
        """(depth, nodes) of ``t`` written out inline; declared structs come from ``shapes``."""
        if isinstance(t, Struct) and self.structs.get(t.name) is t:
            return self.shapes[t.name]
        children: tuple[Any, ...] = ()
        if isinstance(t, Struct):
            children = tuple(f.type for f in t.fields)
        elif isinstance(t, Tuple):
            children = t.items
        elif isinstance(t, Pointer) and t.pointee is not None:
            children = (t.pointee,)
        measured = [self.shape(c) for c in children]
        return 1 + max((d for d, _ in measured), default=0), 1 + sum(n for _, n in measured)

    def tuple(self) -> Tuple:
        start = self.tokens[self.i - 1]
        items: list[ParamType] = []
        trailing = False
        while not self.accept(")"):
            items.append(self.type())
            trailing = self.accept(",")
            if not trailing and not self.at(")"):
                raise self.error("',' or ')'")
        if len(items) == 1 and not trailing:
            raise self.invalid(start, "a one-item tuple is written '(T,)' (got no ',')")
        return Tuple(tuple(items))

    def struct_body(self, name: str) -> Struct:
        self.expect("{", "'{' (the struct's fields)")

        def field() -> StructField:
            fname = self.name("a field name")
            self.expect(":", "':'")
            return StructField(fname, self.type())
        return Struct(name, tuple(self.comma_list("}", field)))

    def build(self, tok: _Token, cls: type, *args: Any, **kwargs: Any) -> Any:
        """``cls(*args, **kwargs)``, its ValueError reported at ``tok``."""
        try:
            return cls(*args, **kwargs)
        except ValueError as exc:
            raise self.invalid(tok, str(exc)) from None

    def generic(self, head: _Token) -> ParamType:
        self.expect("<", "'<'")
        built = self._generic_args(head)
        if isinstance(built, TileArray | TileList) and self.at("{"):
            table = _ARRAY_PROMISES if isinstance(built, TileArray) else _LIST_PROMISES
            built = self.build(head, type(built), **{**_as_kwargs(built), **self.promises(table)})
        return built

    def _generic_args(self, tok: _Token) -> ParamType:
        head = tok.text
        if head == "TileList":
            element = self.type()
            if not isinstance(element, TileArray):
                raise self.invalid(tok, f"TileList elements must be TileArray (got {format_type(element)})")
            self.expect(">")
            return TileList(element)
        if head == "opaque":
            size = self.integer("the size in bytes")
            align = 1
            if self.accept(","):
                self.expect("align", "'align'")
                align = self.integer("the alignment")
            self.expect(">", "'>' or ', align N'")
            return self.build(tok, Opaque, size, align)
        dt = self.dtype()
        if head in ("DisjointSlice", "DisjointSlice2d"):
            self.expect(">")
            return DisjointSlice(dt, rows_2d=head.endswith("2d"))
        self.expect(",", "',' and the number of dimensions")
        ndim = self.integer("the number of dimensions")
        if head == "Array":
            self.expect(",", "',' and the layout (C, F or A)")
            if not self.at("C", "F", "A"):
                raise self.error("the layout (C, F or A)")
            layout = self.next().text
            self.expect(">")
            return self.build(tok, NumbaArray, dt, ndim, layout)
        if head == "TileArray":
            index = "i32"
            if self.accept(","):
                if not self.at(*INDEX_WIDTHS):
                    raise self.error(f"an index width ({', '.join(INDEX_WIDTHS)})")
                index = self.next().text
            self.expect(">", "'>' or ', <index width>'")
            return self.build(tok, TileArray, dt, ndim, index)
        self.expect(">")
        return self.build(tok, TileTensor, dt, ndim, partition=head == "Partition")

    def promises(self, table: tuple[tuple[str, str, str], ...]) -> dict[str, Any]:
        self.expect("{")
        by_key = {key: (attr, form) for key, attr, form in table}
        found: dict[str, Any] = {}

        def promise() -> None:
            tok = self.peek()
            if tok.kind != "ident" or tok.text not in by_key:
                raise self.error(f"a promise ({', '.join(by_key)})")
            if tok.text in found:
                raise self.invalid(tok, f"promise {tok.text!r} given twice")
            self.next()
            attr, form = by_key[tok.text]
            if form == "flag":
                found[tok.text] = (attr, True)
                return
            self.expect(":", "':'")
            value = self.int_list(form == "opt_ints") if form.endswith("ints") else self.integer()
            found[tok.text] = (attr, value)
        self.comma_list("}", promise)
        return dict(found.values())

    # -- signatures -----------------------------------------------------
    def attributes(self) -> tuple[Convention, LaunchMeta]:
        values: dict[str, Any] = {}
        seen: set[str] = set()
        convention = Convention.C
        first = self.peek()
        while self.accept("#["):
            tok = self.peek()
            name = self.name("an attribute name")
            if name not in _ATTRIBUTE_NAMES:
                raise self.invalid(tok, f"unknown attribute {name!r} (known: {', '.join(_ATTRIBUTE_NAMES)})")
            if name in seen:
                raise self.invalid(tok, f"attribute {name!r} given twice")
            seen.add(name)
            self.expect("(", "'('")
            if name == "convention":
                words = [self.name("a convention name")]
                while self.accept("-"):
                    words.append(self.name("a convention name"))
                try:
                    convention = Convention("-".join(words))
                except ValueError:
                    known = ", ".join(c.value for c in Convention)
                    raise self.invalid(
                        tok, f"unknown convention {'-'.join(words)!r} (known: {known})") from None
                self.expect(")")
            elif name in dict(_DIM3_ATTRIBUTES):
                dims = self.comma_list(")", self.integer)
                if not 1 <= len(dims) <= 3:
                    raise self.invalid(tok, f"{name} takes 1 to 3 dimensions (got {len(dims)})")
                values[name] = (*dims, *(1,) * (3 - len(dims)))
            elif name == "minnctapersm":
                values[name] = self.integer()
                self.expect(")")
            else:
                values.update(self.shared())
            self.expect("]")
        return convention, self.build(first, LaunchMeta, **values)

    def shared(self) -> dict[str, int]:
        sizes: dict[str, int] = {}

        def item() -> None:
            if not self.at("static", "dynamic"):
                raise self.error("'static = N' or 'dynamic = N'")
            which = self.next().text
            self.expect("=", "'='")
            sizes[f"{which}_shared"] = self.integer("a size in bytes")
        self.comma_list(")", item)
        return sizes

    def signature(self) -> Signature:
        convention, launch = self.attributes()
        if self.accept("device"):
            self.expect("fn", "'fn'")
            kind = "device"
        elif self.accept("kernel"):
            kind = "kernel"
        else:
            raise self.error("'kernel', 'device fn' or an attribute '#['")
        name_tok = self.peek()
        name = self.name("a function name")
        self.expect("(", "'('")

        def param() -> Param:
            pname = self.name("a parameter name")
            self.expect(":", "':'")
            return Param(pname, self.type())
        params = self.comma_list(")", param)
        returns = self.type() if self.accept("->") else None
        return self.build(name_tok, Signature, name, tuple(params), convention, launch, kind, returns)

    def declaration(self) -> None:
        self.expect("struct")
        tok = self.peek()
        name = self.name("a struct name")
        if name in DTYPES or name in _KEYWORDS:
            raise self.invalid(tok, f"struct name {name!r} is reserved; write the struct inline instead")
        if name in self.structs:
            raise self.invalid(tok, f"struct {name!r} declared twice")
        body = self.struct_body(name)
        self.shapes[name] = self.shape(body)
        self.structs[name] = body

    def items(self) -> list[Signature]:
        found: list[Signature] = []
        while self.peek().kind != "eof":
            if self.accept(";"):
                continue
            if self.at("struct"):
                self.declaration()
            else:
                found.append(self.signature())
        return found


def _is_float(literal: str) -> bool:
    return literal[:2].lower() != "0x" and any(c in literal for c in ".eE")


def _as_kwargs(obj: TileArray | TileList) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def parse_signatures(text: str) -> list[Signature]:
    """Every signature in ``text``, in order; ``struct`` declarations and ``;`` may come between."""
    return _Parser(text).items()


def parse_signature(text: str) -> Signature:
    """Exactly one signature (struct declarations before it are allowed)."""
    found = parse_signatures(text)
    if len(found) != 1:
        raise SignatureSyntaxError(f"expected exactly one signature (got {len(found)})", source=_SOURCE)
    return found[0]


def parse_type(text: str) -> ParamType:
    """One parameter type, e.g. ``&mut [f32]``."""
    parser = _Parser(text)
    result = parser.type()
    if parser.peek().kind != "eof":
        raise parser.error("end of text")
    return result


# -- formatting ----------------------------------------------------------
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


def format_type(t: ParamType) -> str:
    """The text of one parameter type (the inverse of :func:`parse_type`)."""
    if isinstance(t, Scalar):
        return t.dtype.name
    if isinstance(t, Pointer):
        return f"*{'mut' if t.mutable else 'const'} {'void' if t.pointee is None else format_type(t.pointee)}"
    if isinstance(t, Slice):
        return f"&{'mut ' if t.mutable else ''}[{t.dtype}]"
    if isinstance(t, DisjointSlice):
        return f"DisjointSlice{'2d' if t.rows_2d else ''}<{t.dtype}>"
    if isinstance(t, NumbaArray):
        return f"Array<{t.dtype}, {t.ndim}, {t.layout}>"
    if isinstance(t, TileArray):
        return (f"TileArray<{t.dtype}, {t.ndim}, {t.index}>"
                + _format_promises(t, _ARRAY_PROMISES, _TILE_ARRAY_DEFAULTS))
    if isinstance(t, TileList):
        promises = _format_promises(t, _LIST_PROMISES, _TILE_LIST_DEFAULTS)
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
    for name, attr in _DIM3_ATTRIBUTES:
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
