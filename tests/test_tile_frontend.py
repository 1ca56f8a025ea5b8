"""ptxbridge.tile: cuda.tile kernels exported with tileiras (no GPU), and cubins loaded back."""

from __future__ import annotations

import pytest

ct = pytest.importorskip("cuda.tile", reason="cuTile tests need the tile extra (cuda-tile)")
from _toolchain import nvrtc_compile
from cuda.tile import compilation as tc

import ptxbridge.tile as pt
from ptxbridge import CodeKind, Convention
from ptxbridge.abi.cubin import read_cubin
from ptxbridge.abi.errors import AbiMismatchError, ArgumentError, CompileError, FormatError
from ptxbridge.abi.kinds import Constant, Scalar, TileArray, TileTensor


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PTXBRIDGE_CACHE_DIR", str(tmp_path / "cache"))


@ct.kernel
def vadd(a, b, c, tile: ct.Constant[int]):
    bid = ct.bid(0)
    x = ct.load(a, index=(bid,), shape=(tile,))
    y = ct.load(b, index=(bid,), shape=(tile,))
    ct.store(c, index=(bid,), tile=x + y)


@ct.kernel
def scale2d(x, alpha, out, tm: ct.Constant[int], tn: ct.Constant[int]):
    t = ct.load(x, index=(ct.bid(0), ct.bid(1)), shape=(tm, tn))
    ct.store(out, index=(ct.bid(0), ct.bid(1)), tile=t * alpha)


def array(dtype, ndim, index=ct.int32, **promises):
    return tc.ArrayConstraint(dtype, ndim, index_dtype=index, stride_lower_bound_incl=0, alias_groups=(),
                              may_alias_internally=False, **promises)


T1 = tc.CallingConvention.cutile_python_v1()
T2 = tc.CallingConvention.cutile_python_v2()
VADD_F32 = tc.KernelSignature([array(ct.float32, 1)] * 3 + [256], T1)


def test_export_recovers_signatures_from_mangled_names():
    half = array(ct.float16, 1, ct.int64, shape_divisible_by=16)
    art = pt.export(vadd, [VADD_F32, tc.KernelSignature([half] * 3 + [128], T2, symbol="vadd_half")])
    assert art.kind is CodeKind.CUBIN and art.arch == "sm_90a"  # tileiras writes sm_90a machine code
    mangled = VADD_F32.with_mangled_symbol("vadd").symbol
    assert set(art.kernels) == {mangled, "vadd_half"}
    sig = art.kernels["vadd_half"]
    assert sig.convention is Convention.CUTILE and [p.name for p in sig.params] == ["a", "b", "c", "tile"]
    a = sig.params[0].type
    assert isinstance(a, TileArray) and (a.dtype.name, a.index, a.shape_divisible_by) == ("f16", "i64", (16,))
    assert sig.params[3].type == Constant(128)
    cubin = read_cubin(art.code)
    for kernel in cubin.kernels:  # layout vs KPARAM, launch demands straight from the cubin
        ours = art.kernels[kernel.name]
        assert ours.layout.size == kernel.param_size
        assert ours.launch.reqntid == (kernel.reqntid or (1, 1, 1)) and ours.launch.cluster is None
    assert art.kernels[mangled].layout.size == 3 * (8 + 4 + 4)
    assert art.kernels["vadd_half"].layout.size == 3 * (8 + 8 + 8)


def test_scalar_and_2d_int64_kernel():
    sig = tc.KernelSignature([array(ct.float32, 2, ct.int64), tc.ScalarConstraint(ct.float32),
                              array(ct.float32, 2, ct.int64), 16, 32], T1)
    art = pt.export(scale2d, sig, arch="sm_100")
    (ours,) = art.kernels.values()
    alpha = ours.params[1].type
    assert alpha == Scalar(alpha.dtype) and alpha.dtype.name == "f32"
    assert art.arch.startswith("sm_100")
    # x: ptr + 2 shapes + 2 strides (u64), alpha f32 at 40, out from 48: 48 + 40 = 88 bytes
    assert [lp.offset for lp in ours.layout.params][:7] == [0, 8, 16, 24, 32, 40, 48]
    assert ours.layout.size == 88 and read_cubin(art.code).kernels[0].param_size == 88
    assert art.provenance.compiler == "cuda-tile" and "gpu_code=sm_100" in art.provenance.options


