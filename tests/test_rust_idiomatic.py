"""Rust kernels as Rust programmers write them (tests/rust/idiomatic.rs): slices that take tensors,
indexing, iterators, checked arithmetic, Option/Result, and no panic handler of their own.

``core`` is linked into the kernel's module (rustc's fat LTO), so the PTX and the LTO-IR import
nothing of it; a panic is recorded by ptxbridge's handler and raised after the launch as
:class:`KernelRaisedError` naming the message, the ``.rs`` line and the thread, and the module
keeps working.  Everything runs on the CPU loader from the real compilers' output.
"""

from __future__ import annotations

import re

import _rust_fixtures
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ptxbridge
import ptxbridge.rust as prust
from ptxbridge import CodeKind, Image
from ptxbridge.abi import panic_record
from ptxbridge.abi.cubin import read_cubin
from ptxbridge.abi.errors import ArgumentError, KernelRaisedError, LinkError
from ptxbridge.abi.ptx import read_ptx

toolchain, sysroot = _rust_fixtures.toolchain, _rust_fixtures.sysroot  # session fixtures
pytestmark = pytest.mark.usefixtures("sysroot")

SOURCE = _rust_fixtures.RUST_DIR / "idiomatic.rs"
ARCH = "sm_90"


def line_of(text: str) -> int:
    """The 1-based line of ``text`` in idiomatic.rs (what a panic's location names)."""
    return next(n for n, line in enumerate(SOURCE.read_text().splitlines(), 1) if text in line)


@pytest.fixture(scope="module", params=["ptx", "ltoir"])
def module(request):
    """The crate on the CPU loader, through PTX and through LTO-IR (libNVVM's LLVM 7 dialect)."""
    art = prust.compile(SOURCE, arch=ARCH, output=request.param, progress=False)
    with ptxbridge.link([art], arch=ARCH).load("cpu") as loaded:
        yield loaded


@pytest.mark.parametrize("output", ["ptx", "ltoir"])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_100"])
def test_core_is_linked_in_and_nothing_is_imported(output, arch):
    art = prust.compile(SOURCE, arch=arch, output=output, progress=False)
    assert art.kind is (CodeKind.PTX if output == "ptx" else CodeKind.LTOIR)
    assert art.imports == {}
    image = ptxbridge.link([art], arch=arch)  # nvJitLink resolves every call inside the module
    ptx = prust.compile(SOURCE, arch=arch, progress=False).code
    assert not [f.name for f in read_ptx(ptx).functions if f.linkage == "extern"]
    assert b"core9panicking" in ptx  # core's panic entry points are there, defined
    assert set(image.kernels) >= {"axpy", "row_sums", "dot_argmax", "int_ops", "first_even"}


def test_slices_take_numpy_and_torch_tensors(module):
    torch = pytest.importorskip("torch")
    x, y = np.arange(40, dtype=np.float32), np.linspace(-1, 1, 40, dtype=np.float32)
    want = 2.5 * x + y
    module.axpy(2.5, x, y, grid=2, block=32)
    np.testing.assert_array_equal(y, want)
    tx, ty = torch.arange(40, dtype=torch.float32), torch.ones(40)
    module.axpy(-1.0, tx, ty, grid=2, block=32)
    assert torch.equal(ty, 1 - torch.arange(40, dtype=torch.float32))


