"""NVTX ranges around launches, named after the kernel, for Nsight Systems timelines.

Off unless asked for: ``Image.load(..., nvtx=True)`` or ``PTXBRIDGE_NVTX=1`` (read when a module is
loaded).  Off, nothing is spent: the plans carry no range functions, and the C plan tests one pointer.
On, each launch (from C or Python) is wrapped in ``push(kernel name)`` / ``pop()`` of the first NVTX
binding found, in this order:

=============================== ==================================================================
provider                        when
=============================== ==================================================================
the ``nvtx`` package            installed (``pip install nvtx``): NVIDIA's own Python binding
``torch.cuda.nvtx``             a CUDA build of torch (a CPU build has only a stub)
=============================== ==================================================================

Without either, asking for ranges is a :class:`~ptxbridge.abi.errors.ToolchainError` that says what
to install: a profile silently missing its ranges would mislead.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ptxbridge.abi.errors import ToolchainError

__all__ = ["Ranges", "nvtx_ranges"]

Ranges = tuple[Callable[[str], object], Callable[[], object]]  # push(name), pop()


def _provider() -> Ranges | None:
    try:
        import nvtx
    except ImportError:
        pass
    else:
        return nvtx.push_range, nvtx.pop_range
    try:
        import torch
    except ImportError:
        return None
    if torch.version.cuda is None:  # the CPU build's torch.cuda.nvtx is a stub that raises
        return None
    return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop


def nvtx_ranges(enabled: bool | None = None) -> Ranges | None:
    """The (push, pop) pair when ranges are on (``enabled``, or ``PTXBRIDGE_NVTX=1`` when None)."""
    if enabled is None:
        enabled = os.environ.get("PTXBRIDGE_NVTX", "0") not in ("", "0")
    if not enabled:
        return None
    found = _provider()
    if found is None:
        raise ToolchainError("NVTX ranges (nvtx=True or PTXBRIDGE_NVTX=1) need NVIDIA's nvtx package "
                             "(pip install nvtx) or a CUDA build of torch; neither is importable")
    return found
