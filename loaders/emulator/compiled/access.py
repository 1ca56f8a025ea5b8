"""IR of the memory helpers a kernel's accesses call: checked, hoisted and raw loads and stores.

``@ptxb.load_iN`` / ``@ptxb.store_iN`` check an access and then move ``count`` elements per lane: when every
lane is active and points at consecutive elements (the common ``a[i]``), the check is two scalar
compares against the region table; otherwise ``@ptxb.access`` runs the full check of ``@resolve``.
``@ptxb.span`` gives the OR, minimum and maximum of a base register's active lanes and how they
fall (:mod:`.direct`) once per block, and
``@ptxb.hoisted`` checks an access ``[%r+off]`` from them, so an unrolled loop reading ``[%r]``,
``[%r+4]``, ``[%r+8]``... through one register checks it once (the interpreter's ``shared_base``).
``@ptxb.lanes`` writes the lanes' addresses of an access through a register a warp keeps as one
scalar, for the full check, from the scalar and a table of the lanes' steps.
``@ptxb.fetch_iN`` / ``@ptxb.put_iN`` move the values once checked: a masked vector access when the lanes'
pointers are consecutive, else a gather or scatter.  Values travel through the warp's ``%val``
buffer (256 bytes per element).

The helpers are the same for every kernel: they form one module (:func:`runtime_ir`), compiled
once and loaded beside each kernel's object (:mod:`.jit`), whose IR only declares them
(:data:`HELPERS`).  Their names start with ``ptxb.``, which no C library symbol does.
"""

from __future__ import annotations

from .direct import WHOLE
from .emit import LANE_IDS
from .runtime import DECLARATIONS, field, shared_ir
from .values import vec

__all__ = ["runtime_ir", "HELPERS"]

_WIDTHS = (8, 16, 32, 64)
_M = vec("i1")

_COMMON = f"""
; the checked access of a warp, out of line: addresses and lane indices by pointer, the mask as bits
define i32 @ptxb.access(ptr %ctx, ptr %addrp, i32 %bits, i64 %size, i1 %write, i64 %ext,
                            i32 %first, ptr %out) noinline {{
  %addr = load <32 x i64>, ptr %addrp
  %fh = insertelement <32 x i32> poison, i32 %first, i32 0
  %fs = shufflevector <32 x i32> %fh, <32 x i32> poison, <32 x i32> zeroinitializer
  %lanes = add <32 x i32> %fs, {LANE_IDS}
  %lin = zext <32 x i32> %lanes to <32 x i64>
  %m = bitcast i32 %bits to <32 x i1>
  %r = call i32 @resolve(ptr %ctx, <32 x i64> %addr, <32 x i1> %m, i64 %size, i1 %write, i64 %ext,
                         <32 x i64> %lin, ptr %out)
  ret i32 %r
}}

; the lanes' addresses of an access through a register the warp keeps as one scalar (lane 0's):
; %scalar plus each lane's step from the table %steps, wrapped to 32 bits for a 32-bit register
; (%narrow), plus the instruction's %offset, into %out; the checked path's addresses, made here
; rather than on the block's main line, where the fast paths need only the scalar
define void @ptxb.lanes(ptr %out, i64 %scalar, ptr %steps, i1 %narrow, i64 %offset) noinline {{
  %st = load <32 x i64>, ptr %steps
  %sh = insertelement <32 x i64> poison, i64 %scalar, i32 0
  %ss = shufflevector <32 x i64> %sh, <32 x i64> poison, <32 x i32> zeroinitializer
  %sum = add <32 x i64> %ss, %st
  %low = and <32 x i64> %sum, splat (i64 4294967295)
  %lanes = select i1 %narrow, <32 x i64> %low, <32 x i64> %sum
  %oh = insertelement <32 x i64> poison, i64 %offset, i32 0
  %os = shufflevector <32 x i64> %oh, <32 x i64> poison, <32 x i32> zeroinitializer
  %addr = add <32 x i64> %lanes, %os
  store <32 x i64> %addr, ptr %out
  ret void
}}

; the pointer offset of an access whose lanes span [lo, hi] (aligned when %bits is), or -1 when the
; full check must decide: no active lane, misaligned, outside its argument's extent %ext or one
; region, read-only, per-thread
define i64 @ptxb.hoisted(ptr %ctx, i64 %lo, i64 %hi, i64 %bits, i64 %size, i1 %write,
                             i64 %ext) noinline {{
entry:
  %low = sub i64 %size, 1
  %mis = and i64 %bits, %low
  %aligned = icmp eq i64 %mis, 0
  %ordered = icmp ule i64 %lo, %hi
  %ok = and i1 %aligned, %ordered
  br i1 %ok, label %kept, label %no
kept:
  %in = call i1 @within(ptr %ctx, i64 %ext, i64 %lo, i64 %hi, i64 %size, i1 %write, i1 false)
  br i1 %in, label %look, label %no
look:
  %row = call i64 @find(ptr %ctx, i64 %lo, i64 %hi, i64 %size)
  %found = icmp sge i64 %row, 0
  br i1 %found, label %row.ok, label %no
row.ok:
  %rp = call ptr @row(ptr %ctx, i64 {field("regions")}, i64 %row)
  %fp = getelementptr i64, ptr %rp, i64 3
  %flags = load i64, ptr %fp
  %per = and i64 %flags, 2
  %ro = xor i64 %flags, 1
  %rw = and i64 %ro, 1
  %rwbad = icmp ne i64 %rw, 0
  %bad1 = and i1 %rwbad, %write
  %bad2 = icmp ne i64 %per, 0
  %bad = or i1 %bad1, %bad2
  br i1 %bad, label %no, label %yes
yes:
  %dp = getelementptr i64, ptr %rp, i64 2
  %d = load i64, ptr %dp
  ret i64 %d
no:
  ret i64 -1
}}
"""



