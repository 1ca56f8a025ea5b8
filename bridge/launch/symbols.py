"""Kernels and module globals by the name a user writes: the symbol itself, its C++ name, or the NVRTC
name expression it was compiled with.

CUDA C++ kernels that are not ``extern "C"`` and file-``static`` variables
reach the image under mangled names (``_Z9vectorAddPKfS0_Pfi``,
``_ZL12d_OptionData``); :func:`ptxbridge.abi.cxx_names.find_symbol` maps
``"vectorAdd"`` or ``"d_OptionData"`` to them.  A template kernel is found first by the expression
NVRTC lowered (``"block_sum<int, 64, true>"``, kept as ``Image.name_expressions``): demangling spells
its arguments differently (``64u``, ``(bool)1``), so the expression is looked up, not re-derived.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ptxbridge.abi.cxx_names import find_symbol
from ptxbridge.abi.elf import read_elf
from ptxbridge.abi.ptx import read_ptx

__all__ = ["global_names", "symbol_for"]

_STT_OBJECT = 1
_VARIABLE_SECTIONS = (".nv.global", ".nv.constant")


def global_names(image: Any) -> tuple[str, ...]:
    """The module variables (``__device__`` / ``__constant__``) of ``image``, as the device names them:
    the cubin's data symbols, or the PTX's ``.global`` / ``.const`` definitions without a cubin."""
    if image.cubin is not None:
        elf = read_elf(image.cubin)
        return tuple(sorted({
            sym.name for sym in elf.symbols
            if sym.type == _STT_OBJECT and not sym.name.startswith(".") and sym.shndx < len(elf.sections)
            and elf.sections[sym.shndx].name.startswith(_VARIABLE_SECTIONS)}))
    found: set[str] = set()
    for index, text in enumerate(image.ptx):
        module = read_ptx(text, source=f"<ptx #{index}>")
        found |= {v.name for v in module.globals
                  if v.state_space in ("global", "const") and v.linkage != "extern"}
    return tuple(sorted(found))


def symbol_for(name: str, symbols: Iterable[str], what: str,
               expressions: Mapping[str, str] | None = None) -> str:
    """The symbol ``name`` means among ``symbols`` (``expressions``: name expression -> symbol, tried
    first); KeyError naming the choices otherwise."""
    symbols = tuple(symbols)
    found = (expressions or {}).get(name) or find_symbol(name, symbols)
    if found is None:
        spelled = f"; name expressions: {', '.join(expressions)}" if expressions else ""
        raise KeyError(f"the image has no {what} {name!r} (by symbol, C++ name or name expression; {what}s: "
                       f"{', '.join(symbols) or 'none'}{spelled})")
    return found
