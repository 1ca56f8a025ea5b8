"""Argument binders: one per (parameter, argument type), built once, called per launch.

A binder turns one argument into the flat values of its PTX parameters (in
the order :mod:`ptxbridge.abi.lowering` gives), after checking it against
the parameter: dtype, ndim, device, layout, mutability, cuTile promises,
value ranges.  Every failure is an :class:`ArgumentError` naming the kernel
and the argument, e.g. ``saxpy: argument 'y' (&mut [f32]) got float64
tensor on cpu; expected float32 on cuda:0``.

Simple binders take ``(arg, stream)``; binders that need scratch memory
(cuTile lists, numba records, which travel by device pointer) take
``(arg, state)`` and allocate through :class:`LaunchState`.
"""

from __future__ import annotations

import dataclasses
import enum
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy

from ptxbridge.abi.devices import DLPACK_CPU, DLPACK_CUDA, DLPACK_CUDA_HOST, DLPACK_CUDA_MANAGED
from ptxbridge.abi.dtypes import KDL_COMPLEX, DType
from ptxbridge.abi.errors import ArgumentError, PtxBridgeError
from ptxbridge.abi.kind_entries import KINDS
from ptxbridge.abi.kind_table import TensorRule
from ptxbridge.abi.kinds import NumbaArray, ParamType, Slice
from ptxbridge.abi.lowering import lower_param
from ptxbridge.abi.signature import Convention, Param
from ptxbridge.abi.syntax import format_type
from ptxbridge.abi.tensor_rules import TensorProblem
from ptxbridge.launch.dlpack import (
    TensorInfo,
    device_name,
    extractor_for,
    host_data,
    torch_dtype_map,
)
from ptxbridge.launch.members import members, read, tensor_of
from ptxbridge.launch.native_args import (
    NativeItems,
    NativePrefix,
    NativeRecord,
    NativeTensor,
    native_record,
    native_tensor,
)
from ptxbridge.launch.values import F32_MAX, ValueProblem, encoder, scalar_converter
from ptxbridge.loaders.base import Buffer

__all__ = ["BindContext", "LaunchState", "Binder", "OtherDeviceError", "make_binder"]

_U64 = (1 << 64) - 1  # numba's byte strides are words: a negative one wraps

class OtherDeviceError(ArgumentError):
    """Every tensor so far lives on another GPU: the module may serve it from a sibling instance."""

    def __init__(self, message: str, device_id: int):
        self.device_id = device_id
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class BindContext:
    """What binders need to know about the launch target, fixed per loaded module."""

    kernel: str
    convention: Convention
    device_type: int
    device_id: int
    pointer_device: Callable[[int], int] | None = None  # device ordinal of a raw CUDA pointer

    @property
    def device(self) -> str:
        return device_name(self.device_type, self.device_id)


@dataclass(slots=True)
class LaunchState:
    """Per-launch scratch of the general path: the stream, the memory ranges arguments bring, and
    what to do after the launch (``after``: copies back, as numba copies a record argument back)."""

    stream: int
    upload: Callable[[bytes, int], Buffer]  # the loader's Backend.upload
    buffers: list[Buffer] = field(default_factory=list)
    to_device: Callable[[Any], Any] | None = None  # the loader's Backend.to_device / to_host
    to_host: Callable[[Any], Any] | None = None
    after: list[Callable[[], None]] = field(default_factory=list)

    def scratch(self, data: bytes, writable: bool = False) -> int:
        """Put ``data`` where the kernel can read it (and write it, when ``writable``); the buffer
        lives as long as the launch needs."""
        buffer = self.upload(data, self.stream)
        self.buffers.append(buffer._replace(writable=True) if writable else buffer)
        return buffer.ptr

    def scratch_back(self, data: bytes, receive: Callable[[bytes], None]) -> int:
        """Writable scratch holding ``data``; after the launch ``receive`` gets the bytes the kernel
        left there (a synchronous copy: the call returns once the kernel has finished)."""
        if self.to_device is None or self.to_host is None:
            raise PtxBridgeError("this launch path cannot copy arguments back")
        copy = self.to_device(numpy.frombuffer(data, numpy.uint8).copy())
        interface = getattr(copy, "__cuda_array_interface__", None) or copy.__array_interface__
        ptr = int(interface["data"][0])
        self.buffers.append(Buffer(ptr, len(data), True, copy))
        self.after.append(lambda: receive(self.to_host(copy).tobytes()))
        return ptr