def _group_kind(j: int) -> str:
    """IR: ``%kj`` (shifted: ``%sj``), the class of lanes ``8j..8j+7`` for ``@pattern``."""
    lanes = ", ".join(f"i32 {8 * j + k}" for k in range(8))
    shifted = f"  %s{j} = shl i32 %k{j}, {8 * j}\n" if j else ""
    return f"""
  %p{j} = shufflevector <32 x i64> %v, <32 x i64> poison, <8 x i32> <{lanes}>
  %m{j} = shufflevector <32 x i1> %m, <32 x i1> poison, <8 x i32> <{lanes}>
  %f{j} = extractelement <8 x i64> %p{j}, i32 0
  %fh{j} = insertelement <8 x i64> poison, i64 %f{j}, i32 0
  %fs{j} = shufflevector <8 x i64> %fh{j}, <8 x i64> poison, <8 x i32> zeroinitializer
  %e{j} = add <8 x i64> %fs{j}, %steps
  %ce{j} = icmp eq <8 x i64> %p{j}, %e{j}
  %cn{j} = call i1 @llvm.vector.reduce.and.v8i1(<8 x i1> %ce{j})
  %ue{j} = icmp eq <8 x i64> %p{j}, %fs{j}
  %un{j} = call i1 @llvm.vector.reduce.and.v8i1(<8 x i1> %ue{j})
  %an{j} = call i1 @llvm.vector.reduce.or.v8i1(<8 x i1> %m{j})
  %one{j} = and i1 %un{j}, %an{j}
  %ko{j} = select i1 %one{j}, i32 1, i32 2
  %k{j} = select i1 %cn{j}, i32 0, i32 %ko{j}
{shifted}"""


