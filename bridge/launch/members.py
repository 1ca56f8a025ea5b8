"""Where the tensors of an argument sit: the top-level tensor kinds and those inside by-value members.

The no-alias check (:mod:`.aliasing`) needs each tensor a promise covers, and the
CPU loader needs the memory of every tensor a struct or tuple carries (its bounds
check knows only registered buffers).  Both walk the same way, through the kind
table alone: an argument whose binding family passes members by value (``by-value``,
``items``) is followed into its labelled children (struct fields by name, tuple
items by index); any other family ends the walk there.  A new kind is covered by
its entry's ``binding`` and ``children``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ptxbridge.abi.kind_entries import KINDS
from ptxbridge.abi.kinds import ParamType
from ptxbridge.abi.params import Convention

__all__ = ["Member", "Step", "members", "read", "tensor_of"]

Step = int | str  # a tuple item or a struct field on the way from the argument to a tensor
_THROUGH = ("by-value", "items")  # families whose members are the argument's own parts


@dataclass(frozen=True, slots=True)
class Member:
    """A part of an argument that is not passed through: a tensor, a list, a scalar, bytes."""

    label: str  # the parameter's name, with ``.field`` / ``.k`` for members
    type: ParamType
    path: tuple[Step, ...]  # the steps from the argument to the member
    family: str  # its binding family (``tensor``, ``partition``, ``tile-list``, ``scalar``...)


def members(label: str, t: ParamType, convention: Convention,
            path: tuple[Step, ...] = ()) -> Iterator[Member]:
    """The parts of an argument of type ``t``, by-value structs and tuples walked into."""
    family = KINDS.entry_of(t).binding(t, convention)
    if family not in _THROUGH:
        yield Member(label, t, path, family)
        return
    for step, child in KINDS.labelled(t):
        yield from members(f"{label}.{step}", child, convention, (*path, step))


def read(value: Any, path: tuple[Step, ...]) -> Any:
    """The member of ``value`` at ``path`` (dicts, dataclasses, tuples); None where it is missing
    (the binder has said so already)."""
    for step in path:
        if isinstance(step, int):
            value = value[step] if isinstance(value, (tuple, list)) and step < len(value) else None
        else:
            value = value.get(step) if isinstance(value, dict) else getattr(value, step, None)
    return value


def tensor_of(value: Any) -> Any:
    """The tensor of a slice given as ``{"ptr": tensor, "len": n}``; anything else as it is."""
    return value.get("ptr") if isinstance(value, dict) else value
