"""The CUDA loader: a linked image on one GPU through the driver API.

Setup (load, kernel handles, checks, attributes, globals) goes through
``cuda.bindings.driver``.  The launch itself calls ``cuLaunchKernel`` in
libcuda through ctypes with pre-built arguments: cuda.bindings converts
every argument on each call, which costs more than the whole rest of the
launch path (measured on an H200: 7.2 us against 4.5 us for a C loop).

The image is loaded with ``cuLibraryLoadData`` and launched through
``CUkernel`` handles, so the launch runs in the context of the stream it is
given; for the NULL / legacy / per-thread default streams the device's
primary context is made current first.  Parameters travel as one packed
buffer (``CU_LAUNCH_PARAM_BUFFER_POINTER``) or as pointers into it
(``kernelParams``; set ``PTXBRIDGE_LAUNCH_PARAMS=pointers``); the packed
layout of every kernel is cross-checked with ``cuFuncGetParamInfo`` at load.
A kernel may take up to 32,764 bytes of parameters where the driver is CUDA
12.1 or newer (4 KiB before); one that takes more is refused at load.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cuda.bindings import driver as cu

from ptxbridge.abi.check import DeclaredParam, check_layout
from ptxbridge.abi.devices import DLPACK_CUDA
from ptxbridge.abi.errors import CudaError
from ptxbridge.abi.layout import MAX_PARAM_BYTES, Packer
from ptxbridge.abi.signature import Signature

from .base import Backend, Buffer
from .choice import CodeChoice
from .driver import driver_version

__all__ = ["CudaBackend", "DeviceArray", "cooperative_kernels", "cuda_error"]

_STATIC_SHARED_LIMIT = 48 * 1024  # above this, dynamic shared memory needs an opt-in
_BUFFER_POINTER, _BUFFER_SIZE, _PARAM_END = 1, 2, 0  # CU_LAUNCH_PARAM_* (cuda.h)
_DEFAULT_STREAMS = (0, 1, 2)  # NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD
_OLD_PARAM_BYTES, _LARGE_PARAMS_DRIVER = 4096, (12, 1)  # the limit before CUDA 12.1, and since
_INIT = threading.Lock()
_JIT_LOG_BYTES = 16 * 1024  # the driver JIT's error log, attached to a failed JIT
_state: dict[str, Any] = {}


# Errors after which the context is unusable: every later call in it returns the same code
# (CUDA Runtime API, "cudaErrorIllegalInstruction ... The context cannot be used, so it must be
# destroyed (and a new one should be created)").
_STICKY = frozenset({"CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_ASSERT", "CUDA_ERROR_HARDWARE_STACK_ERROR",
                     "CUDA_ERROR_ILLEGAL_INSTRUCTION", "CUDA_ERROR_MISALIGNED_ADDRESS",
                     "CUDA_ERROR_INVALID_ADDRESS_SPACE", "CUDA_ERROR_INVALID_PC", "CUDA_ERROR_LAUNCH_FAILED"})


def sticky_note(name: str) -> str:
    """What a sticky error means for the caller (empty for any other error)."""
    if name not in _STICKY:
        return ""
    why = ("a thread executed `trap`: cuda-oxide lowers a Rust panic to it (so do __trap() and "
           "gpu_assert!); ptxbridge.rust kernels without their own panic handler report panics "
           "as KernelRaisedError instead" if name == "CUDA_ERROR_ILLEGAL_INSTRUCTION" else
           "a device-side assertion failed" if name == "CUDA_ERROR_ASSERT" else "a kernel faulted")
    return (f"; {why}. The CUDA context of this device is lost: every later launch, copy or "
            "synchronize in this process fails with this error (ptxbridge shares the device's primary "
            "context with torch and CuPy, so a new context needs a new process); run the kernel on the "
            "CPU loader (load(\"cpu\")) to see the thread and source line")


def cuda_error(code: int, what: str) -> CudaError:
    """A CudaError for CUresult ``code``: ``what: CUDA_ERROR_X: explanation``, and for an error that
    loses the context, what that means (:func:`sticky_note`)."""
    try:
        result = cu.CUresult(code)
        name = cu.cuGetErrorName(result)[1].decode()
        text = cu.cuGetErrorString(result)[1].decode()
    except (ValueError, AttributeError):
        name, text = f"CUresult {code}", "unknown error code"
    return CudaError(f"{what}: {name}: {text}{sticky_note(name)}", code=name)


def _call(what: str, fn: Callable, *args: Any) -> Any:
    result = fn(*args)
    err, rest = result[0], result[1:]
    if err != cu.CUresult.CUDA_SUCCESS:
        raise cuda_error(int(err), what)
    return rest[0] if len(rest) == 1 else rest


def _libcuda() -> Any:
    """libcuda through ctypes, for the calls on the launch path (argtypes left unset: see prepare)."""
    with _INIT:
        if "lib" not in _state:
            _call("cuInit", cu.cuInit, 0)
            _state["lib"] = ctypes.CDLL("libcuda.so.1")
        return _state["lib"]


@dataclass(slots=True)
class _Function:
    """One kernel on this device: the CUkernel and what was configured for it."""

    name: str
    kernel: Any  # cu.CUkernel
    handle: int
    param_offsets: tuple[int, ...]
    max_dynamic_shared: int = _STATIC_SHARED_LIMIT
    lock: threading.Lock = field(default_factory=threading.Lock)


def _param_count(function: Any) -> int | None:
    """``cuFuncGetParamCount`` where the driver has it (CUDA 13), else None."""
    query = getattr(cu, "cuFuncGetParamCount", None)
    if query is None:
        return None
    try:
        err, count = query(function)
    except RuntimeError:  # cuda.bindings: "Function cuFuncGetParamCount not found" in this driver
        return None
    return int(count) if err == cu.CUresult.CUDA_SUCCESS else None


def _check_param_space(name: str, signature: Signature) -> None:
    """The parameter buffer must fit what the driver takes: 32,764 bytes from CUDA 12.1, 4 KiB before."""
    size = signature.layout.size
    if size > MAX_PARAM_BYTES:
        raise CudaError(f"{name}: the parameters take {size} bytes, more than the {MAX_PARAM_BYTES} bytes a "
                        "kernel may take; pass large data through device memory (a pointer) instead",
                        code="CUDA_ERROR_INVALID_VALUE")
    version = driver_version() if size > _OLD_PARAM_BYTES else None
    if version is not None and version < _LARGE_PARAMS_DRIVER:
        cuda = f"CUDA {version[0]}.{version[1]}"
        raise CudaError(f"{name}: the parameters take {size} bytes; the driver ({cuda}) takes "
                        f"{_OLD_PARAM_BYTES}, CUDA 12.1 and newer take up to {MAX_PARAM_BYTES}: update the "
                        "NVIDIA driver", code="CUDA_ERROR_INVALID_VALUE")


def _cross_check(name: str, signature: Signature, function: Any) -> None:
    """The driver's parameter offsets and sizes must agree with ptxbridge's layout, by the rules the
    PTX and cubin checks use (:func:`ptxbridge.abi.check.check_layout`: a slice's pointer and length
    fill plain rustc's one 16-byte fat-pointer parameter; docs/conventions.md, "The driver side").

    The count comes from ``cuFuncGetParamCount`` where the driver has it; elsewhere the driver is
    probed only until its parameters cover the layout's bytes (a probe past the end is an API error
    under compute-sanitizer), and the linker's KPARAM check covers the count.
    """
    count = _param_count(function)
    layout = signature.layout
    declared: list[DeclaredParam] = []
    for index in range(len(layout.params) if count is None else count):
        if count is None and declared and declared[-1].offset + declared[-1].size >= layout.size:
            break  # the bytes are all accounted for (a slice fills one declared parameter): stop probing
        err, offset, size = cu.cuFuncGetParamInfo(function, index)
        if err == cu.CUresult.CUDA_ERROR_NOT_SUPPORTED:
            return  # driver older than 12.4: nothing to compare against
        if err != cu.CUresult.CUDA_SUCCESS:
            break
        declared.append(DeclaredParam(index, int(offset), int(size)))
    check_layout(signature, declared, f"kernel {name} as the driver reports it")


_COOP_GROUP_INSTR_OFFSETS = 0x28  # EIATTR number; only grid-sync kernels carry it (cuobjdump -elf, 13.5)
# What the device runtime's cudaCGSynchronize (numba's grid.sync()) calls: a driver syscall that
# needs a cooperative launch.  The kernel shows it only in the call graph, not in its .nv.info.
_GRID_SYNC_SYSCALL = "__cuda_syscall_CGS_sync"


def cooperative_kernels(cubin: bytes) -> frozenset[str]:
    """Kernels that need a cooperative launch: their ``.nv.info.<name>`` records grid-wide sync,
    or their call graph reaches the device runtime's grid sync."""
    from ptxbridge.abi.elf import read_elf
    from ptxbridge.abi.nvinfo import read_nv_info

    elf = read_elf(cubin, "<image cubin>")
    found = _callers_of(elf, _GRID_SYNC_SYSCALL)
    for section in elf.sections:
        if section.name.startswith(".nv.info."):
            records = read_nv_info(elf.section_data(section), "<image cubin>", section.offset)
            if any(r.attr == _COOP_GROUP_INSTR_OFFSETS for r in records):
                found.add(section.name.removeprefix(".nv.info."))
    return frozenset(found)


