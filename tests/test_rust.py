"""ptxbridge.rust: real Debian rustc builds for nvptx64, signatures read from the source and checked."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import _rust_fixtures
import pytest

import ptxbridge
import ptxbridge.rust as prust
from ptxbridge import CodeKind, Convention
from ptxbridge.abi.check import check
from ptxbridge.abi.dtypes import dtype
from ptxbridge.abi.errors import (
    AbiMismatchError,
    ArgumentError,
    CompileError,
    FormatError,
    ToolchainError,
)
from ptxbridge.abi.kinds import Opaque, Pointer, Scalar, Slice, Struct, StructField, Tuple
from ptxbridge.abi.lowering import field_offsets
from ptxbridge.abi.ptx import read_ptx
from ptxbridge.linker.target import default_arch
from ptxbridge.rust import toolchain as rust_toolchain

RUST_DIR = _rust_fixtures.RUST_DIR
toolchain, sysroot = _rust_fixtures.toolchain, _rust_fixtures.sysroot  # session fixtures
pytestmark = pytest.mark.usefixtures("sysroot")

F32, U64 = Scalar(dtype("f32")), Scalar(dtype("u64"))
HEADER = ("#![no_std]\n#![feature(abi_ptx, f16)]\n"
          "#[panic_handler]\nfn p(_: &core::panic::PanicInfo) -> ! { loop {} }\n")


def offsets(signature):
    return [(lp.param.name, lp.offset, lp.param.size) for lp in signature.layout.params]


# --- toolchain ---------------------------------------------------------------------------


def test_toolchain_is_debian_rustc_with_sources(toolchain):
    assert ".cargo" not in str(toolchain.rustc) and ".rustup" not in str(toolchain.rustc)
    assert toolchain.version_line.startswith("rustc 1.")
    assert (toolchain.library / "core/src/lib.rs").is_file()


def test_sysroot_has_core_for_the_target(sysroot):
    lib = sysroot / f"lib/rustlib/{rust_toolchain.TARGET}/lib"
    libs = sorted(p.name for p in lib.iterdir())
    assert libs == ["libcompiler_builtins.rlib", "libcore.rlib", "libptxbridge_mem.rlib",
                    "libptxbridge_panic.rlib", "libptxbridge_panic_location.rlib"]


@pytest.fixture
def fresh_lookup():
    rust_toolchain.find_toolchain.cache_clear()
    yield
    rust_toolchain.find_toolchain.cache_clear()


def test_missing_rustc_says_what_to_install(monkeypatch, tmp_path, fresh_lookup):
    monkeypatch.setenv("PTXBRIDGE_RUSTC", str(tmp_path / "no-rustc"))
    with pytest.raises(ToolchainError, match=r"apt-get install rustc-web rust-web-src"):
        rust_toolchain.find_toolchain()


def test_missing_library_sources_say_what_to_install(monkeypatch, tmp_path, fresh_lookup):
    monkeypatch.setenv("PTXBRIDGE_RUST_SRC", str(tmp_path))
    with pytest.raises(ToolchainError, match=r"no library sources .*apt-get install rustc-web rust-web-src"):
        rust_toolchain.find_toolchain()


def test_rustc_options_are_a_pure_function():
    assert prust.rustc_options("sm_90", opt_level=2) == (
        "--target", "nvptx64-nvidia-cuda", "--crate-type", "cdylib", "--edition", "2021",
        "-C", "target-cpu=sm_90", "-C", "opt-level=2", "-C", "panic=abort",
        "-C", "lto=fat", "-C", "linker=true", "-C", "llvm-args=-min-jump-table-entries=2147483647",
        "--emit", "asm")
    assert prust.rustc_options("sm_100", emit="llvm-ir")[-2:] == ("--emit", "llvm-ir")
    with pytest.raises(ArgumentError, match=r"emit must be one of asm, llvm-ir \(got 'obj'\)"):
        prust.rustc_options("sm_80", emit="obj")
    assert prust.rustc_options("compute_90") == prust.rustc_options((9, 0)) == prust.rustc_options("sm_90")
    with pytest.raises(ArgumentError, match=r"arch must look like 'sm_80'.*\(got 'gfx90'\)"):
        prust.rustc_options("gfx90")
    with pytest.raises(ArgumentError, match=r"opt_level .*\(got 7\)"):
        prust.rustc_options("sm_80", opt_level=7)


# --- real kernels ------------------------------------------------------------------------


def test_saxpy_raw_pointers_and_length():
    art = prust.compile(RUST_DIR / "saxpy.rs", progress=False)
    want = default_arch()  # the one default of every frontend: the GPU's arch, else sm_90
    assert art.kind is CodeKind.PTX and art.arch == want and art.name == "saxpy"
    module = read_ptx(art.code)
    assert module.target[0] == want and [f.name for f in module.entries] == ["saxpy"]
    sig = art.kernels["saxpy"]
    assert sig.convention is Convention.C and sig.kind == "kernel"
    assert [(p.name, p.type) for p in sig.params] == [
        ("a", F32), ("x", Pointer(F32, False)), ("y", Pointer(F32, True)), ("n", U64)]
    assert offsets(sig) == [("a", 0, 4), ("x", 8, 8), ("y", 16, 8), ("n", 24, 8)]
    check(sig, module)
    assert art.provenance.compiler == str(rust_toolchain.find_toolchain().rustc)
    assert art.provenance.version.startswith("rustc 1.")
    assert f"target-cpu={want}" in art.provenance.options and art.provenance.arch == want
    assert not art.device_functions and not art.imports


def test_repr_c_struct_with_mixed_alignment_and_nested_struct():
    art = prust.compile(RUST_DIR / "structs.rs", progress=False)
    sig = art.kernels["apply"]
    params = sig.params[0].type
    inner = Struct("Inner", (StructField("tag", Scalar(dtype("u8"))),
                             StructField("weight", Scalar(dtype("f64")))))
    assert params == Struct("Params", (StructField("flag", Scalar(dtype("u8"))), StructField("inner", inner),
                                       StructField("count", Scalar(dtype("u16"))), StructField("scale", F32)))
    assert field_offsets(params) == (0, 8, 24, 28)
    assert sig.params[2].type == F32  # through `type Scale = f32;`
    assert sig.params[3].type == Scalar(dtype("bool"))
    assert offsets(sig) == [("p", 0, 32), ("out", 32, 8), ("bias", 40, 4), ("enabled", 44, 1)]
    entry = read_ptx(art.code).function("apply")
    assert (entry.params[0].align, entry.params[0].array) == (8, 32)


def test_divergent_loop_kernel():
    art = prust.compile(RUST_DIR / "divergent.rs", progress=False)
    sig = art.kernels["collatz_steps"]
    assert [p.type for p in sig.params] == [Pointer(Scalar(dtype("u32")), False),
                                            Pointer(Scalar(dtype("u32")), True), Scalar(dtype("u32"))]
    body = read_ptx(art.code).function("collatz_steps").body
    assert body.count("bra") >= 2  # a real loop with a data-dependent exit


def test_exported_device_functions():
    art = prust.compile(RUST_DIR / "device_fn.rs", progress=False)
    assert set(art.device_functions) == {"rust_fma", "rust_store"} and not art.kernels
    fma = art.device_functions["rust_fma"]
    assert fma.kind == "device" and fma.returns == F32 and [p.name for p in fma.params] == ["a", "b", "c"]
    store = art.device_functions["rust_store"]
    assert store.returns is None and store.params[0].type == Pointer(Scalar(dtype("i64")), True)
    func = read_ptx(art.code).function("rust_fma")
    assert func.kind == "func" and func.linkage == "visible" and len(func.returns) == 1


def test_kernel_calling_an_imported_function():
    art = prust.compile(RUST_DIR / "calls_import.rs", progress=False)
    assert set(art.imports) == {"cxx_scale"}  # never_called has no PTX declaration
    imported = art.imports["cxx_scale"]
    assert imported.returns == F32 and [p.type for p in imported.params] == [F32, Scalar(dtype("i32"))]
    decl = read_ptx(art.code).function("cxx_scale")
    assert decl.linkage == "extern" and decl.body is None
    assert "call" in read_ptx(art.code).function("scale_all").body


def test_crate_folder_with_a_file_module():
    art = prust.compile(RUST_DIR / "crate_kernels", progress=False)
    assert art.name == "crate_kernels"
    rect = Struct("Rect", (StructField("w", F32), StructField("h", F32)))
    assert art.kernels["areas"].params[0].type == Pointer(rect, False)
    assert "--edition" in art.provenance.options


def test_arch_sets_target_cpu():
    art = prust.compile(RUST_DIR / "saxpy.rs", arch="sm_90", progress=False)
    module = read_ptx(art.code)
    assert module.target[0] == "sm_90" and art.arch == "sm_90"
    assert "target-cpu=sm_90" in art.provenance.options


def test_by_value_shapes_match_rustc(tmp_path):
    """ZSTs vanish, tuples/arrays/i128/f16 are aggregates (an array a tuple of its items, the same
    layout), `&[T]` is a 16-byte fat pointer (rustc 1.96)."""
    source = HEADER + (
        "#[unsafe(no_mangle)]\n#[allow(improper_ctypes_definitions)]\n"
        "pub unsafe extern \"ptx-kernel\" fn shapes(a: f32, m: core::marker::PhantomData<u32>,\n"
        "    u: (), t: (u8, f64), arr: [u16; 3], r: &u32, h: f16, b: bool, w: i128, s: &[f32],\n"
        "    pair: (f32, f32)) {}\n")
    sig = prust.compile(source, progress=False).kernels["shapes"]
    kinds = {p.name: p.type for p in sig.params}
    assert kinds["m"] == kinds["u"] == Opaque(0, 1)
    assert kinds["t"] == Opaque(16, 8) and kinds["w"] == Opaque(16, 16)
    assert kinds["arr"] == Tuple((Scalar(dtype("u16")),) * 3)
    assert kinds["r"] == Pointer(Scalar(dtype("u32")), False, "borrow")  # a reference: docs/safety.md
    assert kinds["s"] == Slice(dtype("f32"))  # rustc's fat pointer: one 16-byte aggregate in the PTX
    assert [(lp.param.name, lp.param.size, lp.param.align) for lp in sig.layout.params] == [
        ("a", 4, 4), ("t", 16, 8), ("arr", 6, 2), ("r", 8, 8), ("h", 2, 2), ("b", 1, 1), ("w", 16, 16),
        ("s", 8, 8), ("s.len", 8, 8), ("pair", 8, 4)]  # s: PTX's one [16] aggregate, the same bytes


def test_second_compile_runs_no_rustc(monkeypatch):
    calls = []
    real = rust_toolchain.run_rustc

    def counting(*args, **kwargs):
        calls.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(rust_toolchain, "run_rustc", counting)
    source = (RUST_DIR / "saxpy.rs").read_text() + f"\n// nonce {uuid.uuid4()}\n"
    first = prust.compile(source, progress=False)
    assert len(calls) == 1
    second = prust.compile(source, progress=False)
    assert len(calls) == 1, "the second compile of the same source must come from the cache"
    assert second.code == first.code and second.kernels == first.kernels
    prust.compile(source, arch="sm_86", progress=False)  # another arch is another cache entry
    assert len(calls) == 2


# --- bad input -----------------------------------------------------------------------------


def test_from_ptx_checks_source_against_ptx(tmp_path):
    ptx = tmp_path / "saxpy.ptx"
    ptx.write_bytes(prust.compile(RUST_DIR / "saxpy.rs", progress=False).code)
    art = prust.from_ptx(ptx, RUST_DIR / "saxpy.rs")
    assert art.arch == default_arch() and art.kernels["saxpy"].params[3].type == U64
    assert art.provenance.version.startswith("PTX ISA ")
    with pytest.raises(AbiMismatchError, match=r"apply: .* has no \.entry or \.func of that name"):
        prust.from_ptx(ptx, RUST_DIR / "structs.rs")
    wrong = tmp_path / "wrong.rs"  # n declared u32 where the PTX was built with usize
    wrong.write_text((RUST_DIR / "saxpy.rs").read_text().replace("n: usize", "n: u32"))
    with pytest.raises(AbiMismatchError, match=r"saxpy: parameter 'n' lowers to 1 param \(u32"):
        prust.from_ptx(ptx, wrong)


def test_from_ptx_on_a_missing_file_is_an_argument_error(tmp_path):
    with pytest.raises(ArgumentError, match=r"cannot read PTX file .*nope\.ptx.*No such file"):
        prust.from_ptx(tmp_path / "nope.ptx", RUST_DIR / "saxpy.rs")


def test_rustc_errors_carry_the_log():
    with pytest.raises(CompileError, match=r"rustc failed") as info:
        prust.compile(HEADER + "#[unsafe(no_mangle)]\npub extern \"C\" fn f() -> u32 { \"no\" }\n",
                      progress=False)
    assert "mismatched types" in info.value.log


def test_untypeable_parameter_fails_that_kernel_alone_naming_the_parameter():
    source = HEADER + ("#[unsafe(no_mangle)]\n#[allow(improper_ctypes_definitions)]\n"
                       "pub unsafe extern \"ptx-kernel\" fn k(x: Option<u32>) {}\n"
                       "#[unsafe(no_mangle)]\npub unsafe extern \"ptx-kernel\" fn ok(x: u32) {}\n")
    art = prust.compile(source, progress=False)
    assert set(art.kernels) == {"ok"}
    message = r"k: parameter 'x': Option<u32> has no layout Rust guarantees.*\(got Option<u32>\)"
    assert re.search(message, art.unusable["k"])
    module = ptxbridge.link([art]).load("cpu")
    with pytest.raises(AbiMismatchError, match=message):
        module["k"]


def test_missing_file_and_bad_crate(tmp_path):
    with pytest.raises(FormatError, match=r"no such Rust source file"):
        prust.compile(tmp_path / "absent.rs")
    (tmp_path / "Cargo.toml").write_text('[package]\nname = "x"\n[dependencies]\nlibm = "0.2"\n')
    (tmp_path / "src").mkdir()
    (tmp_path / "src/lib.rs").write_text("#![no_std]\n")
    with pytest.raises(FormatError, match=r"dependency-free crates only"):
        prust.compile(tmp_path)


# --- the source reader on its own (no rustc) ------------------------------------------------

TRICKY = r'''
/* outer /* nested */ still a comment: extern "ptx-kernel" fn fake() {} */
const BRACES: &str = r#"fn also_fake() { "# ;
static OPEN: char = '{';
#[repr(u32)] enum Mode { A = 1, B = 2 }
#[repr(transparent)] pub struct Meters(pub f32);
#[repr(C, align(16))] pub struct Wide { a: u8 }
pub enum Shape { Circle(f32), Square { side: f32 } }
unsafe extern "C" {
    #[link_name = "real_symbol"]
    pub safe fn alias(x: u32) -> u32;
    static COUNTER: u32;
}
pub(crate) extern "C" fn mangled(x: u32) -> u32 { x }
#[unsafe(export_name = "renamed")]
pub unsafe extern "ptx-kernel" fn k<'a>(m: Mode, d: Meters, w: Wide, s: &'a [u8], c: char)
where 'a: 'a { let _ = '}'; let _ = b"}"; let _ = "}"; }
'''


def test_reader_skips_comments_strings_and_chars():
    from ptxbridge.rust.signatures import read_signatures
    from ptxbridge.rust.source import parse_source

    found = read_signatures([parse_source(TRICKY, "tricky.rs")], Convention.C)
    assert set(found.kernels) == {"renamed"} and set(found.imports) == {"real_symbol"}
    assert not found.device_functions  # `mangled` has no stable symbol
    kinds = [p.type for p in found.kernels["renamed"].params]
    assert kinds[0] == Scalar(dtype("u32")) and kinds[1] == F32 and kinds[2] == Opaque(16, 16)
    assert kinds[3] == Slice(dtype("u8"))  # &str: a byte slice
    assert kinds[4] == Scalar(dtype("u32"))
    assert found.imports["real_symbol"].returns == Scalar(dtype("u32"))


def test_reader_errors_name_file_and_line():
    from ptxbridge.rust.signatures import read_signatures
    from ptxbridge.rust.source import parse_source

    with pytest.raises(FormatError, match=r"x.rs:line 2: unterminated block comment"):
        parse_source("fn a() {}\n/* /* */\n", "x.rs")
    with pytest.raises(FormatError, match=r"x.rs:line 1: mismatched '\]'"):
        parse_source("fn a() { ] }", "x.rs")
    source = TRICKY + '#[unsafe(no_mangle)] pub extern "C" fn bad(s: Shape) {}\n'
    failed = read_signatures([parse_source(source, "x.rs")], Convention.C).failed["bad"]
    assert isinstance(failed, FormatError)
    assert re.match(r"x.rs:line \d+: bad: parameter 's': enum Shape needs #\[repr\(C\)\] or an", str(failed))


def test_two_rust_artifacts_link_and_run_together(sysroot):
    # Every rustc crate defines its panic handler under one fixed name; no Rust artifact may export
    # it (fat LTO internalizes it, the frontend localizes it in PTX built elsewhere), so several
    # Rust artifacts link into one image.
    import numpy as np

    import ptxbridge

    root = Path(__file__).parents[1] / "examples" / "kernels"
    scale, affine = prust.compile(root / "scale.rs"), prust.compile(root / "affine.rs")
    for artifact in (scale, affine):
        handler = [f for f in read_ptx(artifact.code).functions if f.name.endswith("rust_begin_unwind")]
        assert all(f.linkage == "" for f in handler)
    module = ptxbridge.link([scale, affine]).load("cpu")
    x, y = np.arange(8, dtype=np.float32), np.ones(8, np.float32)
    module.saxpy(2.0, x, y, 8, grid=1, block=8)
    np.testing.assert_array_equal(y, 2 * np.arange(8, dtype=np.float32) + 1)
    assert {"saxpy", "affine"} <= set(module.image.kernels)