def test_iterators_and_arithmetic_agree_with_numpy(module):
    m = np.arange(24, dtype=np.float32).reshape(6, 4)
    sums = np.zeros(6, np.float32)
    module.row_sums(m.ravel(), 4, sums, grid=1, block=8)  # two threads past the rows write nothing
    np.testing.assert_array_equal(sums, m.sum(axis=1))

    x = np.array([0.5, -3.0, 7.25, 2.0], np.float32)
    y = np.array([4.0, 1.0, -2.0, 8.0], np.float32)
    dot, at = np.zeros(1, np.float32), np.zeros(1, np.uint32)
    module.dot_argmax(x, y, dot, at, grid=1, block=4)
    assert dot[0] == np.float32(np.dot(x.astype(np.float64), y)) and at[0] == np.argmax(x)

    v = np.array([7, 0, 300, 4000, 2**31 + 9], np.uint32)
    out = np.zeros(6 * v.size, np.uint32)
    module.int_ops(v, 3, out, grid=1, block=8)
    wide = v.astype(np.int64)
    expected = np.stack([wide % 3, wide // 3, np.where(wide << 20 < 2**32, wide << 20, 2**32 - 1),
                         (wide - 5) % 2**32, np.minimum((wide % 256) + 200, 255),
                         np.clip(np.maximum(np.minimum(wide, 100), 3), 4, 50)], axis=1)
    np.testing.assert_array_equal(out.reshape(-1, 6), expected)

    f = np.array([2.0, -0.3, 0.6, -4.0], np.float32)
    digits = np.frombuffer(b"3x79", np.uint8).copy()
    got = np.zeros(4, np.float32)
    module.clamp_digits(f, digits, got, grid=1, block=4)
    scale = np.array([3, -1, 7, 9], np.float32)
    np.testing.assert_array_equal(got, np.minimum(np.maximum(np.clip(f, -1, 1), -0.5), 0.75) * scale)


def test_slice_equality_links_memcmp(module):
    rows = np.array([[1, 2, 3], [1, 2, 3], [1, 2, 4], [0, 2, 3]], np.uint8)
    out = np.full(4, 7, np.uint32)
    module.same_as_first(rows.ravel(), 3, out, grid=1, block=4)
    assert out.tolist() == [int((row == rows[0]).all()) for row in rows]


def raised(call) -> KernelRaisedError:
    with pytest.raises(KernelRaisedError) as caught:
        call()
    return caught.value


def test_an_out_of_bounds_index_raises_and_the_module_works_after(module):
    x, y = np.arange(8, dtype=np.float32), np.ones(12, np.float32)
    error = raised(lambda: module.axpy(2.0, x, y, grid=1, block=16))
    column = SOURCE.read_text().splitlines()[line_of("y[i] = a * x[i]") - 1].index("x[i]") + 1
    assert str(error) == (f"axpy: thread (8, 0, 0) of block (0, 0, 0) panicked at {SOURCE}:"
                          f"{line_of('y[i] = a * x[i]')}:{column}: index out of bounds: the len is 8 but "
                          f"the index is 8")
    assert error.tid == (8, 0, 0) and error.ctaid == (0, 0, 0)
    assert error.panic.message.startswith("index out of bounds") and error.panic.file == str(SOURCE)
    # the other threads ran to the end: y[:8] updated; threads 9..11 panicked too but only one reports
    np.testing.assert_array_equal(y[:8], 2 * x + 1)
    y = np.zeros(8, np.float32)
    module.axpy(1.0, x, y, grid=1, block=8)  # the record was cleared: this launch reports nothing
    np.testing.assert_array_equal(y, x)


def test_division_by_zero_and_expect_raise_naming_message_and_line(module):
    v = np.arange(4, dtype=np.uint32)
    error = raised(lambda: module.int_ops(v, 0, np.zeros(24, np.uint32), grid=1, block=4))
    assert re.fullmatch(rf"int_ops: thread \(\d, 0, 0\) of block \(0, 0, 0\) panicked at .*idiomatic\.rs:"
                        rf"{line_of('row[0] = v % d')}:\d+: attempt to calculate the remainder with a "
                        rf"divisor of zero", str(error))
    rows = np.array([[1, 3, 4], [5, 7, 9]], np.uint32)
    error = raised(lambda: module.first_even(rows.ravel(), 3, np.zeros(2, np.uint32), grid=1, block=2))
    assert error.tid == (1, 0, 0) and error.panic.line == line_of('expect("every row has an even value")')
    assert str(error).endswith(": every row has an even value")
    out = np.zeros(2, np.uint32)
    module.first_even(np.array([1, 2, 3, 6, 8, 5], np.uint32), 3, out, grid=1, block=2)
    assert out.tolist() == [2, 6]


def _registers(image) -> dict[str, int | None]:
    """Registers per kernel, as the image's cubin records them."""
    return {k.name: k.registers for k in read_cubin(image.cubin).kernels}


