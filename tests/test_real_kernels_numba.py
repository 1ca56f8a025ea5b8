"""numba-cuda kernels written to exercise what numba links and how it types (issue 14).

Each kernel is compiled with ``ptxbridge.numba.compile`` here (no GPU) and
checked against NumPy on the CPU loader; the ``gpu`` twins run the same kernels
on ``cuda:0``.
"""

from __future__ import annotations

import enum
import math
import operator
import os

import numpy as np
import pytest
from numba import cuda, from_dtype
from numba.cuda import config as numba_config
from numba.cuda import fp16
from numba.cuda import types as nt
from numba.cuda.random import (
    init_xoroshiro128p_states_cpu,
    xoroshiro128p_dtype,
    xoroshiro128p_uniform_float32,
)

import ptxbridge
import ptxbridge.numba as pn
import ptxbridge.nvrtc
from ptxbridge.abi.cubin import read_cubin
from ptxbridge.abi.dtypes import dtype
from ptxbridge.abi.errors import (
    AbiMismatchError,
    ArgumentError,
    LinkError,
)
from ptxbridge.abi.kinds import Opaque, Scalar, Struct
from ptxbridge.artifacts.artifact import CodeKind
from ptxbridge.cache.fingerprint import fingerprint
from ptxbridge.loaders.cuda import cooperative_kernels

CPU, GPU = "cpu", "cuda:0"
DEVICES = [pytest.param(CPU, id="cpu"), pytest.param(GPU, id="gpu", marks=pytest.mark.gpu)]