@dataclass(frozen=True, slots=True)
class Binder:
    """``values(arg, stream)`` (or ``(arg, state)`` when ``stateful``) -> flat values.

    ``buffers(arg, stream)`` gives the memory ranges an argument brings: a tensor's, or
    those of the tensors a by-value struct or tuple carries (for loaders that
    bounds-check); None for arguments that can bring none; ``both(arg, stream)``, where there is
    one, gives the values and the buffers from one read of the argument.  ``inline``
    is an optional hint for the plan compiler (:mod:`ptxbridge.launch.module`) to
    expand the common accepting case in place, falling back to ``values``:
    ``("torch" | "cupy", "pointer" | "slice", dtype, device_index)``,
    ``("int", lo, hi)`` or ``("float", limit)``.  ``native``: for tensors, structs and tuples the
    C plan can read, what it reads and checks (:mod:`.native_args`); for a bool, f16 or bf16 scalar its
    DType (packed as a struct member of it is).
    """

    values: Callable[[Any, Any], tuple]
    stateful: bool = False
    buffers: Callable[[Any, int], tuple[Buffer, ...]] | None = None
    both: Callable[[Any, int], tuple[tuple, tuple[Buffer, ...]]] | None = None  # values and buffers, one read
    inline: tuple | None = None
    native: NativeTensor | NativeRecord | NativeItems | NativePrefix | DType | None = None


class _Where:
    """Formats the messages for one argument; for tensor kinds, what its rule expects (read once)."""

    def __init__(self, ctx: BindContext, name: str, t: ParamType, rule: TensorRule | None = None):
        self.ctx, self.name, self.t, self.rule = ctx, name, t, rule
        if rule is not None:
            self.want, self.refuses_readonly = rule.dtype(t), rule.refuses_readonly(t)
            # what a null pointer is written as (docs/kinds.md, "Null pointers"); "" where there is none
            self.null = ("" if not rule.raw_address else "None / 0" if ctx.convention is Convention.C
                         else "None")

    def fail(self, problem: str) -> ArgumentError:
        return ArgumentError(f"{self.ctx.kernel}: argument '{self.name}' ({format_type(self.t)}) {problem}")


def _check_tensor(info: TensorInfo, where: _Where) -> None:
    """Device, dtype and mutability, with the house-format message."""
    ctx = where.ctx
    device_type, device_id = info.device_type, info.device_id
    if ctx.device_type == DLPACK_CUDA and device_type in (DLPACK_CUDA_HOST, DLPACK_CUDA_MANAGED):
        device_type, device_id = DLPACK_CUDA, ctx.device_id  # addressable from every GPU
    elif device_type == DLPACK_CUDA and device_id < 0 and ctx.pointer_device is not None:
        device_id = ctx.pointer_device(info.ptr)
    want = where.want
    device_ok = device_type == ctx.device_type and (device_id == ctx.device_id or device_id < 0)
    if device_ok and (want is None or info.dtype == want):
        if info.readonly and where.refuses_readonly:
            raise where.fail(f"is written by the kernel, but got a read-only {info.dtype_name} tensor")
        _check_aligned(info, where)
        return
    got = f"got {info.dtype_name} tensor on {device_name(device_type, max(device_id, 0))}"
    expected = f"expected {want.numpy_name or want.name if want else 'any dtype'} on {ctx.device}"
    dtype_ok = want is None or info.dtype == want
    if not device_ok and device_type == DLPACK_CUDA == ctx.device_type and dtype_ok:
        raise OtherDeviceError(where.fail(f"{got}; {expected}").args[0], device_id)
    raise where.fail(f"{got}; {expected}")


def _null_binder(where: _Where) -> Binder:
    """``None`` (and ``0`` under the C convention) for a pointer: a null pointer, no buffer."""

    def null(arg: Any, stream: Any) -> tuple:
        if arg is None or arg == 0:
            return (0,)
        raise where.fail(f"takes a tensor (DLPack, __cuda_array_interface__ or NumPy) or {where.null} for a "
                         f"null pointer; a raw address is not accepted (got int {arg})")
    return Binder(null)


