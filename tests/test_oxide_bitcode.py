"""cuda-oxide-style NVVM IR as bitcode, on every target: read as text and rewritten where libNVVM refuses it.

The bitcode is the fixtures' text (opaque pointers, libdevice calls, kernels and launch bounds in
``!nvvm.annotations``; ``opaque.ll`` without ``!nvvmir.version``) assembled by LLVM 22's own
``llvm-as``, as a loose ``.bc`` with its ``.target`` and as the NVVM IR payload of ``.oxart``
bundles.  libNVVM's verifier runs before every compile; results on the CPU loader are compared
with NumPy.  tests/gpu/test_gpu_targets.py runs the sm_90 bundle on a GPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import _toolchain
import numpy as np
import pytest
from _rust_fixtures import RUST_DIR
from hypothesis import given, settings
from hypothesis import strategies as st
from test_oxide_dialect import OPAQUE_LL, OPAQUE_RS, run
from test_oxide_payloads import KERNELS, LIBM_LL, LIBM_RS, assert_wave, run_wave

import ptxbridge
import ptxbridge.oxide as ox
from ptxbridge import CodeKind
from ptxbridge.abi.cubin import read_cubin
from ptxbridge.abi.errors import CompileError, ToolchainError
from ptxbridge.abi.oxart import EntryKind, OxartBundle, OxartEntry, OxartPayload, PayloadKind, write_oxart
from ptxbridge.abi.ptx import read_ptx
from ptxbridge.artifacts.artifact import Artifact
from ptxbridge.linker.nvjitlink import ptx_from_ltoir
from ptxbridge.nvvm import compile_to_ltoir
from ptxbridge.nvvm.dialect import for_libnvvm

BOUNDS = b"""
target triple = "nvptx64-nvidia-cuda"
@llvm.used = appending global [1 x ptr] [ptr @bounded], section "llvm.metadata"
declare float @__nv_sqrtf(float)
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
define void @bounded(ptr %out) {
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %f = uitofp i32 %t to float
  %r = call float @__nv_sqrtf(float %f)
  %p = getelementptr inbounds float, ptr %out, i32 %t
  store float %r, ptr %p, align 4
  ret void
}
!nvvm.annotations = !{!0, !1, !2}
!0 = !{ptr @bounded, !"kernel", i32 1}
!1 = !{ptr @bounded, !"reqntidx", i32 64, !"reqntidy", i32 2, !"reqntidz", i32 1, !"minctasm", i32 3}
!2 = !{ptr @bounded, !"cluster_dim_x", i32 2, !"cluster_dim_y", i32 1, !"cluster_dim_z", i32 1}
"""


def assemble(text: bytes, where: Path, major: int = 22) -> bytes:
    """``text`` as bitcode, written by LLVM ``major``'s ``llvm-as`` (skips without it)."""
    try:
        data = _toolchain.assemble(text, where, major)
    except FileNotFoundError as exc:
        pytest.skip(f"{exc}: it assembles the bitcode fixtures")
    assert data[:4] == b"BC\xc0\xde"
    return data


@pytest.fixture(scope="module")
def opaque_bc(tmp_path_factory) -> bytes:
    return assemble(OPAQUE_LL.read_bytes(), tmp_path_factory.mktemp("bc"))


def bundle(path: Path, name: str, target: str, code: bytes, kernels: set[str]) -> Path:
    entries = tuple(OxartEntry(EntryKind.KERNEL, k) for k in sorted(kernels))
    payload = OxartPayload(PayloadKind.NVVM_IR, f"{name}.bc", code)
    path.write_bytes(write_oxart([OxartBundle(name, target, (payload,), entries)]))
    return path


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_100"])
def test_opaque_bitcode_with_libdevice_compiles_for_every_target_and_runs(tmp_path, opaque_bc, arch):
    (tmp_path / "opaque.bc").write_bytes(opaque_bc)
    (tmp_path / "opaque.target").write_text(f"{arch}\n")
    art = ox.load(tmp_path / "opaque.bc", OPAQUE_RS)
    assert art.kind is CodeKind.NVVM and art.arch == arch and set(art.kernels) == {"softplus", "powscale"}
    image = ptxbridge.link([art], arch=arch)
    assert {e.name: e.maxntid for e in read_ptx(image.ptx[0]).entries}["powscale"] == (256, 1, 1)
    assert read_cubin(image.cubin).kernel("powscale").maxntid == (256, 1, 1)  # the bound survived
    x, soft, power = run(image.load("cpu"))
    np.testing.assert_allclose(soft, np.log1p(np.exp(x)), rtol=3e-6, atol=1e-7)
    np.testing.assert_allclose(power, np.abs(x) ** np.float32(1.7) * 0.25, rtol=3e-6, atol=1e-7)


