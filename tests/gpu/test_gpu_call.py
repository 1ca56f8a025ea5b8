"""End to end on a GPU: every frontend's kernels called with torch / CuPy / numba arrays.

Each result is checked against a torch or NumPy reference on fresh random
inputs, with outputs poisoned (NaN) first so unwritten elements fail.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from _images import image

from ptxbridge.abi import AbiMismatchError, ArgumentError, Param, Scalar, Signature, dtype
from ptxbridge.artifacts.image import Image

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def cpp():
    with image("cpp").load(0) as module:
        yield module


def rand(*shape, gen=None):
    return torch.randn(*shape, device="cuda", generator=gen)


def poisoned(*shape):
    return torch.full(shape, float("nan"), device="cuda")


def test_vadd3_on_torch_tensors(cpp):
    n = 1000
    a, b, c = rand(n), rand(n), poisoned(n)
    cpp.vadd3(a, b, c, n, grid=(n + 255) // 256, block=256)
    torch.testing.assert_close(c, a + b)


def test_vadd3_on_cupy_and_numba_arrays(cpp):
    cupy = pytest.importorskip("cupy")
    from numba import cuda

    n = 777
    a, b = (cupy.random.standard_normal(n, dtype=cupy.float32) for _ in range(2))
    c = cupy.full(n, cupy.nan, dtype=cupy.float32)
    cpp.vadd3(a, b, c, n, grid=4, block=256)
    np.testing.assert_allclose(cupy.asnumpy(c), cupy.asnumpy(a + b), rtol=1e-6)
    x = np.random.default_rng().standard_normal(n).astype(np.float32)
    da, db, dc = cuda.to_device(x), cuda.to_device(x * 2), cuda.to_device(np.full(n, np.nan, np.float32))
    cpp.vadd3(da, db, dc, n, grid=4, block=256)
    cpp.synchronize()
    np.testing.assert_allclose(dc.copy_to_host(), x * 3, rtol=1e-6)


def test_vadd3_on_jax_arrays_through_dlpack(cpp):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave GPU memory to torch
    jax = pytest.importorskip("jax")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX sees no GPU")
    n = 600
    host_a, host_b = (np.random.default_rng().standard_normal(n).astype(np.float32) for _ in range(2))
    ja, jb = jax.device_put(host_a), jax.device_put(host_b)
    c = poisoned(n)
    cpp.vadd3(ja, jb, c, n, grid=3, block=256)  # JAX arrays: versioned DLPack capsules, read-only
    np.testing.assert_allclose(c.cpu().numpy(), host_a + host_b, rtol=1e-6)


@dataclasses.dataclass
class Affine:
    scale: float
    shift: int
    bias: float


def test_struct_by_value_from_dict_and_dataclass(cpp):
    n = 300
    x, y = rand(n), poisoned(n)
    cpp.affine({"scale": 2.5, "shift": -3, "bias": 0.25}, x, y, n, grid=2, block=256)
    torch.testing.assert_close(y, 2.5 * x - 3 + 0.25)
    cpp.affine(Affine(0.5, 7, -1.0), x, y, n, grid=2, block=256)
    torch.testing.assert_close(y, 0.5 * x + 6)


def test_module_globals_read_and_write(cpp):
    n = 256
    cpp.globals["gain"] = np.float32(-4.0)
    assert np.frombuffer(cpp.globals["gain"], np.float32)[0] == -4.0
    before = int(np.frombuffer(cpp.globals["launches"], np.uint32)[0])
    x, y = rand(n), poisoned(n)
    cpp.scaled(x, y, n, grid=1, block=256)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, -4.0 * x)
    assert int(np.frombuffer(cpp.globals["launches"], np.uint32)[0]) == before + 1


def test_dynamic_shared_memory_above_48k(cpp):
    n = 20000  # 80000 bytes of dynamic shared memory
    x, y = rand(n), poisoned(n)
    cpp.reverse_shared(x, y, n, grid=1, block=512, shared_mem=4 * n)
    torch.testing.assert_close(y, x.flip(0))


def test_grid_sync_kernel_gets_a_cooperative_launch():
    module = image("coop").load(0)
    assert module.neighbour_sum.cooperative  # read from the cubin's .nv.info
    n = 64 * 256
    x, y = rand(n), poisoned(n)
    doubled = 2 * x
    module.neighbour_sum(x, y, n, grid=64, block=256)
    torch.testing.assert_close(y, doubled + doubled.roll(-256))


def test_numba_kernel_on_strided_torch_views():
    module = image("numba").load(0)
    base, out_base = rand(64, 90), poisoned(90, 64)
    x = base[3::2, 1::3]  # non-contiguous both ways
    out = out_base.t()[5:5 + x.shape[0], : x.shape[1]]
    module.scale2d(x, out, 1.5, grid=(4, 4), block=(16, 16))
    torch.testing.assert_close(out, 1.5 * x)


def test_numba_fortran_kernel_takes_only_fortran_arrays():
    module = image("numba").load(0)
    from numba import cuda

    c_order = rand(50, 70)
    f_order = c_order.t().contiguous().t()  # same values, column-major
    out = poisoned(70)
    module.colsum(f_order, out, grid=1, block=128)
    torch.testing.assert_close(out, c_order.sum(0), rtol=1e-4, atol=1e-4)
    with pytest.raises(ArgumentError, match=r"colsum: argument 'x' .*Fortran-contiguous"):
        module.colsum(c_order, out, grid=1, block=128)
    host = np.asfortranarray(np.random.default_rng().standard_normal((40, 30)).astype(np.float32))
    d_out = cuda.to_device(np.full(30, np.nan, np.float32))
    module.colsum(cuda.to_device(host), d_out, grid=1, block=64)
    module.synchronize()
    np.testing.assert_allclose(d_out.copy_to_host(), host.sum(0), rtol=1e-4, atol=1e-4)


def test_rust_saxpy():
    module = image("rust").load(0)
    n = 5000
    x, y = rand(n), rand(n)
    expected = 3.0 * x + y
    module.saxpy(3.0, x, y, n, grid=(n + 255) // 256, block=256)
    torch.testing.assert_close(y, expected)


def test_cuda_oxide_conformance_kernels():
    module = image("oxide").load(0)
    n = 1000
    a, b, c = rand(n), rand(n), poisoned(n)
    module.vecadd(a, b, c, grid=4, block=256)  # &[f32], &[f32], DisjointSlice<f32>
    torch.testing.assert_close(c, a + b)
    x = rand(48, 40)  # transpose: DisjointSlice with a runtime 2-D index (u32 row width)
    out = poisoned(40, 48)
    module.transpose(x, out, 40, grid=(3, 3), block=(16, 16))
    torch.testing.assert_close(out, x.t())
    y = poisoned(300)
    module.tagged(2.5, None, (), y, grid=2, block=256)  # zero-sized parameters take None / ()
    assert bool((y == 2.5).all())
    wrong = r"vecadd: argument 'c' \(DisjointSlice<f32>\) got float64 tensor on cuda:0; expected float32"
    with pytest.raises(ArgumentError, match=wrong):
        module.vecadd(a, b, c.double(), grid=4, block=256)


def test_cutile_kernel_with_reqntid_default_block_and_promises():
    module = image("tile").load(0)
    n = 256 * 7
    a, b, c = rand(n), rand(n), poisoned(n)
    module.tile_vadd(a, b, c, 256, grid=7)
    torch.testing.assert_close(c, a + b)
    with pytest.raises(ArgumentError, match=r"tile_vadd: argument 'a' .*divisible by 256 \(got 300"):
        module.tile_vadd(a[:300], b[:300], c[:300], 256, grid=2)


def test_cross_language_calls():
    cross = image("cross").load(0)
    x, y = rand(1000), rand(1000)
    expected = x + y
    cross.calls_cpp(x, y, grid=4, block=256)  # numba kernel -> C++ device function
    torch.testing.assert_close(y, expected)
    z = rand(1000)
    expected = z * 2.0 + 1.0
    cross.calls_rust(z, grid=4, block=256)  # numba kernel -> Rust device function
    torch.testing.assert_close(z, expected)
    lto = image("lto").load(0)
    w = rand(1000)
    expected = w * 2.0 + 1.0
    lto.calls_numba(w, 1000, grid=4, block=256)  # C++ kernel -> numba device function (LTO-IR)
    torch.testing.assert_close(w, expected)


def test_device_side_launch_through_the_linked_device_runtime():
    module = image("dynpar").load(0)
    x = rand(32)
    expected = 2 * x
    module.parent(x, grid=1, block=32)  # parent launches child<<<1, 32>>> from the device
    torch.testing.assert_close(x, expected)


def test_wrong_device_and_dtype_are_argument_errors(cpp):
    a = rand(8)
    with pytest.raises(ArgumentError, match=r"vadd3: argument 'c' \(\*mut f32\) got float32 tensor on cpu; "
                                              r"expected float32 on cuda:0"):
        cpp.vadd3(a, a, a.cpu(), 8, grid=1, block=8)
    with pytest.raises(ArgumentError, match=r"argument 'b' .*got float64 tensor on cuda:0"):
        cpp.vadd3(a, a.double(), a, 8, grid=1, block=8)


def test_signature_disagreeing_with_the_driver_fails_at_load():
    good = image("cpp")
    sig = good.kernels["add_one"]
    wrong = Signature("add_one", (sig.params[0], Param("n", Scalar(dtype("i64")))), sig.convention)
    message = (r"add_one: parameter 'n' lowers to 1 param \(s64 at offset 8\) but the kernel add_one as "
               r"the driver reports it has 1 \(4 bytes at offset 8\)")
    with pytest.raises(AbiMismatchError, match=message):
        Image(good.cubin, good.arch, {"add_one": wrong}).load(0)


def test_kernel_fault_is_reported_naming_the_kernel():
    script = textwrap.dedent("""
        import torch
        from _images import image
        from ptxbridge.abi import CudaError
        module = image("cpp").load(0)
        x = torch.zeros(4, device="cuda")
        module.out_of_bounds(x, 1 << 40, grid=1, block=32)
        try:
            module.synchronize()
        except CudaError as exc:
            print("FAULT", exc.code, exc)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), *sys.path])}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert "FAULT CUDA_ERROR_ILLEGAL_ADDRESS" in run.stdout, run.stdout + run.stderr
    assert "out_of_bounds" in run.stdout


