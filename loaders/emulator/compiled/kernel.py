"""One kernel -> one LLVM module: a warp function over basic blocks, scheduled as the interpreter does.

The warp's 32 lanes run together under an execution mask. While every runnable lane is at the same
block (*converged*), a branch all active lanes agree on jumps straight to its target; a branch that
splits them writes each lane's program counter (its block) and enters the scheduler, which picks
the lowest block any runnable lane is at and runs it for the lanes there: the interpreter's min-PC
policy (:mod:`..machine`), which reconverges structured control flow at its join points.
``bar.sync`` parks the lanes that reach it; when no lane can run the warp saves its program
counters and returns to the driver, which resumes it once every warp of the block waits
(:mod:`.runtime`). The registers live where a barrier resumes are kept in the warp's state (its
slot in the launch's state buffer) rather than on the stack, so waiting and resuming copy none.
Blocks count the watchdog's steps (``max_steps`` per warp) and the thread-instructions the
interpreter reports.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..build import Context
from ..liveness import block_local, writes
from ..machine import BAR, BRA, EXIT, PLAIN, RET, TRAP, Function
from ..parse import Imm, Instruction, Mem, Reg
from ..watchdog import writes_memory
from . import convert, mem, warp  # noqa: F401  (lowerings)
from .access import HELPERS
from .emit import COLD_CODE, LANE_IDS, SPECIALS, TRAP_CODE, Emitter
from .flow import (
    barrier_live,
    blocks_of,
    looping,
    named_registers,
    read_registers,
    successors,
    written_in,
)
from .lanes import UNIFORM, Shape, lane_offsets
from .ops import CARRY, LOWER, uses_carry
from .runtime import DECLARATIONS, launch_ir
from .values import Unsupported, vec
from .watch import watch_globals, watch_ir, watch_start

__all__ = [
    "kernel_ir", "KernelIR", "extent_origins", "state_bytes", "STATE_HEADER", "SLOT", "MAX_INSTRUCTIONS",
]

MAX_INSTRUCTIONS = 800  # larger kernels (heavily unrolled ones) run on the interpreter
_MAX_READ = 8 * MAX_INSTRUCTIONS  # the most a kernel may have before its cold parts are left out
# blocks x registers past which one compile takes more than seconds (every register that lives
# across blocks meets every block through the scheduler): numba's NRT reshape with its calls
# inlined, 146 x 700, took minutes here, a Rust iterator chain through LTO-IR, 30 x 435, 18 s;
# under it, CUDA C++ calling seven helpers, 33 x 163, 3 s, and a Rust fold, 22 x 139, 6 s
_MAX_SPREAD = 12000

SLOT = 256  # bytes per register in a warp's state (32 lanes of 64 bits)
STATE_HEADER = 256  # pcs (32 x i32), live mask, watchdog steps
MEMO = 192  # bytes per register after the slots: its remembered span (key, @ptxb.span's four words,
#             the window's length, then at 64 the lanes' window indices: .emit.Emitter.remembered_span)
_LIVE_AT, _STEPS_AT = 128, 136  # where the header keeps the live mask and the watchdog's steps
_RESUME_AT = 144  # the block every live lane resumes at when the whole warp waited at one (i32; -1)
_NOOPS = frozenset(("membar", "fence", "prefetch", "prefetchu", "discard", "applypriority", "nanosleep"))
_FAR = 1 << 30
_STEPPING = {("s64",), ("u64",), ("s32",), ("u32",)}  # adds that move a pointer (no .cc, .sat)
_M, _I32 = vec("i1"), vec("i32")


def extent_origins(fn: Function) -> list[frozenset[int]]:
    """The distinct parameter sets the kernel's accesses take their addresses from
    (:mod:`..provenance`), in order: row ``k + 1`` of a launch's extent table is the extent of the
    argument the ``k``-th one points into (row 0: no check)."""
    return list(dict.fromkeys(o for o in fn.origins if o is not None))


def state_bytes(registers: int) -> int:
    """Bytes of one warp's state: the header, a slot per register, then a span memo per register."""
    return _memos_at(registers) + MEMO * max(registers, 1)


