"""A small reader of Rust item signatures: enough to type GPU kernels from their source.

It reads what a kernel's ABI depends on and skips everything else: functions
(with their ABI string, attributes, generics, parameters and return type),
``extern "C" { ... }`` import blocks, structs with their ``#[repr]``, fieldless
enums, trivial ``type`` aliases and inline/file modules.  Bodies are skipped by
brace matching, so expressions are never parsed.
"""

from __future__ import annotations

from pathlib import Path

from ptxbridge.abi.errors import FormatError
from ptxbridge.rust.syntax import (
    Attr,
    RustEnum,
    RustFn,
    RustSource,
    RustStruct,
    RustType,
    TArray,
    TFnPtr,
    Token,
    TPath,
    TPtr,
    TRef,
    TSlice,
    TTuple,
    tokenize,
)

__all__ = ["parse_source", "read_crate", "split_commas"]

_OPEN = {"(": ")", "[": "]", "{": "}"}
_QUALIFIERS = {"pub", "unsafe", "safe", "const", "async", "default", "extern", "auto"}


class _Parser:
    """Recursive descent over the token list; errors name the file and line."""

    def __init__(self, tokens: list[Token], source: str):
        self.toks, self.pos, self.source = tokens, 0, source
        self.functions: list[RustFn] = []
        self.structs: dict[str, RustStruct] = {}
        self.enums: dict[str, RustEnum] = {}
        self.aliases: dict[str, RustType] = {}
        self.submodules: list[str] = []

    # -- token helpers -------------------------------------------------------------
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
        closer, depth, start = _OPEN[opener.text], 1, self.pos
        while depth:
            tok = self.next()
            if tok.kind == "punct" and tok.text in _OPEN:
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

    # -- items ---------------------------------------------------------------------
    def items(self, until_brace: bool = False) -> None:
        while self.peek() is not None and not (until_brace and self.at("}")):
            self.item()

    def attributes(self) -> list[Attr]:
        attrs: list[Attr] = []
        while self.at("#"):
            self.pos += 1
            inner = self.at("!")
            if inner:
                self.pos += 1
            body = self.group()
            if not inner and body:
                attrs.append(_attr(body))
        return attrs

    def item(self) -> None:
        attrs = self.attributes()
        if self.peek() is None:
            return
        abi: str | None = None
        while (tok := self.peek()) is not None and tok.kind == "ident" and tok.text in _QUALIFIERS:
            self.pos += 1
            if tok.text == "pub" and self.at("("):
                self.group()
            elif tok.text == "extern":
                abi = "C"
                if (lit := self.peek()) is not None and lit.kind == "str":
                    abi = _unquote(self.next().text)
                if self.at("{"):
                    self.foreign_block(abi)
                    return
                if self.at("crate"):
                    self.skip_item()
                    return
        head = self.peek()
        if head is None:
            return
        if head.text == "fn":
            self.function(attrs, abi, foreign=False)
        elif head.text == "struct" or head.text == "union":
            self.struct(attrs)
        elif head.text == "enum":
            self.enum(attrs)
        elif head.text == "type":
            self.alias()
        elif head.text == "mod":
            self.module()
        else:
            self.skip_item()

    def module(self) -> None:
        self.expect("mod")
        name = self.next().text
        if self.at(";"):
            self.pos += 1
            self.submodules.append(name)
            return
        self.expect("{")
        self.items(until_brace=True)
        self.expect("}")

    def foreign_block(self, abi: str) -> None:
        self.expect("{")
        while not self.at("}"):
            attrs = self.attributes()
            while (tok := self.peek()) is not None and tok.text in ("pub", "safe", "unsafe"):
                self.pos += 1
                if tok.text == "pub" and self.at("("):
                    self.group()
            if self.at("fn"):
                self.function(attrs, abi, foreign=True)
            else:
                self.skip_item()
        self.expect("}")

    def generics(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Names of the type and const parameters in ``<...>`` in order, and the const ones alone."""
        if not self.at("<"):
            return (), ()
        names: list[str] = []
        consts: list[str] = []
        for part in self.split_angle():
            if not part or part[0].kind == "life":
                continue
            if part[0].text == "const" and len(part) > 1:
                consts.append(part[1].text)
            names.append(part[1].text if part[0].text == "const" and len(part) > 1 else part[0].text)
        return tuple(names), tuple(consts)

    def split_angle(self) -> list[list[Token]]:
        """Consume ``<...>``, returning its top-level comma-separated parts."""
        self.expect("<")
        parts: list[list[Token]] = [[]]
        depth = 1
        while True:
            tok = self.peek()
            if tok is None:
                self.fail("unterminated '<'")
            if tok.text in _OPEN:
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

    def function(self, attrs: list[Attr], abi: str | None, *, foreign: bool) -> None:
        line = self.expect("fn").line
        name = _ident(self.next().text)
        generics, consts = self.generics()
        params = []
        for index, part in enumerate(split_commas(self.group())):
            params.append(self.param(part, index))
        returns = None
        if self.at("->"):
            self.pos += 1
            returns = self.type()
        if self.at("where"):
            while not (self.at("{") or self.at(";")):
                if self.at("<"):
                    self.split_angle()
                else:
                    self.pos += 1
        if self.at("{"):
            self.group()
        else:
            self.expect(";")
        symbol = _symbol(attrs, name, foreign)
        self.functions.append(RustFn(name, symbol, abi, tuple(params), returns, generics,
                                     tuple(attrs), line, foreign, consts))

    def param(self, part: list[Token], index: int) -> tuple[str, RustType]:
        part = _strip_attrs(part)
        colon = next((i for i, t in enumerate(part) if t.text == ":" and t.kind == "punct"), None)
        if colon is None:
            self.fail(f"parameter {index} has no type", part[0] if part else None)
        pattern = [t for t in part[:colon] if t.text not in ("mut", "ref")]
        simple = len(pattern) == 1 and pattern[0].kind == "ident" and pattern[0].text != "_"
        name = _ident(pattern[0].text) if simple else f"arg{index}"
        return name, _Parser(part[colon + 1:], self.source).whole_type()

    def whole_type(self) -> RustType:
        parsed = self.type()
        if self.peek() is not None:
            self.fail(f"unexpected {self.peek().text!r} after a type")
        return parsed

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
            items = [_Parser(p, self.source).whole_type() for p in split_commas(self.group())]
            return TTuple(tuple(items))
        if text == "[":
            self.pos -= 1
            inside = self.group()
            semi = next((i for i, t in enumerate(inside) if t.text == ";"), None)
            inner = _Parser(inside[:semi] if semi is not None else inside, self.source).whole_type()
            if semi is None:
                return TSlice(inner)
            return TArray(inner, " ".join(t.text for t in inside[semi + 1:]))
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
        if text in ("dyn", "impl"):
            self.fail(f"'{text} Trait' parameters have no fixed ABI", tok)
        if tok.kind != "ident" and text != "::":
            self.fail(f"expected a type (got {text!r})", tok)
        self.pos -= 1
        return self.path_type()

    def path_type(self) -> TPath:
        segments: list[str] = []
        args: tuple[RustType | str, ...] = ()
        if self.at("::"):
            self.pos += 1
        while True:
            segments.append(_ident(self.next().text))
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
        if len(part) > 1 and part[1].text == "=":  # associated type binding
            return " ".join(t.text for t in part)
        return _Parser(part, self.source).whole_type()

    def struct(self, attrs: list[Attr]) -> None:
        line = self.next().line
        name = _ident(self.next().text)
        generics = self.generics()[0]
        fields: list[tuple[str, RustType]] = []
        if self.at("("):
            for index, part in enumerate(split_commas(self.group())):
                fields.append((str(index), _Parser(_strip_vis(_strip_attrs(part)), self.source).whole_type()))
        while self.at("where"):
            self.skip_where()
        if self.at("{"):
            for part in split_commas(self.group()):
                part = _strip_vis(_strip_attrs(part))
                if len(part) < 3 or part[1].text != ":":
                    self.fail(f"struct {name}: expected 'field: Type'", part[0] if part else None)
                fields.append((_ident(part[0].text), _Parser(part[2:], self.source).whole_type()))
        else:
            self.expect(";")
        self.structs[name] = RustStruct(name, generics, tuple(fields), _repr(attrs), line)

    def skip_where(self) -> None:
        while not (self.at("{") or self.at(";")):
            if self.at("<"):
                self.split_angle()
            else:
                self.pos += 1

    def enum(self, attrs: list[Attr]) -> None:
        line = self.next().line
        name = _ident(self.next().text)
        self.generics()
        self.skip_where()
        body = self.group()
        fieldless = not any(t.text in ("(", "{") for t in body)
        self.enums[name] = RustEnum(name, _repr(attrs), fieldless, line)

    def alias(self) -> None:
        self.expect("type")
        name = _ident(self.next().text)
        generic = self.at("<")
        if generic:
            self.split_angle()
        if not self.at("="):
            self.skip_item()
            return
        self.pos += 1
        start = self.pos
        self.skip_item()
        if not generic:  # only trivial (non-generic) aliases are resolved
            self.aliases[name] = _Parser(self.toks[start:self.pos - 1], self.source).whole_type()


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


def _strip_attrs(part: list[Token]) -> list[Token]:
    while len(part) > 1 and part[0].text == "#" and part[1].text == "[":
        depth, i = 0, 1
        for i in range(1, len(part)):
            depth += part[i].text == "["
            depth -= part[i].text == "]"
            if depth == 0:
                break
        part = part[i + 1:]
    return part


def _strip_vis(part: list[Token]) -> list[Token]:
    if part and part[0].text == "pub":
        part = part[1:]
        if part and part[0].text == "(":  # pub(crate), pub(in path): no nested parentheses
            part = part[next(i for i, t in enumerate(part) if t.text == ")") + 1:]
    return part


def _attr(body: list[Token]) -> Attr:
    path: list[str] = []
    i = 0
    while i < len(body) and (body[i].kind == "ident" or body[i].text == "::"):
        if body[i].kind == "ident":
            path.append(body[i].text)
        i += 1
    args = body[i:]
    if args and args[0].text in ("(", "["):
        args = args[1:-1]
    if path == ["unsafe"] and args:
        return _attr(list(args))
    return Attr(path[-1] if path else "", tuple(args))


def _repr(attrs: list[Attr]) -> tuple[str, ...]:
    found: list[str] = []
    for attr in attrs:
        if attr.path == "repr":
            found += ["".join(t.text for t in part) for part in split_commas(list(attr.args))]
    return tuple(found)


def _symbol(attrs: list[Attr], name: str, foreign: bool) -> str | None:
    for attr in attrs:
        if attr.path in ("export_name", "link_name") and attr.args and attr.args[-1].kind == "str":
            return _unquote(attr.args[-1].text)
        if attr.path == "no_mangle":
            return name
    return name if foreign else None


def _unquote(text: str) -> str:
    return text[1:-1] if text.startswith('"') else text.split('"', 1)[1].rsplit('"', 1)[0]


def _ident(text: str) -> str:
    return text[2:] if text.startswith("r#") else text


def parse_source(text: str, source: str = "<rust>") -> RustSource:
    """Read the signature-relevant items of one Rust file."""
    parser = _Parser(tokenize(text, source), source)
    parser.items()
    return RustSource(source, tuple(parser.functions), parser.structs, parser.enums, parser.aliases,
                      tuple(parser.submodules))


def read_crate(root: Path) -> tuple[list[RustSource], list[Path]]:
    """Parse ``root`` and, recursively, the files of its ``mod name;`` declarations.

    Returns the parsed files and every path read (for cache keys).
    """
    parsed: list[RustSource] = []
    paths: list[Path] = []
    pending = [(root, root.parent)]
    while pending:
        path, module_dir = pending.pop()
        if path in paths:
            continue
        paths.append(path)
        unit = parse_source(path.read_text(encoding="utf-8"), str(path))
        parsed.append(unit)
        child_dir = module_dir if path == root or path.name == "mod.rs" else path.with_suffix("")
        for name in unit.submodules:
            for candidate in (child_dir / f"{name}.rs", child_dir / name / "mod.rs"):
                if candidate.is_file():
                    pending.append((candidate, candidate.parent if candidate.name == "mod.rs"
                                    else child_dir))
                    break
            else:
                raise FormatError(f"module {name!r} declared but neither {name}.rs nor {name}/mod.rs "
                                  f"exists under {child_dir}", source=str(path))
    return parsed, paths
