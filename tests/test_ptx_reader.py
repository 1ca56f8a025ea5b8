"""read_ptx on PTX from NVRTC and numba-cuda (made here, no GPU), and on hand-written edge cases."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from _ptx_samples import NUMBA_SAMPLES, numba_ptx, nvrtc_ptx

from ptxbridge.abi import FormatError
from ptxbridge.abi.ptx import PtxGlobal, PtxModule, PtxParam, read_ptx


@pytest.fixture(scope="module")
def nvrtc_text() -> str:
    return nvrtc_ptx()


@pytest.fixture(scope="module")
def nvrtc(nvrtc_text: str) -> PtxModule:
    return read_ptx(nvrtc_text, "sample.ptx")


def _shape(function) -> list[tuple[str, int | None, int | None]]:
    return [(p.type, p.array, p.align) for p in function.params]


# --- NVRTC --------------------------------------------------------------------


def test_nvrtc_header_matches_the_text(nvrtc: PtxModule, nvrtc_text: str) -> None:
    major, minor = re.search(r"^\.version (\d+)\.(\d+)$", nvrtc_text, re.M).groups()
    assert nvrtc.version == (int(major), int(minor))
    assert nvrtc.target == ("sm_90",)
    assert nvrtc.address_size == 64
    assert nvrtc.source == "sample.ptx"
    assert [f.name for f in nvrtc.entries] == ["scalars", "clustered", "caller"]


def test_nvrtc_scalars_struct_by_value_and_launch_bounds(nvrtc: PtxModule) -> None:
    k = nvrtc.function("scalars")
    assert (k.kind, k.linkage, k.returns) == ("entry", "visible", ())
    # float*, int, Mixed{char,double,short}, double, char, Small{short,char}, unsigned long long, Half
    assert _shape(k) == [("u64", None, None), ("u32", None, None), ("b8", 24, 8), ("f64", None, None),
                         ("u8", None, None), ("b8", 4, 2), ("u64", None, None), ("b8", 2, 2)]
    assert [p.name for p in k.params] == [f"scalars_param_{i}" for i in range(8)]
    assert k.offsets == (0, 8, 16, 40, 48, 50, 56, 64)
    assert k.size == 66
    assert (k.maxntid, k.minnctapersm, k.reqntid, k.reqnctapercluster) == ((128, 1, 1), 2, None, None)
    assert "atom.global.add" in k.body or "red.global.add" in k.body
    assert "smem" in k.body


def test_nvrtc_cluster_dims(nvrtc: PtxModule) -> None:
    k = nvrtc.function("clustered")
    assert k.reqnctapercluster == (2, 1, 1)
    assert (k.maxntid, k.minnctapersm) == (None, None)
    assert k.params == (PtxParam("clustered_param_0", "u64", None, None),)


def test_nvrtc_device_functions_declarations_and_weak(nvrtc: PtxModule) -> None:
    b32 = "b32"
    ext = nvrtc.function("ext_scale")
    assert (ext.kind, ext.linkage, ext.body) == ("func", "extern", None)
    assert ext.returns == (PtxParam("func_retval0", b32, None, None),)
    assert ext.params == (PtxParam("ext_scale_param_0", b32, None, None),)
    mul = nvrtc.function("dev_mul")
    assert (mul.linkage, [p.type for p in mul.params], len(mul.returns)) == ("visible", [b32, b32], 1)
    assert "mul.f32" in mul.body
    # the template instance is declared first, then defined: one record, the definition
    twice = [f for f in nvrtc.functions if f.name == "_Z5twiceIfET_S0_"]
    assert len(twice) == 1 and twice[0].linkage == "weak" and twice[0].body is not None
    assert "call.uni" in nvrtc.function("caller").body


def test_nvrtc_globals(nvrtc: PtxModule) -> None:
    assert nvrtc.globals == (
        PtxGlobal("counter", "global", "u32", 4, None, "visible", None),
        PtxGlobal("table", "global", "b8", 4, (16,), "visible",
                  "{0, 0, 128, 63, 0, 0, 0, 64, 0, 0, 64, 64, 0, 0, 128, 64}"),
        PtxGlobal("cst", "const", "b8", 4, (8,), "visible", "{7, 0, 0, 0, 8}"),
        PtxGlobal("smem", "shared", "b8", 4, (0,), "extern", None),
    )


def test_body_and_body_line_point_into_the_file(nvrtc: PtxModule, nvrtc_text: str) -> None:
    lines = nvrtc_text.splitlines()
    for function in nvrtc.functions:
        if function.body is None:
            continue
        assert lines[function.body_line - 1].strip() == "{"
        first = function.body.lstrip("\n").splitlines()[0]
        body_start = function.body_line + function.body[: function.body.index(first)].count("\n")
        assert lines[body_start - 1] == first
    caller = nvrtc.function("caller").body
    assert "callseq" not in caller  # `// callseq 0` comments are blanked...
    assert caller.count("\n") == _between_braces(nvrtc_text, "caller").count("\n")  # ...lines kept


def _between_braces(text: str, entry: str) -> str:
    start = text.index("{", text.index(f".entry {entry}("))
    return text[start + 1: text.index("\n}", start) + 1]


def test_bytes_with_trailing_nul_read_like_text(nvrtc_text: str, nvrtc: PtxModule) -> None:
    assert read_ptx(nvrtc_text.encode() + b"\0", "sample.ptx") == nvrtc


# --- numba-cuda ----------------------------------------------------------------


@pytest.fixture(scope="module")
def numba_modules() -> dict[str, PtxModule]:
    return {name: read_ptx(numba_ptx(name), f"{name}.ptx") for name in NUMBA_SAMPLES}


def _array(ndim: int) -> list[str]:
    return ["u64"] * (5 + 2 * ndim)  # meminfo, parent, nitems, itemsize, data, shape[n], strides[n]


@pytest.mark.parametrize(("name", "types"), [
    ("saxpy", ["f32"] + _array(1) * 3),
    ("scale2d", _array(2) + ["f64"]),
    # bool, complex64 as two f32, UniTuple(int32, 2) flattened, 3-D array, int64
    ("mixed", ["u8", "f32", "f32", "u32", "u32", *_array(3), "u64"]),
])
def test_numba_kernels(numba_modules: dict[str, PtxModule], name: str, types: list[str]) -> None:
    module = numba_modules[name]
    kernel = module.function(name)
    assert (kernel.kind, kernel.linkage, kernel.returns) == ("entry", "visible", ())
    assert kernel.body is not None
    assert [p.type for p in kernel.params] == types
    assert all(p.align is None and p.array is None and not p.ptr for p in kernel.params)
    sizes = [4 if t in ("f32", "u32") else 1 if t == "u8" else 8 for t in types]
    ends = [o + s for o, s in zip(kernel.offsets, sizes, strict=True)]
    assert all(o % s == 0 for o, s in zip(kernel.offsets, sizes, strict=True))
    assert all(b >= a for a, b in zip(ends, kernel.offsets[1:], strict=False))
    assert kernel.size == ends[-1]
    # numba's environment global: .common, never read, but still listed
    assert [(g.state_space, g.linkage, g.type) for g in module.globals] == [("global", "common", "u64")]


@pytest.mark.parametrize(("name", "params", "ret"), [("add", ["b32", "b32"], "b32"),
                                                     ("count", ["b64", "b32"], "b64")])
def test_numba_c_abi_device_functions(numba_modules: dict[str, PtxModule], name: str, params: list[str],
                                      ret: str) -> None:
    module = numba_modules[name]
    assert module.entries == ()
    function = module.function(name)
    assert (function.kind, function.linkage) == ("func", "visible")
    assert [p.type for p in function.params] == params
    assert function.returns == (PtxParam("func_retval0", ret, None, None),)
    assert "st.param" in function.body


def test_saxpy_exact_offsets(numba_modules: dict[str, PtxModule]) -> None:
    kernel = numba_modules["saxpy"].function("saxpy")
    assert kernel.offsets == (0, *range(8, 8 + 21 * 8, 8))
    assert kernel.size == 176


def test_numba_debug_build_with_dwarf_sections() -> None:
    text = numba_ptx("saxpy", debug=True)
    assert '.file\t1 "' in text and ".section\t.debug_info" in text  # what this test is about
    module = read_ptx(text)
    assert module.target == ("sm_90", "debug")
    assert [(f.name, f.kind, len(f.params)) for f in module.functions] == [
        ("saxpy__exc_helper__", "func", 1), ("saxpy", "entry", 22)]
    names = [g.name for g in module.globals]
    assert names[1:] == [f"saxpy__{part}__" for part in
                         ("errcode", "tidx", "ctaidx", "tidy", "ctaidy", "tidz", "ctaidz")]
    assert module.function("saxpy").offsets == read_ptx(numba_ptx("saxpy")).function("saxpy").offsets


def test_missing_function_is_a_key_error(numba_modules: dict[str, PtxModule]) -> None:
    with pytest.raises(KeyError, match=r"no \.entry or \.func named 'nope'"):
        numba_modules["saxpy"].function("nope")


# --- hand-written edge cases -------------------------------------------------------

FIXTURES = Path(__file__).parent / "fixtures" / "ptx"


def _as_golden(module: PtxModule) -> dict:
    """The module as the golden JSON spells it: every field, bodies as a has_body flag."""
    def function(f):
        d = dataclasses.asdict(f)
        d.pop("body")
        return {**d, "has_body": f.body is not None, "offsets": list(f.offsets), "size": f.size}
    plain = {"version": module.version, "target": module.target, "address_size": module.address_size,
             "functions": [function(f) for f in module.functions],
             "globals": [dataclasses.asdict(g) for g in module.globals]}
    return json.loads(json.dumps(plain))  # tuples -> lists, as in the file


def test_golden_edge_cases() -> None:
    module = read_ptx((FIXTURES / "edge_cases.ptx").read_text(), "edge_cases.ptx")
    assert _as_golden(module) == json.loads((FIXTURES / "edge_cases.json").read_text())


def test_edge_case_bodies_keep_nested_braces_and_blank_comments() -> None:
    module = read_ptx((FIXTURES / "edge_cases.ptx").read_text())
    body = module.function("kernel_a").body
    assert ".callprototype (.param .b32 _) _ (.param .b64 _);" in body
    assert body.count("{") == body.count("}") == 1  # the scope block; the comment's braces are gone
    assert '.pragma "nounroll";' in body
    assert module.function("old_style").body.split() == ["add.u32", "r,", "a,", "1;", "ret;"]


def _header(body: str) -> str:
    return ".version 8.0\n.target sm_80\n" + body


def test_defaults_and_minimal_module() -> None:
    module = read_ptx(_header(".entry k { ret; }"))
    assert module.address_size == 32  # PTX ISA: the default without .address_size
    k = module.function("k")
    assert (k.params, k.size, k.linkage, k.body.strip()) == ((), 0, "", "ret;")


def test_ptr_align_is_the_pointees_not_the_params() -> None:
    k = read_ptx(_header(".entry k(.param .u32 n, .param .u64 .ptr .shared .align 64 p) { }")).function("k")
    assert k.params[1] == PtxParam("p", "u64", 64, None, ptr=True)
    assert (k.offsets, k.size) == ((0, 8), 16)


def test_declaration_after_definition_keeps_the_definition() -> None:
    text = _header(".func f() { ret; }\n.func f();\n")
    assert read_ptx(text).function("f").body is not None


@pytest.mark.parametrize(("text", "line", "message"), [
    (".version 8.0\n.target sm_80\n/* never closed\n.entry k {}", 3, "unterminated /* comment"),
    (_header(".entry k(.param .u32 n)\n{\n  ret;\n"), 4, "no matching '}'"),
    (".target sm_80\n.entry k {}", 1, "needs a .version directive"),
    (".version 8.0\n.entry k {}", 1, "needs a .target directive"),
    (".version 8\n.target sm_80", 1, ".version must read MAJOR.MINOR (got '8')"),
    (_header(".address_size 48"), 3, ".address_size must be 32 or 64 (got 48)"),
    (_header("\n.entry k(.param .u64 .bogus p) {}"), 4, "unexpected .bogus in a parameter declaration"),
    (_header(".entry k(.param .align 3 .b8 p[4]) {}"), 3, ".align must be a power of two (got 3)"),
    (_header(".entry k(.param p) {}"), 3, "needs a type such as .u64 (got 'p')"),
    (_header(".entry k(.param .u32 a .param .u32 b) {}"), 3, "expected ',' or ')' after parameter 'a'"),
    (_header(".entry k(.param .u32 a[x]) {}"), 3, "element count of parameter 'a', a non-negative integer"),
    (_header("garbage here"), 3, "expected a module-scope directive such as .entry"),
    (_header(".entry k {}\n.entry k {}"), 4, "k is defined twice"),
    (_header(".entry k {}\n.func k();"), 4, "k is declared both as .entry and as .func"),
    (_header('.file 1 "unterminated\n'), 3, "unterminated string literal"),
    (_header(".global .u32 x = ;"), 3, "variable 'x' has '=' but no initializer"),
    (_header(".global .u32 x y;"), 3, "expected '=', ',' or ';' after variable 'x' (got 'y')"),
    (_header(".entry k .maxntid 1, 2, 3, 4 {}"), 3, ".maxntid takes 1 to 3 integers (got 4)"),
    (_header(".entry k .minnctapersm {}"), 3, ".minnctapersm takes 1 to 1 integers (got 0)"),
    (_header(".entry k ret; {}"), 3, "k: expected a directive, '{' or ';' after the parameters (got 'ret')"),
    (_header(".global .u32 x = (1;"), 3, "expected one of , ; (got end of file)"),
])
def test_bad_ptx_says_where_and_why(text: str, line: int, message: str) -> None:
    with pytest.raises(FormatError) as caught:
        read_ptx(text, "bad.ptx")
    assert caught.value.where == f"line {line}"
    assert message in str(caught.value)
    assert str(caught.value).startswith(f"bad.ptx:line {line}: ")


def test_non_utf8_bytes_say_which_byte() -> None:
    with pytest.raises(FormatError, match=r"k\.ptx:byte 13: PTX must be UTF-8 text \(got byte 0xff\)"):
        read_ptx(b".version 8.0\n\xff", "k.ptx")


def test_only_ascii_digits_count() -> None:
    with pytest.raises(FormatError, match=r"the \.address_size value, a non-negative integer \(got '٦'\)"):
        read_ptx(_header(".address_size ٦٤"))
