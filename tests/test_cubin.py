"""read_cubin on cubins made by ptxas, nvJitLink and tileiras, cross-checked with ``cuobjdump -elf``."""

from __future__ import annotations

import re
import struct

import pytest
from _binary_samples import (
    DIRECTIVES_PTX,
    EXPECTED_KPARAMS,
    cuobjdump_attr,
    cuobjdump_elf,
    cuobjdump_kparams,
    host_object,
    nvjitlink_cubin,
    ptx,
    ptxas,
    tile_cubin,
)
from _toolchain import tool

from ptxbridge.abi.check import DeclaredParam
from ptxbridge.abi.cubin import cubin_arch, read_cubin
from ptxbridge.abi.elf import read_elf
from ptxbridge.abi.errors import FormatError

ARCHS = ["sm_80", "sm_90", "sm_90a", "sm_100"]


def _have(name: str) -> bool:
    try:
        tool(name)
    except FileNotFoundError:
        return False
    return True


needs_cuobjdump = pytest.mark.skipif(not _have("cuobjdump"), reason="cuobjdump not installed "
                                     "(pip install nvidia-cuda-cuobjdump)")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("cubins")


@pytest.fixture(scope="module")
def cubins(work):
    """arch -> (linked cubin bytes, path) from NVRTC PTX assembled by ptxas."""
    out = {}
    for arch in ARCHS:
        data = ptxas(work, ptx(arch), arch)
        out[arch] = (data, work / f"k_{arch}.cubin")
    return out


@pytest.fixture(scope="module")
def tile(work):
    data = tile_cubin("sm_90")
    path = work / "tile.cubin"
    path.write_bytes(data)
    return data, path


def _kernels(arch: str) -> set[str]:
    names = set(EXPECTED_KPARAMS)
    return names if int(arch[3:].rstrip("af")) >= 90 else names - {"clustered"}


@pytest.mark.parametrize("arch", ARCHS)
def test_arch_and_kernel_params_match_the_source(cubins, arch):
    cubin = read_cubin(cubins[arch][0], f"k_{arch}.cubin")
    assert cubin.arch == arch
    assert cubin.sm == int(arch[3:6].rstrip("a"))
    assert cubin.accelerated == arch.endswith("a")
    assert not cubin.relocatable and cubin.abi_version == 8
    assert cubin.virtual_arch == f"compute_{cubin.sm}" and cubin.toolkit_version
    assert {k.name for k in cubin.kernels} == _kernels(arch)
    for kernel in cubin.kernels:
        assert [(p.ordinal, p.offset, p.size) for p in kernel.params] == EXPECTED_KPARAMS[kernel.name]
        assert kernel.language == "ptx"
    assert cubin.language == "ptx" and not cubin.has_host_code and cubin.embedded_ptx is None


@needs_cuobjdump
@pytest.mark.parametrize("arch", ARCHS)
def test_kparams_and_launch_metadata_agree_with_cuobjdump(cubins, arch):
    data, path = cubins[arch]
    dump = cuobjdump_elf(path)
    cubin = read_cubin(data)
    assert f"sm={arch[3:]}," in dump.splitlines()[1]  # cuobjdump's own arch reading, 'a' included
    assert cuobjdump_kparams(dump) == {k.name: [(p.ordinal, p.offset, p.size) for p in k.params]
                                       for k in cubin.kernels}
    for kernel in cubin.kernels:
        size = cuobjdump_attr(dump, kernel.name, "EIATTR_CBANK_PARAM_SIZE")
        assert kernel.param_size == (int(size, 16) if size else None)
        threads = cuobjdump_attr(dump, kernel.name, "EIATTR_MAX_THREADS")
        assert kernel.maxntid == (tuple(int(v, 16) for v in threads.split()) if threads else None)
        cluster = cuobjdump_attr(dump, kernel.name, "EIATTR_CTA_PER_CLUSTER")
        assert kernel.cluster_dims == (tuple(int(v, 16) for v in cluster.split()) if cluster else None)
        assert kernel.explicit_cluster == (cuobjdump_attr(dump, kernel.name, "EIATTR_EXPLICIT_CLUSTER") == "")
    registers = dict(re.findall(r"function: (\S+)\(0x[0-9a-f]+\)\s+register count: (\d+)", dump))
    assert {k.name: k.registers for k in cubin.kernels} == {k: int(v) for k, v in registers.items()
                                                             if k in _kernels(arch)}


