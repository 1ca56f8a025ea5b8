"""GPU targets: the one parser of their spellings and the one copy of their compatibility rules.

Every module that reads, writes or compares a GPU target (``sm_90a``, ``compute_90``, ``lto_90``,
``"90"``, ``(9, 0)``) goes through :func:`parse_target`; nowhere else does code take a target name
apart (``tests/test_targets.py`` searches the source for it).

A target is a compute capability ``major.minor`` and a feature-set suffix (CUDA Programming Guide,
"Compute Capabilities" and "Binary Compatibility"; PTX ISA, ``.target``):

======  =================================  ===============================================
suffix  features                           code built for ``X.Y`` runs on
======  =================================  ===============================================
``""``  the baseline of ``X.Y``            cubin: ``X.Z``, Z >= Y; PTX: any CC >= ``X.Y``
``f``   family-specific (CUDA 12.9+)       cubin and PTX: ``X.Z``, Z >= Y (same family)
``a``   architecture-specific (``wgmma``)  cubin and PTX: ``X.Y`` only
======  =================================  ===============================================

PTX ISA releases by CUDA version (PTX ISA manual, "Release Notes"):

=========  =====  =========  =====
CUDA       ISA    CUDA       ISA
=========  =====  =========  =====
11.0-11.8  7.0-7.8 (minor = minor)
12.0-12.5  8.0-8.5 (minor = minor)
12.6       8.5    12.8       8.7
12.9       8.8    13.x       9.x
=========  =====  =========  =====

A driver newer than the table is assumed to accept at least the newest ISA listed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .errors import TargetError

__all__ = ["SPELLINGS", "Target", "known_target", "max_ptx_isa", "parse_target"]

SPELLINGS = "'sm_90', 'sm_90a', 'sm_100f', 'compute_90', 'lto_90', '90' or (9, 0)"
_NAME = re.compile(r"(?:(sm|compute|lto)_)?([1-9][0-9]?)([0-9])([af]?)")
_SUFFIXES = ("", "f", "a")  # in order of features: each runs on fewer GPUs than the one before


@dataclass(frozen=True, slots=True)
class Target:
    """A GPU target: compute capability ``major.minor`` and ``suffix`` ``""``, ``"f"`` or ``"a"``.

    Ordered by compute capability, then features (``sm_90 < sm_90a < sm_100``); ``str()`` is the
    ``sm_`` name.
    """

    major: int
    minor: int
    suffix: str = ""

    def __post_init__(self) -> None:
        if not (_small(self.major, 1, 99) and _small(self.minor, 0, 9) and self.suffix in _SUFFIXES):
            raise TargetError(f"a GPU target is major 1-99, minor 0-9 and suffix '', 'f' or 'a' "
                              f"(got {self.major!r}, {self.minor!r}, {self.suffix!r})")

    @classmethod
    def from_number(cls, number: int, suffix: str = "") -> Target:
        """``90`` -> ``sm_90`` (the number cubin and fatbin headers record)."""
        return cls(number // 10, number % 10, suffix)

    @property
    def number(self) -> int:
        """``sm_90a`` -> 90."""
        return self.major * 10 + self.minor

    @property
    def sm(self) -> str:
        """The real-architecture name, ``sm_90a`` (cubin, ``-arch=`` of nvJitLink and rustc)."""
        return f"sm_{self.number}{self.suffix}"

    @property
    def compute(self) -> str:
        """The virtual-architecture name, ``compute_90a`` (libNVVM, PTX ``.target`` of the ISA)."""
        return f"compute_{self.number}{self.suffix}"

    @property
    def lto(self) -> str:
        """The LTO-IR name, ``lto_90a`` (``nvcc -gencode ...,code=lto_90a``)."""
        return f"lto_{self.number}{self.suffix}"

    @property
    def cc(self) -> tuple[int, int]:
        """The compute capability ``(9, 0)`` (numba-cuda, the driver's attributes)."""
        return self.major, self.minor

    @property
    def plain(self) -> Target:
        """The same compute capability without a suffix (``sm_90a`` -> ``sm_90``)."""
        return Target(self.major, self.minor)

    def cubin_runs_on(self, device: Target) -> bool:
        """Whether a cubin built for this target runs on a GPU of ``device`` (module table)."""
        if self.suffix == "a":
            return self.cc == device.cc
        return self.major == device.major and self.minor <= device.minor

    def ptx_runs_on(self, device: Target) -> bool:
        """Whether PTX for this target can be JIT-compiled for ``device`` (module table)."""
        return self.cubin_runs_on(device) if self.suffix else self.cc <= device.cc

    def _key(self) -> tuple[int, int, int]:
        return self.major, self.minor, _SUFFIXES.index(self.suffix)

    def __lt__(self, other: Target) -> bool:
        return self._key() < other._key()

    def __le__(self, other: Target) -> bool:
        return self._key() <= other._key()

    def __gt__(self, other: Target) -> bool:
        return self._key() > other._key()

    def __ge__(self, other: Target) -> bool:
        return self._key() >= other._key()

    def __str__(self) -> str:
        return self.sm


def _small(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def parse_target(value: Any, *, who: str = "", like: str = "'sm_90'") -> Target:
    """The :class:`Target` of any accepted spelling: a Target, ``"sm_90a"``, ``"compute_90"``,
    ``"lto_100f"``, ``"90"`` or ``(9, 0)``.

    Raises
    ------
    TargetError
        Anything else; the message reads "``who``: arch must look like ``like`` (got ...)".
    """
    if isinstance(value, Target):
        return value
    if isinstance(value, tuple) and len(value) == 2 and _small(value[0], 1, 99) and _small(value[1], 0, 9):
        return Target(*value)
    if isinstance(value, str):
        match = _NAME.fullmatch(value)
        if match is not None:
            return Target(int(match[2]), int(match[3]), match[4])
    prefix = f"{who}: " if who else ""
    raise TargetError(f"{prefix}arch must look like {like} (got {value!r}); GPU targets are spelled "
                      f"{SPELLINGS}")


def known_target(value: Any) -> Target | None:
    """The :class:`Target` of ``value`` when it is a target spelling, else None (for names read from
    code objects, where an unknown one is left to the tool that reads it)."""
    try:
        return parse_target(value)
    except TargetError:
        return None


_SPECIAL = {(12, 6): (8, 5), (12, 7): (8, 6), (12, 8): (8, 7), (12, 9): (8, 8)}


def max_ptx_isa(cuda_version: tuple[int, int]) -> tuple[int, int]:
    """The newest PTX ISA the driver of ``cuda_version`` (major, minor) can JIT."""
    major, minor = cuda_version
    if cuda_version in _SPECIAL:
        return _SPECIAL[cuda_version]
    if major == 11 or (major == 12 and minor <= 5) or major == 13:
        return major - 4, minor
    if major > 13:
        return 9, 9
    raise ValueError(f"CUDA {major}.{minor} is older than ptxbridge supports (needs 11.0 or newer)")
