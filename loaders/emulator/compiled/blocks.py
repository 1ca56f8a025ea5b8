"""A compiled launch's blocks, run in chunks, on several threads where no block can see another's work.

Blocks of a launch run one after the other in chunks sized by the pace of the chunk before, up to
:data:`_CHUNK_SECONDS` (Python's signal handler runs between two chunks, so Ctrl-C stops a long
launch; chunks that doubled made a small launch of 256 blocks nine calls).  When the kernel's blocks
are independent (:func:`dependence`) and what the chunks so far took says the blocks left are work
enough for more threads (each at least :data:`_SHARE_SECONDS`), the rest runs in rounds on them,
through :mod:`.._threads`, whose workers join a round in microseconds (a Python thread pool's
hand-over cost more than a 150 us Jacobi step's share saved): native code runs without the GIL,
each thread with its own context (shared and local memory, warp state, site table, step counts),
and claims the round's blocks a piece at a time (a quarter of a thread's share: :data:`_PIECES`),
so a thread the system has not scheduled yet holds none back.  The estimate waits for a chunk
after the first (which meets its context's memory first) that took a tenth of that share.
Blocks that race on no memory end the same whatever the order, so the results are the ones a run
in order gives.  A round's failure is reported from the failing piece that comes first in block
order: that block is the one a run in order would have stopped at (every piece before it was
claimed, and so ran).

``PTXBRIDGE_CPU_THREADS`` sets how many threads (1: always in order); the default is every CPU this
process may run on.  Without the ``_threads`` extension (a build without a C compiler) blocks run
in order.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from ptxbridge.abi.errors import ArgumentError

from ..build import Context
from ..machine import Function
from .emit import CTX
from .jit import Compiled

try:
    from .. import _threads
except ImportError:  # built without the extension: every launch in order
    _threads = None

__all__ = ["Addressed", "dependence", "run_blocks", "threads", "stats"]

_CHUNK_SECONDS = 0.01  # a chunk of blocks runs about this long at most (Ctrl-C waits for it)
_PROBE_SECONDS = 0.00001  # while more threads may be worth it, a chunk long enough to say (warm below)
_SHARE_SECONDS = 0.00002  # the least work (seconds on one thread) worth another thread
_PIECES = 4  # pieces a thread's share of a round is claimed in (finer cost 12% more a Jacobi step here)
_BLOCK_LOCAL = frozenset(("shared", "local", "param", "const"))
_ORDERED = frozenset(("volatile", "relaxed", "acquire", "release", "mmio"))
stats = {"rounds": 0}  # rounds of blocks handed across threads, in this process


def dependence(fn: Function) -> str | None:
    """None when the blocks of kernel ``fn`` cannot see each other's work, else the first instruction
    through which one may: an atomic or reduction outside shared memory (blocks count or claim
    through them), a volatile or memory-ordered access outside it, a fence (what blocks
    communicate through is ordered by one)."""
    for step in fn.steps:
        ins = step.ins
        if ins.opcode in ("fence", "membar"):
            return ins.text
        if ins.opcode not in ("atom", "red", "ld", "ldu", "st"):
            continue
        outside = Context.state_space(set(ins.mods)) not in _BLOCK_LOCAL
        if outside and (ins.opcode in ("atom", "red") or _ORDERED.intersection(ins.mods)):
            return ins.text
    return None


def threads() -> int:
    """How many threads a launch of independent blocks may use (``PTXBRIDGE_CPU_THREADS``)."""
    given = os.environ.get("PTXBRIDGE_CPU_THREADS", "")
    if given.strip():
        try:
            count = int(given)
        except ValueError:
            count = 0
        if count < 1:
            raise ArgumentError("$PTXBRIDGE_CPU_THREADS (the CPU loader's threads for independent blocks) "
                                f"must be a positive integer (got {given!r})")
        return count
    return len(os.sched_getaffinity(0))


class Addressed(NamedTuple):
    """An array and its address, read once (NumPy's ``.ctypes.data`` costs a microsecond a read):
    a context's words, a launch's tables."""

    array: np.ndarray
    address: int


def _run(compiled: Compiled, ctx: Addressed, first: int, end: int) -> int:
    words = ctx.array
    words[_FIRST_BLOCK], words[_END_BLOCK] = first, end
    return compiled.launch(ctx.address)


_FIRST_BLOCK, _END_BLOCK = CTX["first_block"], CTX["end_block"]


def _helpers(work: float, most: int) -> int:
    """How many threads beside this one (``most`` at most) ``work`` seconds (on one thread) are worth."""
    wanted = most
    if _SHARE_SECONDS > 0:
        wanted = min(wanted, int(work / _SHARE_SECONDS) - 1)
    return max(wanted, 0)


def run_blocks(compiled: Compiled, ctx: Addressed, blocks: int,
               more: Callable[[int], list[Addressed]], most: int) -> tuple[int, Addressed, list[Addressed]]:
    """Run blocks ``[0, blocks)``: ``(status, ctx, contexts)``, the first failing status (0: none)
    with the context that met it, and every context used (their step counts add up).  ``more(k)``
    readies ``k`` more contexts, for threads of the pool, ``most`` at most; with ``most`` 0 every
    block runs on ``ctx``, in order."""
    if _threads is None:
        most = 0
    contexts, first, chunk, per_block = [ctx], 0, 1, 0.0
    while first < blocks:
        started = time.perf_counter()
        if len(contexts) == 1:
            end = min(blocks, first + chunk)
            status = _run(compiled, ctx, first, end)
            if status:
                return status, ctx, contexts
            took = time.perf_counter() - started
            per_block = took / (end - first)
            warm = first > 0 and 10 * took >= _SHARE_SECONDS  # block 0 meets the context's memory first
            count = _helpers(per_block * (blocks - end), most) if end < blocks and warm else 0
            if count:
                contexts += more(count)
            if took < _CHUNK_SECONDS:  # the next chunk as long as its purpose needs, by this one's pace
                wanted = _PROBE_SECONDS if most and end < blocks else _CHUNK_SECONDS
                chunk = max(2 * chunk, int(wanted / max(per_block, 1e-9)))
        else:  # a round: at most _CHUNK_SECONDS of blocks per thread, in pieces the threads claim
            per_thread = max(1, int(_CHUNK_SECONDS / max(per_block, 1e-9)))
            end = min(blocks, first + per_thread * len(contexts))
            piece = max(1, (end - first) // (len(contexts) * _PIECES))
            stats["rounds"] += 1
            status, k = _threads.run(compiled.address, _FIRST_BLOCK, _END_BLOCK,  # type: ignore[union-attr]
                                     [c.address for c in contexts], first, end, piece)
            if status:
                return status, contexts[k], contexts
        first = end
    return 0, ctx, contexts
