"""PTX arithmetic, comparisons, moves and conversions as vector IR, with the interpreter's semantics.

What PTX defines and LLVM leaves undefined is spelled out: shifts by the width or more (0, or the
sign for ``shr.s``), division by zero (all ones; ``rem`` gives the dividend), ``INT_MIN / -1``
(the quotient wraps, the remainder is 0), float -> int conversion (saturating, NaN -> 0).  Float
arithmetic is IEEE round-to-nearest, as LLVM emits it without fast-math flags; every other rounding
mode, ``.ftz`` and ``.sat`` are refused, so such kernels stay on the interpreter.
"""

from __future__ import annotations

from collections.abc import Callable

from ..parse import Instruction, Pair, Vec
from .emit import Emitter
from .values import Unsupported, bits_of, elem, int_elem, is_float, is_signed, vec

__all__ = ["LOWER", "ROUND_TO_INT"]

Lower = Callable[[Emitter, Instruction, str], None]
LOWER: dict[str, Lower] = {}
_INTS = frozenset(f"{k}{w}" for k in "usb" for w in (16, 32, 64))
_FLOATS = frozenset(("f32", "f64"))
ROUND_TO_INT = {"rni": "rint", "rzi": "trunc", "rmi": "floor", "rpi": "ceil"}


def lower(*names: str) -> Callable[[Lower], Lower]:
    def register(fn: Lower) -> Lower:
        for name in names:
            LOWER[name] = fn
        return fn

    return register


def _mods(
    ins: Instruction, allowed: set[str], types: frozenset[str], ntypes: int = 1
) -> tuple[set[str], list[str]]:
    mods = ins.mods
    if len(mods) < ntypes or any(t not in types for t in mods[len(mods) - ntypes :]):
        raise Unsupported(f"{ins.opcode} with modifiers {mods}")
    flags = set(mods[: len(mods) - ntypes])
    if flags - allowed:
        raise Unsupported(f"{ins.opcode} with .{'.'.join(sorted(flags - allowed))}")
    return flags, list(mods[len(mods) - ntypes :])


def _v(t: str) -> str:
    return vec(elem(t))


def _call(e: Emitter, name: str, t: str, *args: str) -> str:
    suffix = f"v32{'f32' if t == 'f32' else 'f64' if t == 'f64' else int_elem(bits_of(t))}"
    e.intrinsic(f"declare {_v(t)} @llvm.{name}.{suffix}({', '.join([_v(t)] * len(args))})")
    return e.op(f"call {_v(t)} @llvm.{name}.{suffix}({', '.join(f'{_v(t)} {a}' for a in args)})")


def _operands(ins: Instruction, count: int) -> tuple:
    if len(ins.operands) != count:
        raise Unsupported(f"{ins.opcode} with {len(ins.operands)} operands")
    return ins.operands


def _binary(
    e: Emitter,
    ins: Instruction,
    m: str,
    t: str,
    build: Callable[[str, str], str],
    out: str | None = None,
    b_type: str | None = None,
) -> None:
    d, a, b = _operands(ins, 3)
    e.write(d, build(e.read(a, t), e.read(b, b_type or t)), out or t, m)


# -- integer ------------------------------------------------------------------------------------------


def _wide_type(t: str) -> str:
    return f"{t[0]}{2 * bits_of(t)}"


def _widen(e: Emitter, value: str, t: str) -> str:
    return e.op(f"{'sext' if is_signed(t) else 'zext'} {_v(t)} {value} to {_v(_wide_type(t))}")


def _product(e: Emitter, mode: str, t: str, a: str, b: str) -> tuple[str, str]:
    """``(value, type)`` of mul.lo / mul.hi / mul.wide."""
    if mode == "lo":
        return e.op(f"mul {_v(t)} {a}, {b}"), t
    wide = e.op(f"mul {_v(_wide_type(t))} {_widen(e, a, t)}, {_widen(e, b, t)}")
    if mode == "wide":
        return wide, _wide_type(t)
    shifted = e.op(f"lshr {_v(_wide_type(t))} {wide}, splat ({int_elem(2 * bits_of(t))} {bits_of(t)})")
    return e.op(f"trunc {_v(_wide_type(t))} {shifted} to {_v(t)}"), t


