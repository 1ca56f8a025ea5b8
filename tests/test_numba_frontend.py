"""ptxbridge.numba: real numba-cuda compiles (no GPU), signatures checked against the PTX."""

from __future__ import annotations

import os
import types as pytypes

import numba
import numpy as np
import pytest
from _rust_fixtures import RUST_DIR, toolchain  # noqa: F401 (a fixture)
from numba import cuda, from_dtype
from numba.cuda import types as nt

import ptxbridge.numba as pn
import ptxbridge.rust
from ptxbridge import CodeKind, Convention, nvrtc
from ptxbridge.abi.check import check
from ptxbridge.abi.cubin import read_cubin
from ptxbridge.abi.errors import AbiMismatchError, ArgumentError, CompileError, LinkError
from ptxbridge.abi.kinds import NumbaArray, Opaque, Pointer, Scalar, Struct, Tuple
from ptxbridge.abi.ptx import read_ptx
from ptxbridge.linker import link

LTOIR_MAGIC = b"\xedCN\x7f"
SHARED_CACHE = os.environ.get("PTXBRIDGE_CACHE_DIR")  # where CI keeps the Rust sysroot

my_add = cuda.declare_device("my_add", "float32(float32, float32)", abi="c")
numba_abi_add = cuda.declare_device("numba_abi_add", "float32(float32, float32)")
hidden = pytypes.ModuleType("hidden")
hidden.scale = cuda.declare_device("scale_i", "int32(int32, float64)", abi="c")
FACTOR = 3.0
REC = np.dtype([("a", np.float32), ("b", np.int64), ("c", np.int8)], align=True)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PTXBRIDGE_CACHE_DIR", str(tmp_path / "cache"))


def axpy(out, x, alpha):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = alpha * x[i] + out[i]


def mixed(r, t, c, h, b, m, x):
    x[0, 0] = r.a + t[0] + t[1] + c.real + h + b + m[0, 0]


def test_kernel_signature_checked_against_ptx():
    art = pn.compile(axpy, "void(float32[::1], float32[:], float32)", arch="sm_90")
    assert art.kind is CodeKind.PTX and art.arch == "sm_90"
    sig = art.kernels["axpy"]
    assert sig.convention is Convention.NUMBA and sig.kind == "kernel"
    assert [p.name for p in sig.params] == ["out", "x", "alpha"]
    assert sig.params[0].type == NumbaArray(sig.params[0].type.dtype, 1, "C")
    assert sig.params[1].type.layout == "A" and sig.params[2].type == Scalar(sig.params[2].type.dtype)
    entry = read_ptx(art.code).function("axpy")  # the plain name, not a mangled one
    assert entry.kind == "entry" and len(entry.params) == 2 * 7 + 1
    assert sig.layout.size == entry.size
    assert not art.imports and not art.device_functions


def test_every_kind_lowers_like_numba():
    sig = (nt.void)(from_dtype(REC), nt.UniTuple(nt.float32, 2), nt.complex64, nt.float16,
                    nt.boolean, nt.float64[::1, :], nt.int16[:, :, ::1])
    art = pn.compile(mixed, sig, arch="sm_80")
    kinds = [p.type for p in art.kernels["mixed"].params]
    assert isinstance(kinds[0], Struct) and [f.name for f in kinds[0].fields] == ["a", "b", "c"]
    assert isinstance(kinds[1], Tuple) and len(kinds[1].items) == 2
    assert [k.dtype.name for k in kinds[2:5]] == ["c64", "f16", "bool"]
    assert (kinds[5].layout, kinds[5].ndim, kinds[6].layout, kinds[6].ndim) == ("F", 2, "C", 3)
    entry = read_ptx(art.code).function("mixed")
    # record -> 1 pointer, tuple -> 2, complex -> 2, f16, bool, arrays 5 + 2 ndim
    assert len(entry.params) == 1 + 2 + 2 + 1 + 1 + 9 + 11
    assert ".target sm_80" in art.code.decode()


def test_wrong_signature_is_caught_by_the_check():
    art = pn.compile(axpy, "void(float32[::1], float32[:], float32)")
    bad = art.kernels["axpy"].params
    from ptxbridge.abi.signature import Param, Signature

    wrong = Signature("axpy", (bad[0], Param("x", NumbaArray(bad[0].type.dtype, 2)), bad[2]),
                      Convention.NUMBA)
    with pytest.raises(AbiMismatchError, match="parameter 'x'"):
        check(wrong, read_ptx(art.code))


