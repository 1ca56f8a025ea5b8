"""A linked image: one device code object plus every kernel's signature."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ptxbridge.abi.signature import Signature
from ptxbridge.launch.module import Module
from ptxbridge.loaders import open_backend

__all__ = ["Image"]


@dataclass(frozen=True, slots=True)
class Image:
    """What ``ptxbridge.link`` returns.

    ``cubin`` is the linked machine code for ``arch`` (None when only the CPU
    loader will run it); ``ptx`` keeps the PTX text of every PTX input so the
    CPU loader can interpret the same program.  ``kernels`` and
    ``device_functions`` map names to signatures (launch metadata included).
    """

    cubin: bytes | None
    arch: str | None
    kernels: Mapping[str, Signature] = field(default_factory=dict)
    device_functions: Mapping[str, Signature] = field(default_factory=dict)
    ptx: tuple[bytes, ...] = ()
    log: str = ""

    def load(self, device: Any = None, **options: Any) -> Module:
        """Put the image on ``device``: an int, ``"cuda:N"``, a torch device, or ``"cpu"``.

        ``None`` picks the first GPU, or the CPU loader when there is none
        (``PTXBRIDGE_DEVICE`` overrides).  ``options`` are the loader's (the CPU
        loader's ``max_steps``), see :func:`ptxbridge.loaders.open_backend`.
        """
        return Module(self, open_backend(self, device, **options))
