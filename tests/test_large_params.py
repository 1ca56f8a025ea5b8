"""Kernels with more than 4 KiB of parameters, end to end (CUDA 12.1+ allows 32,764 bytes).

ptxas writes ``EIATTR_KPARAM_INFO_V2`` records for such kernels; the cubin reader, the checker, the
layout and both packers (Python and the C launch plan), the CUDA loader's limits and the CPU loader
must all take them.  The kernels are real: a CUDA C++ kernel with a 4,400-byte struct (NVRTC) and a
PTX kernel with 1,500 ``u32`` parameters, assembled by ptxas and read back with ``cuobjdump -elf``.
"""

from __future__ import annotations

import re
import struct

import numpy as np
import pytest
from _binary_samples import cuobjdump_elf, cuobjdump_kparams, ptxas

import ptxbridge
import ptxbridge.nvrtc
from ptxbridge.abi.cubin import read_cubin
from ptxbridge.abi.elf import read_elf
from ptxbridge.abi.errors import CudaError, FormatError
from ptxbridge.abi.layout import MAX_PARAM_BYTES
from ptxbridge.abi.syntax import parse_signatures
from ptxbridge.artifacts.artifact import artifact_from_bytes

N = 1500
BIG_SOURCE = r"""
struct Big { unsigned v[1100]; };
extern "C" __global__ void big(Big b, unsigned* out, unsigned n) {
  unsigned s = n;
  for (int i = 0; i < 1100; ++i) s += (i + 1) * b.v[i];
  out[0] = s;
}
"""
# .ptr parameters carry their pointee's alignment and state space in the KPARAM record
POINTERS_PTX = """.version 8.8
.target sm_90
.address_size 64
.visible .entry ptrs(.param .u64 .ptr .global .align 16 g, .param .u64 .ptr .shared .align 8 s,
                     .param .align 8 .b8 agg[5000], .param .u32 tail)
{ ret; }
"""


def many_ptx(n: int = N) -> bytes:
    """``many(out, p0..p{n-1})``: ``out[0] = sum((i + 1) * p_i)``, reading the parameters through
    their address in a loop (as NVRTC reads a struct parameter)."""
    params = ",\n".join(f"\t.param .u32 p{i}" for i in range(n))
    return f""".version 8.1
.target sm_90
.address_size 64
.visible .entry many(
\t.param .u64 out,
{params}
)
{{
\t.reg .pred %p<2>;
\t.reg .b32 %r<6>;
\t.reg .b64 %rd<6>;
\tld.param.u64 %rd1, [out];
\tcvta.to.global.u64 %rd2, %rd1;
\tmov.u64 %rd3, p0;
\tmov.u32 %r1, 0;
\tmov.u32 %r2, 0;
$L_loop:
\tmul.wide.u32 %rd4, %r1, 4;
\tadd.s64 %rd5, %rd3, %rd4;
\tld.param.u32 %r3, [%rd5];
\tadd.s32 %r4, %r1, 1;
\tmad.lo.s32 %r2, %r3, %r4, %r2;
\tmov.u32 %r1, %r4;
\tsetp.lt.u32 %p1, %r1, {n};
\t@%p1 bra $L_loop;
\tst.global.u32 [%rd2], %r2;
\tret;
}}
""".encode()


MANY_SIGNATURE = "kernel many(out: *mut u32, " + ", ".join(f"p{i}: u32" for i in range(N)) + ")"
MANY_VALUES = [(7 * i + 3) % 1000 for i in range(N)]
BIG_VALUES = [(5 * i + 1) % 977 for i in range(1100)]


def weighted(values: list[int], start: int = 0) -> int:
    return (start + sum((i + 1) * v for i, v in enumerate(values))) % 2**32


@pytest.fixture(scope="module")
def many():
    return artifact_from_bytes(many_ptx(), parse_signatures(MANY_SIGNATURE), source="many.ptx")


@pytest.fixture(scope="module")
def big():
    return ptxbridge.nvrtc.compile(BIG_SOURCE, arch="sm_90")


@pytest.fixture(scope="module")
def cubins(tmp_path_factory, big):
    work = tmp_path_factory.mktemp("large")
    return {name: (ptxas(work, text, "sm_90", name=name), work / f"{name}_sm_90.cubin")
            for name, text in (("many", many_ptx()), ("big", big.code), ("ptrs", POINTERS_PTX.encode()))}