@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
def test_bitcode_in_oxart_bundles_below_sm_100(tmp_path, opaque_bc, target):
    """Both fixtures' bitcode as bundle payloads: ``libm_sm100.ll`` (a ``#[constant]``, a device
    function, ``!nvvmir.version`` stated) and ``opaque.ll`` (none stated)."""
    libm = assemble((RUST_DIR / "oxide" / "libm_sm100.ll").read_bytes(), tmp_path)
    art = ox.load(bundle(tmp_path / "app", "libm", target, libm, KERNELS), LIBM_RS)
    assert art.kind is CodeKind.NVVM and art.arch == target and set(art.kernels) == KERNELS
    assert set(art.device_functions) == {"affine"}
    assert_wave(*run_wave(ptxbridge.link([art], arch=target).load("cpu")))
    kernels = {"softplus", "powscale"}
    soft = ox.load(bundle(tmp_path / "soft", "opaque", target, opaque_bc, kernels), OPAQUE_RS)
    x, y, _ = run(ptxbridge.link([soft]).load("cpu"))
    np.testing.assert_allclose(y, np.log1p(np.exp(x)), rtol=3e-6, atol=1e-7)


@pytest.mark.parametrize("arch", ["sm_90", "sm_100"])
def test_every_launch_annotation_survives_the_bitcode(tmp_path, arch):
    """LLVM's reader makes them function attributes (``"nvvm.reqntid"="64,2,1"``); below sm_100
    the rewrite states them as annotations again, and ptxas sees each."""
    code = compile_to_ltoir(assemble(BOUNDS, tmp_path), "bounds.bc", arch)
    lto = Artifact(code=code, kind=CodeKind.LTOIR, arch=arch, name="bounds")
    (entry,) = read_ptx(ptx_from_ltoir([lto], arch, [])).entries
    assert (entry.reqntid, entry.minnctapersm, entry.reqnctapercluster) == ((64, 2, 1), 3, (2, 1, 1))


def test_typed_pointer_bitcode_goes_to_libnvvm_as_it_is(tmp_path, monkeypatch):
    """``libm.ll`` (cuda-oxide's LLVM 7 dialect: typed pointers) assembled by LLVM 14, whose bitcode
    libNVVM's LLVM 7 reader reads: it compiles for sm_80 with no llvmlite to read it."""
    typed = assemble(LIBM_LL.read_bytes(), tmp_path, major=14)
    monkeypatch.setitem(sys.modules, "llvmlite.binding", None)  # as_text would fail: it is never called
    monkeypatch.setenv("PTXBRIDGE_CACHE_DIR", str(tmp_path))
    art = ox.load(bundle(tmp_path / "app", "libm", "sm_80", typed, KERNELS), LIBM_RS)
    assert_wave(*run_wave(ptxbridge.link([art]).load("cpu")))


def test_without_llvmlite_the_error_says_what_libnvvm_refused_and_what_to_install(tmp_path, monkeypatch,
                                                                               opaque_bc):
    monkeypatch.setitem(sys.modules, "llvmlite.binding", None)
    monkeypatch.setenv("PTXBRIDGE_CACHE_DIR", str(tmp_path))
    with pytest.raises(ToolchainError, match=r"NVVM IR bitcode opaque\.bc: libNVVM refused it as it is "
                                             r"\(.*Reader: 'LLVM 7\.0\.1'.*\); .* pip install llvmlite"):
        compile_to_ltoir(opaque_bc, "opaque.bc", "sm_90")
    with pytest.raises(ToolchainError, match=r"\(opaque\.bc: error: IR version 1\.0 incompatible"):
        compile_to_ltoir(opaque_bc, "opaque.bc", "sm_100")


