"""The IR every compiled kernel shares: region lookup, the access check, and the grid driver.

``@resolve`` is :meth:`..memory.Memory.resolve` for one warp: the OR, minimum and maximum of the
active lanes' addresses give the alignment and the span; a span inside one region (a row of the
region table: base, end, host pointer minus base, flags) gives every lane's host pointer in one
add, lanes spread over several regions are looked up one by one.  A misaligned, out-of-bounds or
read-only access records the address and a reason in the context and returns 2.

``@launch`` runs blocks ``[first_block, end_block)`` one after the other: it zeroes the block's
shared and local memory (the interpreter allocates them zeroed; local memory, which every access
reaches through ``@delta``, only once some block of the context has touched it: a Rust kernel's
panic path declares a frame the hot path never uses) and runs its warps in rounds.  A
warp returns 0 when its lanes are done, 1 when they wait at a barrier (what they need to resume
kept in the warp's state), anything else on an error; a round in which some warp waits is followed by
another that resumes the waiting warps, which is the interpreter's barrier: threads park until
no thread of the block can run, then go on together.
"""

from __future__ import annotations

from .emit import CTX

__all__ = ["shared_ir", "launch_ir", "REASONS", "DECLARATIONS", "field"]

DECLARATIONS = frozenset(
    (
        "declare i1 @llvm.vector.reduce.or.v32i1(<32 x i1>)",
        "declare i64 @llvm.vector.reduce.umin.v32i64(<32 x i64>)",
        "declare i64 @llvm.vector.reduce.umax.v32i64(<32 x i64>)",
        "declare i64 @llvm.vector.reduce.or.v32i64(<32 x i64>)",
        "declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)",
        "declare i1 @llvm.vector.reduce.and.v32i1(<32 x i1>)",
    )
)

REASONS = {
    1: "misaligned {size}-byte access",
    2: "outside every buffer and variable the kernel can reach",
    3: "store to read-only memory",
    4: "overruns the argument its address comes from",
}


def field(name: str) -> str:
    return str(CTX[name])