@pytest.mark.parametrize("output", ["ptx", "ltoir"])
def test_panic_messages_location_keeps_where_and_who_and_the_registers_of_the_unchecked_twin(output):
    """core::fmt's formatters, called through pointers, size the registers of every kernel that can
    panic; the handler that never reads the message links none of them."""
    full = ptxbridge.link([prust.compile(SOURCE, arch=ARCH, output=output, progress=False)], arch=ARCH,
                          options=ptxbridge.LinkOptions(max_registers=0))
    art = prust.compile(SOURCE, arch=ARCH, output=output, progress=False, panic_messages="location")
    image = ptxbridge.link([art], arch=ARCH)
    assert not any(f.name.endswith("Display3fmt") for f in read_ptx(prust.compile(
        SOURCE, arch=ARCH, progress=False, panic_messages="location").code).functions)
    lean, fat = _registers(image), _registers(full)
    assert lean["axpy"] <= 32 < fat["axpy"]  # 32: every SM's 2048 threads resident in 256-thread blocks
    with image.load("cpu") as loaded:
        x, y = np.arange(8, dtype=np.float32), np.ones(12, np.float32)
        error = raised(lambda: loaded.axpy(2.0, x, y, grid=1, block=16))
        assert str(error).startswith(f"axpy: thread (8, 0, 0) of block (0, 0, 0) panicked at {SOURCE}:"
                                     f"{line_of('y[i] = a * x[i]')}:")
        assert error.panic.message == panic_record.NOT_KEPT_MESSAGE
        y = np.zeros(8, np.float32)
        loaded.axpy(1.0, x, y, grid=1, block=8)
        np.testing.assert_array_equal(y, x)


@pytest.mark.parametrize("output", ["ptx", "ltoir"])
def test_the_link_caps_a_full_message_crate_at_the_registers_it_needs_without_the_message(output):
    def registers(*inputs, **options) -> dict[str, int | None]:
        return _registers(ptxbridge.link(list(inputs), arch=ARCH, options=ptxbridge.LinkOptions(**options)))

    art = prust.compile(SOURCE, arch=ARCH, output=output, progress=False)
    lean = prust.compile(SOURCE, arch=ARCH, output=output, progress=False, panic_messages="location")
    assert art.register_cap == -(-max(registers(lean).values()) // 8) * 8
    assert lean.register_cap is None  # nothing of core::fmt to keep off the hot path
    capped, uncapped = registers(art), registers(art, max_registers=0)
    assert capped["axpy"] <= art.register_cap < uncapped["axpy"]
    assert capped["axpy_unchecked"] == uncapped["axpy_unchecked"]
    assert art.register_cap < registers(art, max_registers=64)["axpy"] <= 64  # the caller's cap wins
    # a kernel of another frontend, whose needs are unknown, leaves the image uncapped
    cpp = pytest.importorskip("ptxbridge.nvrtc").compile(
        'extern "C" __global__ void one(float* y) { y[threadIdx.x] = 1.0f; }', arch=ARCH)
    assert registers(art, cpp)["axpy"] > art.register_cap


def test_panic_messages_takes_full_or_location():
    with pytest.raises(ArgumentError, match=r"panic_messages must be one of \('full', 'location'\) "
                                            r"\(got 'none'\)"):
        prust.compile(SOURCE, arch=ARCH, progress=False, panic_messages="none")


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=panic_record.SIZE + 8), state=st.sampled_from([0, 1, 2, 3]),
       message_len=st.sampled_from([0, 5, 256, 300, panic_record.NOT_KEPT, 2**32 - 2]),
       file_len=st.integers(0, 2**32 - 1))
def test_any_record_bytes_read_as_a_record_or_none(data, state, message_len, file_len):
    """The host reads whatever the device left: any bytes give a record or None, never an exception,
    and a file address outside the image's data reads no file."""
    record = bytearray(data.ljust(panic_record.SIZE, b"\0"))
    record[:4] = state.to_bytes(4, "little")
    record[36:44] = message_len.to_bytes(4, "little") + file_len.to_bytes(4, "little")
    found = panic_record.read_record(bytes(record), lambda address, length: None)
    assert (found is None) == (state != panic_record.WRITTEN)
    if found is not None:
        assert len(found.message) <= panic_record.MESSAGE + len("...") or message_len == panic_record.NOT_KEPT
        assert len(found.file) <= panic_record.FILE
        assert found.file == "" or message_len != panic_record.NOT_KEPT


