"""LTO-IR says its target: read from the header of real nvcc, NVRTC and libNVVM output."""

from __future__ import annotations

import struct

import pytest
from _rust_fixtures import RUST_DIR
from _toolchain import nvrtc_compile, run, tool
from hypothesis import given, settings
from hypothesis import strategies as st

import ptxbridge
import ptxbridge.oxide as ox
from ptxbridge.abi.errors import FormatError, LinkError
from ptxbridge.abi.ltoir import read_ltoir_target
from ptxbridge.abi.oxart import OxartBundle, OxartPayload, PayloadKind, write_oxart
from ptxbridge.abi.targets import Target
from ptxbridge.artifacts.artifact import artifact_from_bytes
from ptxbridge.nvvm import compile_to_ltoir

SOURCE = 'extern "C" __global__ void twice(float* p) { p[threadIdx.x] *= 2.0f; }\n'
# what each -gencode code=lto_XX reads back as: the f suffix is not in the header (measured)
NVCC_TARGETS = {"75": "sm_75", "80": "sm_80", "90": "sm_90", "90a": "sm_90a", "100f": "sm_100",
                "100a": "sm_100a", "103f": "sm_103", "120": "sm_120", "120f": "sm_120", "120a": "sm_120a"}


def nvcc_ltoir(tmp_path, arch: str) -> tuple[bytes, bytes]:
    """``nvcc -dc -gencode arch=compute_XX,code=lto_XX``'s LTO-IR (the file ``-keep`` leaves) and
    host object (its fatbin holds that LTO-IR)."""
    (tmp_path / "k.cu").write_text(SOURCE)
    keep = tmp_path / f"keep{arch}"
    keep.mkdir()
    run(tool("nvcc"), "-dc", "-gencode", f"arch=compute_{arch},code=lto_{arch}", "-keep", "-keep-dir",
        str(keep), "-o", str(keep / "k.o"), str(tmp_path / "k.cu"))
    return (keep / "k.ltoir").read_bytes(), (keep / "k.o").read_bytes()


@pytest.fixture(scope="module")
def nvcc_outputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nvcc")
    try:
        return {arch: nvcc_ltoir(folder, arch) for arch in NVCC_TARGETS}
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def nvcc_files(nvcc_outputs):
    return {arch: ltoir for arch, (ltoir, _) in nvcc_outputs.items()}


def test_nvcc_ltoir_of_every_target_reads_back(nvcc_files):
    assert {arch: read_ltoir_target(data).sm for arch, data in nvcc_files.items()} == NVCC_TARGETS
    assert artifact_from_bytes(nvcc_files["120a"], name="k.ltoir").arch == "sm_120a"


@pytest.mark.parametrize("arch", ["sm_75", "sm_86", "sm_90a", "sm_100", "sm_120"])
def test_nvrtc_and_libnvvm_ltoir_read_back(arch):
    assert read_ltoir_target(nvrtc_compile(SOURCE, [f"-arch={arch}", "-dlto"], "ltoir")).sm == arch
    ir = (RUST_DIR / "oxide" / "opaque.ll").read_bytes()
    assert read_ltoir_target(compile_to_ltoir(ir, "opaque", arch)).sm == arch


def test_a_mismatch_names_both_targets(nvcc_files):
    art = artifact_from_bytes(nvcc_files["120"], name="k.ltoir")
    with pytest.raises(LinkError, match=r"k.ltoir: LTO-IR built for sm_120; linking for sm_90, which"):
        ptxbridge.link([art], arch="sm_90")
    with pytest.raises(LinkError, match=r"built for sm_90a; linking for sm_100"):
        ptxbridge.link([artifact_from_bytes(nvcc_files["90a"], name="a.ltoir")], arch="sm_100")
    older = artifact_from_bytes(nvcc_files["80"], name="old.ltoir")
    assert ptxbridge.link([older], arch="sm_90").arch == "sm_90"  # LTO-IR links for newer targets


def test_the_f_suffix_is_in_no_lto_ir_header_so_nothing_can_read_it(nvcc_files):
    """nvcc's LTO-IR for compute_120f is byte for byte its LTO-IR for compute_120, and libNVVM's for
    compute_100f its LTO-IR for compute_100: where ``f`` is recorded is elsewhere (a fatbin's
    flags, cuda-oxide's ``.target`` and bundle target), and ptxbridge reads it there."""
    assert nvcc_files["120f"] == nvcc_files["120"]
    ir = (RUST_DIR / "oxide" / "opaque.ll").read_bytes()
    assert compile_to_ltoir(ir, "opaque", "sm_100f") == compile_to_ltoir(ir, "opaque", "sm_100")
    assert read_ltoir_target(nvcc_files["100f"]) == Target(10, 0)  # the same header as lto_100's


def test_a_family_host_object_links_for_its_family_only(nvcc_outputs):
    """The fatbin of ``nvcc -dc ... code=lto_100f`` records the family; nvJitLink says only "bad
    input" for another target, ptxbridge names both."""
    family = artifact_from_bytes(nvcc_outputs["100f"][1], name="k.o")
    assert family.arch == "sm_100f"
    assert ptxbridge.link([family], arch="sm_103").arch == "sm_103"
    with pytest.raises(LinkError, match=r"k\.o: LTO-IR built for sm_100f; linking for sm_120, which it "
                                        r"cannot be linked for: link for sm_100f"):
        ptxbridge.link([family], arch="sm_120")
    specific = artifact_from_bytes(nvcc_outputs["100a"][1], name="a.o")
    with pytest.raises(LinkError, match=r"a\.o: LTO-IR built for sm_100a; linking for sm_103"):
        ptxbridge.link([specific], arch="sm_103")


