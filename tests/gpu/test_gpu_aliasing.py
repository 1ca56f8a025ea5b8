"""No-alias promises on a GPU (docs/safety.md): the refusals of tests/test_aliasing.py with torch CUDA
tensors, through the C fast path (a launch the C plan declines reaches Python, which raises)."""

from __future__ import annotations

import pytest
import test_fastlaunch  # skips this module without torch
from _images import image
from test_aliasing import OPT_OUT, SLICES, SLICES_CU

import ptxbridge
from ptxbridge.abi import ArgumentError

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

SOURCE = SLICES_CU + r"""
extern "C" __global__ void axpy(float s, const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = s * x[i] + y[i];
}
"""


@pytest.fixture
def module():
    from ptxbridge import nvrtc

    art = nvrtc.compile(SOURCE, arch="sm_90", signatures={"vadd_slices": SLICES})
    with ptxbridge.link([art], arch="sm_90").load(0) as loaded:
        yield loaded


python_calls = test_fastlaunch.python_calls  # calls that reached Kernel._call_python


def bytes_of(t, lo: int, hi: int) -> str:
    start = t.data_ptr()
    return f"[{start + lo:#x}, {start + hi:#x}) ({hi - lo} bytes)"


def test_rust_slices_through_the_c_plan(module, python_calls):
    kernel = module.vadd_slices
    buf = torch.arange(2048.0, device="cuda")
    a, c = buf[:1024], buf[1024:]
    kernel(a, a, c, grid=4, block=256)  # shared borrows overlap; c is a disjoint view of the same buffer
    kernel(a, a, c, grid=4, block=256)
    torch.cuda.synchronize()
    torch.testing.assert_close(c, 2 * a)
    assert next(iter(kernel._plans.values())).native is not None and len(python_calls) == 1
    with pytest.raises(ArgumentError) as error:
        kernel(a, buf[1024:], buf[1000:2024], grid=4, block=256)
    assert str(error.value) == (
        f"vadd_slices: argument 'c' (&mut [f32]) overlaps argument 'a' (&[f32]) in bytes "
        f"{bytes_of(buf, 4000, 4096)}: 'c' is a &mut borrow, which no other argument may overlap; {OPT_OUT}")
    assert len(python_calls) == 2  # the C plan declined, Python refused
    torch.cuda.synchronize()
    torch.testing.assert_close(c, 2 * a)  # nothing ran


def test_restrict_pointers_and_the_opt_outs(module, python_calls):
    kernel = module.axpy
    assert str(kernel.signature).endswith("(s: f32, x: *const restrict f32, y: *mut restrict f32, n: i32)")
    buf = torch.ones(2048, device="cuda")
    kernel(2.0, buf[:1024], buf[1024:], 1024, grid=4, block=256)
    refused = r"^axpy: argument 'y' \(\*mut restrict f32\) overlaps argument 'x' \(\*const restrict f32\) in "
    with pytest.raises(ArgumentError, match=refused + r"bytes .*'y' is a __restrict__ pointer"):
        kernel(2.0, buf[:1024], buf[512:1536], 1024, grid=4, block=256)
    kernel(2.0, buf[:1024], buf[:1024], 1024, grid=4, block=256, check_aliasing=False)  # y = 3 x, in place
    calls = len(python_calls)
    module.check_aliasing = False
    kernel(2.0, buf[:1024], buf[:1024], 1024, grid=4, block=256)  # y = 3 x again: 9
    kernel(2.0, buf[:1024], buf[:1024], 1024, grid=4, block=256)  # the C plan without pairs: 27
    assert len(python_calls) == calls + 1  # the first call after the switch builds the plan
    torch.cuda.synchronize()
    assert buf[:1024].eq(27).all() and buf[1024:].eq(3).all()


def test_cutile_alias_groups_on_the_gpu():
    name = "tile_vadd_groups"  # a and b in cuTile alias group "in", c in none (_images.py)
    with image("tile_groups").load(0) as loaded:
        kernel = loaded[name]
        buf = torch.arange(2048.0, device="cuda")
        kernel(buf[:1024], buf[:1024], buf[1024:], 256, grid=4)  # a and b share group 0
        torch.cuda.synchronize()
        torch.testing.assert_close(buf[1024:], 2 * buf[:1024])
        groups = rf"^{name}: argument 'a' .* overlaps argument 'c' .* different cuTile alias groups"
        with pytest.raises(ArgumentError, match=groups):
            kernel(buf[:1024], buf[1024:], buf[512:1536], 256, grid=4)
        with pytest.raises(ArgumentError, match=r"argument 'c' .* overlaps itself"):
            kernel(buf[:1024], buf[:1024], buf[1536:1537].expand(1024), 256, grid=4)
