"""PTX text reader: module header, functions with their parameters, and globals.

Only the module level is parsed (PTX ISA 9.x, sections 5 "State Spaces, Types
and Variables", 7 "Abstracting the ABI" and 11 "Directives"); function bodies
are kept as text for the CPU emulator.  One linear pass: the cursor
(``_ptx_lex``) blanks comments and yields tokens, the functions below walk the
module scope, and brace matching skips over bodies.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._ptx_lex import Cursor
from .errors import FormatError

__all__ = ["PtxFunction", "PtxGlobal", "PtxModule", "PtxParam", "param_offsets", "read_ptx"]

LINKAGES = ("visible", "extern", "weak", "common")
VARIABLE_SPACES = ("global", "shared", "const", "local")

# Size in bytes of each PTX fundamental type (PTX ISA 5.2.2); opaque handles are 64-bit.
TYPE_SIZES = {
    "pred": 1, "b8": 1, "s8": 1, "u8": 1,
    "b16": 2, "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
    "b32": 4, "s32": 4, "u32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4, "tf32": 4,
    "b64": 8, "s64": 8, "u64": 8, "f64": 8, "b128": 16,
    "e4m3x2": 2, "e5m2x2": 2,
    "texref": 8, "samplerref": 8, "surfref": 8,
}
_VECTORS = {"v2": 2, "v4": 4, "v8": 8}
_INT_ATTRS = {"reqntid", "maxntid", "minnctapersm", "reqnctapercluster"}


@dataclass(frozen=True, slots=True)
class PtxParam:
    """One ``.param`` (or old-style ``.reg``) parameter of an entry or function.

    ``type`` is the fundamental type without its dot (``u64``); a vector type
    reads ``v4.f32``.  For a ``.ptr`` kernel parameter ``align`` is the
    alignment of the memory pointed to (PTX ISA 5.1.6.1), not of the parameter.
    """

    name: str
    type: str
    align: int | None
    array: int | None
    ptr: bool = False
    state_space: str = "param"

    @property
    def nbytes(self) -> int:
        """Bytes the parameter occupies in the parameter space."""
        vector, _, base = self.type.rpartition(".")
        return TYPE_SIZES[base] * _VECTORS.get(vector, 1) * (1 if self.array is None else self.array)

    @property
    def param_align(self) -> int:
        """Alignment in the parameter space: ``.align`` if given (not for ``.ptr``), else natural."""
        if self.align is not None and not self.ptr:
            return self.align
        vector, _, base = self.type.rpartition(".")
        return TYPE_SIZES[base] * _VECTORS.get(vector, 1)


def param_offsets(params: tuple[PtxParam, ...]) -> tuple[int, ...]:
    """Offsets of ``params`` packed in order, each at the next multiple of its alignment."""
    offsets, end = [], 0
    for param in params:
        end = -(-end // param.param_align) * param.param_align
        offsets.append(end)
        end += param.nbytes
    return tuple(offsets)


@dataclass(frozen=True, slots=True)
class PtxFunction:
    """An ``.entry`` (kernel) or ``.func`` (device function), defined or only declared.

    ``body`` is the text between the outer braces with comments blanked out,
    ``None`` for a declaration; ``body_line`` is the 1-based line of its ``{`` (of the
    ``;`` ending a declaration).
    """

    name: str
    kind: str
    linkage: str
    params: tuple[PtxParam, ...]
    returns: tuple[PtxParam, ...]
    reqntid: tuple[int, ...] | None
    maxntid: tuple[int, ...] | None
    minnctapersm: int | None
    reqnctapercluster: tuple[int, ...] | None
    body: str | None
    body_line: int

    @property
    def offsets(self) -> tuple[int, ...]:
        """Byte offset of each parameter in the parameter buffer."""
        return param_offsets(self.params)

    @property
    def size(self) -> int:
        """Parameter buffer size: the end of the last parameter (not rounded up)."""
        if not self.params:
            return 0
        return self.offsets[-1] + self.params[-1].nbytes


@dataclass(frozen=True, slots=True)
class PtxGlobal:
    """A module-scope variable; a dimension of 0 stands for ``[]`` (unsized)."""

    name: str
    state_space: str
    type: str
    align: int | None
    array: tuple[int, ...] | None
    linkage: str
    initializer: str | None


@dataclass(frozen=True, slots=True)
class PtxModule:
    """A whole PTX module; ``functions`` holds one record per name, definitions preferred."""

    version: tuple[int, int]
    target: tuple[str, ...]
    address_size: int
    functions: tuple[PtxFunction, ...]
    globals: tuple[PtxGlobal, ...]
    source: str

    @property
    def entries(self) -> tuple[PtxFunction, ...]:
        return tuple(f for f in self.functions if f.kind == "entry")

    def function(self, name: str) -> PtxFunction:
        """The entry or function called ``name`` (``KeyError`` if there is none)."""
        for function in self.functions:
            if function.name == name:
                return function
        raise KeyError(f"{self.source}: no .entry or .func named {name!r}")


def read_ptx(text: str | bytes, source: str = "<ptx>") -> PtxModule:
    """Read a PTX module's header, functions and globals.

    Parameters
    ----------
    text
        PTX text, or its UTF-8 bytes (trailing NULs, as some tools emit, are ignored).
    source
        Name used in error messages (a file path, or ``"<ptx>"``).

    Raises
    ------
    FormatError
        The text is not PTX this reader understands; ``where`` is ``"line N"``.
    """
    data = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else bytes(text)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(f"PTX must be UTF-8 text (got byte 0x{exc.object[exc.start]:02x})",
                          source=source, where=f"byte {exc.start}") from None
    return _module(Cursor(data.rstrip(b"\0"), source))


def _module(r: Cursor) -> PtxModule:
    version: tuple[int, int] | None = None
    target: tuple[str, ...] | None = None
    address_size = 32  # PTX ISA 11.1.3: the default when .address_size is absent
    functions: dict[str, PtxFunction] = {}
    variables: list[PtxGlobal] = []
    while True:
        kind, text, pos = r.next()
        if kind == "eof":
            break
        if text == ".version":
            version = _version(r)
        elif text == ".target":
            target = _target(r)
        elif text == ".address_size":
            address_size = r.integer("the .address_size value")
            if address_size not in (32, 64):
                r.fail(f".address_size must be 32 or 64 (got {address_size})", pos)
        elif text == ".file":
            _skip_file(r)
        elif text in (".pragma", ".alias"):
            r.skip_until((";",))
        elif text == ".section":
            r.skip_braces(r.skip_until(("{",))[1])
        else:
            linkage = ""
            if kind == "dir" and text[1:] in LINKAGES:
                linkage = text[1:]
                kind, text, pos = r.next()
            if text in (".entry", ".func"):
                _add_function(r, functions, _function(r, text[1:], linkage), pos)
            elif kind == "dir" and text[1:] in VARIABLE_SPACES:
                variables += _variables(r, text[1:], linkage)
            else:
                r.fail(f"expected a module-scope directive such as .entry, .func or .global (got {text!r})",
                       pos)
    for directive, value in ((".version", version), (".target", target)):
        if value is None:
            r.fail(f"a PTX module needs a {directive} directive (got none)", 0)
    return PtxModule(version, target, address_size, tuple(functions.values()), tuple(variables), r.source)


def _version(r: Cursor) -> tuple[int, int]:
    kind, text, pos = r.next()
    major, dot, minor = text.partition(".")
    if kind != "num" or not dot or not major.isdigit() or not minor.isdigit() or len(text) > 9:
        r.fail(f".version must read MAJOR.MINOR (got {text[:24]!r})", pos)
    return int(major), int(minor)


def _target(r: Cursor) -> tuple[str, ...]:
    names = [r.expect("id", "a .target name such as sm_90")]
    while r.accept(","):
        names.append(r.expect("id", "a .target name after ','"))
    return tuple(names)


def _skip_file(r: Cursor) -> None:
    """``.file N "name" [, timestamp, size]`` (PTX ISA 11.5.3): debug data, not modelled."""
    r.integer("the .file index")
    r.expect("str", "a quoted file name")
    while r.accept(","):
        r.integer("a .file timestamp or size")


def _add_function(r: Cursor, functions: dict[str, PtxFunction], new: PtxFunction, pos: int) -> None:
    """Keep one record per name: a definition replaces an earlier declaration."""
    old = functions.get(new.name)
    if old is not None and old.kind != new.kind:
        r.fail(f"{new.name} is declared both as .{old.kind} and as .{new.kind}", pos)
    if old is not None and old.body is not None and new.body is not None:
        r.fail(f"{new.name} is defined twice", pos)
    if old is None or (old.body is None and new.body is not None):
        functions[new.name] = new


def _function(r: Cursor, kind: str, linkage: str) -> PtxFunction:
    returns: tuple[PtxParam, ...] = ()
    if kind == "func" and r.accept("("):
        returns = _param_list(r)
    name = r.expect("id", f"the name of the .{kind}")
    params = _param_list(r) if r.accept("(") else ()
    numbers: dict[str, tuple[int, ...]] = {}
    while True:
        tkind, text, pos = r.next()
        if text in (";", "{"):
            break
        if tkind != "dir":
            r.fail(f"{name}: expected a directive, '{{' or ';' after the parameters (got {text!r})", pos)
        if text == ".pragma":
            r.skip_until((";",))
            continue
        values = []
        if r.peek()[0] == "num":
            values.append(r.integer(f"a {text} value"))
            while r.accept(","):
                values.append(r.integer(f"a {text} value"))
        if text[1:] in _INT_ATTRS:
            limit = 1 if text == ".minnctapersm" else 3
            if not 1 <= len(values) <= limit:
                r.fail(f"{name}: {text} takes 1 to {limit} integers (got {len(values)})", pos)
            if 0 in values:  # a launch can never meet it (PTX ISA 11.4: each value is at least 1)
                r.fail(f"{name}: {text} values must be >= 1 (got {', '.join(map(str, values))})", pos)
            numbers[text[1:]] = tuple(values)
    body = None
    if text == "{":
        body = r.text[pos + 1:r.skip_braces(pos)]
    minnctapersm = numbers.get("minnctapersm")
    return PtxFunction(name, kind, linkage, params, returns, numbers.get("reqntid"), numbers.get("maxntid"),
                       None if minnctapersm is None else minnctapersm[0], numbers.get("reqnctapercluster"),
                       body, r.line_of(pos))


def _param_list(r: Cursor) -> tuple[PtxParam, ...]:
    """Parameters after an opening '(' up to and including the closing ')'."""
    params: list[PtxParam] = []
    if r.accept(")"):
        return ()
    while True:
        params.append(_param(r))
        _, text, pos = r.next()
        if text == ")":
            return tuple(params)
        if text != ",":
            r.fail(f"expected ',' or ')' after parameter {params[-1].name!r} (got {text!r})", pos)


def _param(r: Cursor) -> PtxParam:
    _, text, pos = r.next()
    if text not in (".param", ".reg"):
        r.fail(f"a parameter starts with .param or .reg (got {text!r})", pos)
    align, ptr, type_, (kind, name, pos) = _attributes(r, "parameter", allow_ptr=True)
    if kind != "id":
        r.fail(f"expected a parameter name after its type .{type_} (got {name!r})", pos)
    array = None
    if r.accept("["):
        array = r.integer(f"the element count of parameter {name!r}")
        r.expect("]", "']'")
    return PtxParam(name, type_, align, array, ptr, text[1:])


def _attributes(r: Cursor, what: str, allow_ptr: bool) -> tuple[int | None, bool, str, tuple[str, str, int]]:
    """``.align``, ``.ptr``, vector and type attributes in any order; returns them and the next token."""
    align, ptr, vector, type_ = None, False, "", None
    while True:
        kind, text, pos = r.next()
        word = text[1:]
        if kind != "dir":
            break
        if word == "align":
            align = r.integer("the .align value")
            if align <= 0 or align & (align - 1):
                r.fail(f".align must be a power of two (got {align})", pos)
        elif word == "ptr" and allow_ptr:
            ptr = True
        elif word in VARIABLE_SPACES and ptr:
            pass  # the pointee's state space, PTX ISA 5.1.6.1; not needed for the layout
        elif word == "attribute":
            r.expect("(", "'(' after .attribute")
            r.skip_until((")",))
        elif word in _VECTORS and not vector:
            vector = word
        elif word in TYPE_SIZES and type_ is None:
            type_ = word
        else:
            r.fail(f"unexpected {text} in a {what} declaration", pos)
    if type_ is None:
        r.fail(f"a {what} declaration needs a type such as .u64 (got {text!r})", pos)
    return align, ptr, f"{vector}.{type_}" if vector else type_, (kind, text, pos)


def _variables(r: Cursor, space: str, linkage: str) -> list[PtxGlobal]:
    """``.global .align 4 .b8 a[16] = {...}, b;`` -> one record per declared name."""
    align, _, type_, (kind, name, pos) = _attributes(r, f".{space} variable", allow_ptr=False)
    declared = []
    while True:
        if kind != "id":
            r.fail(f"expected a variable name after .{space} .{type_} (got {name!r})", pos)
        dims: list[int] = []
        while r.accept("["):
            if r.accept("]"):
                dims.append(0)
            else:
                dims.append(r.integer(f"an array size of {name!r}"))
                r.expect("]", "']'")
        initializer = None
        if r.accept("="):
            start = r.peek()[2]
            stop, stop_pos = r.skip_until((",", ";"))
            initializer = r.text[start:stop_pos].strip()
            if not initializer:
                r.fail(f"variable {name!r} has '=' but no initializer", stop_pos)
        else:
            _, stop, stop_pos = r.next()
            if stop not in (",", ";"):
                r.fail(f"expected '=', ',' or ';' after variable {name!r} (got {stop!r})", stop_pos)
        declared.append(PtxGlobal(name, space, type_, align, tuple(dims) or None, linkage, initializer))
        if stop == ";":
            return declared
        kind, name, pos = r.next()