def _oxide_ltoir(tmp_path, target: str, built_for: str) -> ptxbridge.Artifact:
    """cuda-oxide's LTO-IR (libNVVM, compute ``built_for``) in a bundle whose target is ``target``."""
    ir = (RUST_DIR / "oxide" / "opaque.ll").read_bytes()
    payload = OxartPayload(PayloadKind.LTOIR, "opaque.ltoir", compile_to_ltoir(ir, "opaque", built_for))
    path = tmp_path / f"app_{target}_{built_for}"
    path.write_bytes(write_oxart([OxartBundle("opaque", target, (payload,))]))
    return ox.load(path, RUST_DIR / "oxide" / "opaque.rs")


def test_a_bundles_family_target_is_kept_and_checked_against_the_header(tmp_path):
    family = _oxide_ltoir(tmp_path, "sm_100f", "sm_100f")
    assert family.arch == "sm_100f" and set(family.kernels) == {"softplus", "powscale"}
    assert ptxbridge.link([family], arch="sm_103").arch == "sm_103"
    with pytest.raises(LinkError, match=r"app_sm_100f_sm_100f: LTO-IR built for sm_100f; linking for sm_120"):
        ptxbridge.link([family], arch="sm_120")
    # a legacy bundle target ("nvvm-ir") records none: the header's, a kept, f lost
    assert _oxide_ltoir(tmp_path, "nvvm-ir", "sm_90a").arch == "sm_90a"
    assert _oxide_ltoir(tmp_path, "nvvm-ir", "sm_100f").arch == "sm_100"
    for target, built, header in [("sm_103f", "sm_100f", "sm_100"), ("sm_100a", "sm_100", "sm_100"),
                                  ("sm_100f", "sm_100a", "sm_100a")]:
        with pytest.raises(FormatError, match=rf"LTO-IR built for {header}; the recorded target is {target}"):
            _oxide_ltoir(tmp_path, target, built)


def test_cuda_oxide_ltoir_needs_no_target_file(tmp_path):
    """A loose ``.ltoir`` without ``.target``: arch= is optional, and a wrong one is refused."""
    ir = (RUST_DIR / "oxide" / "opaque.ll").read_bytes()
    (tmp_path / "opaque.ltoir").write_bytes(compile_to_ltoir(ir, "opaque", "sm_100"))
    path, source = tmp_path / "opaque.ltoir", RUST_DIR / "oxide" / "opaque.rs"
    art = ox.load(path, source)
    assert art.arch == "sm_100" and set(art.kernels) == {"softplus", "powscale"}
    assert ox.load(path, source, arch="sm_100").arch == "sm_100"
    with pytest.raises(FormatError, match=r"LTO-IR built for sm_100; arch= is sm_90: pass arch='sm_100'"):
        ox.load(path, source, arch="sm_90")
    (tmp_path / "opaque.target").write_text("sm_120\n")
    with pytest.raises(FormatError, match=r"LTO-IR built for sm_100; the recorded target is sm_120"):
        ox.load(path, source)


def _header(records: bytes, end: int | None = None) -> bytes:
    end = 24 + len(records) if end is None else end
    return struct.pack("<I6sHH2xII", 0x7F4E43ED, b"\x01C\x02\x83\x03\x02", 7, 24, end, end + 4) + records


def test_headers_that_break_the_layout_are_format_errors():
    good = _header(struct.pack("<HHHH", 1, 900, 2, 2) + struct.pack("<HHI", 0x63, 0, 0))
    assert read_ltoir_target(good) == Target(9, 0)
    for bad, match in [(good[:20], "needs 24 bytes"), (b"BC\xc0\xde" + good[4:], "not LTO-IR"),
                       (_header(struct.pack("<HH", 1, 900), 400), "do not fit"),
                       (_header(struct.pack("<HHHH", 1, 900, 2, 2)), "no end record"),
                       (_header(struct.pack("<HHHHI", 2, 2, 0x63, 0, 0)), "state no compute capability"),
                       (_header(struct.pack("<HHHHI", 1, 905, 0x63, 0, 0)), "tag 1 is 905")]:
        with pytest.raises(FormatError, match=match):
            read_ltoir_target(bad, "bad.ltoir")


_OTHER_TAGS = st.integers(0, 0xFFFF).filter(lambda t: t not in (0x01, 0x20, 0x63))


@settings(max_examples=300, deadline=None)
@given(st.integers(10, 999), st.one_of(st.none(), st.integers(0, 0xFFFF)),
       st.lists(st.tuples(_OTHER_TAGS, st.integers(0, 0xFFFF)), max_size=6), st.randoms())
def test_records_in_any_order_read_the_target_they_state(cc, accelerated, noise, order):
    """Records the layout allows, shuffled among others: the target is what tags 1 and 0x20 say."""
    records = [(1, cc * 10), *([] if accelerated is None else [(0x20, accelerated)]), *noise]
    order.shuffle(records)
    data = _header(b"".join(struct.pack("<HH", *r) for r in records) + struct.pack("<HHI", 0x63, 0, 0))
    assert read_ltoir_target(data) == Target.from_number(cc, "a" if accelerated == 1 else "")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_any_bytes_after_the_magic_read_or_raise_format_error(tail):
    try:
        read_ltoir_target(struct.pack("<I", 0x7F4E43ED) + tail, "fuzz.ltoir")
    except FormatError as exc:
        assert exc.source == "fuzz.ltoir"