@pytest.fixture(scope="module", autouse=True)
def _module_cache(tmp_path_factory):
    """One cache for the module (numba's NRT takes NVRTC ~10 s once); CI's shared one if set."""
    with pytest.MonkeyPatch.context() as patch:
        if not os.environ.get("PTXBRIDGE_CACHE_DIR"):
            patch.setenv("PTXBRIDGE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield


def run(art, device, kernel, *args, grid=1, block=32):
    """Load ``art`` on ``device``, launch ``kernel`` and return the arrays among ``args`` after it."""
    module = ptxbridge.load([art], device=device)
    moved = [module.to_device(a) if isinstance(a, np.ndarray) else a for a in args]
    getattr(module, kernel)(*moved, grid=grid, block=block)
    return [module.to_host(m) for a, m in zip(args, moved, strict=True) if isinstance(a, np.ndarray)]


def halves(n, low, high, seed):
    return np.random.default_rng(seed).uniform(low, high, n).astype(np.float16)


# --- float16: numba's Numbast wrappers, linked from the artifact's libraries ------------------


def fp16_arith(out, less, a, b):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = (a[i] * b[i] - a[i]) / b[i] + a[i]
        less[i] = a[i] < b[i]


@pytest.mark.parametrize("device", DEVICES)
def test_float16_arithmetic_and_comparison(device):
    art = pn.compile(fp16_arith, "void(float16[::1], boolean[::1], float16[::1], float16[::1])")
    assert [lib.name for lib in art.libraries] == ["cuda_fp16_wrappers.cu"] and not art.imports
    a, b = halves(64, -4, 4, 1), halves(64, 0.5, 3, 2)
    out, less, _, _ = run(art, device, "fp16_arith", np.zeros(64, np.float16), np.zeros(64, bool), a, b,
                          block=64)
    np.testing.assert_array_equal(out, (a * b - a) / b + a)  # each NumPy float16 op rounds like __half
    np.testing.assert_array_equal(less, a < b)


def fp16_rounding(out, a):
    i = cuda.grid(1)
    if i < a.size:
        out[0, i] = fp16.hfloor(a[i])
        out[1, i] = fp16.hceil(a[i])
        out[2, i] = fp16.htrunc(a[i])
        out[3, i] = fp16.habs(a[i])
        out[4, i] = fp16.hneg(a[i])


@pytest.mark.parametrize("device", DEVICES)
def test_float16_rounding_functions(device):
    art = pn.compile(fp16_rounding, "void(float16[:, ::1], float16[::1])")
    a = halves(32, -8, 8, 3)
    out = run(art, device, "fp16_rounding", np.zeros((5, 32), np.float16), a)[0]
    np.testing.assert_array_equal(out, [np.floor(a), np.ceil(a), np.trunc(a), np.abs(a), -a])


def fp16_transcendental(out, a):
    i = cuda.grid(1)
    if i < a.size:
        out[0, i] = fp16.hsin(a[i])
        out[1, i] = fp16.hexp(a[i])
        out[2, i] = fp16.hsqrt(a[i])


@pytest.mark.parametrize("device", DEVICES)
def test_float16_transcendental_functions(device):
    art = pn.compile(fp16_transcendental, "void(float16[:, ::1], float16[::1])")
    a = halves(32, 0.1, 2, 4)
    out = run(art, device, "fp16_transcendental", np.zeros((3, 32), np.float16), a)[0]
    ref = [np.sin(a.astype(np.float32)), np.exp(a.astype(np.float32)), np.sqrt(a.astype(np.float32))]
    np.testing.assert_allclose(out.astype(np.float32), ref, rtol=2e-3)


def fp16_add(out, a, b):
    i = cuda.grid(1)
    out[i] = a[i] + b[i]


def fp16_fma(out, a, b):
    i = cuda.grid(1)
    out[i] = a[i] * b[i] + a[i]


@pytest.mark.parametrize("output", ["ptx", "ltoir"])
def test_float16_kernels_with_overlapping_wrappers_share_one_image(output):
    sig = "void(float16[::1], float16[::1], float16[::1])"
    add, fma = (pn.compile(k, sig, output=output) for k in (fp16_add, fp16_fma))
    both = [*add.libraries, *fma.libraries]  # each carries the wrappers it calls; both call `+`
    assert len(both) == 2 and both[0].code != both[1].code
    assert all(lib.kind.value == output for lib in both)
    image = ptxbridge.link([add, fma], arch="sm_90")
    assert set(image.kernels) == {"fp16_add", "fp16_fma"}
    if output == "ptx":  # weak definitions: both wrappers for `+` link, on nvJitLink and the CPU loader
        assert all("_ZplRK6__halfS1__nbst" in lib.device_functions for lib in both)
        module = image.load(CPU)
        a, b, out = halves(32, -2, 2, 5), halves(32, -2, 2, 6), np.zeros(32, np.float16)
        module.fp16_fma(out, a, b, grid=1, block=32)
        np.testing.assert_array_equal(out, a * b + a)
        module.fp16_add(out, a, b, grid=1, block=32)
        np.testing.assert_array_equal(out, a + b)


# --- NRT: numba's runtime for arrays made inside kernels ------------------------------------


def nrt_sum(out, x):
    out[0] = np.sum(x)


def nrt_copy(out, x):
    y = x.copy()
    out[0] = y[0] + y[x.size - 1]


def nrt_reshape(out, x):
    y = x.reshape((2, x.size // 2))
    out[0] = y[1, 0]


@pytest.fixture(scope="module")
def nrt_kernels():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(numba_config, "CUDA_ENABLE_NRT", True, raising=False)
        return {k.__name__: pn.compile(k, "void(float32[::1], float32[::1])")
                for k in (nrt_sum, nrt_copy, nrt_reshape)}


@pytest.mark.slow
def test_nrt_kernels_carry_numbas_runtime_and_link(nrt_kernels):
    libraries = {name: [lib.name for lib in art.libraries] for name, art in nrt_kernels.items()}
    assert libraries == {"nrt_sum": ["nrt.cu"], "nrt_copy": ["nrt.cu"],
                         "nrt_reshape": ["nrt.cu", "reshape_funcs.cu"]}
    assert not any(art.imports for art in nrt_kernels.values())  # numba's own symbols blame no one
    image = ptxbridge.link(list(nrt_kernels.values()), arch="sm_90")  # NRT once, weak
    assert set(image.kernels) == set(nrt_kernels)  # NRT_MemSys_set is numba's, not the user's
    defined = {f.name for f in read_cubin(image.cubin).device_functions}
    assert {"NRT_incref", "NRT_decref", "NRT_MemInfo_alloc_aligned", "numba_attempt_nocopy_reshape"} \
        <= defined


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_nrt_kernels_run(nrt_kernels, device):
    x = np.arange(1, 9, dtype=np.float32)
    results = {name: run(art, device, name, np.zeros(1, np.float32), x, block=1)[0][0]
               for name, art in nrt_kernels.items()}
    assert results == {"nrt_sum": x.sum(), "nrt_copy": x[0] + x[-1], "nrt_reshape": x[4]}


# --- link= sources -----------------------------------------------------------------------------


def test_declare_device_link_source_is_carried_and_reread(tmp_path):
    source = tmp_path / "scale.cu"
    source.write_text('extern "C" __device__ float scale(float x) { return 3.0f * x; }\n')
    scale = cuda.declare_device("scale", "float32(float32)", abi="c", link=str(source))

    def uses_scale(x):
        i = cuda.grid(1)
        x[i] = scale(x[i])

    art = pn.compile(uses_scale, "void(float32[::1])")
    assert [lib.name for lib in art.libraries] == ["scale.cu"] and not art.imports
    x = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(run(art, CPU, "uses_scale", x.copy(), block=8)[0], 3 * x)
    source.write_text('extern "C" __device__ float scale(float x) { return x + 1.0f; }\n')
    again = pn.compile(uses_scale, "void(float32[::1])")  # the kernel's PTX is cached, the file re-read
    assert again.code == art.code
    np.testing.assert_array_equal(run(again, CPU, "uses_scale", x.copy(), block=8)[0], x + 1)


@pytest.mark.parametrize("device", DEVICES)
def test_cuda_jit_link_files_are_carried(device, tmp_path):
    source = tmp_path / "offset.cu"
    source.write_text('extern "C" __device__ int offset(int* r, int x) { *r = x + 40; return 0; }\n')
    offset = cuda.declare_device("offset", "int32(int32)")  # numba's own ABI, linked by cuda.jit(link=)

    def add_offset(x):
        i = cuda.grid(1)
        x[i] = offset(x[i])

    art = pn.compile(cuda.jit(link=[str(source)])(add_offset), "void(int32[::1])")
    assert [lib.name for lib in art.libraries] == ["offset.cu"] and not art.imports
    x = np.arange(16, dtype=np.int32)
    np.testing.assert_array_equal(run(art, device, "add_offset", x, block=16)[0], x + 40)


def fill_sevens(x):
    for i in range(x.size):
        x[i] = 7.0


@pytest.mark.parametrize("device", DEVICES)
def test_void_c_abi_functions_link_between_numba_artifacts(device):
    fill = cuda.declare_device("fill_sevens", "void(float32[::1])", abi="c")

    def calls_fill(x):
        fill(x)

    callee = pn.compile(fill_sevens, "void(float32[::1])", device=True)
    caller = pn.compile(calls_fill, "void(float32[::1])")  # numba declares a .b64 return for void
    assert caller.imports["fill_sevens"].returns == Opaque(8, 8) == callee.device_functions[
        "fill_sevens"].returns
    module = ptxbridge.load([caller, callee], device=device)
    x = module.to_device(np.zeros(5, np.float32))
    module.calls_fill(x, grid=1, block=1)
    np.testing.assert_array_equal(module.to_host(x), 7.0)


def test_void_c_definition_of_a_numba_void_call_is_refused_before_nvjitlink(tmp_path):
    source = tmp_path / "fill.cu"
    source.write_text('extern "C" __device__ void fill(void* m, void* p, long long n, long long size,\n'
                      '                                 float* data, long long shape, long long stride) {}\n')
    fill = cuda.declare_device("fill", "void(float32[::1])", abi="c", link=str(source))

    def calls_fill(x):
        fill(x)

    with pytest.raises(AbiMismatchError, match="void function a 64-bit return value"):
        pn.compile(calls_fill, "void(float32[::1])")  # nvJitLink: "Prototype doesn't match", or a crash
    cpp = ptxbridge.nvrtc.compile(source.read_text(), name="fill.cu")
    plain = cuda.declare_device("fill", "void(float32[::1])", abi="c")

    def calls_plain(x):
        plain(x)

    with pytest.raises(LinkError, match="'fill'"):
        ptxbridge.link([pn.compile(calls_plain, "void(float32[::1])"), cpp])


# --- print ------------------------------------------------------------------------------------


def prints(x):
    i = cuda.grid(1)
    print("value", i, x[i])


@pytest.mark.parametrize("device", DEVICES)
def test_print_needs_no_import(device, capfd):
    art = pn.compile(prints, "void(float32[::1])")
    assert not art.imports  # vprintf is the driver's (and the CPU loader's)
    run(art, device, "prints", np.array([1.5, 2.5], np.float32), block=2)
    lines = sorted(capfd.readouterr().out.splitlines())
    assert lines == ["value 0 1.500000", "value 1 2.500000"]


# --- exceptions -----------------------------------------------------------------------------


def checked_sqrt(out, x):
    i = cuda.grid(1)
    if x[i] < 0:
        raise ValueError("negative input")
    out[i] = math.sqrt(x[i])


@pytest.mark.parametrize("device", DEVICES)
def test_raise_ends_the_thread_and_reports_nothing_as_numba_without_debug(device):
    art = pn.compile(checked_sqrt, "void(float64[::1], float64[::1])")
    assert "__errcode__" not in art.code.decode()  # numba stores exceptions only with debug=True
    x = np.linspace(-3, 4, 32)
    out = run(art, device, "checked_sqrt", np.full(32, -1.0), x)[0]
    np.testing.assert_array_equal(out, np.where(x < 0, -1.0, np.sqrt(np.abs(x))))


class OutOfRange(Exception):
    pass


def checked_log(out, x):
    i = cuda.grid(1)
    if x[i] < 0:
        raise ValueError("negative input", 3)
    if x[i] > 1000:
        raise OutOfRange("too big")
    out[i] = math.log(x[i])


DEBUG = pn.NumbaOptions(debug=True, opt=False)


@pytest.mark.parametrize("device", DEVICES)
def test_debug_kernel_exceptions_are_raised_after_the_launch_like_numba(device):
    art = pn.compile(checked_log, "void(float64[::1], float64[::1])", options=DEBUG)
    assert [e.type for e in art.raises["checked_log"].values()] == ["ValueError", f"{__name__}.OutOfRange"]
    module = ptxbridge.load([art], device=device)
    x = np.linspace(1, 50, 64)
    x[[37, 45]] = -1.0, -2.0  # two threads of block 1 raise; the first to store its code is reported
    out = module.to_device(np.zeros(64))
    with pytest.raises(ptxbridge.KernelRaisedError) as raised:
        module.checked_log(out, module.to_device(x), grid=2, block=32)
    error = raised.value
    assert isinstance(error.exception, ValueError) and error.exception.args == ("negative input", 3)
    assert error.ctaid == (1, 0, 0) and error.tid[0] in (5, 13) and error.tid[1:] == (0, 0)
    line = checked_log.__code__.co_firstlineno + 3
    assert str(error).startswith(f"checked_log: thread tid={error.tid} ctaid=(1, 0, 0) raised "
                                 f"ValueError('negative input', 3) (In function 'checked_log', file ")
    assert str(error).endswith(f"line {line})")
    x[[37, 45]] = 2000.0, 3.0
    with pytest.raises(ptxbridge.KernelRaisedError, match=r"raised .*OutOfRange\('too big'\)") as raised:
        module.checked_log(out, module.to_device(x), grid=2, block=32)
    assert raised.value.exception is None  # not a built-in exception: named, not rebuilt
    x[37] = 4.0
    module.checked_log(out, module.to_device(x), grid=2, block=32)  # the flag is cleared before each launch
    np.testing.assert_allclose(module.to_host(out), np.log(x), rtol=1e-15)


def test_saved_debug_kernel_reports_the_exception_code():
    art = pn.compile(checked_log, "void(float64[::1], float64[::1])", options=DEBUG)
    saved = ptxbridge.Image.from_bytes(ptxbridge.link([art], arch="sm_90").to_bytes())
    unlisted = r"checked_log: thread .* raised exception code 1, which the kernel.s exception table does not"
    with pytest.raises(ptxbridge.KernelRaisedError, match=unlisted) as raised:
        saved.load(CPU).checked_log(np.zeros(4), np.array([1.0, -1, 2, 3]), grid=1, block=4)
    assert (raised.value.tid, raised.value.ctaid, raised.value.exception) == ((1, 0, 0), (0, 0, 0), None)


def test_debug_needs_opt_off():
    with pytest.raises(ArgumentError, match="debug=True needs opt=False"):
        pn.NumbaOptions(debug=True)


# --- the compile cache: closures over different functions -----------------------------------


def closure(op):
    def apply(out, a, b):
        i = cuda.grid(1)
        out[i] = op(a[i], b[i])
    return apply


def test_closures_over_different_functions_never_share_a_cache_entry(monkeypatch):
    sig = "void(float64[::1], float64[::1], float64[::1])"
    a, b = np.linspace(0.1, 1, 16), np.linspace(2, 3, 16)
    ops = {operator.add: a + b, operator.sub: a - b, math.atan2: np.arctan2(a, b), math.pow: a ** b}
    arts = {op: pn.compile(closure(op), sig, name="apply") for op in ops}
    assert len({art.code for art in arts.values()}) == len(ops)
    for op, expected in ops.items():
        out = run(arts[op], CPU, "apply", np.zeros(16), a, b, block=16)[0]
        np.testing.assert_allclose(out, expected, rtol=1e-12)
    from numba.cuda import compiler

    def no_compiler(*args, **kwargs):
        raise AssertionError("numba-cuda ran although the cache holds this closure")

    monkeypatch.setattr(compiler, "_compile_pyfunc_with_fixup", no_compiler)
    assert pn.compile(closure(operator.sub), sig, name="apply").code == arts[operator.sub].code
    assert fingerprint(closure(math.cos)) != fingerprint(closure(math.sin))


# --- NumPy scalar types, enums, records -------------------------------------------------------


def numpy_types(out, x):
    i = cuda.grid(1)
    tmp = cuda.local.array(2, dtype=np.float16)
    tmp[0] = np.float16(x[i])
    out[i] = np.float32(tmp[0]) * np.float32(2.5) + np.int16(x[i])


def converts_to(kind):
    def convert(out, x):
        i = cuda.grid(1)
        out[i] = kind(x[i]) / kind(3)
    return convert


@pytest.mark.parametrize("device", DEVICES)
def test_numpy_scalar_types(device):
    art = pn.compile(numpy_types, "void(float32[::1], float32[::1])")
    x = np.linspace(-5, 5, 32).astype(np.float32)
    out = run(art, device, "numpy_types", np.zeros(32, np.float32), x)[0]
    expected = x.astype(np.float16).astype(np.float32) * np.float32(2.5) + x.astype(np.int16)
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    third = {t: pn.compile(converts_to(t), "void(float64[::1], float64[::1])", name="convert")
             for t in (np.float32, np.float64)}
    assert third[np.float32].code != third[np.float64].code  # the type is part of the cache key
    ones = np.ones(4)
    got = {t: run(art, device, "convert", np.zeros(4), ones, block=4)[0][0] for t, art in third.items()}
    assert got == {np.float32: np.float32(1) / np.float32(3), np.float64: 1 / 3}


class Mode(enum.IntEnum):
    LOW = 1
    HIGH = 7


def by_mode(out, mode):
    if mode == Mode.HIGH:
        out[0] = 100
    else:
        out[0] = mode.value


@pytest.mark.parametrize("device", DEVICES)
def test_intenum_parameter(device):
    art = pn.compile(by_mode, nt.void(nt.int64[::1], nt.IntEnumMember(Mode, nt.int64)))
    assert art.kernels["by_mode"].params[1].type == Scalar(art.kernels["by_mode"].params[1].type.dtype)
    got = [run(art, device, "by_mode", np.zeros(1, np.int64), m, block=1)[0][0] for m in Mode]
    assert got == [1, 100]


class Color(enum.Enum):
    RED = 1
    GREEN = 2
    BLUE = 7


def by_color(out, a, b):
    out[0] = a == b
    out[1] = a is not b
    out[2] = a.value * 10 + b.value
    out[3] = a == Color.BLUE


@pytest.mark.parametrize("device", DEVICES)
def test_plain_enum_parameters_pass_their_values_like_numba(device):
    member = nt.EnumMember(Color, nt.int64)  # what numba types Color.RED as
    art = pn.compile(by_color, nt.void(nt.int64[::1], member, member))
    assert [p.type for p in art.kernels["by_color"].params[1:]] == [Scalar(dtype("i64"))] * 2
    for a, b in [(Color.RED, Color.RED), (Color.RED, Color.GREEN), (Color.BLUE, Color.GREEN)]:
        expected = np.zeros(4, np.int64)
        by_color(expected, a, b)  # the kernel's own code, run by Python
        np.testing.assert_array_equal(run(art, device, "by_color", np.zeros(4, np.int64), a, b, block=1)[0],
                                      expected)


class Planet(enum.Enum):  # numba types its members as EnumMember(Planet, UniTuple(float64 x 2))
    MERCURY = (3.303e23, 2.4397e6)
    EARTH = (5.976e24, 6.37814e6)


def gravity(out, p, q):
    out[0] = p == q
    out[1] = p.value[0] / (p.value[1] * p.value[1])


@pytest.mark.parametrize("device", DEVICES)
def test_enum_with_tuple_values(device):
    member = nt.EnumMember(Planet, nt.UniTuple(nt.float64, 2))
    art = pn.compile(gravity, nt.void(nt.float64[::1], member, member))
    for p, q in [(Planet.EARTH, Planet.EARTH), (Planet.MERCURY, Planet.EARTH)]:
        expected = np.zeros(2)
        gravity(expected, p, q)
        np.testing.assert_allclose(run(art, device, "gravity", np.zeros(2), p, q, block=1)[0], expected,
                                   rtol=1e-15)


class Flavor(enum.Enum):
    VANILLA = "vanilla"


def test_enum_of_non_numbers_is_refused_naming_the_parameter():
    with pytest.raises(ArgumentError, match=r"'flavor'.*Flavor value.*not a number type"):
        pn.compile(lambda out, flavor: None, nt.void(nt.int64[::1], nt.EnumMember(Flavor, nt.unicode_type)),
                   name="flavors")


NESTED = np.dtype([("v", np.float32, (3,)), ("n", np.int32), ("m", np.float64, (2, 2))], align=True)


def nested_fields(out, r):
    out[0] = r.v[0] + r.v[1] + r.v[2] + r.n + r.m[1, 0] + r.m[0, 1]


@pytest.mark.parametrize("device", DEVICES)
def test_record_with_nested_array_fields(device):
    art = pn.compile(nested_fields, nt.void(nt.float64[::1], from_dtype(NESTED)))
    record = art.kernels["nested_fields"].params[1].type
    assert isinstance(record, Struct) and record.fields[0].type == Opaque(12, 4)
    assert record.fields[2].type == Opaque(32, 8)
    value = np.zeros(1, NESTED)[0]
    value["v"], value["n"], value["m"] = [1, 2, 3], 10, [[0, 100], [1000, 0]]
    out = run(art, device, "nested_fields", np.zeros(1), value, block=1)[0]
    assert out[0] == 1116


TEXT = np.dtype([("x", np.int32), ("y", "S5"), ("z", "U3"), ("w", np.float64)], align=True)


def after_text(out, r):
    out[0] = r.x + r.w


@pytest.mark.parametrize("device", DEVICES)
def test_record_with_text_fields(device):
    art = pn.compile(after_text, nt.void(nt.float64[::1], from_dtype(TEXT)))
    fields = art.kernels["after_text"].params[1].type.fields
    assert [f.type for f in fields[1:3]] == [Opaque(5, 1), Opaque(12, 4)]
    value = np.zeros(1, TEXT)[0]
    value["x"], value["y"], value["z"], value["w"] = 3, b"abc", "xyz", 0.5
    assert run(art, device, "after_text", np.zeros(1), value, block=1)[0][0] == 3.5


def bump(out, r):
    r.n += 5  # numba passes a record by pointer to a copy: the kernel may write it
    r.v[2] = r.m[1, 1]
    out[0] = r.n


@pytest.mark.parametrize("device", DEVICES)
def test_record_written_in_the_kernel_is_copied_back_like_numba(device):
    art = pn.compile(bump, nt.void(nt.float64[::1], from_dtype(NESTED)))
    records = np.zeros(3, NESTED)
    records["n"], records["m"] = [10, 20, 30], np.arange(12.0).reshape(3, 2, 2)
    expected = records.copy()
    expected[1]["n"], expected[1]["v"][2] = 25, 7.0
    out = run(art, device, "bump", np.zeros(1), records[1], block=1)[0]
    assert out[0] == 25
    np.testing.assert_array_equal(records, expected)  # numba copies the record back (InOut)
    standalone = np.zeros((), NESTED)[()]
    standalone["n"] = 1
    run(art, device, "bump", np.zeros(1), standalone, block=1)
    assert standalone["n"] == 6
    as_dict = {"v": np.zeros(3, np.float32), "n": 1, "m": np.eye(2)}
    assert run(art, device, "bump", np.zeros(1), as_dict, block=1)[0][0] == 6
    assert as_dict["n"] == 1  # a dict has no record memory to copy back to
    frozen = records.copy()
    frozen.flags.writeable = False
    run(art, device, "bump", np.zeros(1), frozen[0], block=1)
    np.testing.assert_array_equal(frozen, records)  # read-only memory is never written


def draw_uniform(states, out):
    i = cuda.grid(1)
    if i < states.size:
        for k in range(out.shape[1]):
            out[i, k] = xoroshiro128p_uniform_float32(states, i)


@pytest.mark.parametrize("device", DEVICES)
def test_xoroshiro_random_numbers(device):
    states = np.empty(96, xoroshiro128p_dtype)
    init_xoroshiro128p_states_cpu(states, 2024, 0)
    art = pn.compile(draw_uniform, nt.void(from_dtype(xoroshiro128p_dtype)[::1], nt.float32[:, ::1]))
    assert art.kernels["draw_uniform"].params[0].type.record.fields[1].name == "s1"
    after, out = run(art, device, "draw_uniform", states.copy(), np.zeros((96, 4), np.float32), grid=3)
    expected = np.empty((96, 4), np.float32)  # the same generator, run by numba on the host
    for i in range(96):
        for k in range(4):
            expected[i, k] = xoroshiro128p_uniform_float32(states, i)
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(after, states)  # each thread advanced its own state


def test_record_array_of_the_wrong_element_size_is_refused():
    art = pn.compile(draw_uniform, nt.void(from_dtype(xoroshiro128p_dtype)[::1], nt.float32[:, ::1]))
    module = ptxbridge.load([art], device=CPU)
    with pytest.raises(ArgumentError, match="16-byte records"):
        module.draw_uniform(np.zeros(8, np.uint64), np.zeros((8, 1), np.float32), grid=1, block=8)


def doubles(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] *= 2


def test_misaligned_float64_view_is_refused_with_what_to_do():
    module = ptxbridge.load([pn.compile(doubles, "void(float64[::1])")], device=CPU)
    raw = np.zeros(17, np.float32)
    start = 1 if raw.ctypes.data % 8 == 0 else 0
    view = raw[start:start + 16].view(np.float64)  # 8 doubles at a 4-byte offset
    with pytest.raises(ArgumentError, match=r"argument 'x' .* not a multiple of 8 bytes; pass an aligned"):
        module.doubles(view, grid=1, block=8)
    copy = np.array(view)
    module.doubles(copy, grid=1, block=8)
    np.testing.assert_array_equal(copy, 2 * view)


# --- cooperative groups, warp size ------------------------------------------------------------


def grid_rotate(x, y):
    grid = cuda.cg.this_grid()
    i = cuda.grid(1)
    x[i] = i * 10
    grid.sync()
    y[i] = x[(i + 1) % x.size]


def test_grid_sync_links_the_device_runtime_and_launches_cooperatively():
    art = pn.compile(grid_rotate, "void(int32[::1], int32[::1])")
    assert [lib.name for lib in art.libraries] == ["libcudadevrt.a"] and not art.imports
    assert art.libraries[0].kind is CodeKind.LIBRARY
    assert "grid_rotate" in cooperative_kernels(ptxbridge.link([art], arch="sm_90").cubin)


@pytest.mark.parametrize("device", DEVICES)
def test_grid_sync_runs(device):
    art = pn.compile(grid_rotate, "void(int32[::1], int32[::1])")
    y = run(art, device, "grid_rotate", np.zeros(128, np.int32), np.zeros(128, np.int32), grid=4)[1]
    np.testing.assert_array_equal(y, np.roll(np.arange(128) * 10, -1))


def warp_size(out):
    out[cuda.grid(1)] = cuda.warpsize


@pytest.mark.parametrize("device", DEVICES)
def test_warpsize(device):
    art = pn.compile(warp_size, "void(int32[::1])")
    np.testing.assert_array_equal(run(art, device, "warp_size", np.zeros(8, np.int32), block=8)[0], 32)
