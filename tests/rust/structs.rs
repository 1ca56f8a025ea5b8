//! A #[repr(C)] struct with mixed field alignments, holding a nested struct by value.
#![no_std]
#![feature(abi_ptx, stdarch_nvptx)]

use core::arch::nvptx::_thread_idx_x;

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct Inner {
    pub tag: u8,
    pub weight: f64,
}

/// Offsets: flag 0, inner 8 (tag 8, weight 16), count 24, scale 28; size 32, align 8.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Params {
    pub flag: u8,
    pub inner: Inner,
    pub count: u16,
    pub(crate) scale: f32,
}

type Scale = f32;

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn apply(p: Params, out: *mut f64, bias: Scale, enabled: bool) {
    let i = _thread_idx_x() as usize;
    if enabled && i < p.count as usize {
        let v = p.inner.weight * p.scale as f64 + p.flag as f64 + p.inner.tag as f64 + bias as f64;
        unsafe { *out.add(i) = v };
    }
}
