"""The inline fast paths of a warp's loads and stores: remembered checks, direct and patterned moves.

Every access instruction has a *site* in the launch's site table (six words: the lowest address,
the highest first address and the pointer offset of a span its check admitted, one unused, and
lane 0's address at the instruction's last execution and its stride from the one before).
The full check of an aligned span that lies in one region (:func:`admitted`) remembers there the
addresses any later access of that instruction may span with the same offset: the region cut to
the extent of the argument the address comes from, when the region is neither read-only for a
store nor per-thread.  A later access inside them is checked with two compares, in line; any
other goes to ``@ptxb.admit``, which checks it as ``@ptxb.hoisted`` does and remembers it, and an
access that cannot be admitted takes the full check of ``@resolve``, which reports.  A launch has
its own table (every row empty), so what one launch admitted never reaches another.

When each group of eight lanes points at consecutive elements (a whole warp's consecutive
elements, a 16-wide block's two rows, an 8-wide block's four), a single-element access is one
vector load or store per group behind one check of the groups' span (:func:`grouped`; a store
writes the groups in lane order; the accesses of a block outside loops through one register share
one check over the span of their offsets, a stencil's ``[%rd-4]`` and ``[%rd+4]``), or one
vector access where the base register's lanes are known to be consecutive (:func:`direct`).
Loads of 32- and 64-bit elements through a base register
classify the register's lanes once while it holds its value (``@ptxb.span``: per group of eight
lanes, consecutive, one address or neither; remembered in the warp's state, moved by a warp-uniform
step, cleared by any other write) and then move each group with a vector load, a scalar load and a
broadcast, or a gather per element (:func:`patterned`), the classes ``@ptxb.fetch`` works out per
access; where the host has AVX-512 and the lanes' elements lie within 128 bytes (a row and a column
of a shared tile), one masked load of those bytes and two-table permutes by the lanes' remembered
indices move the whole warp (:func:`windowed`). Global loads in a loop prefetch their stride ahead
(:func:`prefetch_ahead`).  A load through a register whose lanes are known to follow the lane by
constants (:mod:`.lanes`: a 16-wide block's tile row, ``base + (lane % 16) * 4``, or column,
``base + (lane / 16) * 64``) moves as those constants say: a vector load per distinct run of
consecutive elements, a scalar load per distinct single element, put in place by constant
shuffles, behind one check of the span the constants give (:func:`rows`).  These three take every
lane's address, active or not, for their tests and spans, so a warp with lanes off the mask (a
stencil's edge, a grid's last warp) moves so too, where its lanes off the mask point inside the
arrays: its loads read those lanes' elements too (inside the checked span) and give them 0, its
stores are masked; a lane off the mask pointing outside sends the access to the full check, which
looks at the active lanes alone.
``DirectMoves`` is a part of the emitter, kept here so that the emitter's own module stays about
registers and operands.
"""

from __future__ import annotations

from typing import Any

from .values import vec

__all__ = ["DirectMoves", "SITE_WORDS", "WHOLE", "runs"]

SITE_WORDS = 6  # per site: lowest address, highest first address, pointer offset, unused, last, stride
AHEAD = 8  # how many executions of a global load ahead its stride is prefetched
WINDOW = 128  # bytes a windowed load reads at most: two 512-bit tables of one permute
WHOLE = -1  # ``@ptxb.span``'s pattern: every lane active, the lanes' elements consecutive
MAX_RUNS = 4  # distinct runs a load by the lanes' constants moves at most (a gather beyond)
_I64, _I32 = vec("i64"), vec("i32")
_MASK = vec("i1")  # a warp's execution mask


