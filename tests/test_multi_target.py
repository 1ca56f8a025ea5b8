"""Images for several targets: a cubin per target plus PTX, saved in format 3 (older files still
open), and the loader's choice of code for a GPU (its cubin, one it runs, the PTX JIT-compiled by
the driver, or a refusal that says what to rebuild), decided without a GPU."""

from __future__ import annotations

import hashlib
import json
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ptxbridge
from ptxbridge import nvrtc
from ptxbridge.abi.cubin import read_cubin
from ptxbridge.abi.errors import CudaError, FormatError, OptionError, TargetError
from ptxbridge.abi.image_file import read_image_file
from ptxbridge.abi.ptx import read_ptx
from ptxbridge.cli import main
from ptxbridge.loaders import ptx_facts
from ptxbridge.loaders.choice import CodeChoice, PtxFacts, choose_code

SOURCE = r"""
extern "C" __device__ float twice(float v) { return 2.0f * v; }
extern "C" __global__ void scale(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = twice(x[i]) + 1.0f;
}
"""
TARGETS = ["sm_100", "sm_80", "sm_90"]  # in any order: linked oldest first


@pytest.fixture(scope="module")
def image() -> ptxbridge.Image:
    return ptxbridge.link([nvrtc.compile(SOURCE, arch="sm_80")], arch=TARGETS)


def test_a_cubin_per_target_and_the_oldest_targets_ptx(image):
    assert list(image.cubins) == ["sm_80", "sm_90", "sm_100"] and image.arch == "sm_80"
    assert image.cubin == image.cubins["sm_80"]
    assert [read_cubin(code).arch for code in image.cubins.values()] == list(image.cubins)
    assert [read_ptx(m).target[0] for m in image.ptx] == ["sm_80"]
    assert repr(image).startswith("<ptxbridge.Image cubins for sm_80, sm_90, sm_100, ")
    module = image.load("cpu")
    x = np.arange(64, dtype=np.float32)
    module.scale(x, 64, grid=1, block=64)
    np.testing.assert_array_equal(x, 2 * np.arange(64) + 1)


def test_save_and_open_keep_every_cubin(image, tmp_path):
    opened = ptxbridge.Image.open(image.save(tmp_path / "multi.ptxb"))
    assert dict(opened.cubins) == dict(image.cubins) and opened.ptx == image.ptx
    assert dict(opened.kernels) == dict(image.kernels)
    found = read_image_file(image.to_bytes())
    assert found.version == 3 and list(found.cubins) == list(image.cubins)


def _parts(data: bytes) -> tuple[dict, bytes, int]:
    _, version, size, _ = struct.unpack_from("<8sII32s", data)
    return json.loads(data[48:48 + size]), data[48 + size:], version


def _build(header: dict, payload: bytes, version: int = 3) -> bytes:
    body = json.dumps(header).encode() + payload
    size = len(body) - len(payload)
    return struct.pack("<8sII32s", b"\x89PTXBIMG", version, size, hashlib.sha256(body).digest()) + body


def test_a_version_2_file_still_opens(image):
    single = ptxbridge.link([nvrtc.compile(SOURCE, arch="sm_90")], arch="sm_90")
    header, payload, _ = _parts(single.to_bytes())
    header["sections"] = [{k: v for k, v in e.items() if k != "arch"} for e in header["sections"]]
    # a version 3 file as its first writers wrote it: the one cubin's section without arch
    first_v3 = ptxbridge.Image.from_bytes(_build(header, payload, version=3), "<v3>")
    assert dict(first_v3.cubins) == {"sm_90": single.cubin} and first_v3.ptx == single.ptx
    del header["name_expressions"]
    opened = ptxbridge.Image.from_bytes(_build(header, payload, version=2), "<v2>")
    assert dict(opened.cubins) == {"sm_90": single.cubin} and opened.ptx == single.ptx
    del header["sections"][0]["kind"]
    with pytest.raises(FormatError, match=r"sections\[0\]: must be an object with keys kind, size \(got"):
        read_image_file(_build(header, payload, version=2), "<v2>")


@pytest.mark.parametrize(("edit", "message"), [
    (lambda h: {**h, "arch": "sm_90"},
     r"header.arch: must be the first cubin's arch, 'sm_80' \(got 'sm_90'\)"),
    (lambda h: {**h, "sections": [{**h["sections"][0], "arch": "sm_90"}, *h["sections"][1:]]},
     r"header.sections\[1\]: a second cubin for sm_90 \(an image has one per target\)"),
    (lambda h: {**h, "sections": [{**h["sections"][0], "arch": "compute_80"}, *h["sections"][1:]]},
     r"header.sections\[0\].arch: must look like 'sm_90' or 'sm_90a' \(got 'compute_80'\)"),
    (lambda h: {**h, "sections": [{k: v for k, v in h["sections"][0].items() if k != "arch"},
                                  *h["sections"][1:]]},
     r"header.sections\[1\]: a second cubin section \(one without arch is the image's only one\)"),
    (lambda h: {**h, "sections": [*h["sections"][1:3], h["sections"][3], h["sections"][0]]},
     r"a cubin section after a ptx section \(cubins come first\)"),
])
def test_the_new_fields_are_checked(image, edit, message):
    header, payload, _ = _parts(image.to_bytes())
    if "after a ptx" in message:  # reorder the payload with the table
        sizes = [e["size"] for e in header["sections"]]
        parts = [payload[sum(sizes[:i]):sum(sizes[:i + 1])] for i in range(len(sizes))]
        payload = b"".join([*parts[1:3], parts[3], parts[0]])
    with pytest.raises(FormatError, match=message):
        read_image_file(_build(edit(header), payload), "<f>")


