"""rustc's LLVM IR (opaque pointers) rewritten in the LLVM 7 dialect libNVVM reads below sm_100.

libNVVM 13.5 parses IR for sm_90 and older with an LLVM 7 reader, which has
typed pointers and none of the attributes, flags and intrinsics LLVM added
since.  rustc 1.96 writes LLVM 22.  The rewrite is the one cuda-oxide's
exporter makes for that dialect, applied to rustc's text: every pointer is a
byte pointer (``ptr addrspace(N)`` -> ``i8 addrspace(N)*``), cast to the
exact pointer type right before each instruction that needs one (``load``,
``store``, ``getelementptr``, ``alloca``, ``cmpxchg``, ``atomicrmw``), and
globals and functions used as values are cast to byte pointers.  What only
informs the optimiser is dropped (attributes, metadata, ``nuw``/``disjoint``
/``nneg``/``samesign`` flags; ``poison`` becomes the weaker ``undef``),
``fneg x`` becomes ``fsub -0.0, x``, the integer ``min``/``max``/``abs``
intrinsics (LLVM 12) become ``icmp`` + ``select``, and the float intrinsics
libNVVM's LLVM 7 lacks or refuses (``fabs``, ``round``, ``maximumnum``,
``fptosi.sat``...) the libdevice functions that compile to the instructions
rustc's own PTX has for them.  Kernels keep
``ptx_kernel`` and are also named in ``!nvvm.annotations``, as LLVM 7 NVVM
IR marks them.

What LLVM 7 cannot state is refused with a :class:`CompileError` naming the
line (``freeze``, ``byval``/``sret`` parameters, whose pointee type the byte
pointer would lose, constant ``getelementptr`` on a non-byte type).  An
indirect call (``core::fmt`` calls through ``dyn Write``) casts its byte
pointer callee to the function type its arguments state; anything else
libNVVM cannot read fails there, its log attached.  No instruction changes
meaning: every rewrite is a cast or a dropped hint, and libNVVM's verifier
type-checks the result.
"""

from __future__ import annotations

import re

from ptxbridge.abi.errors import CompileError

__all__ = ["LLVM_MAJOR", "downgrade"]

LLVM_MAJOR = 7

_QUOTED = re.compile(r'c?"[^"]*"')
_PTR = re.compile(r"(?<![\w%@.$\"-])ptr(?: addrspace\((\d+)\))?(?![\w.$-])")
_ATTRS = re.compile(r"\b(?:noundef|nonnull|noalias|nocapture|readonly|writeonly|readnone|immarg|returned|"
                    r"nofree|dead_on_unwind|writable|noinline|nocreateundeforpoison|align \d+|"
                    r"dereferenceable(?:_or_null)?\(\d+\)|"
                    r"(?:range|captures|initializes|nofpclass|memory)\((?:[^()]|\([^()]*\))*\))"
                    r"(?: |(?=[,)]))")
_REFUSED = [
    (re.compile(r"(?<![%@\w.$-])(?:freeze|byval|sret|inalloca|preallocated|elementtype)\b"), "{}"),
    (re.compile(r"getelementptr (?:inbounds )?\((?!i8,)"), "a constant getelementptr on a non-byte type")]
_FLAGS = [
    (re.compile(r"\bgetelementptr( inbounds)?(?: (?:nuw|nusw|inrange\([^)]*\)))+"), r"getelementptr\1"),
    (re.compile(r"\bor disjoint\b"), "or"), (re.compile(r"\b(zext|uitofp) nneg\b"), r"\1"),
    (re.compile(r"\btrunc(?: nuw| nsw)+\b"), "trunc"), (re.compile(r"\bicmp samesign\b"), "icmp"),
    (re.compile(r"\bpoison\b"), "undef"), (re.compile(r" #\d+\b"), ""),
    (re.compile(r",? !(?!nvvm)[\w.]+ !(?:\d+|\{[^}]*\})"), ""),
    (re.compile(r"@llvm\.([\w.]+?)\.p(\d+)(?=[.(\s]|$)"), r"@llvm.\1.p\2i8"),  # overloads on byte pointers
    (re.compile(r"(@llvm\.[\w.]+\.p\d+i8)\.p(\d+)\b"), r"\1.p\2i8")]
