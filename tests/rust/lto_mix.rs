//! A kernel using what rustc lowers to constructs LLVM 7 lacks: typed accesses through byte
//! pointers, a constant table, a stack array, atomics, float min/max/abs/round, saturating float to
//! int casts, integer min/max (tests/test_rust_lto.py compares its LTO-IR and PTX builds).
#![no_std]
#![feature(abi_ptx, stdarch_nvptx, core_float_math)]
use core::arch::nvptx::{_block_dim_x, _block_idx_x, _thread_idx_x};
use core::sync::atomic::{AtomicU32, Ordering};

#[panic_handler]
fn p(_: &core::panic::PanicInfo) -> ! { loop {} }

/// One element of `pairs`: written field by field through a byte pointer in the LLVM 7 form.
#[repr(C)]
pub struct Pair { pub a: f32, pub b: i32 }

static TABLE: [f32; 8] = [0.5, 1.5, -2.25, 3.0, -0.0, 7.75, 1e30, -1e-3];

#[inline(never)]
fn local_sum(v: u32) -> u32 {
    let mut buf = [0u32; 16];
    for k in 0..16 {
        buf[k] = v.wrapping_mul(k as u32 + 1);
    }
    let idx = (v as usize) & 15;
    buf[idx] ^ buf[(idx + 3) & 15]
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn mix(x: *const f32, pairs: *mut Pair, out: *mut i32, count: *const AtomicU32,
                                      n: u32) {
    let i = unsafe { _block_idx_x() * _block_dim_x() + _thread_idx_x() } as usize;
    if i >= n as usize {
        return;
    }
    let v = unsafe { *x.add(i) };
    let t = TABLE[i & 7];
    let p = unsafe { &mut *pairs.add(i) };
    p.a = (-v).abs().max(t) + core::f32::math::round(v) + (v * 3.7).min(t);
    p.b = (v * 1e9) as i32 + ((v * 100.0) as u32).min(50) as i32 + (p.b - 7).abs() + (i as i32).max(3);
    let w = local_sum(i as u32) as i32;
    unsafe { *out.add(i) = w.wrapping_add((v as i64 >> 1) as i32) };
    unsafe { (*count).fetch_add(1 + (i as u32 & 1), Ordering::Relaxed) };
}