def test_device_function_exported_with_c_abi():
    art = pn.compile(lambda a, b: a * b + 1.0, "float32(float32, float32)", device=True, name="my_fma")
    sig = art.device_functions["my_fma"]
    assert (sig.kind, sig.convention, sig.returns.dtype.name) == ("device", Convention.C, "f32")
    assert not art.kernels
    text = art.code.decode()
    assert ".visible .func  (.param .b32 func_retval0) my_fma(" in text


def test_device_function_with_array_and_pointer():
    def first(a, p):
        return a[0] + p[0]

    art = pn.compile(first, nt.float64(nt.float64[::1], nt.CPointer(nt.float64)), device=True)
    params = art.device_functions["first"].params
    assert params[0].type == NumbaArray(params[0].type.dtype, 1, "C")
    assert params[1].type == Pointer(Scalar(params[0].type.dtype))
    assert len(read_ptx(art.code).function("first").params) == 7 + 1


def test_ltoir_output_keeps_checked_signatures():
    art = pn.compile(axpy, "void(float32[::1], float32[::1], float32)", output="ltoir")
    assert art.kind is CodeKind.LTOIR and art.code[:4] == LTOIR_MAGIC
    assert "axpy" in art.kernels and "output=ltoir" in art.provenance.options


def test_launch_bounds_reach_the_signature():
    art = pn.compile(axpy, "void(float32[::1], float32[::1], float32)",
                     options=pn.NumbaOptions(launch_bounds=(128, 2)))
    launch = art.kernels["axpy"].launch
    assert launch.maxntid == (128, 1, 1) and launch.minnctapersm == 2


def test_provenance_names_compiler_versions_and_options():
    art = pn.compile(axpy, "void(float32[::1], float32[::1], float32)", arch="sm_90")
    prov = art.provenance
    assert prov.compiler == "numba-cuda" and "numba-cuda 0.30" in prov.version and "NVVM" in prov.version
    assert "cc=9.0" in prov.options and prov.arch == "sm_90"


# --- foreign device functions ------------------------------------------------------------


def calls_my_add(x, y):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = my_add(x[i], y[i]) * FACTOR


def test_import_found_in_globals_with_its_declared_signature():
    art = pn.compile(calls_my_add, "void(float32[::1], float32[::1])")
    imp = art.imports["my_add"]
    assert imp.kind == "device" and imp.convention is Convention.C
    assert [p.type.dtype.name for p in imp.params] == ["f32", "f32"] and imp.returns.dtype.name == "f32"


@cuda.jit(device=True)
def helper_calls_my_add(a, b):
    return my_add(a, b) + 1.0


def calls_through_helper(x):
    x[0] = helper_calls_my_add(x[0], x[1])


def test_import_found_through_a_called_device_function():  # runs with or without a GPU
    art = pn.compile(cuda.jit(calls_through_helper), "void(float32[::1])")
    assert set(art.imports) == {"my_add"} and art.imports["my_add"].returns.dtype.name == "f32"


@numba.njit
def cpu_style_helper(a):
    return a - 0.5


def calls_device_and_njit_helpers(x, n):
    i = cuda.grid(1)
    if i < n:
        x[i] = cpu_style_helper(helper_scales(x[i], 2.0))


@cuda.jit(device=True)
def helper_scales(a, b):
    return a * b + 1.0


def test_kernel_calling_jitted_helpers_compiles_without_a_gpu_and_runs():
    art = pn.compile(calls_device_and_njit_helpers, "void(float32[::1], int32)", name="helpers")
    module = ptxbridge.load([art], device="cpu")
    x = np.arange(64, dtype=np.float32)
    module.helpers(x, 64, grid=1, block=64)
    np.testing.assert_array_equal(x, np.arange(64, dtype=np.float32) * 2 + 0.5)


def test_import_recovered_from_the_extern_declaration():
    def calls_hidden(x):
        x[0] = hidden.scale(x[0], 2.0)

    art = pn.compile(calls_hidden, "void(int32[::1])")
    imp = art.imports["scale_i"]  # layout only: .b32 and .b64 say nothing about int vs float
    assert [p.type for p in imp.params] == [Opaque(4, 4), Opaque(8, 8)] and imp.returns == Opaque(4, 4)
    explicit = pn.compile(calls_hidden, "void(int32[::1])", imports=[hidden.scale])
    assert [p.type.dtype.name for p in explicit.imports["scale_i"].params] == ["i32", "f64"]


