"""The cuTile demangler against the real cuda-tile mangler and its reference demangler.

Symbols come from ``cuda.tile.compilation.mangle_kernel_name`` (the function
``export_kernel`` names kernels with); each is demangled by ours and by
``demangle_kernel_name`` and compared field by field.  A few kernels are
exported to real sm_90 cubins and the lowered layout is checked against the
KPARAM records ``cuobjdump -elf`` prints.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ptxbridge.abi.cutile_names import demangle, is_cutile_symbol
from ptxbridge.abi.errors import AbiMismatchError, FormatError
from ptxbridge.abi.kinds import Constant, Scalar, TileArray, TileList, Tuple
from ptxbridge.abi.signature import Convention, Signature

ct = pytest.importorskip("cuda.tile")
ctc = pytest.importorskip("cuda.tile.compilation")

T1 = ctc.CallingConvention.cutile_python_v1()
T2 = ctc.CallingConvention.cutile_python_v2()

# cuTile's DType names -> ptxbridge dtype names (independent of the module's own table)
DTYPE_NAMES = {
    "bool_": "bool", "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "float16": "f16",
    "float32": "f32", "float64": "f64", "bfloat16": "bf16", "float8_e4m3fn": "f8e4m3fn",
    "float8_e5m2": "f8e5m2",
}
INDEX_NAMES = {"int32": "i32", "uint32": "u32", "int64": "i64"}
ALL_DTYPES = [getattr(ct, n) for n in DTYPE_NAMES]


def arr(dtype=ct.float32, ndim=1, *, index=ct.int32, lb=None, groups=(), internal=False, **promises):
    return ctc.ArrayConstraint(dtype, ndim, index_dtype=index, stride_lower_bound_incl=lb,
                               alias_groups=groups, may_alias_internally=internal, **promises)


def lst(element, *, groups=(), elements_alias=False):
    return ctc.ListConstraint(element, alias_groups=groups, elements_may_alias=elements_alias)


SIGNATURES = {
    "vadd_t1": (T1, [arr(lb=0), arr(lb=0), arr(lb=0), 256]),
    "scalars_every_dtype": (T1, [ctc.ScalarConstraint(d) for d in ALL_DTYPES]),
    "arrays_every_dtype": (T2, [arr(d, 1 + i % 3) for i, d in enumerate(ALL_DTYPES)]),
    "index_widths": (T1, [arr(index=ct.int32), arr(ndim=2, index=ct.uint32), arr(ndim=3, index=ct.int64)]),
    "divisibility_2d": (T1, [arr(ct.bfloat16, 2, index=ct.int64, shape_divisible_by=(16, 1),
                                 stride_divisible_by=(1, 8), base_addr_divisible_by=16)]),
    "same_divisibility_3d": (T1, [arr(ct.float16, 3, shape_divisible_by=4, stride_divisible_by=2)]),
    "static_stride_3d": (T2, [arr(ct.float64, 3, stride_constant=(None, 64, 1), lb=(-4, None, None))]),
    "static_shape": (T2, [arr(ct.int8, 2, shape_constant=(128, None), shape_divisible_by=(1, 32))]),
    "static_shape_implies_div": (T2, [arr(ndim=2, shape_constant=(64, 7), shape_divisible_by=(16, 1))]),
    "negative_stride": (T2, [arr(ndim=2, stride_constant=(-1, None), lb=(None, -8))]),
    "hex_axis_mask_5d": (T1, [arr(ndim=5, stride_divisible_by=(1, 4, 1, 4, 4), shape_divisible_by=(2,) * 5)]),
    "zero_dim": (T1, [arr(ct.uint64, 0), ctc.ScalarConstraint(ct.int64)]),
    "alias_groups": (T1, [arr(groups=("x",)), arr(groups=("x", "y")), arr(groups=("y",)), arr()]),
    "alias_internal": (T1, [arr(internal=True, base_addr_divisible_by=128, index=ct.int64)]),
    "list_t1": (T1, [lst(arr(ct.float32, 2, index=ct.int64)), ctc.ScalarConstraint(ct.int32)]),
    "list_promises": (T2, [lst(arr(ct.float16, 2, stride_constant=(None, 1), groups=("e",)), groups=("l",),
                               elements_alias=True),
                           lst(arr(ct.float16, 1, groups=("e",)), groups=("l",))]),
    "tuple_mixed": (T2, [(arr(lb=0), ctc.ScalarConstraint(ct.float32), 7)]),
    "tuple_nested": (T2, [((arr(ct.int16, 2), (1.5, True)), arr(ct.uint8), ())]),
    "bool_constants": (T1, [True, False, arr()]),
    "int_constants": (T1, [0, -7, 2**40, -(2**62)]),
    "float_constants": (T1, [1.5, -0.25, 0.0, -0.0, 1e300, float("inf"), float("-inf")]),
    "all_kinds_t2": (T2, [arr(ct.bfloat16, 2, index=ct.int64, shape_constant=(None, 256), lb=0,
                              groups=("g",)),
                          arr(ct.bfloat16, 2, index=ct.int64, groups=("g",)),
                          lst(arr(ct.float32, 3)), (arr(ct.float8_e5m2, 1), -3),
                          ctc.ScalarConstraint(ct.bool_), 64, 2.0, False]),
}


def mangle(name: str, conv, params) -> str:
    return ctc.mangle_kernel_name(name, ctc.KernelSignature(params, conv))


def _assert_same(ours, ref, where: str) -> None:
    """One reference constraint against one ptxbridge parameter type, field by field."""
    if isinstance(ref, ctc.ArrayConstraint):
        assert isinstance(ours, TileArray), where
        n = ref.ndim
        assert (ours.dtype.name, ours.ndim, ours.index) == (
            DTYPE_NAMES[ref.dtype.name], n, INDEX_NAMES[ref.index_dtype.name]), where
        for attr, ref_attr, default in [
            ("static_shape", "shape_constant", None), ("shape_divisible_by", "shape_divisible_by", 1),
            ("static_stride", "stride_constant", None), ("stride_divisible_by", "stride_divisible_by", 1),
            ("stride_lower_bound", "stride_lower_bound_incl", None),
        ]:
            assert (getattr(ours, attr) or (default,) * n) == tuple(getattr(ref, ref_attr)), (where, attr)
        assert ours.base_align == ref.base_addr_divisible_by, where
        assert ours.alias_groups == sum(1 << int(g.removeprefix("group")) for g in ref.alias_groups), where
        assert ours.may_alias_internally == ref.may_alias_internally, where
    elif isinstance(ref, ctc.ListConstraint):
        assert isinstance(ours, TileList), where
        _assert_same(ours.element, ref.element, where + ".element")
        assert ours.alias_groups == sum(1 << int(g.removeprefix("group")) for g in ref.alias_groups), where
        assert ours.elements_may_alias == ref.elements_may_alias, where
    elif isinstance(ref, ctc.TupleConstraint):
        assert isinstance(ours, Tuple) and len(ours.items) == len(ref.items), where
        for i, (o, r) in enumerate(zip(ours.items, ref.items, strict=True)):
            _assert_same(o, r, f"{where}.{i}")
    elif isinstance(ref, ctc.ScalarConstraint):
        assert ours == Scalar(ours.dtype) and ours.dtype.name == DTYPE_NAMES[ref.dtype.name], where
    else:
        assert isinstance(ref, ctc.ConstantConstraint) and isinstance(ours, Constant), where
        assert type(ours.value) is type(ref.value), where
        assert repr(ours.value) == repr(ref.value), where  # repr tells -0.0 from 0.0


def assert_matches_reference(symbol: str, sig: Signature) -> None:
    ref_name, ref_sig = ctc.demangle_kernel_name(symbol)
    assert sig.name == symbol and symbol.startswith(ref_name + "_K")
    assert sig.convention is Convention.CUTILE
    assert [p.name for p in sig.params] == [f"p{i}" for i in range(len(ref_sig.parameters))]
    assert len(sig.params) == len(ref_sig.parameters)
    for i, (param, ref) in enumerate(zip(sig.params, ref_sig.parameters, strict=True)):
        _assert_same(param.type, ref, f"{symbol} p{i}")


@pytest.mark.parametrize("case", sorted(SIGNATURES))
def test_real_mangled_names_match_reference(case: str) -> None:
    conv, params = SIGNATURES[case]
    symbol = mangle(case, conv, params)
    sig = demangle(symbol)
    assert_matches_reference(symbol, sig)
    assert is_cutile_symbol(symbol)
    assert Signature.parse(str(sig)) == sig


@pytest.mark.parametrize("symbol", ["_Kt1", "k_Kt2_T0", "k_Kt1_A0f32", "k_Kt1_A1f32_1", "a_Kb_Kt1_Sf32",
                                    "k_Kt2_A4f32_a_5i2_2s8_1l_1_iu", "k_Kt1_A2f32_01t3"])
def test_edge_symbols_match_reference(symbol: str) -> None:
    """Empty names and tuples, 0-d arrays, masks without predicates, hex masks, '_K' inside the name."""
    assert_matches_reference(symbol, demangle(symbol))


def test_known_symbol_from_frontends_doc() -> None:
    sig = demangle("vadd_Kt1_A1f32_1l0_A1f32_1l0_A1f32_1l0_I256", names=["a", "b", "c", "tile"])
    assert str(sig) == ("#[convention(cutile)] kernel vadd_Kt1_A1f32_1l0_A1f32_1l0_A1f32_1l0_I256("
                        "a: TileArray<f32, 1, i32>{stride_lb: [0]}, "
                        "b: TileArray<f32, 1, i32>{stride_lb: [0]}, "
                        "c: TileArray<f32, 1, i32>{stride_lb: [0]}, tile: const 256)")
    # 3 arrays x (u64 pointer + u32 shape + u32 stride): 16 bytes each, constants add nothing
    assert [p.offset for p in sig.layout.params] == [0, 8, 12, 16, 24, 28, 32, 40, 44]
    assert sig.layout.size == 48


@pytest.mark.parametrize("symbol, message", [
    ("vadd", "no '_K'"),
    ("vadd_Kt3_A1f32", "unknown cuTile calling convention"),
    ("vadd_Kt1_A1f33", "unknown cuTile dtype"),
    ("vadd_Kt1_A1tf32", "'tf32' has no ptxbridge dtype"),
    ("vadd_Kt1_Sf8m0fnu", "'f8m0fnu' has no ptxbridge dtype"),
    ("vadd_Kt1_A1f32_2i16", "axis mask must name axes of a 1-d array"),
    ("vadd_Kt1_A2f32_1i16_3i8", "shape_divisible_by given twice for axis 0"),
    ("vadd_Kt1_A1f32_1i1", "'i' divisor must be greater than 1"),
    ("vadd_Kt1_A1f32_1t1v2", "a static stride excludes stride divisibility"),
    ("vadd_Kt1_A1f32_1s16", "static shapes need calling convention t2"),
    ("vadd_Kt2_A1f32_1s_16", "static shape -16 is negative"),
    ("vadd_Kt1_T1S32", "tuple parameters need calling convention t2"),
    ("vadd_Kt1_A1f32_g0", "alias group 0 must be shared"),
    ("vadd_Kt1_A1f32_g1_A1f32_g1", "numbered in order of first use"),
    ("vadd_Kt1_A1f32_g0_Lg0A1f32", "or by two or more lists"),
    ("vadd_Kt1_Pf32", "convention v3"),
    ("vadd_Kt1_A1f32_x", "array extras"),
    ("vadd_Kt1_I" + "9" * 5000, "more than 40 digits"),
    ("vadd_Kt2_" + "T1" * 100 + "I1", "nest at most 64 deep"),
    ("vadd_Kt1_A99f32", "at most 64 dimensions"),
    ("vadd_Kt1_Fabc", "16 hex digits"),
    ("vadd_Kt1_LA", "number of dimensions"),
])
def test_bad_symbols_raise_format_error(symbol: str, message: str) -> None:
    with pytest.raises(FormatError, match=re.escape(message)):
        demangle(symbol)


def test_unrepresentable_dtype_is_still_a_cutile_symbol() -> None:
    symbol = mangle("k", T1, [arr(ct.tfloat32), ctc.ScalarConstraint(ct.float32)])
    assert is_cutile_symbol(symbol)
    with pytest.raises(FormatError, match="'tf32' has no ptxbridge dtype"):
        demangle(symbol)
    assert not is_cutile_symbol("_Z6kernelPf")
    assert not is_cutile_symbol("my_Kernel")


def test_names_must_match_parameter_count() -> None:
    with pytest.raises(AbiMismatchError, match=r"2 parameter names given for 1 parameters"):
        demangle("k_Kt1_Si32", names=["a", "b"])


_REAL_SYMBOLS = [mangle(case, *SIGNATURES[case]) for case in sorted(SIGNATURES)]
_CODE_CHARS = "_0123456789abcdefgilpstuvwxABFILSTKP"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_REAL_SYMBOLS), st.lists(
    st.tuples(st.sampled_from(["insert", "delete", "replace"]), st.integers(0, 10**6),
              st.sampled_from(_CODE_CHARS)), min_size=1, max_size=3))
def test_mutated_symbols_agree_with_reference(symbol: str, edits) -> None:
    """Whatever cuda-tile accepts we read the same way; whatever it rejects we reject."""
    chars = list(symbol)
    for op, pos, ch in edits:
        pos %= len(chars) + (op == "insert")
        if op == "insert":
            chars.insert(pos, ch)
        elif op == "delete" and len(chars) > 1:
            del chars[pos]
        elif op == "replace":
            chars[pos] = ch
    mutated = "".join(chars)
    try:
        ctc.demangle_kernel_name(mutated)
    except Exception:  # the reference reports bad names with ValueError, TypeError, KeyError...
        with pytest.raises(FormatError):
            demangle(mutated)
        assert not is_cutile_symbol(mutated)
        return
    assume(not re.search(r"A\d{3,}|A(6[5-9]|[7-9]\d)", mutated))  # we cap arrays at 64 dimensions
    assume(not re.search(r"tf32|f8m0fnu", mutated))  # no ptxbridge dtype: we reject these on purpose
    assert_matches_reference(mutated, demangle(mutated))


# -- real cubins ---------------------------------------------------------------------------
def _cuobjdump() -> str | None:
    found = shutil.which("cuobjdump")
    if found:
        return found
    import nvidia.cu13  # the nvidia-cuda-nvcc / cuobjdump wheels put it here

    candidate = Path(nvidia.cu13.__path__[0]) / "bin" / "cuobjdump"
    return str(candidate) if candidate.exists() else None


def _kparams(cubin: bytes, tmp_path: Path) -> dict[str, list[tuple[int, int, int]]]:
    """Per kernel: (ordinal, offset, size) of each EIATTR_KPARAM_INFO record, from cuobjdump -elf."""
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump is not installed (pip install nvidia-cuda-cuobjdump)")
    path = tmp_path / "k.cubin"
    path.write_bytes(cubin)
    text = subprocess.run([tool, "-elf", str(path)], check=True, capture_output=True, text=True).stdout
    found: dict[str, list[tuple[int, int, int]]] = {}
    for section in re.split(r"\n(?=\.nv\.info\.)", text)[1:]:
        name = section.split()[0].removeprefix(".nv.info.")
        records = re.findall(
            r"Ordinal\s*:\s*0x([0-9a-f]+)\s+Offset\s*:\s*0x([0-9a-f]+)\s+Size\s*:\s*0x([0-9a-f]+)", section)
        found[name] = sorted((int(o, 16), int(off, 16), int(s, 16)) for o, off, s in records)
    return found


def _export(kernel, conv, params) -> tuple[str, bytes]:
    sig = ctc.KernelSignature(params, conv).with_mangled_symbol(kernel._pyfunc.__name__)
    out = io.BytesIO()
    ctc.export_kernel(kernel, [sig], out, gpu_code="sm_90", output_format="cubin")
    return sig.symbol, out.getvalue()


@ct.kernel
def copy2d(src, dst, scale: float, tile: ct.Constant[int]):
    i = ct.bid(0)
    t = ct.load(src, index=(i, 0), shape=(tile, tile))
    ct.store(dst, index=(i, 0), tile=t * scale)


@ct.kernel
def from_tuple(pair, out, flag: ct.Constant[bool]):
    a, n = pair
    i = ct.bid(0)
    t = ct.load(a, index=(i,), shape=(16,))
    ct.store(out, index=(i,), tile=t + n if flag else t)


@ct.kernel
def from_list(arrays, out):
    i = ct.bid(0)
    t = ct.load(arrays[0], index=(i,), shape=(32,))
    ct.store(out, index=(i,), tile=t)


EXPORTS = {  # cuTile compiles only arrays whose strides are promised non-negative (lb=0)
    "copy2d_i64": (copy2d, T1, [arr(ct.float32, 2, index=ct.int64, shape_divisible_by=(16, 16), lb=0),
                                arr(ct.float32, 2, index=ct.int64, stride_constant=(None, 1), lb=0),
                                ctc.ScalarConstraint(ct.float32), 16]),
    "copy2d_i32_f16": (copy2d, T2, [arr(ct.float16, 2, shape_constant=(None, 64), lb=0),
                                    arr(ct.float16, 2, lb=0, base_addr_divisible_by=16),
                                    ctc.ScalarConstraint(ct.float16), 32]),
    "tuple": (from_tuple, T2, [(arr(ct.int32, 1, lb=0), ctc.ScalarConstraint(ct.int32)),
                               arr(ct.int32, 1, index=ct.uint32, lb=0), True]),
    "list": (from_list, T1, [lst(arr(ct.float64, 1, lb=0)), arr(ct.float64, 1, lb=0)]),
}


@pytest.mark.parametrize("case", sorted(EXPORTS))
def test_demangled_layout_matches_real_cubin(case: str, tmp_path: Path) -> None:
    symbol, cubin = _export(*EXPORTS[case])
    records = _kparams(cubin, tmp_path)
    assert list(records) == [symbol]  # the entry is named by the mangled symbol itself
    sig = demangle(symbol)
    assert_matches_reference(symbol, sig)
    layout = sig.layout
    assert [(i, p.offset, p.param.size) for i, p in enumerate(layout.params)] == records[symbol]
    assert layout.size == records[symbol][-1][1] + records[symbol][-1][2]