def _v2_facts(dump: str) -> list[tuple[int, int, int, int, int]]:
    """(ordinal, offset, size, log alignment, space) of every KPARAM_INFO_V2 record in a dump."""
    pattern = (r"EIATTR_KPARAM_INFO_V2\s+Format:\s+EIFMT_SVAL\s+Value:\s+Index : 0x[0-9a-f]+\s+"
               r"Ordinal : (0x[0-9a-f]+)\s+Offset\s*: (0x[0-9a-f]+)\s+Size\s*: (0x[0-9a-f]+)\s+"
               r"Pointee's logAlignment : (0x[0-9a-f]+)\s+Space : (0x[0-9a-f]+)")
    return sorted(tuple(int(v, 16) for v in m) for m in re.findall(pattern, dump))


@pytest.mark.parametrize("name", ["many", "big", "ptrs"])
def test_kparam_info_v2_records_read_as_cuobjdump_reads_them(cubins, name):
    data, path = cubins[name]
    dump = cuobjdump_elf(path)
    (kernel,) = read_cubin(data, name).kernels
    facts = _v2_facts(dump)
    assert facts and "EIATTR_KPARAM_INFO\n" not in dump  # every record is a V2 one here
    assert [(p.ordinal, p.offset, p.size, p.log_alignment, p.space) for p in kernel.params] == facts
    assert cuobjdump_kparams(dump)[kernel.name] == [(p.ordinal, p.offset, p.size) for p in kernel.params]
    assert kernel.param_size == kernel.params[-1].offset + kernel.params[-1].size > 4096


def test_pointer_records_keep_pointee_alignment_and_space(cubins):
    (kernel,) = read_cubin(cubins["ptrs"][0]).kernels
    assert [(p.log_alignment, p.space) for p in kernel.params[:2]] == [(4, 4), (3, 2)]


def test_both_kernels_link_and_check_against_the_cubin(many, big):
    for artifact, name, size in ((many, "many", 8 + 4 * N), (big, "big", 4400 + 8 + 4)):
        image = ptxbridge.link([artifact], arch="sm_90")
        assert image.kernels[name].layout.size == size
        (kernel,) = read_cubin(image.cubin).kernels
        assert kernel.param_size == size


def test_the_cpu_loader_runs_them(many, big):
    module = ptxbridge.load([many, big], device="cpu")
    out = np.zeros(1, np.uint32)
    module.many(out, *MANY_VALUES, grid=1, block=1)
    assert out[0] == weighted(MANY_VALUES)
    module.big({"v": BIG_VALUES}, out, 11, grid=1, block=1)
    assert out[0] == weighted(BIG_VALUES, 11)


def test_the_c_launch_plan_packs_what_the_python_packer_packs(many):
    torch = pytest.importorskip("torch")
    from ptxbridge.abi.devices import DLPACK_CPU
    from ptxbridge.launch import fastpath
    from ptxbridge.launch.args import BindContext, make_binder

    if fastpath._fastlaunch is None:
        pytest.skip("ptxbridge.launch._fastlaunch not built")
    signature = many.kernels["many"]
    out = torch.zeros(1, dtype=torch.uint32)
    args = (out, *MANY_VALUES)
    ctx = BindContext("many", signature.convention, DLPACK_CPU, 0)
    types = tuple(map(type, args))
    binders = tuple(make_binder(ctx, p, t) for p, t in zip(signature.params, types, strict=True))
    packer = signature.layout.packer()
    specs = fastpath.native_specs(binders, args, signature.layout)
    expected = packer.pack([out.data_ptr(), *MANY_VALUES])
    assert len(expected) == 8 + 4 * N
    for offsets in (None, [p.offset for p in signature.layout.params]):  # extra buffer, kernelParams
        plan = fastpath._fastlaunch.Plan(packer.size, specs, pointer_offsets=offsets)
        assert plan.pack(args) == expected
    assert fastpath._fastlaunch.MAX_PARAMS == MAX_PARAM_BYTES
    full = fastpath._fastlaunch.Plan(MAX_PARAM_BYTES, ((fastpath._INT, MAX_PARAM_BYTES - 4, ord("I"), 0, 9),))
    assert full.pack((7,)) == bytes(MAX_PARAM_BYTES - 4) + struct.pack("<I", 7)
    with pytest.raises(ValueError, match="too large"):
        fastpath._fastlaunch.Plan(MAX_PARAM_BYTES + 1, ())


