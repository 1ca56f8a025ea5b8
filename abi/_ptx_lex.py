"""The lexical layer of the PTX reader: comments, strings, tokens, braces, line numbers.

PTX ISA 9.x section 4 ("Syntax"): ``//`` and ``/* */`` comments, quoted
strings only in ``.file`` and ``.pragma``.  Comments are blanked to spaces
(newlines kept) so every offset and line number in the result is the file's
own.  Every scan is a forward ``str.find`` or a match of a regex without
nested quantifiers, so the work is linear in the input.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NoReturn

from .errors import FormatError

__all__ = ["Cursor"]

Fail = Callable[[str, int], NoReturn]

_COMMENT_OR_STRING = re.compile(r'//|/\*|"')
_BRACE_OR_STRING = re.compile(r'[{}"]')
_TOKEN = re.compile(
    r"""(?P<ws>\s+)
    |(?P<num>0[xX][0-9a-fA-F]+U?|0[fF][0-9a-fA-F]{8}|0[dD][0-9a-fA-F]{16}|\d+(?:\.\d+)?U?)
    |(?P<dir>\.[A-Za-z_][\w$]*)
    |(?P<id>[A-Za-z_$%][\w$]*)
    |(?P<str>"[^"\n]*")
    |(?P<punct>.)""",
    re.VERBOSE | re.DOTALL | re.ASCII,
)


def _blank_comments(text: str, fail: Fail) -> str:
    """``text`` with every comment replaced by spaces (newlines kept); strings left alone."""
    pieces, pos = [], 0
    while (m := _COMMENT_OR_STRING.search(text, pos)) is not None:
        start = m.start()
        if m.group() == "//":
            end = text.find("\n", start)
            end = len(text) if end < 0 else end
        elif m.group() == "/*":
            end = text.find("*/", start + 2)
            if end < 0:
                fail("unterminated /* comment", start)
            end += 2
        else:
            end = _string_end(text, start, fail)
            pieces.append(text[pos:end])
            pos = end
            continue
        pieces.append(text[pos:start])
        pieces.append(re.sub(r"[^\n]", " ", text[start:end]))
        pos = end
    pieces.append(text[pos:])
    return "".join(pieces)


def _string_end(text: str, start: int, fail: Fail) -> int:
    end = text.find('"', start + 1)
    newline = text.find("\n", start + 1)
    if end < 0 or 0 <= newline < end:
        fail("unterminated string literal", start)
    return end + 1


class Cursor:
    """Cursor over the comment-free text: tokens, line numbers and errors."""

    def __init__(self, text: str, source: str):
        self.source = source
        self.line_pos, self.line_no = 0, 1  # incremental line counting keeps it linear
        self.text = text  # errors while blanking comments count lines in the raw text
        self.text = _blank_comments(text, self.fail)
        self.pos = 0
        self.peeked: tuple[str, str, int] | None = None

    def line_of(self, pos: int) -> int:
        if pos < self.line_pos:
            return self.text.count("\n", 0, pos) + 1
        self.line_no += self.text.count("\n", self.line_pos, pos)
        self.line_pos = pos
        return self.line_no

    def fail(self, message: str, pos: int) -> NoReturn:
        line = self.text.count("\n", 0, pos) + 1
        raise FormatError(message, source=self.source, where=f"line {line}")

    def peek(self) -> tuple[str, str, int]:
        if self.peeked is None:
            while True:
                m = _TOKEN.match(self.text, self.pos)
                if m is None:
                    self.peeked = ("eof", "end of file", self.pos)
                    break
                self.pos = m.end()
                if m.lastgroup != "ws":
                    self.peeked = (m.lastgroup or "", m.group(), m.start())
                    break
        return self.peeked

    def next(self) -> tuple[str, str, int]:
        token = self.peek()
        self.peeked = None
        return token

    def accept(self, text: str) -> bool:
        if self.peek()[1] == text:
            self.peeked = None
            return True
        return False

    def expect(self, kind: str, what: str) -> str:
        tkind, text, pos = self.next()
        if tkind != kind and text != kind:
            self.fail(f"expected {what} (got {text!r})", pos)
        return text

    def integer(self, what: str) -> int:
        _, text, pos = self.next()
        digits = text.rstrip("U")
        if digits[:2].lower() == "0x" and len(digits) > 2:
            return int(digits[2:], 16)
        if not (digits.isascii() and digits.isdigit()):
            self.fail(f"expected {what}, a non-negative integer (got {text!r})", pos)
        return int(digits)

    def skip_braces(self, open_pos: int) -> int:
        """Position of the ``}`` that closes the ``{`` at ``open_pos``; moves past it."""
        depth, pos = 0, open_pos
        while (m := _BRACE_OR_STRING.search(self.text, pos)) is not None:
            pos = m.end()
            if m.group() == '"':
                pos = _string_end(self.text, m.start(), self.fail)
            elif m.group() == "{":
                depth += 1
            else:
                depth -= 1
                if depth == 0:
                    self.pos, self.peeked = pos, None
                    return m.start()
        self.fail("unbalanced '{': no matching '}' before the end of the file", open_pos)

    def skip_until(self, stops: tuple[str, ...]) -> tuple[str, int]:
        """Skip tokens, and balanced braces and parentheses, up to one of ``stops`` at depth 0."""
        depth = 0
        while True:
            kind, text, pos = self.next()
            if kind == "eof":
                self.fail(f"expected one of {' '.join(stops)} (got end of file)", pos)
            if depth == 0 and text in stops:
                return text, pos
            if text == "{":
                self.skip_braces(pos)
            elif text == "(":
                depth += 1
            elif text == ")":
                if depth == 0:
                    self.fail(f"unbalanced ')' (expected one of {' '.join(stops)})", pos)
                depth -= 1
