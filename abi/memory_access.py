"""The access trait: what a kernel may do to the memory a parameter points to, and what it promises.

Framework integrations need it to declare which arguments a kernel mutates
(``mutates_args``); aliasing checks need the promises a signature makes about
overlap.  Both are read from the parameter's kind alone, so they are the same
for every frontend that produced the kind:

=====================  ==========  =========================================================
kind                   memory      promise
=====================  ==========  =========================================================
Scalar, Constant       none        none (no memory)
Pointer                write/read  none: a raw pointer promises nothing (``mutable`` picks
                                   write or read)
Slice ``&mut [T]``     write       exclusive (Rust's ``&mut``)
Slice ``&[T]``         read        shared-read (Rust's ``&``: nobody writes it meanwhile)
DisjointSlice          write       exclusive
NumbaArray             write       none (numba arrays are writable and may overlap)
TileArray              write       groups (``alias_groups`` / ``may_alias_internally``)
TileList               write       groups (the list's and its element type's facts)
TileTensor             read        shared-read (``&Tensor``)
TileTensor partition   write       exclusive (``&mut Tensor``, split into partitions)
Struct, Tuple          combined    combined from the members (numba: a copy, so none)
Opaque                 none        none (bytes; ptxbridge cannot see addresses in them)
=====================  ==========  =========================================================

Hook: a Rust ``&T`` / ``&mut T`` to one value, and a C++ ``T* __restrict__``,
lower to :class:`~.kinds.Pointer` like a raw pointer, and the kind does not yet
record the borrow or the ``__restrict__``.  Until a field on ``Pointer`` records
it, :func:`access` reports no promise for them (safe: no promise means no
check relies on one); such a field is read in ``_pointer`` below.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import IntEnum, StrEnum

from .kinds import (
    Constant,
    DisjointSlice,
    NumbaArray,
    Opaque,
    ParamType,
    Pointer,
    Scalar,
    Slice,
    Struct,
    TileArray,
    TileList,
    TileTensor,
    Tuple,
)
from .params import Convention

__all__ = ["Access", "Memory", "Promise", "access"]


class Memory(IntEnum):
    """What the kernel may do to the memory the parameter points to (ordered: more is stronger)."""

    NONE = 0  # the parameter carries no memory of the caller's (scalars, by-value bytes)
    READ = 1
    WRITE = 2


class Promise(StrEnum):
    """What the signature promises about other parameters (or itself) overlapping that memory."""

    NONE = "none"  # no promise: it may overlap anything
    EXCLUSIVE = "exclusive"  # no other parameter touches it while the kernel runs (``&mut``)
    SHARED_READ = "shared-read"  # nobody writes it while the kernel runs (``&``)
    GROUPS = "groups"  # cuTile: overlaps only parameters sharing a bit of ``alias_groups``


@dataclass(frozen=True, slots=True)
class Access:
    """The access trait of one parameter.

    Attributes
    ----------
    memory : Memory
        ``NONE``, ``READ`` or ``WRITE``.
    promise : Promise
        The no-alias promise; ``NONE`` when there is none (always so for ``memory=NONE``).
    alias_groups : int
        For ``Promise.GROUPS``: bit k set = may overlap other parameters with bit k set;
        0 = overlaps no other parameter.
    may_alias_internally : bool
        For ``Promise.GROUPS``: the view may overlap itself (two indices, one address).
    """

    memory: Memory
    promise: Promise = Promise.NONE
    alias_groups: int = 0
    may_alias_internally: bool = False

    @property
    def writes(self) -> bool:
        """The kernel may write the memory: a framework must treat the argument as mutated."""
        return self.memory is Memory.WRITE


_NO_MEMORY = Access(Memory.NONE)


def _pointer(t: Pointer) -> Access:
    # The hook: a borrow or __restrict__ flag on Pointer would give EXCLUSIVE / SHARED_READ here.
    return Access(Memory.WRITE if t.mutable else Memory.READ)


def _slice(t: Slice) -> Access:
    if t.mutable:
        return Access(Memory.WRITE, Promise.EXCLUSIVE)
    return Access(Memory.READ, Promise.SHARED_READ)


def _tile_tensor(t: TileTensor) -> Access:
    if t.partition:
        return Access(Memory.WRITE, Promise.EXCLUSIVE)
    return Access(Memory.READ, Promise.SHARED_READ)


def _combine(members: Iterable[Access]) -> Access:
    """One access for an aggregate: the strongest memory, a promise only where all members agree."""
    carrying = [m for m in members if m.memory is not Memory.NONE]
    if not carrying:
        return _NO_MEMORY
    memory = max(m.memory for m in carrying)
    promises = {m.promise for m in carrying}
    if len(promises) != 1:
        return Access(memory)
    (promise,) = promises
    if promise is not Promise.GROUPS:
        return Access(memory, promise)
    groups = [m.alias_groups for m in carrying]
    union, overlapping = 0, False
    for mask in groups:
        overlapping |= bool(union & mask)
        union |= mask
    internal = overlapping or any(m.may_alias_internally for m in carrying)
    return Access(memory, Promise.GROUPS, union, internal)


_RULES: dict[type, Callable[[ParamType, Convention | None], Access]] = {
    Scalar: lambda t, conv: _NO_MEMORY,
    Constant: lambda t, conv: _NO_MEMORY,
    Opaque: lambda t, conv: _NO_MEMORY,
    Pointer: lambda t, conv: _pointer(t),
    Slice: lambda t, conv: _slice(t),
    DisjointSlice: lambda t, conv: Access(Memory.WRITE, Promise.EXCLUSIVE),
    NumbaArray: lambda t, conv: Access(Memory.WRITE),
    TileArray: lambda t, conv: Access(Memory.WRITE, Promise.GROUPS, t.alias_groups, t.may_alias_internally),
    TileList: lambda t, conv: Access(Memory.WRITE, Promise.GROUPS, t.alias_groups | t.element.alias_groups,
                                     t.elements_may_alias or t.element.may_alias_internally),
    TileTensor: lambda t, conv: _tile_tensor(t),
    # numba passes a record by pointer to a copy: the kernel may write the copy, never the caller's data
    Struct: lambda t, conv: _NO_MEMORY if conv is Convention.NUMBA else _combine(
        access(f.type, conv) for f in t.fields),
    Tuple: lambda t, conv: _combine(access(item, conv) for item in t.items),
}


def access(param_type: ParamType, convention: Convention | str | None = None) -> Access:
    """The access trait of a parameter of type ``param_type`` under ``convention``.

    Parameters
    ----------
    param_type : ParamType
        A parameter kind (``Slice``, ``Pointer``, ``TileArray``...).
    convention : Convention or str, optional
        The signature's calling convention; it matters where a convention copies
        (numba passes records by pointer to a copy).  None: as passed by value.

    Returns
    -------
    Access
        What the kernel may do to the memory and what the signature promises.
    """
    rule = _RULES.get(type(param_type))
    if rule is None:
        raise TypeError(f"access: not a parameter kind (got {type(param_type).__name__})")
    return rule(param_type, None if convention is None else Convention(convention))