def _check_aligned(info: TensorInfo, where: _Where) -> None:
    """Elements sit at multiples of their size (a complex number's: of its part's), as loads need
    (PTX ISA 6.4): a float64 view at a 4-byte offset faults inside the kernel, on the GPU and the
    CPU loader alike.  numba copies such an array to fresh device memory; ptxbridge passes the
    caller's, so it says so here."""
    if info.dtype is None or not info.ptr or not info.numel:
        return
    align = info.dtype.itemsize // (2 if info.dtype.code == KDL_COMPLEX else 1)
    if info.ptr % align:
        raise where.fail(f"got {info.dtype_name} data at {info.ptr:#x}, which is not a multiple of {align} "
                         "bytes; pass an aligned copy (numpy.array(x), x.copy())")


def _slice_prefix(arg: dict, bind: Callable[[Any], tuple]) -> tuple[int, int]:
    """``{"ptr": tensor, "len": n}`` for a slice (raw use: a prefix of the tensor): ``bind`` gives the
    tensor's (pointer, length); ``n`` must not pass it (else :class:`ValueProblem`)."""
    if arg.keys() != {"ptr", "len"}:
        raise ValueProblem(f"takes a tensor, or a dict with exactly the keys 'ptr' and 'len' "
                           f"(got keys {sorted(map(str, arg))})")
    ptr, extent = bind(arg["ptr"])
    length = arg["len"]
    if not isinstance(length, int) or isinstance(length, bool) or not 0 <= length <= extent:
        raise ValueProblem(f"'len' must be an int from 0 to the tensor's {extent} elements (got {length!r})")
    return ptr, length


def _slice_dict_binder(ctx: BindContext, where: _Where) -> Binder:
    """A slice given as ``{"ptr": tensor, "len": n}`` (:func:`_slice_prefix`)."""
    cache: dict[type, Binder] = {}

    def binder(arg_type: type) -> Binder:
        found = cache.get(arg_type)
        if found is None:
            found = cache[arg_type] = _tensor_binder(ctx, where, arg_type)
        return found

    def values(arg: Any, stream: Any) -> tuple:
        try:
            return _slice_prefix(arg, lambda tensor: binder(type(tensor)).values(tensor, stream))
        except ValueProblem as problem:
            raise where.fail(str(problem)) from None

    def buffers(arg: Any, stream: Any) -> tuple[Buffer, ...]:
        tensor = arg["ptr"]
        found = binder(type(tensor)).buffers
        return found(tensor, stream) if found else ()
    return Binder(values, buffers=buffers, native=NativePrefix(lambda arg_type: binder(arg_type).native))


def _tensor_binder(ctx: BindContext, where: _Where, arg_type: type) -> Binder:
    if isinstance(where.t, Slice) and issubclass(arg_type, dict):
        return _slice_dict_binder(ctx, where)
    if where.null and (arg_type is type(None) or (arg_type is int and ctx.convention is Convention.C)):
        return _null_binder(where)
    extract = extractor_for(arg_type)
    if extract is None:
        null = f" or {where.null} for a null pointer" if where.null else ""
        raise where.fail(f"takes a tensor (DLPack, __cuda_array_interface__ or NumPy){null} "
                         f"(got {arg_type.__name__})")
    t, layout = where.t, where.rule.values

    def read(arg: Any, stream: Any) -> TensorInfo:
        try:
            return extract(arg, stream)
        except ArgumentError as exc:  # the producer's facts do not add up: say which argument
            raise where.fail(f"cannot be read: {exc}") from None

    def accepted(info: TensorInfo) -> tuple:
        _check_tensor(info, where)
        try:
            return layout(info, t)
        except TensorProblem as problem:
            raise where.fail(str(problem)) from None

    def checked(arg: Any, stream: Any) -> tuple:
        return accepted(read(arg, stream))

    def buffers(arg: Any, stream: Any) -> tuple[Buffer, ...]:
        return (_buffer(extract(arg, stream), where.name),)

    def both(arg: Any, stream: Any) -> tuple[tuple, tuple[Buffer, ...]]:
        info = read(arg, stream)
        return accepted(info), (_buffer(info, where.name),)

    form = where.rule.contiguous(t)  # "pointer" / "slice": the plan may read the tensor inline
    native = native_tensor(t, where.rule, where.want, where.refuses_readonly, arg_type, ctx.device_type,
                           ctx.device_id)
    both = _numpy_both(ctx, where, form, arg_type, both) or both
    fast = form and (_torch_fast_path(ctx, where, form, arg_type, checked)
                     or _cupy_fast_path(ctx, where, form, arg_type, checked))
    if not fast:
        return Binder(checked, buffers=buffers, both=both, native=native)
    return Binder(fast[0], buffers=buffers, both=both, inline=fast[1], native=native)