def test_load_reads_the_same_signatures_back(tmp_path):
    art = pt.export(vadd, VADD_F32)
    path = tmp_path / "vadd.cubin"
    path.write_bytes(art.code)
    loaded = pt.load(path)
    assert loaded.code == art.code and loaded.kernels.keys() == art.kernels.keys()
    for name, sig in loaded.kernels.items():  # same types and launch; names p0.. as a cubin has none
        assert [p.type for p in sig.params] == [p.type for p in art.kernels[name].params]
        assert sig.launch == art.kernels[name].launch and sig.params[0].name == "p0"


def test_custom_symbol_cubin_needs_a_signature(tmp_path):
    art = pt.export(vadd, tc.KernelSignature([array(ct.float32, 1)] * 3 + [64], T1, symbol="my_vadd"))
    path = tmp_path / "custom.cubin"
    path.write_bytes(art.code)
    with pytest.raises(AbiMismatchError, match="my_vadd: not a cuTile symbol"):
        pt.load(path)
    text = str(art.kernels["my_vadd"])
    assert pt.load(path, text).kernels["my_vadd"] == art.kernels["my_vadd"]


def test_second_export_runs_no_tileiras(monkeypatch):
    first = pt.export(vadd, VADD_F32)

    def boom(*args, **kwargs):
        raise AssertionError("cuda.tile ran although the cache holds the cubin")

    monkeypatch.setattr(tc, "export_kernel", boom)
    assert pt.export(vadd, VADD_F32).code == first.code
    with pytest.raises(CompileError, match="AssertionError"):
        pt.export(vadd, VADD_F32, arch="sm_100")


@pytest.mark.parametrize(("args", "arch", "match"), [
    ((vadd, VADD_F32), "9.0", r"arch must look like 'sm_90' \(got '9.0'\)"),
    ((lambda a: a, VADD_F32), None, "must be a @cuda.tile.kernel"),
    ((vadd, []), None, "one or more"),
    ((vadd, ["vadd"]), None, "one or more"),
])
def test_bad_export_arguments(args, arch, match):
    with pytest.raises(ArgumentError, match=match):
        pt.export(*args, arch=arch)


def test_kernel_that_does_not_type_check():
    wrong = tc.KernelSignature([array(ct.float32, 2)] * 3 + [256], T1)  # 2-D arrays, 1-D indexing
    with pytest.raises(CompileError, match="could not compile vadd") as info:
        pt.export(vadd, wrong)
    assert info.value.log


def test_load_refuses_non_cubins(tmp_path):
    path = tmp_path / "k.ptx"
    path.write_bytes(nvrtc_compile('extern "C" __global__ void k(int* x) { *x = 1; }', ["-arch=sm_90"]))
    with pytest.raises(FormatError, match=r"tile\.load reads cubins"):
        pt.load(path)


CUTILE_RS = """extern "C" __global__ void add_entry(float* x, int xd0, int xd1, int xs0, int xs1,
                                     float* y, int yd0, int yd1, int ys0, int ys1,
                                     int ypd0, int ypd1, int yps0, int yps1) {
    y[0] = x[0] + xd0 + xd1 + xs0 + xs1 + yd0 + yd1 + ys0 + ys1 + ypd0 + ypd1 + yps0 + yps1;
}
"""


def test_cutile_rs_convention_from_cubin_and_signature(tmp_path):
    path = tmp_path / "add.cubin"
    path.write_bytes(nvrtc_compile(CUTILE_RS, ["-arch=sm_90"], "cubin"))
    text = "#[convention(cutile-rs)] kernel add(x: Tensor<f32, 2>, y: Partition<f32, 2>)"
    art = pt.load(path, text)
    sig = art.kernels["add_entry"]
    assert sig.convention is Convention.CUTILE_RS and sig.params[1].type.partition
    assert isinstance(sig.params[0].type, TileTensor) and sig.launch.reqntid == (1, 1, 1)
    assert sig.layout.size == read_cubin(path.read_bytes()).kernel("add_entry").param_size == 64
    with pytest.raises(AbiMismatchError, match="parameter 'y'"):
        pt.load(path, text.replace("Partition<f32, 2>", "Tensor<f32, 2>"))
    with pytest.raises(AbiMismatchError, match="signature must be given"):
        pt.load(path)