_ADMIT = f"""
; the pointer offset of an aligned, ordered span [lo, hi] of first addresses at an instruction's
; site (.direct), or -1 when the full check must decide (as @ptxb.hoisted); on success the site
; remembers the span any later access of the instruction may have with that offset: the region
; cut to the argument's extent (lowest address, highest first address, offset)
define i64 @ptxb.admit(ptr %ctx, i64 %lo, i64 %hi, i64 %size, i1 %write, i64 %ext, ptr %site) noinline {{
entry:
  %delta = call i64 @ptxb.hoisted(ptr %ctx, i64 %lo, i64 %hi, i64 %lo, i64 %size, i1 %write, i64 %ext)
  %no = icmp eq i64 %delta, -1
  br i1 %no, label %out, label %keep
keep:
  %hp = getelementptr i64, ptr %ctx, i64 {field("hint")}
  %row = load i64, ptr %hp
  %rp = call ptr @row(ptr %ctx, i64 {field("regions")}, i64 %row)
  %base = load i64, ptr %rp
  %ep = getelementptr i64, ptr %rp, i64 1
  %end = load i64, ptr %ep
  %none = icmp eq i64 %ext, 0
  br i1 %none, label %store, label %cut
cut:
  %xp = call ptr @row(ptr %ctx, i64 {field("extents")}, i64 %ext)
  %xbase = load i64, ptr %xp
  %xep = getelementptr i64, ptr %xp, i64 1
  %xend = load i64, ptr %xep
  %open = icmp eq i64 %xend, 0
  %xlo = select i1 %open, i64 0, i64 %xbase
  %xhi = select i1 %open, i64 -1, i64 %xend
  %higher = icmp ugt i64 %xlo, %base
  %lo2 = select i1 %higher, i64 %xlo, i64 %base
  %lower = icmp ult i64 %xhi, %end
  %end2 = select i1 %lower, i64 %xhi, i64 %end
  br label %store
store:
  %least = phi i64 [%base, %keep], [%lo2, %cut]
  %top = phi i64 [%end, %keep], [%end2, %cut]
  %most = sub i64 %top, %size
  %dp = getelementptr i64, ptr %site, i64 2
  store i64 %delta, ptr %dp
  %mp = getelementptr i64, ptr %site, i64 1
  store i64 %most, ptr %mp
  store i64 %least, ptr %site
  ret i64 %delta
out:
  ret i64 -1
}}

; how the lanes of a base register fall, per group of eight (byte j: 0 consecutive elements of
; %size, 1 one address and some lane active, 2 neither), or {WHOLE}: all lanes active, consecutive
define internal i32 @pattern(<32 x i64> %v, i32 %bits, i64 %size) alwaysinline {{
entry:
  %m = bitcast i32 %bits to <32 x i1>
  %sh = insertelement <8 x i64> poison, i64 %size, i32 0
  %ss = shufflevector <8 x i64> %sh, <8 x i64> poison, <8 x i32> zeroinitializer
  %steps = mul <8 x i64> %ss, <i64 0, i64 1, i64 2, i64 3, i64 4, i64 5, i64 6, i64 7>
{"".join(_group_kind(j) for j in range(4))}
  %k01 = or i32 %k0, %s1
  %k012 = or i32 %k01, %s2
  %packed = or i32 %k012, %s3
  %full = icmp eq i32 %bits, -1
  %g8 = mul i64 %size, 8
  %n1 = sub i64 %f1, %f0
  %n2 = sub i64 %f2, %f1
  %n3 = sub i64 %f3, %f2
  %o1 = icmp eq i64 %n1, %g8
  %o2 = icmp eq i64 %n2, %g8
  %o3 = icmp eq i64 %n3, %g8
  %o12 = and i1 %o1, %o2
  %o123 = and i1 %o12, %o3
  %zero = icmp eq i32 %packed, 0
  %w1 = and i1 %full, %zero
  %w = and i1 %w1, %o123
  %r = select i1 %w, i32 {WHOLE}, i32 %packed
  ret i32 %r
}}

; OR, minimum and maximum of the active lanes' values of a base register (lo > hi: no lane), and
; their pattern for elements of %size
define void @ptxb.span(ptr %addrp, i32 %bits, i64 %size, ptr %out) noinline {{
  %addr = load <32 x i64>, ptr %addrp
  %m = bitcast i32 %bits to <32 x i1>
  %forlo = select <32 x i1> %m, <32 x i64> %addr, <32 x i64> splat (i64 -1)
  %forhi = select <32 x i1> %m, <32 x i64> %addr, <32 x i64> zeroinitializer
  %lo = call i64 @llvm.vector.reduce.umin.v32i64(<32 x i64> %forlo)
  %hi = call i64 @llvm.vector.reduce.umax.v32i64(<32 x i64> %forhi)
  %or = call i64 @llvm.vector.reduce.or.v32i64(<32 x i64> %forhi)
  %pat = call i32 @pattern(<32 x i64> %addr, i32 %bits, i64 %size)
  %pat64 = sext i32 %pat to i64
  store i64 %lo, ptr %out
  %p1 = getelementptr i64, ptr %out, i64 1
  store i64 %hi, ptr %p1
  %p2 = getelementptr i64, ptr %out, i64 2
  store i64 %or, ptr %p2
  %p3 = getelementptr i64, ptr %out, i64 3
  store i64 %pat64, ptr %p3
  ret void
}}
"""


