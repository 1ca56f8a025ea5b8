"""Function bodies: PTX text between the braces -> declarations and decoded instructions.

The module level (functions, parameters, globals) is ``ptxbridge.abi.ptx``'s
job; this module reads only what is inside a body: ``.reg`` / ``.param`` /
``.local`` / ``.shared`` declarations, labels, ``{ }`` scopes (call sequences
redeclare ``param0`` in each, so names are resolved per scope, PTX ISA 11.2
"Scope"), and instructions ``[@[!]p] opcode.mods operands;`` with the line
each one starts on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ptxbridge.abi.errors import FormatError, UnsupportedInstructionError
from ptxbridge.abi.ptx import TYPE_SIZES

__all__ = [
    "Reg", "Sym", "Imm", "Mem", "Vec", "Not", "Pair", "Group", "Sink", "Operand",
    "Instruction", "Variable", "Body", "parse_body",
]


@dataclass(frozen=True, slots=True)
class Reg:
    """A register (scope-resolved name) or a special register such as ``%tid.x``."""

    name: str


@dataclass(frozen=True, slots=True)
class Sym:
    """A symbol: label, function, variable or parameter name, plus a byte offset."""

    name: str
    offset: int = 0


@dataclass(frozen=True, slots=True)
class Imm:
    text: str


@dataclass(frozen=True, slots=True)
class Mem:
    """``[base+offset]``: base is a register, a symbol or a constant address."""

    base: Reg | Sym | Imm
    offset: int = 0


@dataclass(frozen=True, slots=True)
class Vec:
    items: tuple[Operand, ...]


@dataclass(frozen=True, slots=True)
class Not:
    inner: Operand


@dataclass(frozen=True, slots=True)
class Pair:
    """``d|p``: a second destination predicate (setp, shfl)."""

    first: Operand
    second: Operand


@dataclass(frozen=True, slots=True)
class Group:
    """``(a, b)``: a call's return or argument list."""

    items: tuple[Operand, ...]


@dataclass(frozen=True, slots=True)
class Sink:
    """``_``: a discarded vector element."""


Operand = Reg | Sym | Imm | Mem | Vec | Not | Pair | Group | Sink


@dataclass(frozen=True, slots=True)
class Instruction:
    line: int
    text: str
    opcode: str
    mods: tuple[str, ...]
    operands: tuple[Operand, ...]
    guard: Reg | None = None
    guard_negated: bool = False
    source: tuple[int, int] | None = None  # (file index, line) of the last ``.loc`` before it, if any


@dataclass(frozen=True, slots=True)
class Variable:
    """A ``.local`` / ``.shared`` / ``.param`` / ``.global`` / ``.const`` variable declared in a body."""

    name: str
    space: str
    type: str
    align: int
    size: int
    initializer: str | None = None


@dataclass(frozen=True, slots=True)
class Body:
    instructions: tuple[Instruction, ...]
    labels: dict[str, int]
    registers: dict[str, str]  # resolved name -> PTX type
    variables: tuple[Variable, ...]


_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_LABEL = re.compile(r"\s*([A-Za-z_$%][\w$]*)\s*:(?!:)")
_LINE_DIRECTIVE = re.compile(r"\.(?:loc|file)\b")  # debug line info (lineinfo, -g), a line each
_LOC = re.compile(r"\.loc\s+(\d+)\s+(\d+)")  # PTX ISA 11.5.2: `.loc file line [column]`
_RANGE = re.compile(r"^(%?[A-Za-z_$][\w$]*)<(\d+)>$")
_ARRAY = re.compile(r"^([%A-Za-z_$][\w$]*)((?:\[\d*\])*)$")
# .callprototype / .calltargets only describe indirect calls, whose callee the emulator finds by address
_SKIPPED = (".pragma", ".loc", ".file", ".section", ".maxnreg", ".noreturn", ".callprototype", ".calltargets")
_SPACES = ("reg", "param", "local", "shared", "global", "const")
_MAX_REGISTERS = 1 << 20


class _Scopes:
    """Names visible at a point: one dict per open ``{``, innermost last."""

    def __init__(self) -> None:
        self.stack: list[dict[str, str]] = [{}]
        self.counter = 0

    def declare(self, name: str) -> str:
        resolved = name if len(self.stack) == 1 else f"{name}#{self.counter}"
        self.counter += 1
        self.stack[-1][name] = resolved
        return resolved

    def resolve(self, name: str) -> str | None:
        for scope in reversed(self.stack):
            if name in scope:
                return scope[name]
        return None


