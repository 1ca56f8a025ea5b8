"""The optional C launch path (``ptxbridge.launch._fastlaunch``): byte-for-byte the Python path's packing,
and a decline (never an error of its own) whenever an argument is not the common accepting case.

Runs on the CPU: C plans are built for a CPU target (torch CPU tensors, ``pack``), and the call path
is driven through a loader without a driver, where the C plan declines every launch so the Python
path's checks and messages must show through unchanged.  Without the extension the same call-path
tests run on the pure-Python path.
"""

from __future__ import annotations

import ctypes
import enum
import math
import random
import struct
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from ptxbridge.abi import Param, Pointer, Scalar, Signature, dtype
from ptxbridge.abi.devices import DLPACK_CPU, DLPACK_CUDA
from ptxbridge.abi.errors import ArgumentError, CudaError
from ptxbridge.abi.kinds import DisjointSlice, Slice
from ptxbridge.abi.signature import Convention, LaunchMeta
from ptxbridge.artifacts.image import Image
from ptxbridge.launch import fastpath
from ptxbridge.launch.args import BindContext, make_binder
from ptxbridge.launch.module import Kernel, Module
from ptxbridge.loaders.base import Backend

native = pytest.mark.skipif(fastpath._fastlaunch is None, reason="ptxbridge.launch._fastlaunch not built")

INTS = ("i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64")
TORCH = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16,
         "i32": torch.int32, "u8": torch.uint8, "i64": torch.int64, "bool": torch.bool}


def _signature(rng: random.Random) -> Signature:
    params = []
    for i in range(rng.randint(1, 9)):
        choice = rng.random()
        if choice < 0.3:
            params.append(Param(f"p{i}", Pointer(Scalar(dtype(rng.choice(list(TORCH)))), rng.random() < 0.5)))
        elif choice < 0.45:
            params.append(Param(f"p{i}", Slice(dtype(rng.choice(list(TORCH))), rng.random() < 0.5)))
        elif choice < 0.5:  # {ptr, len} as a slice: the C plan reads it the same way
            params.append(Param(f"p{i}", DisjointSlice(dtype(rng.choice(list(TORCH))))))
        elif choice < 0.8:
            params.append(Param(f"p{i}", Scalar(dtype(rng.choice(INTS)))))
        else:
            params.append(Param(f"p{i}", Scalar(dtype(rng.choice(("f32", "f64"))))))
    params.append(Param("last", Pointer(Scalar(dtype("f32")))))  # at least one tensor
    return Signature("k", tuple(params), convention=Convention.OXIDE)


def _argument(t, rng: random.Random):
    if isinstance(t, (Pointer, Slice, DisjointSlice)):
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
    specs = fastpath.native_specs(binders, args, signature.layout)
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

    for args in ((numpy.zeros(4, numpy.float32), 1), (torch.zeros(4), numpy.int32(1))):
        types = tuple(map(type, args))
        binders = tuple(make_binder(ctx, p, t) for p, t in zip(sig.params, types, strict=True))
        assert fastpath.native_specs(binders, args, sig.layout) is None


@native
def test_malformed_specs_are_refused_at_build_time():
    with pytest.raises(ValueError, match="does not fit"):
        fastpath._fastlaunch.Plan(8, ((1, 8, ord("i"), 0, 10),))
    with pytest.raises(ValueError, match="malformed"):
        fastpath._fastlaunch.Plan(8, ((2, 0, ord("q"), 1.0),))


class _FakeLoader(Backend):
    """A loader double: only the prepared launch and the C plan facts are real."""

    def launch(self, *args):
        raise AssertionError("the general launch path is not expected here")

    def global_address(self, name):
        raise KeyError(name)

    read_global = write_global = global_address

    def close(self):
        pass


class _DriverlessCuda(_FakeLoader):
    """A CUDA-typed loader whose launches are recorded: the C plan built for it has no driver
    to call, so it declines every launch and the Python path must decide."""

    device_type, device_id, needs_buffers = DLPACK_CUDA, 0, False

    def __init__(self):
        self.launched: list[tuple] = []

    def function(self, name):
        return name

    def prepare(self, function, packer, name, **extra):
        return lambda values, *rest: self.launched.append(values)

    def native_facts(self, function, name):
        return {"name": name}


