"""The grammar of the signature syntax: types, launch attributes, signatures, struct declarations.

Recursive descent over :class:`~._syntax_tokens.Cursor`; nesting and the expansion
of declared structs are bounded, so hostile text fails with a syntax error, not a
``RecursionError`` or unbounded memory.
"""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, Any

from ._syntax_format import format_type
from ._syntax_tables import (
    ARRAY_PROMISES,
    ATTRIBUTE_NAMES,
    DIM3_ATTRIBUTES,
    GENERIC_NAMES,
    KEYWORDS,
    LIST_PROMISES,
)
from ._syntax_tokens import Cursor, Token
from .dtypes import DTYPES
from .elements import disjoint_slice_of, slice_of
from .errors import AbiMismatchError
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
from .lowering import memory_layout
from .params import Convention, LaunchMeta, Param

if TYPE_CHECKING:
    from .signature import Signature

__all__ = ["Parser"]

_MAX_DEPTH = 64  # types nested deeper than this are rejected, not recursed into
_MAX_EXPANDED = 1 << 16  # struct-type nodes that references to declared structs may expand to


class Parser(Cursor):
    """Recursive descent over the token list; ``structs`` holds declared struct names."""

    def __init__(self, text: str, signature_type: type[Signature]):
        super().__init__(text)
        self.signature_type = signature_type  # the class to build (the signature module owns it)
        self.depth = 0
        self.structs: dict[str, Struct] = {}
        self.shapes: dict[str, tuple[int, int]] = {}  # declared struct -> (depth, nodes) when expanded
        self.expanded = 0

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
            element = self.element()
            self.expect("]")
            return slice_of(element, mutable)
        if self.accept("("):
            return self.tuple()
        if self.accept("const"):
            return Constant(self.constant())
        if self.accept("struct"):
            return self.struct_body(self.name("a struct name"))
        if tok.kind == "ident" and tok.text in GENERIC_NAMES:
            return self.generic(self.next())
        if tok.kind == "ident" and tok.text in self.structs:
            return self.reference(self.next())
        raise self.error("a type")

    def element(self) -> ParamType:
        """A slice's element: any type with a size (a number, struct, tuple, opaque, pointer)."""
        tok = self.peek()
        element = self.type()
        try:
            size = memory_layout(element)[0]
        except AbiMismatchError:
            size = 0
        if size == 0:
            raise self.invalid(tok, f"a slice element needs a size (got {format_type(element)})")
        return element

    def reference(self, tok: Token) -> Struct:
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
        elif isinstance(t, (Slice, DisjointSlice)) and t.element is not None:
            children = (t.element,)
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

    def build(self, tok: Token, cls: type, *args: Any, **kwargs: Any) -> Any:
        """``cls(*args, **kwargs)``, its ValueError reported at ``tok``."""
        try:
            return cls(*args, **kwargs)
        except ValueError as exc:
            raise self.invalid(tok, str(exc)) from None

    def generic(self, head: Token) -> ParamType:
        self.expect("<", "'<'")
        built = self._generic_args(head)
        if isinstance(built, TileArray | TileList) and self.at("{"):
            table = ARRAY_PROMISES if isinstance(built, TileArray) else LIST_PROMISES
            built = self.build(head, type(built), **{**_as_kwargs(built), **self.promises(table)})
        return built

    def _generic_args(self, tok: Token) -> ParamType:
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
        if head in ("DisjointSlice", "DisjointSlice2d"):
            element = self.element()
            self.expect(">")
            return disjoint_slice_of(element, rows_2d=head.endswith("2d"))
        dt = self.dtype()
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
            if name not in ATTRIBUTE_NAMES:
                raise self.invalid(tok, f"unknown attribute {name!r} (known: {', '.join(ATTRIBUTE_NAMES)})")
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
            elif name in dict(DIM3_ATTRIBUTES):
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
        return self.build(name_tok, self.signature_type, name, tuple(params), convention, launch, kind,
                          returns)

    def declaration(self) -> None:
        self.expect("struct")
        tok = self.peek()
        name = self.name("a struct name")
        if name in DTYPES or name in KEYWORDS:
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


def _as_kwargs(obj: TileArray | TileList) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in fields(obj)}

