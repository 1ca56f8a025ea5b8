"""What the C launch plan reads of an argument, decided once per (parameter, argument type).

:mod:`.args` builds every binder (and owns every error message); for the arguments the C plan can take
it also attaches one of these descriptions, which :func:`ptxbridge.launch.fastpath.native_specs` turns
into the plan's spec tuples (bridge/launch/_tensors.c, _records.c).  A description promises only that
the C plan makes the same checks as the binder and packs the same bytes when it accepts; whatever it
does not accept it declines, and the binder runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ptxbridge.abi.devices import DLPACK_CUDA
from ptxbridge.abi.dtypes import KDL_COMPLEX, DType
from ptxbridge.abi.elements import units_per_element
from ptxbridge.abi.kind_entries import KINDS
from ptxbridge.abi.kinds import DisjointSlice, NumbaArray, ParamType, Slice, Struct, StructField, TileArray
from ptxbridge.abi.layout import PACK_CODES
from ptxbridge.abi.lowering import field_offsets, lower_param
from ptxbridge.abi.params import Convention
from ptxbridge.abi.tensor_rules import TILE_INDEX_RANGE
from ptxbridge.launch.dlpack import producer_of
from ptxbridge.launch.values import address_fields

__all__ = ["NativeAddress", "NativeItems", "NativePrefix", "NativeRecord", "NativeTensor", "native_record",
           "native_tensor"]

_RECORD_SCALARS = ("i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64", "f32", "f64", "bool", "f16", "bf16")


@dataclass(frozen=True, slots=True)
class NativeTensor:
    """A tensor argument as the C plan takes it: read through ``producer`` (``"dlpack"``: the DLPack C
    exchange API; ``"capsule"``: a ``__dlpack__`` capsule per launch; ``"cai"``:
    ``__cuda_array_interface__``; ``"cupy"``: a ``cupy.ndarray``'s attributes), checked as the binder
    checks it, packed as ``form`` (``"pointer"``, ``"slice"``, ``"rows"``: a DisjointSlice2d's 2-d
    tensor; ``"numba"``: numba's array struct of ``ndim`` axes and ``layout``; ``"tile"``: a cuTile array,
    ``tile`` its promises as bridge/launch/_tensors.c read_tile takes them).  A slice of non-numbers counts
    whole elements of ``per`` values each, its address aligned to ``element_align``."""

    producer: str
    form: str
    dtype: DType
    device_id: int  # -1: the CPU
    refuses_readonly: bool
    ndim: int = 0
    layout: str = "A"
    tile: tuple | None = None
    per: int = 1
    element_align: int = 1


@dataclass(frozen=True, slots=True)
class NativeAddress:
    """A raw pointer, slice or ``DisjointSlice`` member of a by-value struct or tuple: ``places`` its flat
    values' (offset inside the parameter's blob, struct code) as values.py lays them out; ``raw``: None and
    int addresses are taken (raw pointers only); a tensor there is read as :meth:`tensor` says."""

    places: tuple[tuple[int, str], ...]
    raw: bool
    t: ParamType
    rule: Any
    device_type: int
    device_id: int

    def tensor(self, arg_type: type) -> NativeTensor | None:
        """How the C plan reads a tensor of ``arg_type`` here (None: it declines such values)."""
        rule = self.rule
        return native_tensor(self.t, rule, rule.dtype(self.t), rule.refuses_readonly(self.t), arg_type,
                             self.device_type, self.device_id)


@dataclass(frozen=True, slots=True)
class NativeRecord:
    """A by-value struct (``keys``: its field names, read from a dict) or tuple (``keys`` None: a tuple
    or list of its items) the C plan packs itself: per member its byte offset inside the parameter and
    a scalar ``DType``, a :class:`NativeAddress`, or a nested :class:`NativeRecord` (offsets inside it
    relative to the member's)."""

    keys: tuple[str, ...] | None
    members: tuple[tuple[int, DType | NativeAddress | NativeRecord], ...]


@dataclass(frozen=True, slots=True)
class NativePrefix:
    """A slice given as ``{"ptr": tensor, "len": n}`` (args.py ``_slice_prefix``): the C plan reads the
    tensor as ``tensor(its type)`` says (a slice; it raises ArgumentError for a type no binder takes), then
    ``n``, from 0 to the tensor's element count, in place of that count."""

    tensor: Callable[[type], NativeTensor | None]


@dataclass(frozen=True, slots=True)
class NativeItems:
    """A numba / cuTile tuple whose items are parameters of their own: the C plan reads a tuple or list of
    ``count`` items, each as ``binder(index, item type).native`` says (the tuple binder's own binders)."""

    count: int
    binder: Callable[[int, type], Any]


def native_tensor(t: ParamType, rule: Any, want: DType | None, refuses_readonly: bool, arg_type: type,
                  device_type: int, device_id: int) -> NativeTensor | None:
    """How the C plan reads a tensor argument of ``arg_type`` for ``t``, or None where it does not.

    ================================= ======================================= ===========
    argument type                     read through                            contexts
    ================================= ======================================= ===========
    torch.Tensor                      ``__dlpack_c_exchange_api__`` (DLPack)  GPU and CPU
    other ``__dlpack__`` producers    a capsule per launch, released unused   GPU and CPU
    (JAX arrays)
    cupy.ndarray                      ``data.ptr``, ``dtype``, ``shape``...   GPU
    ``__cuda_array_interface__``      the interface dict; the device from     GPU
    producers (numba device arrays)   the pointer (cuPointerGetAttribute)
    ================================= ======================================= ===========

    Kinds: what the rule reads as a contiguous pointer or slice, slices and DisjointSlices of non-numbers,
    DisjointSlice2d, numba arrays (any layout) and cuTile arrays of a plain dtype; complex (conjugate
    views) and sub-byte dtypes take the Python path.
    """
    form = rule.contiguous(t) or ("numba" if isinstance(t, NumbaArray)
                                  else "tile" if isinstance(t, TileArray) else None)
    per, element_align = 1, 1
    if form is None and isinstance(t, (Slice, DisjointSlice)):  # tensor_rules.slice_ / disjoint_slice
        form = "rows" if isinstance(t, DisjointSlice) and t.rows_2d else "slice"
        if t.element is not None:
            per, element_align = units_per_element(t, KINDS.by_value), KINDS.by_value(t.element)[1]
    if form is None or want is None or want.code == KDL_COMPLEX or want.bits % 8 or per < 1:
        return None
    on_gpu = device_type == DLPACK_CUDA
    producer = producer_of(arg_type)
    if producer == "torch" and getattr(arg_type, "__dlpack_c_exchange_api__", None) is not None:
        producer = "dlpack"
    elif producer == "dlpack":
        producer = "capsule"
    elif not (on_gpu and want.numpy_name is not None and producer in ("cupy", "cai")):
        return None
    shaped = ((t.ndim, t.layout) if form == "numba" else (t.ndim, "A", _tile_promises(t)) if form == "tile"
              else (2,) if form == "rows" else ())
    return NativeTensor(producer, form, want, device_id if on_gpu else -1, refuses_readonly, *shaped,
                        per=per, element_align=element_align)


def _tile_promises(t: TileArray) -> tuple:
    """What tensor_rules.tile_array checks, as the C plan reads it (None: not promised)."""
    lo, hi = TILE_INDEX_RANGE[t.index]
    return (t.base_align, lo, hi, *(tuple(v) if v else None for v in (
        t.shape_divisible_by, t.stride_divisible_by, t.static_shape, t.static_stride, t.stride_lower_bound)))


def native_record(name: str, t: ParamType, convention: Convention, device_type: int,
                  device_id: int) -> NativeRecord | None:
    """How the C plan packs a by-value struct or tuple ``t``, or None: only one-blob parameters whose
    members are (nested structs and tuples of) plain integer / float scalars, raw pointers, and slices
    the C plan reads as ``{ptr, len}`` (values.py encodes the rest)."""
    flat = lower_param(name, t, convention)
    if len(flat) != 1 or not flat[0].aggregate:
        return None
    return _record(t, device_type, device_id)


def _record(t: ParamType, device_type: int, device_id: int) -> NativeRecord | None:
    form = KINDS.entry_of(t).member
    if form == "struct":
        members, keys = tuple(f.type for f in t.fields), tuple(f.name for f in t.fields)
    elif form == "tuple":
        members, keys = tuple(KINDS.children(t)), None
    else:
        return None
    offsets = field_offsets(t if keys is not None else
                            Struct("tuple", tuple(StructField(str(i), m) for i, m in enumerate(members))))
    found: list[tuple[int, DType | NativeAddress | NativeRecord]] = []
    for member, offset in zip(members, offsets, strict=True):
        entry = KINDS.entry_of(member)
        if entry.member == "scalar" and member.dtype.name in _RECORD_SCALARS:
            found.append((offset, member.dtype))
        elif entry.member == "address" and (entry.tensor.contiguous(member) is not None
                                            or isinstance(member, (Slice, DisjointSlice))):
            places = tuple((offset + at, PACK_CODES[ptx_type]) for at, ptx_type in address_fields(member))
            found.append((offset, NativeAddress(places, entry.tensor.raw_address, member, entry.tensor,
                                                device_type, device_id)))
        elif entry.member in ("struct", "tuple") and (nested := _record(member, device_type, device_id)):
            found.append((offset, nested))
        else:
            return None
    return NativeRecord(keys, tuple(found))