def _memos_at(registers: int) -> int:
    """Where a warp's state keeps the span memos: after the header and the registers' slots."""
    return STATE_HEADER + SLOT * max(registers, 1)


class KernelIR(NamedTuple):
    """A kernel's module, its cold steps (index -> why) and the address origins of the stores its
    compiled code makes outside shared and local memory (:mod:`..provenance`; None: no argument's)."""

    text: str
    cold: dict[int, str]
    stores: frozenset[frozenset[int] | None]


def kernel_ir(fn: Function, symbol: Any, param_size: int, permutes: bool = False,
              cold: dict[int, str] | None = None, shape: Shape | None = None,
              masked_moves: bool = False) -> KernelIR:
    """The LLVM module of kernel ``fn``, its *cold* steps: the instructions it does not compile, which
    end a warp that reaches one with ``COLD_CODE`` (the launch then runs on the interpreter),
    ``cold``'s (:mod:`.inline`'s calls) among them, and its stores; raises :class:`Unsupported` for a
    kernel it does not compile at all.  ``permutes``: the host has AVX-512's permutes, for windowed
    loads (:mod:`.direct`) through the base registers no loop's body writes (their memo outlives a
    pass; one rewritten every pass would pay for a window it reads once).  ``shape``: how the thread
    index follows the lane in the launches it is for (:func:`.lanes.warp_shape`).  ``masked_moves``:
    the host's vector moves take a mask (AVX-512), so a load zeroes the lanes off the mask in the move.

    The blocks from which every thread goes on to a cold step, and those only such blocks lead to,
    are not compiled: a warp that enters one leaves at once (the interpreter then runs the launch
    from the start, as it would have when the warp got to the cold step): a kernel's panic path,
    inlined, costs no compile time."""
    for step in fn.steps:
        if step.kind not in (PLAIN, BRA, RET, EXIT, BAR, TRAP):
            raise Unsupported(f"`{step.ins.text}` (a call not inlined: .inline)")
    if len(fn.steps) > _MAX_READ:
        raise Unsupported(f"{len(fn.steps)} instructions (more than {_MAX_READ})")
    blocks = blocks_of(fn)
    host = (permutes, masked_moves)
    first = _module(fn, symbol, param_size, host, cold or {}, {}, shape)  # Python's work only, if cut
    cut = _doomed(fn, blocks, first.cold)
    live = len(fn.steps) - sum(blocks[k][1] - blocks[k][0] for k in cut)
    if live > MAX_INSTRUCTIONS:
        raise Unsupported(f"{live} instructions (more than {MAX_INSTRUCTIONS}): compiling grows faster "
                          "than the kernel (minutes at 1,700), longer than interpreting most launches")
    count, named = len(blocks) - len(cut), len(_named(fn, blocks, cut))
    if count * named > _MAX_SPREAD:
        raise Unsupported(f"{count} blocks and {named} registers (their product over {_MAX_SPREAD}): "
                          "compiling grows as it does, longer than interpreting most launches")
    return _module(fn, symbol, param_size, host, first.cold, cut, shape) if cut else first


def _named(fn: Function, blocks: list[tuple[int, int]], cut: dict[int, str]) -> frozenset[str]:
    """The registers the blocks not ``cut`` name."""
    return named_registers([s.ins for k, (a, b) in enumerate(blocks) if k not in cut for s in fn.steps[a:b]])


def _skipped(ins: Instruction) -> bool:
    """Whether ``ins`` is a no-op here (hints, fences: a warp's lanes already run in order)."""
    return ins.opcode in _NOOPS or (ins.opcode in ("bar", "barrier") and "warp" in ins.mods)


