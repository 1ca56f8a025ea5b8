"""Source lines of PTX instructions, from the debug line table (``.file`` / ``.loc``, PTX ISA 11.6.2).

Read only when a report needs one (a ``trap``), so nothing is kept per instruction: the last
``.loc`` before the instruction's PTX line, within its function, names the source position.
rustc writes line tables with ``-C debuginfo=line-tables-only``, nvcc and NVRTC with
``-lineinfo``, cuda-oxide with its line-table option.
"""

from __future__ import annotations

import re

__all__ = ["source_location"]

_FILE = re.compile(r'^[ \t]*\.file[ \t]+(\d+)[ \t]+"([^"\n]*)"', re.MULTILINE)
_LOC = re.compile(r"^[ \t]*\.loc[ \t]+(\d+)[ \t]+(\d+)[ \t]+(\d+)")
_FUNCTION = re.compile(r"^[ \t]*(?:\.(?:visible|weak|extern)[ \t]+)?\.(?:entry|func)\b")


def source_location(ptx: str | bytes, line: int) -> str | None:
    """``file:line:col`` of the instruction on 1-based PTX ``line``, or None without line info."""
    text = ptx.decode("utf-8", "replace") if isinstance(ptx, bytes) else ptx
    lines = text.splitlines()
    for number in range(min(line, len(lines)) - 1, -1, -1):
        if (loc := _LOC.match(lines[number])) is not None:
            files = dict(_FILE.findall(text))
            name = files.get(loc.group(1), f"file {loc.group(1)}")
            return f"{name}:{loc.group(2)}:{loc.group(3)}"
        if _FUNCTION.match(lines[number]):
            return None
    return None
