//! cuda-oxide kernels that call libdevice math, as cuda-oxide writes their NVVM IR for any target
//! (`opaque.ll`): NVVM IR 2.0 with opaque pointers, which libNVVM reads only from compute_100 on,
//! kernels marked in `!nvvm.annotations` alone, the modern data layout and, as older cuda-oxide
//! releases wrote it, no `!nvvmir.version`.  ptxbridge rewrites it for sm_80 / sm_90.
//! This source is *read*, never compiled (it needs the cuda-device crate).

use cuda_device::{DisjointSlice, kernel, launch_bounds, thread};

/// y = ln(1 + e^x).
#[kernel]
pub fn softplus(x: &[f32], mut y: DisjointSlice<f32>) {
    let idx = thread::index_1d();
    let i = idx.get();
    if let Some(out) = y.get_mut(idx) {
        *out = x[i].exp().ln_1p();
    }
}

/// y = x^p * scale, the product in f64; at most 256 threads a block.
#[kernel]
#[launch_bounds(256)]
pub fn powscale(x: &[f32], mut y: DisjointSlice<f32>, p: f32, scale: f64) {
    let idx = thread::index_1d();
    let i = idx.get();
    if let Some(out) = y.get_mut(idx) {
        *out = (x[i].powf(p) as f64 * scale) as f32;
    }
}
