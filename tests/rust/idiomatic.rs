// Kernels as a Rust programmer writes them: slices, indexing, iterators, Option/Result, checked
// arithmetic, and no #[panic_handler] (ptxbridge's reports panics as Python exceptions).
#![no_std]
#![feature(abi_ptx, stdarch_nvptx, core_float_math)]
#![allow(improper_ctypes_definitions)]

use core::arch::nvptx::{_block_dim_x, _block_idx_x, _thread_idx_x};

fn global_id() -> usize {
    unsafe { (_block_idx_x() * _block_dim_x() + _thread_idx_x()) as usize }
}

#[unsafe(no_mangle)]
pub extern "ptx-kernel" fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    let i = global_id();
    if i < y.len() {
        y[i] = a * x[i] + y[i];
    }
}

/// out[i] = sum of row i of a row-major matrix `width` wide (chunks, iter, sum).
#[unsafe(no_mangle)]
pub extern "ptx-kernel" fn row_sums(m: &[f32], width: usize, out: &mut [f32]) {
    let i = global_id();
    if let Some(slot) = out.get_mut(i) {
        *slot = m.chunks(width).nth(i).map(|row| row.iter().sum()).unwrap_or(0.0);
    }
}

/// Thread 0: the dot product of x and y (zip, fold, mul_add) and the index of the largest
/// x (enumerate, max_by, expect).
#[unsafe(no_mangle)]
pub extern "ptx-kernel" fn dot_argmax(x: &[f32], y: &[f32], out: &mut [f32], at: &mut [u32]) {
    if global_id() == 0 {
        out[0] = x.iter().zip(y).fold(0.0f32, |acc, (a, b)| core::f32::math::mul_add(*a, *b, acc));
        let (best, _) = x.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).expect("x is not empty");
        at[0] = best as u32;
    }
}

/// Integer arithmetic by runtime values: %, /, checked_*, wrapping_*, saturating_*, min/max/clamp.
#[unsafe(no_mangle)]
pub extern "ptx-kernel" fn int_ops(x: &[u32], d: u32, out: &mut [u32]) {
    let i = global_id();
    if i >= x.len() {
        return;
    }
    let v = x[i];
    let row = &mut out[i * 6..(i + 1) * 6]; // a subslice of six results per value
    row[0] = v % d;
    row[1] = v / d;
    row[2] = v.checked_mul(1 << 20).unwrap_or(u32::MAX);
    row[3] = v.wrapping_sub(5);
    row[4] = (v as u8).saturating_add(200) as u32;
    row[5] = v.min(100).max(3).clamp(4, 50);
}

/// Floats: min/max/clamp, and Result combinators (a parse of a digit, as bytes).
#[unsafe(no_mangle)]
pub extern "ptx-kernel" fn clamp_digits(x: &[f32], digits: &[u8], out: &mut [f32]) {
    let i = global_id();
    if i < out.len() {
        let digit: Result<u8, ()> = if digits[i].is_ascii_digit() { Ok(digits[i] - b'0') } else { Err(()) };
        let scale = digit.map(f32::from).unwrap_or(-1.0);
        out[i] = x[i].clamp(-1.0, 1.0).max(-0.5).min(0.75) * scale;
    }
}

/// Panics on purpose when `first_even` finds no even value in a row: `expect` with a message.
#[unsafe(no_mangle)]
pub extern "ptx-kernel" fn first_even(m: &[u32], width: usize, out: &mut [u32]) {
    let i = global_id();
    if let Some(slot) = out.get_mut(i) {
        let row = &m[i * width..(i + 1) * width];
        *slot = *row.iter().find(|v| *v % 2 == 0).expect("every row has an even value");
    }
}

/// out[i] = whether row i equals row 0 (slice equality: rustc calls memcmp).
#[unsafe(no_mangle)]
pub extern "ptx-kernel" fn same_as_first(m: &[u8], width: usize, out: &mut [u32]) {
    let i = global_id();
    if i < out.len() {
        out[i] = (m[i * width..(i + 1) * width] == m[..width]) as u32;
    }
}

/// The same axpy without the bounds check, for the benchmark (bench/panic_cost.py).
#[unsafe(no_mangle)]
pub extern "ptx-kernel" fn axpy_unchecked(a: f32, x: &[f32], y: &mut [f32]) {
    let i = global_id();
    if i < y.len() {
        unsafe { *y.get_unchecked_mut(i) = a * *x.get_unchecked(i) + *y.get_unchecked(i) }
    }
}