def _callers_of(elf: Any, name: str) -> set[str]:
    """Functions that call ``name``, directly or not, by the linker's ``.nv.callgraph``.

    The section is int32 pairs: a ``(0, -1)`` marker, then ``(caller, callee)``
    symbol indices until the next negative marker (nvJitLink 13.5 output).
    """
    section = elf.section(".nv.callgraph")
    if section is None:
        return set()
    data = elf.section_data(section)
    words = memoryview(data[: len(data) // 8 * 8]).cast("i")
    callers: dict[int, set[int]] = {}
    in_edges = False
    for caller, callee in zip(words[::2], words[1::2], strict=True):
        if callee < 0:
            in_edges = callee == -1
        elif in_edges:
            callers.setdefault(callee, set()).add(caller)
    names = {s.index: s.name for s in elf.symbols}
    pending = [i for i, n in names.items() if n == name]
    reached: set[int] = set()
    while pending:
        for caller in callers.get(pending.pop(), ()):
            if caller not in reached:
                reached.add(caller)
                pending.append(caller)
    return {names[i] for i in reached if i in names}


def _jit(modules: tuple[bytes, ...], device_id: int, target: str | None) -> bytes:
    """A cubin for the current GPU from PTX ``modules``, compiled and linked by the driver's JIT
    linker (``cuLinkCreate``: one program, as nvJitLink would have linked it); a failure is a
    CudaError carrying the JIT's error log."""
    log = bytearray(_JIT_LOG_BYTES)
    option = cu.CUjit_option
    state = _call("cuLinkCreate", cu.cuLinkCreate, 2, [option.CU_JIT_ERROR_LOG_BUFFER,
                                                     option.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES],
                  [log, len(log)])
    try:
        for i, ptx in enumerate(modules):
            data = ptx if ptx.endswith(b"\0") else ptx + b"\0"
            _call(f"cuda:{device_id}: JIT-compiling the image's PTX for {target} (module {i})",
                  cu.cuLinkAddData, state, cu.CUjitInputType.CU_JIT_INPUT_PTX, data, len(data),
                  f"ptx{i}".encode(), 0, [], [])
        cubin, size = _call(f"cuda:{device_id}: linking the JIT-compiled PTX", cu.cuLinkComplete, state)
        return ctypes.string_at(int(cubin), size)  # copied: the cubin is the link state's
    except CudaError as exc:
        text = bytes(log).split(b"\0", 1)[0].decode(errors="replace").strip()
        raise CudaError(f"{exc}\n{text}".rstrip(), code=exc.code) from None
    finally:
        cu.cuLinkDestroy(state)


def _release(library: Any, device: Any) -> None:
    """Finalizer: unload quietly (at interpreter exit the driver may already be gone)."""
    with contextlib.suppress(Exception):
        if library is not None:
            cu.cuLibraryUnload(library)
    with contextlib.suppress(Exception):
        cu.cuDevicePrimaryCtxRelease(device)


class CudaBackend(Backend):
    """An :class:`~ptxbridge.Image` loaded on GPU ``device_id``: the code ``choice`` names (default:
    its cubin; :func:`ptxbridge.loaders.choice.choose_code`).  ``loaded`` says which, in words."""

    device_type = DLPACK_CUDA
    needs_buffers = False  # the driver does its own bounds-checking (or faults)

    def __init__(self, image: Any, device_id: int = 0, choice: CodeChoice | None = None):
        choice = choice or CodeChoice("cubin", image.arch)
        if choice.kind == "cubin" and image.cubin is None:
            raise CudaError(f"cuda:{device_id}: the image has no cubin (it was linked for the CPU loader "
                            "only); link with an arch to load it on a GPU")
        self._lib = _libcuda()
        count = _call("cuDeviceGetCount", cu.cuDeviceGetCount)
        if not 0 <= device_id < count:
            raise CudaError(f"cuda:{device_id}: no such device (the driver reports {count})",
                            code="CUDA_ERROR_INVALID_DEVICE")
        self.device_id = device_id
        self._last_kernel: list[str | None] = [None]  # one slot: the C launch plans write it directly
        self._device = _call("cuDeviceGet", cu.cuDeviceGet, device_id)
        self._context = _call("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain, self._device)
        self._context_handle = ctypes.c_void_p(int(self._context))
        self._library = None
        try:  # a failed load (bad image, a signature the driver disagrees with) releases what it took
            with self._current():
                if choice.kind == "cubin":
                    code = image.cubins.get(choice.arch, image.cubin)
                    self.loaded = f"the cubin for {choice.arch}"
                else:
                    code = _jit(image.ptx, device_id, choice.arch)
                    self.loaded = f"its PTX for {choice.arch}, JIT-compiled by the driver"
                self.cooperative_kernels = cooperative_kernels(code)
                self._library = _call("cuLibraryLoadData", cu.cuLibraryLoadData, code,
                                      None, None, 0, None, None, 0)
                self._functions = {name: self._open(name, sig) for name, sig in image.kernels.items()}
        except BaseException:
            _release(self._library, self._device)
            raise
        self._finalizer = weakref.finalize(self, _release, self._library, self._device)

    def _open(self, name: str, signature: Signature) -> _Function:
        kernel = _call(f"{name}: cuLibraryGetKernel", cu.cuLibraryGetKernel, self._library, name.encode())
        function = _call(f"{name}: cuKernelGetFunction", cu.cuKernelGetFunction, kernel)
        _check_param_space(name, signature)
        _cross_check(name, signature, function)
        offsets = tuple(p.offset for p in signature.layout.params)
        found = _Function(name, kernel, int(kernel), offsets)
        dynamic = signature.launch.dynamic_shared
        if dynamic > _STATIC_SHARED_LIMIT:
            self._allow_shared(found, dynamic)
        return found

    class _Current:
        def __init__(self, backend: CudaBackend):
            self.backend = backend

        def __enter__(self) -> None:
            _call("cuCtxPushCurrent", cu.cuCtxPushCurrent, self.backend._context)

        def __exit__(self, exc_type: object, *rest: object) -> None:
            if exc_type is None:
                _call("cuCtxPopCurrent", cu.cuCtxPopCurrent)
            else:  # the body's error is the one to report; a failing pop must not replace it
                cu.cuCtxPopCurrent()

    def _current(self) -> _Current:
        return CudaBackend._Current(self)

    def _allow_shared(self, function: _Function, nbytes: int) -> None:
        attribute = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        _call(f"{function.name}: opting in to {nbytes} bytes of dynamic shared memory",
              cu.cuKernelSetAttribute, attribute, nbytes, function.kernel, self._device)
        function.max_dynamic_shared = nbytes

    # --- the Backend interface -------------------------------------------------------------------

    def function(self, name: str) -> _Function:
        return self._functions[name]

    def prepare(self, function: _Function, packer: Packer, name: str,
                cooperative: bool = False) -> Callable[[tuple, tuple, tuple, int, int], None]:
        """A launch function with every ctypes object built once: per launch it packs into a
        preallocated buffer and makes one driver call.  A lock per prepared launch guards the
        buffer (ctypes releases the GIL during the call)."""
        size = packer.size
        buffer = (ctypes.c_char * max(size, 1))()
        address = ctypes.addressof(buffer)
        size_arg = ctypes.c_size_t(size)
        pointers = os.environ.get("PTXBRIDGE_LAUNCH_PARAMS") == "pointers" or cooperative
        params = (ctypes.c_void_p * max(len(function.param_offsets), 1))(
            *(address + offset for offset in function.param_offsets))
        extra = (ctypes.c_void_p * 5)(_BUFFER_POINTER, address, _BUFFER_SIZE,
                                      ctypes.addressof(size_arg), _PARAM_END)
        kernel_params, extra_arg = (params, None) if pointers else (None, extra)
        keep = (buffer, size_arg, params, extra)  # the pointers above point into these
        launch = self._lib.cuLaunchCooperativeKernel if cooperative else self._lib.cuLaunchKernel
        tail = (kernel_params,) if cooperative else (kernel_params, extra_arg)
        handle = ctypes.c_void_p(function.handle)
        pack_into = packer.pack_into
        lock = function.lock
        streams: dict[int, ctypes.c_void_p] = {}
        set_current = self._lib.cuCtxSetCurrent
        context = self._context_handle

        def run(values: tuple, grid: tuple, block: tuple, shared_mem: int, stream: int,
                _keep: tuple = keep) -> None:  # _keep: the closure owns what the pointers point into
            stream_arg = streams.get(stream)
            if stream_arg is None:
                stream_arg = streams[stream] = ctypes.c_void_p(stream)
            if stream in _DEFAULT_STREAMS:
                set_current(context)
            if shared_mem > function.max_dynamic_shared:
                self._allow_shared(function, shared_mem)
            with lock:
                pack_into(buffer, values)
                code = launch(handle, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                              shared_mem, stream_arg, *tail)
            self._last_kernel[0] = name
            if code:
                raise self.launch_error(code, name, grid, block, shared_mem)

        return run

    @property
    def last_kernel(self) -> str | None:
        """The kernel launched last on this device: fault reports name it."""
        return self._last_kernel[0]

    def native_facts(self, function: _Function, name: str) -> dict[str, Any]:
        """What the C launch plan (``ptxbridge.launch._fastlaunch.Plan``) needs to call the driver itself:
        the driver's entry points, the kernel and context handles, with the same choices as
        :meth:`prepare` (non-cooperative launches only)."""
        pointers = os.environ.get("PTXBRIDGE_LAUNCH_PARAMS") == "pointers"
        entry = ctypes.c_void_p
        return {"launch_entry": ctypes.cast(self._lib.cuLaunchKernel, entry).value,
                "set_current_entry": ctypes.cast(self._lib.cuCtxSetCurrent, entry).value,
                "pointer_attribute_entry": ctypes.cast(self._lib.cuPointerGetAttribute, entry).value,
                "function": function.handle, "context": int(self._context),
                "pointer_offsets": function.param_offsets if pointers else None,
                "max_shared": function.max_dynamic_shared, "function_obj": function,
                "last_kernel": self._last_kernel, "name": name, "device_id": self.device_id}

    def launch(self, function: _Function, grid: tuple[int, int, int], block: tuple[int, int, int],
               shared_mem: int, stream: Any, params: bytes, buffers: Sequence[Buffer]) -> None:
        """The protocol's launch: copy ``params`` into the prepared buffer, then free uploads."""
        packer = _RawPacker(len(params))
        self.prepare(function, packer, function.name)((params,), grid, block, shared_mem, int(stream or 0))
        for buffer in buffers:
            if isinstance(buffer.owner, _Upload):
                buffer.owner.free(int(stream or 0))

    def launch_error(self, code: int, name: str, grid: tuple, block: tuple, shared_mem: int) -> CudaError:
        call = f"cuLaunchKernel(grid={grid}, block={block}, shared_mem={shared_mem})"
        error = cuda_error(code, f"{name}: {call}")
        if error.code in _STICKY:
            error = CudaError(f"{error}; an earlier kernel faulted (the last ptxbridge launched on "
                              f"cuda:{self.device_id} was {self.last_kernel!r})", code=error.code)
        return error

    # --- memory, globals, sync -----------------------------------------------------------------

    def upload(self, data: bytes, stream: int) -> Buffer:
        """Stream-ordered device scratch holding ``data`` (freed after the launch that uses it)."""
        with self._current():
            ptr = _call("cuMemAllocAsync", cu.cuMemAllocAsync, len(data), stream)
            _call("cuMemcpyHtoDAsync", cu.cuMemcpyHtoDAsync, ptr, data, len(data), stream)
        return Buffer(int(ptr), len(data), False, _Upload(self, ptr))

    def pointer_device(self, ptr: int) -> int:
        """The device ordinal a CUDA pointer belongs to (for ``__cuda_array_interface__`` inputs)."""
        attribute = cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
        err, ordinal = cu.cuPointerGetAttribute(attribute, ptr)
        return int(ordinal) if err == cu.CUresult.CUDA_SUCCESS else -1

    def global_address(self, name: str) -> tuple[int, int]:
        with self._current():
            ptr, size = _call(f"global {name!r}: cuLibraryGetGlobal", cu.cuLibraryGetGlobal,
                              self._library, name.encode())
        return int(ptr), int(size)

    def read_global(self, name: str) -> bytes:
        ptr, size = self.global_address(name)
        host = bytearray(size)
        with self._current():
            _call(f"global {name!r}: cuMemcpyDtoH", cu.cuMemcpyDtoH, host, ptr, size)
        return bytes(host)

    def write_global(self, name: str, data: bytes) -> None:
        ptr, size = self.global_address(name)
        if len(data) != size:
            raise CudaError(f"global {name!r} is {size} bytes (got {len(data)})",
                            code="CUDA_ERROR_INVALID_VALUE")
        with self._current():
            _call(f"global {name!r}: cuMemcpyHtoD", cu.cuMemcpyHtoD, ptr, data, size)

    def to_device(self, host: Any) -> DeviceArray:
        """A device copy of a contiguous NumPy array (synchronous)."""
        array = DeviceArray(self, host.shape, host.dtype)
        if host.nbytes:
            with self._current():
                _call("cuMemcpyHtoD", cu.cuMemcpyHtoD, array.ptr, host, host.nbytes)
        return array

    def to_host(self, array: Any) -> Any:
        """A NumPy copy of a :class:`DeviceArray`, after the device finished its work."""
        import numpy

        if not isinstance(array, DeviceArray):
            raise CudaError(f"to_host takes an array made by to_device (got {type(array).__name__})")
        self.synchronize()
        host = numpy.empty(array.shape, array.dtype)
        if host.nbytes:
            with self._current():
                _call("cuMemcpyDtoH", cu.cuMemcpyDtoH, host, array.ptr, host.nbytes)
        return host

    def synchronize(self) -> None:
        """Wait for the device; a fault is raised naming the last kernel launched here."""
        with self._current():
            err = cu.cuCtxSynchronize()[0]
        if err != cu.CUresult.CUDA_SUCCESS:
            raise cuda_error(int(err), f"cuda:{self.device_id}: after kernel {self.last_kernel!r}")

    def capturing(self, stream: int) -> bool:
        """``cuStreamIsCapturing``; also True for the legacy stream while another stream captures
        (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: work on it would join that capture)."""
        with self._current():
            err, status = cu.cuStreamIsCapturing(cu.CUstream(stream))
        if err == cu.CUresult.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT:
            return True
        if err != cu.CUresult.CUDA_SUCCESS:
            raise cuda_error(int(err), f"cuda:{self.device_id}: cuStreamIsCapturing")
        return status != cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE

    def close(self) -> None:
        self._finalizer()


_STICKY = {"CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_MISALIGNED_ADDRESS",
           "CUDA_ERROR_ILLEGAL_INSTRUCTION", "CUDA_ERROR_HARDWARE_STACK_ERROR", "CUDA_ERROR_ASSERT",
           "CUDA_ERROR_INVALID_PC", "CUDA_ERROR_LAUNCH_TIMEOUT"}


class _RawPacker:
    """Adapts already-packed bytes to :meth:`CudaBackend.prepare` (the protocol's launch)."""

    def __init__(self, size: int):
        self.size = size

    def pack_into(self, buffer: Any, values: tuple) -> None:
        ctypes.memmove(buffer, values[0], self.size)


@dataclass(slots=True)
class _Upload:
    backend: CudaBackend
    ptr: Any
    freed: bool = False

    def free(self, stream: int) -> None:
        if not self.freed:
            self.freed = True
            with self.backend._current():
                _call("cuMemFreeAsync", cu.cuMemFreeAsync, self.ptr, stream)


class DeviceArray:
    """Device memory holding a C-contiguous array; exported through ``__cuda_array_interface__``."""

    def __init__(self, backend: CudaBackend, shape: tuple[int, ...], dtype: Any):
        self.backend, self.shape, self.dtype = backend, tuple(shape), dtype
        nbytes = max(int(dtype.itemsize) * _product(self.shape), 1)
        with backend._current():
            self._ptr = _call("cuMemAlloc", cu.cuMemAlloc, nbytes)
        self.ptr = int(self._ptr)
        self._finalizer = weakref.finalize(self, _free, backend._context, self._ptr)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"data": (self.ptr, False), "shape": self.shape, "typestr": self.dtype.str,
                "strides": None, "version": 3}


def _product(shape: tuple[int, ...]) -> int:
    n = 1
    for extent in shape:
        n *= extent
    return n


def _free(context: Any, ptr: Any) -> None:
    with contextlib.suppress(Exception):  # at interpreter exit the driver may be gone
        cu.cuCtxPushCurrent(context)
        cu.cuMemFree(ptr)
        cu.cuCtxPopCurrent()
