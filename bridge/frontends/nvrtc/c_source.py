"""Read kernel and device-function signatures from CUDA C++ source.

A tokenizer-based reader, not a C++ parser: it understands exactly what a
kernel signature needs (``extern "C"`` ``__global__`` / ``__device__``
functions, plain C types, pointers, structs declared in the source,
``__launch_bounds__`` and ``__cluster_dims__``) and steps over everything
else (templates, macros, comments, class bodies, host code).

Definitions of ``extern "C" __device__`` functions are exports; declarations
without a body are imports the linker must resolve.  C++ (mangled) kernels
are kept unresolved and read on demand for a name expression such as
``"scale<float>"`` (:meth:`CDeclarations.for_expression`).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ptxbridge.abi.dtypes import dtype
from ptxbridge.abi.errors import FormatError
from ptxbridge.abi.kinds import Opaque, ParamType, Pointer, Scalar, Struct, StructField, Tuple
from ptxbridge.abi.lowering import memory_layout
from ptxbridge.abi.signature import LaunchMeta, Param, Signature

__all__ = ["CDeclarations", "read_c_source"]

_TOKEN = re.compile(r"""
    (?P<ws>\s+) | (?P<comment>//[^\n]*|/\*.*?\*/) | (?P<pp>\#(?:\\\n|[^\n])*)
  | (?P<str>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
  | (?P<id>[A-Za-z_]\w*) | (?P<num>\.?\d(?:[\w.]|[eEpP][+-])*) | (?P<punct>::|\[\[|\]\]|.)
""", re.VERBOSE | re.DOTALL | re.MULTILINE)
_DEFINE = re.compile(r"#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+([^\n]+)")

Token = tuple[str, int]  # (text, line)

_SPECIFIERS = frozenset({"__global__", "__device__", "__host__", "__forceinline__", "__noinline__",
                         "static", "inline", "__inline__", "extern", '"C"', "constexpr", "virtual",
                         "explicit", "friend", "__noinline", "__cudart_builtin__"})
_IGNORED_QUALIFIERS = frozenset({"__restrict__", "__restrict", "restrict", "volatile", "struct",
                                 "union", "class", "typename", "register"})
_RESTRICT = frozenset({"__restrict__", "__restrict", "restrict"})  # recorded on the pointer they qualify
_ATTRIBUTES = frozenset({"__launch_bounds__", "__cluster_dims__", "__attribute__", "__align__",
                         "alignas", "__maxnreg__", "__declspec", "__grid_constant__"})
_INT_WORDS = frozenset({"signed", "unsigned", "char", "short", "int", "long"})
_NAMED_SCALARS = {
    "bool": "bool", "float": "f32", "double": "f64", "size_t": "u64", "ptrdiff_t": "i64",
    "ssize_t": "i64", "intptr_t": "i64", "uintptr_t": "u64", "clock_t": "i64", "__half": "f16", "half": "f16",
    "__nv_bfloat16": "bf16", "nv_bfloat16": "bf16", "__nv_fp8_e4m3": "f8e4m3fn",
    "__nv_fp8_e5m2": "f8e5m2",
    **{f"{p}int{n}_t": f"{p[:1] or 'i'}{n}" for p in ("", "u") for n in (8, 16, 32, 64)},
}
_VECTOR_BASES = {"char": 1, "uchar": 1, "short": 2, "ushort": 2, "int": 4, "uint": 4, "long": 8,
                 "ulong": 8, "longlong": 8, "ulonglong": 8, "float": 4, "double": 8}
_VECTOR = re.compile(rf"^({'|'.join(_VECTOR_BASES)})([1-4])$")
_PAIRS = {"__half2": 4, "half2": 4, "__nv_bfloat162": 4, "nv_bfloat162": 4}


class _Unreadable(Exception):
    """A type this reader cannot turn into a parameter kind (reported per function)."""


@dataclass(frozen=True, slots=True)
class _CxxKernel:
    """A C++ (mangled) kernel kept as tokens until a name expression instantiates it."""

    name: str
    template: tuple[str, ...]  # template parameter names, in order
    params: tuple[tuple[Token, ...], ...]
    launch: LaunchMeta
    qualified: str = ""  # with its namespaces: "ns::kernel"


@dataclass(frozen=True, slots=True)
class CDeclarations:
    """What a CUDA C++ source declares with C linkage, plus its C++ kernels.

    ``problems`` maps an ``extern "C"`` function whose types could not be read
    to its role (``"kernel"``, ``"export"``, ``"import"``) and the reason, so
    a caller can demand an explicit signature for it (:meth:`error`).
    """

    source: str
    kernels: Mapping[str, Signature]
    device_functions: Mapping[str, Signature]
    imports: Mapping[str, Signature]
    problems: Mapping[str, tuple[str, str]]
    structs: Mapping[str, ParamType | str] = field(repr=False)
    cxx_kernels: tuple[_CxxKernel, ...] = field(repr=False)

    def error(self, name: str) -> FormatError:
        """The error for ``name`` (in :attr:`problems`), saying how to supply its signature."""
        return FormatError(f"cannot read the signature of {name!r}: {self.problems[name][1]}; "
                           f"pass signatures={{{name!r}: ...}}", source=self.source)

    def cxx_names(self) -> list[str]:
        """Qualified names of the non-template C++ kernels declared once (an overload set needs a
        name expression naming its parameter types)."""
        names = [k.qualified for k in self.cxx_kernels]
        return [k.qualified for k in self.cxx_kernels if not k.template and names.count(k.qualified) == 1]

    def for_expression(self, expression: str, lowered: str) -> Signature:
        """The signature of the C++ kernel a name expression (``"ns::k<float, 4>"``) names.

        Template type arguments are substituted into the parameter types.
        Raises :class:`FormatError` when the kernel is not found, is
        overloaded, or its types cannot be read.
        """
        tokens = [t for t, _ in _tokenize(expression)[0]]
        angle = tokens.index("<") if "<" in tokens else len(tokens)
        name = tokens[angle - 1] if angle else ""
        qualified = "".join(tokens[:angle]).lstrip(":")
        candidates = [k for k in self.cxx_kernels if k.qualified == qualified] or \
            [k for k in self.cxx_kernels if k.name == name]
        try:
            if len(candidates) != 1:
                raise _Unreadable(f"found {len(candidates)} __global__ functions named {name!r}")
            kernel = candidates[0]
            args = _split_commas([(t, 0) for t in tokens[angle + 1:-1]]) if angle < len(tokens) else []
            env = dict(self.structs)
            for tparam, arg in zip(kernel.template, args, strict=False):
                words = [t for t, _ in arg]
                try:
                    env[tparam] = _parse_type(words, env)
                except _Unreadable as exc:  # fine for a non-type argument, which no type names
                    env[tparam] = f"template argument {' '.join(words)!r}: {exc}"
            params = tuple(_parse_param(p, i, env) for i, p in enumerate(kernel.params))
            return Signature(lowered, params, launch=kernel.launch)
        except (_Unreadable, ValueError) as exc:
            raise FormatError(f"cannot read the signature of name expression {expression!r}: {exc}; "
                              f"pass signatures={{{expression!r}: ...}}", source=self.source) from None


def read_c_source(text: str, source: str = "<source>") -> CDeclarations:
    """Read the ``extern "C"`` kernels and device functions of CUDA C++ ``text``."""
    tokens, defines = _tokenize(text)
    reader = _Reader(tokens, defines, source)
    reader.block(extern_c=False, end=len(tokens))
    imports = {n: sig for n, sig in reader.imports.items() if n not in reader.exports}  # defined below
    return CDeclarations(
        source, MappingProxyType(reader.kernels), MappingProxyType(reader.exports),
        MappingProxyType(imports), MappingProxyType(reader.problems),
        MappingProxyType(reader.structs), tuple(reader.cxx))


def _tokenize(text: str) -> tuple[list[Token], dict[str, str]]:
    tokens: list[Token] = []
    defines: dict[str, str] = {}
    line = 1
    for match in _TOKEN.finditer(text):
        kind, value = match.lastgroup, match.group()
        if kind == "pp" and (define := _DEFINE.match(value.replace("\\\n", " "))):
            defines[define.group(1)] = define.group(2).strip()
        elif kind not in ("ws", "comment", "pp"):
            tokens.append((value, line))
        line += value.count("\n")
    return tokens, defines


def _split_commas(tokens: list[Token]) -> list[list[Token]]:
    """Split at commas outside (), [], {} and <>."""
    parts: list[list[Token]] = [[]]
    depth = 0
    for token in tokens:
        text = token[0]
        depth += (text in "([{<") - (text in ")]}>") if len(text) == 1 else 0
        if text == "," and depth == 0:
            parts.append([])
        else:
            parts[-1].append(token)
    return [p for p in parts if p]


def _closing(tokens: list[Token], start: int, end: int) -> int:
    """Index of the bracket closing the one at ``start`` (or ``end`` when unbalanced)."""
    opening = tokens[start][0]
    closing = {"(": ")", "[": "]", "{": "}", "<": ">", "[[": "]]"}[opening]
    depth = 0
    for i in range(start, end):
        text = tokens[i][0]
        if text == opening:
            depth += 1
        elif text == closing:
            depth -= 1
            if depth == 0:
                return i
    return end


class _Reader:
    """Walks declarations: blocks of ``extern "C"``/namespaces, structs, typedefs, functions."""

    def __init__(self, tokens: list[Token], defines: dict[str, str], source: str):
        self.tokens, self.defines, self.source = tokens, defines, source
        self.kernels: dict[str, Signature] = {}
        self.exports: dict[str, Signature] = {}
        self.imports: dict[str, Signature] = {}
        self.problems: dict[str, tuple[str, str]] = {}
        self.structs: dict[str, ParamType | str] = {}  # a str: why the struct is unreadable
        self.cxx: list[_CxxKernel] = []

    def block(self, extern_c: bool, end: int, start: int = 0, scope: str = "") -> None:
        i = start
        while i < end:
            j = i
            while j < end and self.tokens[j][0] not in (";", "{", "}"):
                j = _closing(self.tokens, j, end) + 1 if self.tokens[j][0] in ("(", "[[") else j + 1
            head = self.tokens[i:j]
            if j >= end or self.tokens[j][0] in (";", "}"):
                self.statement(head, extern_c, None, scope)
                i = j + 1
                continue
            close = _closing(self.tokens, j, end)
            words = [t for t, _ in head]
            if words in (["extern", '"C"'], ["extern", '"C++"']) or "namespace" in words[:2]:
                inner = "".join(words[words.index("namespace") + 1:]) if "namespace" in words[:2] else ""
                self.block(extern_c or words == ["extern", '"C"'], close, j + 1,
                           f"{scope}::{inner}" if scope and inner else scope or inner)
                i = close + 1
            elif words[:1] == ["enum"]:
                self.enum(words)
                i = close + 1
            elif _struct_head(words):
                semi = close + 1
                while semi < end and self.tokens[semi][0] != ";":
                    semi += 1
                self.struct(words, self.tokens[j + 1:close], self.tokens[close + 1:semi])
                i = semi + 1
            else:
                self.statement(head, extern_c, self.tokens[j + 1:close], scope)
                i = close + 1

    def struct(self, head: list[str], body: list[Token], declarators: list[Token]) -> None:
        align = self.align_attribute(head)
        names = [w for w in head if re.fullmatch(r"[A-Za-z_]\w*", w) and w not in
                 ("typedef", "struct", "union", "class", "__align__", "alignas")]
        aliases = [t for t, _ in declarators if re.fullmatch(r"[A-Za-z_]\w*", t)]
        title = (names or aliases or ["<anonymous>"])[0]
        try:
            if "union" in head:
                raise _Unreadable(f"union {title!r} is not supported")
            kind: ParamType | str = Struct(title, tuple(self.fields(body)))
            if align:
                size, natural = memory_layout(kind)
                align = max(align, natural)
                kind = Opaque(-(-size // align) * align, align)
        except _Unreadable as exc:
            kind = f"struct {title!r} cannot be passed: {exc}"
        for name in names[:1] + (aliases if "typedef" in head else []):
            self.structs[name] = kind

    def enum(self, head: list[str]) -> None:
        """An enum passes as its underlying type (``int`` unless ``enum E : T``)."""
        names = [w for w in head[1:] if w not in ("class", "struct", ":")]
        if names:
            underlying = head[head.index(":") + 1:] if ":" in head else ["int"]
            try:
                self.structs[names[0]] = _parse_type(underlying, self.structs)
            except _Unreadable as exc:
                self.structs[names[0]] = f"enum {names[0]!r}: {exc}"

    def fields(self, body: list[Token]) -> list[StructField]:
        fields: list[StructField] = []
        i = 0
        while i < len(body):
            j = i
            while j < len(body) and body[j][0] not in (";", "{"):
                j += 1
            member = body[i:j]
            if j < len(body) and body[j][0] == "{":
                raise _Unreadable("nested struct definitions and member functions are not supported")
            i = j + 1
            if not member or member[0][0] in ("static", "using", "typedef", "template"):
                continue
            if any(t == "(" for t, _ in member):
                raise _Unreadable("member functions in a struct passed by value are not supported")
            parts = _split_commas(member)
            if not parts:
                continue
            first = [t for t, _ in parts[0]]
            spec = first[:next((k for k, w in enumerate(first) if w in ("*", "&", "[")), len(first))]
            spec = spec[:-1] if _has_name([(w, 0) for w in spec]) else spec
            for k, part in enumerate(parts):
                words = (spec if k else []) + [t for t, _ in part]
                if ":" in words:
                    raise _Unreadable("bit-fields are not supported")
                name, kind = _declarator(words, self.structs)
                fields.append(StructField(name or f"_{len(fields)}", kind))
        return fields

    def align_attribute(self, head: list[str]) -> int:
        for i, word in enumerate(head[:-3]):
            if word in ("__align__", "alignas") and head[i + 1] == "(":
                value = self.integer([(head[i + 2], 0)])
                return value or 0
        return 0

    def statement(self, head: list[Token], extern_c: bool, body: list[Token] | None, scope: str = "") -> None:
        words = [t for t, _ in head]
        if words[:1] == ["typedef"] and "(" not in words:
            try:
                name, kind = _declarator(words[1:], self.structs)
            except _Unreadable as exc:
                name, kind = words[-1], f"typedef {words[-1]!r}: {exc}"
            if name:
                self.structs[name] = kind
            return
        template: tuple[str, ...] = ()
        if words[:2] == ["template", "<"]:
            close = _closing(head, 1, len(head))
            template = tuple(p[-1][0] for p in _split_commas(head[2:close]))
            head, words = head[close + 1:], words[close + 1:]
        if "=" in words and "(" not in words:  # constexpr int kBlock = 128;
            equals = words.index("=")
            if equals and re.fullmatch(r"[A-Za-z_]\w*", words[equals - 1]):
                self.defines[words[equals - 1]] = " ".join(words[equals + 1:])
            return
        extern_c = extern_c or words[:2] == ["extern", '"C"']
        launch, head = self.attributes(head)
        words = [t for t, _ in head]
        if "__global__" not in words and "__device__" not in words:
            return
        paren = next((k for k, w in enumerate(words) if w == "(" and k), None)
        if paren is None or not re.fullmatch(r"[A-Za-z_]\w*", words[paren - 1]):
            return
        name = words[paren - 1]
        params = _split_commas(head[paren + 1:_closing(head, paren, len(head))])
        if len(params) == 1 and [t for t, _ in params[0]] == ["void"]:
            params = []
        kernel = "__global__" in words
        if not extern_c:
            if kernel:
                self.cxx.append(_CxxKernel(name, template, tuple(tuple(p) for p in params), launch,
                                           f"{scope}::{name}" if scope else name))
            return
        try:
            lowered = tuple(_parse_param(p, i, self.structs) for i, p in enumerate(params))
            returns = None
            if not kernel:
                ret = [w for w in words[:paren - 1] if w not in _SPECIFIERS]
                returns = None if ret == ["void"] else _parse_type(ret, self.structs)
            sig = Signature(name, lowered, launch=launch, kind="kernel" if kernel else "device",
                            returns=returns)
        except (_Unreadable, ValueError) as exc:  # ValueError: the Signature refuses (duplicate names)
            role = "kernel" if kernel else "import" if body is None else "export"
            self.problems[name] = (role, f"line {head[0][1]}: {exc}")
            return
        table = self.kernels if kernel else self.imports if body is None else self.exports
        table[name] = sig

    def attributes(self, head: list[Token]) -> tuple[LaunchMeta, list[Token]]:
        """Strip attributes; ``__launch_bounds__`` and ``__cluster_dims__`` become launch metadata."""
        kept: list[Token] = []
        meta: dict[str, object] = {}
        i = 0
        while i < len(head):
            text = head[i][0]
            if text in _ATTRIBUTES and i + 1 < len(head) and head[i + 1][0] == "(":
                close = _closing(head, i + 1, len(head))
                args = [self.integer(a) for a in _split_commas(head[i + 2:close])]
                if text == "__launch_bounds__" and args:
                    meta["maxntid"] = (args[0], 1, 1) if args[0] else None
                    meta["minnctapersm"] = args[1] if len(args) > 1 else None
                elif text == "__cluster_dims__" and args and all(args):
                    meta["cluster"] = (*args, 1, 1)[:3]
                i = close + 1
            elif text == "[[":
                i = _closing(head, i, len(head)) + 1
            else:
                kept.append(head[i])
                i += 1
        return LaunchMeta(**meta), kept  # type: ignore[arg-type]

    def integer(self, tokens: list[Token]) -> int | None:
        """Value of an integer constant expression of literals and ``#define``d names, else None."""
        words = [t for t, _ in tokens]
        for _ in range(8):  # macros naming macros, to a bounded depth
            words = [w for word in words for w in self.defines.get(word, word).split()]
        text = re.sub(r"(?<=[0-9a-fA-F])[uUlL]+\b", "", " ".join(words)).replace("/", "//")
        try:
            return _evaluate(ast.parse(text, mode="eval").body)
        except (SyntaxError, ValueError, ZeroDivisionError, RecursionError, MemoryError):
            return None


def _evaluate(node: ast.expr) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)):
        left, right = _evaluate(node.left), _evaluate(node.right)
        ops = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__,
               ast.FloorDiv: int.__floordiv__}
        return ops[type(node.op)](left, right)
    raise ValueError("not an integer constant expression")


