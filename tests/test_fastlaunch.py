"""The optional C launch path (``ptxbridge._fastlaunch``): byte-for-byte the Python path's packing,
and a decline (never an error of its own) whenever an argument is not the common accepting case.

Runs on the CPU: C plans are built for a CPU target (torch CPU tensors, ``pack``), and the call path
is driven through a loader without a driver, where the C plan declines every launch so the Python
path's checks and messages must show through unchanged.  Without the extension the same call-path
tests run on the pure-Python path.
"""

from __future__ import annotations

import math
import random
import struct

import pytest

torch = pytest.importorskip("torch")

from ptxbridge import fastpath
from ptxbridge.abi import Param, Pointer, Scalar, Signature, dtype
from ptxbridge.abi.errors import ArgumentError
from ptxbridge.abi.kinds import Slice
from ptxbridge.abi.signature import Convention
from ptxbridge.args import BindContext, make_binder
from ptxbridge.loaders.base import DLPACK_CPU, DLPACK_CUDA
from ptxbridge.module import Module

native = pytest.mark.skipif(fastpath._fastlaunch is None, reason="ptxbridge._fastlaunch not built")

INTS = ("i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64")
TORCH = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16,
         "i32": torch.int32, "u8": torch.uint8, "i64": torch.int64, "bool": torch.bool}


def _signature(rng: random.Random) -> Signature:
    params = []
    for i in range(rng.randint(1, 9)):
        choice = rng.random()
        if choice < 0.3:
            params.append(Param(f"p{i}", Pointer(Scalar(dtype(rng.choice(list(TORCH)))), rng.random() < 0.5)))
        elif choice < 0.5:
            params.append(Param(f"p{i}", Slice(dtype(rng.choice(list(TORCH))), rng.random() < 0.5)))
        elif choice < 0.8:
            params.append(Param(f"p{i}", Scalar(dtype(rng.choice(INTS)))))
        else:
            params.append(Param(f"p{i}", Scalar(dtype(rng.choice(("f32", "f64"))))))
    params.append(Param("last", Pointer(Scalar(dtype("f32")))))  # at least one tensor
    return Signature("k", tuple(params), convention=Convention.OXIDE)


def _argument(t, rng: random.Random):
    if isinstance(t, (Pointer, Slice)):
        name = t.pointee.dtype.name if isinstance(t, Pointer) else t.dtype.name
        return torch.zeros(rng.choice((0, 1, 5, 64)), dtype=TORCH[name])
    dt = t.dtype
    if dt.is_integer:
        top = 1 << (dt.bits - 1)
        lo, hi = (-top, top - 1) if dt.is_signed else (0, 2 * top - 1)
        return rng.choice((lo, hi, 0, 1, rng.randint(lo, hi)))
    return rng.choice((0.0, -0.0, 1.5, rng.uniform(-1e30, 1e30), 3.4e38 if dt.name == "f32" else 1e300,
                       5e-324, 1.0000001))


def _plans(signature: Signature, args: tuple, device_type: int = DLPACK_CPU):
    """(C plan, Python bound function, packer) for one argument-type tuple."""
    ctx = BindContext("k", signature.convention, device_type, 0)
    types = tuple(map(type, args))
    binders = tuple(make_binder(ctx, p, t) for p, t in zip(signature.params, types, strict=True))
    packer = signature.layout.packer()
    seen: list[bytes] = []
    bound = fastpath.compile_launch(binders, lambda values, *rest: seen.append(packer.pack(values)))
    specs = fastpath.native_specs(binders, types, signature.layout)
    assert specs is not None, signature
    plan = fastpath._fastlaunch.Plan(packer.size, specs)

    def python(call_args: tuple) -> bytes:
        seen.clear()
        bound(call_args, (1, 1, 1), (1, 1, 1), 0, 0)
        return seen[0]

    return plan, python


@native
def test_pack_matches_python_packer_on_random_signatures():
    rng = random.Random(1234)
    for _ in range(300):
        signature = _signature(rng)
        args = tuple(_argument(p.type, rng) for p in signature.params)
        plan, python = _plans(signature, args)
        for _ in range(3):
            args = tuple(_argument(p.type, rng) for p in signature.params)
            assert plan.pack(args) == python(args), (signature, args)


@native
def test_pointer_values_are_data_pointers_and_slice_lengths_numel():
    a = torch.arange(10, dtype=torch.float32)[2:]  # a byte offset into the storage
    b = torch.zeros(3, 4, dtype=torch.int32)
    sig = Signature("k", (Param("a", Slice(dtype("f32"))), Param("b", Pointer(Scalar(dtype("i32")))),
                          Param("n", Scalar(dtype("i32")))), convention=Convention.OXIDE)
    plan, _ = _plans(sig, (a, b, 7))
    assert plan.pack((a, b, -7)) == struct.pack("<QQQi", a.data_ptr(), 8, b.data_ptr(), -7)