def _buffer(info: TensorInfo, name: str) -> Buffer:
    """The memory range of a tensor, as the CPU loader registers it, labelled with the argument."""
    lowest, nbytes = info.span()
    itemsize = info.dtype.itemsize if info.dtype is not None else 1
    return Buffer(lowest, nbytes, not info.readonly, info.owner, name, itemsize, info.dtype_name)


def _nested_buffers(ctx: BindContext, where: _Where) -> Callable[[Any, int], tuple[Buffer, ...]] | None:
    """The memory of the tensors a by-value struct or tuple carries (a plain-rustc ``{ptr, len}`` slice
    is a struct holding a pointer), found through the kind table's labelled children; None when the
    type holds no tensor kind.  Raw integer addresses bring no range."""
    nested = [m.path for m in members(where.name, where.t, ctx.convention) if m.family == "tensor"]
    if not nested:
        return None

    def buffers(arg: Any, stream: Any) -> tuple[Buffer, ...]:
        found = []
        for path in nested:
            value = tensor_of(read(arg, path))
            extract = extractor_for(type(value))
            if extract is not None:
                found.append(_buffer(extract(value, stream), where.name))
        return tuple(found)
    return buffers


def _numpy_both(ctx: BindContext, where: _Where, form: str | None, arg_type: type,
                both: Callable[[Any, Any], tuple[tuple, tuple[Buffer, ...]]]
                ) -> Callable[[Any, Any], tuple[tuple, tuple[Buffer, ...]]] | None:
    """For NumPy arrays on the CPU loader (values and buffer, one read) on pointers, slices and numba
    arrays: a C-contiguous, aligned array of the parameter's dtype, writable where the kernel writes,
    is read through its attributes; anything else goes to ``both``, the full check, which accepts
    what this test is too strict for or raises the house-format error."""
    t, want = where.t, where.want
    numba = isinstance(t, NumbaArray)
    if numba and t.layout == "F" and t.ndim > 1:  # C-contiguous is not what it was compiled for
        return None
    if (arg_type is not numpy.ndarray or ctx.device_type != DLPACK_CPU or host_data is None or want is None
            or want.numpy_name is None or want.code == KDL_COMPLEX or not (form or numba)):
        return None
    dtype = numpy.dtype(want.numpy_name)
    itemsize, name, writes, dtype_name = dtype.itemsize, where.name, where.refuses_readonly, dtype.name
    ndim = t.ndim if numba else 0
    pointer = form == "pointer"

    def fast(arg: Any, stream: Any) -> tuple[tuple, tuple[Buffer, ...]]:
        if arg.dtype is not dtype or not arg.flags.c_contiguous:
            return both(arg, stream)
        ptr, readonly = host_data(arg)
        strides = arg.strides  # a unit axis may have any: the full check refuses one not in elements
        if ptr % itemsize or (readonly and writes) or any(stride % itemsize for stride in strides):
            return both(arg, stream)
        if pointer:
            values: tuple = (ptr,)
        elif not numba:
            values = (ptr, arg.size)
        elif arg.ndim != ndim:
            return both(arg, stream)
        else:
            values = (0, 0, arg.size, itemsize, ptr, *arg.shape, *(stride & _U64 for stride in strides))
        return values, (Buffer(ptr, arg.nbytes, not readonly, arg, name, itemsize, dtype_name),)
    return fast


def _torch_fast_path(ctx: BindContext, where: _Where, form: str, arg_type: type,
                     checked: Callable[[Any, Any], tuple]) -> tuple[Callable, tuple] | None:
    """For torch tensors on pointers and slices: three attribute reads, else the full check.

    The full check (``checked``) either raises the proper error or accepts
    what the quick test is too strict for (e.g. odd strides of unit axes).
    """
    if arg_type.__module__.split(".")[0] != "torch":
        return None
    import torch

    want = where.want
    torch_dtype = next((k for k, v in torch_dtype_map(torch).items() if v == want), None)
    if want is None or torch_dtype is None or want.code == KDL_COMPLEX:  # complex: conj views
        return None
    device = ctx.device_id if ctx.device_type == DLPACK_CUDA else -1  # get_device() is -1 for meta too

    if form == "pointer":
        def pointer(arg: Any, stream: Any) -> tuple:
            if (arg.dtype is torch_dtype and arg.get_device() == device and (device >= 0 or arg.is_cpu)
                    and arg.is_contiguous()):
                return (arg.data_ptr(),)
            return checked(arg, stream)
        return pointer, ("torch", "pointer", torch_dtype, device)

    def slice_(arg: Any, stream: Any) -> tuple:
        if (arg.dtype is torch_dtype and arg.get_device() == device and (device >= 0 or arg.is_cpu)
                and arg.is_contiguous()):
            return (arg.data_ptr(), arg.numel())
        return checked(arg, stream)
    return slice_, ("torch", "slice", torch_dtype, device)