def _struct_head(words: list[str]) -> bool:
    rest = words[1:] if words[:1] == ["typedef"] else words
    calls = [rest[k - 1] for k in range(1, len(rest)) if rest[k] == "("]
    return rest[:1] in (["struct"], ["union"], ["class"]) and all(c in _ATTRIBUTES for c in calls)


def _has_name(tokens: list[Token]) -> bool:
    """Whether a parameter's last token is its name (not part of its type)."""
    words = [t for t, _ in tokens]
    return (bool(re.fullmatch(r"[A-Za-z_]\w*", words[-1] if words else ""))
            and words[-1] not in _INT_WORDS | {"float", "double", "bool", "void", "const"}
            and any(w not in _IGNORED_QUALIFIERS | {"const"} for w in words[:-1]))


def _declarator(words: list[str], env: Mapping[str, ParamType | str]) -> tuple[str | None, ParamType]:
    """``const float * x [4]`` -> ("x", its type); arrays in structs become tuples."""
    dims: list[int] = []
    while words and words[-1] == "]":
        if "[" not in words:
            raise _Unreadable(f"unbalanced brackets in {' '.join(words)!r}")
        open_ = len(words) - 1 - words[::-1].index("[")
        inner = words[open_ + 1:-1]
        dims.insert(0, int(inner[0]) if len(inner) == 1 and inner[0].isdecimal() else -1)
        words = words[:open_]
    tokens = [(w, 0) for w in words]
    name = words[-1] if _has_name(tokens) else None
    kind = _parse_type(words[:-1] if name else words, env)
    for dim in reversed(dims):
        if dim < 0:
            raise _Unreadable(f"array {name!r} needs a literal size")
        kind = Tuple((kind,) * dim)
    return name, kind