def _doomed(fn: Function, blocks: list[tuple[int, int]], cold: dict[int, str]) -> dict[int, str]:
    """The blocks not to compile (index -> why): those every path from which reaches a cold step
    before the kernel can end (least fixed point: a loop that may spin forever is not doomed), and
    those only through such blocks reached from the entry."""
    after = successors(fn, blocks)
    doomed = {k: cold[i] for k, (start, end) in enumerate(blocks) for i in range(start, end)
              if i in cold and fn.steps[i].ins.guard is None}
    changed = True
    while changed:
        changed = False
        for k, (_, end) in enumerate(blocks):
            last = fn.steps[end - 1]
            ends = last.kind in (RET, EXIT) or (last.kind == TRAP and end - 1 not in cold)
            if k not in doomed and not ends and after[k] and all(j in doomed for j in after[k]):
                doomed[k], changed = doomed[after[k][0]], True
    if 0 in doomed:
        raise Unsupported(f"every thread reaches {doomed[0]}")
    reached, todo = {0}, [0]
    while todo:
        for j in after[todo.pop()]:
            if j not in reached:
                reached.add(j)
                if j not in doomed:
                    todo.append(j)
    return doomed | {k: doomed.get(k, "nothing: only code the tier leaves out leads here")
                     for k in range(len(blocks)) if k not in reached}


def _module(fn: Function, symbol: Any, param_size: int, host: tuple[bool, bool], cold: dict[int, str],
            cut: dict[int, str], shape: Shape | None) -> KernelIR:
    """:func:`kernel_ir`'s module with the blocks of ``cut`` left out."""
    blocks = blocks_of(fn)
    named = _named(fn, blocks, cut)
    registers = {  # those the compiled blocks name: a panic path's thousand registers get no slots
        name: 1 if zero.dtype.kind == "b" else 8 * zero.dtype.itemsize
        for name, zero in fn.zeros.items() if name in named
    }
    carries = any(uses_carry(s.ins) for s in fn.steps)
    if carries:  # the carry flag: a register no operand names, zero at the start as the interpreter's
        registers[CARRY] = 1
    e = Emitter(registers, symbol, fn.name)
    e.cold = dict(cold)
    e.reads = read_registers([s.ins for s in fn.steps])
    e.param_size = param_size
    rows = {origin: k + 1 for k, origin in enumerate(extent_origins(fn))}
    e.extents = [0 if origin is None else rows[origin] for origin in fn.origins]
    instructions = [s.ins for s in fn.steps]
    plain = [s.kind == PLAIN for s in fn.steps]
    e.local = block_local(instructions, plain, [s.target for s in fn.steps if s.kind == BRA], list(registers))
    e.local -= {CARRY}  # read by instructions that do not name it: kept, zeroed, written under the mask
    lanes = lane_offsets(fn, blocks, e.local, e.registers, shape)
    e.uniform = frozenset(lanes.offsets)
    e.lane_offsets = {name: offsets for name, offsets in lanes.offsets.items() if offsets != UNIFORM}
    e.collective = lanes.collective
    e.saved = barrier_live(fn, blocks)
    memos_at = _memos_at(len(registers))
    e.memos = {name: memos_at + MEMO * e.slots[name] for name in _bases(instructions) if name in registers}
    block_of = {start: k for k, (start, _) in enumerate(blocks)}
    block_of[len(fn.steps)] = len(blocks)
    loops = looping(fn, blocks)
    permutes, e.masked_moves = host
    e.windows = frozenset(e.memos) - written_in(fn, blocks, loops) if permutes else frozenset()
    # a load in a loop through a base no loop writes but by a warp-uniform step finds its lanes'
    # span remembered from the execution before (the direct probe would be work repeated)
    e.stepped = frozenset(e.memos) - written_in(fn, blocks, loops, lambda ins: _shift_of(e, ins) is not None)
    _entry(e, blocks)
    for k, (start, end) in enumerate(blocks):
        e.looping, e.converged = k in loops, k in lanes.converged
        if k in cut:  # a warp that gets here leaves: the interpreter runs the launch
            e.put_label(f"B{k}")
            e.emit(f"br label %K{k}")
            e.put_label(f"K{k}")  # where the watchdog's look comes back to
            e.insn = start
            e.cold.setdefault(start, f"`{fn.steps[start].ins.text}`, on the way to {cut[k]}")
            e.leave(COLD_CODE)
        else:
            _block(e, fn, k, start, end, block_of)
    _scheduler(e, len(blocks))
    watch_ir(e, len(blocks), _kept(e))
    body = "\n".join(e.lines)
    params = "ptr %ctx, ptr noalias %st, i32 %w, i32 %cx, i32 %cy, i32 %cz, i1 %resume"
    state = state_bytes(len(registers))
    text = "\n".join(
        [
            *sorted(e.declarations | DECLARATIONS),
            HELPERS,
            watch_globals(fn, blocks),
            f"define internal i32 @warp({params}) {{",
            body,
            "}",
            launch_ir(state),
        ]
    )
    stores = frozenset(
        fn.origins[i] if i < len(fn.origins) else None
        for k, (start, end) in enumerate(blocks) if k not in cut
        for i in range(start, end)
        if i not in e.cold and writes_memory(fn.steps[i].ins)
        and Context.state_space(set(fn.steps[i].ins.mods)) not in ("shared", "local")
    )
    return KernelIR(text, e.cold, stores)


