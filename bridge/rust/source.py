"""A small reader of Rust item signatures: enough to type GPU kernels from their source.

It reads what a kernel's ABI depends on and skips everything else: functions
(with their ABI string, attributes, generics and bounds, parameters and return
type), ``extern "C" { ... }`` import blocks, structs, unions and enums with
their ``#[repr]``, ``type`` aliases, ``const`` items (their expressions, for
array lengths), ``static`` items (for ``#[constant]`` statics) and inline/file
modules.  Bodies are skipped by brace matching, so expressions are never parsed.

Real files hold host code too (``Box<dyn Error>``, ``impl Trait``, async,
closures, macros).  A type the reader cannot give a fixed ABI becomes
:class:`~ptxbridge.rust.syntax.TNoAbi` carrying the reason, and an item it
cannot read at all is skipped (a function is kept, marked ``broken``), so only
the kernel that needs such a type fails, and only when it is typed.  Only a
file that is not Rust (an unterminated comment, a mismatched bracket) fails
as a whole.
"""

from __future__ import annotations

from pathlib import Path

from ptxbridge.abi.errors import FormatError
from ptxbridge.rust.syntax import (
    Attr,
    RustEnum,
    RustFn,
    RustSource,
    RustStatic,
    RustStruct,
    RustType,
    TArray,
    TFnPtr,
    TNoAbi,
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
        self.consts: dict[str, str] = {}
        self.statics: list[RustStatic] = []
        self.submodules: list[str] = []
        self.cuda_module: str | None = None  # the enclosing #[cuda_module] module's name

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

    def until(self, *stops: str, types: bool = True) -> list[Token]:
        """Consume tokens up to (not including) a top-level ``stops`` token; groups nest, and so do
        ``<..>`` when ``types`` (in an expression ``<`` may be a comparison or a shift)."""
        start, angles = self.pos, 0
        while (tok := self.peek()) is not None:
            if angles == 0 and tok.text in stops and tok.kind in ("punct", "ident"):
                break
            if tok.kind == "punct" and tok.text in _OPEN:
                self.group()
                continue
            if tok.kind == "punct" and tok.text in (")", "]", "}"):
                break
            if types:
                angles += (tok.text == "<") - (tok.text == ">" and angles > 0)
            self.pos += 1
        return self.toks[start:self.pos]

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
        start = self.pos
        try:
            self.item_body(attrs)
        except FormatError as exc:  # an item this reader cannot follow: skip it, keep the reason
            self.pos = start
            self.broken(attrs, exc)

    def broken(self, attrs: list[Attr], exc: FormatError) -> None:
        head = self.until("{", ";", "=")
        fn = next((i for i, t in enumerate(head[:-1]) if t.text == "fn" and head[i + 1].kind == "ident"),
                  None)
        self.skip_item()
        if fn is not None:
            name = _ident(head[fn + 1].text)
            self.functions.append(RustFn(name, _symbol(attrs, name, False), None, (), None, (), tuple(attrs),
                                         head[fn].line, broken=exc.reason, source=self.source))

    def item_body(self, attrs: list[Attr]) -> None:
        abi: str | None = None
        while (tok := self.peek()) is not None and tok.kind == "ident" and tok.text in _QUALIFIERS:
            if tok.text == "const" and self.at(":", 2):  # `const NAME: T = ..;`, not `const fn`
                break
            self.pos += 1
            if tok.text == "pub" and self.at("("):
                self.group()
            elif tok.text == "extern":
                abi = "C"
                if (lit := self.peek()) is not None and lit.kind == "str":
                    abi = _unquote(self.next().text)
                if self.at("{"):
                    self.foreign_block(abi, attrs)
                    return
                if self.at("crate"):
                    self.skip_item()
                    return
        head = self.peek()
        if head is None:
            return
        if head.text == "fn":
            self.function(attrs, abi, foreign=False)
        elif head.text in ("struct", "union"):
            self.struct(attrs)
        elif head.text == "enum":
            self.enum(attrs)
        elif head.text == "type":
            self.alias()
        elif head.text == "mod":
            self.module(attrs)
        elif head.text == "const" and self.at(":", 2):
            self.const()
        elif head.text == "static":
            self.static(attrs)
        else:
            self.skip_item()

    def module(self, attrs: list[Attr]) -> None:
        self.expect("mod")
        name = self.next().text
        if self.at(";"):
            self.pos += 1
            self.submodules.append(name)
            return
        self.expect("{")
        outer = self.cuda_module
        if any(a.path == "cuda_module" for a in attrs):
            self.cuda_module = name
        try:
            self.items(until_brace=True)
        finally:
            self.cuda_module = outer
        self.expect("}")

    def const(self) -> None:
        self.expect("const")
        name = _ident(self.next().text)
        self.expect(":")
        self.until("=", ";")
        if self.at("="):
            self.pos += 1
            value = self.until(";", types=False)
            self.consts[name] = " ".join(t.text for t in value)
        self.skip_item()

    def static(self, attrs: list[Attr]) -> None:
        self.expect("static")
        if self.at("mut"):
            self.pos += 1
        tok = self.next()
        self.expect(":")
        declared = self.sub_type(self.until("=", ";"), tok)
        self.skip_item()
        self.statics.append(RustStatic(_ident(tok.text), declared, tuple(attrs), tok.line, tok.col,
                                       self.cuda_module))

    def foreign_block(self, abi: str, block_attrs: list[Attr]) -> None:
        self.expect("{")
        while not self.at("}"):
            attrs = block_attrs + self.attributes()  # `#[device] extern "C" { .. }` marks each fn
            while (tok := self.peek()) is not None and tok.text in ("pub", "safe", "unsafe"):
                self.pos += 1
                if tok.text == "pub" and self.at("("):
                    self.group()
            if self.at("fn"):
                self.function(attrs, abi, foreign=True)
            else:
                self.skip_item()
        self.expect("}")

    def generics(self) -> tuple[tuple[str, ...], tuple[str, ...], list[tuple[str, str]]]:
        """Type and const parameter names in ``<...>`` in order, the const ones alone, and bounds."""
        if not self.at("<"):
            return (), (), []
        names: list[str] = []
        consts: list[str] = []
        bounds: list[tuple[str, str]] = []
        for part in self.split_angle():
            if not part or part[0].kind == "life":
                continue
            if part[0].text == "const" and len(part) > 1:
                consts.append(part[1].text)
                names.append(part[1].text)
                continue
            names.append(part[0].text)
            if len(part) > 2 and part[1].text == ":":
                bounds.append((part[0].text, _spell(part[2:])))
        return tuple(names), tuple(consts), bounds

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
        generics, consts, bounds = self.generics()
        parts = split_commas(self.group())
        params = [self.param(part, index) for index, part in enumerate(parts)]
        returns = None
        if self.at("->"):
            tok = self.next()
            returns = self.sub_type(self.until("{", ";", "where"), tok)
        if self.at("where"):
            self.pos += 1
            for part in split_commas(self.until("{", ";")):
                if len(part) > 2 and part[1].text == ":" and part[0].kind == "ident":
                    bounds.append((part[0].text, _spell(part[2:])))
        if self.at("{"):
            self.group()
        else:
            self.expect(";")
        symbol = _symbol(attrs, name, foreign)
        self.functions.append(RustFn(name, symbol, abi, tuple(params), returns, generics, tuple(attrs), line,
                                     foreign, consts, tuple(bounds), source=self.source,
                                     param_lines=tuple(p[0].line for p in parts)))

    def param(self, part: list[Token], index: int) -> tuple[str, RustType]:
        part = _strip_attrs(part)
        colon = _top_level(part, ":")
        if colon is None:
            if part and part[-1].text == "self":
                return "self", TNoAbi("a method receiver (self)")
            self.fail(f"parameter {index} has no type", part[0] if part else None)
        pattern = [t for t in part[:colon] if t.text not in ("mut", "ref")]
        simple = len(pattern) == 1 and pattern[0].kind == "ident" and pattern[0].text != "_"
        name = _ident(pattern[0].text) if simple else f"arg{index}"
        return name, self.sub_type(part[colon + 1:], part[colon])

    def sub_type(self, tokens: list[Token], near: Token) -> RustType:
        """The type spelled by ``tokens``; a :class:`TNoAbi` with the reason when it cannot be read."""
        if not tokens:
            return TNoAbi(f"no type after line {near.line}")
        try:
            return _Parser(tokens, self.source).whole_type()
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
                return _Parser(parts[0], self.source).whole_type()
            return TTuple(tuple(_Parser(p, self.source).whole_type() for p in parts))
        if text == "[":
            self.pos -= 1
            inside = self.group()
            semi = _top_level(inside, ";")
            inner = _Parser(inside[:semi] if semi is not None else inside, self.source).whole_type()
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
        if len(part) > 1 and part[1].text in ("=", ":"):  # associated type binding or bound
            return " ".join(t.text for t in part)
        return self.sub_type(part, part[0])

    def struct(self, attrs: list[Attr]) -> None:
        keyword = self.next()
        name = _ident(self.next().text)
        generics = self.generics()[0]
        fields: list[tuple[str, RustType]] = []
        if self.at("("):
            for index, part in enumerate(split_commas(self.group())):
                part = _strip_vis(_strip_attrs(part))
                fields.append((str(index), self.sub_type(part, keyword)))
        while self.at("where"):
            self.until("{", ";")
        if self.at("{"):
            fields += self.named_fields(name)
        else:
            self.expect(";")
        self.structs[name] = RustStruct(name, generics, tuple(fields), _repr(attrs), keyword.line,
                                        keyword.text == "union")

    def named_fields(self, owner: str) -> list[tuple[str, RustType]]:
        fields = []
        for part in split_commas(self.group()):
            part = _strip_vis(_strip_attrs(part))
            if len(part) < 3 or part[1].text != ":":
                self.fail(f"{owner}: expected 'field: Type'", part[0] if part else None)
            fields.append((_ident(part[0].text), self.sub_type(part[2:], part[1])))
        return fields

    def enum(self, attrs: list[Attr]) -> None:
        line = self.next().line
        name = _ident(self.next().text)
        self.generics()
        self.until("{")
        variants = []
        for part in split_commas(self.group()):
            inner = _Parser(_strip_attrs(part), self.source)
            inner.next()  # the variant's name
            fields: list[tuple[str, RustType]] = []
            if inner.at("("):
                items = split_commas(inner.group())
                fields = [(str(i), self.sub_type(p, part[0])) for i, p in enumerate(items)]
            elif inner.at("{"):
                fields = inner.named_fields(name)
            variants.append(tuple(fields))
        self.enums[name] = RustEnum(name, _repr(attrs), tuple(variants), line)

    def alias(self) -> None:
        tok = self.expect("type")
        name = _ident(self.next().text)
        generic = self.at("<")
        if generic:
            self.split_angle()
        if not self.at("="):
            self.skip_item()
            return
        self.pos += 1
        value = self.until(";")
        self.skip_item()
        if not generic:  # only trivial (non-generic) aliases are resolved
            self.aliases[name] = self.sub_type(value, tok)


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


def _spell(tokens: list[Token]) -> str:
    """Tokens as Rust is written: ``Fn(*mut T) -> u32 + Copy`` (for messages)."""
    out = ""
    for prev, tok in zip([None, *tokens], tokens, strict=False):
        spaced = prev is not None and (tok.text in ("+", "->", "=") or prev.text in ("+", "->", "=", ",")
                                       or (prev.kind != "punct" and tok.kind != "punct"))
        out += (" " if spaced else "") + tok.text
    return out


def _top_level(tokens: list[Token], text: str) -> int | None:
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
                      tuple(parser.submodules), parser.consts, tuple(parser.statics))


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