def test_a_record_without_its_message_whose_file_is_not_in_the_image_reads_no_file():
    record = bytearray(panic_record.SIZE)
    record[:4] = panic_record.WRITTEN.to_bytes(4, "little")
    record[36:44] = panic_record.NOT_KEPT.to_bytes(4, "little") + (9).to_bytes(4, "little")
    found = panic_record.read_record(bytes(record))
    assert found is not None and found.location == "an unknown location"
    assert found.message == panic_record.NOT_KEPT_MESSAGE


def test_a_panic_in_a_later_block_names_it(module):
    x, y = np.arange(70, dtype=np.float32), np.zeros(96, np.float32)
    error = raised(lambda: module.axpy(1.0, x, y, grid=3, block=32))
    assert error.ctaid == (2, 0, 0) and 70 <= 64 + error.tid[0] < 96
    np.testing.assert_array_equal(y[:70], x)


def test_slice_length_comes_from_the_tensor_and_a_dict_length_is_checked(module):
    x, y = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    module.axpy(1.0, {"ptr": x, "len": 8}, {"ptr": y, "len": 4}, grid=1, block=8)  # a prefix of y
    np.testing.assert_array_equal(y, np.r_[x[:4], np.zeros(4)])
    with pytest.raises(ArgumentError, match=r"^axpy: argument 'x' \(&\[f32\]\) 'len' must be an int from 0 "
                                            r"to the tensor's 8 elements \(got 9\)$"):
        module.axpy(1.0, {"ptr": x, "len": 9}, y, grid=1, block=8)
    with pytest.raises(ArgumentError, match=r"^axpy: argument 'y' \(&mut \[f32\]\) .*float64 tensor"):
        module.axpy(1.0, x, np.zeros(8), grid=1, block=8)
    with pytest.raises(ArgumentError, match=r"argument 'y' \(&mut \[f32\]\) overlaps argument 'x'"):
        module.axpy(1.0, x, x, grid=1, block=8)


def test_a_saved_image_still_reports_panics(tmp_path):
    art = prust.compile(SOURCE, arch=ARCH, progress=False)
    ptxbridge.link([art], arch=ARCH).save(tmp_path / "k.ptxb")
    with Image.open(tmp_path / "k.ptxb").load("cpu") as loaded:
        assert panic_record.SYMBOL in loaded.globals.names
        error = raised(lambda: loaded.axpy(1.0, np.zeros(2, np.float32), np.zeros(4, np.float32), grid=1,
                                           block=4))
        assert "index out of bounds: the len is 2 but the index is 2" in str(error)


def test_two_crates_share_one_record_and_each_reports_its_own_panic():
    renamed = SOURCE.read_text()
    for kernel in prust.compile(SOURCE, arch=ARCH, progress=False).kernels:
        renamed = renamed.replace(f"fn {kernel}(", f"fn {kernel}2(")
    other = prust.compile(renamed, arch=ARCH, progress=False)
    with ptxbridge.link([prust.compile(SOURCE, arch=ARCH, progress=False), other],
                        arch=ARCH).load("cpu") as both:
        for kernel in ("axpy", "axpy2"):
            error = raised(lambda k=kernel: both[k](1.0, np.zeros(1, np.float32), np.zeros(2, np.float32),
                                                    grid=1, block=2))
            assert str(error).startswith(f"{kernel}: thread (1, 0, 0)")


