"""check(): signatures against what real NVRTC and numba-cuda PTX declares, and the messages on mismatch."""

from __future__ import annotations

import re

import pytest
from _ptx_samples import numba_ptx, nvrtc_cubin, nvrtc_ptx

from ptxbridge.abi import (
    AbiMismatchError,
    Constant,
    Convention,
    LaunchMeta,
    NumbaArray,
    Opaque,
    Param,
    Pointer,
    Scalar,
    Signature,
    Slice,
    Struct,
    StructField,
    Tuple,
    dtype,
)
from ptxbridge.abi.check import DeclaredParam, check, check_layout, declared_params, find_entry
from ptxbridge.abi.ptx import PtxModule, read_ptx


def s(name: str) -> Scalar:
    return Scalar(dtype(name))


def sig(name: str, *params: tuple[str, object], convention: str = "c", **kw) -> Signature:
    return Signature(name, tuple(Param(n, t) for n, t in params), Convention(convention), **kw)


MIXED = Struct("Mixed", (StructField("c", s("i8")), StructField("d", s("f64")), StructField("s", s("i16"))))
SMALL = Struct("Small", (StructField("a", s("i16")), StructField("b", s("i8"))))
SCALARS = [("x", Pointer(s("f32"))), ("n", s("i32")), ("m", MIXED), ("d", s("f64")), ("c", s("i8")),
           ("s", SMALL), ("u", s("u64")), ("h", s("f16"))]


@pytest.fixture(scope="module")
def nvrtc() -> PtxModule:
    return read_ptx(nvrtc_ptx(), "sample.ptx")


@pytest.fixture(scope="module")
def numba() -> dict[str, PtxModule]:
    return {name: read_ptx(numba_ptx(name), f"{name}.ptx") for name in ("saxpy", "scale2d", "mixed", "add")}


def mismatch(signature: Signature, code) -> str:
    with pytest.raises(AbiMismatchError) as caught:
        check(signature, code)
    return str(caught.value)


# --- NVRTC, convention "c" ------------------------------------------------------


def test_nvrtc_signatures_pass(nvrtc: PtxModule) -> None:
    launch = LaunchMeta(maxntid=(128, 1, 1), minnctapersm=2)
    check(sig("scalars", *SCALARS, launch=launch), nvrtc)
    check(sig("clustered", ("p", Pointer(s("i32"))), launch=LaunchMeta(cluster=(2, 1, 1))), nvrtc)
    check(sig("caller", ("p", Pointer(s("f32"))), ("q", Pointer(s("f32"), mutable=False))), nvrtc)
    check(sig("dev_mul", ("a", s("f32")), ("b", s("f32")), kind="device", returns=s("f32")), nvrtc)
    # zero-sized parameters lower to nothing, so they may sit anywhere
    check(sig("clustered", ("tag", Constant(3)), ("p", Pointer(s("i32"))), ("z", Opaque(0, 1))), nvrtc)


def test_the_issue_example_slice_against_a_pointer(nvrtc: PtxModule) -> None:
    wrong = sig("caller", ("p", Pointer(s("f32"))), ("q", Slice(s("f32"))))
    assert mismatch(wrong, nvrtc) == (
        "caller: parameter 'q' lowers to 2 params (u64, u64) but the PTX .entry caller has 1 (u64) "
        "at that position; in all, the signature lowers to 3 params and the PTX .entry caller has 2")


def test_a_slice_matches_rustcs_16_byte_fat_pointer_and_nothing_wider() -> None:
    def entry(size: int) -> PtxModule:
        return read_ptx(".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .f32 k_a, "
                        f".param .align 8 .b8 k_x[{size}], .param .u32 k_n) {{ ret; }}\n")

    check(sig("k", ("a", s("f32")), ("x", Slice(s("f32"))), ("n", s("u32"))), entry(16))  # the same bytes
    assert mismatch(sig("k", ("a", s("f32")), ("x", Slice(s("f32"))), ("n", s("u32"))), entry(24)).startswith(
        "k: parameter 'x' lowers to 2 params (u64, u64) but the PTX .entry k has 1 (b8[24])")


def test_missing_parameter_names_the_first_that_no_longer_fits(nvrtc: PtxModule) -> None:
    without_n = [p for p in SCALARS if p[0] != "n"]
    assert mismatch(sig("scalars", *without_n), nvrtc).startswith(
        "scalars: parameter 'm' lowers to 1 param (b8[24]) but the PTX .entry scalars has 2 (u32, b8[24]) "
        "at that position; in all, the signature lowers to 7 params and the PTX .entry scalars has 8")


def test_wrong_size_shows_both_offsets(nvrtc: PtxModule) -> None:
    wide_n = [(n, s("i64") if n == "n" else t) for n, t in SCALARS]
    assert mismatch(sig("scalars", *wide_n), nvrtc) == (
        "scalars: parameter 'n' lowers to 1 param (s64 at offset 8) but the PTX .entry scalars has 1 "
        "(u32 at offset 8) at that position")


