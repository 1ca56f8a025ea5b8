"""The grammar of the signature syntax: types, launch attributes, signatures, struct declarations.

Which word starts which parameter type, and how the type reads on, is the kind
table's (:mod:`.kind_entries`): a generic form ``Head<args>{promises}`` is read
here from its description, any other form by its entry's own ``parse``.
Recursive descent over :class:`~._syntax_tokens.Cursor`; nesting and the expansion
of declared structs are bounded, so hostile text fails with a syntax error, not a
``RecursionError`` or unbounded memory.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any

from ._syntax_format import format_type
from ._syntax_tables import ATTRIBUTE_NAMES, DIM3_ATTRIBUTES, GRAMMAR_WORDS
from ._syntax_tokens import Cursor, Token
from .dtypes import DTYPES
from .kind_entries import KINDS
from .kind_table import Arg, Generic
from .kinds import ParamType, Struct, StructField
from .params import Convention, LaunchMeta, Param, SignatureFields

S = typing.TypeVar("S", bound=SignatureFields)  # the signature class the caller builds

__all__ = ["Parser"]

_MAX_DEPTH = 64  # types nested deeper than this are rejected, not recursed into
_MAX_EXPANDED = 1 << 16  # struct-type nodes that references to declared structs may expand to


class Parser(Cursor, typing.Generic[S]):
    """Recursive descent over the token list; ``structs`` holds declared struct names."""

    def __init__(self, text: str, signature_type: Callable[..., S]):
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
        entry = KINDS.starting(tok.text) if tok.kind in ("ident", "punct") else None
        if entry is not None:
            syntax = entry.syntax
            if isinstance(syntax, Generic):
                return self.generic(self.next(), entry.cls, syntax)
            return syntax.parse(self)
        if tok.kind == "ident" and tok.text in self.structs:
            return self.reference(self.next())
        raise self.error("a type")

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
        measured = [self.shape(c) for c in KINDS.children(t)]
        return 1 + max((d for d, _ in measured), default=0), 1 + sum(n for _, n in measured)

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

    def generic(self, head: Token, cls: type, syntax: Generic) -> ParamType:
        """``Head<args>{promises}`` as its :class:`Generic` description says."""
        self.expect("<", "'<'")
        values = dict(syntax.heads[head.text])
        optional = next((arg.optional for arg in syntax.args if arg.optional), None)
        for index, arg in enumerate(syntax.args):
            if arg.optional:
                if not self.accept(","):
                    break
            elif index:
                self.expect(",", f"',' and {arg.what}")
            if arg.keyword:
                self.expect(arg.keyword, repr(arg.keyword))
            values[arg.attr] = self.argument(head, arg)
        self.expect(">", f"'>' or ', {optional}'" if optional else None)
        built = self.build(head, cls, **values)
        if syntax.promises and self.at("{"):
            built = self.build(head, cls, **{**values, **self.promises(syntax.promises)})
        return built

    def argument(self, head: Token, arg: Arg) -> Any:
        if arg.form == "dtype":
            return self.dtype()
        if arg.form == "int":
            return self.integer(arg.what)
        if arg.form == "word":
            if not self.at(*arg.choices):
                raise self.error(arg.what)
            return self.next().text
        value = self.type()
        if arg.kind is not None and not isinstance(value, arg.kind):
            raise self.invalid(head, f"{head.text} {arg.what} must be {arg.kind.__name__} "
                                     f"(got {format_type(value)})")
        return value

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

    def signature(self) -> S:
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
        if name in DTYPES or name in GRAMMAR_WORDS or KINDS.starting(name) is not None:
            raise self.invalid(tok, f"struct name {name!r} is reserved; write the struct inline instead")
        if name in self.structs:
            raise self.invalid(tok, f"struct {name!r} declared twice")
        body = self.struct_body(name)
        self.shapes[name] = self.shape(body)
        self.structs[name] = body

    def items(self) -> list[S]:
        found: list[S] = []
        while self.peek().kind != "eof":
            if self.accept(";"):
                continue
            if self.at("struct"):
                self.declaration()
            else:
                found.append(self.signature())
        return found

