"""Time and memory budgets for reader tests that hold on a loaded machine.

Time is this thread's CPU time (``time.thread_time``), not wall time, so
other processes on a shared 2-core machine do not count; a run that exceeds
its budget is interrupted by a CPU-time timer (``ITIMER_PROF``), so a hang
fails instead of stalling the suite.  Memory is the ``tracemalloc`` peak of the
call, compared with the input's size.  Growth checks compare the cost at n and
at 4n: linear work grows about 4x, quadratic 16x, whatever the machine's speed.
"""

from __future__ import annotations

import signal
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

CPU_SECONDS = 1.0  # per input, the "more than ~1 s fails"
MEMORY_RATIO = 10  # peak traced memory per input byte, the "~10x its size"
MEMORY_FLOOR = 2 << 20  # fixed overhead allowed on top (tables, compiled regexes, small objects)


class BudgetExceeded(AssertionError):
    pass


@contextmanager
def cpu_budget(seconds: float, what: str) -> Iterator[None]:
    """Interrupt the body once the process has used ``seconds`` of CPU time in it."""

    def expire(signum: int, frame: Any) -> None:
        raise BudgetExceeded(f"{what}: used more than {seconds} s of CPU time")

    previous = signal.signal(signal.SIGPROF, expire)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def run_within_budget(call: Callable[[], Any], size: int, what: str, *, seconds: float = CPU_SECONDS,
                      ratio: float = MEMORY_RATIO) -> Any:
    """``call()`` with at most ``seconds`` of CPU time and a traced peak of ``ratio * size`` bytes
    (plus :data:`MEMORY_FLOOR`); its exception, if any, propagates."""
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    try:
        with cpu_budget(seconds, what):
            return call()
    finally:
        peak = tracemalloc.get_traced_memory()[1] - base
        if started:
            tracemalloc.stop()
        limit = ratio * size + MEMORY_FLOOR
        if peak > limit:
            raise BudgetExceeded(f"{what}: peak memory {peak} bytes for a {size}-byte input "
                                 f"(budget {limit})")


def cpu_cost(call: Callable[[], Any], repeat: int = 2) -> float:
    """The least CPU time of ``repeat`` runs of ``call`` (the least is the one load disturbed least)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.thread_time()
        call()
        best = min(best, time.thread_time() - start)
    return best


def growth(make: Callable[[int], Callable[[], Any]], n: int, factor: int = 4) -> float:
    """CPU cost at ``factor * n`` over the cost at ``n`` (each the least of a few runs); a cost under
    1 ms counts as 1 ms, so timer resolution cannot make a fast linear reader look superlinear."""
    small, large = cpu_cost(make(n)), cpu_cost(make(factor * n))
    return large / max(small, 1e-3)
