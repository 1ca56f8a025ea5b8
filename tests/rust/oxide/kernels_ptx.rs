//! The kernels of `kernels.rs`, spelled with the flat parameters cuda-oxide
//! lowers them to (docs/conventions.md, `oxide`), for plain rustc: `&[T]` and
//! `DisjointSlice<T>` are pointer + u64 length, a runtime 2-D DisjointSlice adds
//! a u32 row width, zero-sized parameters vanish, other structs travel as one
//! blob, generic instances are named `<base>_TID_<32 hex>`.
#![no_std]
#![feature(abi_ptx, stdarch_nvptx)]
#![allow(improper_ctypes_definitions)]

use core::arch::nvptx::{_block_dim_x, _block_dim_y, _block_idx_x, _block_idx_y, _thread_idx_x, _thread_idx_y};

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[derive(Clone, Copy)]
pub struct Params {
    pub count: u8,
    pub weight: f64,
    pub scale: f32,
}

fn index_1d() -> usize {
    unsafe { (_block_idx_x() * _block_dim_x() + _thread_idx_x()) as usize }
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn vecadd(a: *const f32, a_len: usize, b: *const f32, b_len: usize,
                                         c: *mut f32, c_len: usize) {
    let i = index_1d();
    if i < c_len && i < a_len && i < b_len {
        unsafe { *c.add(i) = *a.add(i) + *b.add(i) };
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn transpose(input: *const f32, input_len: usize, out: *mut f32,
                                            out_len: usize, out_row_width: u32, cols: u32) {
    let row = (_block_idx_y() * _block_dim_y() + _thread_idx_y()) as u32;
    let col = (_block_idx_x() * _block_dim_x() + _thread_idx_x()) as u32;
    let o = (row * out_row_width + col) as usize;
    let i = (col * cols + row) as usize;
    if col < out_row_width && o < out_len && i < input_len {
        unsafe { *out.add(o) = *input.add(i) };
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn tagged(x: f32, out: *mut f32, out_len: usize) {
    let i = index_1d();
    if i < out_len {
        unsafe { *out.add(i) = x };
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn blob(p: Params, out: *mut f64, out_len: usize) {
    let i = index_1d();
    if i < out_len {
        unsafe { *out.add(i) = p.weight * p.scale as f64 + p.count as f64 };
    }
}

#[unsafe(export_name = "scale_TID_3f1c0a9be27d4c5580a1d2e3f4a5b6c7")]
pub unsafe extern "ptx-kernel" fn scale_f32(x: *const f32, x_len: usize, factor: f32, out: *mut f32,
                                            out_len: usize) {
    let i = index_1d();
    if i < out_len && i < x_len {
        unsafe { *out.add(i) = *x.add(i) * factor };
    }
}

#[unsafe(export_name = "scale_TID_0b9e8d7c6f5a4b3c2d1e0f9a8b7c6d5e")]
pub unsafe extern "ptx-kernel" fn scale_f64(x: *const f64, x_len: usize, factor: f64, out: *mut f64,
                                            out_len: usize) {
    let i = index_1d();
    if i < out_len && i < x_len {
        unsafe { *out.add(i) = *x.add(i) * factor };
    }
}
