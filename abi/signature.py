"""Kernel and device-function signatures: parameters, convention, launch metadata."""

from __future__ import annotations

from dataclasses import dataclass, field

from ._syntax_format import format_signature
from ._syntax_parse import Parser
from ._syntax_tokens import SOURCE
from .errors import SignatureSyntaxError
from .kinds import ParamType
from .layout import Layout, layout_of
from .params import Convention, LaunchMeta, Param

__all__ = ["Convention", "LaunchMeta", "Param", "Signature"]


@dataclass(frozen=True, slots=True)
class Signature:
    """A kernel (``kind="kernel"``) or device function (``kind="device"``).

    ``returns`` is only meaningful for device functions.  The flat PTX
    parameter layout is :attr:`layout`, computed once per signature.
    """

    name: str
    params: tuple[Param, ...] = ()
    convention: Convention = Convention.C
    launch: LaunchMeta = field(default_factory=LaunchMeta)
    kind: str = "kernel"
    returns: ParamType | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("kernel", "device"):
            raise ValueError(f"Signature.kind must be 'kernel' or 'device' (got {self.kind!r})")
        object.__setattr__(self, "convention", Convention(self.convention))
        object.__setattr__(self, "params", tuple(self.params))
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.name}: parameter names must be unique (got {names})")

    @property
    def layout(self) -> Layout:
        """The flat PTX parameter list with offsets; cached per signature."""
        return layout_of(self)

    @classmethod
    def parse(cls, text: str) -> Signature:
        """Exactly one signature in the text syntax (see ``docs/signature-syntax.md``); struct
        declarations before it are allowed."""
        found = Parser(text, cls).items()
        if len(found) != 1:
            raise SignatureSyntaxError(f"expected exactly one signature (got {len(found)})", source=SOURCE)
        return found[0]

    def __str__(self) -> str:
        return format_signature(self)
