"""Rust v0 symbol names (RFC 2603) as paths: ``_RNvNtCs2DxGA1hvVcO_4core9panicking18panic_bounds_check``
is ``core::panicking::panic_bounds_check``, so an error can name the Rust function a symbol is.

Only the nested-path forms rustc uses for plain functions are read (crate roots ``C``, nested paths
``N``, identifiers with their optional ``s..._`` disambiguators); anything else (impls, generic
arguments, back references) gives None, and the symbol is shown as it is.
"""

from __future__ import annotations

import re

__all__ = ["rust_path"]

_DISAMBIGUATOR = re.compile(r"s[0-9a-zA-Z]*_")
_IDENTIFIER = re.compile(r"(u?)(\d+)(_?)")


def rust_path(symbol: str) -> str | None:
    """``a::b::c`` for a v0-mangled path symbol, None for any other name."""
    if not symbol.startswith("_R"):
        return None
    parts: list[str] = []
    pos = 2
    while pos < len(symbol) and symbol[pos] == "N":  # N <namespace> <path> <identifier>: outermost first
        pos += 2
    if pos >= len(symbol) or symbol[pos] != "C":
        return None
    pos += 1
    while pos < len(symbol):
        disambiguator = _DISAMBIGUATOR.match(symbol, pos)
        pos = disambiguator.end() if disambiguator else pos
        found = _IDENTIFIER.match(symbol, pos)
        if found is None or found.group(1):  # punycode identifiers are not read
            return None
        start = found.end()
        parts.append(symbol[start:start + int(found.group(2))])
        pos = start + int(found.group(2))
    return "::".join(parts) if parts and all(parts) else None
