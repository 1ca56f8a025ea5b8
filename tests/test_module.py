"""Module / Kernel with a recording backend: plans, packing, streams, launch config, globals."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from ptxbridge.abi import (
    ArgumentError,
    LaunchMeta,
    Param,
    Pointer,
    Scalar,
    Signature,
    Slice,
    dtype,
)
from ptxbridge.abi.devices import DLPACK_CPU
from ptxbridge.artifacts.image import Image
from ptxbridge.launch.module import Module
from ptxbridge.loaders import parse_device
from ptxbridge.loaders.base import Backend

F32, I32 = dtype("f32"), dtype("i32")
VADD = Signature("vadd3", (Param("a", Pointer(Scalar(F32), False)), Param("b", Pointer(Scalar(F32), False)),
                           Param("c", Pointer(Scalar(F32))), Param("n", Scalar(I32))))
SAXPY = Signature("saxpy", (Param("a", Scalar(F32)), Param("x", Slice(F32)), Param("y", Slice(F32, True))),
                  launch=LaunchMeta(reqntid=(128, 1, 1)))
IMAGE = Image(None, None, {"vadd3": VADD, "saxpy": SAXPY})


class Recording(Backend):
    """A loader recording each launch (the general, buffer-passing path)."""

    device_type, device_id = DLPACK_CPU, 0

    def __init__(self):
        self.launches, self.closed, self.globals = [], 0, {"counter": b"\0" * 4}

    def function(self, name):
        return f"fn:{name}"

    def launch(self, function, grid, block, shared_mem, stream, params, buffers):
        self.launches.append((function, grid, block, shared_mem, stream, params, tuple(buffers)))

    def read_global(self, name):
        return self.globals[name]

    def write_global(self, name, data):
        self.globals[name] = data

    def global_address(self, name):
        return id(self.globals[name]), len(self.globals[name])

    def close(self):
        self.closed += 1


class Prepared(Recording):
    """A backend with the fast path: prepare once per plan, run per launch."""

    needs_buffers = False

    def __init__(self):
        super().__init__()
        self.prepared = []

    def prepare(self, function, packer, name, cooperative=False):
        self.prepared.append(name)

        def run(values, grid, block, shared_mem, stream):
            self.launches.append((function, grid, block, shared_mem, stream, packer.pack(values), ()))

        return run


def test_kernels_by_attribute_and_item_and_unknown_names():
    module = Module(IMAGE, Recording())
    assert module.vadd3 is module["vadd3"] and module.kernel_names == ("vadd3", "saxpy")
    with pytest.raises(KeyError, match=r"no kernel 'nope' .*vadd3, saxpy"):
        module["nope"]
    with pytest.raises(AttributeError, match="no kernel 'nope'"):
        _ = module.nope
    assert "saxpy" in dir(module)


def test_launch_packs_the_exact_parameter_buffer_and_passes_buffers():
    backend = Recording()
    module = Module(IMAGE, backend)
    a, b, c = (np.random.default_rng(0).random(8, dtype=np.float32) for _ in range(3))
    module.vadd3(a, b, c, 8, grid=(2,), block=4)
    function, grid, block, shared, stream, params, buffers = backend.launches[-1]
    assert (function, grid, block, shared, stream) == ("fn:vadd3", (2, 1, 1), (4, 1, 1), 0, 0)
    assert params == struct.pack("<QQQi", a.ctypes.data, b.ctypes.data, c.ctypes.data, 8)
    assert len(params) == VADD.layout.size == 28
    assert [(x.ptr, x.nbytes) for x in buffers] == [(v.ctypes.data, 32) for v in (a, b, c)]


def test_reqntid_is_the_default_block_and_block_is_required_otherwise():
    backend = Recording()
    module = Module(IMAGE, backend)
    x = np.zeros(4, np.float32)
    module.saxpy(1.0, x, x.copy(), grid=1)
    assert backend.launches[-1][2] == (128, 1, 1)
    with pytest.raises(ArgumentError, match="block= is required"):
        module.vadd3(x, x, x, 4, grid=1)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"grid": (1, 2, 3, 4), "block": 1}, r"grid must be .*\(got \(1, 2, 3, 4\)\)"),
    ({"grid": 1, "block": -32}, r"block must be .*\(got -32\)"),
    ({"grid": 1.0, "block": 32}, "grid must be"),
    ({"grid": 1, "block": 32, "shared_mem": -1}, "shared_mem must be a non-negative int"),
])
def test_launch_configuration_is_checked(kwargs, match):
    x = np.zeros(4, np.float32)
    with pytest.raises(ArgumentError, match=match):
        Module(IMAGE, Recording()).vadd3(x, x, x, 4, **kwargs)


def test_plans_are_built_once_per_argument_types(monkeypatch):
    import ptxbridge.launch.module as module_mod

    built = []
    real = module_mod.make_binder
    monkeypatch.setattr(module_mod, "make_binder", lambda *a: built.append(a[2]) or real(*a))
    backend = Prepared()
    module = Module(IMAGE, backend)
    x = np.zeros(4, np.float32)
    for n in range(5):
        module.vadd3(x, x, x, n, grid=1, block=4)
    assert len(built) == 4 and backend.prepared == ["vadd3"]
    module.vadd3(x, x, x, np.int32(3), grid=1, block=4)  # a new type of n: one more plan
    assert len(built) == 8 and backend.prepared == ["vadd3", "vadd3"]
    assert [struct.unpack_from("<i", p[5], 24)[0] for p in backend.launches] == [0, 1, 2, 3, 4, 3]


def test_explicit_streams_reach_the_backend():
    class Stream:
        def __cuda_stream__(self):
            return (0, 0x1234)

    backend = Prepared()
    x = np.zeros(4, np.float32)
    Module(IMAGE, backend).vadd3(x, x, x, 4, grid=1, block=4, stream=Stream())
    assert backend.launches[-1][4] == 0x1234


def test_argument_count_and_errors_name_the_kernel():
    x = np.zeros(4, np.float32)
    module = Module(IMAGE, Recording())
    with pytest.raises(ArgumentError, match=r"vadd3: takes 4 arguments \(a, b, c, n\) \(got 3\)"):
        module.vadd3(x, x, x, grid=1, block=4)
    with pytest.raises(ArgumentError, match=r"vadd3: argument 'n' \(i32\) 4294967296 does not fit"):
        module.vadd3(x, x, x, 2**32, grid=1, block=4)


def test_globals_close_and_context_manager():
    backend = Recording()
    with Module(IMAGE, backend) as module:
        module.globals["counter"] = np.int32(7)
        assert module.globals["counter"] == struct.pack("<i", 7)
    assert backend.closed == 1


def test_torch_cpu_tensors_through_the_module():
    torch = pytest.importorskip("torch")
    backend = Recording()
    x, y = torch.rand(16), torch.rand(16)
    Module(IMAGE, backend).saxpy(2.0, x, y, grid=1)
    params = backend.launches[-1][5]
    assert params == struct.pack("<f4xQQQQ", 2.0, x.data_ptr(), 16, y.data_ptr(), 16)
    with pytest.raises(ArgumentError, match=r"saxpy: argument 'y' \(&mut \[f32\]\) got float64 tensor"):
        Module(IMAGE, backend).saxpy(2.0, x, y.double(), grid=1)


@pytest.mark.parametrize(("spec", "expected"), [
    (None, None), ("cpu", ("cpu", 0)), (0, ("cuda", 0)), (3, ("cuda", 3)), ("cuda", ("cuda", 0)),
    ("cuda:2", ("cuda", 2)), (" CUDA:1 ", ("cuda", 1)),
])
def test_parse_device(spec, expected):
    assert parse_device(spec) == expected


@pytest.mark.parametrize("spec", [-1, "tpu", "cuda:x", "cpu:1", True, 1.0])
def test_parse_device_rejects(spec):
    with pytest.raises(ArgumentError, match="device must be"):
        parse_device(spec)


def test_parse_device_takes_torch_devices():
    torch = pytest.importorskip("torch")
    assert parse_device(torch.device("cuda", 1)) == ("cuda", 1)
    assert parse_device(torch.device("cpu")) == ("cpu", 0)


ADD_ONE_PTX = b"""
.version 7.0
.target sm_80
.address_size 64
.visible .entry add_one(.param .u64 p_x, .param .u32 p_n)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    .reg .f32 %f<3>;
    .reg .pred %p<2>;
    ld.param.u64 %rd1, [p_x];
    ld.param.u32 %r1, [p_n];
    mov.u32 %r2, %tid.x;
    setp.ge.u32 %p1, %r2, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r2, 4;
    add.s64 %rd2, %rd2, %rd3;
    ld.global.f32 %f1, [%rd2];
    add.f32 %f2, %f1, 0f3F800000;
    st.global.f32 [%rd2], %f2;
