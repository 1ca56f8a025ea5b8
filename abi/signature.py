"""Kernel and device-function signatures: parameters, convention, launch metadata."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from .kinds import ParamType

if TYPE_CHECKING:
    from .layout import Layout

__all__ = ["Convention", "LaunchMeta", "Param", "Signature"]


class Convention(StrEnum):
    """How a frontend lowers parameters to PTX (see FRONTENDS.md and ``abi.lowering``).

    ``c``: CUDA C++ (NVRTC/nvcc) and plain rustc ``extern "ptx-kernel"`` /
    ``extern "C"``; ``oxide``: cuda-oxide ``#[kernel]``; ``numba``: numba-cuda
    kernels; ``cutile``: cuTile Python conventions t1/t2 (same parameters);
    ``cutile-rs``: cutile-rs ``<kernel>_entry``.
    """

    C = "c"
    OXIDE = "oxide"
    NUMBA = "numba"
    CUTILE = "cutile"
    CUTILE_RS = "cutile-rs"


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    type: ParamType


@dataclass(frozen=True, slots=True)
class LaunchMeta:
    """What the code demands of a launch.  ``None`` means no demand."""

    reqntid: tuple[int, int, int] | None = None
    maxntid: tuple[int, int, int] | None = None
    minnctapersm: int | None = None
    cluster: tuple[int, int, int] | None = None
    static_shared: int = 0
    dynamic_shared: int = 0

    def __post_init__(self) -> None:
        for name in ("reqntid", "maxntid", "cluster"):
            dims = getattr(self, name)
            if dims is not None and (len(dims) != 3 or any(not isinstance(d, int) or d < 1 for d in dims)):
                raise ValueError(f"LaunchMeta.{name} must be three ints >= 1 (got {dims!r})")
        if self.minnctapersm is not None and self.minnctapersm < 1:
            raise ValueError(f"LaunchMeta.minnctapersm must be >= 1 (got {self.minnctapersm!r})")
        for name in ("static_shared", "dynamic_shared"):
            if getattr(self, name) < 0:
                raise ValueError(f"LaunchMeta.{name} must be >= 0 bytes (got {getattr(self, name)!r})")


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
        from .layout import layout_of

        return layout_of(self)

    @classmethod
    def parse(cls, text: str) -> Signature:
        """Parse the signature text syntax (see ``docs/signature-syntax.md``)."""
        from .syntax import parse_signature

        return parse_signature(text)

    def __str__(self) -> str:
        from .syntax import format_signature

        return format_signature(self)
