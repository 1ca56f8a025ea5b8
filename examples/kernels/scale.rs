// A plain-rustc nvptx64 kernel: y[i] = a * x[i] + y[i] for i < n.
#![no_std]
#![feature(abi_ptx, stdarch_nvptx)]

use core::arch::nvptx::{_block_dim_x, _block_idx_x, _thread_idx_x};

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn saxpy(a: f32, x: *const f32, y: *mut f32, n: u32) {
    let i = unsafe { _block_idx_x() * _block_dim_x() + _thread_idx_x() } as u32;
    if i < n {
        unsafe { *y.add(i as usize) = a * *x.add(i as usize) + *y.add(i as usize) };
    }
}