def test_launch_bounds_cluster_dims_and_shared_memory(cubins):
    by_arch = {arch: {k.name: k for k in read_cubin(data).kernels} for arch, (data, _) in cubins.items()}
    sm90 = by_arch["sm_90"]
    assert sm90["saxpy"].maxntid == (256, 1, 1) and sm90["saxpy"].reqntid is None
    assert sm90["bounded"].maxntid == (128, 1, 1)
    assert sm90["clustered"].cluster_dims == (2, 1, 1) and sm90["clustered"].explicit_cluster
    assert sm90["saxpy"].cluster_dims is None and not sm90["saxpy"].explicit_cluster
    assert sm90["saxpy"].param_size == 28 and sm90["withstruct"].param_size == 48
    assert sm90["noargs"].params == () and sm90["noargs"].param_size is None
    # 128 floats + 16 doubles = 640 B; ptxas adds its 1 KiB reserve on sm_90+ (measured).
    assert by_arch["sm_80"]["withstruct"].static_shared == 640
    assert sm90["withstruct"].static_shared == 1664
    assert sm90["saxpy"].static_shared == 0
    assert all(k.registers and k.code_size > 0 for k in sm90.values())


def test_reqntid_max_cluster_rank_and_aligned_aggregate(work):
    data = ptxas(work, DIRECTIVES_PTX.format(arch="sm_90").encode(), "sm_90", name="directives")
    cubin = read_cubin(data)
    req, ranked = cubin.kernel("req"), cubin.kernel("ranked")
    assert req.reqntid == (64, 2, 1) and req.maxntid is None
    assert [(p.ordinal, p.offset, p.size) for p in req.params] == [(0, 0, 8), (1, 16, 40), (2, 56, 2)]
    assert req.param_size == 58
    assert ranked.explicit_cluster and ranked.max_cluster_rank == 8 and ranked.cluster_dims is None
    if _have("cuobjdump"):
        dump = cuobjdump_elf(work / "directives_sm_90.cubin")
        assert cuobjdump_attr(dump, "req", "EIATTR_REQNTID").split() == ["0x40", "0x2", "0x1"]
        assert cuobjdump_attr(dump, "ranked", "EIATTR_MAX_CLUSTER_RANK") == "0x8"


def test_relocatable_cubin_lists_device_functions(work):
    cubin = read_cubin(ptxas(work, ptx("sm_90"), "sm_90", relocatable=True))
    assert cubin.relocatable and cubin.arch == "sm_90"
    assert {k.name for k in cubin.kernels} == _kernels("sm_90")
    functions = {f.name: f for f in cubin.device_functions}
    assert "_Z6helperff" in functions and functions["_Z6helperff"].size > 0
    assert cubin.kernel("withstruct").static_shared == 640  # no reserve before linking


def test_nvjitlink_cubin(cubins):
    linked = read_cubin(nvjitlink_cubin(ptx("sm_90"), "sm_90"), "nvjitlink.cubin")
    assert linked.arch == "sm_90" and not linked.relocatable
    assert {k.name: k.params for k in linked.kernels} == {k.name: k.params
                                                           for k in read_cubin(cubins["sm_90"][0]).kernels}


def test_tileiras_cubin_is_tile_ir_with_host_code_and_embedded_ptx(tile):
    cubin = read_cubin(tile[0], "tile.cubin")
    assert cubin.arch == "sm_90a" and cubin.accelerated  # tileiras always targets sm_90a on Hopper
    assert cubin.language == "tileir" and cubin.has_host_code
    names = {k.name for k in cubin.kernels}
    assert names == {"vadd_Kt1_A1f32_1l0_A1f32_1l0_A1f32_1l0_Si32_I256",
                     "vadd_Kt1_A1f16_1l0_w_A1f16_1l0_w_A1f16_1l0_w_Si64_I128"}
    narrow = cubin.kernel("vadd_Kt1_A1f32_1l0_A1f32_1l0_A1f32_1l0_Si32_I256")
    wide = cubin.kernel("vadd_Kt1_A1f16_1l0_w_A1f16_1l0_w_A1f16_1l0_w_Si64_I128")
    # docs/conventions.md, cutile: array -> u64 pointer, shape, stride (u32 for an int32 index, u64 for
    # int64), then n.
    assert [p.size for p in narrow.params] == [8, 4, 4] * 3 + [4]
    assert [p.size for p in wide.params] == [8, 8, 8] * 3 + [8]
    assert narrow.reqntid == wide.reqntid == (128, 1, 1)
    assert all(k.language == "tileir" for k in cubin.kernels)
    assert cubin.embedded_ptx is not None and ".target sm_90a" in cubin.embedded_ptx
    assert f".entry {narrow.name}(" in cubin.embedded_ptx