def _float_mods(ins: Instruction, extra: frozenset[str] = frozenset()) -> str:
    """The type of a float instruction in round-to-nearest without .ftz/.sat (else Unsupported)."""
    _, (t,) = _mods(ins, {"rn"} | extra, _FLOATS)
    return t


@lower("add", "sub")
def _add_sub(e: Emitter, ins: Instruction, m: str) -> None:
    if ins.mods and ins.mods[-1] in _FLOATS:
        t = _float_mods(ins)
        _binary(e, ins, m, t, lambda a, b: e.op(f"f{ins.opcode} {_v(t)} {a}, {b}"))
        return
    _, (t,) = _mods(ins, set(), _INTS)
    _binary(e, ins, m, t, lambda a, b: e.op(f"{ins.opcode} {_v(t)} {a}, {b}"))


@lower("mul")
def _mul(e: Emitter, ins: Instruction, m: str) -> None:
    if ins.mods and ins.mods[-1] in _FLOATS:
        t = _float_mods(ins)
        _binary(e, ins, m, t, lambda a, b: e.op(f"fmul {_v(t)} {a}, {b}"))
        return
    flags, (t,) = _mods(ins, {"lo", "hi", "wide"}, _INTS)
    if len(flags) != 1 or (flags == {"wide"} and t.endswith("64")):
        raise Unsupported(f"mul.{'.'.join(ins.mods)}")
    d, a, b = _operands(ins, 3)
    value, out = _product(e, flags.pop(), t, e.read(a, t), e.read(b, t))
    e.write(d, value, out, m)


@lower("mad", "fma")
def _mad(e: Emitter, ins: Instruction, m: str) -> None:
    d, a, b, c = _operands(ins, 4)
    if ins.mods and ins.mods[-1] in _FLOATS:
        t = _float_mods(ins)
        e.write(d, _call(e, "fma", t, e.read(a, t), e.read(b, t), e.read(c, t)), t, m)
        return
    if ins.opcode == "fma":
        raise Unsupported(f"fma.{'.'.join(ins.mods)}")
    flags, (t,) = _mods(ins, {"lo", "hi", "wide"}, _INTS)
    if len(flags) != 1 or (flags == {"wide"} and t.endswith("64")):
        raise Unsupported(f"mad.{'.'.join(ins.mods)}")
    mode = flags.pop()
    value, out = _product(e, mode, t, e.read(a, t), e.read(b, t))
    e.write(d, e.op(f"add {_v(out)} {value}, {e.read(c, out)}"), out, m)


@lower("div", "rem")
def _div_rem(e: Emitter, ins: Instruction, m: str) -> None:
    if ins.mods and ins.mods[-1] in _FLOATS:
        if ins.opcode == "rem":
            raise Unsupported("rem on floats")
        t = _float_mods(ins, frozenset(("approx", "full")))
        _binary(e, ins, m, t, lambda a, b: e.op(f"fdiv {_v(t)} {a}, {b}"))
        return
    _, (t,) = _mods(ins, set(), _INTS)
    remainder = ins.opcode == "rem"

    def divide(a: str, b: str) -> str:
        vt = _v(t)
        zero = e.op(f"icmp eq {vt} {b}, zeroinitializer")
        bad = zero
        if is_signed(t):  # INT_MIN / -1 overflows: the quotient wraps to INT_MIN, the remainder is 0
            low = e.op(f"icmp eq {vt} {a}, splat ({int_elem(bits_of(t))} {-(1 << (bits_of(t) - 1))})")
            minus = e.op(f"icmp eq {vt} {b}, splat ({int_elem(bits_of(t))} -1)")
            overflow = e.op(f"and {vec('i1')} {low}, {minus}")
            bad = e.op(f"or {vec('i1')} {zero}, {overflow}")
        safe = e.op(f"select {vec('i1')} {bad}, {vt} splat ({int_elem(bits_of(t))} 1), {vt} {b}")
        how = ("s" if is_signed(t) else "u") + ("rem" if remainder else "div")
        r = e.op(f"{how} {vt} {a}, {safe}")  # x / 1 and x % 1: INT_MIN and 0 for the overflow lanes
        return e.op(f"select {vec('i1')} {zero}, {vt} {a if remainder else e.ones(t)}, {vt} {r}")

    _binary(e, ins, m, t, divide)