_RESULT = r"^(\s*)(%[-\w.$]+) = "
_LOAD = re.compile(_RESULT + r"load ((?:atomic )?(?:volatile )?)(.*)$")
_STORE = re.compile(r"^(\s*)store ((?:atomic )?(?:volatile )?)(.*)$")
_GEP = re.compile(_RESULT + r"getelementptr ((?:inbounds )?)(.*)$")
_ALLOCA = re.compile(_RESULT + r"alloca (.*)$")
_ATOMIC = re.compile(_RESULT + r"(cmpxchg (?:weak )?(?:volatile )?|atomicrmw (?:volatile )?\w+ )(.*)$")
_FNEG = re.compile(_RESULT + r"fneg ((?:\w+ )*?)(half|float|double) (.*)$")
_INDIRECT = re.compile(r"^(\s*(?:%[-\w.$]+ = )?(?:tail |musttail |notail )?call (?:fastcc |ccc )?)"
                       r"((?:zeroext |signext |inreg )*)([^%@(]+?) (%[-\w.$]+)\((.*)\)$")
_SPLAT = re.compile(r"(<(\d+) x [^<>]+>)((?: [^,<>()]*,)? )splat \(([^()]+)\)")
_SATURATING = re.compile(_RESULT + r"(?:tail )?call (i\d+) @llvm\.([us](?:add|sub))\.sat\.i\d+\((.*)\)$")
_NUMBERED_BLOCK = re.compile(r"^\d+:(?=\s)", re.MULTILINE)
_MINMAX = re.compile(_RESULT + r"(?:tail )?call (i\d+) @llvm\.(umin|umax|smin|smax|abs)\.i\d+\((.*)\)$")
_DEFINE = re.compile(r"^(define|declare) (.*?)(@[-\w.$]+|@\x00\d+\x00)\((.*)\)(.*)$")
_GLOBAL = re.compile(r"^(@[-\w.$]+|@\x00\d+\x00) = (?:[a-z_]+ )*?(?:addrspace\((\d+)\) )?"
                     r"(?:global|constant) (.*)$")
_STRUCT = re.compile(r"^(%[-\w.$]+|%\x00\d+\x00) = type (.*)$")
_KEYWORDS = re.compile(r"\b(?:private|internal|available_externally|linkonce|weak|common|appending|"
                       r"extern_weak|"
                       r"linkonce_odr|weak_odr|external|default|hidden|protected|dso_local|dso_preemptable|"
                       r"ptx_kernel|ptx_device|zeroext|signext|inreg|unnamed_addr|local_unnamed_addr) ")
_SPACE = re.compile(r" addrspace\(\d+\)\*+")
_MINUS_ZERO = {"half": "0xH8000", "float": "-0.000000e+00", "double": "-0.000000e+00"}
_SELECT = {"umin": "ult", "umax": "ugt", "smin": "slt", "smax": "sgt"}
# intrinsics libNVVM's LLVM 7 lacks or refuses, as the libdevice function that compiles to the very
# instruction rustc's own PTX has for them (abs.f32, cvt.rni, cvt.rzi with saturation, max.f32 ...)
_LIBDEVICE = {f"{name}.{t}": f"__nv_{fn}{'f' if t == 'f32' else ''}"
              for name, fn in (("fabs", "fabs"), ("rint", "rint"), ("nearbyint", "rint"), ("round", "round"),
                               ("maximumnum", "fmax"), ("minimumnum", "fmin"))
              for t in ("f32", "f64")}
_LIBDEVICE |= {f"fpto{sign}i.sat.i{bits}.{t}": f"__nv_{src}2{'' if sign == 's' else 'u'}{dst}_rz"
               for sign in "su" for bits, dst in ((32, "int"), (64, "ll"))
               for t, src in (("f32", "float"), ("f64", "double"))}
_INTRINSIC = re.compile(r"@llvm\.((?:fabs|rint|nearbyint|round|maximumnum|minimumnum|fpto[su]i\.sat\.i\d+)"
                        r"\.f(?:32|64))\b")


def _scan(text: str, start: int = 0, stop: str = ",") -> int:
    """Index of the first ``stop`` character outside brackets at or after ``start`` (else the end)."""
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        elif depth == 0 and c in stop:
            return i
    return len(text)


def _closing(text: str, opening: int) -> int:
    """Index of the bracket that closes the one at ``opening`` (else the end)."""
    depth = 0
    for i in range(opening, len(text)):
        depth += (text[i] in "([{<") - (text[i] in ")]}>")
        if depth == 0:
            return i
    return len(text)


def _split(text: str) -> list[str]:
    """``text`` cut at its top-level commas."""
    parts, start = [], 0
    while start <= len(text):
        end = _scan(text, start)
        parts.append(text[start:end].strip())
        start = end + 1
    return [p for p in parts if p]