ARCHS = st.sampled_from(["sm_80", "sm_90", "sm_90a", "sm_100", "sm_100f", "compute_90", "sm_9", "", None, 90,
                         ["sm_90"], {"a": 1}, True])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzzed_targets_and_sections_only_ever_raise_format_error(image, data):
    header, payload, _ = _parts(image.to_bytes())
    for _ in range(data.draw(st.integers(1, 4))):
        entries = header["sections"]
        i = data.draw(st.integers(0, len(entries) - 1))
        how = data.draw(st.integers(0, 4))
        if how == 0:
            entries[i]["arch"] = data.draw(ARCHS)
        elif how == 1:
            entries[i].pop("arch", None)
        elif how == 2:
            header["arch"] = data.draw(ARCHS)
        elif how == 3:
            entries.insert(data.draw(st.integers(0, len(entries))), entries.pop(i))
        else:
            entries[i]["kind"] = data.draw(st.sampled_from(["cubin", "ptx", "elf"]))
    try:
        ptxbridge.Image.from_bytes(_build(header, payload, data.draw(st.sampled_from([2, 3]))), "fuzz.ptxb")
    except FormatError as exc:
        assert exc.source.startswith("fuzz.ptxb")


def test_a_list_of_targets_is_checked():
    art = nvrtc.compile(SOURCE, arch="sm_80")
    with pytest.raises(OptionError, match=r"arch= lists no target"):
        ptxbridge.link([art], arch=[])
    with pytest.raises(TargetError, match=r"\(got 'gfx90'\)"):
        ptxbridge.link([art], arch=["sm_90", "gfx90"])
    assert ptxbridge.link([art], arch=(9, 0)).cubins.keys() == {"sm_90"}  # a compute capability, not a list
    assert list(ptxbridge.link([art], arch=["sm_90", (9, 0)]).cubins) == ["sm_90"]


def test_ltoir_inputs_give_ptx_for_the_oldest_target():
    art = nvrtc.compile(SOURCE, arch="sm_80", output="ltoir")
    image = ptxbridge.link([art], arch=["sm_90", "sm_80"])
    assert list(image.cubins) == ["sm_80", "sm_90"] and read_ptx(image.ptx[0]).target[0] == "sm_80"


def test_the_ptx_is_for_the_oldest_target_without_a_suffix():
    """PTX for ``sm_90a`` JIT-compiles for sm_90 only: an image for sm_90a and sm_100 carries
    sm_100's PTX, which every newer GPU takes; with suffixed targets only, the oldest's."""
    art = nvrtc.compile(SOURCE, arch="sm_80", output="ltoir")
    image = ptxbridge.link([art], arch=["sm_100", "sm_90a"])
    assert list(image.cubins) == ["sm_100", "sm_90a"] and image.arch == "sm_100"  # its own first
    assert read_ptx(image.ptx[0]).target[0] == "sm_100" and image.cubin == image.cubins["sm_100"]
    only = ptxbridge.link([art], arch=["sm_100f", "sm_90a"])
    assert list(only.cubins) == ["sm_90a", "sm_100f"] and read_ptx(only.ptx[0]).target[0] == "sm_90a"


def test_the_command_line_links_several_targets(tmp_path, capsys):
    (tmp_path / "k.cu").write_text(SOURCE)
    out = tmp_path / "k.ptxb"
    assert main(["link", str(tmp_path / "k.cu"), "-o", str(out), "--arch", "sm_90,sm_80"]) == 0
    assert list(ptxbridge.Image.open(out).cubins) == ["sm_80", "sm_90"]
    capsys.readouterr()
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "ptxbridge image, format 3, for sm_80, sm_90 (" in text
    assert "  [0] elf sm_80 at 0x" in text and "  [1] elf sm_90 at 0x" in text and "  [2] ptx sm_80" in text
    assert main(["link", str(tmp_path / "k.cu"), "-o", str(out), "--arch", "sm_90,gfx"]) == 1
    assert "arch must look like 'sm_90', 'sm_90a' or (9, 0) (got 'gfx')" in capsys.readouterr().err


# --- which code a GPU loads: the decision table of choose_code -----------------------------------

CUBINS = {"sm_80": b"80", "sm_100": b"100"}
GOOD_PTX = PtxFacts("sm_80", (9, 0))


