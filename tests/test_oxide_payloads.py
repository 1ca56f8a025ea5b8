"""Every payload cuda-oxide writes, as loose files and in ``.oxart`` bundles, typed, linked and run.

The NVVM IR fixture ``tests/rust/oxide/libm.ll`` is what cuda-oxide's llvm-export writes for
``libm.rs`` (kernels calling libdevice math); the other payloads are made from it the way
cuda-oxide makes them: libNVVM ``-gen-lto`` for LTO-IR, nvJitLink for the cubin and (``-ptx``)
the PTX.  Results on the CPU loader are compared with NumPy; tests/gpu/test_gpu_oxide.py runs
the same images on a GPU.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from _rust_fixtures import RUST_DIR

import ptxbridge
import ptxbridge.nvrtc
import ptxbridge.oxide as ox
from ptxbridge import CodeKind
from ptxbridge.abi.errors import AbiMismatchError, EmulatorError, FormatError, LinkError
from ptxbridge.abi.kinds import Opaque
from ptxbridge.abi.oxart import (
    EntryKind,
    OxartBundle,
    OxartEntry,
    OxartOptions,
    OxartPayload,
    PayloadKind,
    write_oxart,
)
from ptxbridge.abi.ptx import read_ptx
from ptxbridge.artifacts.artifact import artifact_from_bytes
from ptxbridge.cli.inspect import format_report, inspect_path
from ptxbridge.linker import LinkOptions
from ptxbridge.linker.nvjitlink import ptx_from_ltoir
from ptxbridge.nvvm import compile_to_ltoir

OXIDE = RUST_DIR / "oxide"
LIBM_RS, LIBM_LL = OXIDE / "libm.rs", OXIDE / "libm.ll"
KERNELS = {"wave", "polar", "biased"}
NO_FMA, DEFAULT = OxartOptions(no_fma=True), OxartOptions()


def sidecars(folder, target="sm_80", policy=DEFAULT, marker=True):
    (folder / "libm.target").write_text(f"{target}\n" + ("compile-options=v1\n" if marker else ""))
    (folder / "libm.options").write_text(policy.sidecar_text())


@pytest.fixture
def loose(tmp_path):
    shutil.copy(LIBM_LL, tmp_path / "libm.ll")
    sidecars(tmp_path)
    return tmp_path


@pytest.fixture(scope="module")
def payloads():
    """libm's four payload kinds, made as cuda-oxide makes them."""
    ir = LIBM_LL.read_bytes()
    lto = compile_to_ltoir(ir, "libm", "sm_80")
    art = artifact_from_bytes(lto, source="libm.ltoir", name="libm")
    ptx = ptx_from_ltoir([art], "sm_80", ["-fma=1"])
    cubin = ptxbridge.link([art], arch="sm_80", options=LinkOptions(fma=True)).cubin
    return {PayloadKind.NVVM_IR: ir, PayloadKind.LTOIR: lto, PayloadKind.PTX: ptx, PayloadKind.CUBIN: cubin}


def bundle_file(tmp_path, payloads, kinds, options=DEFAULT):
    path = tmp_path / "app"
    records = tuple(OxartPayload(k, f"libm.{k.name.lower()}", payloads[k]) for k in kinds)
    entries = tuple(OxartEntry(EntryKind.KERNEL, k) for k in sorted(KERNELS))
    blob = OxartBundle("libm", "sm_80", records, entries, options)
    path.write_bytes(write_oxart([blob]))
    return path