def _parse_param(tokens: tuple[Token, ...] | list[Token], index: int,
                 env: Mapping[str, ParamType | str]) -> Param:
    words = [t for t, _ in tokens]
    if "=" in words:
        words = words[:words.index("=")]
    pointers = 0
    while words and words[-1] == "]" and "[" in words:  # an array parameter decays to a pointer
        words = words[:len(words) - 1 - words[::-1].index("[")]
        pointers += 1
    named = _has_name([(w, 0) for w in words])
    name = words[-1] if named else f"arg{index}"
    kind = _parse_type((words[:-1] if named else words) + ["*"] * pointers, env)
    return Param(name, kind)


def _parse_type(words: list[str], env: Mapping[str, ParamType | str]) -> ParamType:
    """``const float * const *`` -> Pointer(Pointer(Scalar(f32), const), mutable);
    ``float * __restrict__`` -> Pointer(Scalar(f32), noalias="restrict")."""
    words = [w for w in words if w not in _IGNORED_QUALIFIERS - _RESTRICT]
    segments: list[list[str]] = [[]]
    for word in words:
        if word in ("*", "&"):
            segments.append([])
        else:
            segments[-1].append(word)
    base_words = [w for w in segments[0] if w != "const" and w not in _RESTRICT]
    try:
        kind = _base_type(base_words, env)
    except _Unreadable:
        if len(segments) == 1:
            raise
        kind = None  # a pointer to a type this reader cannot lay out is still a pointer, to opaque data
    for level in range(1, len(segments)):
        qualifiers = set(segments[level])
        if qualifiers - _RESTRICT - {"const"}:
            raise _Unreadable(f"cannot read type {' '.join(words)!r}")
        kind = Pointer(kind, mutable="const" not in segments[level - 1],
                       noalias="restrict" if qualifiers & _RESTRICT else "")
    if kind is None:
        raise _Unreadable("'void' is not a parameter type")
    return kind