def test_the_cuda_loader_refuses_what_no_driver_takes(monkeypatch):
    cuda = pytest.importorskip("ptxbridge.loaders.cuda")
    over = parse_signatures("kernel k(" + ", ".join(f"p{i}: u32" for i in range(MAX_PARAM_BYTES // 4 + 1))
                            + ")")[0]
    with pytest.raises(CudaError, match=r"k: the parameters take 32768 bytes, more than the 32764"):
        cuda._check_param_space("k", over)
    large = parse_signatures(MANY_SIGNATURE)[0]
    monkeypatch.setattr(cuda, "driver_version", lambda: (12, 0))
    with pytest.raises(CudaError, match=r"many: the parameters take 6008 bytes; the driver \(CUDA 12.0\) "
                                        r"takes 4096.*update the NVIDIA driver"):
        cuda._check_param_space("many", large)
    monkeypatch.setattr(cuda, "driver_version", lambda: (12, 1))
    cuda._check_param_space("many", large)


# --- corrupt KPARAM records are FormatErrors of the reader -----------------------------------------
def _records(data: bytes, kernel: str) -> list[int]:
    """File offsets of the KPARAM_INFO_V2 records of ``kernel``, in file order."""
    info = read_elf(data).section(f".nv.info.{kernel}")
    found, at = [], info.offset
    while (at := data.find(b"\x04\x45\x0c\x00", at, info.offset + info.size)) >= 0:
        found.append(at)
        at += 16
    return found


@pytest.mark.parametrize(("field", "value", "message"), [
    ("ordinal", 7, r"parameter 1 is missing \(records must number the parameters 0 to 3\)"),
    ("offset", 4, r"parameter 3 starts at byte 4, inside the previous parameter \(which ends at 5016\)"),
    ("size", 0, "parameter 3 has size 0"),
    ("size", 0x7FFF, "parameter 3 ends at byte 37783, past the 5020-byte parameter buffer"),
])
def test_corrupt_records_are_format_errors(cubins, field, value, message):
    data = bytearray(cubins["ptrs"][0])
    first = _records(bytes(data), "ptrs")[0]  # ptxas writes the last parameter's record first
    struct.pack_into("<H", data, first + 4 + {"ordinal": 4, "offset": 6, "size": 8}[field], value)
    if field == "ordinal":  # the last parameter's record now claims ordinal 7: parameter 3 is missing too
        message = message.replace("parameter 1", "parameter 3")
    with pytest.raises(FormatError, match=message) as info:
        read_cubin(bytes(data), "bad.cubin")
    assert info.value.source == "bad.cubin" and info.value.where.startswith("offset 0x")


def test_a_truncated_record_is_a_format_error(cubins):
    data = bytearray(cubins["ptrs"][0])
    first = _records(bytes(data), "ptrs")[0]
    data[first + 2] = 8  # the payload now holds 8 of the 12 bytes a KPARAM record needs
    with pytest.raises(FormatError, match="needs 12 payload bytes"):
        read_cubin(bytes(data), "short.cubin")


# --- on a GPU: both launch paths, both parameter-passing modes ------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["buffer", "pointers"])
def test_on_a_gpu(many, big, monkeypatch, mode):
    torch = pytest.importorskip("torch")
    if mode == "pointers":
        monkeypatch.setenv("PTXBRIDGE_LAUNCH_PARAMS", "pointers")
    for fast in ("1", "0"):  # the C plan (torch tensors, int scalars) and the Python path
        monkeypatch.setenv("PTXBRIDGE_FASTLAUNCH", fast)
        module = ptxbridge.load([many, big], device="cuda:0")
        out = torch.zeros(1, dtype=torch.uint32, device="cuda")
        module.many(out, *MANY_VALUES, grid=1, block=1)
        assert int(out.cpu().numpy()[0]) == weighted(MANY_VALUES)
        module.big({"v": BIG_VALUES}, out, 11, grid=1, block=1)
        assert int(out.cpu().numpy()[0]) == weighted(BIG_VALUES, 11)