def test_import_with_numba_abi_is_refused():
    def calls_numba_abi(x):
        x[0] = numba_abi_add(x[0], x[1])

    with pytest.raises(AbiMismatchError, match="abi='c'"):
        pn.compile(calls_numba_abi, "void(float32[::1])")


def test_explicit_import_that_disagrees_with_the_call_is_refused():
    wrong = cuda.declare_device("my_add", "float64(float64, float64, float64)", abi="c")
    with pytest.raises(AbiMismatchError, match="my_add"):
        pn.compile(calls_my_add, "void(float32[::1], float32[::1])", imports=[wrong])


# --- cache ---------------------------------------------------------------------------------


def test_second_compile_runs_no_compiler(monkeypatch):
    first = pn.compile(axpy, "void(float32[::1], float32[::1], float32)", output="ltoir")

    def boom(*args, **kwargs):
        raise AssertionError("numba-cuda ran although the cache holds the result")

    from numba.cuda import compiler

    monkeypatch.setattr(compiler, "_compile_pyfunc_with_fixup", boom)
    second = pn.compile(axpy, "void(float32[::1], float32[::1], float32)", output="ltoir")
    assert second.code == first.code and second.kernels == first.kernels
    with pytest.raises(CompileError):  # a different arch is a different key
        pn.compile(axpy, "void(float32[::1], float32[::1], float32)", arch="sm_80")


def test_changed_global_constant_recompiles(monkeypatch):
    before = pn.compile(calls_my_add, "void(float32[::1], float32[::1])").code
    monkeypatch.setitem(calls_my_add.__globals__, "FACTOR", 5.0)
    after = pn.compile(calls_my_add, "void(float32[::1], float32[::1])").code
    assert before != after and b"0f40A00000" in after  # 5.0 folded into the code


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"arch": "gfx90a"}, r"arch must look like 'sm_90' \(got 'gfx90a'\)"),
    ({"arch": "sm_9"}, "arch must look like"),
    ({"output": "cubin"}, r"output must be one of .* \(got 'cubin'\)"),
    ({"abi": "c"}, "abi must be None"),
    ({"device": True, "abi": "numba"}, "abi must be None"),
])
def test_bad_options(kwargs, match):
    with pytest.raises(ArgumentError, match=match):
        pn.compile(axpy, "void(float32[::1], float32[::1], float32)", **kwargs)


@pytest.mark.parametrize(("signature", "device", "match"), [
    ("float32(float32[::1], float32[::1], float32)", False, "a kernel returns void"),
    ((nt.float32, nt.float32), True, "must give its return type"),
    ("void(float32[::1], float32[::1])", False, "2 argument types but the function takes 3"),
    ("void(float32[::1], notatype, float32)", False, "not a numba signature"),
])
def test_bad_signatures(signature, device, match):
    with pytest.raises(ArgumentError, match=match):
        pn.compile(axpy, signature, device=device)


def test_unrepresentable_types_are_refused():
    packed = from_dtype(np.dtype([("a", np.int8), ("b", np.float64)], align=False))
    with pytest.raises(ArgumentError, match="align=True"):
        pn.compile(lambda r, x: None, (packed, nt.float32[::1]))
    with pytest.raises(ArgumentError, match="not a number type"):
        pn.compile(lambda r, x: None, (nt.NPDatetime("s")[::1], nt.float32[::1]))
    with pytest.raises(ArgumentError, match="align=True"):  # arrays of records are fine, packed ones not
        pn.compile(lambda r, x: None, (packed[::1], nt.float32[::1]))
    with pytest.raises(ArgumentError, match="no portable C-ABI lowering"):
        pn.compile(lambda t: t[0], nt.float32(nt.UniTuple(nt.float32, 2)), device=True)
    with pytest.raises(ArgumentError, match="launch_bounds"):
        pn.NumbaOptions(launch_bounds=(1, 2, 3, 4))


def test_typing_error_is_a_compile_error_with_the_log():
    def broken(x):
        x[0] = undefined_name  # noqa: F821

    with pytest.raises(CompileError, match="could not compile broken") as info:
        pn.compile(broken, "void(float32[::1])")
    assert "undefined_name" in info.value.log


# --- cross-language (compile + link on the CPU with ptxbridge.link) ---------------------------

CPP_MY_ADD = 'extern "C" __device__ float my_add(float a, float b) { return a + b; }\n'
CPP_CALLS_NUMBA = """extern "C" __device__ float nb_fma(float, float);
extern "C" __global__ void kern(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = nb_fma(x[i], 2.0f);
}
"""
wrong_add = cuda.declare_device("my_add", "float64(float64, float64)", abi="c")
rust_fma = cuda.declare_device("rust_fma", "float32(float32, float32, float32)", abi="c")


