"""cuTile kernel symbols (calling conventions t1 and t2) demangled into a :class:`Signature`.

A cuTile Python kernel exported ahead of time is named after its whole
signature (docs/conventions.md, "cutile"), e.g. ``vadd_Kt1_A1f32_1l0_A1f32_1l0``::

    symbol     := name "_K" convention ("_" constraint)*
    convention := "t1" | "t2"
    constraint := "A" array | "L" alias_ids ["i"] "A" array | "T" count constraint{count}
                | "S" dtype | "B" ("0"|"1") | "I" int | "F" hex16
    array      := ndim dtype ("_" axis_mask predicates)* ["_" ["p" int] alias_ids ["i"] ["u"|"w"]]
    predicates := ["s" int] ["i" int] ["t" int] ["v" int] ["l" int]
    alias_ids  := ("g" hex)*          int := ["_"] decimal   ("_" is a minus sign)

``axis_mask`` is hex, bit k naming axis k; ``s`` static shape, ``i`` shape
divisible by, ``t`` static stride, ``v`` stride divisible by, ``l`` stride
lower bound; ``p`` base address divisible by (bytes), ``g`` alias group ids,
``i`` may alias internally, ``u`` uint32 index, ``w`` int64 index.  The checks
mirror ``cuda.tile.compilation.demangle_kernel_name`` (the reference it is
tested against), so a symbol one rejects the other rejects too.  Convention
v3 constraints (dataclasses, pointers, strings...) are not accepted by t1/t2.

The dtypes ``tf32`` and ``f8m0fnu`` have no ptxbridge dtype (no DLPack code
ptxbridge knows): demangling a symbol that uses them raises FormatError.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

from .dtypes import DTYPES, DType
from .errors import AbiMismatchError, FormatError
from .kinds import MAX_NDIM, Constant, ParamType, Scalar, TileArray, TileList, Tuple
from .signature import Convention, Param, Signature

__all__ = ["demangle", "is_cutile_symbol", "CUTILE_DTYPES"]

CUTILE_DTYPES = {
    "b8": "bool", "u8": "u8", "u16": "u16", "u32": "u32", "u64": "u64",
    "i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64",
    "f16": "f16", "f32": "f32", "f64": "f64", "bf16": "bf16",
    "f8m3fn": "f8e4m3fn", "f8m2": "f8e5m2",
}
_UNREPRESENTABLE = {"tf32": "f32", "f8m0fnu": "u8"}  # stand-ins used only to keep checking the grammar
_MAX_DEPTH = 64
_MAX_DIGITS = 40
_PREDICATES = (  # letter, TileArray attribute, default, is a divisibility (must be > 1)
    ("s", "static_shape", None, False),
    ("i", "shape_divisible_by", 1, True),
    ("t", "static_stride", None, False),
    ("v", "stride_divisible_by", 1, True),
    ("l", "stride_lower_bound", None, False),
)


@dataclass(slots=True)
class _Reader:
    """A cursor over one symbol, with the facts that span parameters (alias groups)."""

    symbol: str
    pos: int
    last_group: int = -1
    group_users: dict[int, list[str]] = field(default_factory=dict)
    unrepresentable: list[tuple[int, str]] = field(default_factory=list)
    depth: int = 0

    def fail(self, message: str, at: int | None = None) -> FormatError:
        at = self.pos if at is None else at
        return FormatError(f"{message} (got {self.symbol[at:at + 20]!r})", source=self.symbol,
                           where=f"char {at}")

    def take(self, pattern: str) -> str | None:
        m = re.compile(pattern).match(self.symbol, self.pos)
        if m is None:
            return None
        self.pos = m.end()
        return m.group()

    def need(self, pattern: str, what: str) -> str:
        found = self.take(pattern)
        if found is None:
            raise self.fail(f"expected {what}")
        return found

    def number(self, pattern: str, what: str, base: int = 10) -> int:
        """A run of digits, bounded so that no input makes a huge integer."""
        start = self.pos
        digits = self.need(pattern, what)
        if len(digits) > _MAX_DIGITS:
            raise self.fail(f"{what} has more than {_MAX_DIGITS} digits", start)
        return int(digits, base)

    def integer(self, what: str) -> int:
        negative = self.take("_") is not None
        value = self.number("[0-9]+", what)
        return -value if negative else value

    def divisor(self, what: str) -> int:
        start = self.pos
        value = self.integer(what)
        if value <= 1:
            raise self.fail(f"{what} must be greater than 1", start)
        return value

    def dtype(self) -> DType:
        start = self.pos
        code = self.need("[a-z0-9]+", f"a dtype ({', '.join([*CUTILE_DTYPES, *_UNREPRESENTABLE])})")
        if code in _UNREPRESENTABLE:
            self.unrepresentable.append((start, code))
            return DTYPES[_UNREPRESENTABLE[code]]
        if code not in CUTILE_DTYPES:
            raise self.fail("unknown cuTile dtype", start)
        return DTYPES[CUTILE_DTYPES[code]]

    def alias_ids(self, user: str) -> int:
        """``(g<hex>)*`` as a bit mask; ids are first-use ordered and strictly increasing."""
        mask, previous = 0, -1
        while self.take("g") is not None:
            start = self.pos
            group = self.number("[0-9a-f]+", "a hex alias group id", 16)
            if self.symbol[start] == "0" and self.pos - start > 1:
                raise self.fail("alias group id has a leading zero", start)
            if group > self.last_group + 1 or group <= previous:
                raise self.fail("alias group ids must be numbered in order of first use, increasing",
                                start)
            self.last_group = max(self.last_group, group)
            previous = group
            mask |= 1 << group
            self.group_users.setdefault(group, []).append(user)
        return mask


def _axis_promises(r: _Reader, ndim: int) -> dict[str, list[int | None]]:
    values: dict[str, list[int | None]] = {attr: [default] * ndim for _, attr, default, _ in _PREDICATES}
    while re.compile("_[0-9a-f]").match(r.symbol, r.pos):
        start = r.pos
        r.pos += 1
        mask = r.number("[0-9a-f]+", "an axis mask", 16)
        if mask == 0 or mask.bit_length() > ndim:
            raise r.fail(f"axis mask must name axes of a {ndim}-d array", start)
        for letter, attr, default, is_divisor in _PREDICATES:
            if r.take(letter) is None:
                continue
            value = r.divisor(f"'{letter}' divisor") if is_divisor else r.integer(f"'{letter}' value")
            for axis in range(ndim):
                if mask >> axis & 1:
                    if values[attr][axis] != default:
                        raise r.fail(f"{attr} given twice for axis {axis}", start)
                    values[attr][axis] = value
    return values


def _array(r: _Reader, t2: bool) -> TileArray:
    start = r.pos
    ndim = r.number("[0-9]+", "the number of dimensions")
    if ndim > MAX_NDIM:
        raise r.fail(f"arrays have at most {MAX_NDIM} dimensions", start)
    dt = r.dtype()
    axes = _axis_promises(r, ndim)
    for axis in range(ndim):
        shape, stride = axes["static_shape"][axis], axes["static_stride"][axis]
        if stride is not None and (axes["stride_divisible_by"][axis] != 1
                                   or axes["stride_lower_bound"][axis] is not None):
            raise r.fail(f"axis {axis}: a static stride excludes stride divisibility and lower bound", start)
        if shape is not None:
            if not t2:
                raise r.fail("static shapes need calling convention t2", start)
            if shape < 0 or shape % (axes["shape_divisible_by"][axis] or 1):
                raise r.fail(f"axis {axis}: static shape {shape} is negative or breaks its divisibility",
                             start)
            axes["shape_divisible_by"][axis] = 1  # implied by the static shape, as cuTile drops it
    base_align, alias, internal, index = 1, 0, False, "i32"
    if re.compile("_[a-z]").match(r.symbol, r.pos):
        r.pos += 1
        extras_start = r.pos
        if r.take("p") is not None:
            base_align = r.divisor("'p' base alignment")
        alias = r.alias_ids("array")
        internal = r.take("i") is not None
        index = {"u": "u32", "w": "i64"}.get(r.take("[uw]") or "", "i32")
        if r.pos == extras_start:
            raise r.fail("expected array extras (p, g, i, u or w)")
    defaults = {attr: default for _, attr, default, _ in _PREDICATES}
    promises = {attr: () if all(v == defaults[attr] for v in vals) else tuple(vals)
                for attr, vals in axes.items()}
    return TileArray(dt, ndim, index, base_align=base_align, alias_groups=alias,  # type: ignore[arg-type]
                     may_alias_internally=internal, **promises)


def _constraint(r: _Reader, t2: bool) -> ParamType:
    if r.depth >= _MAX_DEPTH:
        raise r.fail(f"constraints nest at most {_MAX_DEPTH} deep")
    r.depth += 1
    try:
        start = r.pos
        code = r.need("[A-Z]", "a constraint code (A, L, T, S, B, I or F)")
        if code == "A":
            return _array(r, t2)
        if code == "L":
            alias = r.alias_ids("list")
            elements_alias = r.take("i") is not None
            r.need("A", "the list's array element 'A'")
            return TileList(_array(r, t2), alias, elements_alias)
        if code == "T":
            if not t2:
                raise r.fail("tuple parameters need calling convention t2", start)
            count = r.number("[0-9]+", "the tuple's item count")
            items: list[ParamType] = []
            while len(items) < count:
                items.append(_constraint(r, t2))
            return Tuple(tuple(items))
        if code == "S":
            return Scalar(r.dtype())
        if code == "B":
            return Constant(r.need("[01]", "0 or 1") == "1")
        if code == "I":
            return Constant(r.integer("an integer constant"))
        if code == "F":
            bits = int(r.need("[0-9a-f]{16}", "16 hex digits of a double"), 16)
            return Constant(struct.unpack("<d", struct.pack("<Q", bits))[0])
        raise r.fail("constraint codes other than A, L, T, S, B, I, F belong to cuTile convention v3, "
                     "which t1/t2 symbols cannot use", start)
    finally:
        r.depth -= 1


def _parse(symbol: str) -> tuple[_Reader, list[ParamType]]:
    cut = symbol.rfind("_K")
    if cut < 0:
        raise FormatError("not a cuTile kernel symbol: no '_K' after a name", source=symbol)
    r = _Reader(symbol, cut + 2)
    code = r.need("[^_]+", "a calling convention code after '_K'")
    if code not in ("t1", "t2"):
        raise r.fail("unknown cuTile calling convention (known: t1, t2)", cut + 2)
    types: list[ParamType] = []
    while r.pos < len(symbol):
        r.need("_", "'_' before the next parameter")
        types.append(_constraint(r, code == "t2"))
    for group, users in r.group_users.items():
        if len(users) < 2 or len(set(users)) > 1:
            raise FormatError(f"alias group {group:x} must be shared by two or more arrays, or by two or "
                              f"more lists (got {users})", source=symbol)
    return r, types


def demangle(symbol: str, names: tuple[str, ...] | list[str] | None = None) -> Signature:
    """The signature a cuTile symbol encodes; the signature's name is the whole symbol (the entry name).

    Parameters are named ``p0, p1, ...`` unless ``names`` gives one name per
    parameter (the Python function's parameter names, when known).
    """
    r, types = _parse(symbol)
    if r.unrepresentable:
        at, code = r.unrepresentable[0]
        raise FormatError(f"cuTile dtype {code!r} has no ptxbridge dtype (ptxbridge knows: "
                          f"{', '.join(CUTILE_DTYPES)})", source=symbol, where=f"char {at}")
    if names is None:
        names = [f"p{i}" for i in range(len(types))]
    if len(names) != len(types):
        raise AbiMismatchError(f"{symbol}: {len(names)} parameter names given for {len(types)} "
                               f"parameters (got {list(names)})")
    return Signature(symbol, tuple(Param(n, t) for n, t in zip(names, types, strict=True)),
                     Convention.CUTILE)


def is_cutile_symbol(name: str) -> bool:
    """Whether ``name`` is a well-formed t1/t2 cuTile symbol (even one with a dtype ptxbridge lacks)."""
    try:
        _parse(name)
    except FormatError:
        return False
    return True
