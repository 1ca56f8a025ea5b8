"""The parts a signature is made of: the calling convention, parameters and launch metadata.

Kept apart from :mod:`.signature` so that lowering, the layout and the text syntax can build on them
without importing the signature class, whose convenience methods use all three: they read a signature
through :class:`SignatureFields`, so no module imports the signature module back.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from .kinds import ParamType

__all__ = ["Convention", "LaunchMeta", "Param", "SignatureFields"]


class Convention(StrEnum):
    """How a frontend lowers parameters to PTX (see ``docs/conventions.md`` and ``abi.lowering``).

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


class SignatureFields(Protocol):
    """What the layout and the text forms read of a signature (:class:`~.signature.Signature` has it)."""

    @property
    def name(self) -> str: ...
    @property
    def params(self) -> tuple[Param, ...]: ...
    @property
    def convention(self) -> Convention: ...
    @property
    def launch(self) -> LaunchMeta: ...
    @property
    def kind(self) -> str: ...
    @property
    def returns(self) -> ParamType | None: ...
