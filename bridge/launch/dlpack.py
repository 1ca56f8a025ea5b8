"""Tensor facts from any array-like: torch, CuPy, NumPy, numba device arrays, JAX, DLPack producers.

The call path needs, per tensor argument, its address, element type, shape,
strides (in elements), device and whether it may be written.  How to read
them is decided once per Python type (:func:`extractor_for`):

========================== ==============================================================
type                        how the facts are read (per launch)
========================== ==============================================================
``torch.Tensor``            ``data_ptr()``, ``dtype``, ``shape``, ``stride()``, ``get_device()``
``cupy.ndarray``            ``data.ptr``, ``dtype``, ``shape``, ``strides``, ``device.id``
``numpy.ndarray``           ``__array_interface__`` (host memory)
``__dlpack__`` producers    a capsule per launch (versioned, legacy fallback), read once
``__cuda_array_interface__`` the interface dict (numba device arrays, older producers)
========================== ==============================================================

The DLPack C exchange API (``__dlpack_c_exchange_api__``, torch >= 2.10) is
used by the optional C fast path (``bridge/_fastlaunch.c``), which calls its
functions directly; this pure-Python path does not use it, since from Python
each of its C functions costs a ctypes call (0.3 to 0.9 us measured on the
dev host), more than torch's own accessors.  Capsules are left
with their producer-set name, so the producer's capsule destructor frees
them when the launch no longer holds them; a capsule is never read twice.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from ptxbridge.abi.devices import DLPACK_CPU, DLPACK_CUDA
from ptxbridge.abi.dtypes import DType, from_dlpack, from_numpy
from ptxbridge.abi.errors import ArgumentError

try:  # NumPy's data address in C (:func:`_numpy_extract`); without the extension, from the interface
    from ptxbridge.launch._fastlaunch import host_data
except ImportError:
    host_data = None

__all__ = ["TensorInfo", "extractor_for", "host_data", "is_tensor_type", "producer_of", "device_name",
           "torch_dtype_map", "stream_handle", "default_stream_for"]


class TensorInfo(NamedTuple):
    """What one tensor argument is: ``ptr`` already includes any byte offset.  A named tuple: one is
    made per tensor per launch, and a frozen dataclass's construction cost more than the launch's
    other work on a small tensor."""

    ptr: int
    dtype: DType | None
    dtype_name: str  # the producer's own name, for messages
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements
    device_type: int
    device_id: int
    readonly: bool
    owner: Any
    itemsize: int = 0  # bytes per element as the producer says; 0: the dtype's (see span)

    @property
    def numel(self) -> int:
        n = 1
        for extent in self.shape:
            n *= extent
        return n

    def c_contiguous(self) -> bool:
        return _contiguous(reversed(self.shape), reversed(self.strides)) or self.numel <= 1

    def f_contiguous(self) -> bool:
        return _contiguous(self.shape, self.strides) or self.numel <= 1

    def span(self) -> tuple[int, int]:
        """(lowest address, bytes up to the highest) the view touches; negative strides included."""
        # a structured or vector element (a NumPy record, DLPack lanes) has no ptxbridge dtype
        itemsize = self.itemsize or (self.dtype.itemsize if self.dtype else 1)
        below = above = 0
        for extent, stride in zip(self.shape, self.strides, strict=True):
            if extent == 0:
                return self.ptr, 0
            if stride < 0:
                below += (extent - 1) * stride
            else:
                above += (extent - 1) * stride
        return self.ptr + below * itemsize, (above - below + 1) * itemsize


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return tuple(reversed(strides))


def _contiguous(shape: Iterable[int], strides: Iterable[int]) -> bool:
    """Whether the axes, innermost first, are packed densely; strides of unit axes do not matter
    (torch reports arbitrary ones)."""
    step = 1
    for extent, stride in zip(shape, strides, strict=True):
        if extent != 1 and stride != step:
            return False
        step *= extent
    return True


def device_name(device_type: int, device_id: int) -> str:
    if device_type == DLPACK_CPU:
        return "cpu"
    if device_type == DLPACK_CUDA:
        return f"cuda:{device_id}"
    return f"dlpack-device-{device_type}:{device_id}"


# --- torch --------------------------------------------------------------------------------

_TORCH_NAMES = {
    "bool": "bool", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8",
    "uint16": "u16", "uint32": "u32", "uint64": "u64", "float16": "f16", "bfloat16": "bf16",
    "float32": "f32", "float64": "f64", "complex64": "c64", "complex128": "c128",
    "float8_e4m3fn": "f8e4m3fn", "float8_e5m2": "f8e5m2",
}


_TORCH_DEVICES = {"cpu": DLPACK_CPU, "cuda": DLPACK_CUDA}


def torch_dtype_map(torch: Any) -> dict[Any, DType]:
    """torch dtype object -> ptxbridge DType, for every dtype both know."""
    from ptxbridge.abi.dtypes import DTYPES

    found = {}
    for torch_name, name in _TORCH_NAMES.items():
        torch_dtype = getattr(torch, torch_name, None)
        if torch_dtype is not None:
            found[torch_dtype] = DTYPES[name]
    return found


def _torch_extractor(torch: Any) -> Callable[[Any, Any], TensorInfo]:
    dtypes = torch_dtype_map(torch)

    def extract(t: Any, stream: Any = None) -> TensorInfo:
        device = t.device
        if device.type not in _TORCH_DEVICES:  # meta, xpu, mps...: get_device() says -1 or an index
            raise ArgumentError(f"torch tensor on {device}: only cpu and cuda tensors can be passed")
        dt = t.dtype
        lazy = t.is_conj() or t.is_neg()  # the data is not what the tensor reads as
        name = str(dt).removeprefix("torch.") + (" (lazy conjugate/negative view)" if lazy else "")
        return TensorInfo(t.data_ptr(), None if lazy else dtypes.get(dt), name,
                          tuple(t.shape), tuple(t.stride()),
                          _TORCH_DEVICES[device.type], device.index or 0, False, t, t.element_size())

    return extract


# --- CuPy and NumPy ------------------------------------------------------------------------

def _byte_strides_to_elements(strides: tuple[int, ...], itemsize: int, what: str) -> tuple[int, ...]:
    elements = []
    for stride in strides:
        count, rest = divmod(stride, itemsize)
        if rest:
            raise ArgumentError(f"{what}: byte strides {strides} are not multiples of the item size "
                                f"{itemsize}")
        elements.append(count)
    return tuple(elements)


@functools.lru_cache(maxsize=256)  # numpy's dtype.name is slow, and a program uses few dtypes
def _numpy_dtype(dt: Any) -> DType | None:
    """None for byte-swapped dtypes (``>f4`` is named float32 too): kernels read native order."""
    if not dt.isnative:
        return None
    return from_numpy(dt.name) or ({"bfloat16": from_dlpack(4, 16)}.get(dt.name))


@functools.lru_cache(maxsize=256)
def _numpy_name(dt: Any) -> str:
    return dt.name if dt.isnative else f"{dt.name} ({dt.str}, byte-swapped)"


def _cupy_extract(a: Any, stream: Any = None) -> TensorInfo:
    dt = a.dtype
    return TensorInfo(a.data.ptr, _numpy_dtype(dt), _numpy_name(dt), tuple(a.shape),
                      _byte_strides_to_elements(tuple(a.strides), dt.itemsize, "cupy array"),
                      DLPACK_CUDA, a.device.id, False, a, dt.itemsize)


def _numpy_extract(a: Any, stream: Any = None) -> TensorInfo:
    dt = a.dtype
    found = None if host_data is None else host_data(a)
    ptr, readonly = found if found is not None else a.__array_interface__["data"]
    return TensorInfo(ptr, _numpy_dtype(dt), _numpy_name(dt), tuple(a.shape),
                      _byte_strides_to_elements(tuple(a.strides), dt.itemsize, "numpy array"),
                      DLPACK_CPU, 0, bool(readonly), a, dt.itemsize)


def _cai_extract(a: Any, stream: Any = None) -> TensorInfo:
    """``__cuda_array_interface__`` v2/v3; the device is read from the pointer by the caller."""
    import numpy

    cai = a.__cuda_array_interface__
    dt = numpy.dtype(cai["typestr"])
    shape = tuple(cai["shape"])
    strides = cai.get("strides")
    elems = _c_strides(shape) if strides is None else _byte_strides_to_elements(
        tuple(strides), dt.itemsize, "__cuda_array_interface__")
    ptr, readonly = cai["data"]
    return TensorInfo(ptr or 0, _numpy_dtype(dt), _numpy_name(dt), shape, elems, DLPACK_CUDA, -1,
                      bool(readonly), a, dt.itemsize)


# --- DLPack capsules -------------------------------------------------------------------------

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensorVersioned(ctypes.Structure):
    # dlpack.h v1.x: version {u32 major, u32 minor}, manager_ctx, deleter, flags, dl_tensor
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


_READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY
_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_is_valid.restype = ctypes.c_int
_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _capsule(obj: Any, stream: Any) -> tuple[Any, bool]:
    """A fresh capsule from ``obj``; versioned when the producer speaks DLPack >= 1.0."""
    try:
        return obj.__dlpack__(stream=stream, max_version=(1, 1)), True
    except TypeError:  # a producer older than the versioned protocol
        return obj.__dlpack__(stream=stream), False


def _dlpack_extract(obj: Any, stream: Any = None) -> TensorInfo:
    device_type, device_id = obj.__dlpack_device__()
    # DLPack: stream is None for CPU; for CUDA the consumer's stream (1 = legacy default).
    consumer_stream = None if device_type != DLPACK_CUDA else (stream if stream else 1)
    capsule, versioned = _capsule(obj, consumer_stream)
    readonly = False
    if versioned and _is_valid(capsule, b"dltensor_versioned"):
        managed = _DLManagedTensorVersioned.from_address(_get_pointer(capsule, b"dltensor_versioned"))
        tensor, readonly = managed.dl_tensor, bool(managed.flags & _READ_ONLY)
    elif _is_valid(capsule, b"dltensor"):
        tensor = _DLTensor.from_address(_get_pointer(capsule, b"dltensor"))
    else:
        raise ArgumentError(f"{type(obj).__name__}.__dlpack__ returned something that is not an unused "
                            f"DLPack capsule (got {capsule!r})")
    if (tensor.device.device_type, tensor.device.device_id) != (device_type, device_id):
        raise ArgumentError(f"{type(obj).__name__}: __dlpack_device__ says {(device_type, device_id)} "
                            f"but the capsule says {(tensor.device.device_type, tensor.device.device_id)}")
    ndim = tensor.ndim
    shape = tuple(tensor.shape[i] for i in range(ndim))
    strides = tuple(tensor.strides[i] for i in range(ndim)) if tensor.strides else _c_strides(shape)
    code, bits, lanes = tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes
    dt = from_dlpack(code, bits, lanes)
    name = dt.name if dt else f"dlpack(code={code}, bits={bits}, lanes={lanes})"
    return TensorInfo((tensor.data or 0) + tensor.byte_offset, dt, name, shape, strides,
                      device_type, device_id, readonly, (obj, capsule), max(1, bits * lanes // 8))


# --- choosing per type -------------------------------------------------------------------------

_EXTRACTORS: dict[type, Callable[[Any, Any], TensorInfo] | None] = {}


def _module_of(tp: type) -> str:
    return tp.__module__.split(".", 1)[0]


def _choose(tp: type) -> Callable[[Any, Any], TensorInfo] | None:
    root = _module_of(tp)
    torch = sys.modules.get("torch")
    if root == "torch" and torch is not None and issubclass(tp, torch.Tensor):
        return _torch_extractor(torch)
    cupy = sys.modules.get("cupy")
    if root == "cupy" and cupy is not None and issubclass(tp, cupy.ndarray):
        return _cupy_extract
    numpy = sys.modules.get("numpy")
    if numpy is not None and issubclass(tp, numpy.ndarray):
        return _numpy_extract
    if hasattr(tp, "__dlpack__") and hasattr(tp, "__dlpack_device__"):
        return _dlpack_extract
    if hasattr(tp, "__cuda_array_interface__"):
        return _cai_extract
    return None


def extractor_for(tp: type) -> Callable[[Any, Any], TensorInfo] | None:
    """The fact reader for instances of ``tp`` (None when ``tp`` is not a tensor type); cached."""
    try:
        return _EXTRACTORS[tp]
    except KeyError:
        found = _EXTRACTORS[tp] = _choose(tp)
        return found


def producer_of(tp: type) -> str | None:
    """Which reader takes instances of ``tp``: ``"torch"``, ``"cupy"``, ``"numpy"``, ``"dlpack"``
    (``__dlpack__`` capsules) or ``"cai"`` (``__cuda_array_interface__``); None for no tensor type."""
    extract = extractor_for(tp)
    if extract is None:
        return None
    return {_cupy_extract: "cupy", _numpy_extract: "numpy", _dlpack_extract: "dlpack",
            _cai_extract: "cai"}.get(extract, "torch")


def is_tensor_type(tp: type) -> bool:
    return extractor_for(tp) is not None


# --- streams ----------------------------------------------------------------------------------

def stream_handle(stream: Any) -> int:
    """The raw ``CUstream`` of an explicit ``stream=``: an int, a ``__cuda_stream__`` object,
    a torch stream (``cuda_stream``) or a CuPy stream (``ptr``)."""
    if isinstance(stream, int):
        return stream
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        _version, handle = protocol()
        return int(handle)
    for attr in ("cuda_stream", "ptr", "handle"):
        value = getattr(stream, attr, None)
        if isinstance(value, int):
            return value
    raise ArgumentError("stream= must be an int handle, an object with __cuda_stream__, a torch "
                        f"or a CuPy stream (got {type(stream).__name__})")


def _leaves(values: Any, depth: int = 4) -> Iterator[Any]:
    """``values`` and what dicts, dataclasses, tuples and lists among them hold (structs and tuples of
    arguments)."""
    for value in values:
        fields = getattr(type(value), "__dataclass_fields__", None)
        if depth and fields is not None:
            yield from _leaves((getattr(value, name, None) for name in fields), depth - 1)
        elif isinstance(value, (dict, tuple, list)) and depth:
            yield from _leaves(value.values() if isinstance(value, dict) else value, depth - 1)
        else:
            yield value


def _torch_stream_reader(torch: Any) -> Callable[[int], int]:
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda device: torch.cuda.current_stream(device).cuda_stream


def _cupy_stream_reader(cupy: Any) -> Callable[[int], int]:
    """CuPy's current stream of the current device (switching devices per launch costs ~10 us)."""
    get_current_stream = cupy.cuda.get_current_stream
    return lambda device: get_current_stream().ptr


def default_stream_for(args: tuple) -> Callable[[int], int] | None:
    """How to find the caller's stream when no ``stream=`` is given, decided by the arguments of the
    call that builds a plan, struct members and tuple items included.

    torch tensors -> torch's current stream on the device; else CuPy arrays ->
    CuPy's current stream; else None (the legacy default stream).
    """
    roots = {_module_of(type(value)) for value in _leaves(args)}
    if "torch" in roots and "torch" in sys.modules:
        return _torch_stream_reader(sys.modules["torch"])
    if "cupy" in roots and "cupy" in sys.modules:
        return _cupy_stream_reader(sys.modules["cupy"])
    return None
