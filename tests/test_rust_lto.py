"""Rust device functions and kernels as LTO-IR (``ptxbridge.rust.compile(output="ltoir")``): rustc's
LLVM IR through the real libNVVM (as it is from sm_100 on, rewritten in the LLVM 7 dialect below),
linked by the real nvJitLink, inlined into a numba kernel."""

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
from ptxbridge.rust import frontend, llvm7, ltoir

cuda = pytest.importorskip("numba.cuda")
toolchain, sysroot = _rust_fixtures.toolchain, _rust_fixtures.sysroot  # session fixtures
pytestmark = pytest.mark.usefixtures("sysroot")

DEVICE_FN = _rust_fixtures.RUST_DIR / "device_fn.rs"
MIX = _rust_fixtures.RUST_DIR / "lto_mix.rs"
ARCH, STEPS = "sm_90", 16
BOTH_DIALECTS = pytest.mark.parametrize("arch", ["sm_90", "sm_100"])  # libNVVM 13.5: LLVM 7, LLVM 22
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


def numba_caller(output: str, arch: str = ARCH):
    import ptxbridge.numba as pn

    return pn.compile(fma_loop, "void(float32[::1], float32[::1])", arch=arch, name="fma_loop",
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


@BOTH_DIALECTS
def test_numba_kernel_inlines_a_rust_device_function_through_lto(tmp_path, arch):
    rust = prust.compile(DEVICE_FN, arch=arch, output="ltoir", progress=False)
    assert rust.kind is CodeKind.LTOIR and rust.arch == arch and rust.link_options == ("-fma=0",)
    assert str(rust.device_functions["rust_fma"]).endswith("fn rust_fma(a: f32, b: f32, c: f32) -> f32")
    assert "--emit llvm-ir" in " ".join(rust.provenance.options)
    image = ptxbridge.link([numba_caller("ltoir", arch), rust], arch=arch)  # lto=None: on (LTO-IR input)
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
    rust = prust.compile(DEVICE_FN, arch=ARCH, progress=False)
    image = ptxbridge.link([numba_caller("ptx"), rust], arch=ARCH)
    assert len(re.findall(r"\bCALL\b", sass(image.cubin, tmp_path))) == STEPS


@BOTH_DIALECTS
def test_rust_lto_kernel_calls_another_rust_lto_artifact(arch):
    kernel = prust.compile(KERNEL, arch=arch, output="ltoir", progress=False)
    assert set(kernel.kernels) == {"twice_plus_one"} and set(kernel.imports) == {"rust_fma"}
    device = prust.compile(DEVICE_FN, arch=arch, output="ltoir", progress=False)
    # both define rustc's panic handler under one name: internal in each, so they link
    image = ptxbridge.link([kernel, device], arch=arch)
    assert set(image.kernels) == {"twice_plus_one"}
    x = np.arange(8, dtype=np.float32)
    image.load("cpu").twice_plus_one(x, 8, grid=1, block=8)
    assert x.tolist() == [2 * v + 1 for v in range(8)]


def test_the_no_fma_policy_cannot_be_overridden():
    rust = prust.compile(DEVICE_FN, arch=ARCH, output="ltoir", progress=False)
    with pytest.raises(LinkError, match=r"device_fn was built with -fma=0 but LinkOptions.fma=True"):
        ptxbridge.link([numba_caller("ltoir"), rust], arch=ARCH, options=LinkOptions(fma=True))


def rustc_ir(source, arch: str, toolchain) -> bytes:
    return frontend._run_rustc(frontend._crate(source), prust.rustc_options(arch, emit="llvm-ir"), toolchain,
                               False)


def test_ir_is_prepared_for_libnvvm(toolchain):
    ir = rustc_ir(KERNEL, "sm_100", toolchain)
    assert b'target datalayout = "' + ltoir.DATALAYOUT not in ir
    ready = ltoir.nvvm_ir(ir, "sm_100", toolchain.llvm_major)
    assert ready.count(b"target datalayout") == 1 and b'target datalayout = "' + ltoir.DATALAYOUT in ready
    version = ", ".join(f"i32 {v}" for v in nvvm.ir_version()).encode()
    assert re.search(rb"!nvvmir.version = !\{!(\d+)\}\n!\1 = !\{" + re.escape(version) + rb"\}", ready)
    assert b'@llvm.used = appending global [1 x ptr] [ptr @twice_plus_one], section "llvm.metadata"' in ready
    assert not re.search(rb"^define (?!internal).*___rustc17rust_begin_unwind\(", ready, re.MULTILINE)
    # rustc's own @llvm.used (a #[used] static) is extended, not duplicated
    used = ir + b'\n@llvm.used = appending global [1 x ptr] [ptr @KEEP], section "llvm.metadata"\n'
    extended = ltoir.nvvm_ir(used, "sm_100", toolchain.llvm_major)
    assert b"[2 x ptr] [ptr @KEEP, ptr @twice_plus_one]" in extended


def test_ir_below_sm_100_is_rewritten_in_the_llvm7_dialect(toolchain):
    if nvvm.llvm_major("sm_90") != 7:
        pytest.skip("this libNVVM does not read LLVM 7 for sm_90")
    ir = rustc_ir(KERNEL, "sm_90", toolchain)
    assert re.search(rb"\bptr\b", ir) and b"attributes #" in ir and b"noundef" in ir
    ready = ltoir.nvvm_ir(ir, "sm_90", toolchain.llvm_major).decode()
    assert not re.search(r"\bptr\b|attributes #|#\d|noundef|captures\(", ready)
    assert "define ptx_kernel void @twice_plus_one(i8* %x, i32 %n)" in ready
    # a store through a byte pointer is a store through a cast to the stored type
    assert re.search(r"(%\.pb\d+) = bitcast i8\* %\S+ to float\*\n\s+store float %\S+, float\* \1", ready)
    assert ('!{void (i8*, i32)* @twice_plus_one, !"kernel", i32 1}' in ready
            and "[1 x i8*] [i8* bitcast (void (i8*, i32)* @twice_plus_one to i8*)]" in ready)


def test_llvm7_rewrite_computes_what_rustcs_own_ptx_computes():
    """The same kernel as LTO-IR (through the LLVM 7 rewrite) and as rustc's PTX, run on the CPU loader."""
    n = 200
    x = np.concatenate([np.random.default_rng(1).normal(0, 3, n - 8),
                        [np.nan, np.inf, -np.inf, 2.5, -2.5, 0.5, -0.0, 3e9]]).astype(np.float32)
    results = []
    for output in ("ptx", "ltoir"):
        module = ptxbridge.link([prust.compile(MIX, arch="sm_90", output=output, progress=False)],
                                arch="sm_90").load("cpu")
        pairs = np.zeros(n, dtype=[("a", np.float32), ("b", np.int32)])
        pairs["b"] = np.arange(n) - 100
        out, count = np.zeros(n, np.int32), np.zeros(1, np.uint32)
        module.mix(x, pairs.view(np.uint8), out, count, n, grid=2, block=128)
        assert count[0] == sum(1 + (i & 1) for i in range(n))
        results.append((pairs, out))
    (pairs_ptx, out_ptx), (pairs_lto, out_lto) = results
    np.testing.assert_array_equal(pairs_lto["a"], pairs_ptx["a"])
    np.testing.assert_array_equal(pairs_lto["b"], pairs_ptx["b"])
    np.testing.assert_array_equal(out_lto, out_ptx)


def test_indirect_calls_are_stated_in_llvm7_and_freeze_is_refused_naming_the_line(toolchain):
    source = (KERNEL.replace('unsafe extern "C" { fn rust_fma(a: f32, b: f32, c: f32) -> f32; }\n', "")
              .replace("n: u32)", 'n: u32, f: extern "C" fn(f32, f32, f32) -> f32)')
              .replace("rust_fma(", "f("))
    # the callee is cast to the function type its arguments state; libNVVM's verifier accepts it
    assert "twice_plus_one" in prust.compile(source, arch="sm_90", output="ltoir", progress=False).kernels
    lines = rustc_ir(source, "sm_90", toolchain).decode().splitlines()
    number = next(n for n, line in enumerate(lines, 1) if "%f(" in line)
    typed = llvm7.downgrade("\n".join(lines).encode()).decode()
    cast = r"(%\.pb\d+) = bitcast i8\* %f to float \(float, float, float\)\*\n.*call float \1\("
    assert re.search(cast, typed) is not None
    frozen = [*lines[:number], "  %frozen = freeze i32 0", *lines[number:]]
    with pytest.raises(CompileError, match=rf"LLVM 7 NVVM IR .* cannot state 'freeze' of rustc's "
                                           rf"IR line {number + 1}: %frozen = freeze .* output='ptx'"):
        llvm7.downgrade("\n".join(frozen).encode())


def test_a_libnvvm_llvm_neither_7_nor_rustcs_is_refused(monkeypatch, toolchain):
    monkeypatch.setattr(nvvm, "llvm_major", lambda arch: 20)
    with pytest.raises(CompileError, match=rf"rustc's LLVM {toolchain.llvm_major} IR, but libNVVM reads "
                                           r"LLVM 20 for sm_90.* output='ptx'"):
        prust.compile(DEVICE_FN, arch="sm_90", output="ltoir", progress=False)


def test_unknown_output_is_an_argument_error():
    with pytest.raises(ArgumentError, match=r"output must be one of \('ptx', 'ltoir'\) \(got 'cubin'\)"):
        prust.compile(DEVICE_FN, arch=ARCH, output="cubin", progress=False)