@lower("rcp", "sqrt", "rsqrt")
def _roots(e: Emitter, ins: Instruction, m: str) -> None:
    """The interpreter's: ``1 / x`` and ``sqrt(x)`` correctly rounded (``.approx`` as ``.rn``), and
    ``rsqrt`` as ``1 / sqrt(x)`` in double precision, rounded once to the type."""
    t = _float_mods(ins, frozenset(("approx", "full")))
    d, a = _operands(ins, 2)
    x = e.read(a, t)
    if ins.opcode == "rcp":
        value = e.op(f"fdiv {_v(t)} splat ({elem(t)} 1.0), {x}")
    elif ins.opcode == "sqrt":
        value = _call(e, "sqrt", t, x)
    else:
        wide = e.op(f"fpext {_v(t)} {x} to {_v('f64')}") if t == "f32" else x
        inverse = e.op(f"fdiv {_v('f64')} splat (double 1.0), {_call(e, 'sqrt', 'f64', wide)}")
        value = e.op(f"fptrunc {_v('f64')} {inverse} to {_v(t)}") if t == "f32" else inverse
    e.write(d, value, t, m)


@lower("abs", "neg")
def _abs_neg(e: Emitter, ins: Instruction, m: str) -> None:
    d, a = _operands(ins, 2)
    if ins.mods and ins.mods[-1] in _FLOATS:
        t = _float_mods(ins)
        x = e.read(a, t)
        e.write(d, _call(e, "fabs", t, x) if ins.opcode == "abs" else e.op(f"fneg {_v(t)} {x}"), t, m)
        return
    _, (t,) = _mods(ins, set(), frozenset(("s16", "s32", "s64")))
    x = e.read(a, t)
    if ins.opcode == "neg":
        value = e.op(f"sub {_v(t)} zeroinitializer, {x}")
    else:
        e.intrinsic(f"declare {_v(t)} @llvm.abs.v32{int_elem(bits_of(t))}({_v(t)}, i1)")
        value = e.op(f"call {_v(t)} @llvm.abs.v32{int_elem(bits_of(t))}({_v(t)} {x}, i1 false)")
    e.write(d, value, t, m)


@lower("min", "max")
def _min_max(e: Emitter, ins: Instruction, m: str) -> None:
    if ins.mods and ins.mods[-1] in _FLOATS:
        t = _float_mods(ins)
        _binary(e, ins, m, t, lambda a, b: _float_min_max(e, ins.opcode, t, a, b))
        return
    _, (t,) = _mods(ins, set(), _INTS)
    name = ("s" if is_signed(t) else "u") + ins.opcode
    _binary(e, ins, m, t, lambda a, b: _call(e, name, t, a, b))


def _float_min_max(e: Emitter, name: str, t: str, a: str, b: str) -> str:
    """fmin/fmax (a NaN operand loses; two NaNs give the first), and -0.0 < +0.0 (``min_max``)."""
    vt, mask = _v(t), vec("i1")
    a_nan, b_nan = e.op(f"fcmp uno {vt} {a}, {a}"), e.op(f"fcmp uno {vt} {b}, {b}")
    smaller = e.op(f"fcmp {'olt' if name == 'min' else 'ogt'} {vt} {a}, {b}")
    pick = e.op(f"select {mask} {smaller}, {vt} {a}, {vt} {b}")
    zeros = e.op(
        f"and {mask} {e.op(f'fcmp oeq {vt} {a}, zeroinitializer')}, "
        f"{e.op(f'fcmp oeq {vt} {b}, zeroinitializer')}"
    )
    a_bits = e.to_bits(a, t)
    negative = e.op(f"icmp slt {vec(int_elem(bits_of(t)))} {a_bits}, zeroinitializer")
    take_a = negative if name == "min" else e.op(f"xor {mask} {negative}, splat (i1 true)")
    zero_pick = e.op(f"select {mask} {take_a}, {vt} {a}, {vt} {b}")
    pick = e.op(f"select {mask} {zeros}, {vt} {zero_pick}, {vt} {pick}")
    pick = e.op(f"select {mask} {a_nan}, {vt} {b}, {vt} {pick}")
    return e.op(f"select {mask} {b_nan}, {vt} {a}, {vt} {pick}")


