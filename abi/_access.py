"""The vocabulary of the access trait (:mod:`.memory_access`): memory, promise, and how members combine."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum, StrEnum

__all__ = ["NO_MEMORY", "Access", "Memory", "Promise", "combine"]


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


NO_MEMORY = Access(Memory.NONE)


def combine(members: Iterable[Access]) -> Access:
    """One access for an aggregate: the strongest memory, a promise only where all members agree."""
    carrying = [m for m in members if m.memory is not Memory.NONE]
    if not carrying:
        return NO_MEMORY
    memory = max(m.memory for m in carrying)
    promises = {m.promise for m in carrying}
    if len(promises) != 1:
        return Access(memory)
    (promise,) = promises
    if promise is not Promise.GROUPS:
        return Access(memory, promise)
    union, overlapping = 0, False
    for member in carrying:
        overlapping |= bool(union & member.alias_groups)
        union |= member.alias_groups
    internal = overlapping or any(m.may_alias_internally for m in carrying)
    return Access(memory, Promise.GROUPS, union, internal)