def test_a_crate_with_its_own_panic_handler_keeps_it():
    own = ("#![no_std]\n#![feature(abi_ptx)]\n#[panic_handler]\n"
           "fn p(_: &core::panic::PanicInfo) -> ! { loop {} }\n"
           "#[unsafe(no_mangle)]\npub extern \"ptx-kernel\" fn first(x: &mut [u32]) { x[0] = 1; }\n")
    art = prust.compile(own, arch=ARCH, progress=False)
    assert panic_record.SYMBOL not in {g.name for g in read_ptx(art.code).globals}
    assert re.search(rb"(\$L__BB\d+_\d+):\s+bra\.uni\s+\1;", art.code)  # its `loop {}`, where x is empty


def test_source_text_panics_name_kernel_rs():
    text = ("#![no_std]\n#![feature(abi_ptx)]\n#[unsafe(no_mangle)]\n"
            "pub extern \"ptx-kernel\" fn at(x: &[u32], i: u32, out: &mut [u32]) {\n"
            "    out[0] = x[i as usize];\n}\n")
    with ptxbridge.link([prust.compile(text, arch=ARCH, progress=False)], arch=ARCH).load("cpu") as loaded:
        error = raised(lambda: loaded.at(np.arange(3, dtype=np.uint32), 5, np.zeros(1, np.uint32),
                                         grid=1, block=1))
        column = text.splitlines()[4].index("x[i as usize]") + 1
        assert error.panic.location == f"kernel.rs:5:{column}"
        assert error.panic.message.endswith("the index is 5")


def test_a_symbol_outside_the_module_is_an_import_named_before_nvjitlink():
    # an `extern "Rust"` item is no `extern "C"` import the source reader types: the PTX's declaration
    # is what lists it, so the link names it instead of nvJitLink failing inside
    text = ("#![no_std]\n#![feature(abi_ptx)]\nunsafe extern \"Rust\" { safe fn helper(v: f32) -> f32; }\n"
            "#[unsafe(no_mangle)]\npub extern \"ptx-kernel\" fn k(x: &mut [f32]) { x[0] = helper(x[0]); }\n")
    art = prust.compile(text, arch=ARCH, progress=False)
    assert str(art.imports["helper"]) == ("#[convention(c)] device fn helper(p0: opaque<4, align 4>) -> "
                                          "opaque<4, align 4>")
    with pytest.raises(LinkError, match=r"device function 'helper': kernel imports it .* no input exports"):
        ptxbridge.link([art], arch=ARCH)


