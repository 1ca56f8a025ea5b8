"""Idiomatic Rust kernels on the GPU (tests/rust/idiomatic.rs, from saved images): slices take torch
tensors, and a panic becomes ``KernelRaisedError`` after the launch while the CUDA context survives
(ptxbridge's handler records it and exits the thread: no ``trap``), so the next launch in the same
context works.  PTX and LTO-IR images both."""

from __future__ import annotations

import numpy as np
import pytest
from _images import image

from ptxbridge.abi.errors import KernelRaisedError

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


def u32(values) -> torch.Tensor:
    """A CUDA uint32 tensor (made through NumPy: torch has few uint32 kernels)."""
    return torch.from_numpy(np.asarray(values, np.uint32)).cuda()


@pytest.fixture(scope="module", params=["rust_panics", "rust_panics_lto"])
def rust(request):
    with image(request.param).load(0) as module:
        yield module


def test_slices_take_cuda_tensors(rust):
    x, y = torch.randn(10_000, device="cuda"), torch.randn(10_000, device="cuda")
    want = 1.5 * x + y
    rust.axpy(1.5, x, y, grid=40, block=256)
    torch.testing.assert_close(y, want, rtol=0, atol=0)  # Rust never fuses a * x + y


def test_iterators_and_integer_arithmetic_agree_with_numpy(rust):
    m = torch.arange(24, dtype=torch.float32, device="cuda")
    sums = torch.full((6,), float("nan"), device="cuda")
    rust.row_sums(m, 4, sums, grid=1, block=8)
    assert sums.tolist() == m.reshape(6, 4).sum(dim=1).tolist()
    v = np.array([7, 0, 300, 4000, 2**31 + 9], np.uint32)
    out = u32([0] * 30)
    rust.int_ops(u32(v), 3, out, grid=1, block=8)
    wide = v.astype(np.int64)
    assert out.cpu().numpy().reshape(-1, 6)[:, :2].tolist() == np.stack([wide % 3, wide // 3], 1).tolist()


def test_a_panic_raises_and_the_next_launch_in_the_context_works(rust):
    x, y = torch.arange(100, dtype=torch.float32, device="cuda"), torch.zeros(256, device="cuda")
    panic = (r"^axpy: thread \(\d+, 0, 0\) of block \(\d, 0, 0\) panicked at .*idiomatic\.rs:\d+:\d+: index "
             r"out of bounds: the len is 100 but the index is \d+$")
    with pytest.raises(KernelRaisedError, match=panic) as caught:
        rust.axpy(1.0, x, y, grid=2, block=128)
    assert 100 <= caught.value.ctaid[0] * 128 + caught.value.tid[0] < 256
    torch.cuda.synchronize()  # the context is not lost
    assert torch.equal(y[:100], x)
    y = torch.zeros(100, device="cuda")
    rust.axpy(2.0, x, y, grid=1, block=128)  # same module, same context: runs and reports nothing
    assert torch.equal(y, 2 * x)


def test_division_by_zero_and_expect_on_the_gpu(rust):
    with pytest.raises(KernelRaisedError, match=r"attempt to calculate the remainder with a divisor of zero"):
        rust.int_ops(u32(range(8)), 0, u32([0] * 48), grid=1, block=8)
    with pytest.raises(KernelRaisedError, match=r"thread \(1, 0, 0\) .*: every row has an even value$"):
        rust.first_even(u32([1, 2, 3, 5, 7, 9]), 3, u32([0, 0]), grid=1, block=2)
    out = u32([0, 0])
    rust.first_even(u32([1, 2, 3, 6, 8, 5]), 3, out, grid=1, block=2)
    assert out.cpu().numpy().tolist() == [2, 6]


def test_rust_panics_non_panicking_runs_for_memcheck(rust):
    """The compute-sanitizer run of scripts/gpu-check selects this: no panic, every access in bounds."""
    x = torch.randn(4096, device="cuda")
    y = torch.zeros(4096, device="cuda")
    rust.axpy(1.0, x, y, grid=16, block=256)
    rust.axpy_unchecked(1.0, x, y, grid=16, block=256)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, 2 * x, rtol=0, atol=0)


def test_a_kernel_built_with_panic_messages_location_reports_where_and_who():
    """The handler that keeps no message leaves the file name in the image's static data; the call
    path reads it from the GPU's copy of the image's globals."""
    with image("rust_panics_location").load(0) as module:
        x, y = torch.arange(100, dtype=torch.float32, device="cuda"), torch.zeros(256, device="cuda")
        where = r"^axpy: thread \(\d+, 0, 0\) of block \(\d, 0, 0\) panicked at .*idiomatic\.rs:\d+:\d+: "
        with pytest.raises(KernelRaisedError, match=where + r"\(message not kept"):
            module.axpy(1.0, x, y, grid=2, block=128)
        y = torch.zeros(100, device="cuda")
        module.axpy(2.0, x, y, grid=1, block=128)
        assert torch.equal(y, 2 * x)
