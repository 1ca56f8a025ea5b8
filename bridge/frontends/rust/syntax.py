"""Rust syntax data: tokens, parsed types and items (read by :mod:`ptxbridge.rust.source`).

The tokenizer follows the Rust Reference, chapter "Lexical structure": nested
block comments, raw strings, byte strings, lifetimes versus character literals.
Comments and whitespace are dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ptxbridge.abi.errors import FormatError

__all__ = [
    "Token", "Attr", "TPath", "TRef", "TPtr", "TSlice", "TArray", "TTuple", "TFnPtr", "TNoAbi", "RustType",
    "RustFn", "RustStruct", "RustEnum", "RustStatic", "RustSource", "tokenize",
]

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<line>//[^\n]*)
  | (?P<raw>b?r(?P<hashes>\#*)")
  | (?P<str>b?"(?:[^"\\]|\\.)*")
  | (?P<char>b?'(?:[^'\\\n]|\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]{1,6}\}|.))')
  | (?P<life>'[A-Za-z_][A-Za-z0-9_]*)
  | (?P<ident>r\#[A-Za-z_][A-Za-z0-9_]*|[A-Za-z_][A-Za-z0-9_]*)
  | (?P<num>[0-9][0-9A-Za-z_]*(?:\.[0-9][0-9_]*)?(?:[eE][+-]?[0-9_]+)?[A-Za-z0-9_]*)
  | (?P<punct>::|->|=>|\.\.=|\.\.\.|\.\.|[-+*/%^!&|=<>@.,;:\#$?~()\[\]{}])
""", re.VERBOSE | re.DOTALL)


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # ident, num, str, char, life, punct
    text: str
    line: int
    col: int = 0  # 0-based, in characters (as proc_macro2 spans count them)


@dataclass(frozen=True, slots=True)
class Attr:
    """An outer attribute ``#[path(args)]``; ``#[unsafe(x)]`` is read as ``#[x]``."""

    path: str
    args: tuple[Token, ...]


@dataclass(frozen=True, slots=True)
class TPath:
    """A path type ``a::B<args>``; ``args`` are types or const-argument text (lifetimes dropped)."""

    segments: tuple[str, ...]
    args: tuple[RustType | str, ...] = ()

    @property
    def name(self) -> str:
        return self.segments[-1]


@dataclass(frozen=True, slots=True)
class TRef:
    inner: RustType
    mutable: bool


@dataclass(frozen=True, slots=True)
class TPtr:
    inner: RustType
    mutable: bool


@dataclass(frozen=True, slots=True)
class TSlice:
    inner: RustType


@dataclass(frozen=True, slots=True)
class TArray:
    inner: RustType
    length: str


@dataclass(frozen=True, slots=True)
class TTuple:
    items: tuple[RustType, ...]


@dataclass(frozen=True, slots=True)
class TFnPtr:
    """A function pointer type ``fn(..) -> ..``: one 64-bit address."""


@dataclass(frozen=True, slots=True)
class TNoAbi:
    """A type with no fixed ABI (``dyn Trait``, ``impl Trait``, ``_``, a macro type), or one the
    reader could not read; ``reason`` says which.  ``fat``: a reference to it is a fat pointer."""

    reason: str
    fat: bool = False


RustType = TPath | TRef | TPtr | TSlice | TArray | TTuple | TFnPtr | TNoAbi


@dataclass(frozen=True, slots=True)
class RustFn:
    """A function item or a foreign (``extern`` block) declaration.

    ``abi`` is the ABI string (``"ptx-kernel"``, ``"C"``) or None for the Rust
    ABI; ``symbol`` the stable linker name (``#[no_mangle]``, ``export_name``,
    ``link_name``, or any foreign item), None when rustc mangles it.
    """

    name: str
    symbol: str | None
    abi: str | None
    params: tuple[tuple[str, RustType], ...]
    returns: RustType | None
    generics: tuple[str, ...]
    attrs: tuple[Attr, ...]
    line: int
    foreign: bool = False
    const_generics: tuple[str, ...] = ()
    bounds: tuple[tuple[str, str], ...] = ()  # (generic parameter, its bounds' text)
    broken: str | None = None  # why the reader could not follow this function's signature
    source: str = ""  # the file it is in
    param_lines: tuple[int, ...] = ()  # the line of each parameter

    def attr(self, name: str) -> Attr | None:
        return next((a for a in self.attrs if a.path == name), None)


