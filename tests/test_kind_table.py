"""The kind table: every built-in kind has one entry, and a kind registered from outside (here a
test-local ``Window<T>``: a pointer and a u32 element count the kernel owns) parses, formats,
round-trips through the manifest, lowers, reports its access trait, binds, is covered by the launch's
no-alias check (alone and inside a struct) and launches without editing any module.
"""

from __future__ import annotations

import struct
import typing
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest

from ptxbridge.abi import (
    Access,
    ArgumentError,
    Convention,
    DType,
    Memory,
    Param,
    Promise,
    SignatureSyntaxError,
    Struct,
    StructField,
    access,
    dtype,
    dumps_manifest,
    loads_manifest,
    parse_signature,
    parse_type,
)
from ptxbridge.abi.devices import DLPACK_CPU
from ptxbridge.abi.kind_entries import KINDS
from ptxbridge.abi.kind_table import Arg, Generic, KindEntry, TensorRule, always
from ptxbridge.abi.kinds import ParamType
from ptxbridge.abi.lowering import FlatParam
from ptxbridge.abi.tensor_rules import TensorFacts, TensorProblem
from ptxbridge.launch.aliasing import alias_check
from ptxbridge.launch.args import BindContext, make_binder

F32 = dtype("f32")
_OWNED = Access(Memory.WRITE, Promise.EXCLUSIVE)


@dataclass(frozen=True, slots=True)
class Window:
    """A contiguous run of elements: its address and its element count (u32)."""

    dtype: DType


def _window_values(info: TensorFacts, t: Window) -> tuple[int, ...]:
    if len(info.shape) != 1 or not info.c_contiguous():
        raise TensorProblem(f"takes a contiguous 1-d tensor (got shape {info.shape})")
    if info.numel > 0xFFFFFFFF:
        raise TensorProblem(f"{info.numel} elements do not fit the u32 count")
    return (info.ptr, info.numel)


WINDOW = KindEntry(
    Window, "window", {"dtype": "dtype"},
    syntax=Generic({"Window": {}}, (Arg("dtype", "dtype", "an element type"),)),
    lower=lambda name, t, conv, source: [FlatParam(name, "u64", 8, 8, source),
                                         FlatParam(f"{name}.count", "u32", 4, 4, source)],
    binding=always("tensor"), access=lambda t, conv: _OWNED,
    by_value=lambda t: (16, 8), member="address",
    tensor=TensorRule(_window_values, refuses_readonly=lambda t: True),
    promise_words=lambda t: "a Window (owned by the kernel)")


@pytest.fixture
def window() -> Iterator[None]:
    KINDS.register(WINDOW)
    try:
        yield
    finally:
        KINDS.unregister(Window)


def test_every_builtin_kind_has_one_entry() -> None:
    assert [entry.cls for entry in KINDS] == list(typing.get_args(ParamType))


@pytest.mark.usefixtures("window")
def test_a_registered_kind_reads_writes_and_lowers() -> None:
    text = "kernel add_one(x: Window<f32>, s: struct S { w: Window<i32>, k: u32 })"
    sig = parse_signature(text)
    assert sig.params[0].type == Window(F32)
    assert sig.params[1].type == Struct("S", (StructField("w", Window(dtype("i32"))),
                                              StructField("k", parse_type("u32"))))
    assert str(sig) == "#[convention(c)] " + text
    assert loads_manifest(dumps_manifest([sig])) == [sig]
    laid = [(lp.param.name, lp.param.ptx_type, lp.offset) for lp in sig.layout.params]
    assert laid == [("x", "u64", 0), ("x.count", "u32", 8), ("s", "b8", 16)]
    assert sig.layout.params[2].param.size == 24  # {Window (16, align 8), u32} padded to 8
    assert access(Window(F32)) == _OWNED
    assert access(sig.params[1].type) == _OWNED  # the struct carries its field's memory and promise


@pytest.mark.usefixtures("window")
def test_a_registered_kind_binds() -> None:
    ctx = BindContext("add_one", Convention.C, DLPACK_CPU, 0)
    x = np.zeros(5, np.float32)
    assert make_binder(ctx, Param("x", Window(F32)), np.ndarray).values(x, 0) == (x.ctypes.data, 5)
    with pytest.raises(ArgumentError, match=r"argument 'x' \(Window<f32>\) takes a contiguous 1-d tensor"):
        make_binder(ctx, Param("x", Window(F32)), np.ndarray).values(np.zeros((2, 2), np.float32), 0)
    frozen = np.zeros(3, np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ArgumentError, match="is written by the kernel, but got a read-only float32"):
        make_binder(ctx, Param("x", Window(F32)), np.ndarray).values(frozen, 0)
    s = parse_type("struct S { w: Window<f32>, k: u32 }")
    (image,) = make_binder(ctx, Param("s", s), dict).values({"w": x, "k": 7}, 0)
    assert image == struct.pack("<QI4xI4x", x.ctypes.data, 5, 7)


@pytest.mark.usefixtures("window")
def test_a_registered_kind_is_alias_checked() -> None:
    """The no-alias check finds the new tensor-like kind by its binding family, also as a struct
    field (by the table's labelled children), and words its promise from the entry."""
    check = alias_check(parse_signature("kernel k(a: Window<f32>, s: struct S { w: Window<f32>, k: u32 })"))
    assert check is not None
    x = np.zeros(8, np.float32)
    check((x[:4], {"w": x[4:], "k": 1}))  # disjoint halves
    with pytest.raises(ArgumentError, match=r"k: argument 'a' \(Window<f32>\) overlaps argument 's\.w' "
                                            r"\(Window<f32>\) in bytes .* \(4 bytes\): 'a' is a Window "
                                            r"\(owned by the kernel\), which no other argument may overlap"):
        check((x[:5], {"w": x[4:], "k": 1}))


@pytest.mark.usefixtures("window")
def test_a_registered_kind_launches_on_the_cpu_loader() -> None:
    """NVRTC compiles (float*, unsigned): the Window lowers to exactly those two parameters."""
    nvrtc = pytest.importorskip("ptxbridge.nvrtc")
    import ptxbridge

    source = r'''extern "C" __global__ void add_one(float* x, unsigned n) {
        unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) x[i] += 1.0f;
    }'''
    artifact = nvrtc.compile(source, arch="sm_90", output="ptx",
                             signatures={"add_one": "kernel add_one(x: Window<f32>)"})
    with ptxbridge.link([artifact]).load("cpu") as module:
        x = np.arange(37, dtype=np.float32)
        module.add_one(x, grid=2, block=32)
        np.testing.assert_array_equal(x, np.arange(37, dtype=np.float32) + 1)


def test_registering_refuses_clashes_and_unregistering_forgets() -> None:
    with pytest.raises(ValueError, match="registered already or its start words"):
        KINDS.register(KindEntry(Window, "window", {"dtype": "dtype"}, Generic({"Array": {}}, ()),
                                 lower=lambda *a: [], binding=always("by-value")))
    with pytest.raises(ValueError, match="fields must name every field of Window"):
        KINDS.register(KindEntry(Window, "window", {}, Generic({"Window": {}}, ()),
                                 lower=lambda *a: [], binding=always("by-value")))
    KINDS.register(WINDOW)
    with pytest.raises(SignatureSyntaxError, match="struct name 'Window' is reserved"):
        parse_signature("struct Window { a: u8 } kernel k()")
    KINDS.unregister(Window)
    with pytest.raises(SignatureSyntaxError, match="expected a type"):
        parse_type("Window<f32>")
    with pytest.raises(TypeError, match="not a parameter kind"):
        access(Window(F32))  # type: ignore[arg-type]