def _typed(operand: str) -> tuple[str, str]:
    """``i8 addrspace(1)* %p`` -> (``i8 addrspace(1)*``, ``%p``): a typed operand cut into its parts."""
    cut = _scan(operand, 0, " ")
    space = _SPACE.match(operand, cut)
    cut = space.end() if space else cut
    return operand[:cut], operand[cut:].strip()


def _operand(text: str) -> tuple[str, str]:
    """``i8* %p syncscope("x") acquire, align 4`` -> (``i8* %p``, the rest): one typed operand first."""
    kind, rest = _typed(text)
    start = len(text) - len(rest)
    word = re.match(r"[a-z]+(?: [a-z]+)* \(", rest)  # a constant expression: bitcast (..), getelementptr (..)
    end = _closing(text, start + word.end() - 1) + 1 if word else _scan(text, start, " ,")
    return f"{kind} {text[start:end]}", text[end:]


def _pointer(kind: str, like: str) -> str:
    """``kind*`` in the address space of the byte pointer type ``like``."""
    space = re.search(r" addrspace\(\d+\)", like)
    return f"{kind}{space.group(0) if space else ''}*"


class _Rewriter:
    """One module's rewrite: the struct, global and function types it declares, and fresh names."""

    def __init__(self, lines: list[str]) -> None:
        self.structs: dict[str, str] = {}
        self.values: dict[str, str] = {}  # global or function -> its pointer type
        self.kernels: list[str] = []
        self.fresh = 0
        for line in lines:
            if (struct := _STRUCT.match(line)) is not None:
                self.structs[struct.group(1)] = struct.group(2)
            elif (glob := _GLOBAL.match(line)) is not None:
                kind = _typed(glob.group(3) + " x")[0]
                space = f" addrspace({glob.group(2)})" if glob.group(2) else ""
                self.values[glob.group(1)] = f"{kind}{space}*"
            elif (define := _DEFINE.match(line)) is not None:
                params = ", ".join(_typed(p + " x")[0] if p != "..." else p
                                   for p in _split(_ATTRS.sub("", define.group(4) + " ")))
                returns = _KEYWORDS.sub("", _ATTRS.sub("", define.group(2))).strip()
                self.values[define.group(3)] = f"{returns} ({params})*"
                if define.group(1) == "define" and "ptx_kernel" in define.group(2):
                    self.kernels.append(define.group(3))

    def name(self) -> str:
        self.fresh += 1
        return f"%.pb{self.fresh}"

    def cast(self, indent: str, pointer: str, kind: str, out: list[str]) -> str:
        """A fresh ``bitcast`` of the byte pointer operand ``pointer`` to ``kind*``; its name."""
        ptype, value = _typed(pointer)
        fresh = self.name()
        out.append(f"{indent}{fresh} = bitcast {ptype} {value} to {_pointer(kind, ptype)}")
        return fresh

    def indexed(self, kind: str, indices: list[str]) -> str:
        """The type a ``getelementptr`` on ``kind`` with ``indices`` (after the first) points to."""
        for index in indices:
            kind = self.structs.get(kind, kind)
            if kind.startswith(("{", "<{")):
                field = int(_typed(index)[1])
                kind = _split(kind.strip("<>{} "))[field]
            elif kind.startswith(("[", "<")):
                kind = kind[kind.index(" x ") + 3:-1].strip()
            else:
                raise CompileError(f"cannot index into {kind} in getelementptr")
        return kind

    def instruction(self, line: str) -> list[str]:
        out: list[str] = []
        if (m := _LOAD.match(line)) is not None:
            kind, rest = m.group(4)[:_scan(m.group(4))], m.group(4)[_scan(m.group(4)) + 1:].strip()
            pointer, tail = _operand(rest)
            fresh = self.cast(m.group(1), pointer, kind, out)
            out.append(f"{m.group(1)}{m.group(2)} = load {m.group(3)}{kind}, {_pointer(kind, pointer)} "
                       f"{fresh}{tail}")
        elif (m := _STORE.match(line)) is not None:
            value, rest = _operand(m.group(3))
            pointer, tail = _operand(rest.lstrip(", "))
            kind = _typed(value)[0]
            fresh = self.cast(m.group(1), pointer, kind, out)
            out.append(f"{m.group(1)}store {m.group(2)}{value}, {_pointer(kind, pointer)} {fresh}{tail}")
        elif (m := _GEP.match(line)) is not None:
            kind, base, *indices = _split(m.group(4))
            target = self.indexed(kind, indices[1:])
            if kind == "i8" == target:
                return [f"{m.group(1)}{m.group(2)} = getelementptr {m.group(3)}{m.group(4)}"]
            fresh = self.cast(m.group(1), base, kind, out)
            typed, ptype = self.name(), _typed(base)[0]
            out.append(f"{m.group(1)}{typed} = getelementptr {m.group(3)}{kind}, {_pointer(kind, ptype)} "
                       f"{fresh}, " + ", ".join(indices))
            out.append(f"{m.group(1)}{m.group(2)} = bitcast {_pointer(target, ptype)} {typed} to {ptype}")
        elif (m := _ALLOCA.match(line)) is not None:
            kind, fresh = _split(m.group(3))[0], self.name()
            out.append(f"{m.group(1)}{fresh} = alloca {m.group(3)}")
            out.append(f"{m.group(1)}{m.group(2)} = bitcast {kind}* {fresh} to i8*")
        elif (m := _ATOMIC.match(line)) is not None:
            pointer, value, *rest = _split(re.sub(r", align \d+$", "", m.group(4)))  # LLVM 13 added align
            kind = _typed(value)[0]
            fresh = self.cast(m.group(1), pointer, kind, out)
            out.append(f"{m.group(1)}{m.group(2)} = {m.group(3)}{_pointer(kind, pointer)} {fresh}, "
                       + ", ".join([value, *rest]))
        elif (m := _FNEG.match(line)) is not None:
            out.append(f"{m.group(1)}{m.group(2)} = fsub {m.group(3)}{m.group(4)} {_MINUS_ZERO[m.group(4)]}, "
                       f"{m.group(5)}")
        elif (m := _MINMAX.match(line)) is not None:
            out += self.min_max(m)
        elif (m := _SATURATING.match(line)) is not None:
            out += self.saturating(m)
        elif (m := _INDIRECT.match(line)) is not None:  # the callee is a byte pointer: cast it
            indent = re.match(r"\s*", line).group(0)
            kinds = ", ".join(_typed(a)[0] for a in _split(m.group(5)))
            fresh = self.name()
            out.append(f"{indent}{fresh} = bitcast i8* {m.group(4)} to {m.group(3)} ({kinds})*")
            out.append(f"{m.group(1)}{m.group(2)}{m.group(3)} {fresh}({m.group(5)})")
        else:
            out.append(line)
        return out

    def min_max(self, m: re.Match[str]) -> list[str]:
        """``llvm.umin``/``umax``/``smin``/``smax``/``abs`` (LLVM 12) as ``icmp`` + ``select``."""
        indent, result, kind, op = m.group(1), m.group(2), m.group(3), m.group(4)
        a, b = (_typed(x)[1] for x in _split(m.group(5))[:2])
        test = self.name()
        if op == "abs":
            negated = self.name()
            return [f"{indent}{test} = icmp slt {kind} {a}, 0", f"{indent}{negated} = sub {kind} 0, {a}",
                    f"{indent}{result} = select i1 {test}, {kind} {negated}, {kind} {a}"]
        return [f"{indent}{test} = icmp {_SELECT[op]} {kind} {a}, {b}",
                f"{indent}{result} = select i1 {test}, {kind} {a}, {kind} {b}"]

    def saturating(self, m: re.Match[str]) -> list[str]:
        """``llvm.{u,s}{add,sub}.sat`` (LLVM 8; Rust's ``saturating_add`` / ``saturating_sub``): the
        wrapping operation, an overflow test in plain integer instructions (libNVVM's overflow
        intrinsics take no i8), and a ``select`` of the bound it passed."""
        indent, result, kind, op = m.group(1), m.group(2), m.group(3), m.group(4)
        a, b = (_typed(x)[1] for x in _split(m.group(5))[:2])
        bits = int(kind[1:])
        value, over = self.name(), self.name()
        lines = [f"{indent}{value} = {op[1:]} {kind} {a}, {b}"]
        if op[0] == "u":  # a sum wrapped when it is below a; a difference when b > a
            test = f"icmp ult {kind} {value}, {a}" if op == "uadd" else f"icmp ult {kind} {a}, {b}"
            bound = _signed((1 << bits) - 1, bits) if op == "uadd" else 0
            return [*lines, f"{indent}{over} = {test}",
                    f"{indent}{result} = select i1 {over}, {kind} {bound}, {kind} {value}"]
        # signed: overflow when the result's sign differs from a's and from b's (sub: b's flipped)
        x, y, both, negative, bound = (self.name() for _ in range(5))
        other = b if op == "sadd" else a
        lines += [f"{indent}{x} = xor {kind} {a}, {value}",
                  f"{indent}{y} = xor {kind} {other}, {value if op == 'sadd' else b}",
                  f"{indent}{both} = and {kind} {x}, {y}", f"{indent}{over} = icmp slt {kind} {both}, 0",
                  f"{indent}{negative} = icmp slt {kind} {a}, 0",
                  f"{indent}{bound} = select i1 {negative}, {kind} {-(1 << (bits - 1))}, {kind} "
                  f"{(1 << (bits - 1)) - 1}",
                  f"{indent}{result} = select i1 {over}, {kind} {bound}, {kind} {value}"]
        return lines

    def values_as_bytes(self, line: str) -> str:
        """Globals and functions used as byte pointers, cast to them (``i8* bitcast (T* @g to i8*)``)."""
        def cast(m: re.Match[str]) -> str:
            own = self.values.get(m.group(2))
            if own is None or own == m.group(1):
                return m.group(0)
            return f"{m.group(1)} bitcast ({own} {m.group(2)} to {m.group(1)})"

        return re.sub(r"(i8(?: addrspace\(\d+\))?\*) (@[-\w.$]+|@\x00\d+\x00)", cast, line)