@pytest.mark.parametrize(("device", "cubins", "ptx", "cuda", "chosen"), [
    ("sm_100", CUBINS, GOOD_PTX, (13, 0), CodeChoice("cubin", "sm_100")),  # its own
    ("sm_86", CUBINS, GOOD_PTX, (13, 0), CodeChoice("cubin", "sm_80")),  # one it runs
    ("sm_103", {"sm_100": b"", "sm_100f": b"", "sm_90": b""}, None, None, CodeChoice("cubin", "sm_100f")),
    ("sm_90", CUBINS, GOOD_PTX, (13, 0), CodeChoice("ptx", "sm_80")),  # JIT
    ("sm_90", CUBINS, GOOD_PTX, None, CodeChoice("ptx", "sm_80")),  # no driver version: let it try
    ("sm_90", {}, GOOD_PTX, (13, 0), CodeChoice("ptx", "sm_80")),  # a PTX-only image
    (None, CUBINS, None, None, CodeChoice("cubin", "sm_80")),  # an arch the driver does not state
    ("sm_90", {"": b"?"}, None, None, CodeChoice("cubin", "")),  # a cubin of unstated arch
])
def test_the_code_a_gpu_loads(device, cubins, ptx, cuda, chosen):
    assert choose_code(device, 0, cubins, lambda: ptx, cuda) == chosen


def test_ptx_is_not_read_when_a_cubin_fits():
    def unread():
        raise AssertionError("the PTX was read although a cubin fits")

    assert choose_code("sm_100", 0, CUBINS, unread, (13, 0)) == CodeChoice("cubin", "sm_100")


REBUILD = ("; rebuild the image for sm_90: ptxbridge.link(..., arch=['sm_80', 'sm_100', 'sm_90']) or "
           "`ptxbridge link ... --arch sm_80,sm_100,sm_90 -o FILE`")


@pytest.mark.parametrize(("ptx", "cuda", "why"), [
    (PtxFacts("sm_80", (9, 5)), (13, 0),
     "its PTX (ISA 9.5) is newer than this driver JIT-compiles (CUDA 13.0 reads PTX ISA up to 9.0)"),
    (PtxFacts("sm_100", (9, 0)), (13, 0), "its PTX is for sm_100, which a sm_90 GPU cannot JIT-compile"),
    (PtxFacts("sm_90a", (9, 0)), (13, 0), None),  # sm_90a PTX runs on sm_90: the JIT path
    (PtxFacts("sm_80", (9, 0), ("k",)), (13, 0), "its PTX lacks kernels that came as machine code only (k)"),
    (None, (13, 0), "it has no PTX to JIT-compile"),
])
def test_a_refusal_names_the_gpu_the_targets_and_the_rebuild(ptx, cuda, why):
    if why is None:
        assert choose_code("sm_90", 1, CUBINS, lambda: ptx, cuda).kind == "ptx"
        return
    with pytest.raises(CudaError) as info:
        choose_code("sm_90", 1, CUBINS, lambda: ptx, cuda)
    assert str(info.value) == (f"cuda:1 is sm_90 but the image's cubins are built for sm_80, sm_100, none of "
                               f"which it can run, and {why}{REBUILD}")
    assert info.value.code == "CUDA_ERROR_NO_BINARY_FOR_GPU"


def test_the_facts_of_an_images_ptx(image):
    facts = ptx_facts(image)
    assert facts.target == "sm_80" and facts.missing == ()
    assert facts.isa == read_ptx(image.ptx[0]).version
    assert ptx_facts(ptxbridge.Image(image.cubin, image.arch, image.kernels)) is None


def test_the_loader_asks_the_driver_and_decides_before_the_cuda_loader_starts(image, monkeypatch):
    """open_backend's facts from the driver (here set as an sm_90 GPU's) reach choose_code: the
    oldest target's PTX is JIT-compiled when the driver reads its ISA, refused when it does not."""
    from ptxbridge.loaders import _check_gpu, driver

    isa = read_ptx(image.ptx[0]).version
    monkeypatch.setattr(driver, "driver_problem", lambda: None)
    monkeypatch.setattr(driver, "device_arch", lambda index: "sm_90")
    monkeypatch.setattr(driver, "driver_version", lambda: (13, isa[1]))  # reads ISA 9.<minor>: the PTX's
    assert _check_gpu(image, 0) == CodeChoice("cubin", "sm_90")
    only = ptxbridge.Image(image.cubin, image.arch, image.kernels, ptx=image.ptx, cubins={
        arch: code for arch, code in image.cubins.items() if arch != "sm_90"})
    assert _check_gpu(only, 0) == CodeChoice("ptx", "sm_80")
    monkeypatch.setattr(driver, "driver_version", lambda: (13, isa[1] - 1))
    refused = (r"cuda:0 is sm_90 but the image's cubins are built for sm_80, sm_100, none of which it can "
               rf"run, and its PTX \(ISA 9\.{isa[1]}\) is newer")
    with pytest.raises(CudaError, match=refused):
        only.load(0)