def shared_ir() -> str:
    return f"""
; whether [lo, hi + size) lies in region row %row of the table (end - hi, as hi + size may wrap)
define internal i1 @inside(ptr %tab, i64 %row, i64 %lo, i64 %hi, i64 %size) alwaysinline {{
  %r4 = mul i64 %row, 4
  %bp = getelementptr i64, ptr %tab, i64 %r4
  %base = load i64, ptr %bp
  %ep = getelementptr i64, ptr %bp, i64 1
  %end = load i64, ptr %ep
  %c1 = icmp uge i64 %lo, %base
  %c2 = icmp ult i64 %hi, %end
  %room = sub i64 %end, %hi
  %c3 = icmp uge i64 %room, %size
  %c12 = and i1 %c1, %c2
  %in = and i1 %c12, %c3
  ret i1 %in
}}

define internal i64 @find(ptr %ctx, i64 %lo, i64 %hi, i64 %size) {{
entry:
  %np = getelementptr i64, ptr %ctx, i64 {field("nregions")}
  %n = load i64, ptr %np
  %tp = getelementptr i64, ptr %ctx, i64 {field("regions")}
  %ti = load i64, ptr %tp
  %tab = inttoptr i64 %ti to ptr
  %hp = getelementptr i64, ptr %ctx, i64 {field("hint")}
  %h = load i64, ptr %hp
  %hin = call i1 @inside(ptr %tab, i64 %h, i64 %lo, i64 %hi, i64 %size)
  br i1 %hin, label %hit, label %loop
hit:
  ret i64 %h
loop:
  %i = phi i64 [0, %entry], [%i1, %next]
  %more = icmp ult i64 %i, %n
  br i1 %more, label %body, label %none
body:
  %in = call i1 @inside(ptr %tab, i64 %i, i64 %lo, i64 %hi, i64 %size)
  %i1 = add i64 %i, 1
  br i1 %in, label %found, label %next
next:
  br label %loop
found:
  store i64 %i, ptr %hp
  ret i64 %i
none:
  ret i64 -1
}}

define internal void @fault(ptr %ctx, i64 %address, i64 %reason, i64 %size, i64 %lane) {{
  %a = getelementptr i64, ptr %ctx, i64 {field("err_addr")}
  store i64 %address, ptr %a
  %r = getelementptr i64, ptr %ctx, i64 {field("err_reason")}
  store i64 %reason, ptr %r
  %s = getelementptr i64, ptr %ctx, i64 {field("err_size")}
  store i64 %size, ptr %s
  %t = getelementptr i64, ptr %ctx, i64 {field("err_thread")}
  store i64 %lane, ptr %t
  ret void
}}

; row %row of the table (four words a row) the context's word %table points to
define internal ptr @row(ptr %ctx, i64 %table, i64 %row) alwaysinline {{
  %tp = getelementptr i64, ptr %ctx, i64 %table
  %ti = load i64, ptr %tp
  %tab = inttoptr i64 %ti to ptr
  %r4 = mul i64 %row, 4
  %rp = getelementptr i64, ptr %tab, i64 %r4
  ret ptr %rp
}}

; the row's pointer offset for a lane (plus its instance for per-thread memory), or -1: read-only
define internal i64 @delta(ptr %ctx, i64 %row, i1 %write, i64 %lin) alwaysinline {{
  %dp = call ptr @row(ptr %ctx, i64 {field("regions")}, i64 %row)
  %dp2 = getelementptr i64, ptr %dp, i64 2
  %d = load i64, ptr %dp2
  %fp = getelementptr i64, ptr %dp, i64 3
  %flags = load i64, ptr %fp
  %w = and i64 %flags, 1
  %ro = icmp eq i64 %w, 0
  %bad = and i1 %ro, %write
  br i1 %bad, label %readonly, label %ok
readonly:
  ret i64 -1
ok:
  %per = and i64 %flags, 2
  %isper = icmp ne i64 %per, 0
  %up = getelementptr i64, ptr %ctx, i64 {field("local_used")}
  %used = load i64, ptr %up
  %touched = or i64 %used, %per
  store i64 %touched, ptr %up
  %sp = getelementptr i64, ptr %ctx, i64 {field("local_stride")}
  %stride = load i64, ptr %sp
  %inst = mul i64 %lin, %stride
  %extra = select i1 %isper, i64 %inst, i64 0
  %sum = add i64 %d, %extra
  ret i64 %sum
}}

; whether [lo, hi + size) stays inside row %ext of the launch's extent table (row 0, or a row whose
; end is 0: no argument extent to stay in); if not and %report, the fault (reason 4) records the row,
; the lowest or highest address and whether the access writes
define internal i1 @within(ptr %ctx, i64 %ext, i64 %lo, i64 %hi, i64 %size, i1 %write,
                           i1 %report) alwaysinline {{
entry:
  %none = icmp eq i64 %ext, 0
  br i1 %none, label %yes, label %look
look:
  %bp = call ptr @row(ptr %ctx, i64 {field("extents")}, i64 %ext)
  %endp = getelementptr i64, ptr %bp, i64 1
  %end = load i64, ptr %endp
  %unchecked = icmp eq i64 %end, 0
  br i1 %unchecked, label %yes, label %test
test:
  %xt = call ptr @row(ptr %ctx, i64 {field("extents")}, i64 0)
  %in = call i1 @inside(ptr %xt, i64 %ext, i64 %lo, i64 %hi, i64 %size)
  br i1 %in, label %yes, label %out
out:
  br i1 %report, label %fault, label %no
fault:
  %base = load i64, ptr %bp
  %below = icmp ult i64 %lo, %base
  %at = select i1 %below, i64 %lo, i64 %hi
  call void @fault(ptr %ctx, i64 %at, i64 4, i64 %size, i64 -1)
  %ep = getelementptr i64, ptr %ctx, i64 {field("err_extent")}
  store i64 %ext, ptr %ep
  %wp = getelementptr i64, ptr %ctx, i64 {field("err_write")}
  %w = zext i1 %write to i64
  store i64 %w, ptr %wp
  br label %no
yes:
  ret i1 true
no:
  ret i1 false
}}

define internal i32 @resolve(ptr %ctx, <32 x i64> %addr, <32 x i1> %m, i64 %size, i1 %write,
                             i64 %ext, <32 x i64> %lin, ptr %out) alwaysinline {{
entry:
  %any = call i1 @llvm.vector.reduce.or.v32i1(<32 x i1> %m)
  br i1 %any, label %go, label %none
none:
  ret i32 1
go:
  %forlo = select <32 x i1> %m, <32 x i64> %addr, <32 x i64> splat (i64 -1)
  %forhi = select <32 x i1> %m, <32 x i64> %addr, <32 x i64> zeroinitializer
  %lo = call i64 @llvm.vector.reduce.umin.v32i64(<32 x i64> %forlo)
  %hi = call i64 @llvm.vector.reduce.umax.v32i64(<32 x i64> %forhi)
  %bits = call i64 @llvm.vector.reduce.or.v32i64(<32 x i64> %forhi)
  %low = sub i64 %size, 1
  %mis = and i64 %bits, %low
  %aligned = icmp eq i64 %mis, 0
  br i1 %aligned, label %span, label %misaligned
misaligned:
  call void @fault(ptr %ctx, i64 %lo, i64 1, i64 %size, i64 -1)
  ret i32 2
span:
  %kept = call i1 @within(ptr %ctx, i64 %ext, i64 %lo, i64 %hi, i64 %size, i1 %write, i1 true)
  br i1 %kept, label %regions, label %overrun
overrun:
  ret i32 2
regions:
  %row = call i64 @find(ptr %ctx, i64 %lo, i64 %hi, i64 %size)
  %one = icmp sge i64 %row, 0
  br i1 %one, label %whole, label %lanes
whole:
  %first = extractelement <32 x i64> %lin, i32 0
  %d0 = call i64 @delta(ptr %ctx, i64 %row, i1 %write, i64 0)
  %ro = icmp eq i64 %d0, -1
  br i1 %ro, label %readonly, label %fill
readonly:
  call void @fault(ptr %ctx, i64 %lo, i64 3, i64 %size, i64 -1)
  ret i32 2
fill:
  %d1 = call i64 @delta(ptr %ctx, i64 %row, i1 %write, i64 1)
  %stride = sub i64 %d1, %d0
  %h0 = insertelement <32 x i64> poison, i64 %d0, i32 0
  %ds = shufflevector <32 x i64> %h0, <32 x i64> poison, <32 x i32> zeroinitializer
  %h1 = insertelement <32 x i64> poison, i64 %stride, i32 0
  %ss = shufflevector <32 x i64> %h1, <32 x i64> poison, <32 x i32> zeroinitializer
  %inst = mul <32 x i64> %lin, %ss
  %dl = add <32 x i64> %ds, %inst
  %ptrs = add <32 x i64> %addr, %dl
  store <32 x i64> %ptrs, ptr %out
  ret i32 0
lanes:
  br label %lane
lane:
  %j = phi i32 [0, %lanes], [%j1, %lnext]
  %acc = phi <32 x i64> [%addr, %lanes], [%acc1, %lnext]
  %on = extractelement <32 x i1> %m, i32 %j
  br i1 %on, label %lfind, label %lnext0
lfind:
  %a = extractelement <32 x i64> %acc, i32 %j
  %l = extractelement <32 x i64> %lin, i32 %j
  %r = call i64 @find(ptr %ctx, i64 %a, i64 %a, i64 %size)
  %found = icmp sge i64 %r, 0
  br i1 %found, label %ldelta, label %outside
outside:
  call void @fault(ptr %ctx, i64 %a, i64 2, i64 %size, i64 %l)
  ret i32 2
ldelta:
  %d = call i64 @delta(ptr %ctx, i64 %r, i1 %write, i64 %l)
  %lro = icmp eq i64 %d, -1
  br i1 %lro, label %lreadonly, label %lset
lreadonly:
  call void @fault(ptr %ctx, i64 %a, i64 3, i64 %size, i64 %l)
  ret i32 2
lset:
  %p = add i64 %a, %d
  %set = insertelement <32 x i64> %acc, i64 %p, i32 %j
  br label %lnext
lnext0:
  br label %lnext
lnext:
  %acc1 = phi <32 x i64> [%set, %lset], [%acc, %lnext0]
  %j1 = add i32 %j, 1
  %again = icmp ult i32 %j1, 32
  br i1 %again, label %lane, label %ldone
ldone:
  store <32 x i64> %acc1, ptr %out
  ret i32 0
}}
"""


