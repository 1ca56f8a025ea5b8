"""Warp-level instructions (PTX ISA 9.7.13.6-9.7.13.11: shfl.sync, vote.sync, activemask, redux.sync).

Threads are laid out block by block, each block padded to whole warps, so
``reshape(-1, 32)`` groups a batch's threads by warp.  Only the threads that
execute the instruction together (the active mask, intersected with
``membermask``) take part.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .build import Context, Run, op
from .parse import Pair
from .values import as_array

__all__: list[str] = []

_LANE_BITS = np.uint64(1) << np.arange(32, dtype=np.uint64)


def _participants(fr: Any, m: Any, membermask: Any) -> np.ndarray:
    lane = fr.batch.special["%laneid"]
    bits = as_array(membermask, fr.batch.n).astype(np.uint64) >> lane.astype(np.uint64)
    member = (bits & np.uint64(1)) == 1
    return member if m is None else member & m


def _per_warp(values: np.ndarray) -> np.ndarray:
    return values.reshape(-1, 32)


def _broadcast(per_warp: np.ndarray) -> np.ndarray:
    return np.repeat(per_warp, 32)


def ballot(bits: np.ndarray) -> np.ndarray:
    """One u32 per thread: the warp's bits, lane i at bit i."""
    words = (_per_warp(bits).astype(np.uint64) * _LANE_BITS).sum(axis=1, dtype=np.uint64)
    return _broadcast(words.astype(np.uint32))


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
        n = fr.batch.n
        active = _participants(fr, m, rmask(fr))
        votes = as_array(ra(fr), n) & active
        if mode == "ballot":
            w(fr, ballot(votes), m)
            return
        yes = _per_warp(votes).any(axis=1)
        no = _per_warp(active & ~votes).any(axis=1)
        result = {"all": ~no, "any": yes, "uni": ~(yes & no)}[mode]
        w(fr, _broadcast(result), m)

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
        n = fr.batch.n
        active = _participants(fr, m, rmask(fr))
        values = as_array(ra(fr), n)
        if neutral is None:
            info = np.iinfo(values.dtype)
            fill = info.max if ufunc is np.minimum else info.min
        else:
            fill = values.dtype.type(neutral % (1 << 32)) if values.dtype.kind == "u" else neutral
        masked = np.where(active, values, values.dtype.type(fill))
        w(fr, _broadcast(ufunc.reduce(_per_warp(masked), axis=1).astype(values.dtype)), m)

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
        n = fr.batch.n
        active = _per_warp(_participants(fr, m, rmask(fr)))
        values = _per_warp(as_array(ra(fr), n))
        same = (values[:, :, None] == values[:, None, :]) & active[:, None, :]
        lanes = (same.astype(np.uint64) * _LANE_BITS).sum(axis=2, dtype=np.uint64).astype(np.uint32)
        if not every:
            w_d(fr, lanes.reshape(-1), m)
            return
        members = (active.astype(np.uint64) * _LANE_BITS).sum(axis=1, dtype=np.uint64).astype(np.uint32)
        uniform = (lanes == members[:, None]).all(axis=1)
        w_d(fr, np.where(uniform[:, None], lanes, np.uint32(0)).reshape(-1), m)
        if w_p is not None:
            w_p(fr, _broadcast(uniform), m)

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
        active = _per_warp(_participants(fr, m, rmask(fr)))
        leader = np.where(active.any(axis=1), active.argmax(axis=1), 0).astype(np.uint32)
        w_d(fr, _broadcast(leader), m)
        w_p(fr, fr.batch.special["%laneid"] == _broadcast(leader), m)

    return run
