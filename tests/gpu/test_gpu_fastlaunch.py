"""On a GPU: the C launch plan takes CuPy arrays, numba device arrays and torch tensors on pointers and
numba arrays, launches from C from the second call on (``Kernel._cached``), on the stream the Python
path would pick, and computes what the Python path computes."""

from __future__ import annotations

import numpy as np
import pytest
from _images import image

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

from test_gpu_call import cpp  # noqa: F401 (the C++ image's module fixture)


def _twice(kernel, *args, **launch):
    """Two calls: the first plans (Python), the second must run from C."""
    for _ in range(2):
        kernel(*args, **launch)
    assert tuple(map(type, args)) in kernel._cached(), "the C launcher holds no plan for these types"


def test_cupy_arrays_launch_from_c_on_cupys_current_stream(cpp):  # noqa: F811
    cupy = pytest.importorskip("cupy")
    n = 1000
    a, b = (cupy.random.standard_normal(n, dtype=cupy.float32) for _ in range(2))
    c = cupy.full(n, cupy.nan, dtype=cupy.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        _twice(cpp.vadd3, a, b, c, n, grid=4, block=256)
    stream.synchronize()
    np.testing.assert_allclose(cupy.asnumpy(c), cupy.asnumpy(a + b), rtol=1e-6)
    c.fill(cupy.nan)
    _twice(cpp.vadd3, a, b, c, n, grid=4, block=256, stream=stream.ptr)
    stream.synchronize()
    np.testing.assert_allclose(cupy.asnumpy(c), cupy.asnumpy(a + b), rtol=1e-6)


def test_numba_device_arrays_launch_from_c(cpp):  # noqa: F811
    from numba import cuda

    numba_module = image("numba").load(0)
    n = 777
    x = np.random.default_rng().standard_normal(n).astype(np.float32)
    da, db, dc = cuda.to_device(x), cuda.to_device(x * 2), cuda.to_device(np.full(n, np.nan, np.float32))
    _twice(cpp.vadd3, da, db, dc, n, grid=4, block=256)
    cpp.synchronize()
    np.testing.assert_allclose(dc.copy_to_host(), x * 3, rtol=1e-6)
    base = np.random.default_rng().standard_normal((40, 60)).astype(np.float32)
    dx = cuda.to_device(base)[::2, 1::3]  # strided: a numba Array of layout A takes it
    dout = cuda.to_device(np.full(dx.shape, np.nan, np.float32))
    _twice(numba_module.scale2d, dx, dout, 2.5, grid=(4, 4), block=(16, 16))
    numba_module.synchronize()
    np.testing.assert_allclose(dout.copy_to_host(), 2.5 * base[::2, 1::3], rtol=1e-6)


def test_torch_tensors_on_numba_arrays_launch_from_c():
    numba_module = image("numba").load(0)
    base = torch.randn(64, 90, device="cuda")
    x = base[3::2, 1::3]
    out = torch.full((x.shape[1], x.shape[0]), float("nan"), device="cuda").t()  # column-major view
    _twice(numba_module.scale2d, x, out, 1.5, grid=(4, 4), block=(16, 16))
    torch.testing.assert_close(out, 1.5 * x)
    f_order = torch.randn(50, 70, device="cuda").t().contiguous().t()
    total = torch.full((70,), float("nan"), device="cuda")
    _twice(numba_module.colsum, f_order, total, grid=1, block=128)
    torch.testing.assert_close(total, f_order.sum(0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("producer", ["torch", "cupy", "numba"])
def test_structs_holding_tensors_launch_from_c(cpp, producer):  # noqa: F811
    """``span_axpy(Span x, Span y, float a)``, ``struct Span { float* data; unsigned long long len; }``:
    dicts holding any producer's arrays take the C path and compute what the kernel says."""
    n = 1000
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    if producer == "torch":
        dx, dy, back = torch.from_numpy(x).cuda(), torch.ones(n, device="cuda"), lambda t: t.cpu().numpy()
    elif producer == "cupy":
        cupy = pytest.importorskip("cupy")
        dx, dy, back = cupy.asarray(x), cupy.ones(n, dtype=cupy.float32), cupy.asnumpy
    else:
        from numba import cuda

        dx, dy, back = cuda.to_device(x), cuda.to_device(np.ones(n, np.float32)), lambda a: a.copy_to_host()
    _twice(cpp.span_axpy, {"data": dx, "len": n}, {"data": dy, "len": n}, 0.5, grid=4, block=256)
    cpp.synchronize()
    half = 0.5 * x  # exact in float32, so each launch's y += a * x rounds once, fused or not
    np.testing.assert_array_equal(back(dy), half + (half + np.float32(1)))  # two launches, in float32


@pytest.mark.parametrize("producer", ["torch", "numba"])
def test_numba_tuples_of_arrays_launch_from_c(producer):
    """A numba ``UniTuple(float32[::1], 2)`` argument: each array its own parameters, read in C."""
    module = image("numba").load(0)
    n = 513
    a, b = (np.random.default_rng(k).standard_normal(n).astype(np.float32) for k in (2, 3))
    if producer == "torch":
        pair, out, back = (torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()), \
            torch.full((n,), float("nan"), device="cuda"), lambda t: t.cpu().numpy()
    else:
        from numba import cuda

        pair, out = (cuda.to_device(a), cuda.to_device(b)), cuda.to_device(np.full(n, np.nan, np.float32))
        back = lambda d: d.copy_to_host()  # noqa: E731
    _twice(module.pair_add, pair, out, grid=3, block=256)
    module.synchronize()
    np.testing.assert_allclose(back(out), a + b, rtol=1e-6)
