"""``cvt`` and ``cvta`` as vector IR (PTX ISA 9.7.9.21 / 9.7.9.22), as :func:`..ops_data.convert` computes.

Integer -> integer conversions truncate or extend by the source's signedness; ``.sat`` clamps.
Float -> integer conversions round as the ``.rni/.rzi/.rmi/.rpi`` modifier says and saturate
(NaN -> 0): LLVM's ``fptosi.sat`` / ``fptoui.sat``.  Integer -> float and f64 -> f32 round to
nearest even (``.rn``), f32 -> f64 is exact; between floats ``.ftz`` flushes f32 subnormals and
``.sat`` clamps to [0, 1]; other roundings, and ``.ftz``/``.sat`` elsewhere, are refused.
"""

from __future__ import annotations

from ..memory import WINDOWS
from ..parse import Instruction, Sym
from .emit import Emitter
from .ops import ROUND_TO_INT, flush, lower, saturate
from .values import Unsupported, bits_of, elem, int_elem, is_float, is_signed, signed_literal, vec

__all__: list[str] = []

_INT = frozenset(f"{k}{w}" for k in "us" for w in (8, 16, 32, 64))
_FLOAT = frozenset(("f32", "f64"))


def _v(t: str) -> str:
    return vec(elem(t))


def _intrinsic(e: Emitter, name: str, ret: str, arg: str, value: str) -> str:
    e.intrinsic(f"declare {vec(ret)} @llvm.{name}({vec(arg)})")
    return e.op(f"call {vec(ret)} @llvm.{name}({vec(arg)} {value})")


def _suffix(t: str) -> str:
    return "v32f32" if t == "f32" else "v32f64" if t == "f64" else f"v32{int_elem(bits_of(t))}"


def _clamp(e: Emitter, x: str, src: str, dst: str) -> str:
    """``cvt.sat`` between integers: clamp ``x`` to the destination's range first."""
    bits_s, bits_d = bits_of(src), bits_of(dst)
    lo_d = -(1 << (bits_d - 1)) if is_signed(dst) else 0
    hi_d = (1 << (bits_d - 1)) - 1 if is_signed(dst) else (1 << bits_d) - 1
    lo_s = -(1 << (bits_s - 1)) if is_signed(src) else 0
    hi_s = (1 << (bits_s - 1)) - 1 if is_signed(src) else (1 << bits_s) - 1
    sign = "s" if is_signed(src) else "u"
    vt = _v(src)
    if lo_d > lo_s:
        low = e.op(f"icmp {sign}lt {vt} {x}, splat (i{bits_s} {lo_d})")
        x = e.op(f"select {vec('i1')} {low}, {vt} splat (i{bits_s} {lo_d}), {vt} {x}")
    if hi_d < hi_s:
        high = e.op(f"icmp {sign}gt {vt} {x}, splat (i{bits_s} {hi_d})")
        x = e.op(f"select {vec('i1')} {high}, {vt} splat (i{bits_s} {hi_d}), {vt} {x}")
    return x


@lower("cvt")
def _cvt(e: Emitter, ins: Instruction, m: str) -> None:
    mods = ins.mods
    if len(mods) < 2 or mods[-1] not in _INT | _FLOAT or mods[-2] not in _INT | _FLOAT:
        raise Unsupported(f"cvt.{'.'.join(mods)}")
    dst, src = mods[-2], mods[-1]
    flags = set(mods[:-2])
    d, a = ins.operands if len(ins.operands) == 2 else (None, None)
    if d is None:
        raise Unsupported("cvt with packed operands")
    x = e.read(a, src)
    if not is_float(src) and not is_float(dst):
        if flags - {"sat"}:
            raise Unsupported(f"cvt.{'.'.join(mods)}")
        if "sat" in flags:
            x = _clamp(e, x, src, dst)
        e.write(d, e.convert(x, bits_of(src), bits_of(dst), is_signed(src)), dst, m)
        return
    if is_float(src) and not is_float(dst):  # always saturating, NaN -> 0
        rounding = flags & set(ROUND_TO_INT)
        if flags - set(ROUND_TO_INT) or len(rounding) > 1:
            raise Unsupported(f"cvt.{'.'.join(mods)}")
        how = ROUND_TO_INT[rounding.pop() if rounding else "rzi"]
        x = _intrinsic(e, f"{how}.{_suffix(src)}", elem(src), elem(src), x)
        sat = "fptosi.sat" if is_signed(dst) else "fptoui.sat"
        e.write(d, _intrinsic(e, f"{sat}.{_suffix(dst)}.{_suffix(src)}", elem(dst), elem(src), x), dst, m)
        return
    if not is_float(src):  # int -> float, round to nearest
        if flags - {"rn"}:
            raise Unsupported(f"cvt.{'.'.join(mods)}")
        how = "sitofp" if is_signed(src) else "uitofp"
        e.write(d, e.op(f"{how} {_v(src)} {x} to {_v(dst)}"), dst, m)
        return
    # float -> float: .ftz flushes an f32 operand and an f32 result, then .sat clamps
    ftz, sat = "ftz" in flags, "sat" in flags
    flags -= {"ftz", "sat"}
    if ftz and src == "f32":
        x = flush(e, x)
    rounding = flags & set(ROUND_TO_INT)
    if rounding:  # cvt.rni.f32.f32: round to an integer value in float
        if flags - rounding or len(rounding) > 1 or src != dst:
            raise Unsupported(f"cvt.{'.'.join(mods)}")
        value = _intrinsic(e, f"{ROUND_TO_INT[rounding.pop()]}.{_suffix(src)}", elem(src), elem(src), x)
    elif flags - {"rn"}:
        raise Unsupported(f"cvt.{'.'.join(mods)}")
    elif src == dst:
        value = x
    elif src == "f32":
        value = e.op(f"fpext {_v(src)} {x} to {_v(dst)}")
    else:
        value = e.op(f"fptrunc {_v(src)} {x} to {_v(dst)}")
    if ftz and dst == "f32":
        value = flush(e, value)
    e.write(d, saturate(e, value, dst) if sat else value, dst, m)


@lower("cvta")
def _cvta(e: Emitter, ins: Instruction, m: str) -> None:
    flags = set(ins.mods[:-1])
    t = ins.mods[-1] if ins.mods else ""
    spaces = flags - {"to"}
    if (
        t not in ("u32", "u64")
        or len(spaces) != 1
        or spaces - {"global", "shared", "local", "const", "param", "shared::cta"}
    ):
        raise Unsupported(f"cvta.{'.'.join(ins.mods)}")
    space = spaces.pop().split("::")[0]
    d, a = ins.operands
    width = bits_of(t)
    window = WINDOWS.get(space, 0)
    delta = (-window if "to" in flags else window) % (1 << width)
    if isinstance(a, Sym):
        e.write(d, e.constant((e.symbol_address(a) + window) % (1 << width), t), t, m)
        return
    x = e.read(a, t)
    if delta:
        x = e.op(f"add {_v(t)} {x}, splat (i{width} {signed_literal(delta, width)})")
    e.write(d, x, t, m)
