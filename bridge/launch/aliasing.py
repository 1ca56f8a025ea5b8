"""No-alias promises checked at launch: a signature's promises, the arguments' real extents.

Rust's ``&mut`` and ``DisjointSlice``, C++ ``__restrict__`` and cuTile's alias
groups are compiled into a kernel as facts the kernel never checks; across
the language boundary the caller must keep them (docs/safety.md).  From the
access trait of each parameter (:func:`ptxbridge.abi.access`) this module
decides once per kernel which pieces of argument memory must not overlap:

- an exclusive parameter (``&mut``, ``DisjointSlice``, a ``T* __restrict__``
  pointer, a cutile-rs partition) overlaps no other parameter that carries memory;
- a shared-read parameter (``&``, a ``const __restrict__`` pointer) overlaps no
  parameter the kernel may write; shared-read parameters may overlap each other;
- cuTile arrays overlap only arrays that share an alias group, list elements
  each other only when the list says so, and an array without
  ``may_alias_internally`` (or a partition) never overlaps itself;
- raw pointers, numba arrays and by-value copies promise nothing.

Per launch, :class:`AliasCheck` reads each such argument's extent
(:mod:`ptxbridge.launch.extents`) and raises :class:`ArgumentError` naming the kernel,
both parameters and the overlapping bytes.  Raw addresses passed as integers
(inside structs) have no known extent and are not checked.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ptxbridge.abi.errors import ArgumentError
from ptxbridge.abi.kind_entries import KINDS
from ptxbridge.abi.kinds import ParamType
from ptxbridge.abi.memory_access import Access, Memory, Promise, access
from ptxbridge.abi.signature import Convention, Signature
from ptxbridge.abi.syntax import format_type
from ptxbridge.launch.dlpack import extractor_for
from ptxbridge.launch.extents import Extent, Undecided, extent_of, overlap, self_overlap
from ptxbridge.launch.members import Member, Step, members, read, tensor_of

__all__ = ["AliasCheck", "alias_check"]

Path = tuple[Step, ...]  # an argument index, then the steps to one of its members
_OPT_OUT = "pass tensors that do not overlap, or check_aliasing=False to take that responsibility"


@dataclass(frozen=True, slots=True)
class _Unit:
    """One tensor (or, ``many``, a cuTile list of them) whose memory a promise covers."""

    label: str  # the parameter's name, with ``.field`` / ``.k`` for members
    type: ParamType
    access: Access
    path: tuple[Step, ...]  # the argument index, then the steps into it
    many: bool = False  # a cuTile list: the value is a sequence of tensors
    distinct_items: bool = False  # list items must not overlap each other
    internal: bool = False  # must not overlap itself (two indices, one address)
    partition: bool = False  # a cutile-rs partition (written tile by tile)


@dataclass(frozen=True, slots=True)
class _Rule:
    """Units ``first`` and ``second`` must not overlap; ``why`` says which promise."""

    first: int
    second: int
    why: str


def _units(member: Member, index: int, convention: Convention) -> Iterator[_Unit]:
    """The units of one argument member, by its binding family."""
    t, label, path = member.type, member.label, (index, *member.path)
    if member.family == "tensor":
        promise = access(t, convention)
        internal = promise.promise is Promise.GROUPS and not promise.may_alias_internally
        yield _Unit(label, t, promise, path, internal=internal)
    elif member.family == "partition":  # passed as (tensor, partition_dims, partition_strides)
        yield _Unit(label, t, access(t, convention), (*path, 0), internal=True, partition=True)
    elif member.family == "tile-list":
        ((_, element),) = KINDS.labelled(t)
        yield _Unit(label, t, access(t, convention), path, many=True, distinct_items=not t.elements_may_alias,
                    internal=not access(element, convention).may_alias_internally)


def _what(unit: _Unit) -> str:
    """The promise of ``unit`` in the words of its source language."""
    words = KINDS.entry_of(unit.type).promise_words(unit.type)
    if words is not None:
        return words
    if unit.access.promise is Promise.EXCLUSIVE:
        return "an exclusive (no-alias) parameter"
    return "a shared-read (no-alias) parameter"


def _rule(units: Sequence[_Unit], i: int, j: int) -> _Rule | None:
    """Whether units ``i`` and ``j`` must not overlap; the rule names the promiser first."""
    for x, y in ((i, j), (j, i)):
        if units[x].access.promise is Promise.EXCLUSIVE:
            return _Rule(x, y, f"'{units[x].label}' is {_what(units[x])}, which no other argument "
                               f"may overlap")
    for x, y in ((i, j), (j, i)):
        if units[x].access.promise is Promise.SHARED_READ and units[y].access.memory is Memory.WRITE:
            return _Rule(x, y, f"'{units[x].label}' is {_what(units[x])}, which no argument the kernel "
                               f"may write may overlap")
    a, b = units[i].access, units[j].access
    if a.promise is Promise.GROUPS and b.promise is Promise.GROUPS and not a.alias_groups & b.alias_groups:
        return _Rule(i, j, "the kernel was compiled for them in different cuTile alias groups (or none)")
    return None


def _extent(value: Any) -> Extent | None:
    """The extent of a tensor argument (of a slice's ``{"ptr": tensor, "len": n}``: the tensor's), None
    for anything else (raw integer addresses)."""
    value = tensor_of(value)
    extract = extractor_for(type(value))
    if extract is None:
        return None
    info = extract(value, None)
    itemsize = info.dtype.itemsize if info.dtype is not None else _torch_itemsize(value)
    return extent_of(info, itemsize)


def _torch_itemsize(value: Any) -> int:
    size = getattr(value, "element_size", None)  # torch's lazy conj views have no DType but a size
    return size() if callable(size) else 1


class AliasCheck:
    """The no-alias promises of one kernel, checked against one launch's arguments.

    ``check(args)`` returns None or raises :class:`ArgumentError`.  ``native_promises``
    is what the C launch plan checks itself (bridge/launch/_fastlaunch.c); ``argument_pairs``
    what the Python plan's inline reads check (:mod:`.fastpath`).
    """

    def __init__(self, kernel: str, units: Sequence[_Unit], rules: Sequence[_Rule]):
        self.kernel, self.units, self.rules = kernel, tuple(units), tuple(rules)
        wanted = {r.first for r in rules} | {r.second for r in rules}
        self._wanted = tuple(k for k, u in enumerate(units) if k in wanted or u.internal or u.distinct_items)

    def argument_pairs(self) -> tuple[tuple[int, int], ...] | None:
        """Argument index pairs whose contiguous tensors must not overlap; None when a promise
        needs more than that (members, lists, strided self-overlap)."""
        needed = [self.units[k] for k in self._wanted]
        if any(len(u.path) != 1 or u.many or u.internal for u in needed):
            return None
        return tuple((self.units[r.first].path[0], self.units[r.second].path[0]) for r in self.rules)

    def native_promises(self) -> tuple[tuple[tuple[Path, Path], ...], tuple[Path, ...]] | None:
        """What the C launch plan checks itself: pairs of member paths (argument index, then the steps
        into it) whose tensors' byte ranges must not overlap, and the paths of tensors that must not
        overlap themselves; None when a promise needs more (cuTile lists, partitions)."""
        needed = [self.units[k] for k in self._wanted]
        if any(u.many or u.partition for u in needed):
            return None
        pairs = tuple((self.units[r.first].path, self.units[r.second].path) for r in self.rules)
        return pairs, tuple(u.path for u in needed if u.internal)

    def __call__(self, args: Sequence[Any]) -> None:
        pieces: dict[int, list[tuple[str, Extent]]] = {}
        for k in self._wanted:
            unit = self.units[k]
            value = read(args[unit.path[0]], unit.path[1:])
            items = enumerate(value) if unit.many and isinstance(value, (list, tuple)) else ((None, value),)
            found = pieces[k] = []
            for index, item in items:
                e = _extent(item)
                if e is not None:
                    found.append((unit.label if index is None else f"{unit.label}[{index}]", e))
        for rule in self.rules:
            why = rule.why
            for name_a, a in pieces[rule.first]:
                for name_b, b in pieces[rule.second]:
                    self._pair(rule.first, name_a, a, rule.second, name_b, b, why)
        for k in self._wanted:
            unit, found = self.units[k], pieces[k]
            if unit.distinct_items:
                for n, (name_a, a) in enumerate(found):
                    for name_b, b in found[n + 1:]:
                        self._pair(k, name_a, a, k, name_b, b, "the kernel was compiled for list items "
                                                                  "that do not overlap each other")
            if unit.internal:
                for name, e in found:
                    self._itself(k, name, e)

    def _head(self, unit: int, name: str) -> str:
        return f"{self.kernel}: argument '{name}' ({format_type(self.units[unit].type)})"

    def _pair(self, i: int, name_a: str, a: Extent, j: int, name_b: str, b: Extent, why: str) -> None:
        try:
            shared = overlap(a, b)
            within = "in"
        except Undecided:
            shared, within = (max(a.lo, b.lo), min(a.hi, b.hi)), "possibly (not decided) within"
        if shared is None:
            return
        lo, hi = shared
        raise ArgumentError(f"{self._head(i, name_a)} overlaps argument '{name_b}' "
                            f"({format_type(self.units[j].type)}) {within} bytes [{lo:#x}, {hi:#x}) "
                            f"({hi - lo} bytes): {why}; {_OPT_OUT}")

    def _itself(self, k: int, name: str, e: Extent) -> None:
        try:
            witness = self_overlap(e)
        except Undecided:
            problem = f"cannot be shown free of self-overlap ({_layout(e)}, too many elements to search)"
        else:
            if witness is None:
                return
            first, second = witness
            address = e.ptr + sum(i * s for i, s in zip(first, e.strides, strict=True)) * e.itemsize
            problem = (f"overlaps itself: indices {first} and {second} both address {address:#x} "
                       f"({_layout(e)})")
        which = "a partition (written tile by tile)" if self.units[k].partition else \
            "an array that does not alias internally (may_alias_internally=False)"
        head = self._head(k, name)
        raise ArgumentError(f"{head} {problem}: the kernel was compiled for {which}; "
                            f"pass a tensor whose indices address distinct elements (e.g. .contiguous()), "
                            f"or check_aliasing=False to take that responsibility")


def _layout(e: Extent) -> str:
    return f"shape {e.shape}, strides {e.strides} elements"


def alias_check(signature: Signature, kernel: str | None = None) -> AliasCheck | None:
    """The launch check of ``signature``'s no-alias promises; None when it makes none."""
    convention = signature.convention
    units = [u for k, p in enumerate(signature.params) for m in members(p.name, p.type, convention)
             for u in _units(m, k, convention) if u.access.memory is not Memory.NONE]
    rules = [r for i in range(len(units)) for j in range(i + 1, len(units)) if (r := _rule(units, i, j))]
    if not rules and not any(u.internal or u.distinct_items for u in units):
        return None
    return AliasCheck(kernel or signature.name, units, rules)

