"""ptxbridge.nvrtc: real NVRTC compiles to PTX, LTO-IR and cubin on a machine with no GPU."""

from __future__ import annotations

import pytest

from ptxbridge import nvrtc
from ptxbridge.abi.check import DeclaredParam, check, check_layout
from ptxbridge.abi.cubin import read_cubin
from ptxbridge.abi.errors import AbiMismatchError, CompileError, FormatError
from ptxbridge.abi.ptx import read_ptx
from ptxbridge.abi.sniff import sniff
from ptxbridge.artifacts.artifact import CodeKind
from ptxbridge.linker import target
from ptxbridge.loaders import driver

SOURCE = r'''
#include <cuda_fp16.h>
constexpr int kBlock = 128;
struct Params { float scale; double bias; };

template <typename T> __global__ void __launch_bounds__(kBlock) scale(T* x, T f, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= f;
}
extern "C" __device__ float my_add(float a, float b);
extern "C" __device__ float twice(float a) { return 2.0f * a; }
extern "C" __global__ void __launch_bounds__(256, 2) saxpy(float a, const float* __restrict__ x,
                                                          float* y, int n, Params p, __half h) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + my_add(y[i], twice(p.scale)) + __half2float(h) + (float)p.bias;
}
'''


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PTXBRIDGE_CACHE_DIR", str(tmp_path))


@pytest.mark.parametrize("output", ["ptx", "ltoir", "cubin"])
def test_compile_each_output_typed_from_source(output):
    art = nvrtc.compile(SOURCE, arch="sm_90", output=output,
                        name_expressions=["scale<float>", "scale<double>"], name="saxpy.cu")
    assert art.kind == CodeKind(output) and sniff(art.code) == output and art.arch == "sm_90"
    assert art.provenance.compiler == "nvrtc" and art.provenance.version == nvrtc.nvrtc_version()
    assert "--relocatable-device-code=true" in art.provenance.options  # it imports and exports
    assert ("-dlto" in art.provenance.options) == (output == "ltoir")
    assert set(art.kernels) == {"saxpy", "_Z5scaleIfEvPT_S0_i", "_Z5scaleIdEvPT_S0_i"}
    assert str(art.kernels["saxpy"]) == ("#[convention(c)] #[maxntid(256)] #[minnctapersm(2)] kernel saxpy("
                                         "a: f32, x: *const restrict f32, y: *mut f32, n: i32, "
                                         "p: struct Params { scale: f32, bias: f64 }, h: f16)")
    assert str(art.kernels["_Z5scaleIdEvPT_S0_i"]).endswith("(x: *mut f64, f: f64, n: i32)")
    assert art.kernels["_Z5scaleIfEvPT_S0_i"].launch.maxntid == (128, 1, 1)  # from a constexpr
    assert set(art.device_functions) == {"twice"} and set(art.imports) == {"my_add"}


def test_signatures_agree_with_ptx_and_cubin_kparams():
    ptx = nvrtc.compile(SOURCE, arch="sm_90", output="ptx", name_expressions=["scale<float>"])
    module = read_ptx(ptx.code)
    for sig in [*ptx.kernels.values(), *ptx.device_functions.values(), *ptx.imports.values()]:
        check(sig, module)
    cubin = nvrtc.compile(SOURCE, arch="sm_90", output="cubin", name_expressions=["scale<float>"])
    kernels = {k.name: k for k in read_cubin(cubin.code).kernels}
    for sig in cubin.kernels.values():
        declared = [DeclaredParam(p.ordinal, p.offset, p.size) for p in kernels[sig.name].params]
        check_layout(sig, declared, f"cubin KPARAM of {sig.name}")
    assert kernels["saxpy"].maxntid == (256, 1, 1)


def test_a_wrong_explicit_signature_is_caught_against_the_ptx():
    with pytest.raises(AbiMismatchError, match="saxpy"):
        nvrtc.compile(SOURCE, arch="sm_90", output="ptx",
                      signatures={"saxpy": "kernel saxpy(a: f64, x: *const f32, y: *mut f32, n: i32)"})


def test_explicit_signature_for_a_type_the_reader_cannot_read():
    source = r'''
        template <typename T> struct Vec { T* data; unsigned long long len; };
        extern "C" __global__ void fill(Vec<float> v, float value) {
            for (unsigned long long i = 0; i < v.len; ++i) v.data[i] = value;
        }
    '''
    with pytest.raises(FormatError, match=r"cannot read the signature of 'fill'.*pass signatures="):
        nvrtc.compile(source, arch="sm_90")
    sig = "kernel fill(v: struct Vec { data: *mut f32, len: u64 }, value: f32)"
    art = nvrtc.compile(source, arch="sm_90", signatures={"fill": sig})
    assert [p.name for p in art.kernels["fill"].params] == ["v", "value"]


def test_explicit_device_function_signature_and_unused_signatures():
    source = r'''
        template <typename T> struct Vec { T* data; unsigned long long len; };
        extern "C" __device__ float first(Vec<float> v) { return v.data[0]; }
        extern "C" __global__ void k(float* out, float* data) { Vec<float> v{data, 1}; out[0] = first(v); }
    '''
    sig = "device fn first(v: struct Vec { data: *mut f32, len: u64 }) -> f32"
    art = nvrtc.compile(source, arch="sm_90", signatures={"first": sig})
    assert str(art.device_functions["first"]).endswith("-> f32")  # and checked against the PTX .func
    with pytest.raises(AbiMismatchError, match=r"signatures given for \['nope'\]"):
        nvrtc.compile(source, arch="sm_90", signatures={"first": sig, "nope": "kernel nope()"})


