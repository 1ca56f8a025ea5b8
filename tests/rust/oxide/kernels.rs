//! cuda-oxide SIMT kernels (the source `cargo oxide` compiles; it needs the
//! cuda-device crate, so it is *read* here, never compiled).  The PTX with the
//! same parameter shapes is built from `kernels_ptx.rs` by plain rustc.
#![no_std]

use core::marker::PhantomData;
use cuda_device::thread::Runtime2DIndex;
use cuda_device::{kernel, launch_bounds, thread, DisjointSlice};

/// Not #[repr(C)]: passed as one blob in rustc's layout (weight, scale, count: 16 bytes, align 8).
#[derive(Clone, Copy)]
pub struct Params {
    pub count: u8,
    pub weight: f64,
    pub scale: f32,
}

#[kernel]
#[launch_bounds(256, 2)]
pub fn vecadd(a: &[f32], b: &[f32], mut c: DisjointSlice<f32>) {
    let idx = thread::index_1d();
    let i = idx.get();
    if let Some(c_elem) = c.get_mut(idx) {
        *c_elem = a[i] + b[i];
    }
}

/// A runtime 2-D index space: the slice carries its row width (a u32) to the kernel.
#[kernel]
pub fn transpose(input: &[f32], mut out: DisjointSlice<'_, f32, Runtime2DIndex>, cols: u32) {
    if let Some(idx) = thread::index_2d_runtime(&out) {
        let (row, col) = idx.coords();
        if let Some(o) = out.get_mut(idx) {
            *o = input[(col * cols + row) as usize];
        }
    }
}

/// Zero-sized parameters produce no PTX parameter.
#[kernel]
pub fn tagged(x: f32, _marker: PhantomData<u32>, _unit: (), mut out: DisjointSlice<f32>) {
    if let Some(o) = out.get_mut(thread::index_1d()) {
        *o = x;
    }
}

#[kernel]
pub fn blob(p: Params, mut out: DisjointSlice<f64>) {
    if let Some(o) = out.get_mut(thread::index_1d()) {
        *o = p.weight * p.scale as f64 + p.count as f64;
    }
}

/// Generic: one entry `scale_TID_<32 hex>` per instantiation.
#[kernel(f32, f64)]
pub fn scale<T: Copy + core::ops::Mul<Output = T>>(x: &[T], factor: T, mut out: DisjointSlice<T>) {
    let idx = thread::index_1d();
    let i = idx.get();
    if let Some(o) = out.get_mut(idx) {
        *o = x[i] * factor;
    }
}