def _entry(e: Emitter, blocks: list[tuple[int, int]]) -> None:
    e.put_label("entry")
    for name in e.slots:  # a register live across a barrier lives in the warp's state
        if name in e.saved:
            e.emit(f"{e.slot(name)} = getelementptr i8, ptr %st, i64 {STATE_HEADER + SLOT * e.slots[name]}")
        else:
            e.emit(f"{e.slot(name)} = alloca {e.slot_type(name)}")
    for name, t in (
        ("%mask", vec("i1")),
        ("%live", vec("i1")),
        ("%blocked", vec("i1")),
        ("%pcs", vec("i32")),
        ("%conv", "i1"),
        ("%steps", "i64"),
        ("%tsteps", "i64"),
        ("%rc", "i32"),
        ("%out", vec("i64")),
        ("%addr", vec("i64")),
        ("%lanes", vec("i32")),
        ("%val", f"[8 x {vec('i64')}]"),
        ("%spanin", vec("i64")),
        ("%spanout", "[4 x i64]"),
        ("%checkat", "i64"),
        ("%watching", "i1"),
        ("%watchlen", "i64"),
        ("%until", "i64"),
        ("%snapk", "i32"),
        ("%at", "i32"),
        ("%snap", f"[{256 * (len(_kept(e)) + 1)} x i8]"),
    ):
        e.emit(f"{name} = alloca {t}")
    e.emit("store i64 0, ptr %tsteps")
    for name in e.memos:
        e.emit(f"{e.memo(name)} = getelementptr i8, ptr %st, i64 {e.memos[name]}")
    scalars = {}
    fields = ("bx", "by", "bz", "gx", "gy", "gz", "threads", "nwarps", "max_steps", "param", "tids", "sites")
    for field in fields:
        scalars[field] = e.op(f"load i64, ptr {e.ctx(field)}")
    e.emit(f"%param = inttoptr i64 {scalars['param']} to ptr")
    e.emit(f"%sites = inttoptr i64 {scalars['sites']} to ptr")
    e.emit(f"%maxsteps = or i64 {scalars['max_steps']}, 0")
    small = {
        f: e.op(f"trunc i64 {scalars[f]} to i32")
        for f in ("bx", "by", "bz", "gx", "gy", "gz", "threads", "nwarps")
    }
    first = e.op("mul i32 %w, 32")
    e.emit(f"%first = or i32 {first}, 0")  # the warp's first thread, for reports (the helpers' lane indices)
    table = e.op(f"inttoptr i64 {scalars['tids']} to ptr")
    values = {
        "laneid": f"or {_I32} {LANE_IDS}, zeroinitializer",
        "warpsize": f"or {_I32} splat (i32 32), zeroinitializer",
    }
    padded = e.op(f"mul i32 {small['nwarps']}, 32")
    for axis, c in enumerate("xyz"):  # the launch's table of thread indices (a division per lane otherwise)
        at = e.op(f"add i32 {first}, {e.op(f'mul i32 {padded}, {axis}')}")
        e.tables[f"%tid.{c}"] = e.op(f"getelementptr i32, ptr {table}, i32 {at}")
    uniform = {"warpid": "%w", "nwarpid": small["nwarps"]}
    for c in "xyz":
        uniform |= {f"ntid.{c}": small["b" + c], f"nctaid.{c}": small["g" + c], f"ctaid.{c}": "%c" + c}
    for name, scalar in uniform.items():
        values[name] = f"or {vec('i32')} {e.spread(scalar, 'i32')}, zeroinitializer"
        e.spreads[f"%S.{name}"] = scalar
    for name in SPECIALS:
        if name not in e.tables:
            e.emit(f"%S.{name[1:]} = {values[name[1:]]}")
    # the lanes below the block's thread count: every lane but in a last, partial warp (bits, not
    # 32 compares of a thread index)
    e.intrinsic("declare i32 @llvm.umin.i32(i32, i32)")
    left = e.op(f"sub i32 {small['threads']}, {first}")
    shift = e.op(f"call i32 @llvm.umin.i32(i32 {left}, i32 31)")
    some = e.op(f"sub i32 {e.op(f'shl i32 1, {shift}')}, 1")
    bits = e.op(f"select i1 {e.op(f'icmp uge i32 {left}, 32')}, i32 -1, i32 {some}")
    live = e.op(f"bitcast i32 {bits} to {vec('i1')}")
    e.emit("br i1 %resume, label %restore, label %fresh")
    e.put_label("fresh")
    for name in _kept(e):
        e.emit(f"store {e.slot_type(name)} zeroinitializer, ptr {e.slot(name)}")
    for name in e.memos:  # the state's memory is not cleared: nothing remembered yet
        e.emit(f"store i64 0, ptr {e.memo(name)}")
    for name, value in (("%live", live), ("%mask", live)):
        e.emit(f"store {vec('i1')} {value}, ptr {name}")
    e.emit(f"store {vec('i1')} zeroinitializer, ptr %blocked")
    e.emit(f"store {_I32} zeroinitializer, ptr %pcs")
    e.emit("store i1 true, ptr %conv")
    e.emit("store i64 0, ptr %steps")
    watch_start(e, "0")
    e.emit("br label %B0")
    e.put_label("restore")
    live_at = e.op(f"getelementptr i8, ptr %st, i64 {_LIVE_AT}")
    e.emit(f"store {vec('i1')} {e.op(f'load {_M}, ptr {live_at}, align 8')}, ptr %live")
    steps_at = e.op(f"getelementptr i8, ptr %st, i64 {_STEPS_AT}")
    resumed = e.op(f"load i64, ptr {steps_at}, align 8")
    e.emit(f"store i64 {resumed}, ptr %steps")
    watch_start(e, resumed)
    e.emit(f"store {vec('i1')} zeroinitializer, ptr %blocked")
    hint = e.op(f"load i32, ptr {e.op(f'getelementptr i8, ptr %st, i64 {_RESUME_AT}')}, align 4")
    e.emit(f"br i1 {e.op(f'icmp sge i32 {hint}, 0')}, label %whole, label %scattered")
    e.put_label("scattered")  # the lanes wait at several places: their program counters
    e.emit(f"store {vec('i32')} {e.op(f'load {_I32}, ptr %st, align 8')}, ptr %pcs")
    e.emit("br label %sched")
    e.put_label("whole")  # the whole warp waited at one barrier: it goes on there, converged
    e.emit(f"store {_M} {e.op(f'load {_M}, ptr %live')}, ptr %mask")
    e.emit("store i1 true, ptr %conv")
    e.emit(f"store {_I32} {e.spread(hint, 'i32')}, ptr %pcs")
    cases = " ".join(f"i32 {k}, label %B{k}" for k in range(len(blocks)))
    e.emit(f"switch i32 {hint}, label %sched [{cases}]")


