"""The Python side of the XLA FFI handler (``_xla_ffi.c``): registration and its attributes.

One custom call target, ``ptxbridge_launch``, is registered for XLA's CPU and CUDA platforms.
Its attributes fix one launch at trace time (:class:`Packed`: the packed parameter buffer with
the pointer slots left zero, where each buffer's address goes, the geometry); they differ per
platform only in *what is called*:

========== =============================================== ========================================
platform   ``entry(function, ...)``                        failure text
========== =============================================== ========================================
CUDA       ``cuLaunchKernel`` on XLA's stream; ``function`` the CUresult number
           is the kernel's ``CUkernel`` (any GPU's context)
CPU        a ctypes callback with cuLaunchKernel's          the Python exception, e.g. the CPU
           signature: ``function`` is a launch record id;   loader's out-of-bounds report naming
           it runs ptxbridge's CPU PTX interpreter, with   thread and PTX line
           every buffer bounds-checked
========== =============================================== ========================================

So jax.jit on a CPU runs the same C handler as on a GPU, and CI exercises it.

The handler also keeps the kernel's no-alias promises (``__restrict__``, ``&mut``,
``DisjointSlice``; :mod:`ptxbridge.launch.aliasing`): :func:`no_alias` turns them into pairs of
pointer slots whose buffers must not overlap, and the handler compares their byte ranges on
every call, before launching.  XLA's buffers are dense, so two byte ranges decide it exactly.

The attributes hold addresses valid only in the process that traced the call, so the program
cannot be serialized (``jax.export``) or reused from another process; a random ``session``
attribute makes every process's programs differ, so JAX's persistent compilation cache never
hands one process another's executable.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import os
import threading
from dataclasses import dataclass
from typing import Any

from ptxbridge.abi.errors import ToolchainError
from ptxbridge.abi.syntax import format_type
from ptxbridge.launch.aliasing import alias_check
from ptxbridge.launch.panics import PanicFlag
from ptxbridge.launch.raised import ErrorFlag
from ptxbridge.loaders.base import Buffer
from ptxbridge.opspec import Modules, OpSpec

__all__ = ["TARGET", "NoAlias", "Packed", "cpu_attributes", "cuda_attributes", "no_alias", "register"]

TARGET = "ptxbridge_launch"
_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                           ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p,
                           ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))
_DESCRIBE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p))
_SESSION = int.from_bytes(os.urandom(8), "little") >> 1  # MLIR takes ui64 values below 2**63 only


@dataclass(frozen=True, slots=True)
class Packed:
    """One launch as fixed at trace time.

    ``slots`` pairs each pointer's byte offset in ``params`` with its buffer (operand ``k >= 0``,
    result ``-k-1``); ``spans`` gives, per slot, the bytes that buffer holds and whether the
    kernel may write it (the CPU loader bounds-checks against these); ``no_alias`` the slot pairs
    the handler checks.
    """

    kernel: str
    params: bytes
    slots: tuple[tuple[int, int], ...]
    spans: tuple[tuple[int, bool], ...]
    geometry: tuple[int, int, int, int, int, int, int]
    no_alias: NoAlias


@dataclass(frozen=True, slots=True)
class NoAlias:
    """Pointer slots whose buffers must not overlap: ``pairs[k]`` (slot indices), ``texts[k]``
    its message as ``head<TAB>why`` (the handler puts the overlapping bytes between them)."""

    pairs: tuple[tuple[int, int], ...] = ()
    texts: tuple[str, ...] = ()


_OPT_OUT = ("pass arrays that do not overlap, or check_aliasing=False in ptxbridge.jax.op to take that "
            "responsibility")


def no_alias(spec: OpSpec) -> NoAlias:
    """The no-alias promises of ``spec``'s kernel between its tensor parameters, as slot pairs.

    Slot ``k`` is the ``k``-th tensor parameter in signature order (the order :class:`Packed`
    lists them).  Promises on members of a by-value struct are left out: a struct is a derived
    constant in a JAX op, its pointers raw integers with no extent.  So is "does not overlap
    itself" (cuTile arrays, partitions): an XLA buffer is dense, so its indices never share an
    element.
    """
    check = alias_check(spec.signature)
    if check is None:
        return NoAlias()
    slot = {p.name: k for k, p in enumerate(p for p in spec.signature.params if p.name in spec.tensors)}
    pairs, texts = [], []
    for rule in check.rules:
        first, second = check.units[rule.first], check.units[rule.second]
        if not {first.label, second.label} <= slot.keys():  # a member ("s.field", "t.0") has no slot
            continue
        pairs.append((slot[first.label], slot[second.label]))
        texts.append(f"{spec.name}: argument '{first.label}' ({format_type(first.type)}) overlaps argument "
                     f"'{second.label}' ({format_type(second.type)})\t{rule.why}; {_OPT_OUT}")
    return NoAlias(tuple(pairs), tuple(texts))


@functools.cache
def register() -> None:
    """Register ``ptxbridge_launch`` with XLA for CPU and CUDA (once per process)."""
    import jax

    try:
        from ptxbridge.jax import _xla_ffi
    except ImportError:
        raise ToolchainError("ptxbridge.jax needs the XLA FFI handler, which is built only when jaxlib is "
                             "installed at build time: pip install jax, then reinstall ptxbridge with "
                             "pip install --no-build-isolation -e .") from None
    for platform in ("cpu", "CUDA"):
        jax.ffi.register_ffi_target(TARGET, _xla_ffi.handler, platform=platform)


def _common(packed: Packed) -> dict[str, Any]:
    import numpy as np

    found = {"geometry": np.array(packed.geometry, np.int64),
             "params": np.frombuffer(packed.params or b"", np.uint8).copy(),
             "slots": np.array([v for pair in packed.slots for v in pair], np.int64),
             "kernel": packed.kernel, "session": np.uint64(_SESSION)}
    if packed.no_alias.pairs:  # the handler checks only when these are present
        found["no_alias"] = np.array([k for pair in packed.no_alias.pairs for k in pair], np.int64)
        found["no_alias_bytes"] = np.array([nbytes for nbytes, _ in packed.spans], np.int64)
        found["no_alias_text"] = "\n".join(packed.no_alias.texts)
    return found


def cuda_attributes(packed: Packed, facts: dict[str, Any]) -> dict[str, Any]:
    """The attributes of a CUDA launch, from the loader's ``native_facts`` of the kernel."""
    import numpy as np

    return {**_common(packed), "entry": np.uint64(facts["launch_entry"]),
            "function": np.uint64(facts["function"]), "describe": np.uint64(0), "stream": np.int64(1)}


