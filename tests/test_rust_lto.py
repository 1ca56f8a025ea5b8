"""Rust device functions and kernels as LTO-IR (``ptxbridge.rust.compile(output="ltoir")``): rustc's
LLVM IR through the real libNVVM, linked by the real nvJitLink, inlined into a numba kernel."""

from __future__ import annotations

import os
import re
import subprocess

import _rust_fixtures
import numpy as np
import pytest
from _toolchain import BIN, tool

import ptxbridge
import ptxbridge.rust as prust
from ptxbridge import CodeKind, LinkOptions, nvvm
from ptxbridge.abi.errors import ArgumentError, CompileError, LinkError
from ptxbridge.rust import frontend, ltoir

cuda = pytest.importorskip("numba.cuda")
toolchain, sysroot = _rust_fixtures.toolchain, _rust_fixtures.sysroot  # session fixtures
pytestmark = pytest.mark.usefixtures("sysroot")

DEVICE_FN = _rust_fixtures.RUST_DIR / "device_fn.rs"
ARCH, STEPS = "sm_100", 16  # libNVVM 13.5 reads rustc's LLVM 22 IR from sm_100 on
KERNEL = r"""#![no_std]
#![feature(abi_ptx, stdarch_nvptx)]
#[panic_handler]
fn p(_: &core::panic::PanicInfo) -> ! { loop {} }
unsafe extern "C" { fn rust_fma(a: f32, b: f32, c: f32) -> f32; }
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn twice_plus_one(x: *mut f32, n: u32) {
    let i = unsafe { core::arch::nvptx::_thread_idx_x() } as usize;
    if i < n as usize { unsafe { *x.add(i) = rust_fma(*x.add(i), 2.0, 1.0) } }
}
"""
rust_fma = cuda.declare_device("rust_fma", "float32(float32, float32, float32)", abi="c")


def fma_loop(x, out):
    i = cuda.grid(1)
    if i < x.size:
        acc = x[i]
        for _ in range(STEPS):
            acc = rust_fma(acc, 1.0001, 0.5)
        out[i] = acc


def numba_caller(output: str):
    import ptxbridge.numba as pn

    return pn.compile(fma_loop, "void(float32[::1], float32[::1])", arch=ARCH, name="fma_loop",
                      imports=[rust_fma], output=output)


