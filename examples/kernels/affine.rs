// A plain-rustc nvptx64 kernel taking a #[repr(C)] struct by value plus two pointers:
// y[i] = p.scale * x[i] + p.shift for i < n.  x and y may be the same buffer.
#![no_std]
#![feature(abi_ptx, stdarch_nvptx)]

use core::arch::nvptx::{_block_dim_x, _block_idx_x, _grid_dim_x, _thread_idx_x};

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {}
}

/// #[repr(C)] fixes the field order and padding, so ptxbridge can fill it from a
/// Python dict or dataclass with the same field names.
#[repr(C)]
pub struct Affine {
    pub scale: f32,
    pub shift: f32,
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn affine(p: Affine, x: *const f32, y: *mut f32, n: u32) {
    // A grid-stride loop: correct for any grid size the caller picks.
    let stride = unsafe { _grid_dim_x() * _block_dim_x() } as u32;
    let mut i = unsafe { _block_idx_x() * _block_dim_x() + _thread_idx_x() } as u32;
    while i < n {
        unsafe { *y.add(i as usize) = p.scale * *x.add(i as usize) + p.shift };
        i += stride;
    }
}