class DirectMoves:
    """The fast paths, a part of :class:`.emit.Emitter` (whose ``op``, ``emit``, ``label`` and
    ``put_label`` write the IR, declared here for the type checker)."""

    op: Any
    emit: Any
    label: Any
    put_label: Any
    spread: Any
    reduce: Any
    intrinsic: Any
    extent: Any
    lane_address: Any
    masked_moves: bool
    block: str
    main_line: set[str]
    consecutive_lanes: Any
    insn: int


    def admitted(self, lo: str, hi: str, ready: str, size: int, write: bool) -> str:
        """The pointer offset of an access whose active lanes span first addresses ``[lo, hi]`` (``ready``:
        they are ordered and aligned), or -1 where the full check must decide; two compares against the
        instruction's site when it admitted such a span before, else ``@ptxb.admit``."""
        came = self.block
        site = self.op(f"getelementptr i64, ptr %sites, i64 {SITE_WORDS * self.insn}")
        least = self.op(f"load i64, ptr {site}")
        most = self.op(f"load i64, ptr {self.op(f'getelementptr i64, ptr {site}, i64 1')}")
        above = self.op(f"icmp uge i64 {lo}, {least}")
        below = self.op(f"icmp ule i64 {hi}, {most}")
        inside = self.op(f"and i1 {ready}, {self.op(f'and i1 {above}, {below}')}")
        hit, miss, admit, done = (self.label(s) for s in ("site", "unsited", "admit", "admitted"))
        self.emit(f"br i1 {inside}, label %{hit}, label %{miss}")
        self.put_label(hit)
        remembered = self.op(f"load i64, ptr {self.op(f'getelementptr i64, ptr {site}, i64 2')}")
        self.emit(f"br label %{done}")
        self.put_label(miss)
        self.emit(f"br i1 {ready}, label %{admit}, label %{done}")
        self.put_label(admit)
        checked = self.op(
            f"call i64 @ptxb.admit(ptr %ctx, i64 {lo}, i64 {hi}, i64 {size}, "
            f"i1 {'true' if write else 'false'}, i64 {self.extent()}, ptr {site})"
        )
        self.emit(f"br label %{done}")
        self.put_label(done)
        if came in self.main_line:  # every path from there comes here
            self.main_line.add(done)
        return self.op(f"phi i64 [{remembered}, %{hit}], [-1, %{miss}], [{checked}, %{admit}]")


    def prefetch_ahead(self, address: str) -> None:
        """Prefetch what a global load will read :data:`AHEAD` executions on, when lane 0's address
        moved by the same stride twice in a row (the first and last lanes' lines).  The warps of a
        block run one after the other, so a load in a loop is executed by warp after warp: a tile's
        rows of a matrix, rows apart, a stride the CPU's prefetchers do not follow across pages."""
        site = self.op(f"getelementptr i64, ptr %sites, i64 {SITE_WORDS * self.insn + 3}")
        stride_at = self.op(f"getelementptr i64, ptr {site}, i64 1")
        last, before = self.op(f"load i64, ptr {site}"), self.op(f"load i64, ptr {stride_at}")
        lead = self.op(f"extractelement {_I64} {address}, i32 0")
        stride = self.op(f"sub i64 {lead}, {last}")
        self.emit(f"store i64 {lead}, ptr {site}")
        self.emit(f"store i64 {stride}, ptr {stride_at}")
        repeated, moved = self.op(f"icmp eq i64 {stride}, {before}"), self.op(f"icmp ne i64 {stride}, 0")
        steady = self.op(f"and i1 {repeated}, {moved}")
        fetch, on = self.label("prefetch"), self.label("fetched")
        self.emit(f"br i1 {steady}, label %{fetch}, label %{on}")
        self.put_label(fetch)
        self.intrinsic("declare void @llvm.prefetch.p0(ptr, i32, i32, i32)")
        offset = self.op(f"load i64, ptr {self.op(f'getelementptr i64, ptr {site}, i64 -1')}")  # host - guest
        shift = self.op(f"add i64 {offset}, {self.op(f'mul i64 {stride}, {AHEAD}')}")
        for lane in (lead, self.op(f"extractelement {_I64} {address}, i32 31")):
            at = self.op(f"inttoptr i64 {self.op(f'add i64 {lane}, {shift}')} to ptr")
            self.emit(f"call void @llvm.prefetch.p0(ptr {at}, i32 0, i32 3, i32 1)")
        self.emit(f"br label %{on}")
        self.put_label(on)

    def direct(self, address: str, bits: int, write: bool) -> tuple[str, str]:
        """Check an access of one ``bits``-wide element per lane at ``address``, whose lanes are known
        to follow the lane by one element each but for a wrap of the base register
        (:meth:`.emit.Emitter.consecutive_lanes`), for the inline path (:meth:`moved`): returns
        ``(ok, pointer)``, ``ok`` true when the last lane's element is the 31st after the first's
        and their span (every lane's, active or not) is admitted, ``pointer`` then lane 0's host
        pointer."""
        size = bits // 8
        lead = self.lane_address(address, 0)
        last = self.op(f"add i64 {lead}, {31 * size}")
        consecutive = self.op(f"icmp eq i64 {self.lane_address(address, 31)}, {last}")
        aligned = self.op(f"icmp eq i64 {self.op(f'and i64 {lead}, {size - 1}')}, 0")
        ordered = self.op(f"icmp ule i64 {lead}, {last}")
        ready = self.op(f"and i1 {consecutive}, {self.op(f'and i1 {aligned}, {ordered}')}")
        delta = self.admitted(lead, last, ready, size, write)
        return self.op(f"icmp ne i64 {delta}, -1"), self.op(f"add i64 {lead}, {delta}")

    def grouped(self, address: str, bits: int, write: bool, reach: tuple[int, int] = (0, 0)
                ) -> tuple[str, str]:
        """Check an access of one ``bits``-wide element per lane at ``address`` for :meth:`moved_groups`:
        returns ``(ok, delta)``, ``ok`` true when each group of eight lanes points at consecutive
        aligned elements (a 16-wide block's two rows, an 8-wide one's four) and the groups' span
        is admitted, ``delta`` then host minus guest.  The test and the span take every lane's
        address, active or not: the active lanes' accesses lie inside a span that passed, and a
        span that does not (a lane off the mask pointing outside) goes to the full check, which
        looks at the active lanes alone.  Groups may overlap: a store writes them in lane order, so
        the highest lane's value stays, as the interpreter's."""
        size = bits // 8
        leads = [self.lane_address(address, 8 * g) for g in range(4)]
        picks = ", ".join(f"i32 {k // 8 * 8}" for k in range(32))
        heads = self.op(f"shufflevector {_I64} {address}, {_I64} poison, <32 x i32> <{picks}>")
        steps = ", ".join(f"i64 {k % 8 * size}" for k in range(32))
        expected = self.op(f"add {_I64} {heads}, <{steps}>")
        consecutive = self.reduce("and", self.op(f"icmp eq {_I64} {address}, {expected}"), "i1")
        self.intrinsic("declare i64 @llvm.umin.i64(i64, i64)")
        self.intrinsic("declare i64 @llvm.umax.i64(i64, i64)")
        lo, top = leads[0], leads[0]
        for lead in leads[1:]:
            lo = self.op(f"call i64 @llvm.umin.i64(i64 {lo}, i64 {lead})")
            top = self.op(f"call i64 @llvm.umax.i64(i64 {top}, i64 {lead})")
        hi = self.op(f"add i64 {top}, {7 * size}")
        first, last = self._reached(lo, hi, reach)
        bits_or = leads[0]
        for lead in leads[1:]:
            bits_or = self.op(f"or i64 {bits_or}, {lead}")
        ready = [consecutive, self.op(f"icmp eq i64 {self.op(f'and i64 {bits_or}, {size - 1}')}, 0"),
                 self.op(f"icmp ule i64 {top}, {hi}")]  # no group's last element wraps around
        if any(reach):  # nor the span of the block's other accesses through the register
            ready.append(self.op(f"icmp ule i64 {first}, {last}"))
        both = ready[0]
        for term in ready[1:]:
            both = self.op(f"and i1 {both}, {term}")
        delta = self.admitted(first, last, both, size, write)
        return self.op(f"icmp ne i64 {delta}, -1"), delta

    def moved_groups(self, leads: list[str], mask: str, bits: int, value: str | None = None) -> str | None:
        """Each group of eight lanes' consecutive elements from its first lane's host address in
        ``leads`` (checked: :meth:`grouped`) moved for the lanes of ``mask`` by one vector access a
        group (:meth:`moved`)."""
        pointers = [self.op(f"inttoptr i64 {lead} to ptr") for lead in leads]
        return self.moved(pointers, mask, bits, value)

    def moved(self, pointers: list[str], mask: str, bits: int, value: str | None = None) -> str | None:
        """The lanes' consecutive elements in equal pieces, piece ``k`` at ``pointers[k]`` (checked,
        every lane's), moved for the lanes of ``mask`` by one vector access a piece: the
        ``<32 x iN>`` loaded (:meth:`_on_mask`), or ``value`` stored (piece by piece, in lane
        order; a masked store each where a lane is off the mask)."""
        size, t = bits // 8, vec(f"i{bits}")
        width = 32 // len(pointers)
        tp = f"<{width} x i{bits}>"
        if value is None:
            parts, joined = [self.op(f"load {tp}, ptr {at}, align {size}") for at in pointers], width
            while len(parts) > 1:  # concatenated pairwise
                pair, tj = ", ".join(f"i32 {k}" for k in range(2 * joined)), f"<{joined} x i{bits}>"
                parts = [self.op(f"shufflevector {tj} {x}, {tj} {y}, <{2 * joined} x i32> <{pair}>")
                         for x, y in zip(parts[::2], parts[1::2], strict=True)]
                joined *= 2
            return self._on_mask(mask, parts[0], t)
        whole, partial, stored = (self.label(s) for s in ("storedwhole", "storedmasked", "stored"))
        self.emit(f"br i1 {self._full(mask)}, label %{whole}, label %{partial}")
        self.put_label(whole)
        for k, at in enumerate(pointers):
            self.emit(f"store {tp} {self._piece(t, value, k, width)}, ptr {at}, align {size}")
        self.emit(f"br label %{stored}")
        self.put_label(partial)
        self.intrinsic(f"declare void @llvm.masked.store.v{width}i{bits}.p0({tp}, ptr, <{width} x i1>)")
        for k, at in enumerate(pointers):
            part, own = self._piece(t, value, k, width), self._piece(_MASK, mask, k, width)
            self.emit(f"call void @llvm.masked.store.v{width}i{bits}.p0({tp} {part}, "
                      f"ptr align {size} {at}, <{width} x i1> {own})")
        self.emit(f"br label %{stored}")
        self.put_label(stored)
        return None

    def _full(self, mask: str) -> str:
        """Whether every lane of ``mask`` is on."""
        return self.op(f"icmp eq i32 {self.op(f'bitcast {_MASK} {mask} to i32')}, -1")

    def _on_mask(self, mask: str, got: str, t: str) -> str:
        """``got``, what every lane's address gave a load (all inside the checked span), with 0 in
        the lanes off ``mask``: on AVX-512 a select (the load's own zeroing mask), else a select on
        the path of a warp with lanes off it only (AVX2 blends each piece)."""
        if self.masked_moves:
            return self.op(f"select {_MASK} {mask}, {t} {got}, {t} zeroinitializer")
        partial, on = self.label("loadmasked"), self.label("loaded")
        came = self.block
        self.emit(f"br i1 {self._full(mask)}, label %{on}, label %{partial}")
        self.put_label(partial)
        masked = self.op(f"select {_MASK} {mask}, {t} {got}, {t} zeroinitializer")
        self.emit(f"br label %{on}")
        self.put_label(on)
        return self.op(f"phi {t} [{got}, %{came}], [{masked}, %{partial}]")

    def _piece(self, t: str, vector: str, k: int, width: int) -> str:
        """Lanes ``[k * width, (k + 1) * width)`` of ``vector`` (of type ``t``): the whole of it for
        one piece of 32."""
        return vector if width == 32 else _slice(self, t, vector, k * width, width)

    def _reached(self, lo: str, hi: str, reach: tuple[int, int]) -> tuple[str, str]:
        """The span ``[lo, hi]`` widened by the byte offsets ``reach`` of the block's other accesses
        through the same register."""
        if not any(reach):
            return lo, hi
        return self.op(f"add i64 {lo}, {reach[0]}"), self.op(f"add i64 {hi}, {reach[1]}")

    def window_of(self, value: str, mask: str, size: int, memo: str) -> None:
        """Into register memo ``memo`` (its span's words stored): the window of a 4- or 8-byte
        element load, the elements from the active lanes' lowest address to their highest when
        there are at most :data:`WINDOW` bytes of them (their count in word 5, else 0), and each
        lane's index into it (``<32 x i32>`` at byte 64)."""
        lo, hi, bits_or = (self._memo_word(memo, k) for k in (1, 2, 3))
        shift = size.bit_length() - 1
        width = self.op(f"sub i64 {hi}, {lo}")
        fits = self.op(f"icmp ult i64 {width}, {WINDOW}")
        aligned = self.op(f"icmp eq i64 {self.op(f'and i64 {bits_or}, {size - 1}')}, 0")
        ordered = self.op(f"icmp ule i64 {lo}, {hi}")
        usable = self.op(f"and i1 {fits}, {self.op(f'and i1 {aligned}, {ordered}')}")
        count = self.op(f"add i64 {self.op(f'lshr i64 {width}, {shift}')}, 1")
        length = self.op(f"select i1 {usable}, i64 {count}, i64 0")
        self.emit(f"store i64 {length}, ptr {self.op(f'getelementptr i64, ptr {memo}, i64 5')}")
        offsets = self.op(f"sub {_I64} {value}, {self.spread(lo, 'i64')}")
        elements = self.op(f"lshr {_I64} {offsets}, splat (i64 {shift})")
        index = self.op(f"trunc {_I64} {elements} to {_I32}")
        index = self.op(f"select {_MASK} {mask}, {_I32} {index}, {_I32} zeroinitializer")
        self.emit(f"store {_I32} {index}, ptr {self.op(f'getelementptr i8, ptr {memo}, i64 64')}")

    def window_parts(self, memo: str, bits: int) -> tuple[str, str, str, list[str]]:
        """What every windowed load through register memo ``memo`` of ``bits``-wide elements shares,
        read once per block beside its span: the window's length (0: none), its lowest address,
        the mask of its elements and the lanes' indices in permute-sized pieces."""
        size, t = bits // 8, vec(f"i{bits}")
        lanes, part = WINDOW // size, 16 if bits == 32 else 8
        lo, length = (self._memo_word(memo, k) for k in (1, 5))
        used = self.op(f"trunc i64 {self.op(f'call i64 @llvm.umax.i64(i64 {length}, i64 1)')} to i{lanes}")
        self.intrinsic("declare i64 @llvm.umax.i64(i64, i64)")
        unused = self.op(f"sub i{lanes} {lanes}, {used}")
        needed = self.op(f"bitcast i{lanes} {self.op(f'lshr i{lanes} -1, {unused}')} to <{lanes} x i1>")
        index = self.op(f"load {_I32}, ptr {self.op(f'getelementptr i8, ptr {memo}, i64 64')}")
        if bits == 64:
            index = self.op(f"zext {_I32} {index} to {_I64}")
        return length, lo, needed, [_slice(self, t, index, part * j, part) for j in range(32 // part)]

    def windowed(self, offset: str, mask: str, bits: int, count: int, parts: tuple[str, str, str, list[str]]
                 ) -> list[str]:
        """Each lane's ``count`` elements through a register's window (:meth:`window_parts`): one
        masked load of the window's elements at ``offset`` from its lowest address (only those: no
        byte past the checked span is read), then AVX-512 two-table permutes by the lanes' indices."""
        size, t = bits // 8, vec(f"i{bits}")
        lanes = WINDOW // size  # 32 of 4 bytes, 16 of 8
        half = lanes // 2
        tw, th = f"<{lanes} x i{bits}>", f"<{half} x i{bits}>"
        permute = f"@llvm.x86.avx512.vpermi2var.{'d' if bits == 32 else 'q'}.512"
        self.intrinsic(f"declare {th} {permute}({th}, {th}, {th})")
        self.intrinsic(f"declare {tw} @llvm.masked.load.v{lanes}i{bits}.p0(ptr, <{lanes} x i1>, {tw})")
        _, lo, needed, pieces = parts
        start = self.op(f"add i64 {lo}, {offset}")
        got = []
        for c in range(count):
            window = self.op(
                f"call {tw} @llvm.masked.load.v{lanes}i{bits}.p0(ptr align {size} "
                f"{self._element(start, c, size)}, <{lanes} x i1> {needed}, {tw} zeroinitializer)"
            )
            low, high = _slice(self, tw, window, 0, half), _slice(self, tw, window, half, half)
            moved = [self.op(f"call {th} {permute}({th} {low}, {th} {p}, {th} {high})") for p in pieces]
            while len(moved) > 1:  # concatenated pairwise: 16 + 16, or (8 + 8) + (8 + 8)
                width = 32 // len(moved)
                halves = f"<{width} x i{bits}>"
                order = ", ".join(f"i32 {k}" for k in range(2 * width))
                moved = [
                    self.op(f"shufflevector {halves} {a}, {halves} {b}, <{2 * width} x i32> <{order}>")
                    for a, b in zip(moved[::2], moved[1::2], strict=True)
                ]
            got.append(self.op(f"select {_MASK} {mask}, {t} {moved[0]}, {t} zeroinitializer"))
        return got

    def rows(self, address: str, offsets: tuple[int, ...], bits: int, reach: tuple[int, int] = (0, 0)
             ) -> tuple[str, str]:
        """Check loads of one ``bits``-wide element per lane at ``address`` plus each of the byte
        offsets ``reach`` spans (the block's other loads through the same register: one check for
        all), whose lanes add the signed constants ``offsets`` to lane 0's (:func:`runs` of them at
        most :data:`MAX_RUNS`), for :meth:`moved_rows`: returns ``(ok, delta)``, ``ok`` true when
        no lane's address wrapped around (the extreme lanes lie as far apart
        as their constants say) and the span is admitted, ``delta`` then host minus guest."""
        size = bits // 8
        low, high = offsets.index(min(offsets)), offsets.index(max(offsets))
        lead, lo, hi = (self.lane_address(address, k) for k in (0, low, high))
        apart = self.op(f"icmp eq i64 {self.op(f'sub i64 {hi}, {lo}')}, {offsets[high] - offsets[low]}")
        aligned = self.op(f"icmp eq i64 {self.op(f'and i64 {lead}, {size - 1}')}, 0")
        first, last = self._reached(lo, hi, reach)
        ordered = self.op(f"icmp ule i64 {first}, {last}")
        ready = self.op(f"and i1 {apart}, {self.op(f'and i1 {aligned}, {ordered}')}")
        delta = self.admitted(first, last, ready, size, False)
        return self.op(f"icmp ne i64 {delta}, -1"), delta

    def moved_rows(self, pointer: str, mask: str, offsets: tuple[int, ...], bits: int) -> str:
        """The ``<32 x iN>`` the lanes load from lane 0's host address ``pointer`` (checked:
        :meth:`rows`) plus their ``offsets``: each distinct run once, then shuffles that place its
        elements (0 in lanes off ``mask``: :meth:`_on_mask`)."""
        size, t = bits // 8, vec(f"i{bits}")
        found = runs(offsets, size)
        distinct = list(dict.fromkeys(found))
        pieces = []
        for first, length in distinct:
            at = self.op(f"inttoptr i64 {self.op(f'add i64 {pointer}, {first}')} to ptr")
            if length == 1:
                one = self.op(f"load i{bits}, ptr {at}, align {size}")
                pieces.append(self.op(f"insertelement {t} poison, i{bits} {one}, i32 0"))
                continue
            part = f"<{length} x i{bits}>"
            got = self.op(f"load {part}, ptr {at}, align {size}")
            wide = ", ".join(f"i32 {k}" if k < length else "i32 poison" for k in range(32))
            pieces.append(self.op(f"shufflevector {part} {got}, {part} poison, <32 x i32> <{wide}>"))
        source = [(distinct.index(run), k) for run in found for k in range(run[1])]  # per lane
        value = pieces[0]
        for j in range(len(pieces)):  # lanes of pieces before j are in place; piece j's join them
            order = ", ".join(
                f"i32 {lane}" if p < j else f"i32 {k + (32 if j else 0)}" if p == j else "i32 poison"
                for lane, (p, k) in enumerate(source)
            )
            other = pieces[j] if j else "poison"
            value = self.op(f"shufflevector {t} {value}, {t} {other}, <32 x i32> <{order}>")
        return self._on_mask(mask, value, t)

    def _memo_word(self, memo: str, k: int) -> str:
        return self.op(f"load i64, ptr {self.op(f'getelementptr i64, ptr {memo}, i64 {k}')}")

    def patterned(self, value: str, pattern: str, offset: str, mask: str, bits: int, count: int) -> list[str]:
        """Each lane's ``count`` elements at ``value + offset`` (base lanes of a block's shared pattern,
        checked) as ``<32 x iN>`` each: vector loads when the pattern is :data:`WHOLE`, else per group
        of eight lanes vector loads (masked where a lane of the group is off: it may point anywhere),
        scalar loads spread to the group, or masked gathers."""
        size, t, t8 = bits // 8, vec(f"i{bits}"), f"<8 x i{bits}>"
        self.intrinsic(f"declare {t8} @llvm.masked.load.v8i{bits}.p0(ptr, <8 x i1>, {t8})")
        self.intrinsic(f"declare {t8} @llvm.masked.gather.v8i{bits}.v8p0(<8 x ptr>, <8 x i1>, {t8})")
        whole, groups, joined = self.label("wholewarp"), self.label("groups"), self.label("patterned")
        self.emit(f"br i1 {self.op(f'icmp eq i32 {pattern}, {WHOLE}')}, label %{whole}, label %{groups}")
        self.put_label(whole)
        first = self.op(f"add i64 {self.op(f'extractelement {_I64} {value}, i32 0')}, {offset}")
        all_lanes = [
            self.op(f"load {t}, ptr {self._element(first, c, size)}, align {size}") for c in range(count)
        ]
        self.emit(f"br label %{joined}")
        self.put_label(groups)
        parts: list[list[str]] = []
        for j in range(4):
            lanes = ", ".join(f"i32 {8 * j + k}" for k in range(8))
            kind = self.op(f"and i32 {self.op(f'lshr i32 {pattern}, {8 * j}')}, 255")
            own = self.op(f"shufflevector {_MASK} {mask}, {_MASK} poison, <8 x i32> <{lanes}>")
            base = self.op(f"add i64 {self.op(f'extractelement {_I64} {value}, i32 {8 * j}')}, {offset}")
            run, spread, gather, join = (self.label(s) for s in ("run", "spread", "gather", "group"))
            self.emit(f"switch i32 {kind}, label %{gather} [i32 0, label %{run} i32 1, label %{spread}]")
            self.put_label(run)  # a masked load where a lane of the group is off (it may point anywhere)
            every, some = self.label("runall"), self.label("runsome")
            on = self.op(f"bitcast <8 x i1> {own} to i8")
            self.emit(f"br i1 {self.op(f'icmp eq i8 {on}, -1')}, label %{every}, label %{some}")
            self.put_label(every)
            whole_runs = [self.op(f"load {t8}, ptr {self._element(base, c, size)}, align 1")
                          for c in range(count)]
            self.emit(f"br label %{join}")
            self.put_label(some)
            ran = [
                self.op(
                    f"call {t8} @llvm.masked.load.v8i{bits}.p0(ptr align 1 {self._element(base, c, size)}, "
                    f"<8 x i1> {own}, {t8} zeroinitializer)"
                )
                for c in range(count)
            ]
            self.emit(f"br label %{join}")
            self.put_label(spread)
            spreads = []
            for c in range(count):
                one = self.op(f"load i{bits}, ptr {self._element(base, c, size)}, align {size}")
                head = self.op(f"insertelement {t8} poison, i{bits} {one}, i32 0")
                spreads.append(self.op(f"shufflevector {t8} {head}, {t8} poison, <8 x i32> zeroinitializer"))
            self.emit(f"br label %{join}")
            self.put_label(gather)
            own_lanes = self.op(f"shufflevector {_I64} {value}, {_I64} poison, <8 x i32> <{lanes}>")
            shift = self.op(f"insertelement <8 x i64> poison, i64 {offset}, i32 0")
            shifts = self.op(f"shufflevector <8 x i64> {shift}, <8 x i64> poison, <8 x i32> zeroinitializer")
            pointers = self.op(f"add <8 x i64> {own_lanes}, {shifts}")
            gathered = []
            for c in range(count):
                moved = self.op(f"add <8 x i64> {pointers}, splat (i64 {c * size})") if c else pointers
                each = self.op(f"inttoptr <8 x i64> {moved} to <8 x ptr>")
                gathered.append(self.op(
                    f"call {t8} @llvm.masked.gather.v8i{bits}.v8p0(<8 x ptr> align 1 {each}, <8 x i1> {own}, "
                    f"{t8} zeroinitializer)"
                ))
            self.emit(f"br label %{join}")
            self.put_label(join)
            parts.append([
                self.op(f"phi {t8} [{w}, %{every}], [{r}, %{some}], [{b}, %{spread}], [{g}, %{gather}]")
                for w, r, b, g in zip(whole_runs, ran, spreads, gathered, strict=True)
            ])
        half = ", ".join(f"i32 {k}" for k in range(16))
        every = ", ".join(f"i32 {k}" for k in range(32))
        grouped = []
        for c in range(count):
            low = self.op(f"shufflevector {t8} {parts[0][c]}, {t8} {parts[1][c]}, <16 x i32> <{half}>")
            high = self.op(f"shufflevector {t8} {parts[2][c]}, {t8} {parts[3][c]}, <16 x i32> <{half}>")
            grouped.append(
                self.op(f"shufflevector <16 x i{bits}> {low}, <16 x i{bits}> {high}, <32 x i32> <{every}>")
            )
        ends = self.label("grouped")
        self.emit(f"br label %{ends}")
        self.put_label(ends)
        self.emit(f"br label %{joined}")
        self.put_label(joined)
        return [
            self.op(f"phi {t} [{w}, %{whole}], [{g}, %{ends}]")
            for w, g in zip(all_lanes, grouped, strict=True)
        ]

    def _element(self, address: str, index: int, size: int) -> str:
        """A pointer to element ``index`` of ``size`` bytes from host address ``address``."""
        at = self.op(f"add i64 {address}, {index * size}") if index else address
        return self.op(f"inttoptr i64 {at} to ptr")


def runs(offsets: tuple[int, ...], size: int) -> list[tuple[int, int]]:
    """The lanes' ``offsets`` as runs of consecutive ``size``-byte elements, in lane order:
    (first offset, length) each."""
    found: list[tuple[int, int]] = []
    for lane, offset in enumerate(offsets):
        if lane and offset == offsets[lane - 1] + size:
            found[-1] = (found[-1][0], found[-1][1] + 1)
        else:
            found.append((offset, 1))
    return found


def _slice(e: Any, t: str, vector: str, first: int, count: int) -> str:
    """Elements ``first .. first + count - 1`` of ``vector`` (of type ``t``)."""
    order = ", ".join(f"i32 {first + k}" for k in range(count))
    return e.op(f"shufflevector {t} {vector}, {t} poison, <{count} x i32> <{order}>")