@pytest.mark.parametrize("with_native", [True, False])
def test_call_path_errors_are_the_python_ones_with_and_without_the_extension(with_native, monkeypatch):
    if with_native and fastpath._fastlaunch is None:
        pytest.skip("ptxbridge.launch._fastlaunch not built")
    if with_native:
        monkeypatch.setenv("PTXBRIDGE_FASTLAUNCH", "1")
    else:
        monkeypatch.setattr(fastpath, "_fastlaunch", None)
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


# --- the vectorcall launcher (Kernel's C base): keywords, default block, plan cache, fallbacks ---

F32P = Pointer(Scalar(dtype("f32")))
VADD = Signature("vadd", (Param("a", F32P), Param("b", F32P), Param("n", Scalar(dtype("i32")))))
REQ = Signature("req", (Param("a", F32P),), launch=LaunchMeta(reqntid=(64, 2, 1)))
MAX_SHARED = 1024


class _Function:
    max_dynamic_shared = MAX_SHARED


class _RecordingCpu(_FakeLoader):
    """A loader for CPU tensors whose C plans launch into ``record_launches``; its own (Python)
    launches land in ``launched``, so each test sees which path ran."""

    device_type, device_id, needs_buffers = DLPACK_CPU, 0, False

    def __init__(self):
        self.launched: list[tuple] = []
        self.last_kernel: list[str | None] = [None]  # the C plans write the name of what they launched

    def function(self, name):
        return _Function()

    def prepare(self, function, packer, name, **extra):
        return lambda values, *rest: self.launched.append((values, *rest))

    def native_facts(self, function, name):
        return {"function": 0xF00, "max_shared": MAX_SHARED, "function_obj": function,
                "last_kernel": self.last_kernel,
                "name": name, **RecordingDriver.current.entries}

    def launch_error(self, code, name, grid, block, shared_mem):
        return CudaError(f"{name}: code {code} grid={grid} block={block} shared={shared_mem}", code=code)