def test_wrong_struct_layout_is_a_size_mismatch(nvrtc: PtxModule) -> None:
    packed_wrong = Struct("Mixed", (StructField("c", s("i8")), StructField("d", s("f32"))))
    params = [(n, packed_wrong if n == "m" else t) for n, t in SCALARS]
    # (i8, f32) is 8 bytes aligned to 4, so it would also start earlier
    assert "parameter 'm' lowers to 1 param (b8[8] at offset 12) but the PTX .entry scalars has 1 " \
           "(b8[24] at offset 16)" in mismatch(sig("scalars", *params), nvrtc)


def test_extra_parameter_in_the_ptx(nvrtc: PtxModule) -> None:
    assert mismatch(sig("scalars", *SCALARS[:-1]), nvrtc) == (
        "scalars: the PTX .entry scalars has 1 more param after parameter 'u' (b8[2] at offset 64)")


def test_extra_parameter_in_the_signature(nvrtc: PtxModule) -> None:
    assert mismatch(sig("clustered", ("p", Pointer(s("i32"))), ("n", s("u32"))), nvrtc).startswith(
        "clustered: parameter 'n' lowers to 1 param (u32) but the PTX .entry clustered has 0 (nothing left) "
        "at that position")


def test_launch_metadata_must_agree(nvrtc: PtxModule) -> None:
    assert mismatch(sig("scalars", *SCALARS, launch=LaunchMeta(maxntid=(256, 1, 1))), nvrtc) == (
        "scalars: the signature's maxntid is (256, 1, 1) but the PTX .entry scalars declares (128, 1, 1)")
    assert "minnctapersm is 4" in mismatch(sig("scalars", *SCALARS, launch=LaunchMeta(minnctapersm=4)), nvrtc)
    assert "cluster shape is (1, 2, 1)" in mismatch(
        sig("clustered", ("p", Pointer(s("i32"))), launch=LaunchMeta(cluster=(1, 2, 1))), nvrtc)


def test_device_function_return_value(nvrtc: PtxModule) -> None:
    args = (("a", s("f32")), ("b", s("f32")))
    assert mismatch(sig("dev_mul", *args, kind="device", returns=s("f64")), nvrtc) == (
        "dev_mul: the return value lowers to 1 param (f64 at offset 0) but the PTX .func dev_mul has 1 "
        "(b32 at offset 0) at that position")
    assert mismatch(sig("dev_mul", *args, kind="device"), nvrtc) == (
        "dev_mul: the return value lowers to nothing but the PTX .func dev_mul has 1 (b32)")


def test_kernel_signature_against_a_func(nvrtc: PtxModule) -> None:
    assert mismatch(sig("dev_mul", ("a", s("f32")), ("b", s("f32"))), nvrtc) == (
        "dev_mul: the signature is a kernel function, so the PTX must declare a .entry (got .func dev_mul)")


# --- numba-cuda, convention "numba" ------------------------------------------------


def arr(dt: str, ndim: int, layout: str) -> NumbaArray:
    return NumbaArray(dtype(dt), ndim, layout)


NUMBA_SIGNATURES = {
    "saxpy": [("a", s("f32")), ("x", arr("f32", 1, "C")), ("y", arr("f32", 1, "C")),
              ("out", arr("f32", 1, "C"))],
    "scale2d": [("m", arr("f64", 2, "F")), ("f", s("f64"))],
    "mixed": [("flag", s("bool")), ("z", s("c64")), ("t", Tuple((s("i32"), s("i32")))),
              ("vol", arr("i32", 3, "A")), ("n", s("i64"))],
}


@pytest.mark.parametrize("name", sorted(NUMBA_SIGNATURES))
def test_numba_kernels_pass(numba: dict[str, PtxModule], name: str) -> None:
    signature = sig(name, *NUMBA_SIGNATURES[name], convention="numba")
    check(signature, numba[name])
    check(signature, numba[name].function(name))


def test_numba_wrong_ndim_reports_the_totals(numba: dict[str, PtxModule]) -> None:
    params = [(n, arr("f32", 2, "C") if n == "x" else t) for n, t in NUMBA_SIGNATURES["saxpy"]]
    message = mismatch(sig("saxpy", *params, convention="numba"), numba["saxpy"])
    # all-u64 arrays are indistinguishable by position; the totals say what is really wrong
    assert message.endswith("in all, the signature lowers to 24 params and the PTX .entry saxpy has 22")


def test_numba_c_abi_device_function(numba: dict[str, PtxModule]) -> None:
    add = sig("add", ("a", s("f32")), ("b", s("f32")), convention="numba", kind="device", returns=s("f32"))
    check(add, numba["add"])
    wrong = sig("add", ("a", s("f32")), convention="numba", kind="device", returns=s("f32"))
    assert mismatch(wrong, numba["add"]) == "add: the PTX .func add has 1 more param after parameter 'a' " \
                                            "(b32 at offset 4)"


