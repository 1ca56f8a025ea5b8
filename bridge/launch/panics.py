"""Panics of Rust kernels, reported after the launch as :class:`KernelRaisedError`.

A Rust crate compiled by :func:`ptxbridge.rust.compile` without a ``#[panic_handler]`` of its own
gets ptxbridge's (:mod:`ptxbridge.rust.panic_runtime`): the first thread that panics writes the
record :mod:`ptxbridge.abi.panic_record` describes into the module global ``__ptxbridge_panic``
and exits; every other thread runs on, so the launch completes and the context stays usable.
As for numba's debug exceptions (:mod:`ptxbridge.launch.raised`), the call path reads the record
after each launch of a kernel of such an image (on a GPU that waits for the launch), clears it,
and raises.  The record survives ``Image.save`` (it is a global of the image).

Only kernels that can reach the record are checked (:func:`recording_kernels`, from the image's
PTX call graph): a kernel of the same image that cannot panic (a ``get_unchecked`` loop, a CUDA C++
kernel linked beside the crate) launches without waiting.  A launch queued on a stream that is
being captured into a CUDA graph cannot be waited for: it is not checked, and a panic it records
is reported by the next checked launch of that module.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Any

from ptxbridge.abi import panic_record
from ptxbridge.abi.errors import KernelRaisedError, PtxBridgeError
from ptxbridge.abi.ptx import read_ptx

__all__ = ["PANIC_MODES", "PanicFlag", "check_module_panics", "panic_error", "recording_kernels"]

PANIC_MODES = ("raise", "defer")  # after each launch (waits for it) / at Module.synchronize()

_CALL = re.compile(r"\bcall(?:\.uni)?\s+(?:\([^)]*\)\s*,\s*)?([A-Za-z_$][\w$]*)")


@functools.lru_cache(maxsize=32)
def recording_kernels(ptx: tuple[bytes, ...]) -> frozenset[str] | None:
    """The kernels of these PTX modules that can write the panic record: those whose body, or the body
    of a function they call (directly, at any depth), names it.  None without PTX (a cubin-only
    image): then every kernel is checked.  Functions are matched by name across modules, which can
    only add kernels."""
    if not ptx:
        return None
    calls: dict[str, set[str]] = {}
    writers: set[str] = set()
    entries: set[str] = set()
    for index, text in enumerate(ptx):
        for function in read_ptx(text, f"<ptx #{index}>").functions:
            body = function.body or ""
            calls.setdefault(function.name, set()).update(_CALL.findall(body))
            if panic_record.SYMBOL in body:
                writers.add(function.name)
            if function.kind == "entry":
                entries.add(function.name)
    reach, frontier = set(writers), list(writers)
    callers: dict[str, set[str]] = {}
    for caller, callees in calls.items():
        for callee in callees:
            callers.setdefault(callee, set()).add(caller)
    while frontier:
        for caller in callers.get(frontier.pop(), ()):
            if caller not in reach:
                reach.add(caller)
                frontier.append(caller)
    return frozenset(reach & entries)


def panic_error(kernel: str, record: panic_record.PanicRecord) -> KernelRaisedError:
    """The exception for ``record``, worded as Rust prints a panic (``panicked at file:line:col:``)."""
    error = KernelRaisedError(f"{kernel}: thread {record.thread} of block {record.block} panicked at "
                              f"{record.location}: {record.message}")
    error.tid, error.ctaid = record.thread, record.block
    error.panic = record
    return error


class PanicFlag:
    """The panic record of one loaded module, checked around launches of one kernel."""

    def __init__(self, backend: Any, kernel: str, names: Iterable[str]):
        self.backend, self.kernel, self.names = backend, kernel, tuple(names)
        self._unchecked = False

    @classmethod
    def of(cls, module: Any, kernel: str) -> PanicFlag | None:
        """The record of ``module`` (a loaded module) when its image has one and ``kernel`` can write
        it, else None."""
        if panic_record.SYMBOL not in module.globals.names or module.panics == "defer":
            return None
        writers = recording_kernels(tuple(getattr(module.image, "ptx", ())))
        if writers is not None and kernel not in writers:
            return None
        return cls(module.backend, kernel, module.globals.names)

    def reset(self, stream: int) -> None:
        """Before a launch on ``stream``: the record is left as it is (a panic clears it when read);
        a launch into a graph capture is not checked."""
        self._unchecked = self.backend.capturing(stream)

    def check(self) -> None:
        """Raise :class:`KernelRaisedError` when a thread panicked (this launch, or an unchecked one)."""
        if self._unchecked:
            return
        record = _take_record(self.backend, self.names)
        if record is not None:
            raise panic_error(self.kernel, record)


def check_module_panics(module: Any) -> None:
    """Read and clear ``module``'s panic record (``panics="defer"``): the error names the kernel when
    only one of the image's kernels can panic, else the ones that can."""
    if panic_record.SYMBOL not in module.globals.names:
        return
    record = _take_record(module.backend, module.globals.names)
    if record is None:
        return
    writers = sorted(recording_kernels(tuple(getattr(module.image, "ptx", ()))) or ())
    raise panic_error(writers[0] if len(writers) == 1 else f"one of {', '.join(writers) or 'its kernels'}",
                      record)


def _take_record(backend: Any, names: Iterable[str]) -> panic_record.PanicRecord | None:
    """The record after the device is done (None when no thread panicked), cleared for the next.
    ``names`` are the image's globals, where a record written without its message finds its file."""
    backend.synchronize()
    record = panic_record.read_record(backend.read_global(panic_record.SYMBOL),
                                      functools.partial(_read_static, backend, names))
    if record is not None:
        backend.write_global(panic_record.SYMBOL, bytes(panic_record.SIZE))
    return record


def _read_static(backend: Any, names: Iterable[str], address: int, length: int) -> bytes | None:
    """``length`` bytes at ``address`` inside one of the globals ``names`` (None when none holds them)."""
    for name in names:
        try:
            base, size = backend.global_address(name)
        except (KeyError, PtxBridgeError):  # a name the loaded image no longer has
            continue
        if base <= address and address + length <= base + size:
            return backend.read_global(name)[address - base:address - base + length]
    return None
