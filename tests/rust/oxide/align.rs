//! `#[repr(align(N))]` kernel parameters.  cuda-oxide lowers a struct to an LLVM struct at
//! rustc's offsets, whose alignment is its fields' natural one, so llc declares
//! `.param .align 4 .b8 q[16]` for both structs below (`align.ll` is that IR for sm_80).
//! Read, never compiled.

use cuda_device::{DisjointSlice, kernel, thread};

/// align(16) adds no padding: four f32 in 16 bytes.
#[derive(Clone, Copy)]
#[repr(C, align(16))]
pub struct Quad {
    pub x: f32,
    pub y: f32,
    pub z: f32,
    pub w: f32,
}

/// align(16) pads one f32 to 16 bytes.
#[derive(Clone, Copy)]
#[repr(align(16))]
pub struct Padded {
    pub v: f32,
}

/// out[i] = tag + q.x + q.y + q.z + q.w + p.v
#[kernel]
pub fn aligned(tag: u8, q: Quad, p: Padded, mut out: DisjointSlice<f32>) {
    if let Some(o) = out.get_mut(thread::index_1d()) {
        *o = tag as f32 + q.x + q.y + q.z + q.w + p.v;
    }
}
