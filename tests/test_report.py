"""``ptxbridge inspect`` text output: names from the files cannot drive the terminal."""

from __future__ import annotations

import json

import pytest

from ptxbridge.abi.oxart import EntryKind, OxartBundle, OxartEntry, OxartPayload, PayloadKind, write_oxart
from ptxbridge.cli import main
from ptxbridge.cli.report import printable

EVIL = "\x1b]0;owned\x07\x1b[2J\x9b31m\u202eevil"


def test_bundle_entry_and_payload_names_are_escaped(capsys, tmp_path):
    blob = write_oxart([OxartBundle(f"crate{EVIL}", "sm_90",
                                    (OxartPayload(PayloadKind.NVVM_IR, f"lib{EVIL}.ll", b"; nothing\n"),),
                                    (OxartEntry(EntryKind.KERNEL, f"k{EVIL}"),))])
    path = tmp_path / "evil.oxart"
    path.write_bytes(blob)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert not any(c in out for c in "\x1b\x07\x9b\u202e")
    escaped = "\\x1b]0;owned\\x07\\x1b[2J\\x9b31m\\u202eevil"
    assert f"bundle crate{escaped} (target sm_90" in out
    assert f"entry kernel k{escaped}" in out and f"payload nvvm_ir lib{escaped}.ll" in out
    assert main(["inspect", "--json", str(path)]) == 0  # JSON escapes them itself
    report = json.loads(capsys.readouterr().out)
    assert report["bundles"][0]["name"] == f"crate{EVIL}"


def test_error_lines_are_escaped_too(capsys, tmp_path):
    path = tmp_path / f"bad{EVIL}.ptx"
    path.write_bytes(b".version 8.0\n.target sm_90\n.entry k(")
    assert main(["inspect", str(path)]) == 1
    err = capsys.readouterr().err
    assert "error:" in err and "\x1b" not in err and "bad\\x1b]0;owned" in err


def test_printable_keeps_ordinary_text():
    text = "kernel saxpy: 4 params, 28 bytes; é, 中文"
    assert printable(text) == text
    assert printable("a\tb\nc\x7f") == "a\\tb\\nc\\x7f"


def test_memory_access_error_is_exported_at_the_top_level():
    import numpy as np

    import ptxbridge
    import ptxbridge.nvrtc

    assert "MemoryAccessError" in ptxbridge.__all__
    module = ptxbridge.load([ptxbridge.nvrtc.compile(
        'extern "C" __global__ void k(float* y) { y[threadIdx.x + 8] = 1.0f; }', arch="sm_90")], device="cpu")
    named = r"^kernel 'k': a 4-byte write overruns argument 'y' \(4 float32, 16 bytes at 0x\w+\): 16 bytes"
    with pytest.raises(ptxbridge.MemoryAccessError, match=named):
        module.k(np.zeros(4, np.float32), grid=1, block=1)
