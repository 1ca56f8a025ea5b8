"""``ptxbridge inspect`` for people: one compact, aligned block per kernel, from the report data.

Names come from the files (ELF symbols, ``.oxart`` bundle and entry names...), so every line is
made printable: control characters, C1 codes and bidirectional overrides are written as Python
escapes (``\\x1b``), never sent to the terminal.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["format_report", "printable", "printable_lines"]

_INDENT = "  "
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with terminal control characters and direction overrides escaped (``\\x1b``)."""
    return _UNSAFE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def printable_lines(text: str) -> str:
    """:func:`printable` on each line of ``text``; the line breaks stay."""
    return "".join(printable(line) + "\n" for line in text.splitlines())


def format_report(report: Mapping[str, Any]) -> str:
    """The text of one :func:`ptxbridge.cli.inspect.inspect_path` report (or a ``{"file", "error"}`` one)."""
    if "error" in report:
        message = report["error"].splitlines()[0] if report["error"] else "failed"
        named = report["file"] in message
        return printable(f"{'' if named else report['file'] + ': '}error: {message}") + "\n"
    lines = [f"{report['file']}: {_headline(report)}", *_body(report, _INDENT)]
    if report.get("sidecar_error"):
        lines.append(f"{_INDENT}note: {report['sidecar_error']}")
    unmatched = report.get("unmatched_signatures")
    if unmatched:
        lines.append(f"{_INDENT}signatures given for no code here: {', '.join(unmatched)}")
    if report.get("ok") is False:
        lines.append(f"{_INDENT}MISMATCH: the code disagrees with the signatures (see above)")
    return "\n".join(map(printable, lines)) + "\n\n"


def _headline(report: Mapping[str, Any]) -> str:
    form = report["format"]
    if form == "ptx":
        text = (f"PTX {report['version']}, target {','.join(report['target']) or '?'}, "
                f"{report['address_size']}-bit addresses")
    elif form == "cubin":
        facts = [report["arch"], report["language"] and f"language {report['language']}",
                 report["relocatable"] and "relocatable", report["embedded_ptx"] and "embedded PTX",
                 report["toolkit_version"] and f"CUDA {report['toolkit_version']}"]
        text = "cubin " + ", ".join(f for f in facts if f)
    elif form == "fatbin":
        text = f"fatbin{' in a host ELF' if report['host_elf'] else ''}, {len(report['children'])} images"
    elif form == "oxart":
        text = f"cuda-oxide .oxart, {len(report['bundles'])} bundles; {report['load']}"
    elif form == "library":
        text = f"static library (ar archive), {len(report['children'])} members"
    else:
        text = form
    source = report.get("compiled_from")
    if source:
        text += f" (compiled from {source['language']} by {source['compiler']} for {source['arch']})"
    return text


def _body(report: Mapping[str, Any], pad: str) -> list[str]:
    lines = [f"{pad}{report['note']}"] if report.get("note") else []
    for kernel in report.get("kernels", ()):
        lines += _function(kernel, pad, "kernel")
    for func in report.get("functions", ()):
        lines += _function(func, pad, "func")
    if report.get("imports"):
        lines.append(f"{pad}imports: {', '.join(f['name'] for f in report['imports'])}")
        lines += [line for f in report["imports"] if f["signature"] for line in _signature(f, pad + _INDENT)]
    for glob in report.get("globals", ()):
        dims = "".join(f"[{d or ''}]" for d in glob["array"] or ())
        align = f".align {glob['align']} " if glob["align"] else ""
        lines.append(f"{pad}global .{glob['state_space']} {align}.{glob['type']} {glob['name']}{dims}"
                     f" ({glob['linkage']})")
    if report.get("device_functions"):
        lines.append(f"{pad}device functions: " + ", ".join(
            f"{f['name']} ({f['size']} B{f', {r} registers' if (r := f['registers']) else ''})"
            for f in report["device_functions"]))
    for child in report.get("children", ()):
        lines += _child(child, pad)
    for bundle in report.get("bundles", ()):
        options = ", ".join(k for k, v in bundle["options"].items() if v) or "default options"
        loads = f", loads {bundle['loads']}" if bundle["loads"] else ", nothing loadable"
        lines.append(f"{pad}bundle {bundle['name']} (target {bundle['target'] or '?'}, {options}{loads})")
        for entry in bundle["entries"]:
            meta = "" if entry["metadata"] is None else f" metadata {entry['metadata']:#x}"
            lines.append(f"{pad}{_INDENT}entry {entry['kind']} {entry['symbol']}{meta}")
        for child in bundle["children"]:
            lines += _child(child, pad + _INDENT)
    return lines


def _child(child: Mapping[str, Any], pad: str) -> list[str]:
    if "image" in child:
        image = child["image"]
        label = f"[{image['index']}] {image['kind']} {image['arch']} at {image['offset']:#x}"
        if image["compression"]:
            label += f" ({image['compression']})"
    elif "member" in child:
        label = f"member {child['member']['name']} at {child['member']['offset']:#x}"
    else:
        label = f"payload {child['payload']['kind']} {child['payload']['name']}"
    return [f"{pad}{label}: {_headline(child)}", *_body(child, pad + _INDENT)]


def _function(record: Mapping[str, Any], pad: str, what: str) -> list[str]:
    params = record["params"]
    facts = [f"{len(params)} params, {record['param_size']} bytes"]
    if record.get("kind") == "func":
        facts.insert(0, record["linkage"])
    if record.get("returns"):
        facts.append("returns " + ", ".join(r["type"] for r in record["returns"]))
    if not record.get("defined", True):
        facts.append("declared only")
    if record.get("registers"):
        facts.append(f"{record['registers']} registers")
    if record.get("static_shared"):
        facts.append(f"{record['static_shared']} B static shared")
    launch = record.get("launch", record)
    for key in ("reqntid", "maxntid", "cluster"):
        if launch.get(key):
            facts.append(f"{key} {'x'.join(map(str, launch[key]))}")
    if launch.get("minnctapersm"):
        facts.append(f"minnctapersm {launch['minnctapersm']}")
    lines = [f"{pad}{what} {record['name']}: {'; '.join(facts)}"]
    if params:
        columns = ("#", "name", "type", "offset", "size") if "name" in params[0] else ("#", "offset", "size")
        rows = [[str(i), *(str(p[c]) for c in columns[1:])] for i, p in enumerate(params)]
        lines += _table(columns, rows, pad + _INDENT * 2)
    return lines + _signature(record, pad + _INDENT)


def _signature(record: Mapping[str, Any], pad: str) -> list[str]:
    if record["signature"] is None and record["check"] is None:
        return []
    origin = f"  ({record['signature_source']})" if record["signature_source"] else ""
    return [f"{pad}signature  {record['signature'] or '-'}{origin}", f"{pad}check      {record['check']}"]


def _table(headers: Sequence[str], rows: list[list[str]], pad: str) -> list[str]:
    """Rows under headers; numeric columns right-aligned, text left-aligned."""
    widths = [max(len(r[i]) for r in [list(headers), *rows]) for i in range(len(headers))]
    numeric = [all(r[i].isdigit() for r in rows) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        return pad + "  ".join(c.rjust(w) if n else c.ljust(w)
                               for c, w, n in zip(cells, widths, numeric, strict=True)).rstrip()

    return [line(headers), *(line(r) for r in rows)]
