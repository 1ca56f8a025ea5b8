//! saxpy over raw pointers and an explicit length: the FFI-safe kernel shape.
#![no_std]
#![feature(abi_ptx, stdarch_nvptx)]

use core::arch::nvptx::{_block_dim_x, _block_idx_x, _thread_idx_x};

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {}
}

/* A block comment /* with a nested one */ and a fake kernel:
   pub unsafe extern "ptx-kernel" fn not_a_kernel(x: f64) {} */

/// y[i] = a * x[i] + y[i] for i < n.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn saxpy(a: f32, x: *const f32, y: *mut f32, n: usize) {
    let i = (_block_idx_x() * _block_dim_x() + _thread_idx_x()) as usize;
    if i < n {
        unsafe { *y.add(i) = a * *x.add(i) + *y.add(i) };
    }
}