def launch_ir(state_bytes: int) -> str:
    """``@launch(ctx)``: every block of the context's range; ``state_bytes`` per warp."""
    return f"""
define i32 @launch(ptr %ctx) {{
entry:
  %status = alloca [32 x i8]
  %fp = getelementptr i64, ptr %ctx, i64 {field("first_block")}
  %first = load i64, ptr %fp
  %ep = getelementptr i64, ptr %ctx, i64 {field("end_block")}
  %end = load i64, ptr %ep
  %gxp = getelementptr i64, ptr %ctx, i64 {field("gx")}
  %gx = load i64, ptr %gxp
  %gyp = getelementptr i64, ptr %ctx, i64 {field("gy")}
  %gy = load i64, ptr %gyp
  %nwp = getelementptr i64, ptr %ctx, i64 {field("nwarps")}
  %nw64 = load i64, ptr %nwp
  %nw = trunc i64 %nw64 to i32
  %shp = getelementptr i64, ptr %ctx, i64 {field("shared")}
  %shi = load i64, ptr %shp
  %sh = inttoptr i64 %shi to ptr
  %shsp = getelementptr i64, ptr %ctx, i64 {field("shared_size")}
  %shs = load i64, ptr %shsp
  %lop = getelementptr i64, ptr %ctx, i64 {field("local")}
  %loi = load i64, ptr %lop
  %lo = inttoptr i64 %loi to ptr
  %losp = getelementptr i64, ptr %ctx, i64 {field("local_size")}
  %los = load i64, ptr %losp
  %stp = getelementptr i64, ptr %ctx, i64 {field("state")}
  %sti = load i64, ptr %stp
  %gxy = mul i64 %gx, %gy
  br label %block
block:
  %b = phi i64 [%first, %entry], [%b1, %blockdone]
  %more = icmp ult i64 %b, %end
  br i1 %more, label %start, label %finished
finished:
  ret i32 0
start:
  %cx64 = urem i64 %b, %gx
  %q = udiv i64 %b, %gx
  %cy64 = urem i64 %q, %gy
  %cz64 = udiv i64 %b, %gxy
  %cx = trunc i64 %cx64 to i32
  %cy = trunc i64 %cy64 to i32
  %cz = trunc i64 %cz64 to i32
  call void @llvm.memset.p0.i64(ptr %sh, i8 0, i64 %shs, i1 false)
  %lup = getelementptr i64, ptr %ctx, i64 {field("local_used")}
  %lu = load i64, ptr %lup
  %dirty = icmp ne i64 %lu, 0
  %lon = select i1 %dirty, i64 %los, i64 0
  call void @llvm.memset.p0.i64(ptr %lo, i8 0, i64 %lon, i1 false)
  call void @llvm.memset.p0.i64(ptr %status, i8 1, i64 32, i1 false)
  br label %round
round:
  %resume = phi i1 [false, %start], [true, %roundend]
  br label %warp
warp:
  %w = phi i32 [0, %round], [%w1, %warpnext]
  %waiting = phi i1 [false, %round], [%waiting1, %warpnext]
  %sp = getelementptr i8, ptr %status, i32 %w
  %s = load i8, ptr %sp
  %pending = icmp ne i8 %s, 0
  br i1 %pending, label %run, label %skip
run:
  %w64 = zext i32 %w to i64
  %off = mul i64 %w64, {state_bytes}
  %sti2 = add i64 %sti, %off
  %st = inttoptr i64 %sti2 to ptr
  %rc = call i32 @warp(ptr %ctx, ptr %st, i32 %w, i32 %cx, i32 %cy, i32 %cz, i1 %resume)
  %isdone = icmp eq i32 %rc, 0
  br i1 %isdone, label %wdone, label %notdone
wdone:
  store i8 0, ptr %sp
  br label %warpnext
notdone:
  %atbar = icmp eq i32 %rc, 1
  br i1 %atbar, label %warpnext, label %error
error:
  %ebp = getelementptr i64, ptr %ctx, i64 {field("err_block")}
  store i64 %b, ptr %ebp
  %etp = getelementptr i64, ptr %ctx, i64 {field("err_thread")}
  %et = load i64, ptr %etp
  ret i32 %rc
skip:
  br label %warpnext
warpnext:
  %waiting1 = phi i1 [%waiting, %wdone], [true, %notdone], [%waiting, %skip]
  %w1 = add i32 %w, 1
  %wmore = icmp ult i32 %w1, %nw
  br i1 %wmore, label %warp, label %roundend
roundend:
  br i1 %waiting1, label %round, label %blockdone
blockdone:
  %b1 = add i64 %b, 1
  br label %block
}}
"""
