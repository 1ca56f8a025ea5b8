"""The Python side of the XLA FFI handler (``_xla_ffi.c``): registration and its attributes.

One custom call target, ``ptxbridge_launch``, is registered for XLA's CPU and CUDA platforms.
Its attributes fix one launch at trace time (:class:`Packed`: the packed parameter buffer with
the pointer slots left zero, where each buffer's address goes, the geometry); what is called,
``entry(function, ...)``, is what :func:`resolve` answers for the platform:

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

The attributes hold no address: the image is named by its content hash (:func:`image_key`) and
the kernel by its name.  Every op registers its image in the process under that hash
(:func:`provide`); when XLA instantiates a call (compiling it, or loading an executable from JAX's
persistent compilation cache or a deserialized ``jax.export`` program) the handler asks
:func:`resolve` for the launch, which loads the image on first use.  So a program with bridged
ops can be exported, cached and run in another process, one that has registered the same image.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import itertools
import threading
from dataclasses import dataclass
from typing import Any

from ptxbridge.abi.errors import ArgumentError, ToolchainError
from ptxbridge.abi.syntax import format_type
from ptxbridge.launch.aliasing import alias_check
from ptxbridge.launch.panics import PanicFlag
from ptxbridge.launch.raised import ErrorFlag
from ptxbridge.loaders.base import Buffer
from ptxbridge.opspec import Modules, OpSpec

__all__ = ["TARGET", "NoAlias", "Packed", "attributes", "image_key", "no_alias", "provide", "register",
           "resolve"]

TARGET = "ptxbridge_launch"
_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                           ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p,
                           ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))
_DESCRIBE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p))
_STREAM = {"cpu": 0, "cuda": 1}  # the ``stream`` attribute: whether the launch goes on XLA's stream


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
    """Register ``ptxbridge_launch`` with XLA for CPU and CUDA, and :func:`resolve` as the handler's
    resolver (once per process)."""
    import jax

    try:
        from ptxbridge.jax import _xla_ffi
    except ImportError:
        raise ToolchainError("ptxbridge.jax needs the XLA FFI handler, which is built only when jaxlib is "
                             "installed at build time: pip install jax, then reinstall ptxbridge with "
                             "pip install --no-build-isolation -e .") from None
    _xla_ffi.set_resolver(resolve)
    stages = {"instantiate": _xla_ffi.handler, "execute": _xla_ffi.handler}
    for platform in ("cpu", "CUDA"):
        jax.ffi.register_ffi_target(TARGET, stages, platform=platform)


_IMAGES: dict[str, Modules] = {}  # content hash -> the modules that serve every call naming it
_IMAGES_LOCK = threading.Lock()


def image_key(image: Any) -> str:
    """The content hash that names ``image`` in the handler's attributes: SHA-256 of its saved form."""
    return hashlib.sha256(image.to_bytes()).hexdigest()


def provide(modules: Modules) -> tuple[str, Modules]:
    """Register ``modules``' image in this process under its content hash; the hash and the modules
    that serve it (the first registered for that content, so ops of one image share their loads)."""
    key = image_key(modules.image)
    with _IMAGES_LOCK:
        return key, _IMAGES.setdefault(key, modules)