@needs_cuobjdump
def test_tileiras_cubin_agrees_with_cuobjdump(tile):
    dump = cuobjdump_elf(tile[1])
    cubin = read_cubin(tile[0])
    assert "sm=90a" in dump.splitlines()[1]
    assert cuobjdump_kparams(dump) == {k.name: [(p.ordinal, p.offset, p.size) for p in k.params]
                                       for k in cubin.kernels}
    for kernel in cubin.kernels:
        assert "TILEIR" in cuobjdump_attr(dump, kernel.name, "EIATTR_LANGUAGE")


def test_declared_params_feed_the_checker(cubins):
    kernel = read_cubin(cubins["sm_90"][0]).kernel("saxpy")
    assert kernel.declared_params() == (DeclaredParam(0, 0, 4), DeclaredParam(1, 8, 8),
                                        DeclaredParam(2, 16, 8), DeclaredParam(3, 24, 4))


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100",
                                  "sm_100a", "sm_103a", "sm_120", "sm_121"])
def test_sm_number_from_every_arch_ptxas_knows(work, arch):
    src = f".version 8.8\n.target {arch}\n.address_size 64\n.visible .entry k(.param .u64 p) {{ ret; }}\n"
    cubin = read_cubin(ptxas(work, src.encode(), arch, name="arch"))
    assert cubin.arch == arch


def test_cubin_arch_decision_table():
    assert cubin_arch(8, 0x06005A04, False) == (90, False)
    assert cubin_arch(8, 0x06005A04, True) == (90, True)
    assert cubin_arch(8, 0x06006402, False) == (100, False)
    # pre-13 ABI (LLVM EF_CUDA_SM / EF_CUDA_ACCELERATORS_V1)
    assert cubin_arch(7, 0x0005005A, False) == (90, False)
    assert cubin_arch(7, 0x5A | 0x800, False) == (90, True)


def test_host_object_is_not_a_cubin(work):
    with pytest.raises(FormatError, match=r"EM_CUDA \(190\) \(got 62\)") as info:
        read_cubin(host_object(work, {}), "host.o")
    assert info.value.source == "host.o"


def test_duplicate_kparam_ordinal_is_reported(cubins):
    data = bytearray(cubins["sm_90"][0])
    info = read_elf(bytes(data)).section(".nv.info.saxpy")
    first = data.find(b"\x04\x17\x0c\x00", info.offset)  # SVAL KPARAM_INFO, 12 bytes
    second = data.find(b"\x04\x17\x0c\x00", first + 1)
    assert second < info.offset + info.size
    ordinal = struct.unpack_from("<H", data, first + 8)[0]
    struct.pack_into("<H", data, second + 8, ordinal)
    with pytest.raises(FormatError, match="two KPARAM_INFO records for parameter"):
        read_cubin(bytes(data), "dup.cubin")


@pytest.mark.parametrize("cut", [0, 3, 40, 63, 200])
def test_truncated_cubin_says_where(cubins, cut):
    with pytest.raises(FormatError) as info:
        read_cubin(cubins["sm_90"][0][:cut], "cut.cubin")
    assert info.value.source == "cut.cubin" and info.value.where.startswith("offset 0x")


def test_zero_launch_dimensions_are_format_errors(work):
    """``.reqntid 0`` used to reach LaunchMeta and fail there with a raw ValueError."""
    text = DIRECTIVES_PTX.format(arch="sm_90").encode()
    data = bytearray(ptxas(work, text, "sm_90", name="zero"))
    info = read_elf(bytes(data)).section(".nv.info.req")
    record = data.find(b"\x04\x10\x0c\x00", info.offset, info.offset + info.size)  # SVAL REQNTID
    assert struct.unpack_from("<3I", data, record + 4) == (64, 2, 1)
    struct.pack_into("<I", data, record + 8, 0)
    with pytest.raises(FormatError, match=r"launch dimensions must be >= 1 \(got 64, 0, 1\)"):
        read_cubin(bytes(data), "zero.cubin")
