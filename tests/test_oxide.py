"""ptxbridge.oxide against conformance fixtures that follow cuda-oxide's documented lowering.

cuda-oxide cannot be built here (its crates need crates.io), so the code side
is built by our rustc route from ``tests/rust/oxide/kernels_ptx.rs``, whose
flat parameters are exactly what docs/conventions.md says cuda-oxide emits for the
``#[kernel]`` functions of ``tests/rust/oxide/kernels.rs``; ``.oxart`` sections
are written per the documented format (``abi.oxart.write_oxart``), into raw
blobs and into real gcc host objects.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import _rust_fixtures
import pytest
from _rust_fixtures import host_object, nvrtc_ltoir, ptxas

import ptxbridge
import ptxbridge.oxide as ox
import ptxbridge.rust as prust
from ptxbridge import CodeKind, Convention
from ptxbridge.abi.dtypes import dtype
from ptxbridge.abi.errors import AbiMismatchError, FormatError
from ptxbridge.abi.kinds import DisjointSlice, Opaque, Scalar, Slice
from ptxbridge.abi.oxart import EntryKind, OxartBundle, OxartEntry, OxartPayload, PayloadKind, write_oxart
from ptxbridge.abi.ptx import read_ptx

toolchain, sysroot = _rust_fixtures.toolchain, _rust_fixtures.sysroot  # session fixtures
OXIDE = _rust_fixtures.RUST_DIR / "oxide"
SOURCE = OXIDE / "kernels.rs"
F32_ENTRY = "scale_TID_3f1c0a9be27d4c5580a1d2e3f4a5b6c7"
F64_ENTRY = "scale_TID_0b9e8d7c6f5a4b3c2d1e0f9a8b7c6d5e"
KERNELS = {"vecadd", "transpose", "tagged", "blob", F32_ENTRY, F64_ENTRY}
F32, F64 = dtype("f32"), dtype("f64")
LTO_SOURCE = 'extern "C" __global__ void tagged(float x, float* out, unsigned long long n) { out[0] = x; }'


@pytest.fixture(scope="module")
def ptx_text(sysroot) -> bytes:
    return prust.compile(OXIDE / "kernels_ptx.rs", arch="sm_80", progress=False).code


@pytest.fixture
def ptx_file(tmp_path, ptx_text) -> Path:
    path = tmp_path / "kernels.ptx"
    path.write_bytes(ptx_text)
    return path


def flat(signature):
    return [(lp.param.ptx_type, lp.offset, lp.param.size) for lp in signature.layout.params]


def bundle(name: str, payloads, target: str = "sm_80", entries=tuple(KERNELS)) -> OxartBundle:
    return OxartBundle(name, target, tuple(OxartPayload(kind, f"{name}.{kind.name.lower()}", data)
                                           for kind, data in payloads),
                       tuple(OxartEntry(EntryKind.KERNEL, e) for e in sorted(entries)))


def test_ptx_file_is_typed_by_oxide_lowering(ptx_file):
    art = ox.load(ptx_file, SOURCE)
    assert art.kind is CodeKind.PTX and art.arch == "sm_80" and set(art.kernels) == KERNELS
    assert all(s.convention is Convention.OXIDE for s in art.kernels.values())
    vecadd = art.kernels["vecadd"]
    assert [p.type for p in vecadd.params] == [Slice(F32), Slice(F32), DisjointSlice(F32)]
    assert flat(vecadd) == [("u64", 8 * i, 8) for i in range(6)]
    assert vecadd.launch.maxntid == (256, 1, 1) and vecadd.launch.minnctapersm == 2


def test_runtime_2d_disjoint_slice_adds_the_u32_row_width(ptx_file):
    transpose = ox.load(ptx_file, SOURCE).kernels["transpose"]
    assert transpose.params[1].type == DisjointSlice(F32, rows_2d=True)
    assert flat(transpose) == [("u64", 0, 8), ("u64", 8, 8), ("u64", 16, 8), ("u64", 24, 8),
                               ("u32", 32, 4), ("u32", 36, 4)]


def test_zero_sized_parameters_are_dropped(ptx_file):
    tagged = ox.load(ptx_file, SOURCE).kernels["tagged"]
    assert [p.type for p in tagged.params[1:3]] == [Opaque(0, 1), Opaque(0, 1)]
    assert flat(tagged) == [("f32", 0, 4), ("u64", 8, 8), ("u64", 16, 8)]


def test_non_repr_c_struct_is_one_blob_in_rustc_layout(ptx_file):
    blob = ox.load(ptx_file, SOURCE).kernels["blob"]
    assert blob.params[0].type == Opaque(16, 8)  # (count u8, weight f64, scale f32) reordered by rustc
    assert flat(blob)[0] == ("b8", 0, 16)
    entry = read_ptx(ptx_file.read_bytes()).function("blob")
    assert (entry.params[0].align, entry.params[0].array) == (8, 16)


def test_generic_instances_are_matched_by_prefix_and_typed_by_the_code(ptx_file):
    kernels = ox.load(ptx_file, SOURCE).kernels
    assert [p.type for p in kernels[F32_ENTRY].params] == [Slice(F32), Scalar(F32), DisjointSlice(F32)]
    assert [p.type for p in kernels[F64_ENTRY].params] == [Slice(F64), Scalar(F64), DisjointSlice(F64)]
    assert kernels[F64_ENTRY].name == F64_ENTRY


def test_ambiguous_or_unfit_instantiations_fail_only_when_asked_for(tmp_path, ptx_file):
    source = tmp_path / "k.rs"
    source.write_text(SOURCE.read_text().replace("#[kernel(f32, f64)]", "#[kernel(f32, u32, f64)]"))
    art = ox.load(ptx_file, source)
    assert F32_ENTRY not in art.kernels and "vecadd" in art.kernels
    assert re.search(rf"{F32_ENTRY}: several instantiations .*generics=", art.unusable[F32_ENTRY])
    module = ptxbridge.link([art]).load("cpu")
    with pytest.raises(AbiMismatchError, match=rf"{F32_ENTRY}: several instantiations"):
        module[F32_ENTRY]
    art = ox.load(ptx_file, source, generics={F32_ENTRY: {"T": "u32"}})
    assert art.kernels[F32_ENTRY].params[1].type == Scalar(dtype("u32"))
    source.write_text(SOURCE.read_text().replace("#[kernel(f32, f64)]", "#[kernel(i16)]"))
    art = ox.load(ptx_file, source)
    assert re.search(r"no instantiation of generic kernel scale fits .*i16", art.unusable[F64_ENTRY])


def test_wrong_source_for_the_ptx_is_rejected(tmp_path, ptx_file):
    source = tmp_path / "k.rs"  # claims a runtime 2-D output: one u32 more than the PTX has
    source.write_text(SOURCE.read_text().replace(
        "pub fn vecadd(a: &[f32], b: &[f32], mut c: DisjointSlice<f32>)",
        "pub fn vecadd(a: &[f32], b: &[f32], mut c: DisjointSlice<f32, Runtime2DIndex>)"))
    with pytest.raises(AbiMismatchError, match=r"vecadd: .*'c'"):
        ox.load(ptx_file, source)


def test_launch_bounds_are_checked_against_ptx_directives(tmp_path, ptx_text):
    def with_directive(text: str) -> Path:
        edited = re.sub(r"(\.entry vecadd\((?:[^)]*)\))", rf"\1\n{text}", ptx_text.decode(), count=1)
        path = tmp_path / "bounded.ptx"
        path.write_text(edited)
        return path

    assert ox.load(with_directive(".maxntid 256, 1, 1\n.minnctapersm 2"), SOURCE).kernels["vecadd"]
    with pytest.raises(AbiMismatchError, match=r"vecadd: the signature's maxntid is \(256, 1, 1\)"):
        ox.load(with_directive(".maxntid 128, 1, 1"), SOURCE)


def test_source_defaults_to_the_rs_beside_the_ptx(tmp_path, ptx_file):
    shutil.copy(SOURCE, tmp_path / "kernels.rs")
    assert set(ox.load(ptx_file).kernels) == KERNELS
    (tmp_path / "kernels.rs").unlink()
    with pytest.raises(FormatError, match=r"kernels.rs: the Rust source .* pass source="):
        ox.load(ptx_file)


def test_oxart_raw_blobs_and_host_object(tmp_path, ptx_text):
    blob = write_oxart([bundle("kernels", [(PayloadKind.PTX, ptx_text)])], tail=16)
    raw = tmp_path / "bundles.oxart"
    raw.write_bytes(blob)
    art = ox.load(raw, SOURCE)
    assert art.kind is CodeKind.PTX and art.code == ptx_text and set(art.kernels) == KERNELS
    assert "bundle kernels" in art.provenance.version
    host = tmp_path / "app.o"
    host.write_bytes(host_object(tmp_path, blob))
    from_host = ox.load(host, SOURCE)
    assert from_host.kernels == art.kernels and from_host.code == ptx_text


def test_oxart_cubin_payload_is_checked_against_kparam(tmp_path, ptx_text):
    cubin = ptxas(tmp_path, ptx_text, "sm_80")
    path = tmp_path / "app.bin"
    payloads = [(PayloadKind.PTX, ptx_text), (PayloadKind.CUBIN, cubin)]
    path.write_bytes(write_oxart([bundle("kernels", payloads)]))
    art = ox.load(path, SOURCE)  # cubin first, as cuda-host's load_bundle
    assert art.kind is CodeKind.CUBIN and art.arch == "sm_80" and art.code == cubin
    assert "CUBIN, preferred over PTX" in art.provenance.version
    assert art.kernels[F64_ENTRY].params[1].type == Scalar(F64)  # resolved from KPARAM sizes
    assert ox.load(path, SOURCE, payload="ptx").kind is CodeKind.PTX
    short = tmp_path / "short.rs"
    short.write_text(SOURCE.read_text().replace("cols: u32)", "cols: u64)"))
    with pytest.raises(AbiMismatchError, match=r"transpose: parameter 'cols' .*cubin KPARAM"):
        ox.load(path, short, payload="cubin")


def test_several_bundles_are_merged_like_cuda_host(tmp_path, ptx_text):
    third = "scale_TID_" + "ab" * 16  # a generic instance compiled into the consuming crate's bundle
    consumer = (".version 7.0\n.target sm_80\n.address_size 64\n"
                f".visible .entry {third}(\n .param .u64 a, .param .u64 b, .param .f64 c,\n"
                " .param .u64 d, .param .u64 e\n)\n{\n ret;\n}\n").encode()
    path = tmp_path / "app.bin"
    path.write_bytes(write_oxart([bundle("kernel_lib", [(PayloadKind.PTX, ptx_text)]),
                                  bundle("app", [(PayloadKind.PTX, consumer)], entries=[third])]))
    art = ox.load(path, SOURCE)  # the crate has a generic kernel: every bundle's PTX, merged
    assert set(art.kernels) == KERNELS | {third}
    assert art.kernels[third].params[1].type == Scalar(F64)
    assert art.code.decode().count(".version") == 1
    assert "merged PTX of .oxart bundles" in art.provenance.version
    only = ox.load(path, SOURCE, bundle="kernel_lib")
    assert set(only.kernels) == KERNELS and only.code == ptx_text
    with pytest.raises(FormatError, match=r"no \.oxart bundle named 'nope' \(got kernel_lib, app\)"):
        ox.load(path, SOURCE, bundle="nope")
    path.write_bytes(write_oxart([bundle("kernel_lib", [(PayloadKind.PTX, ptx_text)]),
                                  bundle("app", [(PayloadKind.PTX, consumer)], target="sm_90")]))
    with pytest.raises(FormatError, match=r"different archs, choose one with bundle= \(got sm_80, sm_90\)"):
        ox.load(path, SOURCE)
    path.write_bytes(write_oxart([bundle("kernel_lib", [(PayloadKind.PTX, ptx_text)]),
                                  bundle("app", [(PayloadKind.LTOIR, nvrtc_ltoir(LTO_SOURCE, "sm_80"))])]))
    merged = ox.load(path, SOURCE)  # bundles without PTX are skipped, as load_all_ptx_bundles_merged does
    assert merged.code == ptx_text + b"\n" and "app have no PTX" in merged.provenance.version


def test_without_generic_kernels_the_bundle_named_after_the_crate_loads(tmp_path, ptx_text):
    plain = tmp_path / "kernels.rs"  # crate "kernels": no generic kernel, so no merging
    plain.write_text(re.sub(r"/// Generic.*", "", SOURCE.read_text(), flags=re.DOTALL))
    other = ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry other()\n{\n ret;\n}\n"
    path = tmp_path / "app.bin"
    path.write_bytes(write_oxart([bundle("app", [(PayloadKind.PTX, other.encode())], entries=["other"]),
                                  bundle("kernels", [(PayloadKind.PTX, ptx_text)])]))
    art = ox.load(path, plain)
    assert art.code == ptx_text and "named after the crate" in art.provenance.version
    with pytest.raises(FormatError, match=r"none is named after the crate \('solo'\); choose one with"):
        ox.load(path, plain.rename(tmp_path / "solo.rs"))


def test_bad_oxart_data_is_a_format_error(tmp_path, ptx_text):
    path = tmp_path / "app.bin"
    path.write_bytes(write_oxart([bundle("kernels", [(PayloadKind.PTX, ptx_text)])])[:40])
    with pytest.raises(FormatError, match=r"app.bin"):
        ox.load(path, SOURCE)
    path.write_bytes(write_oxart([bundle("kernels", [(PayloadKind.NVVM_IR, b"; nvvm ir\n")])]))
    with pytest.raises(FormatError, match=r"has no cubin payload \(got NVVM_IR\)"):
        ox.load(path, SOURCE, payload="cubin")