@native
@pytest.mark.parametrize("bad", [
    "dtype", "strided", "int_range", "bool_for_int", "float_for_int", "nan", "inf_f32", "big_f32",
    "int_for_float", "subclass", "arity", "list",
])
def test_declines_what_the_quick_test_does_not_accept(bad):
    sig = Signature("k", (Param("x", Pointer(Scalar(dtype("f32")))), Param("n", Scalar(dtype("i16"))),
                          Param("s", Scalar(dtype("f32")))))
    x = torch.zeros(8)
    plan, _ = _plans(sig, (x, 1, 1.0))
    args = {
        "dtype": (x.double(), 1, 1.0), "strided": (torch.zeros(8, 2)[:, 0], 1, 1.0),
        "int_range": (x, 1 << 15, 1.0), "bool_for_int": (x, True, 1.0), "float_for_int": (x, 1.0, 1.0),
        "nan": (x, 1, math.nan), "inf_f32": (x, 1, math.inf), "big_f32": (x, 1, 3.5e38),
        "int_for_float": (x, 1, 1), "subclass": (torch.nn.Parameter(x), 1, 1.0), "arity": (x, 1),
    }.get(bad, [x, 1, 1.0])
    assert plan.pack(args) is False
    assert plan.pack((x, -(1 << 15), -1.0)) == struct.pack("<Qhxxf", x.data_ptr(), -(1 << 15), -1.0)


@native
def test_declines_tensors_on_another_device_and_plans_that_cannot_launch():
    sig = Signature("k", (Param("x", Pointer(Scalar(dtype("f32")))),))
    x = torch.zeros(4)
    plan, _ = _plans(sig, (x,), device_type=DLPACK_CUDA)  # the plan wants cuda:0, x is on the CPU
    assert plan.pack((x,)) is False
    cpu_plan, _ = _plans(sig, (x,))
    assert cpu_plan.launch((x,), (1, 1, 1), (1, 1, 1), 0, 0) is False  # no function, no driver


def test_no_specs_for_arguments_the_c_plan_does_not_read():
    sig = Signature("k", (Param("x", Pointer(Scalar(dtype("f32")))), Param("n", Scalar(dtype("i32")))))
    ctx = BindContext("k", sig.convention, DLPACK_CPU, 0)
    import numpy

    for types in ((numpy.ndarray, int), (torch.Tensor, numpy.int32)):
        binders = tuple(make_binder(ctx, p, t) for p, t in zip(sig.params, types, strict=True))
        assert fastpath.native_specs(binders, types, sig.layout) is None


@native
def test_malformed_specs_are_refused_at_build_time():
    with pytest.raises(ValueError, match="does not fit"):
        fastpath._fastlaunch.Plan(8, ((1, 8, ord("i"), 0, 10),))
    with pytest.raises(ValueError, match="malformed"):
        fastpath._fastlaunch.Plan(8, ((2, 0, ord("q"), 1.0),))


class _DriverlessCuda:
    """A CUDA-typed loader whose launches are recorded: the C plan built for it has no driver
    to call, so it declines every launch and the Python path must decide."""

    device_type, device_id, needs_buffers = DLPACK_CUDA, 0, False
    cooperative_kernels = ()

    def __init__(self):
        self.launched: list[tuple] = []

    def function(self, name):
        return name

    def prepare(self, function, packer, name, **extra):
        return lambda values, *rest: self.launched.append(values)

    def native_facts(self, function, name):
        return {"backend": self, "name": name}


@pytest.mark.parametrize("with_native", [True, False])
def test_call_path_errors_are_the_python_ones_with_and_without_the_extension(with_native, monkeypatch):
    if with_native and fastpath._fastlaunch is None:
        pytest.skip("ptxbridge._fastlaunch not built")
    if with_native:
        monkeypatch.setenv("PTXBRIDGE_FASTLAUNCH", "1")
        monkeypatch.setattr(fastpath._fastlaunch, "driver_ready", lambda: True)
    else:
        monkeypatch.setattr(fastpath, "_fastlaunch", None)
    from ptxbridge.image import Image

    sig = Signature("k", (Param("n", Scalar(dtype("i8"))), Param("x", Pointer(Scalar(dtype("f32"))))))
    backend = _DriverlessCuda()
    kernel = Module(Image(None, "sm_90", {"k": sig}), backend).k
    x = torch.zeros(4)
    with pytest.raises(ArgumentError) as error:
        kernel(1, x, grid=1, block=1, stream=0)
    assert str(error.value) == ("k: argument 'x' (*mut f32) got float32 tensor on cpu; "
                                "expected float32 on cuda:0")
    plan = next(iter(kernel._plans.values()))
    assert (plan.native is not None) is with_native
    with pytest.raises(ArgumentError, match=r"argument 'n' \(i8\)"):
        kernel(300, x, grid=1, block=1, stream=0)
    assert backend.launched == []