def _chunk_load(bits: int, j: int) -> str:
    """Lanes ``8j..8j+7`` of ``@fetch``: one vector load when their pointers are consecutive, one
    scalar load when they are all the same (a row of a tile), else a gather of eight."""
    size, t = bits // 8, f"<8 x i{bits}>"
    lanes = ", ".join(f"i32 {8 * j + k}" for k in range(8))
    steps = ", ".join(f"i64 {k * size}" for k in range(8))
    return f"""
  %p{j} = shufflevector <32 x i64> %pv, <32 x i64> poison, <8 x i32> <{lanes}>
  %m{j} = shufflevector <32 x i1> %m, <32 x i1> poison, <8 x i32> <{lanes}>
  %f{j} = extractelement <8 x i64> %p{j}, i32 0
  %fh{j} = insertelement <8 x i64> poison, i64 %f{j}, i32 0
  %fs{j} = shufflevector <8 x i64> %fh{j}, <8 x i64> poison, <8 x i32> zeroinitializer
  %e{j} = add <8 x i64> %fs{j}, <{steps}>
  %ce{j} = icmp eq <8 x i64> %p{j}, %e{j}
  %cn{j} = call i1 @llvm.vector.reduce.and.v8i1(<8 x i1> %ce{j})
  br i1 %cn{j}, label %vl{j}, label %nu{j}
vl{j}:
  %fp{j} = inttoptr i64 %f{j} to ptr
  %a{j} = call {t} @llvm.masked.load.v8i{bits}.p0(ptr align {size} %fp{j}, <8 x i1> %m{j},
                                                 {t} zeroinitializer)
  br label %j{j}
nu{j}:
  %ue{j} = icmp eq <8 x i64> %p{j}, %fs{j}
  %uall{j} = call i1 @llvm.vector.reduce.and.v8i1(<8 x i1> %ue{j})
  %full{j} = call i1 @llvm.vector.reduce.and.v8i1(<8 x i1> %m{j})
  %u{j} = and i1 %uall{j}, %full{j}
  br i1 %u{j}, label %bl{j}, label %gl{j}
bl{j}:
  %bp{j} = inttoptr i64 %f{j} to ptr
  %bv{j} = load i{bits}, ptr %bp{j}, align {size}
  %bh{j} = insertelement {t} poison, i{bits} %bv{j}, i32 0
  %b{j} = shufflevector {t} %bh{j}, {t} poison, <8 x i32> zeroinitializer
  br label %j{j}
gl{j}:
  %each{j} = inttoptr <8 x i64> %p{j} to <8 x ptr>
  %g{j} = call {t} @llvm.masked.gather.v8i{bits}.v8p0(<8 x ptr> align {size} %each{j}, <8 x i1> %m{j},
                                                     {t} zeroinitializer)
  br label %j{j}
j{j}:
  %r{j} = phi {t} [%a{j}, %vl{j}], [%b{j}, %bl{j}], [%g{j}, %gl{j}]"""


