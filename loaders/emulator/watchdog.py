"""No silent hangs: a loop that can never end is stopped, and a long launch shows how far it got.

The interpreter is deterministic and a batch of blocks runs alone (other
batches run after it), so if a batch comes back to the same instruction with
every register, program counter and mask as before, and no instruction in
between wrote memory (a store, an atomic, an async copy, an mbarrier, a
call), it will go round the same way forever: a spin on a flag nobody sets,
or on one another thread of the block would set but never runs (the machine
runs the lowest program counter first, not threads independently).

Checking costs nothing for a short batch: the first look is after
:data:`FIRST_LOOK` steps (a second or two), then one every :data:`INTERVAL`
steps.  A look snapshots the state (registers are replaced on write, never
changed in place, so a shallow copy of the register dict is a snapshot) and
watches the next steps, comparing the state whenever the snapshot's
instruction comes round again.  A loop that changes any register (a counter,
``%clock``) or writes memory is never stopped; ``max_steps`` stays the hard limit.

:class:`Progress` prints "blocks done of total" to stderr once a launch has
run :data:`PROGRESS_AFTER` seconds, on a terminal or with ``PTXBRIDGE_PROGRESS=1``
(``PTXBRIDGE_PROGRESS=0`` turns it off).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, TextIO

import numpy as np

__all__ = ["Watchdog", "Progress", "writes_memory", "step_limit", "ENDLESS", "FIRST_LOOK", "INTERVAL",
           "WATCH", "MAX_WATCH", "PROGRESS_AFTER"]

FIRST_LOOK = 1 << 18  # steps before the first look (about a second)
INTERVAL = 1 << 20  # steps between looks
WATCH = 1 << 10  # steps one look watches at first; doubled after each look that finds no repeat
MAX_WATCH = 1 << 15  # a loop longer than this is not seen; watching costs ~3% of the steps
PROGRESS_AFTER = 3.0  # seconds before a launch shows progress
_WRITERS = frozenset(("st", "atom", "red", "cp", "mbarrier", "discard"))
_MBARRIER_READS = frozenset(("test_wait", "try_wait", "pending_count"))
ENDLESS = ("stopped a loop that can never end: the threads came back to this instruction with "
           "every register as before and nothing stored in between, so nothing can change what "
           "they wait for (a flag another thread of the block would set is never seen either: "
           "the CPU loader runs the lowest program counter first, not threads independently)")


def step_limit(max_steps: int) -> str:
    """Why a launch stopped at its ``max_steps`` (both tiers say it so)."""
    return (f"gave up after {max_steps} interpreter steps: an endless loop, or a spin-wait on "
            "another thread of the same block (the emulator runs the lowest program counter first; "
            "raise max_steps if the kernel is just long)")


def writes_memory(ins: Any) -> bool:
    """Whether an instruction may write memory (calls are judged by the machine: their callee may);
    an ``mbarrier`` wait only reads its object, so a loop spinning on one can be seen to repeat."""
    if ins.opcode == "mbarrier":
        return not any(m.split("::")[0] in _MBARRIER_READS for m in ins.mods)
    return ins.opcode in _WRITERS


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape == b.shape and \
            bool(np.array_equal(a, b))
    return bool(a == b) and type(a) is type(b)


def _same_state(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))


class Watchdog:
    """The step limit and the endless-loop detector of one batch (see the module docstring).

    The machine calls :meth:`check` when ``batch.steps`` passes :attr:`check_at`; it returns the
    reason to stop, or None.
    """

    __slots__ = ("_frame", "_regs", "_state", "_until", "_upc", "_watch", "check_at", "max_steps",
                 "progress", "watching")

    def __init__(self, max_steps: int, progress: Progress | None = None):
        self.max_steps, self.progress = max_steps, progress
        self.check_at = min(max_steps, FIRST_LOOK)
        self.watching = False
        self._watch = WATCH
        self._frame: Any = None
        self._upc = -1
        self._regs: dict[str, Any] = {}
        self._state: tuple = ()
        self._until = 0

    def check(self, steps: int, frame: Any, upc: int, step: Any, is_call: bool, state: tuple) -> str | None:
        """At ``steps``, about to run ``step`` (instruction ``upc`` of ``frame``'s function) with the
        scheduler's ``state`` (program counters and masks)."""
        if steps > self.max_steps:
            return step_limit(self.max_steps)
        if not self.watching:
            if self.progress is not None:
                self.progress.beat()
            if is_call or writes_memory(step.ins):
                self.check_at = steps  # a snapshot before a store would see it: start at the next step
            else:
                self._start(steps, frame, upc, state)
            return None
        if is_call or writes_memory(step.ins):
            return self._stop(steps)  # memory may change: what the loop reads may change with it
        if upc == self._upc and frame is self._frame:
            regs = frame.regs
            if (len(regs) == len(self._regs) and _same_state(state, self._state)
                    and all(_same(value, self._regs.get(name, _MISSING)) for name, value in regs.items())):
                return ENDLESS
        if steps >= self._until:
            self._watch = min(self._watch * 2, MAX_WATCH)
            return self._stop(steps)
        self.check_at = steps
        return None

    def _start(self, steps: int, frame: Any, upc: int, state: tuple) -> None:
        self.watching = True
        # the program counters are updated in place: copy them; registers are replaced, never changed
        copied = tuple(x.copy() if isinstance(x, np.ndarray) else x for x in state)
        self._frame, self._upc, self._regs, self._state = frame, upc, dict(frame.regs), copied
        self._until = steps + self._watch
        self.check_at = steps

    def _stop(self, steps: int) -> None:  # returns None: "keep going"
        self.watching = False
        self._frame, self._regs, self._state = None, {}, ()
        self.check_at = min(self.max_steps, steps + INTERVAL)
        return None


_MISSING = object()


class Progress:
    """"kernel 'k': 12 of 64 blocks done (8 s)" on stderr once a launch has run a few seconds."""

    __slots__ = ("_last", "_shown", "_started", "blocks", "done", "kernel", "stream", "tty")

    def __init__(self, kernel: str, blocks: int, stream: TextIO):
        self.kernel, self.blocks, self.stream = kernel, blocks, stream
        self.tty = stream.isatty()
        self.done = 0
        self._started = self._last = time.monotonic()
        self._shown = False

    @classmethod
    def for_launch(cls, kernel: str, blocks: int) -> Progress | None:
        """A reporter when progress is wanted: ``PTXBRIDGE_PROGRESS=1``, or stderr is a terminal
        (``PTXBRIDGE_PROGRESS=0``: never)."""
        wanted = os.environ.get("PTXBRIDGE_PROGRESS", "")
        stream = sys.stderr
        if wanted == "0" or (wanted != "1" and not (stream is not None and stream.isatty())):
            return None
        return cls(kernel, blocks, stream)

    def beat(self, done: int | None = None) -> None:
        """Note ``done`` blocks finished (None: still working on a batch); print at most once a second."""
        if done is not None:
            self.done = done
        now = time.monotonic()
        if now - self._started < PROGRESS_AFTER or now - self._last < 1.0:
            return
        self._last = now
        self._shown = True
        line = (f"ptxbridge CPU loader: kernel {self.kernel!r}: {self.done} of {self.blocks} blocks done "
                f"({now - self._started:.0f} s)")
        self.stream.write(f"\r{line}" if self.tty else f"{line}\n")
        self.stream.flush()

    def finish(self) -> None:
        """The last line, if anything was shown: done, or (the launch failed) where it stopped."""
        if self._shown:
            elapsed = time.monotonic() - self._started
            ended = "finished" if self.done == self.blocks else "stopped"
            line = (f"ptxbridge CPU loader: kernel {self.kernel!r}: {self.done} of {self.blocks} blocks "
                    f"done, {ended} after {elapsed:.0f} s")
            self.stream.write(f"\r{line}\n" if self.tty else f"{line}\n")
            self.stream.flush()
