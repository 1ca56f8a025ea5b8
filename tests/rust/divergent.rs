//! A divergent loop: each thread iterates a data-dependent number of times (Collatz steps).
#![no_std]
#![feature(abi_ptx, stdarch_nvptx)]

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn collatz_steps(start: *const u32, steps: *mut u32, n: u32) {
    use core::arch::nvptx::{_block_dim_x, _block_idx_x, _thread_idx_x};
    let i = (_block_idx_x() * _block_dim_x() + _thread_idx_x()) as u32;
    if i >= n {
        return;
    }
    let mut x = unsafe { *start.add(i as usize) };
    let mut count = 0u32;
    while x > 1 {
        x = if x % 2 == 0 { x / 2 } else { 3 * x + 1 };
        count += 1;
    }
    unsafe { *steps.add(i as usize) = count };
}
