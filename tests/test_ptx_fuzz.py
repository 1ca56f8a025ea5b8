"""read_ptx on mutated real PTX: a PtxModule or a FormatError, never another exception, never slow.

Every input runs under a CPU-time and memory budget (``_budget``: about 1 s of this
thread's CPU and 10x the input's size), and adversarial families must grow linearly:
the cost at 4n over the cost at n, in CPU time, stays far from the 16x of quadratic work.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from _budget import growth, run_within_budget
from _ptx_samples import numba_ptx, nvrtc_ptx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ptxbridge.abi import FormatError
from ptxbridge.abi.ptx import PtxModule, read_ptx

TOKENS = [b"{", b"}", b"(", b")", b"[", b"]", b";", b",", b"=", b"/*", b"*/", b"//", b'"', b"\n", b"\0",
          b".entry", b".func", b".param", b".reg", b".u64", b".b8", b".v4", b".align", b".align 3", b".ptr",
          b".extern", b".visible", b".shared", b".global", b".version 9.0", b".target", b".address_size 48",
          b".reqntid", b".maxntid 1,2,3,4", b".section", b".file", b".pragma", b".attribute(", b"0x", b"0f",
          b"-1", b"99999999999999999999", b"k[]", b"\xff", b"\xc3\xa9", b"\xd9\xa3"]


@pytest.fixture(scope="module")
def seeds() -> list[bytes]:
    edge = (Path(__file__).parent / "fixtures" / "ptx" / "edge_cases.ptx").read_bytes()
    return [nvrtc_ptx().encode(), numba_ptx("mixed").encode(), numba_ptx("saxpy", debug=True).encode(), edge]


def _mutate(data: st.DataObject, text: bytes) -> bytes:
    for _ in range(data.draw(st.integers(1, 6), label="mutations")):
        at = data.draw(st.integers(0, len(text)), label="at")
        how = data.draw(st.sampled_from(["flip", "truncate", "delete", "token", "bytes"]), label="how")
        if how == "flip" and at < len(text):
            text = text[:at] + bytes([data.draw(st.integers(0, 255))]) + text[at + 1:]
        elif how == "truncate":
            text = text[:at]
        elif how == "delete":
            text = text[:at] + text[at + data.draw(st.integers(1, 64)):]
        elif how == "token":
            text = text[:at] + data.draw(st.sampled_from(TOKENS)) + text[at:]
        else:
            text = text[:at] + data.draw(st.binary(min_size=1, max_size=16)) + text[at:]
    return text


def _read(text: bytes) -> None:
    try:
        module = run_within_budget(lambda: read_ptx(text, "fuzz.ptx"), len(text), "read_ptx")
    except FormatError as exc:
        assert exc.source == "fuzz.ptx" and exc.where is not None
        return
    assert isinstance(module, PtxModule)
    for function in module.functions:  # the derived properties must hold up on whatever was accepted
        assert function.size >= 0 and function.body_line >= 1


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_real_ptx(seeds: list[bytes], data: st.DataObject) -> None:
    seed = data.draw(st.sampled_from(seeds), label="seed")
    _read(_mutate(data, seed))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=60).map(b" ".join))
def test_token_soup(text: bytes) -> None:
    _read(b".version 8.0\n.target sm_90\n" + text)


# name -> (the text for a size n, n, memory budget per input byte); each family used to take quadratic
# time or memory somewhere.  Sizes make the cost at n a few ms of CPU time.  Declaring one name or one
# parameter per few bytes returns one Python record (~100 bytes) per few bytes: those budgets say so.
ADVERSARIAL = {
    "unterminated comments": (lambda n: "/*" * n, 15_000, 10),  # must not rescan the rest per comment
    "line comments": (lambda n: "//x\n" * n, 100_000, 10),  # blanking one by one cost ~19x memory
    "one long comment": (lambda n: "/*" + "\u00e9" * n + "*/", 150_000, 10),
    "unterminated string": (lambda n: '"' + "x" * n, 1_000_000, 10),
    "unbalanced braces": (lambda n: ".entry k " + "{" * n, 8_000, 10),
    "deep parentheses": (lambda n: ".global .u32 x = " + "(" * n + ";", 5_000, 10),
    "long declaration list": (lambda n: ".global .u32 " + ", ".join(["x"] * n) + ";", 1_500, 40),
    "many parameters": (lambda n: ".entry k(" + ",".join([".param .u32 p"] * n) + ") {}", 700, 15),
    "long number": (lambda n: ".global .u32 x[" + "9" * n + "];", 200_000, 10),
}


def _reader(text: str):
    data = (".version 8.0\n.target sm_90\n" + text).encode()

    def read() -> None:
        with contextlib.suppress(FormatError):
            read_ptx(data)

    return read


@pytest.mark.parametrize("name", ADVERSARIAL)
def test_adversarial_inputs_stay_linear(name: str) -> None:
    make, n, ratio = ADVERSARIAL[name]
    grew = growth(lambda k: _reader(make(k)), n)
    assert grew < 10, f"{name}: 4x the input took {grew:.1f}x the CPU time (linear is ~4x)"
    text = make(4 * n)
    run_within_budget(_reader(text), len(text.encode()), name, ratio=ratio)


def test_numbers_too_long_for_python_int_are_format_errors() -> None:
    with pytest.raises(FormatError, match="does not fit in 64 bits") as info:
        read_ptx(".version 8.0\n.target sm_90\n.global .u32 x[" + "1" * 5000 + "];", "big.ptx")
    assert info.value.where == "line 3"
    with pytest.raises(FormatError, match=r"MAJOR\.MINOR"):
        read_ptx(".version " + "8" * 5000 + ".0\n.target sm_90\n")
    with pytest.raises(FormatError, match="does not fit in 64 bits"):
        read_ptx(".version 8.0\n.target sm_90\n.global .u32 x[0x10000000000000000];")
    assert read_ptx(".version 8.0\n.target sm_90\n.global .u8 x[0xFFFFFFFFFFFFFFFF];").globals[0].array \
        == (2**64 - 1,)


@pytest.mark.parametrize("directive", [".reqntid 0", ".reqntid 32, 0", ".maxntid 0, 1, 1", ".minnctapersm 0",
                                       ".reqnctapercluster 2, 0"])
def test_zero_launch_dimensions_are_format_errors(directive: str) -> None:
    with pytest.raises(FormatError, match=r"k: \.\w+ values must be >= 1") as info:
        read_ptx(f".version 8.0\n.target sm_90\n.entry k()\n{directive}\n{{ ret; }}", "zero.ptx")
    assert info.value.where == "line 4"