def _bases(instructions: list[Instruction]) -> list[str]:
    """The registers some load or store takes its address from (their spans are remembered)."""
    operands = (op for ins in instructions for op in ins.operands)
    bases = (op.base.name for op in operands if isinstance(op, Mem) and isinstance(op.base, Reg))
    return list(dict.fromkeys(bases))


def _shift_of(e: Emitter, ins: Instruction) -> tuple[str, Any] | None:
    """(register, amount) when ``ins`` adds a warp-uniform amount to a base register in place (a
    pointer stepping through a loop), whose remembered span then moves with it (:meth:`.emit.
    Emitter.write`) rather than being classified again."""
    if ins.opcode != "add" or len(ins.operands) != 3 or tuple(ins.mods) not in _STEPPING:
        return None
    target, source, amount = ins.operands
    if not (isinstance(target, Reg) and isinstance(source, Reg) and target.name == source.name):
        return None
    if target.name not in e.memos or e.registers[target.name] != int(ins.mods[0][1:]):
        return None
    uniform = isinstance(amount, Imm) or (
        isinstance(amount, Reg) and amount.name in e.uniform and amount.name not in e.lane_offsets
    )
    return (target.name, amount) if uniform else None


def _kept(e: Emitter) -> list[str]:
    """Registers a lane may read before writing in some block: zeroed at the start; the others
    (temporaries of one block, :mod:`..liveness`) need not be."""
    return [name for name in e.slots if name not in e.local]