def _cupy_fast_path(ctx: BindContext, where: _Where, form: str, arg_type: type,
                    checked: Callable[[Any, Any], tuple]) -> tuple[Callable, tuple] | None:
    """For CuPy arrays on pointers and slices: the plan compiler inlines dtype, device and
    contiguity reads (``Binder.inline``); the binder itself stays the full check."""
    if arg_type.__module__.split(".")[0] != "cupy" or ctx.device_type != DLPACK_CUDA:
        return None
    want = where.want
    if want is None or want.numpy_name is None:
        return None
    return checked, ("cupy", form, numpy.dtype(want.numpy_name), ctx.device_id)


def _scalar_binder(ctx: BindContext, where: _Where, arg_type: type) -> Binder:
    dt = where.t.dtype
    flat = lower_param(where.name, where.t, ctx.convention)
    convert = scalar_converter(dt, flat, wrap=ctx.convention is Convention.NUMBA)  # numba wraps ints

    def scalar(arg: Any, stream: Any) -> tuple:
        try:
            return convert(arg)
        except ValueProblem as problem:
            raise where.fail(str(problem)) from None

    plain = len(flat) == 1 and not flat[0].aggregate and flat[0].ptx_type[0] in "suf"
    inline = None
    if plain and dt.is_integer and arg_type is int:
        inline = ("int", *((-(1 << (dt.bits - 1)), (1 << (dt.bits - 1)) - 1) if dt.is_signed
                           else (0, (1 << dt.bits) - 1)))
    elif plain and dt.name in ("f32", "f64") and arg_type is float:
        inline = ("float", F32_MAX if dt.name == "f32" else float("inf"))
    # bool, f16 and bf16 in one value (plain or a 2-byte blob): packed in C as inside structs
    native = dt if len(flat) == 1 and dt.name in ("bool", "f16", "bf16") else None
    return Binder(scalar, inline=inline, native=native)


def _pointer_resolver(ctx: BindContext, where: _Where) -> Callable[[Any, ParamType], tuple[int, ...]]:
    """Tensors inside by-value aggregates: address (and length) after the usual checks."""

    def resolve(value: Any, t: ParamType) -> tuple[int, ...]:
        rule = KINDS.entry_of(t).tensor
        if rule.raw_address and value is None:
            return (0,)  # a null pointer
        if rule.raw_address and isinstance(value, int) and not isinstance(value, bool):
            if not 0 <= value < 1 << 64:
                raise ValueProblem(f"a raw address must fit u64 (got {value})")
            return (value,)  # a raw address inside a struct is the caller's business
        if isinstance(t, Slice) and isinstance(value, dict):
            return _slice_prefix(value, lambda tensor: resolve(tensor, t))
        extract = extractor_for(type(value))
        if extract is None:
            raise ValueProblem(f"a {format_type(t)} field takes a tensor (got {type(value).__name__})")
        info = extract(value, None)
        _check_tensor(info, _Where(ctx, where.name, t, rule))
        return rule.values(info, t)

    return resolve


def _numpy_record(arg: Any, size: int) -> Any:
    """A writable NumPy view of a structured scalar (``arr[0]``) of ``size`` bytes, or None: numba
    copies such a record back after the kernel (``InOut``), so the caller sees the kernel's writes."""
    fields = getattr(getattr(arg, "dtype", None), "fields", None)
    if not fields or type(arg).__module__ != "numpy" or arg.dtype.itemsize != size:
        return None
    view = numpy.asanyarray(arg)
    return view if view.flags.writeable else None


def _write_record(view: Any, data: bytes) -> None:
    view[...] = numpy.frombuffer(data, view.dtype)[0]


