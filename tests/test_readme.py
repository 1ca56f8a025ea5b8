"""The README's code runs as written, and its error message is the real one."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

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


def test_readme_quotes_the_real_argument_error():
    quoted = re.search(r"`(saxpy: argument 'y' [^`]*)`", README).group(1)
    module = ptxbridge.load([ptxbridge.rust.compile(Path(__file__).parents[1] / "examples/kernels/scale.rs")],
                            device="cpu")
    with pytest.raises(ptxbridge.ArgumentError) as info:
        module.saxpy(2.0, np.ones(4, np.float32), np.ones(4, np.float64), 4, grid=1, block=4)
    assert str(info.value) == quoted
