"""PTX arithmetic, comparisons, moves and conversions as vector IR, with the interpreter's semantics.

What PTX defines and LLVM leaves undefined is spelled out: shifts by the width or more (0, or the
sign for ``shr.s``), division by zero (all ones; ``rem`` gives the dividend), ``INT_MIN / -1``
(the quotient wraps, the remainder is 0), float -> int conversion (saturating, NaN -> 0).  Float
arithmetic is IEEE round-to-nearest, as LLVM emits it without fast-math flags; ``.ftz`` flushes f32
subnormal operands and results to signed zero, as the interpreter does; the approximate sin, cos,
ex2, lg2 and tanh call the C library's functions in double precision, as the interpreter does;
every other rounding mode and ``.sat`` are refused, so such kernels stay on the interpreter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..float_math import LIBM, LIBM_FUNCTIONS
from ..parse import Instruction, Pair, Vec
from .emit import Emitter
from .ranges import lane_compare
from .values import LANES, Unsupported, bits_of, elem, int_elem, is_float, is_signed, vec

__all__ = [
    "LOWER", "ROUND_TO_INT", "CARRY", "flush", "saturate", "lower", "modifiers", "operands", "uses_carry",
]

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


def modifiers(
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


def operands(ins: Instruction, count: int) -> tuple:
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
    d, a, b = operands(ins, 3)
    e.write(d, build(e.read(a, t), e.read(b, b_type or t)), out or t, m)


# -- integer ------------------------------------------------------------------------------------------


def _wide_type(t: str) -> str:
    return f"{t[0]}{2 * bits_of(t)}"


def _widen(e: Emitter, value: str, t: str) -> str:
    return e.convert(value, bits_of(t), 2 * bits_of(t), is_signed(t))


def _product(e: Emitter, mode: str, t: str, a: str, b: str) -> tuple[str, str]:
    """``(value, type)`` of mul.lo / mul.hi / mul.wide."""
    if mode == "lo":
        return e.op(f"mul {_v(t)} {a}, {b}"), t
    wide = e.op(f"mul {_v(_wide_type(t))} {_widen(e, a, t)}, {_widen(e, b, t)}")
    if mode == "wide":
        return wide, _wide_type(t)
    shifted = e.op(f"lshr {_v(_wide_type(t))} {wide}, splat ({int_elem(2 * bits_of(t))} {bits_of(t)})")
    return e.op(f"trunc {_v(_wide_type(t))} {shifted} to {_v(t)}"), t


@dataclass(frozen=True, slots=True)
class _Float:
    """A float instruction's type and ``.ftz`` as the interpreter applies it: f32 subnormal operands
    and results become zero of the same sign (``.ftz`` leaves f64 alone)."""

    e: Emitter
    t: str
    ftz: bool

    def read(self, operand: object) -> str:
        value = self.e.read(operand, self.t)
        return flush(self.e, value) if self.ftz else value

    def done(self, value: str) -> str:
        return flush(self.e, value) if self.ftz else value


def _float(e: Emitter, ins: Instruction, extra: frozenset[str] = frozenset()) -> _Float:
    """A float instruction in round-to-nearest, with or without .ftz; .sat and other roundings are
    Unsupported."""
    flags, (t,) = modifiers(ins, {"rn", "ftz"} | extra, _FLOATS)
    return _Float(e, t, "ftz" in flags and t == "f32")


_F32_TINY = "0x3810000000000000"  # 2^-126, the least normal f32, as LLVM writes a float constant


def flush(e: Emitter, x: str) -> str:
    """``.ftz`` of an f32 vector: subnormals become zero of the same sign (NaNs stay)."""
    vt = _v("f32")
    small = e.op(f"fcmp olt {vt} {_call(e, 'fabs', 'f32', x)}, splat (float {_F32_TINY})")
    zero = _call(e, "copysign", "f32", "zeroinitializer", x)
    return e.op(f"select {vec('i1')} {small}, {vt} {zero}, {vt} {x}")


def saturate(e: Emitter, x: str, t: str) -> str:
    """``.sat``: clamp to [0, 1], NaN -> +0 (-0.0 stays, as the interpreter's clip keeps it)."""
    vt, mask = _v(t), vec("i1")
    one = f"splat ({elem(t)} 1.0)"
    value = e.op(f"select {mask} {e.op(f'fcmp ogt {vt} {x}, {one}')}, {vt} {one}, {vt} {x}")
    below = e.op(f"fcmp ult {vt} {x}, zeroinitializer")  # negative or NaN
    return e.op(f"select {mask} {below}, {vt} zeroinitializer, {vt} {value}")


def _float_binary(e: Emitter, ins: Instruction, m: str, f: _Float, build: Callable[[str, str], str]) -> None:
    d, a, b = operands(ins, 3)
    e.write(d, f.done(build(f.read(a), f.read(b))), f.t, m)


@lower("add", "sub")
def _add_sub(e: Emitter, ins: Instruction, m: str) -> None:
    if ins.mods and ins.mods[-1] in _FLOATS:
        f = _float(e, ins)
        _float_binary(e, ins, m, f, lambda a, b: e.op(f"f{ins.opcode} {_v(f.t)} {a}, {b}"))
        return
    flags, (t,) = modifiers(ins, {"cc"}, _INTS)
    if flags:
        _extended(e, ins, m, t, ins.opcode == "sub", False, True)
        return
    _binary(e, ins, m, t, lambda a, b: e.op(f"{ins.opcode} {_v(t)} {a}, {b}"))


CARRY = "%cc"  # the carry flag of the extended-precision instructions: one bit per lane


def uses_carry(ins: Instruction) -> bool:
    """Whether ``ins`` reads or writes the carry flag."""
    chained = ins.opcode in ("add", "sub", "mad") and "cc" in ins.mods
    return chained or ins.opcode in ("addc", "subc", "madc")


def _extended(e: Emitter, ins: Instruction, m: str, t: str, subtract: bool, carry_in: bool, carry_out: bool,
              product: str | None = None) -> None:
    """add.cc / addc / sub.cc / subc / mad{c}.{lo,hi}.cc on unsigned bits, as the interpreter computes
    them: a subtraction adds the complement and the flag (set: no borrow), its first one adds 1."""
    u = f"u{t[1:]}"
    ops = operands(ins, 4 if product else 3)
    values = [e.read(o, u) for o in ops[1:]]
    a, b = (_product(e, product, u, values[0], values[1])[0], values[2]) if product else values
    if subtract:
        b = e.op(f"xor {_v(u)} {b}, splat ({int_elem(bits_of(u))} -1)")
    flag = e.load_reg(CARRY)
    carry = e.convert(flag, 1, bits_of(u), False) if carry_in else e.constant(int(subtract), u)
    first = e.op(f"add {_v(u)} {a}, {b}")
    result = e.op(f"add {_v(u)} {first}, {carry}")
    out = e.op(f"or {vec('i1')} {e.op(f'icmp ult {_v(u)} {first}, {a}')}, "
               f"{e.op(f'icmp ult {_v(u)} {result}, {first}')}")
    e.write(ops[0], result, u, m)
    if carry_out:  # the lanes outside the mask keep their flag
        kept = e.op(f"select {vec('i1')} {m}, {vec('i1')} {out}, {vec('i1')} {flag}")
        e.store_slot(CARRY, vec("i1"), kept)


@lower("addc", "subc", "madc")
def _with_carry(e: Emitter, ins: Instruction, m: str) -> None:
    if ins.opcode == "madc":
        flags, (t,) = modifiers(ins, {"lo", "hi", "cc"}, _INTS)
        halves = flags - {"cc"}
        if len(halves) != 1:
            raise Unsupported(f"madc.{'.'.join(ins.mods)}")
        _extended(e, ins, m, t, False, True, "cc" in flags, halves.pop())
        return
    flags, (t,) = modifiers(ins, {"cc"}, _INTS)
    _extended(e, ins, m, t, ins.opcode == "subc", True, "cc" in flags)


@lower("mul")
def _mul(e: Emitter, ins: Instruction, m: str) -> None:
    if ins.mods and ins.mods[-1] in _FLOATS:
        f = _float(e, ins)
        _float_binary(e, ins, m, f, lambda a, b: e.op(f"fmul {_v(f.t)} {a}, {b}"))
        return
    flags, (t,) = modifiers(ins, {"lo", "hi", "wide"}, _INTS)
    if len(flags) != 1 or (flags == {"wide"} and t.endswith("64")):
        raise Unsupported(f"mul.{'.'.join(ins.mods)}")
    d, a, b = operands(ins, 3)
    value, out = _product(e, flags.pop(), t, e.read(a, t), e.read(b, t))
    e.write(d, value, out, m)


_DIRECTED = ("rm", "rp", "rz")


def _directed_fma(e: Emitter, t: str, mode: str, a: str, b: str, c: str) -> str:
    """f32 a*b+c rounded once toward ``mode``, as IEEE 754 (and the interpreter's ``fma32``) rounds it.

    The f64 product of two f32s is exact; TwoSum gives the f64 sum and its exact error, from which the
    sum rounded to odd (an f64 with 29 more bits than f32, so that rounding it once more to f32 in any
    mode is the exact value's own rounding); the nearest f32 of that then steps one f32 ulp where it
    lies on the wrong side of it.  An exact zero sum is -0 when rounding down unless both addends are
    +0 (IEEE 754 6.3)."""
    if t != "f32":
        raise Unsupported(f"fma.{mode}.{t}")
    v64, v32, i64, i32, mask = _v("f64"), _v("f32"), vec("i64"), vec("i32"), vec("i1")

    def f64(op: str, x: str, y: str) -> str:
        return e.op(f"{op} {v64} {x}, {y}")

    def both(x: str, y: str) -> str:
        return e.op(f"and {mask} {x}, {y}")

    def negated(x: str) -> str:
        return e.op(f"xor {mask} {x}, splat (i1 true)")

    wide_a, wide_b, wide_c = (e.op(f"fpext {v32} {x} to {v64}") for x in (a, b, c))
    p = f64("fmul", wide_a, wide_b)
    total = f64("fadd", p, wide_c)
    back = f64("fsub", total, p)
    error = f64("fadd", f64("fsub", p, f64("fsub", total, back)), f64("fsub", wide_c, back))
    bits = e.op(f"bitcast {v64} {total} to {i64}")
    even = e.op(f"icmp eq {i64} {e.op(f'and {i64} {bits}, splat (i64 1)')}, zeroinitializer")
    inexact = both(f64("fcmp one", error, "zeroinitializer"), even)
    # toward the exact value: away from zero where the error has the sum's sign
    outward = e.op(f"icmp eq {mask} {f64('fcmp olt', error, 'zeroinitializer')}, "
                   f"{f64('fcmp olt', total, 'zeroinitializer')}")
    step = e.op(f"select {mask} {outward}, {i64} splat (i64 1), {i64} splat (i64 -1)")
    odd_bits = e.op(f"select {mask} {inexact}, {i64} {e.op(f'add {i64} {bits}, {step}')}, {i64} {bits}")
    odd = e.op(f"bitcast {i64} {odd_bits} to {v64}")
    r = e.op(f"fptrunc {v64} {odd} to {v32}")
    r64 = e.op(f"fpext {v32} {r} to {v64}")
    r_bits = e.op(f"bitcast {v32} {r} to {i32}")
    if mode == "rz":  # one ulp toward zero: -1 on the bits of either sign
        wrong = f64("fcmp ogt", _call(e, "fabs", "f64", r64), _call(e, "fabs", "f64", odd))
        by = f"{i32} splat (i32 -1)"
    else:  # one ulp down (rm) or up (rp): +1 or -1 on the bits as the sign of r says
        wrong = f64(f"fcmp {'ogt' if mode == 'rm' else 'olt'}", r64, odd)
        negative = e.op(f"icmp slt {i32} {r_bits}, zeroinitializer")
        grow = negative if mode == "rm" else negated(negative)
        by = f"{i32} {e.op(f'select {mask} {grow}, {i32} splat (i32 1), {i32} splat (i32 -1)')}"
    toward = e.op(f"select {mask} {wrong}, {by}, {i32} zeroinitializer")
    value = e.op(f"bitcast {i32} {e.op(f'add {i32} {r_bits}, {toward}')} to {v32}")
    if mode != "rm":
        return value

    def zero(x: str) -> str:
        return e.op(f"fcmp oeq {v32} {x}, zeroinitializer")

    def plus(x: str) -> str:
        return e.op(f"icmp sge {i32} {e.op(f'bitcast {v32} {x} to {i32}')}, zeroinitializer")

    product = e.op(f"fmul {v32} {a}, {b}")
    plus_zeros = both(both(e.op(f"or {mask} {zero(a)}, {zero(b)}"), plus(product)), both(zero(c), plus(c)))
    exact_zero = both(f64("fcmp oeq", total, "zeroinitializer"), negated(plus_zeros))
    return e.op(f"select {mask} {exact_zero}, {v32} splat (float -0.0), {v32} {value}")


@lower("mad", "fma")
def _mad(e: Emitter, ins: Instruction, m: str) -> None:
    d, a, b, c = operands(ins, 4)
    if ins.mods and ins.mods[-1] in _FLOATS:
        f = _float(e, ins, frozenset(_DIRECTED) if ins.opcode == "fma" else frozenset())
        mode = next(iter(set(ins.mods) & set(_DIRECTED)), "rn")
        args = [f.read(a), f.read(b), f.read(c)]
        value = _call(e, "fma", f.t, *args) if mode == "rn" else _directed_fma(e, f.t, mode, *args)
        e.write(d, f.done(value), f.t, m)
        return
    if ins.opcode == "fma":
        raise Unsupported(f"fma.{'.'.join(ins.mods)}")
    flags, (t,) = modifiers(ins, {"lo", "hi", "wide", "cc"}, _INTS)
    if "cc" in flags and len(flags) == 2 and "wide" not in flags:
        _extended(e, ins, m, t, False, False, True, (flags - {"cc"}).pop())
        return
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
        f = _float(e, ins, frozenset(("approx", "full")))
        _float_binary(e, ins, m, f, lambda a, b: e.op(f"fdiv {_v(f.t)} {a}, {b}"))
        return
    _, (t,) = modifiers(ins, set(), _INTS)
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
    f = _float(e, ins, frozenset(("approx", "full")))
    t = f.t
    d, a = operands(ins, 2)
    x = f.read(a)
    if ins.opcode == "rcp":
        value = e.op(f"fdiv {_v(t)} splat ({elem(t)} 1.0), {x}")
    elif ins.opcode == "sqrt":
        value = _call(e, "sqrt", t, x)
    else:
        wide = e.op(f"fpext {_v(t)} {x} to {_v('f64')}") if t == "f32" else x
        inverse = e.op(f"fdiv {_v('f64')} splat (double 1.0), {_call(e, 'sqrt', 'f64', wide)}")
        value = e.op(f"fptrunc {_v('f64')} {inverse} to {_v(t)}") if t == "f32" else inverse
    e.write(d, f.done(value), t, m)


def _libm_helper(e: Emitter, name: str) -> str:
    """``@ptxb.libm.NAME``: the C library's ``NAME`` on each lane of an f64 vector.  ``nobuiltin``: LLVM
    neither folds nor rewrites the call, so every lane is the function's own result, as the
    interpreter's (``float_math.LIBM``)."""
    vt = _v("f64")
    e.intrinsic(f"declare double @{name}(double) nobuiltin nounwind")
    e.intrinsic(f"""define internal {vt} @ptxb.libm.{name}({vt} %x) noinline nounwind {{
entry:
  %lanes = alloca {vt}
  store {vt} %x, ptr %lanes
  br label %lane
lane:
  %i = phi i32 [0, %entry], [%next, %lane]
  %at = getelementptr double, ptr %lanes, i32 %i
  %value = load double, ptr %at
  %result = call double @{name}(double %value) nobuiltin
  store double %result, ptr %at
  %next = add i32 %i, 1
  %done = icmp eq i32 %next, {LANES}
  br i1 %done, label %exit, label %lane
exit:
  %out = load {vt}, ptr %lanes
  ret {vt} %out
}}""")
    return f"@ptxb.libm.{name}"


@lower(*LIBM_FUNCTIONS)
def _approximate(e: Emitter, ins: Instruction, m: str) -> None:
    """sin, cos, ex2, lg2 and tanh as the interpreter computes them: the C library's function in double
    precision, rounded once to the type; Unsupported where the extension holding the interpreter's
    calls of them is not built (it then uses NumPy's, which compiled code cannot call)."""
    if LIBM is None:
        raise Unsupported(f"{ins.opcode}: the C library's functions need ptxbridge's _native extension")
    f = _float(e, ins, frozenset(("approx", "full")))
    d, a = operands(ins, 2)
    x = f.read(a)
    wide = e.op(f"fpext {_v('f32')} {x} to {_v('f64')}") if f.t == "f32" else x
    value = e.op(f"call {_v('f64')} {_libm_helper(e, LIBM_FUNCTIONS[ins.opcode])}({_v('f64')} {wide})")
    if f.t == "f32":
        value = e.op(f"fptrunc {_v('f64')} {value} to {_v('f32')}")
    e.write(d, f.done(value), f.t, m)


@lower("copysign")
def _copysign(e: Emitter, ins: Instruction, m: str) -> None:
    """``copysign d, a, b``: b's magnitude with a's sign (a bit copy: NaNs too)."""
    _, (t,) = modifiers(ins, set(), _FLOATS)
    d, a, b = operands(ins, 3)
    e.write(d, _call(e, "copysign", t, e.read(b, t), e.read(a, t)), t, m)


@lower("abs", "neg")
def _abs_neg(e: Emitter, ins: Instruction, m: str) -> None:
    d, a = operands(ins, 2)
    if ins.mods and ins.mods[-1] in _FLOATS:
        f = _float(e, ins)
        x = f.read(a)
        e.write(d, f.done(_call(e, "fabs", f.t, x) if ins.opcode == "abs" else e.op(f"fneg {_v(f.t)} {x}")),
                f.t, m)
        return
    _, (t,) = modifiers(ins, set(), frozenset(("s16", "s32", "s64")))
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
        f = _float(e, ins)
        _float_binary(e, ins, m, f, lambda a, b: _float_min_max(e, ins.opcode, f.t, a, b))
        return
    _, (t,) = modifiers(ins, set(), _INTS)
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
    _, (t,) = modifiers(ins, set(), frozenset(("pred", "b16", "b32", "b64")))
    _binary(e, ins, m, t, lambda a, b: e.op(f"{ins.opcode} {_v(t)} {a}, {b}"))


@lower("not", "cnot")
def _not(e: Emitter, ins: Instruction, m: str) -> None:
    _, (t,) = modifiers(ins, set(), frozenset(("pred", "b16", "b32", "b64")))
    d, a = operands(ins, 2)
    x = e.read(a, t)
    if ins.opcode == "not":
        value = e.op(f"xor {_v(t)} {x}, {e.ones(t)}")
    else:
        value = e.convert(e.op(f"icmp eq {_v(t)} {x}, zeroinitializer"), 1, bits_of(t), False)
    e.write(d, value, t, m)


@lower("shl", "shr")
def _shift(e: Emitter, ins: Instruction, m: str) -> None:
    _, (t,) = modifiers(ins, set(), _INTS)
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
    _, (t,) = modifiers(ins, set(), frozenset(("b32", "b64")))
    d, a = operands(ins, 2)
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


_W = vec("i64")  # bit fields are computed in 64 bits per lane, as the interpreter does


def _field_operand(e: Emitter, operand: object) -> str:
    """A position or length operand of bfe/bfi: its low byte, in 64 bits."""
    low = e.op(f"and {_v('u32')} {e.read(operand, 'u32')}, splat (i32 255)")
    return e.op(f"zext {_v('u32')} {low} to {_W}")


def _field_mask(e: Emitter, length: str) -> str:
    """``length`` low bits set (all 64 from 64 on)."""
    shifted = e.op(f"shl {_W} splat (i64 1), {_call(e, 'umin', 'u64', length, 'splat (i64 63)')}")
    ones = e.op(f"sub {_W} {shifted}, splat (i64 1)")
    wide = e.op(f"icmp uge {_W} {length}, splat (i64 64)")
    return e.op(f"select {vec('i1')} {wide}, {_W} splat (i64 -1), {_W} {ones}")


def _as_wide(e: Emitter, value: str, t: str, signed: bool = False) -> str:
    return e.convert(e.to_bits(value, t), bits_of(t), 64, signed)


@lower("bfe")
def _bfe(e: Emitter, ins: Instruction, m: str) -> None:
    """Extract ``c`` bits from ``b`` on (``.s``: sign-extended from the field's top bit, or from
    the msb when the field runs past it), as the interpreter's ``bfe``."""
    _, (t,) = modifiers(ins, set(), frozenset(("u32", "s32", "u64", "s64")))
    d, a, b, c = operands(ins, 4)
    bits, x = bits_of(t), _as_wide(e, e.read(a, t), t)
    pos, length = _field_operand(e, b), _field_operand(e, c)
    width = f"splat (i64 {bits})"
    room = e.op(f"sub {_W} {width}, {_call(e, 'umin', 'u64', pos, width)}")
    past = e.op(f"icmp uge {_W} {pos}, {width}")
    fits = _call(e, "umin", "u64", length, room)
    inside = e.op(f"select {vec('i1')} {past}, {_W} zeroinitializer, {_W} {fits}")
    keep = _field_mask(e, inside)
    moved = e.op(f"lshr {_W} {x}, {_call(e, 'umin', 'u64', pos, f'splat (i64 {bits - 1})')}")
    field = e.op(f"and {_W} {moved}, {keep}")
    if is_signed(t):
        end = _call(e, "umin", "u64", e.op(f"add {_W} {pos}, {length}"), width)
        top = _call(e, "umin", "u64", e.op(f"sub {_W} {end}, splat (i64 1)"), "splat (i64 63)")
        bit = e.op(f"and {_W} {e.op(f'lshr {_W} {x}, {top}')}, splat (i64 1)")
        empty = e.op(f"icmp eq {_W} {length}, zeroinitializer")
        set_bit = e.op(f"icmp ne {_W} {bit}, zeroinitializer")
        kept = e.op(f"xor {vec('i1')} {empty}, splat (i1 true)")
        sign = e.op(f"and {vec('i1')} {set_bit}, {kept}")
        filled = e.op(f"or {_W} {field}, {e.op(f'xor {_W} {keep}, splat (i64 -1)')}")
        field = e.op(f"select {vec('i1')} {sign}, {_W} {filled}, {_W} {field}")
    e.write(d, e.convert(field, 64, bits, False), t, m)


@lower("bfi")
def _bfi(e: Emitter, ins: Instruction, m: str) -> None:
    """Insert the low ``e`` bits of ``a`` into ``b`` at bit ``c``, as the interpreter's ``bfi``."""
    _, (t,) = modifiers(ins, set(), frozenset(("b32", "b64")))
    d, f, b, c, length = operands(ins, 5)
    bits = bits_of(t)
    field, base = _as_wide(e, e.read(f, t), t), _as_wide(e, e.read(b, t), t)
    pos = _field_operand(e, c)
    shift = _call(e, "umin", "u64", pos, "splat (i64 63)")
    placed = e.op(f"shl {_W} {_field_mask(e, _field_operand(e, length))}, {shift}")
    past = e.op(f"icmp uge {_W} {pos}, splat (i64 {bits})")
    mask = e.op(f"select {vec('i1')} {past}, {_W} zeroinitializer, {_W} {placed}")
    kept = e.op(f"and {_W} {base}, {e.op(f'xor {_W} {mask}, splat (i64 -1)')}")
    inserted = e.op(f"and {_W} {e.op(f'shl {_W} {field}, {shift}')}, {mask}")
    e.write(d, e.convert(e.op(f"or {_W} {kept}, {inserted}"), 64, bits, False), t, m)


def _joined(e: Emitter, ins: Instruction) -> tuple[object, str, object]:
    """``(d, {b, a} as 64 bits, c)`` of shf and prmt, whose ``b`` is the high word."""
    d, a, b, c = operands(ins, 4)
    low, high = (e.op(f"zext {_v('u32')} {e.read(x, 'u32')} to {_W}") for x in (a, b))
    return d, e.op(f"or {_W} {e.op(f'shl {_W} {high}, splat (i64 32)')}, {low}"), c


@lower("shf")
def _shf(e: Emitter, ins: Instruction, m: str) -> None:
    """Funnel shift of ``{b, a}`` by ``c`` (mod 32, or at most 32): its high word (``.l``) or low word."""
    flags, _ = modifiers(ins, {"l", "r", "wrap", "clamp"}, frozenset(("b32",)))
    if len(flags & {"l", "r"}) != 1 or len(flags & {"wrap", "clamp"}) != 1:
        raise Unsupported("shf needs one of .l/.r and one of .wrap/.clamp")
    d, both, c = _joined(e, ins)
    n = e.read(c, "u32")
    n = e.op(f"and {_v('u32')} {n}, splat (i32 31)") if "wrap" in flags else \
        _call(e, "umin", "u32", n, "splat (i32 32)")
    by = e.op(f"zext {_v('u32')} {n} to {_W}")
    if "l" in flags:
        moved = e.op(f"lshr {_W} {e.op(f'shl {_W} {both}, {by}')}, splat (i64 32)")
    else:
        moved = e.op(f"lshr {_W} {both}, {by}")
    e.write(d, e.convert(moved, 64, 32, False), "b32", m)


@lower("prmt")
def _prmt(e: Emitter, ins: Instruction, m: str) -> None:
    """Byte ``k`` of the result is the byte of ``{b, a}`` that nibble ``k`` of ``c`` selects, or that
    byte's sign replicated where the nibble's top bit is set (the default mode only)."""
    modifiers(ins, set(), frozenset(("b32",)))
    d, both, c = _joined(e, ins)
    selector, u32 = e.read(c, "u32"), _v("u32")
    result = "zeroinitializer"
    for k in range(4):
        nibble = e.op(f"and {u32} {e.op(f'lshr {u32} {selector}, splat (i32 {4 * k})')}, splat (i32 15)")
        which = e.op(f"and {u32} {nibble}, splat (i32 7)")
        at = e.op(f"zext {u32} {e.op(f'shl {u32} {which}, splat (i32 3)')} to {_W}")
        byte = e.convert(e.op(f"and {_W} {e.op(f'lshr {_W} {both}, {at}')}, splat (i64 255)"), 64, 32, False)
        negative = e.op(f"icmp ne {u32} {e.op(f'and {u32} {byte}, splat (i32 128)')}, zeroinitializer")
        signed = e.op(f"icmp ne {u32} {e.op(f'and {u32} {nibble}, splat (i32 8)')}, zeroinitializer")
        sign = e.op(f"select {vec('i1')} {negative}, {u32} splat (i32 255), {u32} zeroinitializer")
        chosen = e.op(f"select {vec('i1')} {signed}, {u32} {sign}, {u32} {byte}")
        result = e.op(f"or {u32} {result}, {e.op(f'shl {u32} {chosen}, splat (i32 {8 * k})')}")
    e.write(d, result, "b32", m)


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
    flags, (t,) = modifiers(ins, set(_INT_CMP) | set(_FLOAT_CMP) | set(_COMBINE) | {"ftz"}, _INTS | _FLOATS)
    f = _Float(e, t, "ftz" in flags and t == "f32")
    if "ftz" in flags and not is_float(t):
        raise Unsupported(f"setp.{'.'.join(ins.mods)}")
    combine = flags & set(_COMBINE)
    cmps = flags - combine - {"ftz"}
    if len(cmps) != 1 or len(combine) > 1:
        raise Unsupported(f"setp.{'.'.join(ins.mods)}")
    ops = operands(ins, 4 if combine else 3)
    first, second = (ops[0].first, ops[0].second) if isinstance(ops[0], Pair) else (ops[0], None)
    cmp = cmps.pop()

    def lanes() -> str:
        return compare(e, cmp, t, f.read(ops[1]), f.read(ops[2]))

    result = (None if is_float(t) else lane_compare(e, cmp, t, ops[1], ops[2], lanes)) or lanes()
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
    _, (t,) = modifiers(ins, set(), _INTS | _FLOATS)
    d, a, b, c = operands(ins, 4)
    x, y, p = e.read(a, t), e.read(b, t), e.read(c, "pred")
    e.write(d, e.op(f"select {vec('i1')} {p}, {_v(t)} {x}, {_v(t)} {y}"), t, m)


@lower("mov")
def _mov(e: Emitter, ins: Instruction, m: str) -> None:
    _, (t,) = modifiers(ins, set(), _INTS | _FLOATS | {"pred"})
    d, a = operands(ins, 2)
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