def test_concurrent_launches_from_threads(cpp):
    n, rounds, workers = 4096, 200, 8
    tensors = [torch.zeros(n, device="cuda") for _ in range(workers)]
    errors = []

    def work(t):
        try:
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                for _ in range(rounds):
                    cpp.add_one(t, n, grid=n // 256, block=256)
            stream.synchronize()
        except Exception as exc:  # collected and re-raised on the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in tensors]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    for t in tensors:
        assert bool((t == rounds).all())


def test_torch_cuda_graph_capture_and_replay(cpp):
    n = 2048
    a, b, c = rand(n), rand(n), poisoned(n)
    cpp.vadd3(a, b, c, n, grid=8, block=256)  # warm: plans built outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        cpp.vadd3(a, b, c, n, grid=8, block=256)
        cpp.add_one(c, n, grid=8, block=256)
    for _ in range(3):
        a.copy_(rand(n))
        c.fill_(float("nan"))
        graph.replay()
        torch.testing.assert_close(c, a + b + 1)


def test_stream_ordering_follows_torch_current_and_explicit_streams(cpp):
    n = 1 << 20
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = torch.full((n,), 2.0, device="cuda")
        x.mul_(3.0)  # queued on `side`; the kernel must run after it
        cpp.add_one(x, n, grid=n // 256, block=256)  # launches on `side` (torch's current)
    other = torch.cuda.Stream()
    other.wait_stream(side)
    cpp.add_one(x, n, grid=n // 256, block=256, stream=other)  # explicit stream wins
    other.synchronize()
    assert bool((x == 8.0).all())


def test_kernel_params_mode_gives_the_same_results(monkeypatch):
    monkeypatch.setenv("PTXBRIDGE_LAUNCH_PARAMS", "pointers")
    module = image("cpp").load(0)
    x, y = rand(300), poisoned(300)
    module.affine({"scale": 2.0, "shift": 1, "bias": 0.5}, x, y, 300, grid=2, block=256)
    torch.testing.assert_close(y, 2.0 * x + 1.5)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_tensors_on_another_gpu_use_a_sibling_instance(cpp):
    with torch.cuda.device(1):
        a, b, c = torch.randn(64, device="cuda:1"), torch.randn(64, device="cuda:1"), torch.empty(
            64, device="cuda:1")
        cpp.vadd3(a, b, c, 64, grid=1, block=64)
        torch.testing.assert_close(c, a + b)