# --- find_entry and other sources of declared params ---------------------------------


GENERIC = """.version 8.0
.target sm_90
.address_size 64
.visible .entry vecadd_TID_0123456789abcdef0123456789abcdef(.param .u64 a, .param .u64 a_len) { ret; }
.visible .entry pair_TID_00000000000000000000000000000000() { ret; }
.visible .entry pair_TID_11111111111111111111111111111111() { ret; }
.visible .entry pair_TID_short() { ret; }
"""


def test_find_entry_resolves_generic_cuda_oxide_names() -> None:
    module = read_ptx(GENERIC, "oxide.ptx")
    assert find_entry(module, "vecadd").name.startswith("vecadd_TID_")
    check(sig("vecadd", ("a", Slice(s("f32"))), convention="oxide"), module)
    with pytest.raises(AbiMismatchError, match=r"pair: several generic instances in oxide\.ptx"):
        find_entry(module, "pair")
    with pytest.raises(AbiMismatchError, match=re.escape("vec: oxide.ptx has no .entry or .func of that name "
                                                         "(got vecadd_TID_")):
        find_entry(module, "vec")


def test_check_layout_takes_records_without_types() -> None:
    # what a cubin's EIATTR_KPARAM_INFO gives: ordinal, offset, size only
    signature = sig("k", ("p", Pointer(s("f32"))), ("n", s("u32")), ("v", s("f64")))
    records = [DeclaredParam(0, 0, 8), DeclaredParam(1, 8, 4), DeclaredParam(2, 16, 8)]
    check_layout(signature, records, "cubin k")
    with pytest.raises(AbiMismatchError) as caught:
        check_layout(signature, [DeclaredParam(0, 0, 8), DeclaredParam(1, 8, 8)], "cubin k")
    assert str(caught.value) == ("k: parameter 'n' lowers to 1 param (u32 at offset 8) but the cubin k has 1 "
                                 "(8 bytes at offset 8) at that position; in all, the signature lowers to "
                                 "3 params and the cubin k has 2")


def test_declared_params_follow_natural_alignment(nvrtc: PtxModule) -> None:
    declared = declared_params(nvrtc.function("scalars").params)
    assert [(d.ordinal, d.offset, d.size, d.type) for d in declared] == [
        (0, 0, 8, "u64"), (1, 8, 4, "u32"), (2, 16, 24, "b8"), (3, 40, 8, "f64"), (4, 48, 1, "u8"),
        (5, 50, 4, "b8"), (6, 56, 8, "u64"), (7, 64, 2, "b8")]
    # and agree with the signature's own layout, which nothing else computes
    layout = sig("scalars", *SCALARS).layout
    assert [(lp.offset, lp.param.size) for lp in layout.params] == [(d.offset, d.size) for d in declared]
    assert layout.size == nvrtc.function("scalars").size == 66


# --- the cubin side: the same kernels as NVRTC's sm_90 cubin records them ------------


@pytest.fixture(scope="module")
def cubin():
    from ptxbridge.abi.cubin import read_cubin

    return read_cubin(nvrtc_cubin(), "sample.cubin")


def test_ptx_natural_offsets_are_what_the_cubin_records(nvrtc: PtxModule, cubin) -> None:
    for entry in nvrtc.entries:
        from_ptx = [(d.ordinal, d.offset, d.size) for d in declared_params(entry.params)]
        assert from_ptx == [(d.ordinal, d.offset, d.size) for d in cubin.kernel(entry.name).declared_params()]


def test_check_against_a_cubin_kernel(cubin) -> None:
    clustered = [("p", Pointer(s("i32")))]
    check(sig("scalars", *SCALARS, launch=LaunchMeta(maxntid=(128, 1, 1))), cubin.kernel("scalars"))
    check(sig("clustered", *clustered, launch=LaunchMeta(cluster=(2, 1, 1))), cubin.kernel("clustered"))
    wrong = sig("caller", ("p", Pointer(s("f32"))), ("q", Slice(s("f32"))))
    assert mismatch(wrong, cubin.kernel("caller")) == (
        "caller: parameter 'q' lowers to 2 params (u64, u64) but the cubin kernel caller has 1 (8 bytes) "
        "at that position; in all, the signature lowers to 3 params and the cubin kernel caller has 2")
    four = sig("clustered", *clustered, launch=LaunchMeta(cluster=(4, 1, 1)))
    assert "cluster shape is (4, 1, 1)" in mismatch(four, cubin.kernel("clustered"))
    device = sig("scalars", *SCALARS, kind="device")
    assert "a cubin records parameters of kernels only" in mismatch(device, cubin.kernel("scalars"))


def test_check_rejects_other_objects() -> None:
    with pytest.raises(TypeError, match=r"must be a PtxFunction, PtxModule or cubin Kernel \(got str\)"):
        check(sig("k"), "k.ptx")