def _consecutive(pointers: str, first: str, out: str, size: int) -> str:
    """IR: ``out`` = whether lane ``k`` of ``pointers`` is ``first`` (lane 0's) plus ``k * size``."""
    steps = ", ".join(f"i64 {k * size}" for k in range(32))
    tag = out[1:]
    return f"""  {first} = extractelement <32 x i64> {pointers}, i32 0
  %{tag}.h = insertelement <32 x i64> poison, i64 {first}, i32 0
  %{tag}.s = shufflevector <32 x i64> %{tag}.h, <32 x i64> poison, <32 x i32> zeroinitializer
  %{tag}.e = add <32 x i64> %{tag}.s, <{steps}>
  %{tag}.q = icmp eq <32 x i64> {pointers}, %{tag}.e
  {out} = call i1 @llvm.vector.reduce.and.v32i1(<32 x i1> %{tag}.q)"""


def _move(kind: str, bits: int) -> str:
    """``@ptxb.fetch_iN`` / ``@ptxb.put_iN``: ``count`` elements per lane at checked pointers."""
    size, t = bits // 8, f"<32 x i{bits}>"
    offsets = f"""  %off = mul i64 %c, {size}
  %h = insertelement <32 x i64> poison, i64 %off, i32 0
  %offs = shufflevector <32 x i64> %h, <32 x i64> poison, <32 x i32> zeroinitializer
  %pv = add <32 x i64> %base, %offs
  %voff = mul i64 %c, 256
  %vp = getelementptr i8, ptr %val, i64 %voff"""
    if kind == "load":
        half = ", ".join(f"i32 {k}" for k in range(16))
        whole = ", ".join(f"i32 {k}" for k in range(32))
        body = (
            "".join(_chunk_load(bits, j) for j in range(4))
            + f"""
  %lo = shufflevector <8 x i{bits}> %r0, <8 x i{bits}> %r1, <16 x i32> <{half}>
  %hi = shufflevector <8 x i{bits}> %r2, <8 x i{bits}> %r3, <16 x i32> <{half}>
  %r = shufflevector <16 x i{bits}> %lo, <16 x i{bits}> %hi, <32 x i32> <{whole}>
  store {t} %r, ptr %vp, align 8
  br label %next"""
        )
        name = "fetch"
    else:
        body = f"""
  %v = load {t}, ptr %vp, align 8
{_consecutive("%pv", "%first", "%cons", size)}
  br i1 %cons, label %vs, label %ss
vs:
  %p0 = inttoptr i64 %first to ptr
  call void @llvm.masked.store.v32i{bits}.p0({t} %v, ptr align {size} %p0, <32 x i1> %m)
  br label %next
ss:
  %each = inttoptr <32 x i64> %pv to <32 x ptr>
  call void @llvm.masked.scatter.v32i{bits}.v32p0({t} %v, <32 x ptr> align {size} %each, <32 x i1> %m)
  br label %next"""
        name = "put"
    return f"""
define void @ptxb.{name}_i{bits}(ptr %ptrs, i32 %bits, i64 %count, ptr %val) noinline {{
entry:
  %m = bitcast i32 %bits to <32 x i1>
  %base = load <32 x i64>, ptr %ptrs
  br label %elem
elem:
  %c = phi i64 [0, %entry], [%c1, %next]
{offsets}{body}
next:
  %c1 = add i64 %c, 1
  %more = icmp ult i64 %c1, %count
  br i1 %more, label %elem, label %done
done:
  ret void
}}
"""