def run_wave(module, n=4096):
    x = np.linspace(-3, 3, n, dtype=np.float32)
    y = np.full_like(x, np.nan)
    module.wave(x, y, np.float32(1.3), np.float32(0.7), grid=(n + 127) // 128, block=128)
    return x, y


def assert_wave(x, y):
    """libdevice's sinf/expf against NumPy's: a few float32 ulps (absolute near the zero crossings)."""
    np.testing.assert_allclose(y, (np.float32(1.3) * np.sin(x) + np.exp(x)) * np.float32(0.7), rtol=2e-6,
                               atol=2e-7)


def test_loose_nvvm_ir_with_sidecars_is_typed_and_runs_like_numpy(loose):
    art = ox.load(loose / "libm.ll", LIBM_RS)
    assert art.kind is CodeKind.NVVM and art.arch == "sm_80" and set(art.kernels) == KERNELS
    assert art.link_options == ("-fma=1",) and "libm.target and libm.options" in art.provenance.version
    module = ptxbridge.link([art]).load("cpu")
    x, y = run_wave(module)
    assert_wave(x, y)
    xy = np.random.default_rng(1).standard_normal((300, 2)).astype(np.float32)
    out = np.full_like(xy, np.nan)
    module.polar(xy, out, grid=3, block=128)
    np.testing.assert_allclose(out[:, 0], np.hypot(xy[:, 0], xy[:, 1]), rtol=2e-7)
    np.testing.assert_allclose(out[:, 1], np.arctan2(xy[:, 1], xy[:, 0]), rtol=4e-7, atol=1e-7)


def test_constant_static_is_a_module_global_under_its_symbol(loose):
    symbol = ox.constants(LIBM_RS)["BIAS"].symbol
    assert symbol == "cuda_oxide_const_246e25db_BIAS"
    module = ptxbridge.link([ox.load(loose / "libm.ll", LIBM_RS)]).load("cpu")
    module.globals[symbol] = np.float32(2.5)
    x, y = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    module.biased(x, y, grid=1, block=64)
    np.testing.assert_array_equal(y, x + 2.5)
    wrong = loose / "wrong.rs"
    wrong.write_text(LIBM_RS.read_text().replace("ConstantMemory<f32>", "ConstantMemory<f64>"))
    with pytest.raises(AbiMismatchError, match=r"#\[constant\] BIAS: .*BIAS has 4 bytes in the code but 8"):
        ox.load(loose / "libm.ll", wrong)


def test_stem_picks_the_file_cuda_host_would(loose, payloads):
    (loose / "libm.ptx").write_bytes(payloads[PayloadKind.PTX])
    (loose / "libm.ltoir").write_bytes(payloads[PayloadKind.LTOIR])
    assert ox.load(loose / "libm", LIBM_RS).kind is CodeKind.NVVM  # a recorded target: NVVM output wins
    (loose / "libm.ll").unlink()
    assert ox.load(loose / "libm", LIBM_RS).kind is CodeKind.LTOIR
    (loose / "libm.target").unlink()
    assert ox.load(loose / "libm", LIBM_RS).kind is CodeKind.PTX  # no target: PTX first
    (loose / "libm.ptx").unlink()
    (loose / "libm.ltoir").unlink()
    sidecars(loose)
    with pytest.raises(FormatError, match=r"libm.target records NVVM output but neither libm.ll nor"):
        ox.load(loose / "libm", LIBM_RS)


def test_sidecars_are_read_as_cuda_host_reads_them(loose):
    (loose / "libm.options").unlink()
    with pytest.raises(FormatError, match=r"libm.target: records compile-options=v1, so libm.options is"):
        ox.load(loose / "libm.ll", LIBM_RS)
    (loose / "libm.options").write_text("cuda-oxide-compile-options-v1\nfma-contraction=maybe\n")
    with pytest.raises(FormatError, match=r"libm.options: compile options must be one of cuda-oxide's"):
        ox.load(loose / "libm.ll", LIBM_RS)
    (loose / "libm.options").unlink()
    (loose / "libm.target").unlink()
    with pytest.raises(FormatError, match=r"NVVM_IR does not record the CUDA target .* pass arch="):
        ox.load(loose / "libm.ll", LIBM_RS)
    assert ox.load(loose / "libm.ll", LIBM_RS, arch="sm_80").arch == "sm_80"


def test_no_fma_bundle_is_bit_identical_to_an_explicit_fma0_build(tmp_path, payloads):
    art = ox.load(bundle_file(tmp_path, payloads, [PayloadKind.NVVM_IR], NO_FMA), LIBM_RS)
    assert art.link_options == ("-fma=0",)
    image = ptxbridge.link([art])
    _, y_bundle = run_wave(image.load("cpu"))
    explicit = artifact_from_bytes(compile_to_ltoir(LIBM_LL.read_bytes(), "libm", "sm_80", NO_FMA),
                                   art.kernels.values(), source="explicit", name="explicit")
    _, y_explicit = run_wave(ptxbridge.link([explicit], options=LinkOptions(fma=False)).load("cpu"))
    np.testing.assert_array_equal(y_bundle.view(np.uint32), y_explicit.view(np.uint32))
    contracted = ptxbridge.link([ox.load(bundle_file(tmp_path, payloads, [PayloadKind.NVVM_IR]), LIBM_RS)])
    _, y_fma = run_wave(contracted.load("cpu"))
    assert (y_fma != y_bundle).any()  # the policy matters: a*sin(x) + exp(x) becomes one fma
    wave = next(f for f in read_ptx(image.ptx[0]).functions if f.name == "wave")
    assert "fma.rn.f32" not in "\n".join(wave.body or ())
    with pytest.raises(LinkError, match=r"built with -fma=0 but LinkOptions.fma=True"):
        ptxbridge.link([art], options=LinkOptions(fma=True))


def test_bundle_payloads_are_chosen_as_cuda_host_does(tmp_path, payloads):
    path = bundle_file(tmp_path, payloads, [PayloadKind.PTX, PayloadKind.NVVM_IR, PayloadKind.LTOIR,
                                            PayloadKind.CUBIN])
    art = ox.load(path, LIBM_RS)
    assert art.kind is CodeKind.CUBIN
    assert "CUBIN, preferred over PTX, NVVM_IR, LTOIR" in art.provenance.version
    for payload, kind in (("ptx", CodeKind.PTX), ("nvvm", CodeKind.NVVM), ("ltoir", CodeKind.LTOIR)):
        chosen = ox.load(path, LIBM_RS, payload=payload)
        assert chosen.kind is kind and chosen.kernels == art.kernels
    report = inspect_path(path)
    assert report["bundles"][0]["loads"] == "cubin" and "loads bundle libm's CUBIN" in format_report(report)


def test_ltoir_and_nvvm_inputs_run_on_the_cpu_loader_and_cubins_say_why_not(tmp_path, payloads):
    lto = ox.load(bundle_file(tmp_path, payloads, [PayloadKind.LTOIR]), LIBM_RS)
    x, y = run_wave(ptxbridge.link([lto]).load("cpu"))
    assert_wave(x, y)
    cubin = ox.load(bundle_file(tmp_path, payloads, [PayloadKind.CUBIN]), LIBM_RS)
    with pytest.raises(EmulatorError, match=r"it comes from app, a cubin \(machine code\), .* link its PTX"):
        ptxbridge.link([cubin]).load("cpu")
    helper = ptxbridge.nvrtc.compile('extern "C" __global__ void zero(float* p) { p[threadIdx.x] = 0; }',
                                     arch="sm_80", output="cubin", options=["-rdc=true"], name="zero.cu")
    module = ptxbridge.link([lto, helper], arch="sm_80").load("cpu")
    run_wave(module)  # the LTO-IR kernels run; the cubin's kernel says why it cannot
    with pytest.raises(EmulatorError, match=r"zero: the CPU loader cannot run this kernel: it comes from"):
        module.zero(np.zeros(4, np.float32), grid=1, block=4)


def test_nvvm_ir_bitcode_in_the_modern_dialect(tmp_path):
    """cuda-oxide's NVVM IR for sm_100+ (opaque pointers), as bitcode in a bundle: the same kernels."""
    llvm_as = shutil.which("llvm-as-22") or shutil.which("llvm-as")
    if llvm_as is None:
        pytest.skip("llvm-as not found (it assembles the bitcode fixture)")
    bitcode = tmp_path / "libm.bc"
    subprocess.run([llvm_as, str(OXIDE / "libm_sm100.ll"), "-o", str(bitcode)], check=True,
                   capture_output=True)
    assert bitcode.read_bytes()[:4] == b"BC\xc0\xde"
    path = tmp_path / "app"
    entries = tuple(OxartEntry(EntryKind.KERNEL, k) for k in sorted(KERNELS))
    path.write_bytes(write_oxart([OxartBundle("libm", "sm_100", (
        OxartPayload(PayloadKind.NVVM_IR, "libm.bc", bitcode.read_bytes()),), entries)]))
    art = ox.load(path, LIBM_RS)
    assert art.kind is CodeKind.NVVM and art.arch == "sm_100" and set(art.kernels) == KERNELS
    x, y = run_wave(ptxbridge.link([art]).load("cpu"))
    assert_wave(x, y)


CPP_USER = '''
extern "C" __device__ float affine(float slope, float offset, float x);
extern "C" __global__ void use_affine(const float* x, float* y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = affine(2.0f, 1.0f, x[i]);
}
'''


def test_cuda_oxide_device_function_is_callable_from_cpp(loose):
    art = ox.load(loose / "libm.ll", LIBM_RS)
    assert [p.name for p in art.device_functions["affine"].params] == ["line.slope", "line.offset", "x"]
    user = ptxbridge.nvrtc.compile(CPP_USER, arch="sm_80", output="ltoir", name="user.cu")
    module = ptxbridge.link([art, user]).load("cpu")
    x, y = np.arange(32, dtype=np.float32), np.zeros(32, np.float32)
    module.use_affine(x, y, 32, grid=1, block=32)
    np.testing.assert_array_equal(y, 2 * x + 1)
    two = CPP_USER.replace("float slope, float offset, float x", "float slope, float x")
    wrong = ptxbridge.nvrtc.compile(two.replace("2.0f, 1.0f, x[i]", "2.0f, x[i]"), arch="sm_80",
                                    output="ltoir", name="wrong.cu")
    with pytest.raises(LinkError, match=r"'affine': wrong.cu imports it as .* but libm exports"):
        ptxbridge.link([art, wrong])


def test_repr_align_parameter_is_laid_out_as_llc_lays_it_out(tmp_path):
    art = ox.load(OXIDE / "align.ll", OXIDE / "align.rs", arch="sm_80")
    aligned = art.kernels["aligned"]
    assert aligned.params[2].type == Opaque(16, 4)
    assert [lp.offset for lp in aligned.layout.params] == [0, 4, 20, 40, 48]  # .align 4, not 16
    module = ptxbridge.link([art]).load("cpu")
    out = np.zeros(8, np.float32)
    padded = np.zeros(4, np.float32)
    padded[0] = 5.0
    module.aligned(3, {"x": 1.0, "y": 2.0, "z": 3.0, "w": 4.0}, padded.tobytes(), out, grid=1, block=8)
    np.testing.assert_array_equal(out, np.full(8, 18.0, np.float32))