def _signed(value: int, bits: int) -> int:
    """``value`` as LLVM prints an integer constant of ``bits`` bits (two's complement, signed)."""
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def _splat(m: re.Match[str]) -> str:
    return f"{m.group(1)}{m.group(3)}<{', '.join([m.group(4)] * int(m.group(2)))}>"


def downgrade(ir: bytes) -> bytes:
    """rustc's LLVM IR text in libNVVM's LLVM 7 dialect (see the module docstring)."""
    literals: dict[str, str] = {}

    def mask(m: re.Match[str]) -> str:
        return literals.setdefault(m.group(0), f"\x00{len(literals)}\x00")

    text = _QUOTED.sub(mask, ir.decode("utf-8", "surrogateescape"))
    # attribute groups, metadata and comments go; their lines stay (empty) so errors cite rustc's numbers
    dropped = ("attributes #", "!", ";")
    text = "\n".join("" if line.startswith(dropped) else line for line in text.splitlines())
    # a numbered block label (`36:`, LLVM 8+) is implicit in LLVM 7: a block after a terminator
    # takes the next number, which is the one rustc's numbering gives it
    text = _NUMBERED_BLOCK.sub("", text)
    # `splat (i8 -65)` (LLVM 19) is the vector constant `<i8 -65, i8 -65, ...>` of the operand's type
    text = _SPLAT.sub(_splat, text)
    text = _PTR.sub(lambda m: f"i8 addrspace({m.group(1)})*" if m.group(1) else "i8*", text)
    for pattern, replacement in _FLAGS:
        text = pattern.sub(replacement, text)
    lines = text.splitlines()
    rewriter = _Rewriter(lines)
    out: list[str] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, 1):
        for pattern, what in _REFUSED:
            if (refused := pattern.search(line)) is not None:
                raise CompileError(f"rust: LLVM 7 NVVM IR (libNVVM below sm_100) cannot state "
                                   f"{what.format(repr(refused.group(0)))} of rustc's IR line {number}: "
                                   f"{line.strip()[:160]}; use sm_100 or newer, or output='ptx'")
        if line.startswith(("define ", "declare ")) or re.search(r"\bcall ", line):
            line = _ATTRS.sub("", line + " ").rstrip()
        if line.startswith("define "):  # LLVM 7 numbers unnamed parameters itself and reads no "%0" there
            line = re.sub(r" %\d+(?=[,)])", "", line)
        if re.search(r"@llvm\.(?:lifetime\.|experimental\.noalias\.scope\.decl)|"
                     r"^declare .*@llvm\.(?:umin|umax|smin|smax|abs|[us](?:add|sub)\.sat)\.", line):
            continue  # lifetime and scope markers are hints (LLVM 12+); min/max/abs are lowered
        line = _INTRINSIC.sub(lambda m: f"@{_LIBDEVICE.get(m.group(1), 'llvm.' + m.group(1))}", line)
        if (declared := _DEFINE.match(line)) is not None and declared.group(1) == "declare":
            if declared.group(3) in seen:
                continue  # llvm.rint and llvm.nearbyint are both __nv_rintf
            seen.add(declared.group(3))
        out += [rewriter.values_as_bytes(x) for x in rewriter.instruction(line)]
    annotations = [f"!{i} = !{{{rewriter.values[k]} {k}, !\"kernel\", i32 1}}"
                   for i, k in enumerate(rewriter.kernels)]
    if annotations:
        out += ["", "!nvvm.annotations = !{" + ", ".join(f"!{i}" for i in range(len(annotations))) + "}",
                *annotations]
    text = "\n".join(out) + "\n"
    for literal, placeholder in literals.items():
        text = text.replace(placeholder, literal)
    return text.encode("utf-8", "surrogateescape")
