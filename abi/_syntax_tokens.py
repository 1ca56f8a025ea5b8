"""Tokens of the signature syntax and a cursor over them that reads literals.

The grammar itself (types, attributes, signatures) is in ``_syntax_parse``;
this layer knows only tokens, names, numbers, constants and element types.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._syntax_tables import IDENT
from .dtypes import DTYPES, DType
from .errors import SignatureSyntaxError

__all__ = ["SOURCE", "Cursor", "Token", "tokenize"]

SOURCE = "<signature>"
_MAX_DIGITS = 400  # longest number literal (a float's repr needs at most ~25)

_TOKEN = re.compile(r"""
    (?P<skip>\s+|//[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<number>0[xX][0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)
  | (?P<ident>""" + IDENT + r""")
  | (?P<punct>\#\[|->|[\[\](){}<>,:;&*=\-])
""", re.VERBOSE)


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # string, number, ident, punct, eof
    text: str
    line: int
    col: int


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    pos, line, line_start = 0, 1, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise SignatureSyntaxError(f"unexpected character {text[pos]!r}", source=SOURCE,
                                       where=f"{line}:{pos - line_start + 1}")
        if m.lastgroup != "skip":
            tokens.append(Token(m.lastgroup or "", m.group(), line, pos - line_start + 1))
        newlines = m.group().count("\n")
        if newlines:
            line += newlines
            line_start = pos + m.group().rindex("\n") + 1
        pos = m.end()
    tokens.append(Token("eof", "", line, pos - line_start + 1))
    return tokens


class Cursor:
    """A position in the token list of ``text``; errors name the line and column."""

    def __init__(self, text: str):
        self.tokens = tokenize(text)
        self.i = 0

    # -- token plumbing -------------------------------------------------
    def peek(self) -> Token:
        return self.tokens[self.i]

    def at(self, *texts: str) -> bool:
        tok = self.peek()
        return tok.kind in ("ident", "punct") and tok.text in texts

    def next(self) -> Token:
        tok = self.tokens[self.i]
        if tok.kind != "eof":
            self.i += 1
        return tok

    def error(self, what: str) -> SignatureSyntaxError:
        """'expected WHAT after PREVIOUS (got CURRENT)' at the current token."""
        tok = self.peek()
        got = "end of text" if tok.kind == "eof" else repr(tok.text)
        after = f" after {self.tokens[self.i - 1].text!r}" if self.i > 0 else ""
        return SignatureSyntaxError(f"expected {what}{after} (got {got})", source=SOURCE,
                                    where=f"{tok.line}:{tok.col}")

    def invalid(self, tok: Token, message: str) -> SignatureSyntaxError:
        return SignatureSyntaxError(message, source=SOURCE, where=f"{tok.line}:{tok.col}")

    def expect(self, text: str, what: str | None = None) -> Token:
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


def _is_float(literal: str) -> bool:
    return literal[:2].lower() != "0x" and any(c in literal for c in ".eE")