def _helper_ir(kind: str, bits: int) -> str:
    """``@ptxb.load_iN`` / ``@ptxb.store_iN`` (checked) and the ``@ptxb.fetch_iN`` / ``@ptxb.put_iN``
    they move with."""
    size, t = bits // 8, f"<32 x i{bits}>"
    name = "fetch" if kind == "load" else "put"
    write = "true" if kind == "store" else "false"
    if kind == "load":
        fast = f"  %vf = load {t}, ptr %ptrf, align {size}\n  store {t} %vf, ptr %val, align 8"
    else:
        fast = f"  %vf = load {t}, ptr %val, align 8\n  store {t} %vf, ptr %ptrf, align {size}"
    return (
        _move(kind, bits)
        + f"""
define i32 @ptxb.{kind}_i{bits}(ptr %ctx, ptr %addrp, i32 %bits, i64 %whole, i64 %count, i64 %ext,
                                    i32 %first, ptr %val) noinline {{
entry:
  %ptrs = alloca <32 x i64>
  %addr0 = load <32 x i64>, ptr %addrp
  %full = icmp eq i32 %bits, -1
  %single = icmp eq i64 %count, 1
{_consecutive("%addr0", "%lead", "%consl", size)}
  %f1 = and i1 %full, %single
  %f2 = and i1 %f1, %consl
  br i1 %f2, label %fast, label %general
fast:  ; every lane, one element each, consecutive: the span is the first and the last lane's
  %lastf = add i64 %lead, {31 * size}
  %deltaf = call i64 @ptxb.hoisted(ptr %ctx, i64 %lead, i64 %lastf, i64 %lead, i64 {size}, i1 {write},
                              i64 %ext)
  %usef = icmp ne i64 %deltaf, -1
  br i1 %usef, label %fastgo, label %general
fastgo:
  %pf = add i64 %lead, %deltaf
  %ptrf = inttoptr i64 %pf to ptr
{fast}
  ret i32 0
general:
  %st = call i32 @ptxb.access(ptr %ctx, ptr %addrp, i32 %bits, i64 %whole, i1 {write}, i64 %ext, i32 %first,
                         ptr %ptrs)
  %ok = icmp eq i32 %st, 0
  br i1 %ok, label %go, label %out
out:
  ret i32 %st
go:
  call void @ptxb.{name}_i{bits}(ptr %ptrs, i32 %bits, i64 %count, ptr %val)
  ret i32 0
}}
"""
    )


def _intrinsics(bits: int) -> list[str]:
    t, t8 = vec(f"i{bits}"), f"<8 x i{bits}>"
    return [
        f"declare {t8} @llvm.masked.load.v8i{bits}.p0(ptr, <8 x i1>, {t8})",
        f"declare {t8} @llvm.masked.gather.v8i{bits}.v8p0(<8 x ptr>, <8 x i1>, {t8})",
        f"declare {t} @llvm.masked.load.v32i{bits}.p0(ptr, {_M}, {t})",
        f"declare {t} @llvm.masked.gather.v32i{bits}.v32p0({vec('ptr')}, {_M}, {t})",
        f"declare void @llvm.masked.store.v32i{bits}.p0({t}, ptr, {_M})",
        f"declare void @llvm.masked.scatter.v32i{bits}.v32p0({t}, {vec('ptr')}, {_M})",
    ]


def runtime_ir() -> str:
    """The module of every helper, for loads and stores of each element width."""
    declarations = {
        *DECLARATIONS,
        "declare i1 @llvm.vector.reduce.and.v8i1(<8 x i1>)",
        "declare i1 @llvm.vector.reduce.or.v8i1(<8 x i1>)",
    }
    for bits in _WIDTHS:
        declarations.update(_intrinsics(bits))
    helpers = [_helper_ir(kind, bits) for kind in ("load", "store") for bits in _WIDTHS]
    return "\n".join([*sorted(declarations), shared_ir(), _COMMON, _ADMIT, *helpers])


HELPERS = "\n".join(
    [
        "declare i32 @ptxb.access(ptr, ptr, i32, i64, i1, i64, i32, ptr)",
        "declare void @ptxb.lanes(ptr, i64, ptr, i1, i64)",
        "declare void @ptxb.span(ptr, i32, i64, ptr) memory(argmem: readwrite) nounwind",
        "declare i64 @ptxb.hoisted(ptr, i64, i64, i64, i64, i1, i64)",
        "declare i64 @ptxb.admit(ptr, i64, i64, i64, i1, i64, ptr)",
        *(f"declare i32 @ptxb.{kind}_i{bits}(ptr, ptr, i32, i64, i64, i64, i32, ptr) cold"
          for kind in ("load", "store") for bits in _WIDTHS),
        *(f"declare void @ptxb.{name}_i{bits}(ptr, i32, i64, ptr)"
          for name in ("fetch", "put") for bits in _WIDTHS),
    ]
)  # what a kernel's module declares of the runtime