def _block(e: Emitter, fn: Function, k: int, start: int, end: int, block_of: dict[int, int]) -> None:
    e.put_label(f"B{k}")
    m = e.mask = f"%m{k}"
    e.spans, e.deltas = {}, {}
    based = [
        (o.base.name, o.offset)
        for s in fn.steps[start:end]
        for o in s.ins.operands
        if isinstance(o, Mem) and isinstance(o.base, Reg)
    ]
    bases = [name for name, _ in based]
    e.reused = {name for name in bases if bases.count(name) > 1}
    e.offsets = {}
    for name, offset in based:
        least, most = e.offsets.get(name, (offset, offset))
        e.offsets[name] = (min(least, offset), max(most, offset))
    e.insn = start
    length = end - start
    steps = e.op(f"add i64 {e.op('load i64, ptr %steps')}, {length}")
    e.emit(f"store i64 {steps}, ptr %steps")
    bits = e.op(f"bitcast {vec('i1')} {e.op(f'load {_M}, ptr %mask')} to i32")
    active = e.op(f"zext i32 {e.op(f'call i32 @llvm.ctpop.i32(i32 {bits})')} to i64")
    e.intrinsic("declare i32 @llvm.ctpop.i32(i32)")
    counted, work = e.op("load i64, ptr %tsteps"), e.op(f"mul i64 {active}, {length}")
    e.emit(f"store i64 {e.op(f'add i64 {counted}, {work}')}, ptr %tsteps")
    over = e.label("watchdog")  # the step limit, and now and then a look for a loop (.watch)
    look_at = e.op("load i64, ptr %checkat")
    e.emit(f"br i1 {e.op(f'icmp ugt i64 {steps}, {look_at}')}, label %{over}, label %K{k}")
    e.put_label(over)
    e.emit(f"store i32 {k}, ptr %at")
    e.emit("br label %look")
    e.put_label(f"K{k}")
    e.restart(True)
    e.emit(f"{m} = load {vec('i1')}, ptr %mask")
    last = fn.steps[end - 1]
    body_end = end if last.kind == PLAIN else end - 1
    for i in range(start, body_end):
        ins = fn.steps[i].ins
        e.insn = i
        e.main_line.add(e.block)
        e.defining = writes(ins, True)
        e.shift = _shift_of(e, ins)
        if ins.opcode in LOWER:
            _lowered(e, ins)
        elif not _skipped(ins):
            _cold(e, ins, f"`{ins.text}`")
    e.insn = end - 1
    e.defining, e.shift = False, None
    following = block_of[end]
    if last.kind == PLAIN:
        _goto(e, m, following)
    elif last.kind == BRA:
        _branch(e, last.ins, m, block_of[last.target], following)
    elif last.kind in (RET, EXIT):
        leaving = e.guard(last.ins)
        keep = e.op(f"xor {vec('i1')} {leaving}, splat (i1 true)")
        live = e.op(f"load {_M}, ptr %live")
        e.emit(f"store {_M} {e.op(f'and {_M} {live}, {keep}')}, ptr %live")
        rest = e.op(f"and {vec('i1')} {m}, {keep}")
        e.emit(f"store {vec('i1')} {rest}, ptr %mask")
        on = e.label("stay")
        e.emit(f"br i1 {e.reduce('or', rest, 'i1')}, label %{on}, label %sched")
        e.put_label(on)
        _goto(e, rest, following)
    elif last.kind == BAR and last.target is not None:  # bar.red: the interpreter's
        _cold(e, last.ins, f"`{last.ins.text}` (a barrier reduction)")
        _goto(e, m, following)
    elif last.kind == BAR:
        arriving = e.guard(last.ins)
        if last.ins.guard is None:
            _park_whole(e, following)
        _set_pcs(e, m, following)
        blocked = e.op(f"load {vec('i1')}, ptr %blocked")
        e.emit(f"store {vec('i1')} {e.op(f'or {_M} {blocked}, {arriving}')}, ptr %blocked")
        e.emit("br label %sched")
    else:  # trap (or a call .inline leaves to the interpreter): the interpreter re-runs the launch
        _leave_if_reached(e, last.ins, COLD_CODE if end - 1 in e.cold else TRAP_CODE)
        _goto(e, m, following)
    e.restart(False)


