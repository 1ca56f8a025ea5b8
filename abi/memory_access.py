"""The access trait: what a kernel may do to the memory a parameter points to, and what it promises.

Framework integrations need it to declare which arguments a kernel mutates
(``mutates_args``); aliasing checks need the promises a signature makes about
overlap.  Both are read from the parameter's kind alone (each kind's rule is in
its entry, :mod:`.kind_entries`), so they are the same for every frontend that
produced the kind:

=====================  ==========  =========================================================
kind                   memory      promise
=====================  ==========  =========================================================
Scalar, Constant       none        none (no memory)
Pointer                write/read  none: a raw pointer promises nothing (``mutable`` picks
                                   write or read); ``noalias`` (a Rust ``&T`` / ``&mut T``, a
                                   C++ ``__restrict__`` pointer): as a slice of its mutability
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

``ptxbridge.launch.aliasing`` checks these promises at launch (docs/safety.md).
"""

from __future__ import annotations

from ._access import Access, Memory, Promise
from .kind_entries import KINDS
from .kinds import ParamType
from .params import Convention

__all__ = ["Access", "Memory", "Promise", "access"]


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
    try:
        entry = KINDS.entry_of(param_type)
    except TypeError as exc:
        raise TypeError(f"access: {exc}") from None
    return entry.access(param_type, None if convention is None else Convention(convention))
