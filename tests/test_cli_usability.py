"""The ``ptxbridge`` command as a newcomer meets it: ``python -m ptxbridge``, ``--version``, help
without reST markup, ``FILE: error:`` lines as docs/cli.md says, the compiler's own messages for a
source that does not compile (real rustc and NVRTC), and doctor's Rust line."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from _rust_fixtures import toolchain  # noqa: F401  (a fixture)

import ptxbridge
import ptxbridge.rust as rust
from ptxbridge.cli import main
from ptxbridge.cli.doctor import run_checks
from ptxbridge.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
RUST_HEAD = ("#![no_std]\n#![feature(abi_ptx)]\n"
             "#[panic_handler] fn p(_: &core::panic::PanicInfo) -> ! { loop {} }\n")


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ptxbridge", *argv], capture_output=True, text=True,
                          timeout=120)


def test_python_m_ptxbridge_and_version():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert ptxbridge.__version__ == version
    done = _run("--version")
    assert (done.returncode, done.stdout) == (0, f"ptxbridge {version}\n")
    done = _run("cache", "nonsense")
    assert done.returncode == 2 and "invalid choice: 'nonsense'" in done.stderr


def test_help_has_no_rest_markup_and_inspect_lists_every_input(capsys):
    parser = build_parser()
    texts = [parser.format_help()]
    for action in parser._subparsers._group_actions:
        texts += [sub.format_help() for sub in action.choices.values()]
    assert len(texts) == 5
    assert not [t for t in texts if "``" in t or ":func:" in t]
    inspect_help = " ".join(texts[1].split())  # argparse wraps lines
    for kind in (".ptx", ".cubin", ".fatbin", ".ltoir", ".rs files and Rust crate folders", ".cu files",
                 "saved ptxbridge images"):
        assert kind in inspect_help
    assert "link code objects and sources into one saved image file" in texts[0]


def test_bad_rust_source_shows_rustcs_messages(tmp_path, capsys, toolchain):  # noqa: F811
    bad = tmp_path / "bad.rs"
    bad.write_text(RUST_HEAD + '#[unsafe(no_mangle)]\npub unsafe extern "ptx-kernel" fn k(x: *mut f32) '
                               "{ *x = undefined_thing; }\n")
    assert main(["inspect", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{bad}: error: compiling {bad}: rustc failed (exit status 1)\n"
                          "error[E0425]: cannot find value `undefined_thing` in this scope\n")
    assert f" --> {bad}:5:" in err and "error: aborting due to 1 previous error" in err


def test_bad_cuda_source_shows_nvrtcs_messages(tmp_path, capsys):
    bad = tmp_path / "bad.cu"
    bad.write_text('extern "C" __global__ void k(float* x) { x[0] = nope; }\n')
    assert main(["inspect", str(bad)]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith(f"{bad}: error: NVRTC failed to compile for --gpu-architecture=sm_")
    assert f'{bad}(1): error: identifier "nope" is undefined' in lines
    assert lines[-1] == f'1 error detected in the compilation of "{bad}".'


def test_error_lines_read_file_colon_error_as_the_docs_say(tmp_path, capsys):
    assert "`FILE: error: what is wrong`" in " ".join((ROOT / "docs/cli.md").read_text().split())
    broken = tmp_path / "broken.ptx"
    broken.write_text(".version 8.0\n.target sm_90\n.entry broken(.param .u64 p\n")
    missing = tmp_path / "missing.ptx"
    assert main(["inspect", str(broken), str(missing)]) == 1
    first, second = capsys.readouterr().err.splitlines()
    assert first == f"{broken}:line 4: error: expected ',' or ')' after parameter 'p' (got 'end of file')"
    assert second == f"{missing}: error: cannot read file (No such file or directory)"


def test_a_rust_kernel_without_no_mangle_is_an_error_naming_it(tmp_path, capsys, toolchain):  # noqa: F811
    source = tmp_path / "mangled.rs"
    source.write_text(RUST_HEAD + 'pub unsafe extern "ptx-kernel" fn forgot(x: *mut f32) { *x = 1.0; }\n')
    message = ("kernel 'forgot' has no #[unsafe(no_mangle)] (#[no_mangle] before edition 2024): rustc "
               "mangles its name and leaves it out of the PTX, so it could not be launched; add the "
               'attribute (or #[unsafe(export_name = "...")])')
    with pytest.raises(ptxbridge.FormatError) as info:
        rust.compile(source)
    assert str(info.value) == f"{source.resolve()}:4: {message}"
    assert main(["inspect", str(source)]) == 1
    assert capsys.readouterr().err == f"{source.resolve()}:4: error: {message}\n"


def test_doctor_prints_rustcs_version_line(toolchain):  # noqa: F811
    (rust,) = [c for c in run_checks() if c.name == "Rust (nvptx64)"]
    assert rust.ok and rust.detail == f"{toolchain.version.splitlines()[0]} ({toolchain.rustc})"
    assert "\n" not in rust.detail and rust.detail.startswith("rustc 1.")
