"""The CUDA C++ declaration reader: hand-made edge cases, then checked against NVRTC's own PTX."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ptxbridge.abi.check import check
from ptxbridge.abi.dtypes import dtype
from ptxbridge.abi.errors import FormatError
from ptxbridge.abi.kinds import Opaque, Pointer, Scalar, Struct, StructField, Tuple
from ptxbridge.abi.ptx import read_ptx
from ptxbridge.abi.signature import LaunchMeta
from ptxbridge.nvrtc.c_source import read_c_source


def s(name: str) -> Scalar:
    return Scalar(dtype(name))


TYPES = r'''
#include <cuda_fp16.h>
#include <cuda_bf16.h>
typedef long long int64_t;  // NVRTC has no <cstdint> without CCCL headers
typedef unsigned char uint8_t;
#define BLOCK 256
#define MIN_BLOCKS \
    (1 + 1)
/* extern "C" __global__ void in_a_comment(int x) {} */
// extern "C" __global__ void also_commented(int x) {}
typedef struct { float x; int y; } Pair;
struct Inner { short a; double b; };
typedef struct Outer { struct Inner in; char tag; float v[3]; } OuterT;
struct __align__(16) Aligned { float a; };
typedef unsigned int uint;
enum Mode { A, B };
enum class Small : unsigned char { X };
__device__ const char* banner = "extern \"C\" __global__ void in_a_string(int) {}";
extern "C" {
__global__ void __launch_bounds__(BLOCK, MIN_BLOCKS) bounded(float a, const float* __restrict__ x,
                                                             float* y, size_t n) {
    if (n > 0) { y[0] = a * x[0]; }
}
__global__ void __cluster_dims__(2, 1, 1) types(Pair p, OuterT o, const struct Outer* po, uint u,
    Mode m, Small sm, __half h, __nv_bfloat16 b, float4 v, int** pp, const char* const* names,
    unsigned long long big, long l, signed char c, unsigned short us, int64_t i64, uint8_t u8,
    bool flag, double d, struct Aligned al, void* raw, float arr[]) {}
__global__ void noargs(void) {}
__global__ void unnamed(float*, const int) {}
}
'''


def test_plain_types_pointers_and_launch_bounds():
    decls = read_c_source(TYPES)
    bounded = decls.kernels["bounded"]
    assert [p.name for p in bounded.params] == ["a", "x", "y", "n"]
    assert [p.type for p in bounded.params] == [
        s("f32"), Pointer(s("f32"), mutable=False, noalias="restrict"), Pointer(s("f32"), mutable=True),
        s("u64")]
    assert bounded.launch == LaunchMeta(maxntid=(256, 1, 1), minnctapersm=2)
    assert set(decls.kernels) == {"bounded", "types", "noargs", "unnamed"}
    assert decls.kernels["noargs"].params == ()
    unnamed = decls.kernels["unnamed"]
    assert [(p.name, p.type) for p in unnamed.params] == [("arg0", Pointer(s("f32"))), ("arg1", s("i32"))]


def test_structs_typedefs_enums_vectors_and_multilevel_pointers():
    kernel = read_c_source(TYPES).kernels["types"]
    got = {p.name: p.type for p in kernel.params}
    inner = Struct("Inner", (StructField("a", s("i16")), StructField("b", s("f64"))))
    outer = Struct("Outer", (StructField("in", inner), StructField("tag", s("i8")),
                             StructField("v", Tuple((s("f32"),) * 3))))
    assert got["p"] == Struct("Pair", (StructField("x", s("f32")), StructField("y", s("i32"))))
    assert got["o"] == outer
    assert got["po"] == Pointer(outer, mutable=False)
    assert got["u"] == s("u32") and got["m"] == s("i32") and got["sm"] == s("u8")
    assert got["h"] == s("f16") and got["b"] == s("bf16")
    assert got["v"] == Opaque(16, 16)
    assert got["pp"] == Pointer(Pointer(s("i32"), mutable=True), mutable=True)
    assert got["names"] == Pointer(Pointer(s("i8"), mutable=False), mutable=False)
    assert (got["big"], got["l"], got["c"], got["us"]) == (s("u64"), s("i64"), s("i8"), s("u16"))
    assert (got["i64"], got["u8"], got["flag"], got["d"]) == (s("i64"), s("u8"), s("bool"), s("f64"))
    assert got["al"] == Opaque(16, 16)
    assert got["raw"] == Pointer(None) and got["arr"] == Pointer(s("f32"))
    assert kernel.launch.cluster == (2, 1, 1)


def test_device_function_definitions_are_exports_and_declarations_imports():
    decls = read_c_source(r'''
        extern "C" __device__ float my_add(float a, float b);
        extern "C" __device__ __forceinline__ double twice(const double x) { return 2 * x; }
        extern "C" __device__ void store(float* out, float v) { *out = v; }
        extern "C" __device__ int later(int x);          // declared first, defined below: an export
        __device__ float table[4] = {1, 2, 3, 4};
        extern "C" __device__ int later(int x) { return x + (int)table[0]; }
        __device__ float cxx_helper(float x) { return x; }   // C++ linkage: not exported by name
        __host__ float host_only(float x) { return x; }
    ''')
    assert set(decls.imports) == {"my_add"}
    assert set(decls.device_functions) == {"twice", "store", "later"}
    my_add = decls.imports["my_add"]
    assert my_add.kind == "device" and my_add.returns == s("f32")
    assert decls.device_functions["twice"].params[0].type == s("f64")
    assert decls.device_functions["store"].returns is None
    assert decls.kernels == {}


def test_templates_namespaces_and_class_bodies_are_stepped_over():
    decls = read_c_source(r'''
        namespace ns { template <typename T> struct Box { T v; T get() const { return v; } }; }
        template <typename T, int N = (3 > 2)> __global__ void scale(T* out, const T* in, T f, int n) {
            for (int i = 0; i < N; ++i) { out[i] = in[i] * f; }
        }
        class Host { public: void run(); };
        extern "C" __global__ void after(int x) { auto l = [](int v) { return v; }; (void)l(x); }
    ''')
    assert list(decls.kernels) == ["after"]
    sig = decls.for_expression("scale<double, 4>", "_Z5scaleIdLi4EEvPT_PKS0_S0_i")
    assert sig.name == "_Z5scaleIdLi4EEvPT_PKS0_S0_i"
    assert [p.type for p in sig.params] == [Pointer(s("f64")), Pointer(s("f64"), mutable=False),
                                            s("f64"), s("i32")]


def test_unreadable_types_are_reported_with_how_to_fix():
    decls = read_c_source(r'''
        struct WithMethod { float x; __device__ float get() const { return x; } };
        union U { int i; float f; };
        extern "C" __global__ void vec(std::size_t n, Unknown u) {}
        extern "C" __global__ void method(WithMethod w) {}
        extern "C" __global__ void uni(U u) {}
        extern "C" __global__ void fine(int n) {}
    ''', "k.cu")
    assert set(decls.kernels) == {"fine"}
    assert decls.problems["vec"][0] == "kernel"
    assert "Unknown" in decls.problems["vec"][1] and "line 4" in decls.problems["vec"][1]
    assert "member functions" in decls.problems["method"][1]
    assert "union" in decls.problems["uni"][1]
    error = decls.error("vec")
    assert isinstance(error, FormatError) and "k.cu" in str(error) and "signatures={'vec'" in str(error)
    with pytest.raises(FormatError, match="template argument 'Foo'"):
        read_c_source("template <typename T> __global__ void k(T x) {}").for_expression("k<Foo>", "x")
    opaque = read_c_source("template <typename T> __global__ void k(T* x) {}").for_expression("k<Foo>", "x")
    assert opaque.params[0].type == Pointer(None)  # a pointer to a type the reader cannot lay out
    with pytest.raises(FormatError, match="found 0 __global__ functions named 'nope'"):
        decls.for_expression("nope<int>", "x")


def test_bitfields_and_unsized_arrays_in_structs_are_refused():
    decls = read_c_source(r'''
        struct Bits { int a : 3; };
        struct Flex { int n; float data[]; };
        extern "C" __global__ void bits(Bits b) {}
        extern "C" __global__ void flex(Flex f) {}
    ''')
    assert "bit-fields" in decls.problems["bits"][1]
    assert "literal size" in decls.problems["flex"][1]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PTXBRIDGE_CACHE_DIR", str(tmp_path))


def test_read_signatures_match_nvrtc_ptx():
    """Every signature the reader makes is checked against the PTX NVRTC writes for it."""
    from ptxbridge import nvrtc

    source = TYPES + r'''
        extern "C" __device__ Pair make_pair(float x, int y) { Pair p = {x, y}; return p; }
        extern "C" __device__ __half half_id(__half h, const Outer* o) { return h; }
    '''
    artifact = nvrtc.compile(source, arch="sm_90", output="ptx")
    module = read_ptx(artifact.code)
    decls = read_c_source(source)
    for sig in [*decls.kernels.values(), *decls.device_functions.values()]:
        check(sig, module)  # raises AbiMismatchError on any disagreement
    assert len(decls.kernels) == 4 and len(decls.device_functions) == 2


_NOISE = ["{", "}", "(", ")", "[", "]", "<", ">", ";", ",", "*", "::", 'extern "C"', "__global__",
          "template", "struct", "=", "08", "[[", "]]", "__launch_bounds__(", "typedef", "#define X"]


@settings(max_examples=300, deadline=None)
@given(cut=st.integers(0, len(TYPES)),
       inserts=st.lists(st.tuples(st.integers(0, len(TYPES)), st.sampled_from(_NOISE)), max_size=6),
       expression=st.sampled_from(["scale<float>", "<", "a<", "::", ">", "", "k<int, int>"]))
def test_mangled_source_never_crashes_the_reader(cut, inserts, expression):
    """Truncated or garbled source reads what it can, or raises FormatError; nothing else."""
    text = TYPES[:cut]
    for position, noise in sorted(inserts, reverse=True):
        text = f"{text[:position]} {noise} {text[position:]}"
    decls = read_c_source(text)
    for name in decls.problems:
        assert isinstance(decls.error(name), FormatError)
    with contextlib.suppress(FormatError):
        decls.for_expression(expression, "lowered")


def test_pointers_to_types_the_reader_cannot_lay_out_are_opaque_pointers():
    decls = read_c_source(r'''
        #include <curand_kernel.h>
        template <typename T> struct vec4 { typedef T Type; };
        template <typename T> struct Container { T* items; };
        extern "C" __global__ void rng(curandState* states, clock_t* timer, const float* x) {}
        extern "C" __global__ void nested(Container<int>** boxes, int n) {}
        template <typename T> __global__ void gather(typename vec4<T>::Type* out) {}
        extern "C" __global__ void by_value(curandState state) {}
    ''', "k.cu")
    assert [p.type for p in decls.kernels["rng"].params] == [
        Pointer(None), Pointer(Scalar(dtype("i64"))), Pointer(Scalar(dtype("f32")), mutable=False)]
    assert decls.kernels["nested"].params[0].type == Pointer(Pointer(None))
    assert decls.for_expression("gather<float>", "_Z6gatherIfEvPN4vec4IT_E4TypeE").params[0].type == \
        Pointer(None)
    assert "curandState" in decls.problems["by_value"][1]  # by value it must be laid out: still refused


def test_cxx_kernels_know_their_namespaces():
    decls = read_c_source(r'''
        namespace outer { namespace inner { __global__ void k(float* x) {} } }
        namespace { __global__ void hidden(int* x) {} }
        __global__ void twice(int* x) {}
        __global__ void twice(float* x) {}
        template <typename T> __global__ void tmpl(T* x) {}
    ''')
    assert decls.cxx_names() == ["outer::inner::k", "hidden"]  # overloads and templates need expressions
    assert decls.for_expression("outer::inner::k", "_ZN5outer5inner1kEPf").params[0].type == \
        Pointer(Scalar(dtype("f32")))
