"""Functions the CUDA runtime provides and no PTX module defines.

``vprintf`` (device printf): CUDA lowers ``printf(fmt, ...)`` to
``vprintf(fmt, args)`` where ``args`` points to the arguments packed in local
memory, each aligned to its size (CUDA Programming Guide, "Formatted
Output").  The emulator prints each calling thread's line in thread order on
``sys.stdout``.  ``malloc`` / ``free``: the device heap (:mod:`.heap`).
``cudaCGGetIntrinsicHandle`` / ``cudaCGSynchronize``: libcudadevrt's grid
synchronization, which numba-cuda's ``this_grid().sync()`` calls; the handle
is the launch's grid workspace and the synchronization a barrier across every
block (:mod:`.ops_control` turns the call into one).
"""

from __future__ import annotations

import re
import struct
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from .heap import free, malloc

__all__ = ["BUILTINS", "GRID_BUILTINS", "GRID_SYNC"]

# possessive quantifiers: flags, width and precision are read once (tests/test_redos.py)
_SPEC = re.compile(r"%([-+ #0]*+\d*+(?:\.\d++)?+)(hh|h|ll|l|z|j|t)?([diouxXcsfFeEgGaAp%])")
_MAX_STRING = 4096


def _string(memory: Any, address: int, thread: int) -> bytes:
    out = bytearray()
    while len(out) < _MAX_STRING:
        chunk = memory.read_bytes(address + len(out), 1, thread)
        if chunk == b"\0":
            break
        out += chunk
    return bytes(out)


def _format(memory: Any, fmt: bytes, args: int, thread: int) -> str:
    pieces, cursor, offset = [], 0, 0
    text = fmt.decode("utf-8", "replace")
    for spec in _SPEC.finditer(text):
        pieces.append(text[cursor:spec.start()])
        cursor = spec.end()
        flags, length, kind = spec.groups()
        if kind == "%":
            pieces.append("%")
            continue
        size = 8 if kind in "fFeEgGaAsp" or length in ("l", "ll", "z", "j", "t") else 4
        offset = -(-offset // size) * size
        raw = memory.read_bytes(args + offset, size, thread)
        offset += size
        if kind in "fFeEgGaA":
            value: Any = struct.unpack("<d", raw)[0]
            pieces.append(float.hex(value) if kind in "aA" else f"%{flags}{kind}" % value)
        elif kind == "s":
            pieces.append(_string(memory, int.from_bytes(raw, "little"), thread).decode("utf-8", "replace"))
        elif kind == "p":
            pieces.append(hex(int.from_bytes(raw, "little")))
        else:
            value = int.from_bytes(raw, "little", signed=kind in "di")
            pieces.append(chr(value & 0xFF) if kind == "c" else f"%{flags}{kind}" % value)
    pieces.append(text[cursor:])
    return "".join(pieces)


def vprintf(fr: Any, m: Any, params: tuple[str, ...], returns: tuple[str, ...]) -> None:
    """``int vprintf(const char* format, void* args)`` for each calling thread, in order."""
    memory = fr.batch.memory
    fmt_ptr = fr.params[params[0]].load(0, np.dtype(np.uint64))
    arg_ptr = fr.params[params[1]].load(0, np.dtype(np.uint64))
    threads = range(fr.batch.n) if m is None else np.flatnonzero(m).tolist()
    counts = np.zeros(fr.batch.n, np.int32)
    for thread in threads:
        line = _format(memory, _string(memory, int(fmt_ptr[thread]), thread), int(arg_ptr[thread]), thread)
        sys.stdout.write(line)
        counts[thread] = len(line)
    if returns:
        fr.params[returns[0]].store(0, np.dtype(np.int32), counts, m)


def grid_handle(fr: Any, m: Any, params: tuple[str, ...], returns: tuple[str, ...]) -> None:
    """``unsigned long long cudaCGGetIntrinsicHandle(int scope)``: the grid workspace's address."""
    special = fr.batch.special
    handle = (int(special["%envreg1"]) << 32) | int(special["%envreg2"])
    fr.params[returns[0]].store(0, np.dtype(np.uint64), np.uint64(handle), m)


GRID_SYNC = "cudaCGSynchronize"  # a barrier over every block of the launch, not a call
GRID_BUILTINS = frozenset(("cudaCGGetIntrinsicHandle", GRID_SYNC))
BUILTINS: dict[str, Callable[[Any, Any, tuple[str, ...], tuple[str, ...]], None]] = {
    "vprintf": vprintf, "malloc": malloc, "free": free, "cudaCGGetIntrinsicHandle": grid_handle,
}
