"""``ptxbridge inspect / doctor / cache`` on code made by the real compilers, cross-checked with
``cuobjdump -elf`` and the compilers' own metadata."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _binary_samples import (
    EXPECTED_KPARAMS,
    archive,
    cuobjdump_elf,
    cuobjdump_kparams,
    fatbinary,
    host_object_with_c_section,
    ltoir,
    nvcc_object,
    oxart_bundles,
    ptx,
    ptxas,
    tile_cubin,
)
from _rust_fixtures import RUST_DIR, toolchain  # noqa: F401 (a fixture)
from numba import cuda, float32

from ptxbridge.abi.manifest import dumps
from ptxbridge.abi.oxart import write_oxart
from ptxbridge.abi.signature import Signature
from ptxbridge.cli import main

NUMBA_PARAMS = 1 + (5 + 2 * 1) + (5 + 2 * 2)  # f32, then 1-D and 2-D arrays (docs/conventions.md, numba)


def axpy(a, x, y):
    i = cuda.grid(1)
    if i < x.size:
        y[i, 0] = a * x[i] + y[i, 0]


def scale_add(x, y):
    return x * 2 + y


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PTXBRIDGE_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cli")


@pytest.fixture(scope="module")
def numba_files(work) -> tuple[Path, Path]:
    """A numba-ABI kernel and a C-ABI device function, named through ``abi_info``."""
    kernel, _ = cuda.compile(axpy, (float32, float32[::1], float32[:, :]), device=False, abi="numba",
                             cc=(9, 0), output="ptx", abi_info={"abi_name": "axpy"})
    device, _ = cuda.compile(scale_add, float32(float32, float32), device=True, abi="c", cc=(9, 0),
                             output="ptx", abi_info={"abi_name": "scale_add"})
    (work / "axpy.ptx").write_text(kernel)
    (work / "scale_add.ptx").write_text(device)
    return work / "axpy.ptx", work / "scale_add.ptx"


def inspect_json(capsys, *args: str) -> tuple[int, object]:
    code = main(["inspect", "--json", *map(str, args)])
    return code, json.loads(capsys.readouterr().out)


def layout(kernel: dict) -> list[tuple[int, int, int]]:
    return [(i, p["offset"], p["size"]) for i, p in enumerate(kernel["params"])]


def test_numba_ptx_layout_matches_ptxas_kparams(capsys, work, numba_files):
    code, (kernel_report, device_report) = inspect_json(capsys, *numba_files)
    assert code == 0
    assert kernel_report["format"] == "ptx" and kernel_report["target"] == ["sm_90"]
    (kernel,) = kernel_report["kernels"]
    assert kernel["name"] == "axpy" and len(kernel["params"]) == NUMBA_PARAMS
    assert [p["type"] for p in kernel["params"][:2]] == ["f32", "u64"]
    assert kernel["param_size"] == 8 + (NUMBA_PARAMS - 1) * 8
    cubin = work / "axpy.cubin"
    cubin.write_bytes(ptxas(work, numba_files[0].read_bytes(), "sm_90", name="axpy"))
    assert cuobjdump_kparams(cuobjdump_elf(cubin))["axpy"] == layout(kernel)
    (func,) = device_report["functions"]
    assert (func["name"], func["linkage"], layout(func)) == ("scale_add", "visible", [(0, 0, 4), (1, 4, 4)])
    assert [r["type"] for r in func["returns"]] == ["b32"]  # the C ABI returns bits


def test_signatures_file_checked_and_mismatch_reported(capsys, work, numba_files):
    good = work / "good.sig"
    good.write_text("#[convention(c)] device fn scale_add(x: f32, y: f32) -> f32\n")
    code, report = inspect_json(capsys, numba_files[1], "--signatures", good)
    (func,) = report["functions"]
    assert code == 0 and report["ok"] and func["check"] == "ok" and func["signature_source"] == "given"
    assert func["signature"] == str(Signature.parse(good.read_text()))

    bad = work / "bad.json"
    bad.write_text(dumps([Signature.parse("device fn scale_add(x: f64, y: f32) -> f32"),
                          Signature.parse("kernel missing(n: u32)")]))
    code, report = inspect_json(capsys, numba_files[1], "--signatures", bad)
    (func,) = report["functions"]
    assert code == 1 and report["ok"] is False
    assert "scale_add" in func["check"] and "'x'" in func["check"]
    assert report["unmatched_signatures"] == ["missing"]
    main(["inspect", str(numba_files[1]), "--signatures", str(bad)])
    text = capsys.readouterr().out
    assert "check      scale_add" in text and "signatures given for no code here: missing" in text


def test_sidecar_signature_next_to_the_file(capsys, work, numba_files):
    (work / "scale_add.ptx.sig").write_text("device fn scale_add(x: f32, y: u32) -> f32\n")
    try:
        code, report = inspect_json(capsys, numba_files[1])
    finally:
        (work / "scale_add.ptx.sig").unlink()
    assert code == 0  # u32 and f32 are both 4 bytes: layouts compare offsets and sizes only
    assert report["functions"][0]["signature"].endswith("scale_add(x: f32, y: u32) -> f32")


def test_tileiras_cubin_kernels_signatures_and_kparams(capsys, work):
    path = work / "vadd.cubin"
    path.write_bytes(tile_cubin("sm_90"))
    code, report = inspect_json(capsys, path)
    assert code == 0 and report["format"] == "cubin" and report["arch"] == "sm_90a"  # tileiras: sm_90a
    assert report["language"] == "tileir" and report["embedded_ptx"] is True
    kparams = cuobjdump_kparams(cuobjdump_elf(path))
    assert {k["name"] for k in report["kernels"]} == set(kparams) and len(kparams) == 2
    for kernel in report["kernels"]:
        assert [(p["ordinal"], p["offset"], p["size"]) for p in kernel["params"]] == kparams[kernel["name"]]
        assert kernel["param_size"] == max(p["offset"] + p["size"] for p in kernel["params"])
        assert kernel["signature_source"] == "cutile-name" and kernel["check"] == "ok"
        assert kernel["signature"].startswith("#[convention(cutile)]")


def test_fatbin_children_agree_with_the_source_and_cuobjdump(capsys, work):
    ptx90 = ptx("sm_90")
    cubin = ptxas(work, ptx90, "sm_90", name="fat")
    path = work / "k.fatbin"
    path.write_bytes(fatbinary(work, [("elf", "90", cubin), ("ptx", "90", ptx90), ("nvvm", "90", ltoir())],
                               "--compress=false", name="k"))
    code, report = inspect_json(capsys, path)
    assert code == 0 and report["format"] == "fatbin" and not report["host_elf"]
    elf, text, lto = report["children"]
    assert [(c["image"]["kind"], c["image"]["arch"]) for c in report["children"]] == [
        ("elf", "sm_90"), ("ptx", "sm_90"), ("ltoir", "sm_90")]
    assert cuobjdump_kparams(cuobjdump_elf(path)) == {
        k["name"]: [(p["ordinal"], p["offset"], p["size"]) for p in k["params"]] for k in elf["kernels"]}
    assert {k["name"]: layout(k) for k in text["kernels"]} == EXPECTED_KPARAMS
    assert "nvJitLink" in lto["note"]
    saxpy = next(k for k in elf["kernels"] if k["name"] == "saxpy")
    assert saxpy["maxntid"] == [256, 1, 1] and saxpy["registers"]


def test_oxart_host_object_lists_bundles_and_payloads(capsys, work):
    ptx80 = ptx("sm_80")
    blob = write_oxart(oxart_bundles(ptx80, ptxas(work, ptx80, "sm_80", name="ox"), ltoir()))
    path = work / "host.o"
    path.write_bytes(host_object_with_c_section(work, blob))
    code, report = inspect_json(capsys, path)
    assert code == 0 and report["format"] == "oxart"
    first, lto, debug = report["bundles"]
    assert (first["name"], first["target"]) == ("vecadd_crate", "sm_80")
    assert [c["payload"]["kind"] for c in first["children"]] == ["ptx", "cubin"]
    assert {k["name"] for k in first["children"][1]["kernels"]} == set(EXPECTED_KPARAMS) - {"clustered"}
    assert first["entries"][2] == {"kind": "device_function", "symbol": "exported_fn",
                                   "metadata": 0xDEADBEEF00000001}
    assert lto["options"] == {"no_fma": True, "line_tables": True, "debug": False}
    assert [c["format"] for c in lto["children"]] == ["ltoir", "nvvm"]
    assert debug["options"]["debug"] is True
    assert (first["loads"], lto["loads"]) == ("cubin", "nvvm_ir")  # cuda-host: cubin > PTX > NVVM IR > LTO-IR
    main(["inspect", str(path)])
    out = capsys.readouterr().out
    assert "bundle lto_crate (target sm_90, no_fma, line_tables, loads nvvm_ir)" in out
    assert "a crate with generic kernels loads the PTX of vecadd_crate" in out


def test_rust_file_shows_its_signature(capsys, toolchain):  # noqa: F811 (the fixture)
    assert main(["inspect", str(RUST_DIR / "saxpy.rs")]) == 0
    out = capsys.readouterr().out
    assert "signature  #[convention(c)] kernel saxpy(a: f32, x: *const f32, y: *mut f32, n: u64)" in out
    assert "check      ok" in out
    block = out[out.index("kernel saxpy:"):]
    rows = [line.split() for line in block.splitlines()[2:6]]
    assert [(r[2], r[3], r[4]) for r in rows] == [("f32", "0", "4"), ("u64", "8", "8"), ("u64", "16", "8"),
                                                  ("u64", "24", "8")]


def test_cuda_source_compiled_with_nvrtc(capsys, work):
    source = work / "scale.cu"
    source.write_text('extern "C" __global__ void scale(float* x, float k, int n) { x[0] *= k + n; }\n')
    code, report = inspect_json(capsys, source)
    (kernel,) = report["kernels"]
    assert code == 0 and report["compiled_from"]["compiler"] == "nvrtc"
    assert kernel["signature"].endswith("kernel scale(x: *mut f32, k: f32, n: i32)")
    assert layout(kernel) == [(0, 0, 8), (1, 8, 4), (2, 12, 4)] and kernel["check"] == "ok"


def test_bad_files_name_the_file_and_exit_1(capsys, work):
    garbage = work / "garbage.bin"
    garbage.write_bytes(os.urandom(64).replace(b"\x7f", b"x"))
    truncated = work / "cut.cubin"
    truncated.write_bytes(ptxas(work, ptx("sm_90"), "sm_90", name="cut")[:300])
    missing = work / "nope.ptx"
    assert main(["inspect", str(garbage), str(truncated), str(missing), str(RUST_DIR / "../nothing")]) == 1
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 4 and all("error:" in line for line in lines) and captured.out == ""
    for line, path in zip(lines, (garbage, truncated, missing), strict=False):
        assert str(path) in line
    assert "unrecognised code object" in lines[0] and "No such file" in lines[2]


def test_console_script_and_ltoir(work):
    lto = work / "k.ltoir"
    lto.write_bytes(ltoir())
    garbage = work / "junk.ptx"
    garbage.write_text(".version 8.0\n.target sm_90\n.entry broken(.param .u64 p\n")
    script = Path(sys.executable).parent / "ptxbridge"
    done = subprocess.run([str(script), "inspect", str(lto), str(garbage)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"{lto}: ltoir" in done.stdout and "nvJitLink" in done.stdout
    assert f"{garbage}:" in done.stderr.splitlines()[-1] and "error:" in done.stderr


def test_doctor_json_and_cache_info(capsys, tmp_path):
    assert main(["doctor", "--json"]) == 0
    checks = json.loads(capsys.readouterr().out)
    assert all(set(c) == {"name", "ok", "detail", "hint"} for c in checks)
    names = {c["name"] for c in checks}
    assert {"CUDA driver", "nvJitLink", "NVRTC", "libNVVM", "numba-cuda", "tileiras"} <= names
    assert next(c for c in checks if c["name"] == "NVRTC")["ok"] is True
    (tmp_path / "cache" / "x").mkdir(parents=True)
    (tmp_path / "cache" / "x" / "entry").write_bytes(b"z" * 2_000_000)
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{tmp_path / 'cache'}: ") and "2.0 MB" in out


def test_containers_nested_in_containers_are_refused_not_followed(capsys, work):
    from ptxbridge.abi.oxart import OxartBundle, OxartPayload, PayloadKind

    blob = write_oxart([OxartBundle("inner", "sm_90", ())])
    for depth in range(50):  # each level hides the previous blob in a "cubin" payload
        blob = write_oxart([OxartBundle(f"level{depth}", "sm_90",
                                        (OxartPayload(PayloadKind.CUBIN, "k", blob),))])
    nested = work / "nested.oxart"
    nested.write_bytes(blob)
    assert main(["inspect", str(nested)]) == 1
    err = capsys.readouterr().err
    assert "oxart inside a container is not read" in err and "Traceback" not in err


def test_a_static_library_lists_its_members_and_their_fatbins(capsys, work):
    source = 'extern "C" __global__ void first(float* x, int n) { if (threadIdx.x < n) x[0] = n; }\n'
    rdc = nvcc_object(work, source, "-arch=sm_90", name="rdc")  # sm_90 SASS and compute_90 PTX
    path = work / "libmixed.a"
    path.write_bytes(archive(work, {"rdc.o": rdc, "notes.txt": b"not code", "inner.a": b"!<arch>\n"},
                             name="mixed"))
    code, report = inspect_json(capsys, path)
    assert code == 0 and report["format"] == "library"
    obj, text, inner = report["children"]
    assert [c["member"]["name"] for c in report["children"]] == ["rdc.o", "notes.txt", "inner.a"]
    assert obj["format"] == "fatbin" and obj["host_elf"]
    assert {c["image"]["kind"] for c in obj["children"]} == {"elf", "ptx"}
    assert all([k["name"] for k in c["kernels"]] == ["first"] for c in obj["children"])
    assert text["format"] == "unread" and "unrecognised code object" in text["note"]
    assert inner["format"] == "unread" and "inside an archive is not read" in inner["note"]
    assert main(["inspect", str(path)]) == 0
    assert "member rdc.o at 0x" in capsys.readouterr().out


def test_doctor_json_into_a_closed_pipe_is_no_traceback():
    """``ptxbridge doctor --json | head`` ended in a BrokenPipeError traceback: the reader left first."""
    script = Path(sys.executable).parent / "ptxbridge"
    with subprocess.Popen([str(script), "doctor", "--json"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as done:
        done.stdout.close()  # before the probes finish: every write meets a closed pipe
        err = done.stderr.read().decode()
        assert done.wait(timeout=120) == 0 and "Traceback" not in err and "BrokenPipe" not in err, err


def test_doctor_lists_the_c_extensions_and_finds_libnvvm(capsys, tmp_path):
    from ptxbridge.cli.doctor import toolkit_libnvvm
    from ptxbridge.launch import fastpath

    assert main(["doctor", "--json"]) == 0
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)}
    fast = checks["C extension _fastlaunch"]
    named = {"C extension _native", "C extension _threads", "C extension _xla_ffi"}
    assert fast["ok"] is (fastpath._fastlaunch is not None) and named <= set(checks)
    from ptxbridge.loaders.emulator.compiled import blocks

    assert checks["C extension _threads"]["ok"] is (blocks._threads is not None)
    if fast["ok"]:
        assert Path(fast["detail"]).is_file() and "_fastlaunch" in fast["detail"]
    from cuda.bindings import nvvm

    major, minor = nvvm.version()
    assert checks["libNVVM"]["ok"] and checks["libNVVM"]["detail"].startswith(f"{major}.{minor} (")
    toolkit = tmp_path / "cuda"
    (toolkit / "nvvm" / "lib64").mkdir(parents=True)
    assert toolkit_libnvvm([tmp_path / "none", toolkit]) is None
    (toolkit / "nvvm" / "lib64" / "libnvvm.so.4").write_bytes(b"")
    assert toolkit_libnvvm([tmp_path / "none", toolkit]) == toolkit / "nvvm" / "lib64" / "libnvvm.so.4"


def test_the_documented_report_formats_are_the_ones_inspect_writes():
    import re

    from ptxbridge.cli import inspect as inspect_module

    doc = (Path(__file__).parents[1] / "docs" / "cli.md").read_text()
    listed = set(re.findall(r"`(\w+)`", re.search(r"`format` \(([^)]*)\)", doc)[1]))
    source = Path(inspect_module.__file__).read_text()
    written = set(re.findall(r'"format": "(\w+)"', source)) - {"unread"} | set(inspect_module._NO_KERNELS)
    assert listed == written and "image" in listed
