"""Where each ptxbridge module lives: the package-dir table of pyproject.toml, read once.

Each room inside bridge/ (``bridge/frontends/rust`` is ``ptxbridge.rust``) is its own entry, so a
file belongs to the entry whose folder holds it most closely.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {package: ROOT / folder for package, folder in
            tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].items()}


def module_name(path: Path) -> str:
    """The import name of the ptxbridge source file ``path`` (a .py file, or a C extension's .c)."""
    holders = [(package, folder) for package, folder in PACKAGES.items() if path.is_relative_to(folder)]
    package, folder = max(holders, key=lambda holder: len(holder[1].parts))
    parts = path.relative_to(folder).with_suffix("").parts
    return ".".join((package, *(p for p in parts if p != "__init__")))


def source_files() -> list[Path]:
    """Every ptxbridge source file, each once."""
    return sorted({p for folder in PACKAGES.values() for p in [*folder.rglob("*.py"), *folder.rglob("*.c")]})