def _aggregate_binder(ctx: BindContext, where: _Where, by_pointer: bool) -> Binder:
    resolve = _pointer_resolver(ctx, where)
    encode = encoder(where.t)

    def image(arg: Any) -> bytes:
        try:
            return encode(arg, resolve)
        except (ValueProblem, TensorProblem) as problem:
            raise where.fail(str(problem)) from None

    if by_pointer:  # numba passes records by device pointer to a copy, which the kernel may write
        def to_copy(arg: Any, state: LaunchState) -> tuple:
            data = image(arg)
            target = _numpy_record(arg, len(data))
            if target is None:
                return (state.scratch(data, writable=True),)
            return (state.scratch_back(data, lambda result: _write_record(target, result)),)

        return Binder(to_copy, stateful=True)
    if not lower_param(where.name, where.t, ctx.convention):  # zero-sized: checked, passes nothing
        def nothing(arg: Any, stream: Any) -> tuple:
            image(arg)
            return ()
        return Binder(nothing)
    native = native_record(where.name, where.t, ctx.convention, ctx.device_type, ctx.device_id)
    return Binder(lambda arg, stream: (image(arg),), buffers=_nested_buffers(ctx, where), native=native)


def _tile_list_binder(ctx: BindContext, where: _Where) -> Binder:
    """A cuTile list: a device buffer of int64 words, per element ``[data, shape..., stride...]``."""
    element = where.t.element
    rule = KINDS.entry_of(element).tensor
    inner = _Where(ctx, f"{where.name}[]", element)

    def values(arg: Any, state: LaunchState) -> tuple:
        if not isinstance(arg, (list, tuple)):
            raise where.fail(f"takes a list or tuple of tensors (got {type(arg).__name__})")
        words: list[int] = []
        for index, item in enumerate(arg):
            extract = extractor_for(type(item))
            if extract is None:
                raise where.fail(f"item {index} is not a tensor (got {type(item).__name__})")
            info = extract(item, state.stream)
            _check_tensor(info, _Where(ctx, f"{where.name}[{index}]", element, rule))
            try:
                rule.values(info, element)  # promises and index ranges
            except TensorProblem as problem:
                raise inner.fail(f"item {index}: {problem}") from None
            # the words are int64 whatever the index width: shapes and strides keep their sign
            words += (info.ptr, *info.shape, *info.strides)
        data = b"".join(w.to_bytes(8, "little", signed=w < 0) for w in words)
        return (state.scratch(data or bytes(8)), len(arg))

    return Binder(values, stateful=True)


def _needs_state(t: ParamType, convention: Convention) -> bool:
    """Whether arguments of ``t`` bind through scratch memory (records by pointer, cuTile lists), also
    as items of a numba / cuTile tuple: a property of the parameter type, not of the argument."""
    family = KINDS.entry_of(t).binding(t, convention)
    if family == "items":
        return any(_needs_state(item, convention) for item in KINDS.children(t))
    return family in _STATEFUL


def _items_binder(ctx: BindContext, where: _Where) -> Binder:
    """numba / cuTile tuples: each item binds as its own parameter; item binders cached by type.  The
    tuple takes the launch state only when an item needs scratch memory (:func:`_needs_state`)."""
    items = KINDS.children(where.t)
    cache: dict[tuple[int, type], Binder] = {}
    stateful = _needs_state(where.t, ctx.convention)

    def item_binder(index: int, item_type: type) -> Binder:
        binder = cache.get((index, item_type))
        if binder is None:
            binder = cache[(index, item_type)] = make_binder(
                ctx, Param(f"{where.name}.{index}", items[index]), item_type)
        return binder

    def checked_items(arg: Any) -> Any:
        if not isinstance(arg, (tuple, list)) or len(arg) != len(items):
            raise where.fail(f"takes a tuple of {len(items)} items (got {arg!r})")
        return enumerate(arg)

    def values(arg: Any, state: Any) -> tuple:
        stream = state.stream if stateful else state
        flat: tuple = ()
        for index, item in checked_items(arg):
            binder = item_binder(index, type(item))
            flat += binder.values(item, state if binder.stateful else stream)
            if stateful and binder.buffers is not None:
                state.buffers += binder.buffers(item, stream)
        return flat

    def buffers(arg: Any, stream: Any) -> tuple[Buffer, ...]:
        found: tuple[Buffer, ...] = ()
        for index, item in checked_items(arg):
            binder = item_binder(index, type(item))
            found += binder.buffers(item, stream) if binder.buffers is not None else ()
        return found

    if stateful:
        return Binder(values, stateful=True)
    return Binder(values, buffers=buffers, native=NativeItems(len(items), item_binder))


