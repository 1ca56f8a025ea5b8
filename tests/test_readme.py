"""The README's code runs as written, its error message is the real one, its two opening commands are
the ones CI runs and do what they say, and every extra it lists is what pyproject.toml defines."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
from _packages import module_name, source_files

import ptxbridge
import ptxbridge.rust

README = (Path(__file__).parents[1] / "README.md").read_text()


def test_readme_python_block_runs(monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("numba.cuda")
    (block,) = re.findall(r"```python\n(.*?)```", README, re.S)
    monkeypatch.chdir(Path(__file__).parents[1])
    monkeypatch.setenv("PTXBRIDGE_DEVICE", "cpu")
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    y = namespace["module"].to_host(namespace["y"])
    np.testing.assert_array_equal(y, np.full(1024, 9.0, np.float32))  # (2*1 + 1)**2


def test_readme_quotes_the_real_argument_errors():
    quoted = re.search(r"`(saxpy: argument 'y' [^`]*)`", README).group(1)
    module = ptxbridge.load([ptxbridge.rust.compile(Path(__file__).parents[1] / "examples/kernels/scale.rs")],
                            device="cpu")
    with pytest.raises(ptxbridge.ArgumentError) as info:
        module.saxpy(2.0, np.ones(4, np.float32), np.ones(4, np.float64), 4, grid=1, block=4)
    assert str(info.value) == quoted
    call = re.search(r"`(saxpy: grid= is required; [^`]*)`", README).group(1)
    with pytest.raises(ptxbridge.ArgumentError) as info:
        module.saxpy(2.0, np.ones(4, np.float32), np.ones(4, np.float32), 4, block=4)
    assert str(info.value) == call


# --- the two commands the README opens with, and what they install --------------------------------

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _command_lines(path: Path) -> list[str]:
    lines = path.read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_the_readme_opens_with_two_commands_and_ci_runs_the_second():
    block = re.match(r"# ptxbridge\n\n```sh\n(.*?)```\n", README, re.S)
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert commands == ["scripts/quickstart", "scripts/test"]
    for command in commands:
        assert os.access(ROOT / command, os.X_OK)
        lines = _command_lines(ROOT / command)
        assert any(line.startswith("scripts/setup") for line in lines[:-1])  # each sets itself up first
    assert _command_lines(ROOT / ".ci/run")[-1] == "exec scripts/test"
    assert "torch==2.13.0" in (ROOT / "scripts/setup").read_text()  # CI's CPU torch, on this machine's disk


def test_every_extra_is_documented_and_all_takes_every_other_one():
    extras = PYPROJECT["project"]["optional-dependencies"]
    documented = set(re.findall(r"^\| `([\w-]+)` \|", README, re.M))
    assert set(extras) <= documented, f"extras missing from the README's table: {set(extras) - documented}"
    (everything,) = extras["all"]
    assert everything.startswith("ptxbridge[")
    assert set(extras) - {"all", "test"} <= set(everything.removeprefix("ptxbridge[").rstrip("]").split(","))


def test_the_package_list_holds_every_package_folder():
    found = {module_name(init) for init in source_files() if init.name == "__init__.py"}
    assert set(PYPROJECT["tool"]["setuptools"]["packages"]) == found


def _setup_done() -> bool:
    done = subprocess.run([str(ROOT / "scripts/setup"), "--check"], capture_output=True, timeout=60)
    return done.returncode == 0


def test_the_quickstart_command_runs_on_a_set_up_checkout():
    if not _setup_done():
        pytest.skip("scripts/setup has not run for this checkout (scripts/test does it)")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    env.pop("PTXBRIDGE_DEVICE", None)
    done = subprocess.run([str(ROOT / "scripts/quickstart")], capture_output=True, text=True, timeout=300,
                          cwd="/", env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert re.fullmatch(r"ptxbridge setup: \.venv is up to date \(ptxbridge\[all\], (cpu|gpu)\)", lines[0])
    assert lines[-1].startswith("saxpy then square on 4096 floats: matches NumPy")


@pytest.mark.parametrize(("example", "hidden", "message"), [
    ("quickstart.py", "numba", "quickstart: the numba kernel needs numba-cuda: pip install '.[numba]' in the "
                               "ptxbridge checkout (or run scripts/quickstart, which installs every extra)"),
    ("pipeline.py", "cuda.tile", "pipeline: needs numba-cuda and cuda-tile (no module 'cuda.tile'): pip "
                                 "install '.[numba,tile]' in the ptxbridge checkout (or run "
                                 "scripts/quickstart, which installs every extra)"),
])
def test_an_example_whose_frontend_is_missing_names_the_extra(example, hidden, message):
    # sys.modules[name] = None makes ``import name`` raise ImportError, as after a plain `pip install .`
    script = (f"import runpy, sys; sys.modules[{hidden!r}] = None; "
              f"runpy.run_path({str(ROOT / 'examples' / example)!r}, run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (1, "", message + "\n")


@pytest.mark.slow
def test_an_installed_ptxbridge_runs_the_quickstart_from_another_folder(tmp_path):
    # `pip install '.[all]'` installs the extras too; here they are this interpreter's already
    pytest.importorskip("setuptools", minversion="77")  # builds without isolation: a license= string needs 77
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(site), str(ROOT)], check=True, capture_output=True, timeout=300)
    shutil.copytree(ROOT / "examples", tmp_path / "elsewhere" / "examples")
    env = {**os.environ, "PYTHONPATH": str(site), "CUDA_VISIBLE_DEVICES": ""}
    env.pop("PTXBRIDGE_DEVICE", None)
    done = subprocess.run([sys.executable, "-c", "import ptxbridge; print(ptxbridge.__file__)"], env=env,
                          capture_output=True, text=True, timeout=60, cwd=tmp_path / "elsewhere")
    assert done.stdout.strip() == str(site / "ptxbridge" / "__init__.py")
    done = subprocess.run([sys.executable, "examples/quickstart.py"], env=env, capture_output=True, text=True,
                          timeout=300, cwd=tmp_path / "elsewhere")
    assert done.returncode == 0, done.stderr
    assert "saxpy then square on 4096 floats: matches NumPy" in done.stdout
