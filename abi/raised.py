"""The exception table of a numba ``debug=True`` kernel: what each error code a thread stores means.

Pure data, so an artifact or a saved image carries the table without the call path that reads the
code after a launch (:mod:`ptxbridge.launch.raised`).
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["RaisedException", "table_from_json", "table_to_json"]


@dataclass(frozen=True, slots=True)
class RaisedException:
    """One entry of numba's table: the exception type (``ValueError``, or ``module.QualName``), its
    constant arguments and where the ``raise`` is (``In function 'f', file x.py, line 7``)."""

    type: str
    args: tuple[Any, ...] = ()
    location: str = ""

    def instance(self) -> BaseException | None:
        """The Python exception itself, for built-in exception types (others are named only)."""
        cls = getattr(builtins, self.type, None)
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            return None
        try:
            return cls(*self.args)
        except Exception:  # an exception type whose constructor takes other arguments
            return None


def table_to_json(table: Mapping[int, RaisedException]) -> dict[str, list[Any]]:
    return {str(code): [e.type, list(e.args), e.location] for code, e in table.items()}


def table_from_json(data: Mapping[str, list[Any]]) -> dict[int, RaisedException]:
    return {int(code): RaisedException(kind, tuple(args), where)
            for code, (kind, args, where) in data.items()}
