"""The lexical layer of the PTX reader: comments, strings, tokens, braces, line numbers.

PTX ISA 9.x section 4 ("Syntax"): ``//`` and ``/* */`` comments, quoted
strings only in ``.file`` and ``.pragma``.  Comments are blanked to spaces
(newlines kept, one space per byte) so every line number in the result is the
file's own, and every offset its byte offset up to the first non-ASCII
string.  Every scan is a forward ``str.find`` or a match of a regex whose
quantifiers never backtrack into one another, so the work is linear in the
input (``tests/test_redos.py`` checks every regex of the readers).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NoReturn

from .errors import FormatError

__all__ = ["Cursor"]

Fail = Callable[[str, int], NoReturn]

# A run of comments (blanks between them included), an unterminated ``/*``, or a string on one line
# (terminated or not).  A comment is blanked in place, so a run costs one step however long it is.
_COMMENT = rb"//[^\n]*+|/\*.*?\*/"
_COMMENTS_OR_STRING = re.compile(rb'(?:%s)(?:\s*+(?:%s))*+|/\*|"[^"\n]*+"?' % (_COMMENT, _COMMENT), re.DOTALL)
_BLANK = bytes(10 if i == 10 else 32 for i in range(256))  # every byte but newline -> space
_BRACE_OR_STRING = re.compile(r'[{}"]')
# Leading blanks are part of the match, so each token costs one regex call.
_TOKEN = re.compile(
    r"""\s*+(?:
     (?P<num>0[xX][0-9a-fA-F]++U?|0[fF][0-9a-fA-F]{8}|0[dD][0-9a-fA-F]{16}|\d++(?:\.\d++)?U?)
    |(?P<dir>\.[A-Za-z_][\w$]*+)
    |(?P<id>[A-Za-z_$%][\w$]*+)
    |(?P<str>"[^"\n]*+")
    |(?P<punct>.))""",
    re.VERBOSE | re.DOTALL | re.ASCII,
)
_MAX_DIGITS = 20  # 2**64 has 20 decimal digits: every PTX integer this reader keeps fits in them


def _blank_comments(data: bytes, fail: Fail) -> bytes | bytearray:
    """``data`` with every comment replaced by spaces (newlines kept); strings left alone.

    Works on the UTF-8 bytes, so a comment's text (the only place where PTX has room for
    non-ASCII) never widens the decoded string, and blanking costs one copy of the input.
    """
    out: bytearray | None = None
    for m in _COMMENTS_OR_STRING.finditer(data):
        start, end = m.span()
        if data[start] == 0x22:  # '"'
            if end - start < 2 or data[end - 1] != 0x22:
                fail("unterminated string literal", start)
        elif end - start == 2 and data[start + 1] == 0x2A:  # a lone '/*'
            fail("unterminated /* comment", start)
        else:
            if out is None:
                out = bytearray(data)
            out[start:end] = data[start:end].translate(_BLANK)
    return data if out is None else out


def _string_end(text: str, start: int, fail: Fail) -> int:
    end = text.find('"', start + 1)
    newline = text.find("\n", start + 1)
    if end < 0 or 0 <= newline < end:
        fail("unterminated string literal", start)
    return end + 1


class Cursor:
    """Cursor over the comment-free text: tokens, line numbers and errors."""

    def __init__(self, data: bytes, source: str):
        """``data``: UTF-8 PTX (checked by the caller)."""
        self.source = source
        self.line_pos, self.line_no = 0, 1  # incremental line counting keeps it linear
        self.text = _blank_comments(data, self._fail_in(data)).decode("utf-8")
        self.pos = 0
        self.peeked: tuple[str, str, int] | None = None

    def _fail_in(self, data: bytes) -> Fail:
        """Errors while blanking comments count lines in the raw bytes."""

        def fail(message: str, pos: int) -> NoReturn:
            line = data.count(b"\n", 0, pos) + 1
            raise FormatError(message, source=self.source, where=f"line {line}")

        return fail

    def line_of(self, pos: int) -> int:
        if pos < self.line_pos:
            return self.text.count("\n", 0, pos) + 1
        self.line_no += self.text.count("\n", self.line_pos, pos)
        self.line_pos = pos
        return self.line_no

    def fail(self, message: str, pos: int) -> NoReturn:
        line = self.text.count("\n", 0, pos) + 1
        raise FormatError(message, source=self.source, where=f"line {line}")

    def _scan(self) -> tuple[str, str, int]:
        m = _TOKEN.match(self.text, self.pos)
        if m is None:  # only blanks are left
            self.pos = len(self.text)
            return "eof", "end of file", self.pos
        self.pos = m.end()
        kind = m.lastgroup or ""
        return kind, m.group(kind), m.start(kind)

    def peek(self) -> tuple[str, str, int]:
        if self.peeked is None:
            self.peeked = self._scan()
        return self.peeked

    def next(self) -> tuple[str, str, int]:
        token = self.peeked
        if token is None:
            return self._scan()
        self.peeked = None
        return token

    def accept(self, text: str) -> bool:
        token = self.peeked or self._scan()
        self.peeked = None if token[1] == text else token
        return self.peeked is None

    def expect(self, kind: str, what: str) -> str:
        tkind, text, pos = self.next()
        if tkind != kind and text != kind:
            self.fail(f"expected {what} (got {text!r})", pos)
        return text

    def integer(self, what: str) -> int:
        _, text, pos = self.next()
        digits = text.rstrip("U")
        hexadecimal = digits[:2].lower() == "0x" and len(digits) > 2
        if not hexadecimal and not (digits.isascii() and digits.isdigit()):
            self.fail(f"expected {what}, a non-negative integer (got {text!r})", pos)
        significant = (digits[2:] if hexadecimal else digits).lstrip("0")
        value = int(digits, 0 if hexadecimal else 10) if len(significant) <= _MAX_DIGITS else 1 << 64
        if value >> 64:
            self.fail(f"{what} does not fit in 64 bits (got {text[:24]!r}{'...' if len(text) > 24 else ''})",
                      pos)
        return value

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