def _park_whole(e: Emitter, following: int) -> None:
    """A converged warp none of whose lanes waits elsewhere reaches a barrier whole (its mask is
    then every live lane): it saves and returns at once, to resume at ``following`` without the
    scheduler (:func:`_entry`'s restore)."""
    conv, blocked, live = (e.op(f"load {t}, ptr %{name}") for t, name in
                           (("i1", "conv"), (_M, "blocked"), (_M, "live")))
    none_waits = e.op(f"icmp eq i32 {e.op(f'bitcast {_M} {blocked} to i32')}, 0")
    whole = e.op(f"and i1 {conv}, {none_waits}")
    park, wait = e.label("park"), e.label("wait")
    e.emit(f"br i1 {whole}, label %{park}, label %{wait}")
    e.put_label(park)
    _save(e, live, str(following))
    e.put_label(wait)


def _save(e: Emitter, live: str, resume: str) -> None:
    """The warp's header saved (its lanes' blocks, live mask, steps and ``resume``: the block they
    all resume at, or -1), and the warp returns: it waits at a barrier."""
    e.emit(f"store {_I32} {e.op(f'load {_I32}, ptr %pcs')}, ptr %st, align 8")
    e.emit(f"store {_M} {live}, ptr {e.op(f'getelementptr i8, ptr %st, i64 {_LIVE_AT}')}, align 8")
    steps_at = e.op(f"getelementptr i8, ptr %st, i64 {_STEPS_AT}")
    e.emit(f"store i64 {e.op('load i64, ptr %steps')}, ptr {steps_at}, align 8")
    e.emit(f"store i32 {resume}, ptr {e.op(f'getelementptr i8, ptr %st, i64 {_RESUME_AT}')}, align 4")
    e.emit("store i32 1, ptr %rc")
    e.emit("br label %exit")


def _leave_if_reached(e: Emitter, ins: Instruction, code: int) -> None:
    """End the warp with ``code`` if some lane runs ``ins``; else go on."""
    stop, on = e.label("leave"), e.label("stay")
    e.emit(f"br i1 {e.reduce('or', e.guard(ins), 'i1')}, label %{stop}, label %{on}")
    e.put_label(stop)
    e.leave(code)
    e.put_label(on)


def _cold(e: Emitter, ins: Instruction, why: str) -> None:
    """An instruction the tier does not compile: a warp that reaches it leaves the compiled code."""
    e.cold[e.insn] = why
    _leave_if_reached(e, ins, COLD_CODE)


def _lowered(e: Emitter, ins: Instruction) -> None:
    """``ins`` as IR, or left cold (and what its lowering had emitted taken back) where the lowering
    does not support its form."""
    kept = (len(e.lines), e.block, dict(e.spans), dict(e.deltas), e.base)
    try:
        LOWER[ins.opcode](e, ins, e.guard(ins))
    except Unsupported as exc:
        del e.lines[kept[0] :]
        e.block, e.spans, e.deltas, e.base = kept[1:]
        _cold(e, ins, f"`{ins.text}` ({exc})")


def _set_pcs(e: Emitter, lanes: str, block: int) -> None:
    pcs = e.op(f"load {vec('i32')}, ptr %pcs")
    chosen = e.op(f"select {_M} {lanes}, {_I32} splat (i32 {block}), {_I32} {pcs}")
    e.emit(f"store {_I32} {chosen}, ptr %pcs")


