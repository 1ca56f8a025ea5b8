"""The README's architecture section lists the source tree file for file.

Each line of the block names files of the folder it sits in: ``abi/`` (top folder) or ``  rust/``
(a sub-package, whose own ``__init__.py`` the folder line stands for; ``    compiled/`` one level
deeper); more-indented lines continue the folder above them.  Every ``.py`` / ``.c`` file must be
named, and every name must exist.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOPS = ("abi", "bridge", "loaders")


def _listed() -> set[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("## Architecture", 1)[1].split("```", 2)[1]
    listed, top, sub, inner = set(), "", "", ""
    for line in block.splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        first = line.split()[0]
        if indent == 0:
            top, sub, inner = first.rstrip("/"), "", ""
            continue
        if indent == 2:
            sub, inner = (first.rstrip("/") if first.endswith("/") else ""), ""
        elif indent == 4 and sub:  # a sub-package of a sub-package (loaders/emulator/compiled/)
            inner = first.rstrip("/") if first.endswith("/") else ""
        folder = "/".join(part for part in (top, sub, inner) if part)
        listed |= {f"{folder}/{name}" for name in re.findall(r"(?<![\w/])[\w*]+\.(?:py|c)\b", line)}
    return listed


def _files() -> set[str]:
    found = set()
    for top in TOPS:
        for path in (ROOT / top).rglob("*"):
            if path.suffix not in (".py", ".c") or "__pycache__" in path.parts:
                continue
            relative = path.relative_to(ROOT).as_posix()
            if path.name == "__init__.py" and path.parent.name != top:
                continue  # a sub-package's folder line stands for its __init__
            found.add(relative)
    return found


def test_every_source_file_is_in_the_readme():
    listed = _listed()
    missing = sorted(f for f in _files() if not any(fnmatch.fnmatch(f, pattern) for pattern in listed))
    assert not missing, f"README architecture section does not list {missing}"


def test_every_file_the_readme_names_exists():
    files = _files()
    stale = sorted(p for p in _listed() if not any(fnmatch.fnmatch(f, p) for f in files))
    assert not stale, f"README architecture section names files that do not exist: {stale}"


def test_code_and_docs_cite_only_what_ships():
    """The team's design notes are not part of the package: facts the code relies on are in docs/."""
    notes = re.compile(r"FRONTENDS\.md|BASELINES\.md|ARCHITECTURE\.md|STYLE\.md|shared/design")
    folders = (*TOPS, "docs", "tests", "examples", "bench", "scripts")
    roots = [ROOT / folder for folder in folders] + [ROOT / "README.md"]
    files = [p for root in roots for p in ([root] if root.is_file() else root.rglob("*"))
             if p.is_file() and p.suffix in (".py", ".c", ".h", ".md", "")
             and p.name != "RESULTS.md" and p != Path(__file__).resolve()]
    citing = sorted(str(p.relative_to(ROOT)) for p in files if notes.search(p.read_text(errors="replace")))
    assert not citing, citing
