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
from ptxbridge.rust.cursor import spell, split_commas, strip_attrs, strip_vis, top_level
from ptxbridge.rust.syntax import (
    Attr,
    RustEnum,
    RustFn,
    RustSource,
    RustStatic,
    RustStruct,
    RustType,
    TNoAbi,
    Token,
    tokenize,
)
from ptxbridge.rust.type_syntax import TypeReader, ident

__all__ = ["parse_source", "read_crate", "split_commas"]

_QUALIFIERS = {"pub", "unsafe", "safe", "const", "async", "default", "extern", "auto"}


class _Parser(TypeReader):
    """Recursive descent over the token list; errors name the file and line."""

    def __init__(self, tokens: list[Token], source: str):
        super().__init__(tokens, source)
        self.functions: list[RustFn] = []
        self.structs: dict[str, RustStruct] = {}
        self.enums: dict[str, RustEnum] = {}
        self.aliases: dict[str, RustType] = {}
        self.consts: dict[str, str] = {}
        self.statics: list[RustStatic] = []
        self.submodules: list[str] = []
        self.cuda_module: str | None = None  # the enclosing #[cuda_module] module's name

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
            name = ident(head[fn + 1].text)
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
        name = ident(self.next().text)
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
        self.statics.append(RustStatic(ident(tok.text), declared, tuple(attrs), tok.line, tok.col,
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
                bounds.append((part[0].text, spell(part[2:])))
        return tuple(names), tuple(consts), bounds

    def function(self, attrs: list[Attr], abi: str | None, *, foreign: bool) -> None:
        line = self.expect("fn").line
        name = ident(self.next().text)
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
                    bounds.append((part[0].text, spell(part[2:])))
        if self.at("{"):
            self.group()
        else:
            self.expect(";")
        symbol = _symbol(attrs, name, foreign)
        self.functions.append(RustFn(name, symbol, abi, tuple(params), returns, generics, tuple(attrs), line,
                                     foreign, consts, tuple(bounds), source=self.source,
                                     param_lines=tuple(p[0].line for p in parts)))

    def param(self, part: list[Token], index: int) -> tuple[str, RustType]:
        part = strip_attrs(part)
        colon = top_level(part, ":")
        if colon is None:
            if part and part[-1].text == "self":
                return "self", TNoAbi("a method receiver (self)")
            self.fail(f"parameter {index} has no type", part[0] if part else None)
        pattern = [t for t in part[:colon] if t.text not in ("mut", "ref")]
        simple = len(pattern) == 1 and pattern[0].kind == "ident" and pattern[0].text != "_"
        name = ident(pattern[0].text) if simple else f"arg{index}"
        return name, self.sub_type(part[colon + 1:], part[colon])

    def struct(self, attrs: list[Attr]) -> None:
        keyword = self.next()
        name = ident(self.next().text)
        generics = self.generics()[0]
        fields: list[tuple[str, RustType]] = []
        if self.at("("):
            for index, part in enumerate(split_commas(self.group())):
                part = strip_vis(strip_attrs(part))
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
            part = strip_vis(strip_attrs(part))
            if len(part) < 3 or part[1].text != ":":
                self.fail(f"{owner}: expected 'field: Type'", part[0] if part else None)
            fields.append((ident(part[0].text), self.sub_type(part[2:], part[1])))
        return fields

    def enum(self, attrs: list[Attr]) -> None:
        line = self.next().line
        name = ident(self.next().text)
        self.generics()
        self.until("{")
        variants = []
        for part in split_commas(self.group()):
            inner = _Parser(strip_attrs(part), self.source)
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
        name = ident(self.next().text)
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