@lower("and", "or", "xor")
def _logic(e: Emitter, ins: Instruction, m: str) -> None:
    _, (t,) = _mods(ins, set(), frozenset(("pred", "b16", "b32", "b64")))
    _binary(e, ins, m, t, lambda a, b: e.op(f"{ins.opcode} {_v(t)} {a}, {b}"))


@lower("not", "cnot")
def _not(e: Emitter, ins: Instruction, m: str) -> None:
    _, (t,) = _mods(ins, set(), frozenset(("pred", "b16", "b32", "b64")))
    d, a = _operands(ins, 2)
    x = e.read(a, t)
    if ins.opcode == "not":
        value = e.op(f"xor {_v(t)} {x}, {e.ones(t)}")
    else:
        value = e.convert(e.op(f"icmp eq {_v(t)} {x}, zeroinitializer"), 1, bits_of(t), False)
    e.write(d, value, t, m)


@lower("shl", "shr")
def _shift(e: Emitter, ins: Instruction, m: str) -> None:
    _, (t,) = _mods(ins, set(), _INTS)
    bits = bits_of(t)
    how = "shl" if ins.opcode == "shl" else "ashr" if is_signed(t) else "lshr"

    def shift(a: str, b: str) -> str:
        big = e.op(f"icmp ugt {vec('i32')} {b}, splat (i32 {bits - 1})")
        amount = e.op(f"select {vec('i1')} {big}, {vec('i32')} splat (i32 {bits - 1}), {vec('i32')} {b}")
        amount = e.convert(amount, 32, bits, False)
        shifted = e.op(f"{how} {_v(t)} {a}, {amount}")
        if how == "ashr":  # by min(b, bits - 1): the sign fills the word
            return shifted
        return e.op(f"select {vec('i1')} {big}, {_v(t)} zeroinitializer, {_v(t)} {shifted}")

    _binary(e, ins, m, t, shift, b_type="u32")


@lower("popc", "clz", "brev")
def _bits(e: Emitter, ins: Instruction, m: str) -> None:
    _, (t,) = _mods(ins, set(), frozenset(("b32", "b64")))
    d, a = _operands(ins, 2)
    x = e.read(a, t)
    if ins.opcode == "brev":
        e.write(d, _call(e, "bitreverse", t, x), t, m)
        return
    name = "ctpop" if ins.opcode == "popc" else "ctlz"
    suffix = f"v32{int_elem(bits_of(t))}"
    extra = ", i1 false" if name == "ctlz" else ""
    e.intrinsic(f"declare {_v(t)} @llvm.{name}.{suffix}({_v(t)}{', i1' if extra else ''})")
    count = e.op(f"call {_v(t)} @llvm.{name}.{suffix}({_v(t)} {x}{extra})")
    e.write(d, e.convert(count, bits_of(t), 32, False), "u32", m)


# -- comparisons, selects, moves ----------------------------------------------------------------------

_INT_CMP = {"eq": "eq", "ne": "ne", "lo": "ult", "ls": "ule", "hi": "ugt", "hs": "uge"}
_FLOAT_CMP = {
    "eq": "oeq",
    "ne": "one",
    "lt": "olt",
    "le": "ole",
    "gt": "ogt",
    "ge": "oge",
    "equ": "ueq",
    "neu": "une",
    "ltu": "ult",
    "leu": "ule",
    "gtu": "ugt",
    "geu": "uge",
    "num": "ord",
    "nan": "uno",
}