def test_compile_error_carries_the_nvrtc_log():
    with pytest.raises(CompileError) as info:
        nvrtc.compile('extern "C" __global__ void k(float* x) { x[0] = undefined_name; }', arch="sm_90",
                      name="broken.cu")
    assert "undefined_name" in info.value.log and "broken.cu" in str(info.value)


def test_second_compile_is_a_cache_hit(monkeypatch):
    first = nvrtc.compile(SOURCE, arch="sm_90", output="ltoir", options=("-DWARM=1",))
    from cuda.bindings import nvrtc as raw

    def refuse(*args, **kwargs):
        raise AssertionError("NVRTC ran on a warm cache")

    monkeypatch.setattr(raw, "nvrtcCompileProgram", refuse)
    again = nvrtc.compile(SOURCE, arch="sm_90", output="ltoir", options=("-DWARM=1",))
    assert again == first
    with pytest.raises(AssertionError, match="warm cache"):  # another option is another entry
        nvrtc.compile(SOURCE, arch="sm_90", output="ltoir", options=("-DWARM=2",))


def test_path_source_and_arch_spellings(tmp_path):
    path = tmp_path / "k.cu"
    path.write_text('extern "C" __global__ void k(int* x) { x[0] = 1; }')
    art = nvrtc.compile(path, arch=(8, 0), output="cubin")
    assert art.name == str(path) and art.arch == "sm_80" and read_cubin(art.code).arch == "sm_80"
    assert "--relocatable-device-code=true" not in art.provenance.options  # nothing to link against


def test_normalize_arch():
    assert target.normalize_arch("sm_90a") == "sm_90a"
    assert target.normalize_arch("compute_90") == "sm_90"
    assert target.normalize_arch("100f") == "sm_100f"
    assert target.normalize_arch((12, 0)) == "sm_120"
    for bad in ("sm_x", "gfx90a", (9,), 90):
        with pytest.raises(ValueError, match="arch must look like"):
            target.normalize_arch(bad)


def test_nvrtc_args():
    assert nvrtc.nvrtc_args("sm_90", "ptx") == ["--gpu-architecture=sm_90"]
    assert nvrtc.nvrtc_args("sm_90a", "ltoir", ["-DN=4", "-I/mine"], include_dirs=["/inc", "/cccl"]) == [
        "--gpu-architecture=sm_90a", "-dlto", "--relocatable-device-code=true", "-DN=4", "-I/mine",
        "--include-path=/inc", "--include-path=/cccl"]
    assert nvrtc.nvrtc_args("sm_80", "cubin", rdc=True) == [
        "--gpu-architecture=sm_80", "--relocatable-device-code=true"]
    with pytest.raises(ValueError, match="arch="):
        nvrtc.nvrtc_args("sm_90", "ptx", ["-arch=sm_80"])
    with pytest.raises(ValueError, match="output must be one of"):
        nvrtc.nvrtc_args("sm_90", "fatbin")


def test_default_arch_without_a_gpu(monkeypatch):
    monkeypatch.setattr(driver, "device_arch", lambda ordinal=0: None)
    assert target.default_arch() == "sm_90"
    monkeypatch.setattr(driver, "device_arch", lambda ordinal=0: "sm_89")
    assert target.default_arch() == "sm_89"


def test_compiling_leaves_python_bytes_constants_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("PTXBRIDGE_CACHE_DIR", str(tmp_path))  # a real NVRTC run, not a cache hit
    # Regression: a log buffer made as b" " * 1 is CPython's shared one-byte object, and
    # NVRTC writing its NUL into it turned every b" " in the process into b"\x00".
    nvrtc.compile('extern "C" __global__ void quiet(int* x) { *x = 1; }', arch="sm_90", output="ptx")
    assert bytes([32])[0] == 32  # the shared one-byte object for 0x20 still holds 0x20


def test_an_edited_header_misses_the_cache(tmp_path, monkeypatch):
    include = tmp_path / "include"
    (include / "sub").mkdir(parents=True)
    (include / "k.h").write_text('#include "sub/value.h"\n')
    (include / "sub/value.h").write_text("#define K 2.0f\n")
    source = '#include "k.h"\nextern "C" __global__ void k(float* x) { x[0] = K; }\n'
    before = nvrtc.compile(source, arch="sm_90", options=[f"-I{include}"]).code
    (include / "sub/value.h").write_text("#define K 5.0f\n")  # two includes deep
    after = nvrtc.compile(source, arch="sm_90", options=[f"-I{include}"]).code
    assert b"1073741824" in before and b"1084227584" in after  # 2.0f, 5.0f as u32 bits
    local = tmp_path / "k.cu"  # beside a path source, found without -I
    local.write_text(source)
    (tmp_path / "k.h").write_text("#define K 3.0f\n")
    assert b"1077936128" in nvrtc.compile(local, arch="sm_90").code
    (tmp_path / "k.h").write_text("#define K 4.0f\n")
    assert b"1082130432" in nvrtc.compile(local, arch="sm_90").code
