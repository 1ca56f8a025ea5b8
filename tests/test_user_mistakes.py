"""Mistakes a newcomer makes with files: PTX passed as a str, and signature sidecars.

A sidecar is named after the whole file name (``k.ptx.sig``, ``k.ptx.json``), so the PTX reader's own
golden file ``edge_cases.json`` next to ``edge_cases.ptx`` is never taken for signatures.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import ptxbridge
from ptxbridge import nvrtc
from ptxbridge.abi.errors import ArgumentError
from ptxbridge.abi.manifest import dumps
from ptxbridge.abi.signature import Signature
from ptxbridge.cli.inspect import inspect_path

FIXTURES = Path(__file__).parent / "fixtures" / "ptx"
SCALE = 'extern "C" __global__ void scale(float* x, float k) { x[threadIdx.x] *= k; }'


def test_ptx_text_as_a_str_loads_and_other_text_says_what_to_pass():
    ptx = nvrtc.compile(SCALE, arch="sm_90").code.decode()
    module = ptxbridge.load([ptx], device="cpu")  # layout-only parameters: raw bytes per parameter
    given = ptxbridge.Artifact.from_file(ptx, "kernel scale(x: *mut f32, k: f32)")
    typed = ptxbridge.load([given], device="cpu")
    x = typed.to_device(np.ones(4, np.float32))
    typed.scale(x, 3.0, grid=1, block=4)
    np.testing.assert_array_equal(typed.to_host(x), np.full(4, 3.0, np.float32))
    assert module.kernel_names == ("scale",) and repr(ptxbridge.Artifact.from_file(ptx)).startswith(
        "<ptxbridge.Artifact '<PTX text>': ptx for sm_90, ")
    with pytest.raises(ArgumentError) as info:
        ptxbridge.load(["int main() {\n  return 0;\n}\n"], device="cpu")
    assert str(info.value) == ("got a str of 27 characters with line breaks, which is neither a file name "
                               "nor PTX text (starts 'int main() {\\n  return 0;\\n}\\n'); pass PTX as str, "
                               "other code as bytes, or a path")


def test_the_ptx_readers_golden_json_is_not_a_sidecar(capsys):
    assert (FIXTURES / "edge_cases.json").is_file()  # the reader test's expected output, beside the PTX
    artifact = ptxbridge.Artifact.from_file(FIXTURES / "edge_cases.ptx")
    kernel_b = "#[convention(c)] #[maxntid(256)] #[cluster(4, 2)] kernel kernel_b()"
    assert str(artifact.kernels["kernel_b"]) == kernel_b
    report = inspect_path(FIXTURES / "edge_cases.ptx")
    assert report["sidecar_error"] is None and report["ok"] is True


def test_sidecars_are_named_after_the_whole_file_name(tmp_path):
    ptx = tmp_path / "k.ptx"
    ptx.write_bytes(nvrtc.compile(SCALE, arch="sm_90").code)
    typed = Signature.parse("kernel scale(x: *mut f32, k: f32)")
    (tmp_path / "k.json").write_text(json.dumps({"some": "other tool's file"}))
    (tmp_path / "k.sig").write_text("kernel scale(x: *mut i32, k: i32)\n")  # a stem name: not read either
    assert str(ptxbridge.Artifact.from_file(ptx).kernels["scale"]) == (
        "#[convention(c)] kernel scale(p0: opaque<8, align 8>, p1: opaque<4, align 4>)")
    (tmp_path / "k.ptx.json").write_text(dumps([typed]))
    assert ptxbridge.Artifact.from_file(ptx).kernels["scale"] == typed
    (tmp_path / "k.ptx.json").unlink()
    (tmp_path / "k.ptx.sig").write_text(str(typed))
    assert ptxbridge.Artifact.from_file(ptx).kernels["scale"] == typed
    shutil.copy(ptx, tmp_path / "k2.ptx")
    assert inspect_path(tmp_path / "k2.ptx")["kernels"][0]["signature"] is None
