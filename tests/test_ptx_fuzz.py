"""read_ptx on mutated real PTX: a PtxModule or a FormatError, never another exception, never slow."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest
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
        module = read_ptx(text, "fuzz.ptx")
    except FormatError as exc:
        assert exc.source == "fuzz.ptx" and exc.where is not None
        return
    assert isinstance(module, PtxModule)
    for function in module.functions:  # the derived properties must hold up on whatever was accepted
        assert function.size >= 0 and function.body_line >= 1


@settings(max_examples=200, deadline=1000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_real_ptx(seeds: list[bytes], data: st.DataObject) -> None:
    seed = data.draw(st.sampled_from(seeds), label="seed")
    _read(_mutate(data, seed))


@settings(max_examples=100, deadline=1000)
@given(st.lists(st.sampled_from(TOKENS), max_size=60).map(b" ".join))
def test_token_soup(text: bytes) -> None:
    _read(b".version 8.0\n.target sm_90\n" + text)


@pytest.mark.parametrize("text", [
    "/*" * 200_000,                                   # each unterminated comment must not rescan the rest
    '"' + "x" * 400_000,                              # an unterminated string
    ".entry k " + "{" * 200_000,                      # deep, unbalanced braces
    ".global .u32 x = " + "(" * 200_000 + ";",        # deep parentheses in an initializer
    ".global .u32 " + ", ".join(["x"] * 100_000) + ";",  # a very long declaration list
    ".entry k(" + ",".join([".param .u32 p"] * 50_000) + ") {}",
])
def test_adversarial_inputs_stay_linear(text: str) -> None:
    start = time.perf_counter()
    with contextlib.suppress(FormatError):
        read_ptx(".version 8.0\n.target sm_90\n" + text)
    assert time.perf_counter() - start < 1.0
