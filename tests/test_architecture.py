"""The tree explains itself, and the README's architecture section says so truly.

The README lists every room (package folder) with its import name, and nothing else; each room's
``__init__.py`` docstring names every module in the room, so a newcomer reads the room's plan where
its files are.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest
from _packages import PACKAGES, ROOT, module_name, source_files

TOPS = ("abi", "bridge", "loaders")


def _listed() -> dict[str, str]:
    """Folder -> import name, from the README's architecture block."""
    text = (ROOT / "README.md").read_text()
    block = text.split("## Architecture", 1)[1].split("```", 2)[1]
    return dict(re.findall(r"^(\S+/)\s+(ptxbridge[\w.]*)", block, re.M))


def _rooms() -> dict[str, str]:
    """Folder -> import name of every package, from the source tree."""
    rooms = {}
    for init in (p for p in source_files() if p.name == "__init__.py"):
        rooms[init.parent.relative_to(ROOT).as_posix() + "/"] = module_name(init)
    return rooms


def test_the_readme_lists_every_room_by_its_import_name():
    assert _listed() == _rooms()


def test_every_room_is_a_listed_package():
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert sorted(_rooms().values()) == sorted(packages)
    assert set(PACKAGES) <= set(packages)


def test_each_room_names_its_modules_in_its_docstring():
    unnamed = []
    for init in (p for p in source_files() if p.name == "__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        for path in init.parent.iterdir():
            named = re.search(rf"(?<!\w){re.escape(path.stem)}\b", doc)
            if path.suffix in (".py", ".c") and path.name != "__init__.py" and not named:
                unnamed.append(path.relative_to(ROOT).as_posix())
    assert not unnamed, f"modules their room's __init__ docstring does not name: {unnamed}"


def test_no_module_stands_loose_in_a_grouping_folder():
    loose = [p.relative_to(ROOT).as_posix() for group in ("bridge/frontends", "bridge/frameworks")
             for p in (ROOT / group).iterdir() if p.is_file()]
    assert not loose
    assert sorted(p.name for p in (ROOT / "bridge").glob("*.py")) == ["__init__.py", "__main__.py"]


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


def test_a_stale_folder_that_would_hide_a_room_is_refused_by_name(tmp_path, monkeypatch):
    import ptxbridge
    mapped = {name.removeprefix("ptxbridge.") for name, folder in PACKAGES.items()
              if folder.parent.parent == ROOT / "bridge"}  # bridge/frontends/X, bridge/frameworks/X
    assert set(ptxbridge._ROOMS) == mapped
    monkeypatch.setattr(ptxbridge, "__file__", str(tmp_path / "__init__.py"))
    ptxbridge._refuse_shadowing_folders()
    (tmp_path / "rust" / "__pycache__").mkdir(parents=True)  # what `git pull` leaves of bridge/rust/
    with pytest.raises(ImportError, match=r"rust left from an older checkout would hide"):
        ptxbridge._refuse_shadowing_folders()