def parse_body(text: str, first_line: int, source: str, function: str) -> Body:
    """Decode one function body; ``first_line`` is the file line ``text`` starts on.

    Raises FormatError naming ``source``, the line and the offending text.
    """
    text = _COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)  # keeps every line number
    parser = _BodyParser(text, first_line, source, function)
    parser.run()
    return Body(tuple(parser.instructions), parser.labels, parser.registers, tuple(parser.variables))


class _BodyParser:
    def __init__(self, text: str, first_line: int, source: str, function: str):
        self.text, self.first_line, self.source, self.function = text, first_line, source, function
        self.instructions: list[Instruction] = []
        self.labels: dict[str, int] = {}
        self.registers: dict[str, str] = {}
        self.variables: list[Variable] = []
        self.scopes = _Scopes()
        self.line = first_line
        self.loc: tuple[int, int] | None = None

    def fail(self, message: str) -> FormatError:
        return FormatError(f"in {self.function}: {message}", source=self.source, where=f"line {self.line}")

    def unsupported(self, message: str) -> UnsupportedInstructionError:
        """Valid PTX the emulator does not implement: refused when a kernel that needs it launches."""
        return UnsupportedInstructionError(f"{self.function}, PTX line {self.line}: {message}")

    def run(self) -> None:
        text, pos = self.text, 0
        while True:
            while pos < len(text) and text[pos].isspace():
                pos += 1
            if pos >= len(text):
                break
            self.line = self.first_line + text.count("\n", 0, pos)
            char = text[pos]
            if char == "{":
                self.scopes.stack.append({})
                pos += 1
            elif char == "}":
                if len(self.scopes.stack) == 1:
                    raise self.fail("'}' without a matching '{'")
                self.scopes.stack.pop()
                pos += 1
            elif _LINE_DIRECTIVE.match(text, pos):  # `.loc 1 8 0`: no semicolon, it ends at the newline
                end = text.find("\n", pos)
                end = len(text) if end < 0 else end
                loc = _LOC.match(text, pos, end)
                if loc is not None and int(loc[2]):  # line 0: compiler-made code of no source line
                    self.loc = (int(loc[1]), int(loc[2]))
                pos = end
            elif (label := _LABEL.match(text, pos)) is not None:
                if label.group(1) in self.labels:
                    raise self.fail(f"label {label.group(1)!r} is defined twice")
                self.labels[label.group(1)] = len(self.instructions)
                pos = label.end()
            else:
                end = text.find(";", pos)
                if end < 0:
                    raise self.fail(f"statement without ';' (got {text[pos:pos + 40]!r})")
                self.statement(" ".join(text[pos:end].split()))
                pos = end + 1
        if len(self.scopes.stack) != 1:
            raise self.fail("'{' without a matching '}'")

    def statement(self, stmt: str) -> None:
        if stmt.startswith("."):
            head = stmt.split(" ", 1)[0]
            if head in _SKIPPED:
                return
            self.declaration(stmt)
        else:
            self.instructions.append(self.instruction(stmt))

    def declaration(self, stmt: str) -> None:
        initializer = None
        if "=" in stmt:
            stmt, initializer = (part.strip() for part in stmt.split("=", 1))
        words = stmt.replace(",", " , ").split()
        head, *attached = words[0][1:].split(".")  # `.reg.b32 f` is `.reg .b32 f` (cuda_fp16.hpp's asm)
        words[0:1] = [f".{head}", *(f".{word}" for word in attached)]
        space = head
        if space not in _SPACES:
            raise self.unsupported(f"declaration {words[0]} is not implemented by the CPU loader "
                                   f"(got {stmt!r})")
        align, ptx_type, index = 0, None, 1
        while index < len(words) and words[index].startswith("."):
            word = words[index][1:]
            if word == "align":
                index += 1
                align = int(words[index])
            elif word in TYPE_SIZES:
                ptx_type = word
            elif word not in ("ptr",):
                raise self.unsupported(f"attribute .{word} in a {words[0]} declaration is not implemented "
                                       f"by the CPU loader (got {stmt!r})")
            index += 1
        if ptx_type is None:
            raise self.fail(f"declaration without a type (got {stmt!r})")
        for name in (w for w in words[index:] if w != ","):
            self.declare(space, ptx_type, align or TYPE_SIZES[ptx_type], name, initializer)

    def declare(self, space: str, ptx_type: str, align: int, name: str, initializer: str | None) -> None:
        if space == "reg":
            ranged = _RANGE.match(name)
            if ranged is not None:
                count = int(ranged.group(2))
                if count > _MAX_REGISTERS:
                    raise self.fail(f"register range {name} exceeds {_MAX_REGISTERS} registers")
                for i in range(count):
                    self.registers[self.scopes.declare(f"{ranged.group(1)}{i}")] = ptx_type
            else:
                self.registers[self.scopes.declare(name)] = ptx_type
            return
        array = _ARRAY.match(name)
        if array is None:
            raise self.fail(f"bad {space} variable name {name!r}")
        count = 1
        for dim in re.findall(r"\[(\d*)\]", array.group(2)):
            count *= int(dim) if dim else 0
        resolved = self.scopes.declare(array.group(1))
        self.variables.append(Variable(resolved, space, ptx_type, align, count * TYPE_SIZES[ptx_type],
                                       initializer))

    def instruction(self, stmt: str) -> Instruction:
        guard, negated = None, False
        if stmt.startswith("@"):
            head, _, stmt = stmt.partition(" ")
            negated = head.startswith("@!")
            guard = self.operand(head[2 if negated else 1:])
            if not isinstance(guard, Reg):
                raise self.fail(f"a guard must be a predicate register (got {head!r})")
        opcode, _, rest = stmt.partition(" ")
        parts = opcode.split(".")
        operands = tuple(self.operand(t) for t in _split_top(rest)) if rest.strip() else ()
        text = stmt if guard is None else f"@{'!' if negated else ''}{guard.name.split('#')[0]} {stmt}"
        return Instruction(self.line, text, parts[0], tuple(parts[1:]), operands, guard, negated, self.loc)

    def operand(self, text: str) -> Operand:
        text = text.strip()
        if not text:
            raise self.fail("empty operand")
        first = text[0]
        if first == "[":
            if not text.endswith("]"):
                raise self.fail(f"unterminated address operand {text!r}")
            return self.address(text[1:-1])
        if first in "{(":
            items = tuple(self.operand(t) for t in _split_top(text[1:-1]))
            return Vec(items) if first == "{" else Group(items)
        if first == "!":
            return Not(self.operand(text[1:]))
        if text == "_":
            return Sink()
        if "|" in text:
            a, b = text.split("|", 1)
            return Pair(self.operand(a), self.operand(b))
        if first.isdigit() or first in "-+" or text[:2].lower() in ("0f", "0d"):
            return Imm(text)
        name, offset = self.split_offset(text)
        resolved = self.scopes.resolve(name)
        if resolved is not None and resolved in self.registers:
            return Reg(resolved) if not offset else self._bad(text)
        if first == "%":
            return Reg(name) if not offset else self._bad(text)  # special register
        return Sym(resolved or name, offset)

    def _bad(self, text: str) -> Operand:
        raise self.fail(f"a register operand takes no offset (got {text!r})")

    def address(self, inner: str) -> Mem:
        name, offset = self.split_offset(inner.strip())
        base = self.operand(name)
        if not isinstance(base, (Reg, Sym, Imm)):
            raise self.fail(f"bad address operand [{inner}]")
        if isinstance(base, Sym):
            return Mem(Sym(base.name), offset)
        return Mem(base, offset)

    def split_offset(self, text: str) -> tuple[str, int]:
        # the first sign followed by a number that runs to the end (a search, not ``^(.*?)\s*...``,
        # which backtracks quadratically over a long run of blanks; tests/test_redos.py)
        match = re.search(r"([+-])\s*+(-?(?:0x[0-9a-fA-F]++|\d++))$", text)
        base = "" if match is None else text[:match.start()].rstrip()
        if match is None or not base or base[0].isdigit():
            return text, 0
        value = int(match.group(2), 0)
        return base, value if match.group(1) == "+" else -value


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets, braces and parentheses."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in "[{(":
            depth += 1
        elif char in "]})":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p.strip()]
