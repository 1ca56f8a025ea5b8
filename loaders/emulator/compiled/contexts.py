"""The contexts a compiled launch runs its blocks on: one per thread, carved together, readied together.

A context is an arena of one launch shape's :class:`Layout` (its shared and local memory, region
table, warps' state, site table and context words).  The contexts a launch may use, one per thread
(:func:`.blocks.threads`), are carved from one array as a :class:`Team` and kept for the next launch
of the shape (a fresh arena's pages fault in as the kernel first touches them, which costs more than
a small launch's kernel).  A launch readies the contexts it uses in a few array operations over all
of them at once: readying them one by one cost a Jacobi step on 16 threads more than its blocks'
work.  What a launch reads before it writes is made new for each: local memory is zeroed, and the
region table, site table (no span admitted) and context words (step counts and error fields zero)
are copied from the team's fresh ones.  Shared memory (``@launch`` zeroes it for each block) and
the warps' state (a warp's start writes what it reads there: its header is read only after a
barrier saved it, and the slots a warp may read before writing are zeroed, its span memos cleared,
when it starts: :mod:`.kernel`; 150 KB a Jacobi context) are left as the last launch left them.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..launch import shared_bytes
from ..memory import PER_THREAD, WINDOWS, instance_stride
from ..program import Program
from .blocks import Addressed
from .direct import SITE_WORDS
from .emit import CTX, LAUNCH_WORDS
from .inline import CALL_PARAMETERS, Flat
from .kernel import SLOT, state_bytes

__all__ = ["Layout", "Row", "Team", "Teams", "layout"]

Row = tuple[int, int, int, int]  # a region table row: base, end, host address minus base, flags
_ADDRESSED = ("regions", "shared", "local", "state", "sites")  # the pieces whose addresses a context holds
_NO_ADDRESS = np.uint64(2**64 - 1)  # an empty admitted span: lowest address 2**64 - 1, highest 0


class Layout(NamedTuple):
    """What a context of one kernel's launches with one block, dynamic shared memory and number of
    the launch's region rows holds: its arena's pieces (name, bytes), its own region rows (piece,
    offset in it, base, end, flags: shared memory, local memory, call parameters) and the context
    words that follow from these (word, value)."""

    sizes: tuple[tuple[str, int], ...]
    own: tuple[tuple[str, int, int, int, int], ...]
    words: tuple[tuple[str, int], ...]


def layout(program: Program, flat: Flat, block: tuple[int, int, int], shared_mem: int, launch_rows: int
            ) -> Layout:
    """The :class:`Layout` of kernel ``flat``'s contexts for ``block``, ``shared_mem`` and a region
    table of ``launch_rows`` rows from the launch: the same for every launch of that shape."""
    per_block = block[0] * block[1] * block[2]
    warps = -(-per_block // 32)
    shared_size = shared_bytes(program, shared_mem)
    locals_stride = instance_stride(program.local_size, PER_THREAD)
    local_stride = instance_stride(locals_stride + flat.call_bytes, PER_THREAD)
    calls = WINDOWS["local"] + CALL_PARAMETERS
    own = tuple(
        (piece, offset, base, base + size, flags) for piece, offset, base, size, flags in (
            ("shared", 0, WINDOWS["shared"], shared_size, 1),
            ("local", 0, WINDOWS["local"], program.local_size, 3),  # writable, one instance per thread
            ("local", locals_stride, calls, flat.call_bytes, 3),
        ) if size
    )
    fn = flat.function
    sizes = (
        ("shared", shared_size), ("local", local_stride * 32 * warps),
        ("state", warps * state_bytes(len(fn.zeros))), ("regions", 32 * (launch_rows + len(own))),
        ("sites", 8 * SITE_WORDS * len(fn.steps)), ("ctx", 8 * len(CTX)),  # the tail: .Team
    )
    words = (
        ("nregions", launch_rows + len(own)), ("shared_size", shared_size), ("local_stride", local_stride),
        ("local_size", local_stride * 32 * warps if local_stride else 0), ("threads", per_block),
        ("nwarps", warps),
    )
    return Layout(sizes, own, words)


class Team(NamedTuple):
    """``len(contexts)`` arenas of one layout in one array (:func:`_carve`), with views across all of
    them of what readying a context writes (row ``k`` of each is context ``k``'s): its local memory
    and its tail, the region table, site table and context words, which a launch copies from
    ``fresh``, what they start every launch as, the launch's own in :meth:`launch`."""

    layout: Layout
    arenas: np.ndarray  # (contexts, bytes of an arena)
    contexts: list[Addressed]  # each context's words and their address
    local: np.ndarray | None  # (contexts, bytes): local memory, None where the kernel has none
    tail: np.ndarray  # (contexts, bytes): the arenas' region tables, site tables and context words
    fresh: np.ndarray  # (contexts, bytes): what tails start a launch as
    rows: np.ndarray  # (contexts, the launch's rows, 4): fresh region tables' first rows
    words: np.ndarray  # (contexts, words of CTX): fresh context words

    def launch(self, rows: np.ndarray, fields: tuple[int, ...]) -> None:
        """Make the team's contexts those of a launch with region rows ``rows`` (an array of
        :data:`Row`, before the contexts' own) and ``fields`` (:data:`LAUNCH_WORDS`)."""
        self.rows[:] = rows
        self.words[:, : len(LAUNCH_WORDS)] = fields

    def ready(self, first: int, end: int) -> list[Addressed]:
        """Contexts ``[first, end)``, readied for the launch: local memory zeroed, tails fresh."""
        if self.local is not None:
            self.local[first:end] = 0
        self.tail[first:end] = self.fresh[first:end]
        return self.contexts[first:end]


def _carve(layout: Layout, count: int) -> Team:
    """``count`` zeroed arenas in one array, a piece of each per name of ``layout.sizes``, each of its
    size (at least one byte), starting at a multiple of :data:`.kernel.SLOT` and padded to one:
    warps' registers are loaded as whole vectors, and no two pieces (nor two contexts, whose threads
    write them at once) share a cache line.  The tail (:class:`Team`) is the pieces from the
    region table on."""
    spans, at = {}, 0
    for name, size in layout.sizes:
        spans[name] = (at, max(size, 1))
        at += -(-max(size, 1) // SLOT) * SLOT
    raw = np.zeros(count * at + SLOT, np.uint8)
    skip = -raw.ctypes.data % SLOT
    arenas, base = raw[skip : skip + count * at].reshape(count, at), raw.ctypes.data + skip
    tail_start = spans["regions"][0]
    fresh = np.zeros((count, at - tail_start), np.uint8)

    def piece(name: str) -> np.ndarray:  # the fresh tails' piece ``name``, as words
        start, size = spans[name]
        return fresh[:, start - tail_start : start - tail_start + size].view(np.uint64)

    address = {name: base + start for name, (start, _) in spans.items()}  # context 0's
    regions, words = piece("regions").reshape(count, -1, 4), piece("ctx")
    launch_rows = regions.shape[1] - len(layout.own)
    for k in range(count):
        own = [(low, end, (address[name] + k * at + offset - low) % (1 << 64), flags)
               for name, offset, low, end, flags in layout.own]
        regions[k, launch_rows:] = np.array(own, np.uint64).reshape(-1, 4)
        named = {**dict(layout.words), **{name: address[name] + k * at for name in _ADDRESSED}}
        words[k, [CTX[word] for word in named]] = list(named.values())
    piece("sites")[:, ::SITE_WORDS] = _NO_ADDRESS  # no span admitted yet anywhere
    start, size = spans["ctx"]
    contexts = [Addressed(arenas[k, start : start + size].view(np.uint64), address["ctx"] + k * at)
                for k in range(count)]
    start, size = spans["local"]
    local = arenas[:, start : start + size] if dict(layout.sizes)["local"] else None
    return Team(layout, arenas, contexts, local, arenas[:, tail_start:], fresh, regions[:, :launch_rows],
                words)


class Teams:
    """Teams kept by layout and size for the next launch (a few, of a few layouts)."""

    def __init__(self) -> None:
        self.free: dict[tuple[Layout, int], list[Team]] = {}

    def take(self, layout: Layout, count: int) -> Team:
        """A team of ``count`` contexts of ``layout``, to :meth:`Team.ready` (kept or carved)."""
        try:
            return self.free[(layout, count)].pop()  # one list.pop: two threads never take the same team
        except (KeyError, IndexError):
            return _carve(layout, count)

    def give(self, team: Team) -> None:
        """Keep ``team`` for later launches of its layout."""
        if len(self.free) > _LAYOUTS:
            self.free.clear()
        kept = self.free.setdefault((team.layout, len(team.contexts)), [])
        if len(kept) < _KEPT:
            kept.append(team)


_LAYOUTS = 8  # team layouts (launch shapes) kept at most
_KEPT = 2  # teams kept per layout and size (two threads of the program that launch a kernel at once)
