"""Saved images (docs/image-format.md): Image.save / Image.open on images linked by nvJitLink from
NVRTC code, the format as documented, every bad file a FormatError (fuzzed), the arch check at load,
and ``ptxbridge link -o`` / ``inspect`` on the command line."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct

import _rust_fixtures
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ptxbridge
from ptxbridge import nvrtc
from ptxbridge.abi.errors import AbiMismatchError, ArgumentError, CudaError, FormatError
from ptxbridge.abi.image_file import read_image_file
from ptxbridge.cli import main
from ptxbridge.loaders import cubin_runs_on
from ptxbridge.loaders.driver import driver_problem

toolchain, sysroot = _rust_fixtures.toolchain, _rust_fixtures.sysroot  # session fixtures
SOURCE = r"""
struct Pair { float scale; int shift; };
extern "C" __device__ float twice(float v) { return 2.0f * v; }
extern "C" __global__ void add_one(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = twice(0.5f) * x[i] + 1.0f;
}
extern "C" __global__ void affine(Pair p, float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = p.scale * x[i] + p.shift;
}
"""


@pytest.fixture(scope="module")
def image() -> ptxbridge.Image:
    return ptxbridge.link([nvrtc.compile(SOURCE, arch="sm_90")], arch="sm_90")


@pytest.fixture(scope="module")
def saved(image) -> bytes:
    return image.to_bytes()


def _parts(data: bytes) -> tuple[dict, bytes]:
    """(header, payload) of a saved image, read as docs/image-format.md lays it out."""
    magic, version, size, digest = struct.unpack_from("<8sII32s", data)
    assert (magic, version, digest) == (b"\x89PTXBIMG", 3, hashlib.sha256(data[48:]).digest())
    return json.loads(data[48:48 + size]), data[48 + size:]


def _build(header: dict, payload: bytes, version: int = 3) -> bytes:
    """A file with a valid checksum around ``header`` and ``payload`` (to reach the checks past it)."""
    body = json.dumps(header).encode() + payload
    size = len(body) - len(payload)
    return struct.pack("<8sII32s", b"\x89PTXBIMG", version, size, hashlib.sha256(body).digest()) + body


def test_save_then_open_gives_the_same_image_and_runs(image, tmp_path):
    path = image.save(tmp_path / "k.ptxb")
    opened = ptxbridge.Image.open(path)
    assert (opened.cubin, opened.arch, opened.ptx) == (image.cubin, "sm_90", image.ptx)
    assert dict(opened.kernels) == dict(image.kernels) and set(opened.kernels) == {"add_one", "affine"}
    assert dict(opened.device_functions) == dict(image.device_functions)
    assert "twice" in opened.device_functions
    module = opened.load("cpu")
    x = module.to_device(np.arange(8, dtype=np.float32))
    module.affine({"scale": 3.0, "shift": -1}, x, 8, grid=1, block=8)
    module.add_one(x, 8, grid=1, block=8)
    np.testing.assert_array_equal(module.to_host(x), 3.0 * np.arange(8) - 1 + 1)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_a_saved_image_has_the_mode_the_umask_gives(image, tmp_path, umask):
    """Images were written 0600 whatever the umask (a temporary file's mode), though they are meant
    to be shipped; they get what ``open()`` gives a new file, as ``ptxbridge link -o`` does too."""
    source = tmp_path / "k.cu"
    source.write_text(SOURCE)
    previous = os.umask(umask)
    try:
        path = image.save(tmp_path / "k.ptxb")
        assert main(["link", str(source), "-o", str(tmp_path / "cli.ptxb"), "--arch", "sm_90"]) == 0
    finally:
        os.umask(previous)
    for saved in (path, tmp_path / "cli.ptxb"):
        assert stat.S_IMODE(saved.stat().st_mode) == 0o666 & ~umask


def test_the_file_is_laid_out_as_documented(image, saved):
    header, payload = _parts(saved)
    assert set(header) == {"arch", "sections", "signatures", "created_by", "unusable", "cpu_unavailable",
                           "name_expressions"}
    assert header["unusable"] == header["cpu_unavailable"] == {}  # every kernel usable, each has PTX
    assert header["name_expressions"] == {}  # extern "C" kernels: no name expressions
    assert header["arch"] == "sm_90" and header["created_by"].startswith("ptxbridge")
    assert header["sections"] == [{"kind": "cubin", "size": len(image.cubin), "arch": "sm_90"},
                                  {"kind": "ptx", "size": len(image.ptx[0])}]
    assert payload == image.cubin + image.ptx[0]
    assert header["signatures"]["ptxbridge_manifest"] == 1
    assert sorted((s["name"], s["kind"]) for s in header["signatures"]["signatures"]) == [
        ("add_one", "kernel"), ("affine", "kernel"), ("twice", "device")]
    start = len(saved) - len(payload)
    assert read_image_file(saved).offsets == (start, start + len(image.cubin))


def test_reprs_are_one_line(image):
    artifact = nvrtc.compile(SOURCE, arch="sm_90")
    assert repr(artifact) == (f"<ptxbridge.Artifact '<source>': ptx for sm_90, {len(artifact.code)} bytes, "
                              "kernels: add_one, affine; device functions: twice>")
    assert set(image.kernels) == {"add_one", "affine"}  # in the cubin's order
    assert repr(image) == (f"<ptxbridge.Image cubin for sm_90, {len(image.cubin)} bytes, kernels: "
                           f"{', '.join(image.kernels)}; 1 PTX module for the CPU loader>")
    many = ptxbridge.Image(None, None, {f"k{i}": image.kernels["add_one"] for i in range(9)}, ptx=(b"x",) * 2)
    assert repr(many) == ("<ptxbridge.Image PTX for any arch, 2 bytes, kernels: k0, k1, k2, k3, k4, k5, ... "
                          "(9 in all); 2 PTX modules for the CPU loader>")


CORRUPT = ("checksum mismatch: the file is corrupt or truncated (the SHA-256 of bytes 48.. is not the one "
           "recorded at byte 16); save the image again")


@pytest.mark.parametrize(("mangle", "message"), [
    (lambda d: d[:10], "<f>: truncated: a ptxbridge image file is at least 48 bytes (got 10)"),
    (lambda d: b"\x7fELF" + d[4:], r"<f>: not a ptxbridge image file (starts with b'\x7fELFBIMG', expected "
                                   r"b'\x89PTXBIMG')"),
    (lambda d: d[:8] + struct.pack("<I", 4) + d[12:],
     "<f>:8: image format version 4 is not supported (this ptxbridge reads versions 1 to 3) (written by a "
     "newer ptxbridge: upgrade to read it)"),
    (lambda d: d[:-1], f"<f>: {CORRUPT}"),
    (lambda d: d[:100] + bytes([d[100] ^ 1]) + d[101:], f"<f>: {CORRUPT}"),
])
def test_damaged_files_are_format_errors(saved, mangle, message):
    with pytest.raises(FormatError) as info:
        ptxbridge.Image.from_bytes(mangle(saved), "<f>")
    assert str(info.value) == message


@pytest.mark.parametrize(("edit", "message"), [
    (lambda h, p: ({**h, "extra": 1}, p),
     "<f>:header.$: unknown key 'extra' (keys: arch, cpu_unavailable, created_by, name_expressions, "
     "sections, signatures, unusable)"),
    (lambda h, p: ({k: v for k, v in h.items() if k != "arch"}, p),
     "<f>:header.$: missing key 'arch' (keys: arch, cpu_unavailable, created_by, name_expressions, "
     "sections, signatures, unusable)"),
    (lambda h, p: ({k: v for k, v in h.items() if k != "unusable"}, p),
     "<f>:header.$: missing key 'unusable' (keys: arch, cpu_unavailable, created_by, name_expressions, "
     "sections, signatures, unusable)"),
    (lambda h, p: ({**h, "cpu_unavailable": {"k": 1}}, p),
     "<f>:header.cpu_unavailable: must be an object of kernel name -> reason string (got {'k': 1})"),
    (lambda h, p: ({**h, "name_expressions": {"f<1>": 2}}, p),
     "<f>:header.name_expressions: must be an object of name expression -> kernel symbol string (got "
     "{'f<1>': 2})"),
    (lambda h, p: ({**h, "name_expressions": {"f<1>": "_Z1fILi1EEvv"}}, p),
     "<f>:header.name_expressions: names no kernel of the image (got '_Z1fILi1EEvv')"),
    (lambda h, p: ({**h, "arch": "gfx90a"}, p),
     "<f>:header.arch: must be null or look like 'sm_90' or 'sm_90a' (got 'gfx90a')"),
    (lambda h, p: (h, p + b"x"), "<f>:header.sections: sections cover 0 bytes but 1 follow the header"),
    (lambda h, p: ({**h, "sections": [{"kind": "cubin", "size": 4, "arch": "sm_90"}] * 2}, b"\0" * 8),
     "<f>:header.sections[1]: a second cubin for sm_90 (an image has one per target)"),
    (lambda h, p: ({**h, "sections": [{"kind": "elf", "size": 0}]}, b""),
     "<f>:header.sections[0].kind: must be one of cubin, ptx (got 'elf')"),
    (lambda h, p: ({**h, "sections": [{"kind": "ptx", "size": -1}]}, b""),
     "<f>:header.sections[0].size: must be an integer from 0 to the 0 bytes left (got -1)"),
])
def test_headers_that_break_the_format_are_format_errors(saved, edit, message):
    header, payload = _parts(saved)
    header["sections"], payload = [], b""  # most cases start from an image with no sections
    with pytest.raises(FormatError) as info:
        read_image_file(_build(*edit(header, payload)), "<f>")
    assert str(info.value) == message


@pytest.mark.usefixtures("sysroot")
def test_unusable_and_cpu_unavailable_kernels_survive_save_and_open(tmp_path):
    """A Rust kernel no signature can be made for, and NVRTC kernels that come only as a (relocatable)
    cubin: the saved image keeps why, so the opened one refuses them with the same words."""
    import ptxbridge.rust as prust

    rust = prust.compile("#![no_std]\n#![feature(abi_ptx)]\n"
                         "#[panic_handler]\nfn p(_: &core::panic::PanicInfo) -> ! { loop {} }\n"
                         "#[unsafe(no_mangle)]\n#[allow(improper_ctypes_definitions)]\n"
                         "pub unsafe extern \"ptx-kernel\" fn k(x: Option<u32>) {}\n"
                         "#[unsafe(no_mangle)]\npub unsafe extern \"ptx-kernel\" fn ok(x: u32) {}\n",
                         progress=False)
    image = ptxbridge.link([rust, nvrtc.compile(SOURCE, arch="sm_90", output="cubin")], arch="sm_90")
    assert set(image.unusable) == {"k"} and set(image.cpu_unavailable) == {"add_one", "affine"}
    opened = ptxbridge.Image.open(image.save(tmp_path / "facts.ptxb"))
    assert dict(opened.unusable) == dict(image.unusable)
    assert dict(opened.cpu_unavailable) == dict(image.cpu_unavailable)
    assert opened.to_bytes()[48:] == image.to_bytes()[48:]  # the same file again (created_by included)
    with pytest.raises(AbiMismatchError) as info:
        opened.load("cpu")["k"]
    assert str(info.value) == image.unusable["k"]


def _before_version_3(header: dict) -> dict:
    """``header`` as versions 1 and 2 wrote it: no arch in the (one) cubin section."""
    return {**header, "sections": [{k: v for k, v in e.items() if k != "arch"} for e in header["sections"]]}


def test_a_version_2_file_still_opens(image, saved):
    """Version 2 had no name_expressions key: such a file reads with none, and a version 2 header
    that has one is refused as version 2 always refused it."""
    header, payload = _parts(saved)
    header = _before_version_3(header)
    del header["name_expressions"]
    opened = ptxbridge.Image.from_bytes(_build(header, payload, version=2), "<v2>")
    assert (opened.cubin, dict(opened.kernels), opened.ptx) == (image.cubin, dict(image.kernels), image.ptx)
    assert opened.name_expressions == {} and read_image_file(_build(header, payload, version=2)).version == 2
    with pytest.raises(FormatError, match=r"unknown key 'name_expressions' \(keys: arch, cpu_unavailable, "):
        read_image_file(_build({**header, "name_expressions": {}}, payload, version=2), "<v2>")


def test_a_version_1_file_still_opens(image, saved):
    """Version 1 had no unusable / cpu_unavailable keys: such a file reads with none."""
    header, payload = _parts(saved)
    header = _before_version_3(header)
    del header["unusable"], header["cpu_unavailable"], header["name_expressions"]
    opened = ptxbridge.Image.from_bytes(_build(header, payload, version=1), "<v1>")
    assert (opened.cubin, dict(opened.kernels), opened.ptx) == (image.cubin, dict(image.kernels), image.ptx)
    assert opened.unusable == opened.cpu_unavailable == {}
    assert read_image_file(_build(header, payload, version=1)).version == 1
    with pytest.raises(FormatError, match=r"unknown key 'unusable' \(keys: arch, created_by, sections, "):
        read_image_file(_build({**header, "unusable": {}}, payload, version=1), "<v1>")


def test_signatures_that_disagree_with_the_cubin_are_refused(saved):
    header, payload = _parts(saved)
    for sig in header["signatures"]["signatures"]:
        if sig["name"] == "add_one":  # n: i32 -> f64, 8 bytes where the cubin has 4
            sig["params"][1]["type"] = {"kind": "scalar", "dtype": "f64"}
    with pytest.raises(FormatError, match=r"^<f>: the signatures do not match the cubin: .*add_one"):
        ptxbridge.Image.from_bytes(_build(header, payload), "<f>")


def test_open_names_a_missing_file_and_link_refuses_a_saved_image(saved, tmp_path):
    with pytest.raises(ArgumentError) as info:
        ptxbridge.Image.open(tmp_path / "nope.ptxb")
    missing = str(tmp_path / "nope.ptxb")
    assert str(info.value) == f"cannot read image file {missing!r}: No such file or directory"
    (tmp_path / "k.ptxb").write_bytes(saved)
    with pytest.raises(FormatError) as info:
        ptxbridge.link([tmp_path / "k.ptxb"])
    assert str(info.value) == (f"{tmp_path / 'k.ptxb'}: a saved ptxbridge image, not one code object: open "
                               "it with ptxbridge.Image.open(path) and load that")


FUZZ = settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(data=st.data())
def test_mutated_files_only_ever_raise_format_error(saved, data):
    blob = bytearray(saved)
    for _ in range(data.draw(st.integers(0, 4))):
        blob[data.draw(st.integers(0, len(blob) - 1))] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        del blob[data.draw(st.integers(0, len(blob))):]
    try:
        ptxbridge.Image.from_bytes(bytes(blob), "fuzz.ptxb")
    except FormatError as exc:
        assert exc.source.startswith("fuzz.ptxb")


JSON = st.recursive(st.none() | st.booleans() | st.integers(-2, 1 << 40) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                max_size=3), max_leaves=12)


def _objects(value: object) -> list[dict]:
    """Every non-empty JSON object in ``value``, ``value`` itself first."""
    found = [value] if isinstance(value, dict) and value else []
    for item in value.values() if isinstance(value, dict) else value if isinstance(value, list) else ():
        found += _objects(item)
    return found


@FUZZ
@given(data=st.data())
def test_mutated_headers_behind_a_valid_checksum_only_ever_raise_format_error(saved, data):
    header, payload = _parts(saved)
    for _ in range(data.draw(st.integers(1, 3))):
        target = data.draw(st.sampled_from(_objects(header)))
        key = data.draw(st.sampled_from(sorted(target)))
        if data.draw(st.booleans()):
            target[key] = data.draw(JSON)
        else:
            del target[key]
        if not _objects(header):
            break
    cut = data.draw(st.integers(0, len(payload)))
    try:
        ptxbridge.Image.from_bytes(_build(header, payload[:cut]), "fuzz.ptxb")
    except FormatError as exc:
        assert exc.source.startswith("fuzz.ptxb")


@pytest.mark.parametrize(("built", "device", "runs"), [
    ("sm_90", "sm_90", True), ("sm_80", "sm_86", True), ("sm_86", "sm_80", False), ("sm_80", "sm_90", False),
    ("sm_90a", "sm_90", True), ("sm_90a", "sm_100", False), ("sm_100f", "sm_103", True),
    ("sm_100", "sm_90", False), ("sm_120", "sm_120", True),
])
def test_which_gpu_runs_which_cubin(built, device, runs):
    assert cubin_runs_on(built, device) is runs


@pytest.mark.skipif(not (driver_problem() or "").startswith("not found"), reason="there is an NVIDIA driver")
def test_a_gpu_device_without_a_driver_says_so_and_names_the_cpu_loader(image, monkeypatch):
    why = driver_problem().removeprefix("not found (").removesuffix(")")  # the loader library's error type
    message = (f'cuda:0: no NVIDIA driver was found (libcuda could not be loaded: {why}); '
               'device="cpu" runs the kernels on ptxbridge\'s CPU loader (a PTX interpreter) instead')
    with pytest.raises(CudaError) as info:
        image.load("cuda:0")
    assert str(info.value) == message
    monkeypatch.setenv("PTXBRIDGE_DEVICE", "cuda")
    with pytest.raises(CudaError) as info:
        ptxbridge.load([nvrtc.compile(SOURCE, arch="sm_90")])
    assert str(info.value) == message


@pytest.mark.gpu
def test_an_image_for_another_arch_says_what_to_rebuild():
    """A cubin for another arch and no PTX to JIT-compile: refused, naming the GPU, the image's target
    and the rebuild (tests/gpu/test_gpu_targets.py has the images that do have PTX)."""
    from ptxbridge.loaders.driver import device_arch

    here = device_arch(0)
    other = "sm_80" if not here.startswith("sm_8") else "sm_90"
    built = ptxbridge.link([nvrtc.compile(SOURCE, arch=other)], arch=other)
    image = ptxbridge.Image.from_bytes(ptxbridge.Image(built.cubin, built.arch, built.kernels).to_bytes())
    with pytest.raises(CudaError) as info:
        image.load(0)
    assert str(info.value) == (f"cuda:0 is {here} but the image's cubin is built for {other}, which it "
                               f"cannot run, and it has no PTX to JIT-compile; rebuild the image for {here}: "
                               f"ptxbridge.link(..., arch={[other, here]!r}) or `ptxbridge link ... --arch "
                               f"{other},{here} -o FILE`")
    assert info.value.code == "CUDA_ERROR_NO_BINARY_FOR_GPU"


@pytest.mark.gpu
def test_a_saved_image_runs_on_the_gpu(image, tmp_path):
    import torch

    module = ptxbridge.Image.open(image.save(tmp_path / "k.ptxb")).load(0)
    x = torch.arange(8, dtype=torch.float32, device="cuda")
    module.add_one(x, 8, grid=1, block=8)
    torch.testing.assert_close(x.cpu(), torch.arange(8, dtype=torch.float32) + 1)


def test_link_on_the_command_line_then_inspect_the_saved_file(tmp_path, capsys):
    source = tmp_path / "k.cu"
    source.write_text(SOURCE)
    out = tmp_path / "k.ptxb"
    assert main(["link", str(source), "-o", str(out), "--arch", "sm_90"]) == 0
    opened = ptxbridge.Image.open(out)
    assert capsys.readouterr().out == f"wrote {out}: {opened!r}\n"
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"{out}: image\n  ptxbridge image, format 3, for sm_90 (ptxbridge")
    assert "checksum ok): 2 kernels, 1 PTX modules for the CPU loader\n" in text
    assert "  [0] elf sm_90 at 0x" in text and "  [1] ptx sm_90 at 0x" in text
    assert text.count("#[convention(c)] kernel affine(p: struct Pair { scale: f32, shift: i32 }, "
                      "x: *mut f32, n: i32)  (image)") == 2  # checked against the cubin and the PTX
    assert text.count("check      ok") == 5  # two kernels twice, and twice in the PTX
    assert main(["inspect", "--json", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    facts = (report["format"], report["format_version"], report["arch"], report["ok"])
    assert facts == ("image", 3, "sm_90", True)
    assert [c["image"]["kind"] for c in report["children"]] == ["elf", "ptx"]
    assert main(["link", str(source), "-o", str(out), "--arch", "sm_80"]) == 0  # sources compiled for it too
    capsys.readouterr()
    older = ptxbridge.Image.open(out)
    assert older.arch == "sm_80" and b".target sm_80" in older.ptx[0]
    out.write_bytes(out.read_bytes()[:-3])
    assert main(["inspect", str(out)]) == 1
    assert capsys.readouterr().err == f"{out}: error: {CORRUPT}\n"


def test_link_on_the_command_line_names_what_failed(tmp_path, capsys):
    assert main(["link", str(tmp_path / "nope.ptx"), "-o", str(tmp_path / "k.ptxb")]) == 1
    assert capsys.readouterr().err == (f"{tmp_path / 'nope.ptx'}: error: cannot read code file "
                                       f"{str(tmp_path / 'nope.ptx')!r}: No such file or directory\n")
    calls = tmp_path / "calls.cu"
    calls.write_text('extern "C" __device__ float missing(float);\n'
                     'extern "C" __global__ void k(float* x) { x[0] = missing(x[0]); }\n')
    assert main(["link", str(calls), "-o", str(tmp_path / "k.ptxb"), "--arch", "sm_90"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ptxbridge link: error: ") and "missing" in err
    assert not (tmp_path / "k.ptxb").exists()

