"""Lowering: one signature parameter -> the flat PTX parameters its convention makes.

Each kind's rule is part of its entry in the kind table (:mod:`.kind_entries`);
the decision table over all kinds and conventions is in ``docs/kinds.md``.  This
module is the public face: lowering a parameter or a parameter list, and the
repr(C) memory layout of by-value types.
"""

from __future__ import annotations

from ._flat import FlatParam, record_layout
from .kind_entries import KINDS
from .kinds import ParamType, Struct
from .params import Convention, Param

__all__ = ["FlatParam", "field_offsets", "lower_param", "lower_params", "memory_layout"]


def memory_layout(t: ParamType) -> tuple[int, int]:
    """(size, align) of a value of type ``t`` in memory (repr(C) / C rules).

    Raises :class:`AbiMismatchError` for kinds that cannot be passed by value (arrays).
    """
    return KINDS.by_value(t)


def field_offsets(struct: Struct) -> tuple[int, ...]:
    """Byte offset of each field of a repr(C) struct, in declaration order."""
    return tuple(record_layout([KINDS.by_value(f.type) for f in struct.fields])[0])


def lower_param(name: str, t: ParamType, conv: Convention, source: int = 0) -> list[FlatParam]:
    """The flat PTX parameters of one parameter ``name: t`` under ``conv``."""
    return KINDS.lower(name, t, conv, source)


def lower_params(params: tuple[Param, ...], conv: Convention) -> list[FlatParam]:
    """Flat PTX parameters of a whole parameter list, in declaration order."""
    flat: list[FlatParam] = []
    for index, param in enumerate(params):
        flat += KINDS.lower(param.name, param.type, conv, index)
    return flat
