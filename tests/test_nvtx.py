"""NVTX ranges per launch (ptxbridge.launch.nvtx): off by default; on (nvtx=True or PTXBRIDGE_NVTX=1),
every launch, from the C plan or the Python path, is one push(kernel name) / pop() pair."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from test_fastlaunch import VADD, _RecordingCpu, _Size, driver, python_calls  # noqa: F401 (fixtures)

from ptxbridge.abi.errors import ToolchainError
from ptxbridge.artifacts.image import Image
from ptxbridge.launch import nvtx
from ptxbridge.launch.module import Module


@pytest.fixture
def ranges(monkeypatch):
    """An NVTX provider that records its calls."""
    calls: list[tuple] = []
    monkeypatch.setattr(nvtx, "_provider", lambda: (lambda name: calls.append(("push", name)),
                                                     lambda: calls.append(("pop",))))
    return calls


def test_off_unless_asked_for(monkeypatch, ranges):
    monkeypatch.delenv("PTXBRIDGE_NVTX", raising=False)
    assert nvtx.nvtx_ranges() is None and nvtx.nvtx_ranges(False) is None
    monkeypatch.setenv("PTXBRIDGE_NVTX", "0")
    assert nvtx.nvtx_ranges() is None
    monkeypatch.setenv("PTXBRIDGE_NVTX", "1")
    assert nvtx.nvtx_ranges() is not None and nvtx.nvtx_ranges(False) is None


def test_asking_without_a_provider_says_what_to_install(monkeypatch):
    monkeypatch.setattr(nvtx, "_provider", lambda: None)
    with pytest.raises(ToolchainError, match=r"need NVIDIA's nvtx package \(pip install nvtx\) or a CUDA"):
        Module(Image(None, "sm_90", {"vadd": VADD}), _RecordingCpu(), nvtx=True)


def test_one_range_per_launch_from_c_and_from_python(driver, python_calls, ranges):  # noqa: F811
    module = Module(Image(None, "sm_90", {"vadd": VADD}), _RecordingCpu(), nvtx=True)
    a, b = torch.zeros(4), torch.zeros(4)
    module.vadd(a, b, 4, grid=1, block=1, stream=1)  # the first call: Python builds the plan, C launches
    module.vadd(a, b, 4, grid=1, block=1, stream=1)  # from C alone
    assert len(driver) == 2 and len(python_calls) == 1
    assert ranges == [("push", "vadd"), ("pop",)] * 2
    ranges.clear()
    module.vadd(a, b, 4, grid=_Size.TWO, block=1, stream=1)  # the C plan declines, Python launches
    assert len(driver) == 2 and len(module.backend.launched) == 1
    assert ranges == [("push", "vadd"), ("pop",)]


def test_no_ranges_when_off(driver, ranges):  # noqa: F811
    module = Module(Image(None, "sm_90", {"vadd": VADD}), _RecordingCpu(), nvtx=False)
    a = torch.zeros(4)
    for _ in range(2):
        module.vadd(a, a, 4, grid=1, block=1, stream=1)
    assert len(driver) == 2 and ranges == []
