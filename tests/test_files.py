"""Artifact.from_file: real NVRTC/nvcc/fatbinary/tileiras outputs, with and without signatures."""

from __future__ import annotations

import numpy as np
import pytest
from _toolchain import nvrtc_compile, run, tool

from ptxbridge import Artifact, CodeKind, link
from ptxbridge.abi.cubin import read_cubin
from ptxbridge.abi.errors import (
    AbiMismatchError,
    ArgumentError,
    EmulatorError,
    FormatError,
    LinkError,
    SignatureSyntaxError,
)
from ptxbridge.abi.fatbin import read_fatbin
from ptxbridge.abi.kinds import Opaque, Pointer, Scalar
from ptxbridge.abi.manifest import dumps, to_manifest
from ptxbridge.abi.signature import Signature
from ptxbridge.linker import use_lto
from ptxbridge.linker.embedded import Embedded, embedded_code

SOURCE = """
struct P { char c; double d; int i; };
extern "C" __device__ float ext(float, int);
extern "C" __device__ float twice(float v) { return 2.0f * v; }
extern "C" __global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = twice(x[i]) * a;
}
extern "C" __global__ void mixed(P p, char c, double d, short s, float* out) {
    out[0] = p.c + p.d + p.i + c + d + s;
}
extern "C" __global__ void __launch_bounds__(256) calls(float* x) { x[threadIdx.x] = ext(x[0], 3); }
"""
ONE_KERNEL = """extern "C" __global__ void scale(float* x, float a, int n) {
    if (threadIdx.x < n) x[threadIdx.x] *= a;
}
"""
SCALE = "kernel scale(x: *mut f32, a: f32, n: i32)"
NVCC_FATBIN = {  # nvcc -fatbin -rdc=true: one virtual arch per -gencode, PTX only / SASS only / both
    "pair.fatbin": ["-gencode", "arch=compute_80,code=compute_80",
                    "-gencode", "arch=compute_90,code=compute_90"],
    "sass.fatbin": ["-gencode", "arch=compute_90,code=sm_90"],
    "lz4.fatbin": ["-arch=sm_90", "--compress-mode=speed"],
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One file of every kind, made by the real tools."""
    d = tmp_path_factory.mktemp("code")
    (d / "k.ptx").write_bytes(nvrtc_compile(SOURCE, ["-arch=sm_90", "-rdc=true"]))
    (d / "one.cubin").write_bytes(nvrtc_compile(ONE_KERNEL, ["-arch=sm_90"], "cubin"))
    (d / "one.ptx").write_bytes(nvrtc_compile(ONE_KERNEL, ["-arch=sm_90"]))
    (d / "k.ltoir").write_bytes(nvrtc_compile(ONE_KERNEL, ["-arch=sm_90", "-rdc=true", "-dlto"], "ltoir"))
    (d / "one.cu").write_text(ONE_KERNEL)
    run(tool("fatbinary"), f"--create={d / 'one.fatbin'}", f"--image3=kind=elf,sm=90,file={d / 'one.cubin'}",
        f"--image3=kind=ptx,sm=90,file={d / 'one.ptx'}")
    run(tool("nvcc"), "-dc", "-arch=sm_90", "--compress-mode=none", str(d / "one.cu"), "-o", str(d / "one.o"))
    run("ar", "rcs", str(d / "libone.a"), str(d / "one.o"))
    run(tool("nvcc"), "-dc", "-gencode", "arch=compute_90,code=lto_90", str(d / "one.cu"), "-o",
        str(d / "lto.o"))  # LTO-IR only: no PTX to fall back on
    run("ar", "rcs", str(d / "liblto.a"), str(d / "lto.o"))
    for name, flags in NVCC_FATBIN.items():
        run(tool("nvcc"), "-fatbin", "-rdc=true", *flags, str(d / "one.cu"), "-o", str(d / name))
    (d / "twice.cu").write_text(ONE_KERNEL.replace("scale", "twice"))
    run(tool("nvcc"), "-dc", "-gencode", "arch=compute_90,code=sm_90", str(d / "twice.cu"), "-o",
        str(d / "twice.o"))  # SASS only
    run("ar", "rcs", str(d / "libmixed.a"), str(d / "one.o"), str(d / "twice.o"))
    return d


def test_ptx_without_signatures_lists_layouts(built):
    art = Artifact.from_file(built / "k.ptx")
    assert art.kind is CodeKind.PTX and art.arch == "sm_90"
    assert set(art.kernels) == {"scale", "mixed", "calls"}
    assert all(isinstance(p.type, Opaque) for p in art.kernels["mixed"].params)
    assert [(p.type.size, p.type.align) for p in art.kernels["mixed"].params] == [
        (24, 8), (1, 1), (8, 8), (2, 2), (8, 8)]
    assert art.kernels["calls"].launch.maxntid == (256, 1, 1)
    twice, ext = art.device_functions["twice"], art.imports["ext"]
    # .b32 says 4 bytes, not int or float: the linker compares such parameters by width only
    assert twice.kind == "device" and twice.returns == Opaque(4, 4)
    assert [p.type for p in ext.params] == [Opaque(4, 4)] * 2


def test_ptx_with_signature_text_is_typed_and_checked(built):
    art = Artifact.from_file(built / "k.ptx", SCALE + "\ndevice fn twice(v: f32) -> f32")
    assert art.kernels["scale"].params[0].type == Pointer(Scalar(art.kernels["scale"].params[1].type.dtype))
    assert art.device_functions["twice"].returns == art.kernels["scale"].params[1].type
    with pytest.raises(AbiMismatchError, match="parameter 'a'"):
        Artifact.from_file(built / "k.ptx", "kernel scale(x: *mut f32, a: f64, n: i32)")


def test_sidecar_text_and_manifest(built, tmp_path):
    ptx = tmp_path / "one.ptx"
    ptx.write_bytes((built / "one.ptx").read_bytes())
    (tmp_path / "one.ptx.sig").write_text(SCALE)
    assert isinstance(Artifact.from_file(ptx).kernels["scale"].params[0].type, Pointer)
    (tmp_path / "one.ptx.sig").unlink()
    (tmp_path / "one.ptx.json").write_text(dumps([Signature.parse(SCALE)]))
    assert Artifact.from_file(ptx).kernels["scale"] == Signature.parse(SCALE)
    assert Artifact.from_file(ptx, tmp_path / "one.ptx.json").kernels["scale"] == Signature.parse(SCALE)


def test_signature_forms(built):
    sig = Signature.parse(SCALE)
    for spec in (sig, [sig], SCALE, dumps([sig]), to_manifest([sig])):
        assert Artifact.from_file(built / "one.ptx", spec).kernels["scale"] == sig
    empty = Artifact.from_file(built / "one.ptx", {"ptxbridge_manifest": 1, "signatures": []})
    assert isinstance(empty.kernels["scale"].params[0].type, Opaque)


def test_cubin_kparam_layouts_and_given_signature(built):
    art = Artifact.from_file(built / "one.cubin")
    assert art.kind is CodeKind.CUBIN and art.arch == "sm_90"
    kparams = read_cubin((built / "one.cubin").read_bytes()).kernel("scale").params
    assert [lp.offset for lp in art.kernels["scale"].layout.params] == [p.offset for p in kparams]
    typed = Artifact.from_file(built / "one.cubin", SCALE).kernels["scale"]
    assert typed.params[0].name == "x"
    with pytest.raises(AbiMismatchError, match="cubin KPARAM of scale"):
        Artifact.from_file(built / "one.cubin", "kernel scale(x: *mut f32, a: f64, n: i32)")


def test_fatbin_checks_the_cubin_image(built):
    art = Artifact.from_file(built / "one.fatbin", SCALE)
    assert art.kind is CodeKind.FATBIN and art.arch == "sm_90"
    assert art.kernels["scale"] == Signature.parse(SCALE)
    with pytest.raises(AbiMismatchError):
        Artifact.from_file(built / "one.fatbin", "kernel scale(x: *mut f32, n: i32)")


def test_host_object_through_its_fatbin(built):
    art = Artifact.from_file(built / "one.o", SCALE)
    assert art.kind is CodeKind.OBJECT and art.kernels["scale"] == Signature.parse(SCALE)
    with pytest.raises(AbiMismatchError):
        Artifact.from_file(built / "one.o", "kernel scale(x: *mut f32)")


def test_ltoir_and_archive_take_signatures_as_given(built):
    lto = Artifact.from_file(built / "k.ltoir", SCALE)
    assert lto.kind is CodeKind.LTOIR and lto.kernels["scale"] == Signature.parse(SCALE)
    assert not Artifact.from_file(built / "k.ltoir").kernels
    lib = Artifact.from_file(built / "libone.a", SCALE)
    assert lib.kind is CodeKind.LIBRARY and "scale" in lib.kernels


def test_an_archive_of_ltoir_objects_links_with_lto(built):
    """nvJitLink refuses LTO-IR without -lto (ERROR_LTO_NOT_ENABLED), so lto=None looks into the
    objects of a static library; an archive of plain -dc objects stays a non-LTO link."""
    lib = Artifact.from_file(built / "liblto.a", SCALE)
    assert use_lto([lib]) and not use_lto([Artifact.from_file(built / "libone.a")])
    image = link([lib], arch="sm_90")
    assert [k.name for k in read_cubin(image.cubin).kernels] == ["scale"]
    assert not image.cpu_unavailable  # nvJitLink -lto -ptx finalises the member's encoded LTO-IR
    assert_scales(image.load("cpu"))
    with pytest.raises(LinkError, match="LTO-IR input cannot be used without LTO enabled"):
        link([lib], arch="sm_90", lto=False)


@pytest.mark.gpu
def test_a_kernel_from_an_ltoir_archive_runs_on_the_gpu(built):
    torch = pytest.importorskip("torch")
    module = link([Artifact.from_file(built / "liblto.a", SCALE)]).load(0)  # for the first GPU's arch
    x = torch.arange(8, dtype=torch.float32, device="cuda")
    module.scale(x, 3.0, 6, grid=1, block=8)
    torch.testing.assert_close(x.cpu(), torch.tensor([0, 3, 6, 9, 12, 15, 6, 7], dtype=torch.float32))


def assert_scales(module, name: str = "scale") -> None:
    """Run ``ONE_KERNEL`` (times 3 on the first 6 of 8 elements) and compare with NumPy."""
    x = np.linspace(-2.0, 5.0, 8, dtype=np.float32)
    expected = np.where(np.arange(8) < 6, x * np.float32(3.0), x)
    getattr(module, name)(x, 3.0, 6, grid=1, block=8)
    np.testing.assert_array_equal(x, expected)


@pytest.mark.parametrize(("name", "arch", "target"), [
    ("one.o", "sm_90", "sm_90"), ("libone.a", "sm_90", "sm_90"), ("lz4.fatbin", "sm_90", "sm_90"),
    ("pair.fatbin", "sm_90", "sm_90"), ("pair.fatbin", "sm_100", "sm_90"), ("pair.fatbin", "sm_89", "sm_80"),
])
def test_the_cpu_loader_runs_the_ptx_nvcc_embeds(built, name, arch, target):
    """One PTX image per container: the highest arch not above the link's (two would define scale twice)."""
    image = link([Artifact.from_file(built / name, SCALE)], arch=arch)
    assert not image.cpu_unavailable and len(image.ptx) == 1
    assert f".target {target}\n".encode() in image.ptx[0]
    assert_scales(image.load("cpu"))


def test_nvcc_compresses_the_ptx_it_embeds(built):
    """The containers above hold zstd (nvcc's default), LZ4 and uncompressed PTX images."""
    compression = {name: {e.compression for e in read_fatbin((built / name).read_bytes()).ptx()}
                   for name in ("pair.fatbin", "lz4.fatbin", "one.o")}
    assert compression == {"pair.fatbin": {"zstd"}, "lz4.fatbin": {"lz4"}, "one.o": {None}}
    pair = read_fatbin((built / "pair.fatbin").read_bytes()).ptx()
    assert sorted(e.arch for e in pair) == ["sm_80", "sm_90"]


def test_a_container_with_only_sass_is_cpu_unavailable(built):
    image = link([Artifact.from_file(built / "sass.fatbin", SCALE)], arch="sm_90")
    assert image.ptx == () and image.cpu_unavailable["scale"].startswith(
        "it comes from sass.fatbin, a fatbin holding only sm_90 SASS for it")
    with pytest.raises(EmulatorError, match="holding only sm_90 SASS"):
        image.load("cpu")


def test_a_library_runs_the_members_that_carry_ptx(built):
    """libmixed.a: one.o (SASS + PTX) and twice.o (SASS only); without signatures, the kernel with no
    PTX is named from its SASS."""
    lib = Artifact.from_file(built / "libmixed.a", f"{SCALE}\n{SCALE.replace('scale', 'twice')}")
    image = link([lib], arch="sm_90")
    assert set(image.kernels) == {"scale", "twice"} and list(image.cpu_unavailable) == ["twice"]
    assert image.cpu_unavailable["twice"].startswith(
        "it comes from libmixed.a, a static library holding only sm_90 SASS for it")
    module = image.load("cpu")
    assert_scales(module)
    with pytest.raises(EmulatorError, match="twice: the CPU loader cannot run this kernel"):
        assert_scales(module, "twice")
    untyped = link([Artifact.from_file(built / "libmixed.a")], arch="sm_90")
    assert list(untyped.cpu_unavailable) == ["twice"]  # named from twice.o's SASS


def test_unreadable_containers_give_the_cpu_loader_nothing(built, tmp_path):
    """Artifact reading refuses bad PTX in a fatbin, but a library's members are only read here: PTX
    that does not parse is reported as held, a truncated container holds nothing (nvJitLink reports it)."""
    (tmp_path / "r.cubin").write_bytes(nvrtc_compile(ONE_KERNEL, ["-arch=sm_90", "-rdc=true"], "cubin"))
    (tmp_path / "bad.ptx").write_bytes(b".version 9.5\n.target sm_90\n.address_size 64\n.entry scale(x")
    run(tool("fatbinary"), f"--create={tmp_path / 'bad.fatbin'}",
        f"--image3=kind=elf,sm=90,file={tmp_path / 'r.cubin'}",
        f"--image3=kind=ptx,sm=90,file={tmp_path / 'bad.ptx'}")
    code = (tmp_path / "bad.fatbin").read_bytes()
    found = embedded_code(Artifact(code, CodeKind.FATBIN, name="bad.fatbin"), "sm_90")
    assert found.ptx == () and found.kernels == ("scale",)
    assert found.held[0] == "sm_90 SASS"
    assert found.held[1].startswith("PTX that ptxbridge cannot read (bad.fatbin")
    assert embedded_code(Artifact(code[:100], CodeKind.FATBIN, name="cut"), "sm_90") == Embedded()
    library = (built / "libone.a").read_bytes()
    assert embedded_code(Artifact(library[:-50], CodeKind.LIBRARY, name="cut.a"), "sm_90") == Embedded()


def test_signature_for_a_missing_kernel(built):
    with pytest.raises(AbiMismatchError, match=r"signatures given for \['nope'\]"):
        Artifact.from_file(built / "one.ptx", "kernel nope(x: *mut f32)")


def test_bad_inputs(built, tmp_path):
    garbage = tmp_path / "junk.ptx"
    garbage.write_bytes(b"\x00\x01not code at all")
    with pytest.raises(FormatError, match="unrecognised code object"):
        Artifact.from_file(garbage)
    truncated = tmp_path / "cut.cubin"
    truncated.write_bytes((built / "one.cubin").read_bytes()[:200])
    with pytest.raises(FormatError):
        Artifact.from_file(truncated)
    with pytest.raises(ArgumentError, match="cannot read code file"):
        Artifact.from_file(tmp_path / "missing.ptx")
    with pytest.raises(ArgumentError, match=r"signatures must be .* \(got int\)"):
        Artifact.from_file(built / "one.ptx", 42)
    with pytest.raises(SignatureSyntaxError):
        Artifact.from_file(built / "one.ptx", "kernel scale(x: *mut f32")
    with pytest.raises(FormatError, match="not valid JSON"):
        (tmp_path / "bad.json").write_text("{oops")
        Artifact.from_file(built / "one.ptx", tmp_path / "bad.json")
