"""The signature text syntax: exact round trips, the documented examples, and precise errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from signature_strategies import param_types, signatures

from ptxbridge.abi.dtypes import DTYPES
from ptxbridge.abi.errors import SignatureSyntaxError
from ptxbridge.abi.kind_entries import KINDS
from ptxbridge.abi.kinds import (
    Constant,
    DisjointSlice,
    NumbaArray,
    Opaque,
    Pointer,
    Scalar,
    Slice,
    Struct,
    StructField,
    TileArray,
    TileList,
    TileTensor,
    Tuple,
)
from ptxbridge.abi.signature import Convention, LaunchMeta, Param, Signature
from ptxbridge.abi.syntax import format_type, parse_signature, parse_signatures, parse_type

DOC = Path(__file__).resolve().parents[1] / "docs" / "signature-syntax.md"
f32, u8 = Scalar(DTYPES["f32"]), Scalar(DTYPES["u8"])


@settings(max_examples=300, deadline=None)
@given(signatures)
def test_every_signature_round_trips(sig: Signature) -> None:
    text = str(sig)
    again = Signature.parse(text)
    assert again == sig
    assert str(again) == text  # also keeps what == cannot see: const 1 vs 1.0 vs true, -0.0
    assert "\n" not in text


@settings(max_examples=100, deadline=None)
@given(st.lists(signatures, max_size=4, unique_by=lambda s: s.name), st.sampled_from(["\n", ";", " ; \n"]))
def test_several_signatures_in_one_text(sigs: list[Signature], separator: str) -> None:
    assert parse_signatures(separator.join(map(str, sigs))) == sigs


@settings(max_examples=200, deadline=None)
@given(param_types)
def test_every_type_round_trips(t) -> None:
    assert parse_type(format_type(t)) == t


def test_saxpy_from_the_issue() -> None:
    sig = Signature.parse("#[convention(oxide)] #[reqntid(256)] "
                          "kernel saxpy(a: f32, x: &[f32], y: &mut [f32])")
    assert sig == Signature("saxpy", (Param("a", f32), Param("x", Slice(DTYPES["f32"])),
                                      Param("y", Slice(DTYPES["f32"], mutable=True))),
                            Convention.OXIDE, LaunchMeta(reqntid=(256, 1, 1)))
    # oxide: f32, then (u64 pointer, u64 length) per slice
    assert [(p.param.name, p.offset, p.param.size) for p in sig.layout.params] == [
        ("a", 0, 4), ("x", 8, 8), ("x.len", 16, 8), ("y", 24, 8), ("y.len", 32, 8)]


def test_every_kind_reads_as_documented() -> None:
    sig = parse_signature("""
        // one parameter of each kind, spread over lines
        struct P { x: f32, y: u8 }
        #[convention(cutile)] #[shared(dynamic = 64)] #[cluster(2, 2)]
        kernel all(
            s: f32, p: *const void, q: *mut P, sl: &mut [bf16], d: DisjointSlice2d<f16>,
            a: Array<c64, 3, F>, t: TileArray<u16, 2>{alias: 0x5, base_align: 8},
            l: TileList<TileArray<f32, 1, i64>>{elements_alias}, ten: Partition<i8, 4>,
            o: opaque<24, align 8>, tu: (f32, (u8,), ()), c: const 0x10, n: const -2.5e-3,
            b: const false, "quoted \\"name\\"": struct "a b" {},
        )
    """)
    p_struct = Struct("P", (StructField("x", f32), StructField("y", u8)))
    assert [p.type for p in sig.params] == [
        f32, Pointer(None, mutable=False), Pointer(p_struct), Slice(DTYPES["bf16"], True),
        DisjointSlice(DTYPES["f16"], rows_2d=True), NumbaArray(DTYPES["c64"], 3, "F"),
        TileArray(DTYPES["u16"], 2, "i32", alias_groups=5, base_align=8),
        TileList(TileArray(DTYPES["f32"], 1, "i64"), elements_may_alias=True),
        TileTensor(DTYPES["i8"], 4, partition=True), Opaque(24, 8),
        Tuple((f32, Tuple((u8,)), Tuple(()))), Constant(16), Constant(-2.5e-3), Constant(False),
        Struct("a b", ()),
    ]
    assert sig.params[-1].name == 'quoted "name"'
    assert sig.launch == LaunchMeta(cluster=(2, 2, 1), dynamic_shared=64)
    assert isinstance(sig.params[11].type.value, int) and isinstance(sig.params[12].type.value, float)


def test_canonical_text() -> None:
    sig = Signature("k", (Param("x", TileArray(DTYPES["f32"], 2, "i64", static_shape=(None, 128),
                                                stride_lower_bound=(0, -1), may_alias_internally=True)),
                          Param("c", Constant(1.0)), Param("s", Struct("S", (StructField("v", f32),)))),
                    launch=LaunchMeta(maxntid=(128, 1, 1), minnctapersm=1, static_shared=16))
    assert str(sig) == ("#[convention(c)] #[maxntid(128)] #[minnctapersm(1)] #[shared(static = 16)] "
                        "kernel k(x: TileArray<f32, 2, i64>{static_shape: [_, 128], stride_lb: [0, -1], "
                        "internal_alias}, c: const 1.0, s: struct S { v: f32 })")


def _doc_examples() -> list[str]:
    return re.findall(r"```sig\n(.*?)```", DOC.read_text(), re.S)


def test_docs_cover_every_kind() -> None:
    kinds = {type(p.type) for text in _doc_examples() for sig in parse_signatures(text) for p in sig.params}
    assert kinds >= {entry.cls for entry in KINDS}


@pytest.mark.parametrize("text", _doc_examples())
def test_documented_examples_parse_and_round_trip(text: str) -> None:
    found = parse_signatures(text)
    assert found
    for sig in found:
        assert Signature.parse(str(sig)) == sig


@pytest.mark.parametrize("text, where, message", [
    ("kernel k(a: {)", "1:13", "expected a type after ':' (got '{')"),
    ("kernel k(a: f32", "1:16", "expected ',' or ')' after 'f32' (got end of text)"),
    ("kernel k(a: f32)\nkernel j(b: &[f32) ", "2:18", "expected ']' after 'f32' (got ')')"),
    ("kernel k(a: (f32))", "1:13", "a one-item tuple is written '(T,)'"),
    ("#[foo(1)] kernel k()", "1:3", "unknown attribute 'foo'"),
    ("#[convention(rust)] kernel k()", "1:3", "unknown convention 'rust' (known: c, oxide"),
    ("#[reqntid(1)] #[reqntid(2)] kernel k()", "1:17", "attribute 'reqntid' given twice"),
    ("#[reqntid(1, 2, 3, 4)] kernel k()", "1:3", "reqntid takes 1 to 3 dimensions (got 4)"),
    ("#[shared(stat = 1)] kernel k()", "1:10", "expected 'static = N' or 'dynamic = N'"),
    ("kernel k(a: TileArray<f32, 2>{shape_div: [1]})", "1:13", "needs one entry per axis (2) (got 1)"),
    ("kernel k(a: TileArray<f32, 1>{base_align: 4, base_align: 8})", "1:46", "'base_align' given twice"),
    ("kernel k(a: TileArray<f32, 1>{speed: 3})", "1:31", "expected a promise (shape_div"),
    ("kernel k(a: TileArray<f32, 1, i16>)", "1:31", "expected an index width (i32, u32, i64)"),
    ("kernel k(a: TileList<f32>)", "1:13", "TileList elements must be TileArray (got f32)"),
    ("kernel k(a: Array<f32, 1, K>)", "1:27", "expected the layout (C, F or A)"),
    ("kernel k(a: Array<f32, -1, C>)", "1:13", "NumbaArray.ndim must be 0 to 64 (got -1)"),
    ("kernel k(a: opaque<8, align 3>)", "1:13", "power-of-two align"),
    ("kernel k(a: Array<f32, 400000000, C>)", "1:13", "NumbaArray.ndim must be 0 to 64 (got 400000000)"),
    ("kernel k(a: TileArray<f32, 65>)", "1:13", "TileArray.ndim must be 0 to 64 (got 65)"),
    ("kernel k(a: Partition<f32, 99999999999>)", "1:13", "TileTensor.rank must be 0 to 64"),
    ("kernel k(a: const 1.5.)", "1:22", "unexpected character '.'"),
    ("kernel k(a: const x)", "1:19", "expected a constant (true, false, an integer or a float)"),
    ("kernel k(a: f32, a: f32)", "1:8", "parameter names must be unique"),
    ("kernel k(a: Vec)", "1:13", "expected a type after ':' (got 'Vec')"),
    ("struct f32 { x: u8 } kernel k()", "1:8", "struct name 'f32' is reserved"),
    ("struct A {} struct A {} kernel k()", "1:20", "struct 'A' declared twice"),
    ("kernel k(a: *f32)", "1:14", "expected 'const' or 'mut' after '*'"),
    ("device k()", "1:8", "expected 'fn' after 'device'"),
    ("k(a: f32)", "1:1", "expected 'kernel', 'device fn' or an attribute '#['"),
    ('kernel "bad \\q"()', "1:8", "bad escape in quoted name"),
    ("kernel k(a: f32) @", "1:18", "unexpected character '@'"),
    ("kernel k(a: " + "(" * 80 + "f32,)", "1:77", "types nest at most 64 deep"),
    ("kernel k(a: const " + "9" * 5000 + ")", "1:19", "numbers have at most 400 characters (got 5000)"),
])
def test_errors_say_where_and_what(text: str, where: str, message: str) -> None:
    with pytest.raises(SignatureSyntaxError) as info:
        parse_signatures(text)
    assert info.value.where == where
    assert message in info.value.reason


def test_parse_signature_wants_exactly_one() -> None:
    with pytest.raises(SignatureSyntaxError, match=r"exactly one signature \(got 2\)"):
        parse_signature("kernel a() kernel b()")
    with pytest.raises(SignatureSyntaxError, match=r"exactly one signature \(got 0\)"):
        parse_signature("// nothing\n")
    with pytest.raises(SignatureSyntaxError, match="expected end of text after 'f32'"):
        parse_type("f32 u8")


@settings(max_examples=300, deadline=None)
@given(signatures, st.data())
def test_mangled_text_raises_only_syntax_errors(sig: Signature, data: st.DataObject) -> None:
    text = str(sig)
    cut = data.draw(st.integers(0, len(text)))
    junk = data.draw(st.text(alphabet="#[](){}<>,:;&*=-_\"\\ \nabcfiu0123x.", max_size=4))
    mutated = text[:cut] + junk + text[cut + data.draw(st.integers(0, 3)):]
    try:
        parse_signatures(mutated)
    except SignatureSyntaxError as exc:
        assert exc.where is None or re.fullmatch(r"\d+:\d+", exc.where)


def test_declared_structs_cannot_nest_or_expand_without_bound() -> None:
    """A chain of declarations nests past the limit; a doubling chain would expand to 2**40 types."""
    chain = "struct S0 { a: f32 }" + "".join(f" struct S{i} {{ a: S{i - 1} }}" for i in range(1, 3000))
    with pytest.raises(SignatureSyntaxError, match="types nest at most 64 deep"):
        parse_signatures(chain + " kernel k(p: S2999)")
    doubling = "struct S0 { a: f32 }" + "".join(f" struct S{i} {{ a: S{i - 1}, b: S{i - 1} }}"
                                                for i in range(1, 40))
    with pytest.raises(SignatureSyntaxError, match="declared structs expand to at most 65536 types"):
        parse_signatures(doubling + " kernel k(p: S39)")
    shared = "struct V { x: f32, y: f32 } kernel k(" + ", ".join(f"p{i}: V" for i in range(100)) + ")"
    assert len(parse_signatures(shared)[0].params) == 100


@pytest.mark.parametrize(("text", "message"), [
    ("#[reqntid(0)] kernel k()", "reqntid must be three ints >= 1"),
    ("#[shared(static = -1)] kernel k()", "static_shared must be >= 0"),
    ("#[minnctapersm(-1)] kernel k()", "minnctapersm must be >= 1"),
    ("#[foo] kernel k()", "unknown attribute 'foo'"),
])
def test_impossible_launch_demands_are_syntax_errors(text, message):
    with pytest.raises(SignatureSyntaxError, match=message):
        Signature.parse(text)
