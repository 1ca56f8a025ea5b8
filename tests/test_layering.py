"""The house plan holds: ``abi`` imports nothing of ptxbridge but itself, ``loaders`` imports only
``abi``, and no module imports (directly or through others) a module that imports it back.

Imports are read from the source with ``ast``, function-level imports included, so a loop hidden
behind a local import counts, and so do imports under ``if TYPE_CHECKING:`` (a loop a type checker
walks is a loop in the design; modules that read a signature type it through
``abi.params.SignatureFields`` instead).  Only a package's implicit import of its parent ``__init__``
does not count (how Python finds a submodule, not a dependency the code chose).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from _packages import module_name, source_files


def _modules() -> dict[str, Path]:
    return {module_name(path): path for path in source_files()}


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The ptxbridge module ``name`` refers to (a module, or the package holding the name)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path) -> set[str]:
    if path.suffix == ".c":  # a C extension imports nothing of ptxbridge
        return set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            names = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            if name == "ptxbridge" or name.startswith("ptxbridge."):
                target = _resolve(name)
                if target is not None and target != module:
                    found.add(target)
    return found


GRAPH = {module: _imports(module, path) for module, path in MODULES.items()}


def test_the_graph_covers_every_folder():
    assert {"ptxbridge.abi.ptx", "ptxbridge.loaders.cuda", "ptxbridge.launch.module",
            "ptxbridge.loaders.emulator.machine"} <= set(GRAPH)
    assert "ptxbridge.abi.layout" in GRAPH["ptxbridge.abi.signature"]
    assert "ptxbridge.loaders.driver" in GRAPH["ptxbridge.loaders"]  # a function-level import counts


@pytest.mark.parametrize(("layer", "allowed"), [
    ("ptxbridge.abi", ("ptxbridge.abi",)),
    ("ptxbridge.loaders", ("ptxbridge.abi", "ptxbridge.loaders")),
])
def test_layers_point_one_way(layer, allowed):
    wrong = {f"{module} -> {target}" for module, targets in GRAPH.items()
             if module == layer or module.startswith(layer + ".")
             for target in targets if not any(target == a or target.startswith(a + ".") for a in allowed)}
    assert not wrong, sorted(wrong)


def _cycle() -> list[str] | None:
    """One import cycle, as the list of modules around it; None when the graph has none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(GRAPH[module]):
            if state.get(target) == 1:
                return [*path[path.index(target):], target]
            if target not in state and (found := visit(target)) is not None:
                return found
        path.pop()
        state[module] = 2
        return None

    for module in sorted(GRAPH):
        if module not in state and (found := visit(module)) is not None:
            return found
    return None


def test_no_import_cycles_local_imports_included():
    cycle = _cycle()
    assert cycle is None, " -> ".join(cycle or ())


def test_the_cycle_finder_finds_a_planted_cycle(monkeypatch):
    planted = GRAPH["ptxbridge.abi.dtypes"] | {"ptxbridge.abi.kinds"}
    monkeypatch.setitem(GRAPH, "ptxbridge.abi.dtypes", planted)
    assert _cycle() is not None


@pytest.mark.parametrize("statement", ["import ptxbridge.abi", "import ptxbridge",
                                       "import ptxbridge.abi.ptx"])
def test_importing_the_abi_or_the_package_loads_no_numpy_and_no_later_layer(statement):
    script = (f"import sys; {statement}; "
              "print(sorted(m for m in sys.modules if m == 'numpy' or m.startswith(('ptxbridge.', 'cuda'))))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          check=True)
    loaded = ast.literal_eval(done.stdout)
    assert "numpy" not in loaded
    assert all(m.startswith("ptxbridge.abi") for m in loaded if m.startswith("ptxbridge.")), loaded
    assert not any(m.startswith("cuda") for m in loaded), loaded


def test_the_lazy_names_resolve_to_what_they_name():
    import ptxbridge
    import ptxbridge.abi
    assert ptxbridge.load is ptxbridge.linker.load and ptxbridge.Signature is ptxbridge.abi.Signature
    assert callable(ptxbridge.abi.check) and callable(ptxbridge.abi.sniff)  # not their modules
    assert set(ptxbridge.abi.__all__) <= set(dir(ptxbridge.abi))
    assert set(ptxbridge.__all__) <= set(dir(ptxbridge))
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        ptxbridge.abi.nothing  # noqa: B018