def resolve(stream: int, image: bytes, kernel: bytes, slots: bytes, spans: bytes) -> tuple[int, int, int]:
    """``(entry, function, describe)`` of a call's launch, asked by the handler when XLA instantiates
    it: the registered image's kernel on the CUDA loader (its ``CUkernel``), or a CPU launch record."""
    import numpy as np

    key, name = image.decode(), kernel.decode()
    modules = _IMAGES.get(key)
    if modules is None:
        raise ArgumentError(f"{name}: the program calls a kernel of image {key[:16]}..., which is not "
                            "registered in this process; make its op (ptxbridge.jax.op) or call "
                            "ptxbridge.jax.register_image(image) before running the program")
    if name not in modules.image.kernels:
        raise ArgumentError(f"image {key[:16]}... has no kernel {name!r} (kernels: "
                            f"{', '.join(modules.image.kernels)})")
    if stream:
        backend = modules.get("cuda:0").backend
        facts = backend.native_facts(backend.function(name), name)
        return facts["launch_entry"], facts["function"], 0
    pairs = np.frombuffer(slots, np.int64).reshape(-1, 2)
    extents = np.frombuffer(spans, np.int64).reshape(-1, 2)
    site = _CpuSite(name, tuple((int(a), int(b)) for a, b in pairs),
                    tuple((int(n), bool(w)) for n, w in extents))
    cpu = _cpu()
    return (ctypes.cast(cpu.launch, ctypes.c_void_p).value, cpu.record(site, modules),
            ctypes.cast(cpu.describe, ctypes.c_void_p).value)


def attributes(packed: Packed, image: str, platform: str) -> dict[str, Any]:
    """The custom call's attributes for a launch of ``packed`` from image ``image`` (its content
    hash) on ``platform`` (``"cpu"`` or ``"cuda"``)."""
    import numpy as np

    found = {"geometry": np.array(packed.geometry, np.int64),
             "params": np.frombuffer(packed.params or b"", np.uint8).copy(),
             "slots": np.array([v for pair in packed.slots for v in pair], np.int64),
             "spans": np.array([v for nbytes, writable in packed.spans for v in (nbytes, int(writable))],
                               np.int64),
             "kernel": packed.kernel, "image": image, "stream": np.int64(_STREAM[platform])}
    if packed.no_alias.pairs:  # the handler checks only when these are present
        found["no_alias"] = np.array([k for pair in packed.no_alias.pairs for k in pair], np.int64)
        found["no_alias_text"] = "\n".join(packed.no_alias.texts)
    return found


@dataclass(frozen=True, slots=True)
class _CpuSite:
    """What the CPU callback needs of one call: the kernel, its pointer slots and their extents."""

    kernel: str
    slots: tuple[tuple[int, int], ...]
    spans: tuple[tuple[int, bool], ...]


class _CpuLaunches:
    """Launch records and the two ctypes callbacks the C handler calls on the CPU."""

    def __init__(self) -> None:
        self.records: dict[int, tuple[_CpuSite, Modules, bool]] = {}  # and: a debug kernel
        self.ids: dict[tuple[_CpuSite, int], int] = {}
        self.counter = itertools.count(1)  # 0 would reach the callback as None
        self.lock = threading.Lock()  # the interpreter's state is per backend, not per thread
        self.local = threading.local()
        self.launch = _LAUNCH(self._launch)
        self.describe = _DESCRIBE(self._describe)

    def record(self, site: _CpuSite, modules: Modules) -> int:
        key = (site, id(modules))  # the record keeps ``modules`` alive, so its id stays its own
        with self.lock:
            found = self.ids.get(key)
            if found is None:
                found = self.ids[key] = next(self.counter)
                self.records[found] = (site, modules, site.kernel in modules.debug)
        return found

    def _launch(self, function: int, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, shared: int,
                stream: Any, kernel_params: Any, extra: Any) -> int:
        try:
            site, modules, debug = self.records[function]
            size = ctypes.c_size_t.from_address(extra[3]).value
            params = ctypes.string_at(extra[1], size)
            buffers = []
            for (offset, _source), (nbytes, writable) in zip(site.slots, site.spans, strict=True):
                address = int.from_bytes(params[offset:offset + 8], "little")
                buffers.append(Buffer(address, nbytes, writable))
            with self.lock:
                module = modules.get("cpu")
                errors = (ErrorFlag.of(module, site.kernel) if debug else None) or PanicFlag.of(module,
                                                                                            site.kernel)
                if errors is not None:
                    errors.reset(0)
                loaded = module.backend
                loaded.launch(loaded.function(site.kernel), (gx, gy, gz), (bx, by, bz), shared, 0, params,
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
