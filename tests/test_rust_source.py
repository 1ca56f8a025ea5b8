"""The Rust source reader on files as cuda-oxide users write them (tests/rust/oxide/constructs.rs).

Only ``#[kernel]`` / ``#[device]`` / ``extern "C"`` items need signatures; host code with
``dyn``, ``impl Trait``, async, closures, macros and raw strings is skipped, and a kernel
whose parameter has no fixed ABI fails alone, naming itself, the parameter and the line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ptxbridge.abi.dtypes import dtype
from ptxbridge.abi.errors import FormatError
from ptxbridge.abi.kinds import DisjointSlice, Opaque, Pointer, Scalar, Slice, Struct, Tuple
from ptxbridge.abi.signature import Convention
from ptxbridge.rust.signatures import constant_symbol, read_signatures
from ptxbridge.rust.source import parse_source, read_crate
from ptxbridge.rust.syntax import TPath
from ptxbridge.rust.types import const_int

SOURCE = Path(__file__).parent / "rust" / "oxide" / "constructs.rs"
F32, U32 = Scalar(dtype("f32")), Scalar(dtype("u32"))


@pytest.fixture(scope="module")
def found():
    return read_signatures(read_crate(SOURCE)[0], Convention.OXIDE)


def params(found, kernel):
    return [p.type for p in found.kernels[kernel].params]


def test_host_code_is_skipped_and_every_kernel_is_found(found):
    typed = {"nested", "uniform", "structs", "atomics", "shapes", "aligned"}
    assert set(found.kernels) == typed
    assert set(found.failed) == {"optional"} and set(found.generic) == {"with_closure"}


def test_nested_arrays_and_const_lengths(found):
    pair = Tuple((F32, F32))
    rows, grid = params(found, "nested")
    assert rows == Slice(dtype("f32"), False, pair)
    assert grid.element == Tuple((pair,) * 8) and grid.dtype == dtype("f32")  # ROWS = LANES * 2 = 8


def test_uniform_is_transparent(found):
    assert params(found, "uniform") == [U32, F32, DisjointSlice(dtype("f32"))]


def test_slices_of_structs_and_2d_spaces(found):
    points, quads, tiles = params(found, "structs")
    assert isinstance(points.element, Struct) and points.dtype == dtype("f32")
    assert [f.name for f in points.element.fields] == ["x", "y", "z"]
    assert quads.element.name == "Quad" and tiles.rows_2d and tiles.element == points.element


def test_atomics_and_niche_options_are_their_integers(found):
    assert params(found, "atomics") == [Slice(dtype("u64")), Slice(dtype("u32")), Slice(dtype("u32"))]


def test_enum_with_fields_and_primitive_repr_is_a_union_of_tagged_structs(found):
    shapes, _ = params(found, "shapes")
    assert shapes.element == Opaque(12, 4) and shapes.dtype == dtype("u8")  # Rect: tag, w, h


def test_repr_align_keeps_natural_alignment_as_cuda_oxide_lowers_it(found):
    _, quad, padded, _ = params(found, "aligned")
    assert isinstance(quad, Struct)  # align(16) adds no padding here: the LLVM struct, align 4
    assert padded == Opaque(16, 4)  # rustc's size 16, the field's alignment 4
    flat = [(lp.param.ptx_type, lp.offset, lp.param.size) for lp in found.kernels["aligned"].layout.params]
    assert flat[:3] == [("u8", 0, 1), ("b8", 4, 16), ("b8", 20, 16)]  # llc: .param .align 4 .b8 [16]
    plain = read_signatures(read_crate(SOURCE)[0], Convention.C)  # rustc's own ABI keeps align(16)
    assert plain.mapper.kind(TPath(("Padded",)), {}) == Opaque(16, 16)


def test_a_kernel_without_fixed_abi_fails_alone_naming_parameter_and_line(found):
    error = found.failed["optional"]
    assert isinstance(error, FormatError)
    assert str(error).startswith(f"{SOURCE}:line 79: optional: parameter 'maybe': Option<bool> has no layout")


def test_device_functions_take_struct_fields_and_imports_keep_pointers(found):
    dot = found.device_functions["dot"]
    assert [p.name for p in dot.params] == ["a.x", "a.y", "a.z", "b.x", "b.y", "b.z"]
    assert dot.returns == F32 and dot.kind == "device"
    assert [p.type for p in found.imports["cub_sum"].params] == [F32, Pointer(Scalar(dtype("u8")), True)]


def test_constant_statics_by_their_real_symbols(found):
    table, scale = found.constants["TABLE"], found.constants["SCALE"]
    # inside #[cuda_module] mod kernels: module, line, 0-based column and name (cuda-macros)
    assert table.symbol == "cuda_oxide_const_246e25db_kernels_L56C11_TABLE"
    assert table.type == Tuple((F32,) * 4)
    assert scale.symbol == "my_scale" and scale.type == F32


def test_constant_symbol_outside_a_cuda_module():
    unit = parse_source("#[constant]\nstatic K: ConstantMemory<u32> = ConstantMemory::UNINIT;\n", "k.rs")
    assert constant_symbol(unit.statics[0]) == "cuda_oxide_const_246e25db_K"


@pytest.mark.parametrize(("text", "value"), [("256", 256), ("0x10u32", 16), ("4 * N + 1", 33),
                                              ("{ 1 << 3 }", 8), ("crate::N as usize / 2", 4)])
def test_constant_expressions(text, value):
    assert const_int(text, {"N": "8"}) == value


def test_broken_items_do_not_fail_the_file():
    text = ("#[kernel] pub fn k(x: u32, y: [u8; ]) {}\nmacro_rules! m { () => {} }\n"
            "#[kernel] pub fn ok(x: u32) {}\n")
    found = read_signatures([parse_source(text, "b.rs")], Convention.OXIDE)
    assert set(found.kernels) == {"ok"} and "k: parameter 'y'" in str(found.failed["k"])


def test_only_a_file_that_is_not_rust_fails_whole():
    with pytest.raises(FormatError, match=r"b.rs:line 1: mismatched '\)'"):
        parse_source("fn a() { ) }", "b.rs")
