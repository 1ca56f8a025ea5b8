"""How a tensor fills a tensor-like parameter: layout checks, then the flat values in lowering order.

Device and dtype are checked by the call path's binder; these rules check
what the kind promises about shape and strides (contiguity for raw pointers
and slices, the C/F layout numba compiled in, cuTile's divisibility, static
shape/stride and alignment promises, and that every value fits the PTX
parameter it lands in).  They read a tensor only through :class:`TensorFacts`,
so they are pure and each kind's entry in :mod:`.kind_entries` names its rule.
"""

from __future__ import annotations

from typing import Protocol

from .kinds import DisjointSlice, NumbaArray, NumbaRecordArray, Pointer, Slice, TileArray, TileTensor

__all__ = ["TILE_INDEX_RANGE", "TensorFacts", "TensorProblem", "disjoint_slice", "numba_array",
           "numba_record_array", "pointer", "slice_", "tile_array", "tile_tensor"]

_U64 = (1 << 64) - 1
# the values a cuTile array's shape and strides may take at each index width (TileArray.index)
TILE_INDEX_RANGE = {"i32": (-(1 << 31), (1 << 31) - 1), "u32": (0, (1 << 32) - 1),
                "i64": (-(1 << 63), (1 << 63) - 1)}
_S32 = TILE_INDEX_RANGE["i32"]


class TensorFacts(Protocol):
    """What a rule reads of a tensor: ``ptr`` includes any byte offset; strides are in elements."""

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    itemsize: int  # bytes per element as the producer says (a NumPy record's size)

    @property
    def numel(self) -> int: ...

    def c_contiguous(self) -> bool: ...

    def f_contiguous(self) -> bool: ...


class TensorProblem(Exception):
    """Why a tensor does not fit the parameter (the binder adds kernel and argument)."""


def _shape_text(info: TensorFacts) -> str:
    return f"shape {info.shape}, strides {info.strides} elements"


def _contiguous(info: TensorFacts, what: str) -> None:
    if not info.c_contiguous():
        raise TensorProblem(f"takes a contiguous tensor for {what} (got {_shape_text(info)})")


def _fits(values: tuple[int, ...], bounds: tuple[int, int], what: str, width: str) -> None:
    lo, hi = bounds
    for axis, value in enumerate(values):
        if not lo <= value <= hi:
            raise TensorProblem(f"{what}[{axis}] = {value} does not fit the {width} index ({lo}..{hi})")


def _ndim(info: TensorFacts, ndim: int) -> None:
    if len(info.shape) != ndim:
        raise TensorProblem(f"takes a {ndim}-d tensor (got {len(info.shape)}-d, shape {info.shape})")


def pointer(info: TensorFacts, t: Pointer) -> tuple[int, ...]:
    _contiguous(info, "a raw pointer")
    return (info.ptr,)


def _elements(units: int, t: Slice | DisjointSlice, per: int) -> int:
    """The slice length for ``units`` values of ``t.dtype``: whole elements of ``per`` units each."""
    if per == 1:
        return units
    if per == 0 or units % per:
        raise TensorProblem(f"holds {units} {t.dtype.name} values, not a whole number of elements of "
                            f"{per} {t.dtype.name} each")
    return units // per


def _aligned(info: TensorFacts, align: int) -> None:
    if info.ptr % align:
        raise TensorProblem(f"data at {info.ptr:#x} is not aligned to {align} bytes, as its element needs")


def slice_(info: TensorFacts, t: Slice, per: int = 1, align: int = 1) -> tuple[int, ...]:
    """A slice of ``per`` units per element (``abi/elements.py``) aligned to ``align``."""
    _contiguous(info, "a slice")
    _aligned(info, align)
    return (info.ptr, _elements(info.numel, t, per))


def disjoint_slice(info: TensorFacts, t: DisjointSlice, per: int = 1, align: int = 1) -> tuple[int, ...]:
    _contiguous(info, "a DisjointSlice")
    _aligned(info, align)
    if not t.rows_2d:
        return (info.ptr, _elements(info.numel, t, per))
    _ndim(info, 2)
    width = _elements(info.shape[1], t, per)
    if width > 0xFFFFFFFF:
        raise TensorProblem(f"row width {width} does not fit u32")
    return (info.ptr, _elements(info.numel, t, per), width)


def numba_array(info: TensorFacts, t: NumbaArray) -> tuple[int, ...]:
    return _numba_values(info, t.ndim, t.layout, t.dtype.itemsize)


def numba_record_array(info: TensorFacts, t: NumbaRecordArray, record_size: int) -> tuple[int, ...]:
    """A numba array of records: any element type of the record's size (NumPy structured arrays)."""
    if info.itemsize != record_size:
        raise TensorProblem(f"takes an array of {record_size}-byte records (got {info.itemsize}-byte "
                            "elements; build the NumPy dtype with align=True and the record's fields)")
    return _numba_values(info, t.ndim, t.layout, record_size)


def _numba_values(info: TensorFacts, ndim: int, layout: str, itemsize: int) -> tuple[int, ...]:
    """meminfo, parent, nitems, itemsize, data, shape, strides in bytes (numba's array arguments)."""
    _ndim(info, ndim)
    if layout == "C" and not info.c_contiguous():
        raise TensorProblem(f"was compiled for C-contiguous arrays (got {_shape_text(info)})")
    if layout == "F" and not info.f_contiguous():
        raise TensorProblem(f"was compiled for Fortran-contiguous arrays (got {_shape_text(info)})")
    byte_strides = tuple((s * itemsize) & _U64 for s in info.strides)
    return (0, 0, info.numel, itemsize, info.ptr, *info.shape, *byte_strides)


def tile_array(info: TensorFacts, t: TileArray) -> tuple[int, ...]:
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
    bounds = TILE_INDEX_RANGE[t.index]
    _fits(info.shape, bounds, "shape", t.index)
    _fits(info.strides, bounds, "stride", t.index)
    mask = _U64 if t.index == "i64" else 0xFFFFFFFF
    return (info.ptr, *(v & mask for v in info.shape), *(v & mask for v in info.strides))


def tile_tensor(info: TensorFacts, t: TileTensor) -> tuple[int, ...]:
    """A cutile-rs tensor: rank, the i32 range, and the specialisation it was compiled under."""
    _ndim(info, t.rank)
    if t.partition:
        raise TensorProblem("is a partition: pass (tensor, partition_dims, partition_strides)")
    if t.base_align > 1 and info.ptr % t.base_align:
        raise TensorProblem(f"data must be aligned to {t.base_align} bytes (got address {info.ptr:#x})")
    for axis, (dim, stride) in enumerate(zip(info.shape, info.strides, strict=False)):
        for what, value, divisor, static in (
                ("dim", dim, t.axis_promise("shape_divisible_by", axis, 1),
                 t.axis_promise("static_shape", axis, None)),
                ("stride", stride, t.axis_promise("stride_divisible_by", axis, 1),
                 t.axis_promise("static_stride", axis, None))):
            if static is not None and value != static:
                raise TensorProblem(f"{what} {axis} must be {static} (got {value}; {_shape_text(info)})")
            if divisor and divisor > 1 and value % divisor:
                raise TensorProblem(f"{what} {axis} must be divisible by {divisor} (got {value}; "
                                    f"{_shape_text(info)})")
    _fits(info.shape, _S32, "dim", "i32")
    _fits(info.strides, _S32, "stride", "i32")
    return (info.ptr, *info.shape, *info.strides)
