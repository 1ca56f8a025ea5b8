"""racecheck's shadow of shared memory: who wrote and who read each byte since the last barrier.

Per byte: the last writer (thread, its warp's sync count then, the
instruction), and two readers, the first and the latest other one (enough to
know whether any reader differs from a given thread).  An access by thread
``t`` conflicts with an earlier one by ``u != t`` unless a barrier ordered
them: ``bar.sync`` (the block's barrier) forgets every byte touched since the
last one; ``bar.warp.sync`` raises its warps' sync count, which orders a
warp's earlier accesses before its own later ones only.  A write of the value
the byte already holds conflicts with no earlier write (threads setting a
flag to 1); threads of one store writing different values to one byte are a
write-after-write hazard.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Races"]

_NONE = -1


class Races:
    """Shadow state for ``size`` bytes of shared memory (every block of a batch) and ``n`` threads."""

    def __init__(self, size: int, n: int):
        def column() -> np.ndarray:
            return np.full(size, _NONE, np.int32)
        self.writer, self.writer_sync, self.writer_site = column(), column(), column()
        self.first, self.first_sync, self.first_site = column(), column(), column()
        self.other, self.other_sync, self.other_site = column(), column(), column()
        self.syncs = np.zeros(-(-n // 32), np.int32)  # bar.warp.sync count per warp
        self._stamp = np.zeros(size, np.int32)  # scratch: does one store name a byte twice?
        self._synced = False  # no bar.warp.sync yet: every sync count is 0
        self.sites: list[str] = []
        self._site_ids: dict[str, int] = {}
        self._touched: list[np.ndarray] = []

    def barrier(self) -> None:
        """Forget what was touched: everything before is ordered before everything after."""
        if sum(len(t) for t in self._touched) > len(self.writer):  # cheaper to clear it all
            self._touched = [slice(None)]
        for touched in self._touched:
            for column in (self.writer, self.first, self.other):
                column[touched] = _NONE
        self._touched = []

    def warp_sync(self, threads: np.ndarray) -> None:
        self.syncs[np.unique(threads // 32)] += 1
        self._synced = True

    def _site(self, site: str) -> int:
        found = self._site_ids.get(site)
        if found is None:
            found = self._site_ids[site] = len(self.sites)
            self.sites.append(site)
        return found

    def _unordered(self, who: np.ndarray, synced: np.ndarray, threads: np.ndarray) -> np.ndarray:
        """Whether earlier accesses by ``who`` (at sync counts ``synced``) conflict with ``threads`` now."""
        other = (who != _NONE) & (who != threads)
        if not other.any():
            return other
        warps = threads // 32
        return other & ~((who // 32 == warps) & (synced < self.syncs[warps]))

    def _found(self, what: str, index: np.ndarray, threads: np.ndarray, site: int, bad: np.ndarray,
               who: np.ndarray, sites: np.ndarray) -> tuple:
        i = int(np.flatnonzero(bad)[0])
        return (what, int(index[i]), int(threads[i]), self.sites[site], int(who[i]),
                self.sites[int(sites[i])])

    def read(self, index: np.ndarray, threads: np.ndarray, site_text: str) -> tuple | None:
        """Note reads of bytes ``index`` by ``threads``; the first read-after-write hazard, or None."""
        site = self._site(site_text)
        writer = self.writer[index]
        bad = self._unordered(writer, self.writer_sync[index], threads)
        if bad.any():
            return self._found("read-after-write", index, threads, site, bad, writer, self.writer_site[index])
        self._touched.append(index)
        sync = self.syncs[threads // 32] if self._synced else None
        first = self.first[index]
        mine = (first == _NONE) | (first == threads)
        self._note(self.first, self.first_sync, self.first_site, index, threads, sync, site, mine)
        rest = self.first[index] != threads  # after the assignment: two threads of one read both count
        if rest.any():
            self._note(self.other, self.other_sync, self.other_site, index, threads, sync, site, rest)
        return None

    @staticmethod
    def _note(who: np.ndarray, synced: np.ndarray, sites: np.ndarray, index: np.ndarray, threads: np.ndarray,
              sync: np.ndarray | None, site: int, chosen: np.ndarray) -> None:
        at = index[chosen]
        who[at] = threads[chosen]
        synced[at] = 0 if sync is None else sync[chosen]
        sites[at] = site

    def write(self, index: np.ndarray, threads: np.ndarray, site_text: str, new: np.ndarray | None,
              old: np.ndarray) -> tuple | None:
        """Note writes of bytes ``index`` by ``threads`` (``new``: their bytes, if known; ``old``: what
        the bytes hold now); the first hazard, or None."""
        site = self._site(site_text)
        same = np.zeros(len(index), bool) if new is None else new == old
        writer = self.writer[index]
        bad = self._unordered(writer, self.writer_sync[index], threads) & ~same
        if bad.any():
            return self._found("write-after-write", index, threads, site, bad, writer,
                               self.writer_site[index])
        for who, synced, sites in ((self.first, self.first_sync, self.first_site),
                                   (self.other, self.other_sync, self.other_site)):
            reader = who[index]
            bad = self._unordered(reader, synced[index], threads)
            if bad.any():
                return self._found("write-after-read", index, threads, site, bad, reader, sites[index])
        found = self._clash(index, threads, new)  # one store, two threads, one byte, two values
        if found is not None:
            return ("write-after-write", found[0], found[1], self.sites[site], found[2], self.sites[site])
        self._touched.append(index)
        self.writer[index], self.writer_site[index] = threads, site
        self.writer_sync[index] = self.syncs[threads // 32]
        return None

    def _clash(self, index: np.ndarray, threads: np.ndarray, new: np.ndarray | None) -> tuple | None:
        """``(byte, thread, other thread)`` where one store's threads write different values to one byte."""
        positions = np.arange(len(index), dtype=np.int32)
        self._stamp[index] = positions
        if (self._stamp[index] == positions).all():  # no byte named twice: the common case, two passes
            return None
        order = np.argsort(index, kind="stable")
        ranked, by = index[order], threads[order]
        clash = (ranked[1:] == ranked[:-1]) & (by[1:] != by[:-1])
        if new is not None:
            values = new[order]
            clash &= values[1:] != values[:-1]
        if not clash.any():
            return None
        i = int(np.flatnonzero(clash)[0])
        return int(ranked[i + 1]), int(by[i + 1]), int(by[i])
