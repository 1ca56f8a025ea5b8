"""A cursor over Rust tokens: lookahead, balanced groups, item skipping, and the token-list helpers
the item reader (:mod:`ptxbridge.rust.source`) and the type reader (:mod:`ptxbridge.rust.type_syntax`)
share.  Errors name the file and line.
"""

from __future__ import annotations

from ptxbridge.abi.errors import FormatError
from ptxbridge.rust.syntax import Token

__all__ = ["Cursor", "spell", "split_commas", "strip_attrs", "strip_vis", "top_level"]

OPEN = {"(": ")", "[": "]", "{": "}"}


class Cursor:
    """Position in a token list; ``source`` names the file in errors."""

    def __init__(self, tokens: list[Token], source: str):
        self.toks, self.pos, self.source = tokens, 0, source

    def peek(self, ahead: int = 0) -> Token | None:
        index = self.pos + ahead
        return self.toks[index] if index < len(self.toks) else None

    def at(self, text: str, ahead: int = 0) -> bool:
        tok = self.peek(ahead)
        return tok is not None and tok.text == text and tok.kind in ("punct", "ident")

    def next(self) -> Token:
        tok = self.peek()
        if tok is None:
            last = self.toks[-1].line if self.toks else 1
            raise FormatError("unexpected end of Rust source", source=self.source, where=f"line {last}")
        self.pos += 1
        return tok

    def expect(self, text: str) -> Token:
        tok = self.next()
        if tok.text != text:
            self.fail(f"expected {text!r} (got {tok.text!r})", tok)
        return tok

    def fail(self, message: str, tok: Token | None = None) -> None:
        tok = tok or self.peek() or (self.toks[-1] if self.toks else Token("punct", "", 1))
        raise FormatError(message, source=self.source, where=f"line {tok.line}")

    def group(self) -> list[Token]:
        """Consume a balanced ``(..)``/``[..]``/``{..}`` group; returns the tokens inside."""
        opener = self.next()
        closer, depth, start = OPEN[opener.text], 1, self.pos
        while depth:
            tok = self.next()
            if tok.kind == "punct" and tok.text in OPEN:
                depth += 1
            elif tok.kind == "punct" and tok.text in (")", "]", "}"):
                depth -= 1
                if depth == 0 and tok.text != closer:
                    self.fail(f"mismatched {tok.text!r} closing {opener.text!r} from line {opener.line}", tok)
        return self.toks[start:self.pos - 1]

    def skip_item(self) -> None:
        """Skip to the end of an item: a top-level ``;`` or a closing brace group."""
        while True:
            tok = self.peek()
            if tok is None:
                return
            if tok.text == ";":
                self.pos += 1
                return
            if tok.text == "{":
                self.group()
                if not self.at(";"):
                    return
            elif tok.text in ("(", "["):
                self.group()
            else:
                self.pos += 1

    def until(self, *stops: str, types: bool = True) -> list[Token]:
        """Consume tokens up to (not including) a top-level ``stops`` token; groups nest, and so do
        ``<..>`` when ``types`` (in an expression ``<`` may be a comparison or a shift)."""
        start, angles = self.pos, 0
        while (tok := self.peek()) is not None:
            if angles == 0 and tok.text in stops and tok.kind in ("punct", "ident"):
                break
            if tok.kind == "punct" and tok.text in OPEN:
                self.group()
                continue
            if tok.kind == "punct" and tok.text in (")", "]", "}"):
                break
            if types:
                angles += (tok.text == "<") - (tok.text == ">" and angles > 0)
            self.pos += 1
        return self.toks[start:self.pos]

    def split_angle(self) -> list[list[Token]]:
        """Consume ``<...>``, returning its top-level comma-separated parts."""
        self.expect("<")
        parts: list[list[Token]] = [[]]
        depth = 1
        while True:
            tok = self.peek()
            if tok is None:
                self.fail("unterminated '<'")
            if tok.text in OPEN:
                start = self.pos
                self.group()
                parts[-1].extend(self.toks[start:self.pos])
                continue
            self.pos += 1
            if tok.text == "<":
                depth += 1
            elif tok.text == ">":
                depth -= 1
                if depth == 0:
                    return parts
            elif tok.text == "," and depth == 1:
                parts.append([])
                continue
            parts[-1].append(tok)


def split_commas(tokens: list[Token]) -> list[list[Token]]:
    """Top-level comma-separated parts of a token list (nesting by brackets and angles)."""
    parts: list[list[Token]] = [[]]
    depth = 0
    for tok in tokens:
        if tok.kind == "punct":
            if tok.text in ("(", "[", "{", "<"):
                depth += 1
            elif tok.text in (")", "]", "}", ">"):
                depth -= 1
            elif tok.text == "," and depth == 0:
                parts.append([])
                continue
        parts[-1].append(tok)
    return [p for p in parts if p]


def spell(tokens: list[Token]) -> str:
    """Tokens as Rust is written: ``Fn(*mut T) -> u32 + Copy`` (for messages)."""
    out = ""
    for prev, tok in zip([None, *tokens], tokens, strict=False):
        spaced = prev is not None and (tok.text in ("+", "->", "=") or prev.text in ("+", "->", "=", ",")
                                       or (prev.kind != "punct" and tok.kind != "punct"))
        out += (" " if spaced else "") + tok.text
    return out


def top_level(tokens: list[Token], text: str) -> int | None:
    """Index of the first ``text`` token outside any bracket or angle group."""
    depth = 0
    for i, tok in enumerate(tokens):
        if tok.kind != "punct":
            continue
        if tok.text in ("(", "[", "{", "<"):
            depth += 1
        elif tok.text in (")", "]", "}", ">"):
            depth -= 1
        elif tok.text == text and depth == 0:
            return i
    return None


def strip_attrs(part: list[Token]) -> list[Token]:
    while len(part) > 1 and part[0].text == "#" and part[1].text == "[":
        depth, i = 0, 1
        for i in range(1, len(part)):
            depth += part[i].text == "["
            depth -= part[i].text == "]"
            if depth == 0:
                break
        part = part[i + 1:]
    return part


def strip_vis(part: list[Token]) -> list[Token]:
    if part and part[0].text == "pub":
        part = part[1:]
        if part and part[0].text == "(":  # pub(crate), pub(in path): no nested parentheses
            part = part[next(i for i, t in enumerate(part) if t.text == ")") + 1:]
    return part
