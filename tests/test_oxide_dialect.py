"""cuda-oxide's opaque-pointer NVVM IR on every target: rewritten for libNVVM below compute_100.

``tests/rust/oxide/opaque.ll`` is NVVM IR as cuda-oxide's llvm-export writes it in its modern
dialect (opaque ``ptr``, kernels in ``!nvvm.annotations`` only, the modern data layout, a launch
bound) and as older releases wrote it (no ``!nvvmir.version``); its kernels call libdevice.  It
is compiled by the real libNVVM (its verifier runs first) for sm_80, sm_90 and sm_100 and run on
the CPU loader against NumPy; tests/gpu/test_gpu_oxide.py runs it on a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest
from _rust_fixtures import RUST_DIR

import ptxbridge
import ptxbridge.oxide as ox
from ptxbridge import CodeKind, nvvm
from ptxbridge.abi.cubin import read_cubin
from ptxbridge.abi.errors import CompileError
from ptxbridge.abi.ptx import read_ptx
from ptxbridge.nvvm import dialect

OXIDE = RUST_DIR / "oxide"
OPAQUE_RS, OPAQUE_LL = OXIDE / "opaque.rs", OXIDE / "opaque.ll"


def opaque(tmp_path, arch):
    (tmp_path / "opaque.ll").write_bytes(OPAQUE_LL.read_bytes())
    (tmp_path / "opaque.target").write_text(f"{arch}\n")
    return ox.load(tmp_path / "opaque.ll", OPAQUE_RS)


def run(module, n=3000):
    x = np.linspace(-4, 4, n, dtype=np.float32)
    soft, power = np.full_like(x, np.nan), np.full_like(x, np.nan)
    module.softplus(x, soft, grid=(n + 127) // 128, block=128)
    module.powscale(np.abs(x), power, np.float32(1.7), 0.25, grid=(n + 255) // 256, block=256)
    return x, soft, power


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_100"])
def test_opaque_nvvm_ir_with_libdevice_compiles_for_every_target_and_runs(tmp_path, arch):
    art = opaque(tmp_path, arch)
    assert art.kind is CodeKind.NVVM and art.arch == arch and set(art.kernels) == {"softplus", "powscale"}
    assert art.kernels["powscale"].launch.maxntid == (256, 1, 1)
    image = ptxbridge.link([art], arch=arch)
    assert image.arch == arch
    entries = {e.name: e for e in read_ptx(image.ptx[0]).entries}
    assert entries["powscale"].maxntid == (256, 1, 1)  # the launch bound survived the rewrite
    assert read_cubin(image.cubin).kernel("powscale").maxntid == (256, 1, 1)
    x, soft, power = run(image.load("cpu"))
    np.testing.assert_allclose(soft, np.log1p(np.exp(x)), rtol=3e-6, atol=1e-7)
    np.testing.assert_allclose(power, np.abs(x) ** np.float32(1.7) * 0.25, rtol=3e-6, atol=1e-7)


def test_below_compute_100_libnvvm_refuses_the_ir_as_cuda_oxide_wrote_it(monkeypatch):
    monkeypatch.setattr(dialect, "for_libnvvm", lambda ir, major, version: ir)
    with pytest.raises(CompileError, match=r"libNVVM failed verifying opaque\.ll") as info:
        nvvm.compile_to_ltoir(OPAQUE_LL.read_bytes(), "opaque.ll", "sm_90")
    assert "expected type" in info.value.log
    with pytest.raises(CompileError, match="incompatible"):  # sm_100 reads it, but not without a version
        nvvm.compile_to_ltoir(OPAQUE_LL.read_bytes(), "opaque.ll", "sm_100")


def test_the_rewrite_states_what_libnvvm_needs():
    ir = OPAQUE_LL.read_bytes()
    version = nvvm.ir_version()
    legacy = dialect.for_libnvvm(ir, 7, version).decode()
    assert " ptr " not in legacy and "p3:32" not in legacy
    assert f'target datalayout = "{dialect.LEGACY_DATALAYOUT.decode()}"' in legacy
    assert "define ptx_kernel void @softplus(i8* %v0, i64 %v1, i8* %v2, i64 %v3)" in legacy
    assert '!{void (i8*, i64, i8*, i64, float, double)* @powscale, !"maxntidx", i32 256}' in legacy
    stated = ", ".join(f"i32 {v}" for v in version)
    assert legacy.rstrip().endswith(f"!{{{stated}}}") and legacy.count("!nvvmir.version") == 1
    modern = dialect.for_libnvvm(ir, 22, version).decode()  # compute_100 on: only the version is added
    assert modern.startswith(ir.decode().rstrip()) and "!nvvmir.version" in modern
    assert dialect.for_libnvvm(modern.encode(), 22, version).decode() == modern
    bitcode = b"BC\xc0\xde" + ir
    assert dialect.for_libnvvm(bitcode, 7, version) == bitcode


def test_what_llvm_7_cannot_state_is_refused_naming_the_line():
    frozen = b"%v8f = freeze float %v8\n  %v9 = call float @__nv_log1pf(float %v8f)"
    ir = OPAQUE_LL.read_bytes().replace(b"%v9 = call float @__nv_log1pf(float %v8)", frozen)
    with pytest.raises(CompileError, match=r"could not be rewritten in the LLVM 7 dialect .*'freeze'"):
        nvvm.compile_to_ltoir(ir, "frozen.ll", "sm_90")
    assert nvvm.compile_to_ltoir(ir, "frozen.ll", "sm_100")[:4] == b"\xedCN\x7f"  # sm_100 reads it