@dataclass(frozen=True, slots=True)
class RustStruct:
    """A struct; tuple-struct fields are named ``"0"``, ``"1"``...; ``repr`` lists ``C``, ``align(8)``..."""

    name: str
    generics: tuple[str, ...]
    fields: tuple[tuple[str, RustType], ...]
    repr: tuple[str, ...]
    line: int
    union: bool = False


@dataclass(frozen=True, slots=True)
class RustEnum:
    """An enum with its variants' fields (tuple fields named ``"0"``...); a layout is defined only
    with ``#[repr(C)]`` or an integer ``#[repr]`` (RFC 2195)."""

    name: str
    repr: tuple[str, ...]
    variants: tuple[tuple[tuple[str, RustType], ...], ...]
    line: int

    @property
    def fieldless(self) -> bool:
        return not any(self.variants)


@dataclass(frozen=True, slots=True)
class RustStatic:
    """A ``static`` item; ``module`` is the enclosing ``#[cuda_module]`` module's name, if any."""

    name: str
    type: RustType
    attrs: tuple[Attr, ...]
    line: int
    col: int
    module: str | None


@dataclass(frozen=True, slots=True)
class RustSource:
    path: str
    functions: tuple[RustFn, ...]
    structs: dict[str, RustStruct]
    enums: dict[str, RustEnum]
    aliases: dict[str, RustType]
    submodules: tuple[str, ...]  # names of `mod name;` declarations (file modules)
    consts: dict[str, str] = field(default_factory=dict)  # `const N: T = <expr>;` -> expression text
    statics: tuple[RustStatic, ...] = ()


def tokenize(text: str, source: str = "<rust>") -> list[Token]:
    """Split Rust source into tokens, dropping whitespace and comments."""
    tokens: list[Token] = []
    pos, line, line_start, end = 0, 1, 0, len(text)
    while pos < end:
        if text.startswith("/*", pos):
            pos, line = _skip_block_comment(text, pos, line, source)
            line_start = text.rfind("\n", 0, pos) + 1
            continue
        match = _TOKEN.match(text, pos)
        if match is None:
            raise FormatError(f"unexpected character {text[pos]!r} in Rust source", source=source,
                              where=f"line {line}")
        kind = match.lastgroup if match.lastgroup != "hashes" else "raw"
        stop = match.end()
        if match.group("raw") is not None:
            kind = "str"
            closing = '"' + match.group("hashes")
            close_at = text.find(closing, stop)
            if close_at < 0:
                raise FormatError("unterminated raw string literal", source=source, where=f"line {line}")
            stop = close_at + len(closing)
        chunk = text[pos:stop]
        if kind not in ("ws", "line"):
            tokens.append(Token(kind, chunk, line, pos - line_start))
        if "\n" in chunk:
            line += chunk.count("\n")
            line_start = pos + chunk.rfind("\n") + 1
        pos = stop
    return tokens


def _skip_block_comment(text: str, pos: int, line: int, source: str) -> tuple[int, int]:
    """Skip a (nested) block comment starting at ``pos``; returns the new position and line."""
    depth, start_line = 0, line
    while pos < len(text):
        if text.startswith("/*", pos):
            depth, pos = depth + 1, pos + 2
        elif text.startswith("*/", pos):
            depth, pos = depth - 1, pos + 2
            if depth == 0:
                return pos, line
        else:
            line += text[pos] == "\n"
            pos += 1
    raise FormatError("unterminated block comment", source=source, where=f"line {start_line}")