class _CpuLaunches:
    """Launch records and the two ctypes callbacks the C handler calls on the CPU."""

    def __init__(self) -> None:
        self.records: dict[int, tuple[Packed, Modules, bool]] = {}  # and: a debug kernel
        self.ids: dict[tuple[Packed, int], int] = {}
        self.counter = itertools.count(1)  # 0 would reach the callback as None
        self.lock = threading.Lock()  # the interpreter's state is per backend, not per thread
        self.local = threading.local()
        self.launch = _LAUNCH(self._launch)
        self.describe = _DESCRIBE(self._describe)

    def record(self, packed: Packed, modules: Modules) -> int:
        key = (packed, id(modules))  # the record keeps ``modules`` alive, so its id stays its own
        with self.lock:
            found = self.ids.get(key)
            if found is None:
                found = self.ids[key] = next(self.counter)
                self.records[found] = (packed, modules, packed.kernel in modules.debug)
        return found

    def _launch(self, function: int, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, shared: int,
                stream: Any, kernel_params: Any, extra: Any) -> int:
        try:
            packed, modules, debug = self.records[function]
            size = ctypes.c_size_t.from_address(extra[3]).value
            params = ctypes.string_at(extra[1], size)
            buffers = []
            for (offset, _source), (nbytes, writable) in zip(packed.slots, packed.spans, strict=True):
                address = int.from_bytes(params[offset:offset + 8], "little")
                buffers.append(Buffer(address, nbytes, writable))
            with self.lock:
                module = modules.get("cpu")
                errors = (ErrorFlag.of(module, packed.kernel) if debug else None) or PanicFlag.of(module,
                                                                                              packed.kernel)
                if errors is not None:
                    errors.reset(0)
                loaded = module.backend
                loaded.launch(loaded.function(packed.kernel), (gx, gy, gz), (bx, by, bz), shared, 0, params,
                              buffers)
                if errors is not None:  # its KernelRaisedError becomes the XLA error's text
                    errors.check()
            return 0
        except BaseException as exc:  # the C handler turns a nonzero code into an XLA error with this text
            self.local.text = f"{type(exc).__name__}: {exc}".encode(errors="replace")
            return 1

    def _describe(self, code: int, text: Any) -> int:
        found = getattr(self.local, "text", None)
        if found is None:
            return 1
        self.local.keep = ctypes.c_char_p(found)  # alive until this thread's next failure
        text[0] = self.local.keep
        return 0


@functools.cache
def _cpu() -> _CpuLaunches:
    return _CpuLaunches()


def cpu_attributes(packed: Packed, modules: Modules) -> dict[str, Any]:
    """The attributes of a CPU launch; the image is loaded on the CPU loader at the first launch."""
    import numpy as np

    cpu = _cpu()
    address = ctypes.cast(cpu.launch, ctypes.c_void_p).value
    describe = ctypes.cast(cpu.describe, ctypes.c_void_p).value
    record = cpu.record(packed, modules)
    return {**_common(packed), "entry": np.uint64(address), "function": np.uint64(record),
            "describe": np.uint64(describe), "stream": np.int64(0)}