def _partition_binder(ctx: BindContext, where: _Where) -> Binder:
    """cutile-rs partitions: ``(tensor, partition_dims, partition_strides)``, all s32."""
    rank, t = where.t.rank, where.t
    # the tensor keeps the promises about itself; static_shape is the tile's, own_strides the partition's
    whole = dataclasses.replace(t, partition=False, static_shape=(), own_strides=False)
    cache: dict[type, Binder] = {}

    def is_ints(part: Any) -> bool:
        return (isinstance(part, (tuple, list)) and len(part) == rank
                and all(isinstance(v, int) and not isinstance(v, bool) for v in part))

    def tensor_binder(tensor: Any) -> Binder:
        binder = cache.get(type(tensor))
        if binder is None:
            binder = cache[type(tensor)] = make_binder(ctx, Param(where.name, whole), type(tensor))
        return binder

    def values(arg: Any, stream: Any) -> tuple:
        if not (isinstance(arg, tuple) and len(arg) == 3 and is_ints(arg[1]) and is_ints(arg[2])):
            raise where.fail(f"takes (tensor, partition_dims, partition_strides) with {rank} ints each "
                             f"(got {arg!r})")
        tensor, dims, strides = arg
        binder = tensor_binder(tensor)
        extra = (*dims, *strides)
        if any(not -(1 << 31) <= v < (1 << 31) for v in extra):
            raise where.fail(f"partition dims/strides must fit i32 (got {extra})")
        flat = binder.values(tensor, stream)
        for axis, dim in enumerate(dims):
            if (static := t.axis_promise("static_shape", axis, None)) is not None and dim != static:
                raise where.fail(f"partition dim {axis} must be {static} (got {dim})")
        own = flat[1 + rank:1 + 2 * rank]
        if t.own_strides and tuple(strides) != tuple(own):
            raise where.fail(f"partition strides must be the tensor's own strides {own} "
                             f"(got {tuple(strides)})")
        return flat + extra

    def buffers(arg: Any, stream: Any) -> tuple[Buffer, ...]:
        """The partitioned tensor's memory (the CPU loader bounds-checks the kernel against it);
        called after ``values`` accepted ``arg``."""
        return tensor_binder(arg[0]).buffers(arg[0], stream)  # type: ignore[misc]

    return Binder(values, buffers=buffers)


_STATEFUL = ("by-pointer", "tile-list")  # families whose binders take the launch state, not the stream

# binding family (a kind entry's ``binding``) -> how its binder is built from (ctx, where, argument type)
_FAMILIES: dict[str, Callable[[BindContext, _Where, type], Binder]] = {
    "scalar": _scalar_binder,
    "tensor": _tensor_binder,
    "partition": lambda ctx, where, arg_type: _partition_binder(ctx, where),
    "tile-list": lambda ctx, where, arg_type: _tile_list_binder(ctx, where),
    "items": lambda ctx, where, arg_type: _items_binder(ctx, where),
    "by-value": lambda ctx, where, arg_type: _aggregate_binder(ctx, where, by_pointer=False),
    "by-pointer": lambda ctx, where, arg_type: _aggregate_binder(ctx, where, by_pointer=True),
}


def make_binder(ctx: BindContext, param: Param, arg_type: type) -> Binder:
    """The binder for arguments of ``arg_type`` passed to ``param`` (built once per pair)."""
    t = param.type
    if (ctx.convention is Convention.NUMBA and issubclass(arg_type, enum.Enum)
            and not issubclass(arg_type, numbers.Number) and len(arg_type)):
        # numba passes a plain Enum member as its value (``_Kernel._prepare_args``): a number, a tuple...
        inner = make_binder(ctx, param, type(next(iter(arg_type)).value))
        return Binder(lambda member, state: inner.values(member.value, state), inner.stateful)
    try:
        entry = KINDS.entry_of(t)
    except TypeError:
        entry = None
    build = entry and _FAMILIES.get(entry.binding(t, ctx.convention))
    if entry is None or build is None:
        raise ArgumentError(f"{ctx.kernel}: argument '{param.name}' has a parameter kind the call path "
                            f"does not know ({type(t).__name__})")
    return build(ctx, _Where(ctx, param.name, t, entry.tensor), arg_type)