def _base_type(words: list[str], env: Mapping[str, ParamType | str]) -> ParamType | None:
    text = " ".join(words).replace(" :: ", "::")
    unqualified: list[str] = []
    for word in words:  # std::size_t -> size_t: the namespace does not change the type
        if word == "::":
            del unqualified[-1:]
        else:
            unqualified.append(word)
    words = unqualified
    if words == ["void"]:
        return None
    if words and set(words) <= _INT_WORDS:
        return Scalar(dtype(_integer_name(words)))
    if len(words) == 1:
        word = words[0]
        if word in env:
            found = env[word]
            if isinstance(found, str):
                raise _Unreadable(found)
            return found
        if word in _NAMED_SCALARS:
            return Scalar(dtype(_NAMED_SCALARS[word]))
        if word in _PAIRS:
            return Opaque(_PAIRS[word], _PAIRS[word])
        if vector := _VECTOR.match(word):
            size, lanes = _VECTOR_BASES[vector.group(1)], int(vector.group(2))
            return Opaque(size * lanes, min(size * lanes, 16) if lanes in (2, 4) else size)
    if words == ["long", "double"]:
        raise _Unreadable("'long double' is not a device type")
    raise _Unreadable(f"unknown type {text!r} (not a C type or a type declared in this source)")


def _integer_name(words: list[str]) -> str:
    unsigned = "unsigned" in words
    if "char" in words:
        width = 8
    elif "short" in words:
        width = 16
    elif "long" in words:
        width = 64  # LP64: long is 64-bit on the device as on the Linux host
    else:
        width = 32
    return f"{'u' if unsigned else 'i'}{width}"