def test_bitcode_no_llvm_reads_is_a_compile_error_naming_the_file(tmp_path):
    broken = b"BC\xc0\xde" + bytes(range(256)) * 4
    (tmp_path / "broken.bc").write_bytes(broken)
    (tmp_path / "broken.target").write_text("sm_90\n")
    with pytest.raises(CompileError, match=r"NVVM IR bitcode broken\.bc: libNVVM refused it as it is \(.+\), "
                                           r"and llvmlite \(LLVM 2\d[.\d]*\) cannot read it .*: give the IR "
                                           r"as text \(\.ll\)"):
        ox.load(tmp_path / "broken.bc", OPAQUE_RS)


def test_a_launch_attribute_llvm_7_cannot_state_is_refused_naming_the_function(tmp_path):
    text = BOUNDS.replace(b"(ptr %out) {", b'(ptr %out) "nvvm.x"="1" {')
    with pytest.raises(CompileError, match=r'bounds\.bc: NVVM IR function @bounded has the attribute '
                                           r'"nvvm\.x"="1", which the LLVM 7 dialect .* cannot state; '
                                           r"compile it for sm_100"):
        compile_to_ltoir(assemble(text, tmp_path), "bounds.bc", "sm_90")


@pytest.mark.parametrize("form", ["text", "bitcode"])
def test_ir_without_a_data_layout_gets_one_rather_than_aborting_libnvvm(tmp_path, form):
    """libNVVM 13.5 aborts the process on IR with no data layout from compute_100 on; the IR gets
    the NVVM IR specification's one first.  Run in a child process, where an abort is a failure."""
    stated = BOUNDS + b"!nvvmir.version = !{!9}\n!9 = !{i32 2, i32 0}\n"
    (tmp_path / "nolayout").write_bytes(stated if form == "text" else assemble(stated, tmp_path))
    script = ("import sys; from ptxbridge.nvvm import compile_to_ltoir; ir = open(sys.argv[1], 'rb').read(); "
              "sys.stdout.write(compile_to_ltoir(ir, 'nolayout', 'sm_100')[:4].hex())")
    env = {**os.environ, "PTXBRIDGE_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "nolayout")], capture_output=True,
                          text=True, env=env)
    assert (done.returncode, done.stdout) == (0, "ed434e7f"), done.stderr[-2000:]


_AXES = {"maxntid": ("maxntidx", "maxntidy", "maxntidz"), "reqntid": ("reqntidx", "reqntidy", "reqntidz"),
         "cluster_dim": ("cluster_dim_x", "cluster_dim_y", "cluster_dim_z"), "minctasm": ("minctasm",),
         "maxnreg": ("maxnreg",), "maxclusterrank": ("maxclusterrank",)}
_VALUES = st.lists(st.integers(1, 4096), min_size=1, max_size=3)
_STATED = st.dictionaries(st.sampled_from(sorted(_AXES)), _VALUES, min_size=1)


@settings(max_examples=200, deadline=None)
@given(_STATED, st.booleans(), st.one_of(st.none(), st.from_regex(r"[a-z_]{1,12}", fullmatch=True)))
def test_launch_attributes_are_restated_as_annotations_or_refused(stated, grouped, unknown):
    """Any set of LLVM's ``nvvm.`` launch attributes, in an attribute group or on the ``define``
    line, comes back below compute_100 as one annotation per axis; any other is refused."""
    stated = {k: v[:len(_AXES[k])] for k, v in stated.items()}
    spelled = " ".join(f'"nvvm.{k}"="{",".join(map(str, v))}"' for k, v in stated.items())
    if unknown is not None and unknown not in _AXES:
        spelled += f' "nvvm.{unknown}"="1"'
    define = f'define ptx_kernel void @k(ptr %p) {"#0" if grouped else spelled} {{'
    text = f'target triple = "nvptx64-nvidia-cuda"\n{define}\n  ret void\n}}\n'
    text += f"attributes #0 = {{ {spelled} }}\n" if grouped else ""
    if unknown is not None and unknown not in _AXES:
        with pytest.raises(CompileError, match=rf'@k has the attribute "nvvm\.{unknown}"="1"'):
            for_libnvvm(text.encode(), 7, (2, 0))
        return
    legacy = for_libnvvm(text.encode(), 7, (2, 0)).decode()
    for key, values in stated.items():
        for axis, value in zip(_AXES[key], values, strict=False):
            assert f'!{{void (i8*)* @k, !"{axis}", i32 {value}}}' in legacy
    assert legacy.count("@k, !") == 1 + sum(map(len, stated.values()))  # and the kernel annotation
