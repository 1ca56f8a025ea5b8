"""Layout checks of one tensor against one tensor-like parameter kind, and its flat values.

Device and dtype are checked by the binder; this module checks what the
kind promises about shape and strides (contiguity for raw pointers and
slices, the C/F layout numba compiled in, cuTile's divisibility, static
shape/stride and alignment promises, and that every value fits the PTX
parameter it lands in) and returns the values in lowering order
(:mod:`ptxbridge.abi.lowering`).
"""

from __future__ import annotations

from ptxbridge.abi.elements import units_per_element
from ptxbridge.abi.kinds import (
    DisjointSlice,
    NumbaArray,
    ParamType,
    Pointer,
    Slice,
    TileArray,
    TileTensor,
)
from ptxbridge.abi.lowering import memory_layout
from ptxbridge.abi.syntax import format_type
from ptxbridge.launch.dlpack import TensorInfo

__all__ = ["TensorProblem", "check_layout"]

_U64 = (1 << 64) - 1
_INDEX_RANGE = {"i32": (-(1 << 31), (1 << 31) - 1), "u32": (0, (1 << 32) - 1),
                "i64": (-(1 << 63), (1 << 63) - 1)}
_S32 = _INDEX_RANGE["i32"]


class TensorProblem(Exception):
    """Why a tensor does not fit the parameter (the binder adds kernel and argument)."""


def _shape_text(info: TensorInfo) -> str:
    return f"shape {info.shape}, strides {info.strides} elements"


def _contiguous(info: TensorInfo, what: str) -> None:
    if not info.c_contiguous():
        raise TensorProblem(f"takes a contiguous tensor for {what} (got {_shape_text(info)})")


def _fits(values: tuple[int, ...], bounds: tuple[int, int], what: str, width: str) -> None:
    lo, hi = bounds
    for axis, value in enumerate(values):
        if not lo <= value <= hi:
            raise TensorProblem(f"{what}[{axis}] = {value} does not fit the {width} index ({lo}..{hi})")


def _ndim(info: TensorInfo, ndim: int) -> None:
    if len(info.shape) != ndim:
        raise TensorProblem(f"takes a {ndim}-d tensor (got {len(info.shape)}-d, shape {info.shape})")


def _numba(info: TensorInfo, t: NumbaArray) -> tuple[int, ...]:
    _ndim(info, t.ndim)
    if t.layout == "C" and not info.c_contiguous():
        raise TensorProblem(f"was compiled for C-contiguous arrays (got {_shape_text(info)})")
    if t.layout == "F" and not info.f_contiguous():
        raise TensorProblem(f"was compiled for Fortran-contiguous arrays (got {_shape_text(info)})")
    itemsize = t.dtype.itemsize
    byte_strides = tuple((s * itemsize) & _U64 for s in info.strides)
    return (0, 0, info.numel, itemsize, info.ptr, *info.shape, *byte_strides)


def _tile_array(info: TensorInfo, t: TileArray) -> tuple[int, ...]:
    _ndim(info, t.ndim)
    if t.base_align > 1 and info.ptr % t.base_align:
        raise TensorProblem(f"was compiled for data aligned to {t.base_align} bytes "
                            f"(got address {info.ptr:#x})")
    for axis, (extent, stride) in enumerate(zip(info.shape, info.strides, strict=False)):
        promises = (
            ("shape", extent, t.axis_promise("shape_divisible_by", axis, 1),
             t.axis_promise("static_shape", axis, None)),
            ("stride", stride, t.axis_promise("stride_divisible_by", axis, 1),
             t.axis_promise("static_stride", axis, None)),
        )
        for what, value, divisor, static in promises:
            if divisor and divisor > 1 and value % divisor:
                raise TensorProblem(f"was compiled for {what}[{axis}] divisible by {divisor} "
                                    f"(got {value}; {_shape_text(info)})")
            if static is not None and value != static:
                raise TensorProblem(f"was compiled for the static {what}[{axis}] = {static} "
                                    f"(got {value}; {_shape_text(info)})")
        bound = t.axis_promise("stride_lower_bound", axis, None)
        if bound is not None and stride < bound:
            raise TensorProblem(f"was compiled for stride[{axis}] >= {bound} (got {stride})")
    bounds = _INDEX_RANGE[t.index]
    _fits(info.shape, bounds, "shape", t.index)
    _fits(info.strides, bounds, "stride", t.index)
    mask = _U64 if t.index == "i64" else 0xFFFFFFFF
    return (info.ptr, *(v & mask for v in info.shape), *(v & mask for v in info.strides))


def _tile_tensor(info: TensorInfo, t: TileTensor) -> tuple[int, ...]:
    _ndim(info, t.rank)
    if t.partition:
        raise TensorProblem("is a partition: pass (tensor, partition_dims, partition_strides)")
    _fits(info.shape, _S32, "dim", "i32")
    _fits(info.strides, _S32, "stride", "i32")
    return (info.ptr, *info.shape, *info.strides)


def _elements(units: int, t: Slice | DisjointSlice) -> int:
    """The slice length for a tensor of ``units`` values of ``t.dtype`` (whole elements only)."""
    per = units_per_element(t)
    if t.element is None:
        return units
    if per == 0:
        raise TensorProblem(f"is a slice of a zero-sized element ({format_type(t.element)}): its length "
                            "cannot come from a tensor")
    if units % per:
        raise TensorProblem(f"holds {units} {t.dtype.name} values, not a whole number of elements of "
                            f"{per} (the element is {format_type(t.element)})")
    return units // per


def _aligned(info: TensorInfo, t: Slice | DisjointSlice) -> None:
    """A slice of structs needs its data aligned as its element (a byte tensor may not be)."""
    if t.element is not None:
        align = memory_layout(t.element)[1]
        if info.ptr % align:
            raise TensorProblem(f"data at {info.ptr:#x} is not aligned to {align} bytes, as its element "
                                f"{format_type(t.element)} needs")


def check_layout(info: TensorInfo, t: ParamType) -> tuple[int, ...]:
    """The flat values ``t`` lowers to for tensor ``info``, after the layout checks."""
    if isinstance(t, Pointer):
        _contiguous(info, "a raw pointer")
        return (info.ptr,)
    if isinstance(t, Slice):
        _contiguous(info, "a slice")
        _aligned(info, t)
        return (info.ptr, _elements(info.numel, t))
    if isinstance(t, DisjointSlice):
        _contiguous(info, "a DisjointSlice")
        _aligned(info, t)
        if not t.rows_2d:
            return (info.ptr, _elements(info.numel, t))
        _ndim(info, 2)
        width = _elements(info.shape[1], t)
        if width > 0xFFFFFFFF:
            raise TensorProblem(f"row width {width} does not fit u32")
        return (info.ptr, _elements(info.numel, t), width)
    if isinstance(t, NumbaArray):
        return _numba(info, t)
    if isinstance(t, TileArray):
        return _tile_array(info, t)
    if isinstance(t, TileTensor):
        return _tile_tensor(info, t)
    raise TensorProblem(f"{type(t).__name__} does not take a tensor")