_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                           ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p))
_SET_CURRENT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class RecordingDriver(list):
    """Stands in for ``cuLaunchKernel`` / ``cuCtxSetCurrent`` where a C plan calls them: each launch
    appends (function, grid, block, shared_mem, stream, parameter bytes or None) and returns ``code``."""

    current: RecordingDriver

    def __init__(self):
        super().__init__()
        self.code = 0
        self._launch = _LAUNCH(self._record)
        self._set_current = _SET_CURRENT(lambda context: 0)
        self.entries = {"launch_entry": ctypes.cast(self._launch, ctypes.c_void_p).value,
                        "set_current_entry": ctypes.cast(self._set_current, ctypes.c_void_p).value}

    def _record(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        data = None
        if extra:
            size = ctypes.cast(extra[3], ctypes.POINTER(ctypes.c_size_t))[0]
            data = ctypes.string_at(extra[1], size)
        self.append((function or 0, (gx, gy, gz), (bx, by, bz), shared, stream or 0, data))
        return self.code


@pytest.fixture
def driver(monkeypatch):
    """The C plans' launches, recorded instead of sent to a driver."""
    if fastpath._fastlaunch is None:
        pytest.skip("ptxbridge.launch._fastlaunch not built")
    monkeypatch.setenv("PTXBRIDGE_FASTLAUNCH", "1")
    RecordingDriver.current = RecordingDriver()
    return RecordingDriver.current


@pytest.fixture
def python_calls(monkeypatch):
    """How many calls reached the Python side: ``Kernel._call_python``, or ``Kernel._call_keywords`` (the
    C launcher's target for calls spelled another way)."""
    calls = []
    for name in ("_call_python", "_call_keywords"):
        real = getattr(Kernel, name)
        monkeypatch.setattr(Kernel, name,
                            lambda self, *a, _real=real, **k: calls.append(a) or _real(self, *a, **k))
    return calls


def _module(backend=None):
    return Module(Image(None, "sm_90", {"vadd": VADD, "req": REQ}), backend or _RecordingCpu())


class _Stream:
    def __cuda_stream__(self):
        return (0, 0x5150)


class _Size(enum.IntEnum):
    TWO = 2


@pytest.mark.parametrize(("kwargs", "grid", "block", "shared", "stream"), [
    ({"grid": 4, "block": 32}, (4, 1, 1), (32, 1, 1), 0, 7),
    ({"grid": (4,), "block": (32, 2)}, (4, 1, 1), (32, 2, 1), 0, 7),
    ({"grid": [4, 3, 2], "block": [8, 4, 2], "shared_mem": MAX_SHARED}, (4, 3, 2), (8, 4, 2), MAX_SHARED, 7),
    ({"grid": (2**31 - 1, 65535), "block": 1024, "stream": _Stream()}, (2**31 - 1, 65535, 1), (1024, 1, 1), 0,
     0x5150),
])
def test_launcher_parses_the_launch_configuration_in_c(driver, python_calls, kwargs, grid, block, shared,
                                                        stream):
    kernel = _module().vadd
    a, b = torch.arange(4.0), torch.zeros(4)
    kernel(a, b, 3, grid=1, block=1, stream=7)  # a miss: the Python path builds and remembers the plan
    assert python_calls == [(a, b, 3)] and kernel._cached() == ((torch.Tensor, torch.Tensor, int),)
    driver.clear()
    kernel(a, b, -5, **{"stream": 7, **kwargs})
    assert len(python_calls) == 1, "the hit ran Python"
    params = struct.pack("<QQi", a.data_ptr(), b.data_ptr(), -5)
    assert driver == [(0xF00, grid, block, shared, stream, params)]
    assert kernel._backend.launched == [] and kernel._backend.last_kernel == ["vadd"]


def test_launcher_applies_the_default_block(driver, python_calls):
    kernel = _module().req
    x = torch.zeros(2)
    for block in ({}, {"block": None}):
        kernel(x, grid=3, stream=1, **block)
    assert [launch[2] for launch in driver] == [(64, 2, 1), (64, 2, 1)] and len(python_calls) == 1
    with pytest.raises(ArgumentError, match=r"^vadd: block= is required \(the kernel declares no .reqntid"):
        _module().vadd(x, x, 1, grid=1, stream=1)


@pytest.mark.parametrize(("kwargs", "config"), [
    ({"grid": _Size.TWO, "block": 1}, ((2, 1, 1), (1, 1, 1), 0, 0)),  # int subclasses: Python accepts
    ({"grid": 1, "block": (1, _Size.TWO)}, ((1, 1, 1), (1, 2, 1), 0, 0)),
    ({"grid": 1, "block": 1, "shared_mem": MAX_SHARED + 1}, ((1, 1, 1), (1, 1, 1), MAX_SHARED + 1, 0)),
    ({"grid": 1, "block": 1, "shared_mem": 2**70}, ((1, 1, 1), (1, 1, 1), 2**70, 0)),  # the loader's to judge
    ({"grid": 1, "block": 1, "stream": _Size.TWO}, ((1, 1, 1), (1, 1, 1), 0, 2)),
])
def test_what_c_declines_but_python_accepts_launches_through_python(driver, python_calls, kwargs, config):
    kernel = _module().vadd
    x = torch.zeros(4)
    kernel(x, x, 1, grid=1, block=1, stream=0)
    kernel(x, x, 2, **{"stream": 0, **kwargs})
    assert len(python_calls) == 2 and len(driver) == 1
    assert kernel._backend.launched == [((x.data_ptr(), x.data_ptr(), 2), *config)]


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda k, x: k(x, x, 1, grid=(1, 2, 3, 4), block=1), ArgumentError,
     r"^vadd: grid must be a positive int or a tuple of up to 3 positive ints \(got \(1, 2, 3, 4\)\)$"),
    (lambda k, x: k(x, x, 1, grid=1, block=0), ArgumentError, r"^vadd: block must be .*\(got 0\)$"),
    (lambda k, x: k(x, x, 1, grid=True, block=1), ArgumentError, r"grid must be .*\(got True\)$"),
    (lambda k, x: k(x, x, 1, grid=1, block=2**31), ArgumentError, r"block must be .*\(got 2147483648\)$"),
    (lambda k, x: k(x, x, 1, grid=1, block=1, shared_mem=-1), ArgumentError,
     r"^vadd: shared_mem must be a non-negative int \(got -1\)$"),
    (lambda k, x: k(x, x, 1, grid=1, block=1, stream=object()), ArgumentError, r"stream= must be"),
    (lambda k, x: k(x, x, 1, block=1), ArgumentError,
     r"^vadd: grid= is required; call it as vadd\(a, b, n, grid=\.\.\., block=\.\.\.\)$"),
    (lambda k, x: k(x, x, 1, grid=1, block=1, blocks=1), ArgumentError,
     r"^vadd: unexpected keyword argument 'blocks' \(did you mean block=\?\)"),
    (lambda k, x: k(x, x, 2**31, grid=1, block=1), ArgumentError, r"^vadd: argument 'n' \(i32\)"),
    (lambda k, x: k(x, x.double(), 1, grid=1, block=1), ArgumentError, r"^vadd: argument 'b' \(\*mut f32\)"),
    (lambda k, x: k(x, x, grid=1, block=1), ArgumentError, r"^vadd: takes 3 arguments"),
])
def test_every_error_is_the_python_one(driver, python_calls, call, error, match):
    kernel = _module().vadd
    x = torch.zeros(4)
    kernel(x, x, 1, grid=1, block=1, stream=0)
    driver.clear()
    with pytest.raises(error, match=match):
        call(kernel, x)
    assert driver == [] and kernel._backend.launched == [] and len(python_calls) == 2