DONE:
    ret;
}
"""


def test_load_image_cpu_runs_kernels_in_the_emulator():
    emulator = pytest.importorskip("ptxbridge.loaders.emulator")
    if not hasattr(emulator, "EmulatorBackend"):
        pytest.skip("the CPU emulator is not there yet")
    sig = Signature("add_one", (Param("x", Pointer(Scalar(F32))), Param("n", Scalar(dtype("u32")))))
    with Image(None, None, {"add_one": sig}, ptx=(ADD_ONE_PTX,)).load("cpu") as module:
        assert module.device == "cpu"
        x = np.random.default_rng().random(40, dtype=np.float32)
        expected = x + np.float32(1)
        expected[37:] = x[37:]
        module.add_one(x, 37, grid=1, block=64)
        np.testing.assert_array_equal(x, expected)
        y = module.to_device(np.arange(4, dtype=np.float32))
        module.add_one(y, 4, grid=1, block=4)
        np.testing.assert_array_equal(module.to_host(y), [1, 2, 3, 4])


def test_cooperative_kernels_launch_cooperatively_and_can_be_switched():
    class Cooperative(Prepared):
        cooperative_kernels = frozenset({"vadd3"})

        def prepare(self, function, packer, name, cooperative=False):
            self.prepared.append((name, cooperative))
            return lambda *args: None

    backend = Cooperative()
    module = Module(IMAGE, backend)
    x = np.zeros(4, np.float32)
    assert module.vadd3.cooperative and not module.saxpy.cooperative
    module.vadd3(x, x, x, 4, grid=1, block=4)
    module.vadd3.cooperative = False  # plans are rebuilt
    module.vadd3(x, x, x, 4, grid=1, block=4)
    assert backend.prepared == [("vadd3", True), ("vadd3", False)]


def test_grid_sync_is_read_from_the_cubin(monkeypatch):
    from ptxbridge.abi.errors import ToolchainError
    from ptxbridge.linker import link
    from ptxbridge.loaders.cuda import cooperative_kernels

    monkeypatch.syspath_prepend(str(Path(__file__).parent / "gpu"))
    import _images

    try:
        coop = link(_images._coop(), arch="sm_90")
    except ToolchainError as exc:
        pytest.skip(str(exc))
    assert cooperative_kernels(coop.cubin) == {"neighbour_sum"}
    assert cooperative_kernels(link(_images._cpp(), arch="sm_90").cubin) == frozenset()
