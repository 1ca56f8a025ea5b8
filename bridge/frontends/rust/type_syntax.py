"""Rust types from tokens: references, pointers, slices, arrays, tuples, paths with generic arguments,
function pointers, and the types with no fixed ABI (``dyn``, ``impl``, ``_``, macro types), which
become :class:`~ptxbridge.rust.syntax.TNoAbi` with the reason instead of failing.
"""

from __future__ import annotations

from ptxbridge.abi.errors import FormatError
from ptxbridge.rust.cursor import Cursor, split_commas, top_level
from ptxbridge.rust.syntax import RustType, TArray, TFnPtr, TNoAbi, Token, TPath, TPtr, TRef, TSlice, TTuple

__all__ = ["TypeReader", "ident"]


class TypeReader(Cursor):
    """Reads one type from the cursor (``type``) or a whole token list (``sub_type``)."""

    def sub_type(self, tokens: list[Token], near: Token) -> RustType:
        """The type spelled by ``tokens``; a :class:`TNoAbi` with the reason when it cannot be read."""
        if not tokens:
            return TNoAbi(f"no type after line {near.line}")
        try:
            return TypeReader(tokens, self.source).whole_type()
        except FormatError as exc:
            return TNoAbi(exc.reason)

    def whole_type(self) -> RustType:
        parsed = self.type()
        if self.peek() is not None:
            self.fail(f"unexpected {self.peek().text!r} after a type")
        return parsed

    def rest_has_no_abi(self, reason: str, fat: bool = False) -> TNoAbi:
        self.pos = len(self.toks)  # the rest of this (sub-)type belongs to the unreadable part
        return TNoAbi(reason, fat)

    def type(self) -> RustType:
        tok = self.next()
        text = tok.text
        if text == "&":
            if (life := self.peek()) is not None and life.kind == "life":
                self.pos += 1
            mutable = self.at("mut")
            self.pos += mutable
            return TRef(self.type(), mutable)
        if text == "*":
            qualifier = self.next().text
            if qualifier not in ("const", "mut"):
                self.fail(f"raw pointer needs 'const' or 'mut' (got {qualifier!r})", tok)
            return TPtr(self.type(), qualifier == "mut")
        if text == "(":
            self.pos -= 1
            inside = self.group()
            parts = split_commas(inside)
            if len(parts) == 1 and inside[-1].text != ",":  # `(T)` is T
                return TypeReader(parts[0], self.source).whole_type()
            return TTuple(tuple(TypeReader(p, self.source).whole_type() for p in parts))
        if text == "[":
            self.pos -= 1
            inside = self.group()
            semi = top_level(inside, ";")
            inner = TypeReader(inside[:semi] if semi is not None else inside, self.source).whole_type()
            if semi is None:
                return TSlice(inner)
            return TArray(inner, " ".join(t.text for t in inside[semi + 1:]))
        if text == "for" and self.at("<"):  # `for<'a> fn(&'a T)`: the binder changes no layout
            self.split_angle()
            return self.type()
        if text in ("unsafe", "extern") or text == "fn":
            while not self.at("("):
                self.next()
            self.group()
            if self.at("->"):
                self.pos += 1
                self.type()
            return TFnPtr()
        if text == "!":
            return TTuple(())
        if text == "dyn":
            return self.rest_has_no_abi("a trait object ('dyn Trait') has no fixed ABI", fat=True)
        if text == "impl":
            return self.rest_has_no_abi("'impl Trait' stands for a type the compiler picks: no fixed ABI")
        if text == "_":
            return TNoAbi("an inferred type ('_') has no fixed ABI")
        if text == "<":
            return self.rest_has_no_abi("a qualified path type ('<T as Trait>::X') is not resolved here")
        if tok.kind != "ident" and text != "::":
            self.fail(f"expected a type (got {text!r})", tok)
        self.pos -= 1
        path = self.path_type()
        if self.at("!"):
            return self.rest_has_no_abi(f"a macro type ('{path.name}!') is expanded only by rustc")
        return path

    def path_type(self) -> TPath:
        segments: list[str] = []
        args: tuple[RustType | str, ...] = ()
        if self.at("::"):
            self.pos += 1
        while True:
            segments.append(ident(self.next().text))
            if self.at("::") and self.at("<", 1):
                self.pos += 1
            if self.at("<"):
                args = tuple(self.generic_arg(part) for part in self.split_angle() if part
                             and part[0].kind != "life")
            if not self.at("::"):
                return TPath(tuple(segments), args)
            self.pos += 1

    def generic_arg(self, part: list[Token]) -> RustType | str:
        if part[0].kind in ("num", "str", "char") or part[0].text in ("{", "-", "true", "false"):
            return " ".join(t.text for t in part)
        if len(part) > 1 and part[1].text in ("=", ":"):  # associated type binding or bound
            return " ".join(t.text for t in part)
        return self.sub_type(part, part[0])


def ident(text: str) -> str:
    """An identifier without its raw prefix (``r#type`` -> ``type``)."""
    return text[2:] if text.startswith("r#") else text