def test_a_driver_error_is_the_loaders_error(driver):
    kernel = _module().vadd
    x = torch.zeros(4)
    kernel(x, x, 1, grid=1, block=1, stream=0)
    driver.code = 700
    with pytest.raises(CudaError, match=r"^vadd: code 700 grid=\(5, 1, 1\) block=\(32, 2, 1\) shared=16$"):
        kernel(x, x, 1, grid=5, block=(32, 2), shared_mem=16, stream=9)
    assert len(driver) == 2


def test_the_cache_keeps_the_latest_eight_type_tuples_and_a_declining_plan_falls_back(driver, python_calls):
    kernel = _module().vadd
    x = torch.zeros(4)
    kernel(x, x, 1, grid=1, block=1, stream=0)
    plan = next(iter(kernel._plans.values())).native
    kinds = [type(f"T{i}", (torch.Tensor,), {}) for i in range(9)]
    for kind in kinds:  # the C plans only take exact torch.Tensor: this plan declines these
        kernel._remember((kind, torch.Tensor, int), plan)
    kernel._remember((kinds[8], torch.Tensor, int), plan)  # known: replaced in place
    # round robin: the plain tuple (first in) went for T7, then T0 for T8
    assert kernel._cached() == tuple((k, torch.Tensor, int) for k in (kinds[7], kinds[8], *kinds[1:7]))
    # a hit that declines: Python, which makes the subclass its own C plan (a __dlpack__ capsule per launch)
    kernel(x.as_subclass(kinds[8]), x, 1, grid=1, block=1, stream=0)
    kernel(x, x, 1, grid=1, block=1, stream=0)  # evicted: Python, which launches the C plan itself
    assert len(python_calls) == 3 and len(driver) == 3 and len(kernel._backend.launched) == 0
    with pytest.raises(TypeError, match="_remember"):
        kernel._remember([torch.Tensor], plan)


def test_cooperative_and_switched_off_kernels_launch_through_python(driver, python_calls, monkeypatch):
    kernel = _module().vadd
    x = torch.zeros(4)
    kernel(x, x, 1, grid=1, block=1, stream=0)
    kernel.cooperative = True  # no C plan for cooperative launches: the cache is dropped
    assert kernel._cached() == ()
    kernel(x, x, 1, grid=1, block=1, stream=0)
    monkeypatch.setenv("PTXBRIDGE_FASTLAUNCH", "0")
    other = _module().vadd
    other(x, x, 1, grid=1, block=1, stream=0)
    other(x, x, 1, grid=1, block=1, stream=0)
    assert other._cached() == () and len(driver) == 1 and len(python_calls) == 4
    assert len(kernel._backend.launched) == 1 and len(other._backend.launched) == 2


