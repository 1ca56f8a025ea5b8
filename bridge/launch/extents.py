"""The bytes a tensor argument covers, and whether two tensors (or one with itself) share any.

The aliasing check (:mod:`ptxbridge.launch.aliasing`) needs, per tensor, its
real extent from data pointer, shape, strides and element size: negative
strides reach below the data pointer, zero strides (broadcasts) revisit
bytes, and two strided views of one buffer may interleave without sharing
an element.  Dense views (C- or F-contiguous) cover their byte interval
exactly, so two of them overlap iff their intervals do; anything else is
decided exactly by NumPy's ``shares_memory`` on stand-in arrays that carry
only the address arithmetic (nothing is read through them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy

from ptxbridge.launch.dlpack import TensorInfo

__all__ = ["ENUMERATE_LIMIT", "Extent", "Undecided", "extent_of", "overlap", "self_overlap"]

ENUMERATE_LIMIT = 1 << 22  # elements: larger irregular views are not searched for repeated addresses
_MAX_WORK = 1 << 20  # NumPy's bound on the exact pair search before it gives up


class Undecided(Exception):
    """Neither overlap nor its absence could be shown within the work bounds."""


@dataclass(frozen=True, slots=True)
class Extent:
    """Bytes ``[lo, hi)`` that hold the view's elements; ``dense``: every byte of them, once.

    Not dense: ``ptr`` (the element at index 0), ``shape`` and ``strides`` (in
    elements) and ``itemsize`` say which bytes inside ``[lo, hi)`` it touches.
    """

    lo: int
    hi: int
    dense: bool
    ptr: int = 0
    shape: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    itemsize: int = 1


def extent_of(info: TensorInfo, itemsize: int) -> Extent:
    """The extent of a tensor whose elements are ``itemsize`` bytes wide."""
    numel = info.numel
    if numel == 0:
        return Extent(info.ptr, info.ptr, True)
    below = sum((n - 1) * s for n, s in zip(info.shape, info.strides, strict=True) if s < 0)
    above = sum((n - 1) * s for n, s in zip(info.shape, info.strides, strict=True) if s > 0)
    lo, hi = info.ptr + below * itemsize, info.ptr + (above + 1) * itemsize
    if info.c_contiguous() or info.f_contiguous():
        return Extent(lo, hi, True)
    return Extent(lo, hi, False, info.ptr, info.shape, info.strides, itemsize)


class _Addresses:
    """A stand-in for NumPy: the address arithmetic of an extent, never dereferenced."""

    def __init__(self, e: Extent):
        if e.dense:
            shape, strides, ptr, itemsize = (e.hi - e.lo,), (1,), e.lo, 1
        else:
            shape, ptr, itemsize = e.shape, e.ptr, e.itemsize
            strides = tuple(s * itemsize for s in e.strides)
        self.__array_interface__ = {"shape": shape, "strides": strides, "typestr": f"|V{itemsize}",
                                    "data": (ptr, True), "version": 3}


def overlap(a: Extent, b: Extent) -> tuple[int, int] | None:
    """The byte range within which ``a`` and ``b`` share bytes, or None when they share none.

    Raises :class:`Undecided` when NumPy's exact search exceeds its work bound.
    """
    lo, hi = max(a.lo, b.lo), min(a.hi, b.hi)
    if lo >= hi:
        return None
    if a.dense and b.dense:
        return lo, hi
    try:
        shared = numpy.shares_memory(numpy.asarray(_Addresses(a)), numpy.asarray(_Addresses(b)),
                                     max_work=_MAX_WORK)
    except numpy.exceptions.TooHardError:
        raise Undecided from None
    return (lo, hi) if shared else None


def self_overlap(e: Extent) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """Two distinct indices of ``e`` that address the same element, or None when there are none.

    Raises :class:`Undecided` for an irregular view of more than ``ENUMERATE_LIMIT`` elements.
    """
    if e.dense or e.lo == e.hi:
        return None
    axes = [(k, n, s) for k, (n, s) in enumerate(zip(e.shape, e.strides, strict=True)) if n > 1]
    for k, _n, s in axes:
        if s == 0:  # a broadcast axis: index 0 and 1 along it land on one element
            return _index(e, {}), _index(e, {k: 1})
    reach = 0  # sorted by |stride|, each axis steps past everything the smaller ones reach
    for _k, n, s in sorted(axes, key=lambda axis: abs(axis[2])):
        if abs(s) <= reach:
            break
        reach += abs(s) * (n - 1)
    else:
        return None
    return _repeated_address(e)


def _index(e: Extent, at: dict[int, int]) -> tuple[int, ...]:
    return tuple(at.get(k, 0) for k in range(len(e.shape)))


def _repeated_address(e: Extent) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """Every element offset, sorted: a repeat is a witness."""
    numel = 1
    for n in e.shape:
        numel *= n
    if numel > ENUMERATE_LIMIT:
        raise Undecided
    offsets: Any = numpy.zeros((), dtype=numpy.int64)
    for k, (n, s) in enumerate(zip(e.shape, e.strides, strict=True)):
        axis = [1] * len(e.shape)
        axis[k] = n
        offsets = offsets + (numpy.arange(n, dtype=numpy.int64) * s).reshape(axis)
    flat = numpy.broadcast_to(offsets, e.shape).ravel()
    order = numpy.argsort(flat, kind="stable")
    repeats = numpy.flatnonzero(flat[order][1:] == flat[order][:-1])
    if not repeats.size:
        return None
    first, second = order[repeats[0]], order[repeats[0] + 1]
    return (tuple(int(i) for i in numpy.unravel_index(first, e.shape)),
            tuple(int(i) for i in numpy.unravel_index(second, e.shape)))
