"""A kernel with cutile-rs's entry parameters and the signature that states its promises.

Plain CUDA C++ for NVRTC, apart from tests/_cutile_cache.py so that it needs no cuda.tile: the GPU
suite builds its ``tile_promises`` image from it on any machine with NVRTC, and
tests/test_cutile_cache.py runs it as PTX on the CPU loader.
"""

from __future__ import annotations

# A kernel with cutile-rs's entry parameters: x: &Tensor<f32, {[-1, -1]}>, y: &mut Tensor (a partition).
# Block (bx, by) writes y's tile: y = x + 1 over the partition's dims, through the strides given.
CUTILE_RS = """extern "C" __global__ void add_entry(const float* x, int xd0, int xd1, int xs0, int xs1,
                                     float* y, int yd0, int yd1, int ys0, int ys1,
                                     int pd0, int pd1, int ps0, int ps1) {
    for (int i = 0; i < pd0; i++)
        for (int j = 0; j < pd1; j++) {
            int r = blockIdx.x * pd0 + i, c = blockIdx.y * pd1 + j;
            if (r < yd0 && c < yd1) y[r * ps0 + c * ps1] = x[r * xs0 + c * xs1] + 1.0f;
        }
}
"""
PROMISED = ("#[convention(cutile-rs)] kernel add_entry("
            "x: Tensor<f32, 2>{static_stride: [_, 1], shape_div: [16, 16]}, "
            "y: Partition<f32, 2>{static_shape: [16, 16], static_stride: [_, 1], own_strides})")