def test_a_kernel_is_still_a_kernel():
    kernel = _module().req
    assert isinstance(kernel, Kernel) and kernel.name == "req" and kernel.signature is REQ
    assert repr(kernel) == f"<ptxbridge kernel {REQ}>"
    if fastpath._fastlaunch is not None and sys.version_info >= (3, 12):  # vectorcall is inherited
        assert Kernel.__flags__ & (1 << 11)


_WITHOUT_EXTENSION = """
import sys
sys.modules["ptxbridge.launch._fastlaunch"] = None  # as on a machine that could not build it
import numpy
from ptxbridge.abi import ArgumentError, Param, Pointer, Scalar, Signature, dtype
from ptxbridge.artifacts.image import Image
from ptxbridge.launch.module import Kernel, Module

from ptxbridge.loaders.base import Backend as Base

class Backend(Base):
    device_type, device_id, needs_buffers = 1, 0, False
    def __init__(self): self.launched = []
    def function(self, name): return name
    def prepare(self, function, packer, name, **extra):
        return lambda values, *rest: self.launched.append((values, *rest))
    launch = global_address = read_global = write_global = close = None

sig = Signature("k", (Param("a", Pointer(Scalar(dtype("f32")))), Param("n", Scalar(dtype("i32")))))
kernel = Module(Image(None, "sm_90", {"k": sig}), Backend()).k
x = numpy.zeros(4, numpy.float32)
kernel(x, 3, grid=(2, 2), block=[8])
try:
    kernel(x, 3, grid=0, block=1)
except ArgumentError as error:
    print(error)
launched = [((x.ctypes.data, 3), (2, 2, 1), (8, 1, 1), 0, 0)]
print(Kernel.__mro__[1].__name__, kernel._backend.launched == launched)
"""


def test_without_the_extension_kernels_are_plain_python():
    out = subprocess.run([sys.executable, "-c", _WITHOUT_EXTENSION], capture_output=True, text=True,
                         check=True)
    assert out.stdout.splitlines() == [
        "k: grid must be a positive int or a tuple of up to 3 positive ints (got 0)", "object True"]


@native
def test_plan_refuses_a_second_init_without_changing_its_buffer_size():
    plan = fastpath._fastlaunch.Plan(8, ((fastpath._INT, 0, ord("i"), -5, 5),))
    with pytest.raises(TypeError, match="initialized once"):
        plan.__init__(100000, ())  # used to set size first: pack then overran its 4 KiB stack buffer
    assert plan.pack((3,)) == struct.pack("<i", 3) + bytes(4)


@native
def test_a_failed_init_leaves_an_empty_plan_that_packs_nothing():
    plan = fastpath._fastlaunch.Plan.__new__(fastpath._fastlaunch.Plan)
    good, misplaced = (fastpath._INT, 0, ord("i"), -5, 5), (fastpath._INT, 64, ord("i"), -5, 5)
    with pytest.raises(ValueError, match="does not fit"):
        plan.__init__(8, (good, misplaced))  # the second spec lies outside the 8-byte buffer
    assert plan.pack((3, 4)) in (False, b"")
    plan.__init__(8, (good,))  # a failed init may be retried
    assert plan.pack((3,)) == struct.pack("<i", 3) + bytes(4)


_HAVE_VECTORCALL = 1 << 11  # Py_TPFLAGS_HAVE_VECTORCALL


@native
def test_kernel_calls_go_through_vectorcall_on_every_python():
    """Python 3.11 does not pass the vectorcall flag on to a class defined in Python; without it a
    launch built an argument tuple and a keyword dict per call.  The launcher sets it on subclasses
    that keep its __call__, and leaves a subclass that defines its own __call__ alone."""
    assert Kernel.__flags__ & _HAVE_VECTORCALL

    class Traced(Kernel):
        def __call__(self, *args, **kwargs):
            return ("traced", args, kwargs)

    assert not Traced.__flags__ & _HAVE_VECTORCALL
    traced = Traced.__new__(Traced)
    assert traced(1, grid=2) == ("traced", (1,), {"grid": 2})