def _goto(e: Emitter, lanes: str, block: int) -> None:
    """Lanes ``lanes`` (the block's mask) continue at ``block``: directly while converged."""
    slow = e.label("diverged")
    e.emit(f"br i1 {e.op('load i1, ptr %conv')}, label %B{block}, label %{slow}")
    e.put_label(slow)
    _set_pcs(e, lanes, block)
    e.emit("br label %sched")


def _branch(e: Emitter, ins: Instruction, m: str, target: int, following: int) -> None:
    if ins.guard is None:
        _goto(e, m, target)
        return
    taken = e.guard(ins)
    rest = e.op(f"xor {vec('i1')} {m}, {taken}")
    conv = e.op("load i1, ptr %conv")
    some_taken, some_rest = e.reduce("or", taken, "i1"), e.reduce("or", rest, "i1")
    stays = e.op(f"xor i1 {some_rest}, true")
    all_taken = e.op(f"and i1 {conv}, {stays}")
    none_taken = e.label("untaken")
    e.emit(f"br i1 {all_taken}, label %B{target}, label %{none_taken}")
    e.put_label(none_taken)
    split = e.label("split")
    untaken = e.op(f"xor i1 {some_taken}, true")
    e.emit(f"br i1 {e.op(f'and i1 {conv}, {untaken}')}, label %B{following}, label %{split}")
    e.put_label(split)
    _set_pcs(e, rest, following)
    _set_pcs(e, taken, target)
    e.emit("br label %sched")


def _scheduler(e: Emitter, count: int) -> None:
    """The min-PC scheduler, the barrier's save of the program counters, the off-the-end block and
    the common exit."""
    mask, i32 = vec("i1"), vec("i32")
    e.put_label("sched")
    live, blocked = e.op(f"load {mask}, ptr %live"), e.op(f"load {mask}, ptr %blocked")
    free = e.op(f"xor {mask} {blocked}, splat (i1 true)")
    runnable = e.op(f"and {mask} {live}, {free}")
    e.emit(f"br i1 {e.reduce('or', runnable, 'i1')}, label %pick, label %idle")
    e.put_label("pick")
    pcs = e.op(f"load {i32}, ptr %pcs")
    candidates = e.op(f"select {mask} {runnable}, {i32} {pcs}, {i32} splat (i32 {_FAR})")
    lowest = e.reduce("umin", candidates, "i32")
    here = e.op(f"icmp eq {i32} {candidates}, {e.spread(lowest, 'i32')}")
    e.emit(f"store {mask} {here}, ptr %mask")
    here_bits, runnable_bits = (
        e.op(f"bitcast {mask} {here} to i32"),
        e.op(f"bitcast {mask} {runnable} to i32"),
    )
    same = e.op(f"icmp eq i32 {here_bits}, {runnable_bits}")
    e.emit(f"store i1 {same}, ptr %conv")
    cases = " ".join(f"i32 {k}, label %B{k}" for k in range(count))
    e.emit(f"switch i32 {lowest}, label %B{count} [{cases}]")
    e.put_label(f"B{count}")  # past the last instruction: an implicit return
    gone = e.op(f"load {mask}, ptr %mask")
    still, staying = e.op(f"load {mask}, ptr %live"), e.op(f"xor {mask} {gone}, splat (i1 true)")
    e.emit(f"store {mask} {e.op(f'and {mask} {still}, {staying}')}, ptr %live")
    e.emit("br label %sched")
    e.put_label("idle")
    e.emit(f"br i1 {e.reduce('or', blocked, 'i1')}, label %save, label %done")
    e.put_label("save")
    _save(e, live, "-1")
    e.put_label("done")
    e.emit("store i32 0, ptr %rc")
    e.emit("br label %exit")
    e.put_label("exit")
    total = e.ctx("thread_steps")
    before, mine = e.op(f"load i64, ptr {total}"), e.op("load i64, ptr %tsteps")
    e.emit(f"store i64 {e.op(f'add i64 {before}, {mine}')}, ptr {total}")
    e.emit(f"ret i32 {e.op('load i32, ptr %rc')}")
