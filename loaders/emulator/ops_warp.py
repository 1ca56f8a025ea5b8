"""Warp-level instructions (PTX ISA 9.7.13.6-9.7.13.11: shfl.sync, vote.sync, activemask, redux.sync).

Threads are laid out block by block, each block padded to whole warps, so
``reshape(-1, 32)`` groups a batch's threads by warp.  Each thread's result
covers the lanes its own ``membermask`` names that execute the instruction
with it (threads of one warp may pass different masks: ``__reduce_add_sync``
over the odd lanes and, in the same instruction, over the even ones).
``shfl.sync`` reads its source lane whatever the mask (a lane outside it is
undefined on the GPU), and ``bar.warp.sync`` is a no-op: the lanes of a warp
already execute together here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .build import Context, Run, op
from .parse import Pair
from .values import as_array

__all__: list[str] = []

_LANE_BITS = np.uint64(1) << np.arange(32, dtype=np.uint64)
_LANES = np.arange(32, dtype=np.uint32)


def _members(fr: Any, m: Any, membermask: Any) -> np.ndarray:
    """Who takes part in each thread's operation: ``[warp, i, j]`` is true when lane ``j`` executes
    the instruction with thread ``i`` (``j`` active and named in ``i``'s ``membermask``).

    The middle axis has length 1 when every thread of the batch passes the same mask (the common
    case, computed without the 32 x 32 matrix); results broadcast over it.
    """
    n = fr.batch.n
    active = np.ones((n // 32, 1, 32), bool) if m is None else m.reshape(-1, 1, 32)
    if isinstance(membermask, np.ndarray) and membermask.ndim and not (membermask == membermask[0]).all():
        rows = membermask.astype(np.uint32).reshape(-1, 32, 1)  # one mask per thread i, tested per lane j
    else:
        rows = np.uint32(membermask.flat[0] if isinstance(membermask, np.ndarray) else membermask)
    return (((rows >> _LANES) & np.uint32(1)) == 1) & active


def _per_thread(result: np.ndarray) -> np.ndarray:
    """A ``[warp, 1 or 32]`` result as one value per thread."""
    return np.broadcast_to(result, (result.shape[0], 32)).reshape(-1)


def _pack(bits: np.ndarray) -> np.ndarray:
    """Boolean lanes on the last axis -> one u32 per row, lane j at bit j."""
    return (bits.astype(np.uint64) * _LANE_BITS).sum(axis=-1, dtype=np.uint64).astype(np.uint32)


def ballot(bits: np.ndarray) -> np.ndarray:
    """One u32 per thread: the warp's bits, lane i at bit i."""
    return np.repeat(_pack(bits.reshape(-1, 32)), 32)


@op("shfl")
def _shfl(cx: Context) -> Run:
    flags, _ = cx.split_mods({"sync", "up", "down", "bfly", "idx"}, {"b32"})
    modes = flags - {"sync"}
    if len(modes) != 1:
        raise cx.unsupported("shfl needs one of .up/.down/.bfly/.idx")
    mode = modes.pop()
    ops = cx.operands(5 if "sync" in flags else 4)
    d, a, b, c = ops[:4]
    w_d = cx.write(d.first if isinstance(d, Pair) else d)
    w_p = cx.write(d.second) if isinstance(d, Pair) else None
    ra, rb, rc = cx.read(a, "b32"), cx.read(b, "u32"), cx.read(c, "u32")

    def run(fr: Any, m: Any) -> None:
        n = fr.batch.n
        lane = fr.batch.special["%laneid"].astype(np.int64)
        # bval[4:0] = b[4:0]: only the low five bits of b count (PTX ISA shfl.sync semantics)
        shift, clamp = np.asarray(rb(fr)).astype(np.int64) & 0x1F, np.asarray(rc(fr)).astype(np.int64)
        segmask = (clamp >> 8) & 0x1F
        min_lane = lane & segmask
        max_lane = min_lane | ((clamp & 0x1F) & ~segmask)
        if mode == "up":
            j = lane - shift
            valid = j >= max_lane
        else:
            j = lane + shift if mode == "down" else lane ^ shift if mode == "bfly" else \
                min_lane | (shift & ~segmask)
            valid = j <= max_lane
        j = np.where(valid, j, lane)
        source = np.arange(n, dtype=np.int64) - lane + j
        value = ra(fr)
        w_d(fr, as_array(value, n)[source] if isinstance(value, np.ndarray) else value, m)
        if w_p is not None:
            w_p(fr, valid, m)

    return run


@op("vote")
def _vote(cx: Context) -> Run:
    flags, (t,) = cx.split_mods({"sync", "all", "any", "uni", "ballot"}, {"pred", "b32"})
    modes = flags - {"sync"}
    if len(modes) != 1 or (t == "b32") != ("ballot" in modes):
        raise cx.unsupported("vote needs .all/.any/.uni with .pred, or .ballot with .b32")
    mode = modes.pop()
    ops = cx.operands(3 if "sync" in flags else 2)
    w, ra = cx.write(ops[0]), cx.read(ops[1], "pred")
    rmask = cx.read(ops[2], "u32") if "sync" in flags else (lambda fr: np.uint32(0xFFFFFFFF))

    def run(fr: Any, m: Any) -> None:
        members = _members(fr, m, rmask(fr))
        votes = as_array(ra(fr), fr.batch.n).reshape(-1, 1, 32)
        if mode == "ballot":
            w(fr, _per_thread(_pack(votes & members)), m)
            return
        yes = (votes & members).any(axis=2)
        no = (~votes & members).any(axis=2)
        result = {"all": ~no, "any": yes, "uni": ~(yes & no)}[mode]
        w(fr, _per_thread(result), m)

    return run


@op("activemask")
def _activemask(cx: Context) -> Run:
    cx.split_mods(set(), {"b32"})
    (d,) = cx.operands(1)
    w = cx.write(d)

    def run(fr: Any, m: Any) -> None:
        active = np.ones(fr.batch.n, bool) if m is None else m
        w(fr, ballot(active), m)

    return run


_REDUX = {"add": (np.add, 0), "min": (np.minimum, None), "max": (np.maximum, None),
          "and": (np.bitwise_and, -1), "or": (np.bitwise_or, 0), "xor": (np.bitwise_xor, 0)}


@op("redux")
def _redux(cx: Context) -> Run:
    flags, (t,) = cx.split_mods({"sync"} | set(_REDUX), {"u32", "s32", "b32"})
    names = flags & set(_REDUX)
    if "sync" not in flags or len(names) != 1:
        raise cx.unsupported("redux needs .sync and one of " + ", ".join(_REDUX))
    ufunc, neutral = _REDUX[names.pop()]
    d, a, mask = cx.operands(3)
    w, ra, rmask = cx.write(d), cx.read(a, t), cx.read(mask, "u32")

    def run(fr: Any, m: Any) -> None:
        values = as_array(ra(fr), fr.batch.n)
        if neutral is None:
            info = np.iinfo(values.dtype)
            fill = info.max if ufunc is np.minimum else info.min
        else:
            fill = values.dtype.type(neutral % (1 << 32)) if values.dtype.kind == "u" else neutral
        masked = np.where(_members(fr, m, rmask(fr)), values.reshape(-1, 1, 32), values.dtype.type(fill))
        w(fr, _per_thread(ufunc.reduce(masked, axis=2).astype(values.dtype)), m)

    return run


@op("match")
def _match(cx: Context) -> Run:
    flags, (t,) = cx.split_mods({"sync", "any", "all"}, {"b32", "b64"})
    if "sync" not in flags or len(flags & {"any", "all"}) != 1:
        raise cx.unsupported("match needs .sync and one of .any/.all")
    every = "all" in flags
    d, a, mask = cx.operands(3)
    w_d = cx.write(d.first if isinstance(d, Pair) else d)
    w_p = cx.write(d.second) if isinstance(d, Pair) else None
    ra, rmask = cx.read(a, t), cx.read(mask, "u32")

    def run(fr: Any, m: Any) -> None:
        members = _members(fr, m, rmask(fr))
        values = as_array(ra(fr), fr.batch.n).reshape(-1, 32)
        lanes = _pack((values[:, :, None] == values[:, None, :]) & members)  # [warp, i]
        if not every:
            w_d(fr, lanes.reshape(-1), m)
            return
        uniform = lanes == _per_thread(_pack(members)).reshape(-1, 32)  # i's value is every member's
        w_d(fr, np.where(uniform, lanes, np.uint32(0)).reshape(-1), m)
        if w_p is not None:
            w_p(fr, uniform.reshape(-1), m)

    return run


@op("elect")
def _elect(cx: Context) -> Run:
    flags, _ = cx.split_mods({"sync"}, set(), ntypes=0)
    if "sync" not in flags:
        raise cx.unsupported("elect needs .sync")
    d, mask = cx.operands(2)
    if not isinstance(d, Pair):
        raise cx.unsupported("elect.sync writes d|p")
    w_d, w_p, rmask = cx.write(d.first), cx.write(d.second), cx.read(mask, "u32")

    def run(fr: Any, m: Any) -> None:
        members = _members(fr, m, rmask(fr))
        leader = _per_thread(np.where(members.any(axis=2), members.argmax(axis=2), 0).astype(np.uint32))
        w_d(fr, leader, m)
        w_p(fr, fr.batch.special["%laneid"] == leader, m)

    return run
