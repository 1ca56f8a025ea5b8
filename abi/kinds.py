"""Parameter kinds: what a kernel parameter is, in the terms its author wrote.

Each kind is a frozen dataclass.  Everything else about a kind (its text form,
its PTX parameters per calling convention, its access trait, how the call path
binds an argument to it) is its entry in the kind table, :mod:`.kind_entries`;
``docs/kinds.md`` says how to add a kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .dtypes import DType

__all__ = [
    "INDEX_WIDTHS",
    "MAX_NDIM",
    "NOALIAS",
    "Constant",
    "DisjointSlice",
    "NumbaArray",
    "NumbaRecordArray",
    "Opaque",
    "ParamType",
    "Pointer",
    "Scalar",
    "Slice",
    "Struct",
    "StructField",
    "TileArray",
    "TileList",
    "TileTensor",
    "Tuple",
]

INDEX_WIDTHS = ("i32", "u32", "i64")
NOALIAS = ("", "borrow", "restrict")  # Pointer.noalias: none, a Rust reference, C++ __restrict__
MAX_NDIM = 64  # numpy's NPY_MAXDIMS; also bounds the flat parameters an array lowers to


def _check_ndim(owner: str, ndim: int) -> None:
    if not 0 <= ndim <= MAX_NDIM:
        raise ValueError(f"{owner} must be 0 to {MAX_NDIM} (got {ndim})")


@dataclass(frozen=True, slots=True)
class Scalar:
    """A number passed by value (``f32``, ``i64``, ``bool``...)."""

    dtype: DType


@dataclass(frozen=True, slots=True)
class Pointer:
    """A device pointer (``*const T``, ``*mut T``, ``T*``); ``pointee`` None is ``void*``.

    ``noalias`` records a no-alias promise: ``"borrow"`` for a Rust reference (``&T``,
    ``&mut T``), ``"restrict"`` for a C++ ``__restrict__`` pointer, ``""`` for a raw pointer
    (none).  With ``mutable`` it is exclusive (``&mut``) or shared-read (``&``) (docs/safety.md).
    """

    pointee: ParamType | None
    mutable: bool = True
    noalias: Literal["", "borrow", "restrict"] = ""

    def __post_init__(self) -> None:
        if self.noalias not in NOALIAS:
            raise ValueError(f"Pointer.noalias must be one of {NOALIAS} (got {self.noalias!r})")


def _scalar_element(owner: Slice | DisjointSlice) -> None:
    """An element that is a number is the plain form: ``element`` None, its dtype in ``dtype``."""
    if isinstance(owner.element, Scalar):
        object.__setattr__(owner, "dtype", owner.element.dtype)
        object.__setattr__(owner, "element", None)


@dataclass(frozen=True, slots=True)
class Slice:
    """A Rust slice ``&[T]`` / ``&mut [T]``: a pointer, then a u64 length in elements.

    ``element`` is set when ``T`` is not a number (a struct, tuple, array...); ``dtype``
    is then the unit a tensor for it holds (:func:`ptxbridge.abi.elements.unit_dtype`).
    """

    dtype: DType
    mutable: bool = False
    element: ParamType | None = None

    def __post_init__(self) -> None:
        _scalar_element(self)


@dataclass(frozen=True, slots=True)
class DisjointSlice:
    """cuda-oxide ``DisjointSlice<T>``: pointer, u64 length; ``rows_2d`` adds a u32 row width.

    ``element`` as in :class:`Slice`.
    """

    dtype: DType
    rows_2d: bool = False
    element: ParamType | None = None

    def __post_init__(self) -> None:
        _scalar_element(self)


@dataclass(frozen=True, slots=True)
class NumbaArray:
    """A numba-cuda array: meminfo, parent, nitems, itemsize, data, shape[n], strides[n] (bytes)."""

    dtype: DType
    ndim: int
    layout: Literal["C", "F", "A"] = "A"

    def __post_init__(self) -> None:
        _check_ndim("NumbaArray.ndim", self.ndim)
        if self.layout not in ("C", "F", "A"):
            raise ValueError(f"NumbaArray.layout must be 'C', 'F' or 'A' (got {self.layout!r})")


@dataclass(frozen=True, slots=True)
class TileArray:
    """A cuTile array: pointer, ndim shapes, ndim strides (elements), with its promises.

    The promises are compiled into the kernel and not checked by it, so the
    caller checks them: per axis ``shape_divisible_by`` / ``stride_divisible_by``
    (1 = no promise), ``static_shape`` / ``static_stride`` (None = dynamic),
    ``stride_lower_bound``, ``base_align`` in bytes, and the alias facts.
    """

    dtype: DType
    ndim: int
    index: Literal["i32", "u32", "i64"] = "i32"
    shape_divisible_by: tuple[int, ...] = ()
    stride_divisible_by: tuple[int, ...] = ()
    static_shape: tuple[int | None, ...] = ()
    static_stride: tuple[int | None, ...] = ()
    stride_lower_bound: tuple[int | None, ...] = ()
    base_align: int = 1
    alias_groups: int = 0  # bit k: member of alias group k; 0: aliases no other parameter (cuTile)
    may_alias_internally: bool = False

    def __post_init__(self) -> None:
        _check_ndim("TileArray.ndim", self.ndim)
        if self.index not in INDEX_WIDTHS:
            raise ValueError(f"TileArray.index must be one of {INDEX_WIDTHS} (got {self.index!r})")
        for name in ("shape_divisible_by", "stride_divisible_by", "static_shape",
                     "static_stride", "stride_lower_bound"):
            value = getattr(self, name)
            if value and len(value) != self.ndim:
                raise ValueError(
                    f"TileArray.{name} needs one entry per axis ({self.ndim}) (got {len(value)})")

    def axis_promise(self, name: str, axis: int, default: int | None) -> int | None:
        """The promise ``name`` on ``axis``, or ``default`` when none was made."""
        value = getattr(self, name)
        return value[axis] if value else default


@dataclass(frozen=True, slots=True)
class TileList:
    """A cuTile list of arrays: u64 pointer to int64 words per element, then a u32 count.

    ``alias_groups`` (bit mask, as in :class:`TileArray`) and ``elements_may_alias``
    are the promises about the list's own storage and its elements.
    """

    element: TileArray
    alias_groups: int = 0
    elements_may_alias: bool = False


@dataclass(frozen=True, slots=True)
class TileTensor:
    """A cutile-rs ``&Tensor<T, S>`` (``partition=False``) or ``&mut Tensor`` / partition.

    Lowers to pointer, rank i32 dims, rank i32 strides; a partition adds rank
    i32 partition dims and rank i32 partition strides.

    The specialisation the kernel was compiled under, unchecked by the kernel
    (cutile-rs ``kernel_entry_generator.rs``): per axis ``static_shape`` (the
    tensor's dims; a partition's tile dims) and ``static_stride`` (None =
    dynamic), ``shape_divisible_by`` / ``stride_divisible_by`` (in elements, 1 =
    none), ``base_align`` in bytes, and for partitions ``own_strides``: the
    partition strides are the tensor's own (as cutile-rs's ``partition`` makes them).
    """

    dtype: DType
    rank: int
    partition: bool = False
    static_shape: tuple[int | None, ...] = ()
    static_stride: tuple[int | None, ...] = ()
    shape_divisible_by: tuple[int, ...] = ()
    stride_divisible_by: tuple[int, ...] = ()
    base_align: int = 1
    own_strides: bool = False

    def __post_init__(self) -> None:
        _check_ndim("TileTensor.rank", self.rank)
        for name in ("static_shape", "static_stride", "shape_divisible_by", "stride_divisible_by"):
            value = getattr(self, name)
            if value and len(value) != self.rank:
                raise ValueError(f"TileTensor.{name} needs one entry per axis ({self.rank}) "
                                 f"(got {len(value)})")
        if self.own_strides and not self.partition:
            raise ValueError("TileTensor.own_strides is a promise about partition strides (got a Tensor)")

    def axis_promise(self, name: str, axis: int, default: int | None) -> int | None:
        """The promise ``name`` on ``axis``, or ``default`` when none was made."""
        value = getattr(self, name)
        return value[axis] if value else default


@dataclass(frozen=True, slots=True)
class StructField:
    name: str
    type: ParamType


@dataclass(frozen=True, slots=True)
class Struct:
    """A ``#[repr(C)]`` struct (C ``struct``) passed by value; fields may nest."""

    name: str
    fields: tuple[StructField, ...] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class NumbaRecordArray:
    """A numba-cuda array of records (a NumPy structured dtype): lowered like :class:`NumbaArray`.

    ``record`` is the element's layout; a tensor of elements of its size fills it.
    """

    record: Struct
    ndim: int
    layout: Literal["C", "F", "A"] = "A"

    def __post_init__(self) -> None:
        _check_ndim("NumbaRecordArray.ndim", self.ndim)
        if not isinstance(self.record, Struct):
            raise ValueError(f"NumbaRecordArray.record must be a struct (got {type(self.record).__name__})")
        if self.layout not in ("C", "F", "A"):
            raise ValueError(f"NumbaRecordArray.layout must be 'C', 'F' or 'A' (got {self.layout!r})")


@dataclass(frozen=True, slots=True)
class Opaque:
    """An aggregate ptxbridge knows only by size and alignment; size 0 is a ZST."""

    size: int
    align: int = 1

    def __post_init__(self) -> None:
        if self.size < 0 or self.align < 1 or self.align & (self.align - 1):
            raise ValueError(
                f"Opaque needs size >= 0 and a power-of-two align (got size={self.size}, align={self.align})")


@dataclass(frozen=True, slots=True)
class Tuple:
    """A tuple; numba and cuTile flatten it, Rust passes it as one aggregate."""

    items: tuple[ParamType, ...]


@dataclass(frozen=True, slots=True)
class Constant:
    """A cuTile compile-time constant: part of the signature, no PTX parameter."""

    value: bool | int | float


ParamType = (Scalar | Pointer | Slice | DisjointSlice | NumbaArray | NumbaRecordArray | TileArray
             | TileList | TileTensor | Struct | Opaque | Tuple | Constant)