def calls_wrong_add(x):
    x[0] = wrong_add(x[0], x[1])


def calls_rust(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = rust_fma(x[i], 2.0, 1.0)


def _linked(image, kernel: str):
    cubin = read_cubin(image.cubin)
    assert cubin.arch == "sm_90" and [k.name for k in cubin.kernels] == [kernel]
    assert image.kernels[kernel].layout.size == cubin.kernels[0].param_size
    return cubin


def test_numba_kernel_calls_cpp_device_function():
    art = pn.compile(calls_my_add, "void(float32[::1], float32[::1])", arch="sm_90")
    cpp = nvrtc.compile(CPP_MY_ADD, arch="sm_90")
    check(art.imports["my_add"], read_ptx(cpp.code))  # both sides agree on the C ABI
    _linked(link([art, cpp], arch="sm_90"), "calls_my_add")
    wrong = pn.compile(calls_wrong_add, "void(float64[::1])", arch="sm_90")
    with pytest.raises(LinkError, match="my_add"):  # f64 import vs f32 export, caught before nvJitLink
        link([wrong, cpp], arch="sm_90")


@pytest.mark.usefixtures("toolchain")  # skips where Debian's rustc-web is not installed
def test_numba_kernel_calls_rust_device_function(monkeypatch):
    # the Rust sysroot is built once into the shared cache, not into this test's private one
    if SHARED_CACHE is None:
        monkeypatch.delenv("PTXBRIDGE_CACHE_DIR")
    else:
        monkeypatch.setenv("PTXBRIDGE_CACHE_DIR", SHARED_CACHE)
    rust = ptxbridge.rust.compile(RUST_DIR / "device_fn.rs", arch="sm_80")
    art = pn.compile(calls_rust, "void(float32[::1])", arch="sm_90")
    imported, exported = art.imports["rust_fma"], rust.device_functions["rust_fma"]
    assert [p.type for p in imported.params] == [p.type for p in exported.params]
    assert imported.returns == exported.returns
    cubin = _linked(link([art, rust], arch="sm_90"), "calls_rust")
    assert "rust_fma" in [f.name for f in cubin.device_functions]  # PTX inputs: a real call, no LTO


def test_cpp_kernel_calls_numba_device_function_through_ltoir():
    art = pn.compile(lambda x, y: x * y + 1.0, "float32(float32, float32)", device=True,
                     output="ltoir", name="nb_fma", arch="sm_90")
    cpp = nvrtc.compile(CPP_CALLS_NUMBA, arch="sm_90", output="ltoir")
    assert cpp.imports["nb_fma"].returns == art.device_functions["nb_fma"].returns
    image = link([cpp, art], arch="sm_90")
    assert not _linked(image, "kern").device_functions  # nb_fma was inlined across languages
    f64 = pn.compile(lambda x, y: x * y, "float64(float64, float64)", device=True, output="ltoir",
                     name="nb_fma", arch="sm_90")
    with pytest.raises(LinkError, match="nb_fma"):
        link([cpp, f64], arch="sm_90")


def test_fingerprint_follows_called_functions():
    from ptxbridge.cache.fingerprint import fingerprint

    def make(constant):
        @cuda.jit(device=True)
        def inner(v):
            return v * constant

        def outer(x):
            x[0] = inner(x[0])

        return outer

    assert fingerprint(make(2.0)) == fingerprint(make(2.0))
    assert fingerprint(make(2.0)) != fingerprint(make(3.0))  # a closure constant two calls deep


config = pytypes.ModuleType("config")
config.N = 2.0
NESTED = ((1.0, 2.0), (3.0, 4.0))


def stores_module_constant(x):
    x[0] = config.N + NESTED[1][0]


def test_changed_module_attribute_or_nested_tuple_recompiles(monkeypatch):
    sig = "void(float32[::1])"
    before = pn.compile(stores_module_constant, sig).code
    monkeypatch.setattr(config, "N", 5.0)  # numba freezes config.N into the code
    after_module = pn.compile(stores_module_constant, sig).code
    monkeypatch.setitem(stores_module_constant.__globals__, "NESTED", ((1.0, 2.0), (6.0, 4.0)))
    after_tuple = pn.compile(stores_module_constant, sig).code
    assert b"1084227584" in before and b"1090519040" in after_module  # 5.0 and 8.0 as u32 bits
    assert b"1093664768" in after_tuple  # 11.0
