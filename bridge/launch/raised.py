"""Exceptions raised in numba kernels compiled with ``debug=True``, reported after the launch.

numba-cuda compiles such a kernel to store the code of the first exception a
thread raises in the global ``<kernel>__errcode__``, and that thread's index in
``<kernel>__tid{x,y,z}__`` / ``__ctaid{x,y,z}__``; its launcher zeroes the code
before each launch, reads it after, and raises the Python exception its
compile-time table gives for the code (numba-cuda 0.30 ``_Kernel.launch``).
The artifact carries that table (``Artifact.raises``); the call path does the
same around each launch of such a kernel and raises :class:`KernelRaisedError`.

Reading the flag waits for the launch, which a stream being captured into a CUDA graph does not
allow: such a launch is refused (:func:`unreadable`) rather than run with nobody to read the flag.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from ptxbridge.abi.errors import ArgumentError, KernelRaisedError
from ptxbridge.abi.raised import RaisedException, table_from_json, table_to_json
from ptxbridge.launch.symbols import global_names

__all__ = ["RaisedException", "ErrorFlag", "debug_kernels", "error_table", "table_from_json", "table_to_json",
           "unreadable"]


def error_table(image: Any, kernel: str, names: Collection[str]) -> Mapping[int, RaisedException] | None:
    """The exception table of ``kernel`` when numba compiled it with ``debug=True``, else None.

    ``names``: the image's globals.  A saved image keeps numba's flag but not its table: ``{}``,
    so exceptions are reported by their code.
    """
    table = getattr(image, "raises", {}).get(kernel)
    if table is None and f"{kernel}__errcode__" in names:
        return {}
    return table


def debug_kernels(image: Any) -> frozenset[str]:
    """The kernels of ``image`` that report exceptions through numba's flag."""
    names = frozenset(global_names(image))
    return frozenset(k for k in image.kernels if error_table(image, k, names) is not None)


def unreadable(kernel: str, where: str, instead: str) -> ArgumentError:
    """The error for a launch of a debug kernel where its flag cannot be read after the launch."""
    return ArgumentError(f"{kernel}: compiled with debug=True, it reports an exception through a flag "
                         f"that ptxbridge reads after each launch, which {where} does not allow; compile it "
                         f"without debug=True, or {instead}")


class ErrorFlag:
    """The ``__errcode__`` globals of one kernel (by its symbol) on one loaded module."""

    def __init__(self, backend: Any, kernel: str, table: Mapping[int, RaisedException]):
        self.backend, self.kernel, self.table = backend, kernel, table

    @classmethod
    def of(cls, module: Any, kernel: str) -> ErrorFlag | None:
        """The flag of ``kernel`` on a loaded module, or None: not compiled with ``debug=True``."""
        table = error_table(module.image, kernel, module.globals.names)
        return None if table is None else cls(module.backend, kernel, table)

    def reset(self, stream: int) -> None:
        """Clear the code before a launch on ``stream``; refused while ``stream`` is being captured."""
        if self.backend.capturing(stream):
            raise unreadable(self.kernel, "a stream being captured into a CUDA graph (torch.cuda.graph, "
                             "cudaStreamBeginCapture)", "launch it before or after the capture")
        self.backend.write_global(f"{self.kernel}__errcode__", bytes(4))

    def check(self) -> None:
        """Raise :class:`KernelRaisedError` when a thread of the last launch raised."""
        self.backend.synchronize()
        code = self._read("errcode")
        if not code:
            return
        tid = tuple(self._read(f"tid{c}") for c in "xyz")
        ctaid = tuple(self._read(f"ctaid{c}") for c in "xyz")
        found = self.table.get(code)
        thread = f"thread tid={tid} ctaid={ctaid}"
        if found is None:
            error = KernelRaisedError(f"{self.kernel}: {thread} raised exception code {code}, which the "
                                      f"kernel's exception table does not list")
        else:
            shown = ", ".join(map(repr, found.args))
            where = f" ({found.location})" if found.location else ""
            error = KernelRaisedError(f"{self.kernel}: {thread} raised {found.type}({shown}){where}")
            error.exception = found.instance()
        error.tid, error.ctaid = tid, ctaid
        raise error from error.exception

    def _read(self, name: str) -> int:
        return int.from_bytes(self.backend.read_global(f"{self.kernel}__{name}__"), "little")