def test_a_torch_op_over_slices_runs_under_torch_compile_and_reports_panics():
    torch = pytest.importorskip("torch")
    import ptxbridge.torch as pt

    image = ptxbridge.link([prust.compile(SOURCE, arch=ARCH, progress=False)], arch=ARCH)
    axpy = pt.op(image, "axpy", name="idiomatic::axpy", grid=lambda y: -(-y.shape[0] // 32), block=32)
    assert str(axpy._schema) == "idiomatic::axpy(float a, Tensor x, Tensor(a2!) y) -> ()"

    def f(x, y):
        axpy(3.0, x, y)
        return y * 2

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    x, y = torch.arange(50, dtype=torch.float32), torch.ones(50)
    assert torch.equal(compiled(x, y.clone()), f(x, y.clone()))
    assert torch.equal(compiled(x, y.clone()), (3 * x + 1) * 2)
    with pytest.raises(KernelRaisedError, match=r"axpy: thread .* panicked at .*idiomatic\.rs:\d+:\d+: index "
                                                r"out of bounds: the len is 10 but the index is 10"):
        compiled(x[:10].clone(), y.clone())
    assert torch.equal(compiled(x, y.clone()), (3 * x + 1) * 2)  # and it works after


def test_a_jax_op_over_slices_runs_under_jit_and_reports_panics():
    jax = pytest.importorskip("jax")
    pytest.importorskip("ptxbridge.jax._xla_ffi", reason="the XLA FFI handler is not built (no jaxlib)")
    import ptxbridge.jax as pj

    image = ptxbridge.link([prust.compile(SOURCE, arch=ARCH, progress=False)], arch=ARCH)
    axpy = pj.op(image, "axpy", grid=lambda y: -(-y.shape[0] // 32), block=32)
    x, y = np.arange(50, dtype=np.float32), np.ones(50, np.float32)
    out = jax.jit(lambda x, y: axpy(3.0, x, y) * 2)(x, y)
    np.testing.assert_array_equal(out, (3 * x + 1) * 2)
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"KernelRaisedError: axpy: thread .* panicked at "
                                                         r".*idiomatic\.rs:\d+:\d+: index out of bounds"):
        jax.block_until_ready(jax.jit(lambda x, y: axpy(3.0, x, y))(x[:10], y))
    np.testing.assert_array_equal(jax.jit(lambda x, y: axpy(1.0, x, y))(x, y), x + 1)


def test_ptx_built_without_core_names_the_missing_core_function(toolchain, sysroot, tmp_path):
    # rustc's PTX as `rustc --emit asm` writes it without LTO: indexing calls core, which is not there
    from ptxbridge.rust import toolchain as rust_toolchain

    source = tmp_path / "plain.rs"
    source.write_text("#![no_std]\n#![feature(abi_ptx)]\n#[panic_handler]\n"
                      "fn p(_: &core::panic::PanicInfo) -> ! { loop {} }\n#[unsafe(no_mangle)]\n"
                      "pub extern \"ptx-kernel\" fn at(x: &[u32], i: u32, out: &mut [u32]) {\n"
                      "    out[0] = x[i as usize];\n}\n")
    ptx = tmp_path / "plain.ptx"
    plain = ("--target", rust_toolchain.TARGET, "--crate-type", "cdylib", "-C", f"target-cpu={ARCH}",
             "-C", "opt-level=3", "-C", "panic=abort", "--emit", "asm")
    rust_toolchain.run_rustc(toolchain, ["--sysroot", str(sysroot), *plain, "-o", str(ptx), str(source)],
                             what="plain rustc")
    art = prust.from_ptx(ptx, source)
    assert any(name.endswith("panic_bounds_check") for name in art.imports)
    with pytest.raises(LinkError, match=r"device function '_RNv\w+panic_bounds_check' \(the Rust function "
                                        r"core::panicking::panic_bounds_check; rustc's PTX calls into core, "
                                        r"which no input holds: ptxbridge.rust.compile links core into the "
                                        r"kernel's module\)"):
        ptxbridge.link([art], arch=ARCH)


def test_only_kernels_that_can_panic_are_checked_after_their_launch():
    from ptxbridge import nvrtc
    from ptxbridge.launch.panics import recording_kernels

    cpp = nvrtc.compile('extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }',
                        arch=ARCH, output="ptx")
    image = ptxbridge.link([prust.compile(SOURCE, arch=ARCH, progress=False), cpp], arch=ARCH)
    writers = recording_kernels(image.ptx)
    assert writers == set(image.kernels) - {"axpy_unchecked", "twice"}  # get_unchecked, and C++: no panic
    assert "same_as_first" in writers  # its subslices are bounds-checked
    with image.load("cpu") as module:
        x = np.ones(4, np.float32)
        module.twice(x, grid=1, block=4)
        module.axpy_unchecked(1.0, x, x.copy(), grid=1, block=4)
        error = raised(lambda: module.axpy(1.0, x[:2], x.copy(), grid=1, block=4))
        assert "the len is 2 but the index is 2" in str(error)
        assert x.tolist() == [2.0] * 4


def test_deferred_panics_are_raised_by_synchronize_and_launches_do_not_wait():
    image = ptxbridge.link([prust.compile(SOURCE, arch=ARCH, progress=False)], arch=ARCH)
    with pytest.raises(ArgumentError, match=r"panics must be one of \('raise', 'defer'\) \(got 'later'\)"):
        image.load("cpu", panics="later")
    with image.load("cpu", panics="defer") as module:
        x, y = np.arange(8, dtype=np.float32), np.ones(12, np.float32)
        module.axpy(2.0, x, y, grid=1, block=16)  # panics, but the call itself does not wait to see
        np.testing.assert_array_equal(y[:8], 2 * x + 1)
        with pytest.raises(KernelRaisedError, match=r"thread \(8, 0, 0\) of block \(0, 0, 0\) panicked "
                                                    r"at .*index out of bounds: the len is 8 but the index"):
            module.synchronize()
        module.synchronize()  # the record was cleared
        module.check_panics()
