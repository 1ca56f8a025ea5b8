"""C++ names of mangled symbols (Itanium C++ ABI 5.1), for finding kernels and globals by source name.

NVRTC, nvcc and numba-cuda mangle kernels that are not ``extern "C"`` and
module variables with internal linkage (``static __constant__ float c[4]``
becomes ``_ZL1c``).  :func:`cxx_name` recovers the qualified name a user
writes (``vectorAdd``, ``ns::scale<float, 4>``, ``d_OptionData``, a static
local ``kernel::table``), without the parameter types; :func:`find_symbol`
picks the one symbol a source name means.  This reads the name part of the
grammar only: what it does not understand makes :func:`cxx_name` return None,
never a wrong name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["cxx_name", "find_symbol"]

_BUILTIN = {
    "v": "void", "w": "wchar_t", "b": "bool", "c": "char", "a": "signed char", "h": "unsigned char",
    "s": "short", "t": "unsigned short", "i": "int", "j": "unsigned int", "l": "long", "m": "unsigned long",
    "x": "long long", "y": "unsigned long long", "n": "__int128", "o": "unsigned __int128", "f": "float",
    "d": "double", "e": "long double", "z": "...",
}
_LITERAL_SUFFIX = {"j": "u", "l": "l", "m": "ul", "x": "ll", "y": "ull"}
_CTOR_DTOR = re.compile(r"[CD][0-5]")


class _Unknown(Exception):
    """A construct this reader does not handle."""


class _Reader:
    def __init__(self, text: str):
        self.text, self.pos = text, 0
        self.substitutions: list[str] = []

    def peek(self, count: int = 1) -> str:
        return self.text[self.pos:self.pos + count]

    def take(self, count: int = 1) -> str:
        part = self.text[self.pos:self.pos + count]
        if len(part) != count:
            raise _Unknown("truncated")
        self.pos += count
        return part

    def number(self) -> int:
        match = re.compile(r"\d+").match(self.text, self.pos)
        if match is None:
            raise _Unknown("number expected")
        self.pos = match.end()
        return int(match.group())

    def source_name(self) -> str:
        length = self.number()
        name = self.take(length)
        return "(anonymous namespace)" if name.startswith("_GLOBAL__N") else name

    def substitution(self) -> str:
        self.take()  # S
        if self.peek() == "t":
            self.take()
            return "std::" + self.unqualified()
        if self.peek() == "_":
            self.take()
            index = 0
        else:
            match = re.compile(r"[0-9A-Z]+").match(self.text, self.pos)
            if match is None or self.text[match.end():match.end() + 1] != "_":
                raise _Unknown("substitution")
            self.pos = match.end() + 1
            index = int(match.group(), 36) + 1
        if index >= len(self.substitutions):
            raise _Unknown("substitution out of range")
        return self.substitutions[index]

    def unqualified(self, scope: str = "") -> str:
        if self.peek() == "L":  # internal linkage
            self.take()
        if self.peek().isdigit():
            return self.source_name()
        if _CTOR_DTOR.fullmatch(self.peek(2)):
            kind = self.take(2)
            base = scope.rsplit("::", 1)[-1].split("<", 1)[0]
            return ("~" if kind[0] == "D" else "") + base
        raise _Unknown(f"name at {self.pos}")

    def template_args(self) -> str:
        self.take()  # I
        args = []
        while self.peek() != "E":
            args.append(self.template_arg())
        self.take()
        return "<" + ", ".join(args) + ">"

    def template_arg(self) -> str:
        if self.peek() == "L":  # a literal: L <type> <value> E
            self.take()
            kind = self.peek()
            literal_type = self.take() if kind in _BUILTIN else self.type()
            negative = self.peek() == "n"
            if negative:
                self.take()
            value = self.number()
            self.take()  # E
            if kind == "b":
                return "true" if value else "false"
            text = f"{'-' if negative else ''}{value}"
            return text + _LITERAL_SUFFIX.get(kind, "") if kind in _BUILTIN else f"({literal_type}){text}"
        return self.type()

    def type(self) -> str:
        code = self.peek()
        if code in _BUILTIN:
            self.take()
            return _BUILTIN[code]
        if code in "PRK":
            self.take()
            inner = self.type()
            result = f"{inner} const" if code == "K" else f"{inner}{'*' if code == 'P' else '&'}"
            self.substitutions.append(result)
            return result
        if code == "N" or code.isdigit() or code == "S":
            return self.name()
        raise _Unknown(f"type {code!r}")

    def name(self) -> str:
        """A (possibly nested, possibly templated) name; records substitution candidates."""
        if self.peek() == "N":
            self.take()
            while self.peek() in ("K", "V", "r", "R", "O"):
                self.take()
            parts: list[str] = []
            while self.peek() != "E":
                if self.peek() == "I":
                    if not parts:
                        raise _Unknown("template arguments without a name")
                    parts[-1] += self.template_args()
                elif self.peek() == "S":
                    parts.append(self.substitution())
                    continue
                else:
                    parts.append(self.unqualified("::".join(parts)))
                self.substitutions.append("::".join(parts))
            self.take()
            return "::".join(parts)
        if self.peek() == "Z":  # a local entity: Z <function> E <name>
            self.take()
            function = self.name()
            self.skip_to_local_end()
            return f"{function}::{self.name()}"
        result = self.substitution() if self.peek() == "S" else self.unqualified()
        if self.peek() == "I":
            self.substitutions.append(result)
            result += self.template_args()
        return result

    def skip_to_local_end(self) -> None:
        """Step over the enclosing function's parameter types (not needed for the name)."""
        depth = 0
        while True:
            char = self.take()
            if char.isdigit():
                self.pos -= 1
                self.source_name()
            elif char in "NI":
                depth += 1
            elif char == "E":
                if depth == 0:
                    return
                depth -= 1


def cxx_name(symbol: str) -> str | None:
    """``"_Z9vectorAddPKfS0_Pfi"`` -> ``"vectorAdd"``; ``"_ZL12d_OptionData"`` -> ``"d_OptionData"``;
    ``"_ZN2ns5scaleIfLi4EEEvPT_"`` -> ``"ns::scale<float, 4>"``.  None for a name that is not
    mangled, or mangled in a way this reader does not follow."""
    if not symbol.startswith("_Z"):
        return None
    reader = _Reader(symbol[2:])
    try:
        return reader.name()
    except (_Unknown, ValueError):
        return None


_HIDDEN_SCOPE = re.compile(r"(?:_INTERNAL_\w+|\(anonymous namespace\))::")


def _plain(name: str) -> str:
    """Spaces dropped, and the scopes a source never names: NVRTC's per-file ``_INTERNAL_<hash>``
    namespace around internal-linkage entities, and anonymous namespaces."""
    return re.sub(r"\s+", "", _HIDDEN_SCOPE.sub("", name))


def find_symbol(name: str, symbols: Iterable[str]) -> str | None:
    """The one symbol of ``symbols`` that ``name`` means: itself, else the symbol whose C++ name is
    ``name`` (spaces ignored), else the one whose C++ name is ``name`` plus template arguments.
    None when there is none or more than one (an overload set needs the mangled name)."""
    symbols = list(symbols)
    if name in symbols:
        return name
    wanted = _plain(name)
    named = {symbol: _plain(cxx_name(symbol) or "") for symbol in symbols}
    for rule in (lambda found: found == wanted, lambda found: found.split("<", 1)[0] == wanted):
        matches = [symbol for symbol, found in named.items() if found and rule(found)]
        if matches:
            return matches[0] if len(matches) == 1 else None
    return None