def sass(cubin: bytes, tmp_path) -> str:
    """``fma_loop``'s SASS (cuobjdump -sass, which runs nvdisasm)."""
    try:
        cuobjdump = tool("cuobjdump")
        tool("nvdisasm")
    except FileNotFoundError as exc:
        pytest.skip(f"{exc} (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
    path = tmp_path / "image.cubin"
    path.write_bytes(cubin)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    dump = subprocess.run([cuobjdump, "-sass", str(path)], check=True, capture_output=True, text=True,
                          env=env).stdout
    (body,) = [f for f in re.split(r"\n\s*Function : ", dump) if f.startswith("fma_loop")]
    return body


def test_numba_kernel_inlines_a_rust_device_function_through_lto(tmp_path):
    rust = prust.compile(DEVICE_FN, ARCH, output="ltoir", progress=False)
    assert rust.kind is CodeKind.LTOIR and rust.arch == ARCH and rust.link_options == ("-fma=0",)
    assert str(rust.device_functions["rust_fma"]).endswith("fn rust_fma(a: f32, b: f32, c: f32) -> f32")
    assert "--emit llvm-ir" in " ".join(rust.provenance.options)
    image = ptxbridge.link([numba_caller("ltoir"), rust], arch=ARCH)  # lto=None: on, an input is LTO-IR
    code = sass(image.cubin, tmp_path)
    assert not re.search(r"\bCALL\b", code)
    # Rust's a * b + c is two roundings: the link keeps them apart (-fma=0), no FFMA
    assert len(re.findall(r"\bFMUL\b", code)) == STEPS and not re.search(r"\bFFMA\b", code)
    x = np.linspace(-2, 2, 300, dtype=np.float32)
    out = np.zeros_like(x)
    image.load("cpu").fma_loop(x, out, grid=3, block=128)
    expected = x.copy()
    for _ in range(STEPS):
        expected = expected * np.float32(1.0001) + np.float32(0.5)
    np.testing.assert_array_equal(out, expected)


def test_the_same_link_through_ptx_is_a_call(tmp_path):
    rust = prust.compile(DEVICE_FN, ARCH, progress=False)
    image = ptxbridge.link([numba_caller("ptx"), rust], arch=ARCH)
    assert len(re.findall(r"\bCALL\b", sass(image.cubin, tmp_path))) == STEPS


def test_rust_lto_kernel_calls_another_rust_lto_artifact():
    kernel = prust.compile(KERNEL, ARCH, output="ltoir", progress=False)
    assert set(kernel.kernels) == {"twice_plus_one"} and set(kernel.imports) == {"rust_fma"}
    device = prust.compile(DEVICE_FN, ARCH, output="ltoir", progress=False)
    # both define rustc's panic handler under one name: internal in each, so they link
    image = ptxbridge.link([kernel, device], arch=ARCH)
    assert set(image.kernels) == {"twice_plus_one"}
    x = np.arange(8, dtype=np.float32)
    image.load("cpu").twice_plus_one(x, 8, grid=1, block=8)
    assert x.tolist() == [2 * v + 1 for v in range(8)]


def test_the_no_fma_policy_cannot_be_overridden():
    rust = prust.compile(DEVICE_FN, ARCH, output="ltoir", progress=False)
    with pytest.raises(LinkError, match=r"device_fn was built with -fma=0 but LinkOptions.fma=True"):
        ptxbridge.link([numba_caller("ltoir"), rust], arch=ARCH, options=LinkOptions(fma=True))


def test_ir_is_prepared_for_libnvvm(toolchain):
    crate = frontend._crate(KERNEL)
    ir = frontend._run_rustc(crate, prust.rustc_options(ARCH, emit="llvm-ir"), toolchain, False)
    assert b'target datalayout = "' + ltoir.DATALAYOUT not in ir
    ready = ltoir.nvvm_ir(ir, ARCH, toolchain.llvm_major)
    assert ready.count(b"target datalayout") == 1 and b'target datalayout = "' + ltoir.DATALAYOUT in ready
    version = ", ".join(f"i32 {v}" for v in nvvm.ir_version()).encode()
    assert re.search(rb"!nvvmir.version = !\{!(\d+)\}\n!\1 = !\{" + re.escape(version) + rb"\}", ready)
    assert b'@llvm.used = appending global [1 x ptr] [ptr @twice_plus_one], section "llvm.metadata"' in ready
    assert re.search(rb"^define internal .*___rustc17rust_begin_unwind\(", ready, re.MULTILINE)
    # rustc's own @llvm.used (a #[used] static) is extended, not duplicated
    used = ir + b'\n@llvm.used = appending global [1 x ptr] [ptr @KEEP], section "llvm.metadata"\n'
    assert (b"[2 x ptr] [ptr @KEEP, ptr @twice_plus_one]" in ltoir.nvvm_ir(used, ARCH, toolchain.llvm_major))


def test_an_arch_whose_libnvvm_reads_older_llvm_is_refused_naming_both(toolchain):
    reads = nvvm.llvm_major("sm_90")
    if reads >= toolchain.llvm_major:
        pytest.skip(f"libNVVM reads LLVM {reads} for sm_90, rustc writes {toolchain.llvm_major}")
    with pytest.raises(CompileError, match=rf"rustc's LLVM {toolchain.llvm_major} IR .* libNVVM reads "
                                           rf"LLVM {reads} for sm_90,.* output=.ptx."):
        prust.compile(DEVICE_FN, "sm_90", output="ltoir", progress=False)


def test_unknown_output_is_an_argument_error():
    with pytest.raises(ArgumentError, match=r"output must be one of \('ptx', 'ltoir'\) \(got 'cubin'\)"):
        prust.compile(DEVICE_FN, ARCH, output="cubin", progress=False)