def compare(e: Emitter, cmp: str, t: str, a: str, b: str) -> str:
    if is_float(t):
        if cmp not in _FLOAT_CMP:
            raise Unsupported(f"comparison .{cmp} on .{t}")
        return e.op(f"fcmp {_FLOAT_CMP[cmp]} {_v(t)} {a}, {b}")
    if cmp in _INT_CMP:
        return e.op(f"icmp {_INT_CMP[cmp]} {_v(t)} {a}, {b}")
    if cmp not in ("lt", "le", "gt", "ge"):
        raise Unsupported(f"comparison .{cmp} on .{t}")
    return e.op(f"icmp {'s' if is_signed(t) else 'u'}{cmp[0]}{cmp[1]} {_v(t)} {a}, {b}")


_COMBINE = ("and", "or", "xor")


@lower("setp")
def _setp(e: Emitter, ins: Instruction, m: str) -> None:
    flags, (t,) = _mods(ins, set(_INT_CMP) | set(_FLOAT_CMP) | set(_COMBINE), _INTS | _FLOATS)
    combine = flags & set(_COMBINE)
    cmps = flags - combine
    if len(cmps) != 1 or len(combine) > 1:
        raise Unsupported(f"setp.{'.'.join(ins.mods)}")
    ops = _operands(ins, 4 if combine else 3)
    first, second = (ops[0].first, ops[0].second) if isinstance(ops[0], Pair) else (ops[0], None)
    result = compare(e, cmps.pop(), t, e.read(ops[1], t), e.read(ops[2], t))
    other = e.op(f"xor {vec('i1')} {result}, splat (i1 true)") if second is not None else None
    if combine:
        how, c = combine.pop(), e.read(ops[3], "pred")
        result = e.op(f"{how} {vec('i1')} {result}, {c}")
        if other is not None:
            other = e.op(f"{how} {vec('i1')} {other}, {c}")
    e.write(first, result, "pred", m)
    if second is not None:
        e.write(second, other, "pred", m)


@lower("selp")
def _selp(e: Emitter, ins: Instruction, m: str) -> None:
    _, (t,) = _mods(ins, set(), _INTS | _FLOATS)
    d, a, b, c = _operands(ins, 4)
    x, y, p = e.read(a, t), e.read(b, t), e.read(c, "pred")
    e.write(d, e.op(f"select {vec('i1')} {p}, {_v(t)} {x}, {_v(t)} {y}"), t, m)


@lower("mov")
def _mov(e: Emitter, ins: Instruction, m: str) -> None:
    _, (t,) = _mods(ins, set(), _INTS | _FLOATS | {"pred"})
    d, a = _operands(ins, 2)
    if isinstance(d, Vec) or isinstance(a, Vec):
        _pack(e, t, d, a, m)
        return
    e.write(d, e.read(a, t), t, m)


def _pack(e: Emitter, t: str, d: object, a: object, m: str) -> None:
    """``mov.b64 {lo, hi}, %rd`` and ``mov.b64 %rd, {lo, hi}``: element 0 is the low bits."""
    whole = bits_of(t)
    ut = f"b{whole}"
    if isinstance(d, Vec):
        part = whole // len(d.items)
        value = e.read(a, ut)
        for i, item in enumerate(d.items):
            shifted = e.op(f"lshr {_v(ut)} {value}, splat (i{whole} {i * part})") if i else value
            e.write(item, e.convert(shifted, whole, part, False), f"b{part}", m)
        return
    part = whole // len(a.items)
    value = "zeroinitializer"
    for i, item in enumerate(a.items):
        piece = e.convert(e.read(item, f"b{part}"), part, whole, False)
        if i:
            piece = e.op(f"shl {_v(ut)} {piece}, splat (i{whole} {i * part})")
        value = e.op(f"or {_v(ut)} {value}, {piece}")
    e.write(d, value, ut, m)
