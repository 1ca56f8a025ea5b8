//! Device functions other languages can call: `#[no_mangle] extern "C"`.
#![no_std]
#![feature(abi_ptx)]

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(no_mangle)]
pub extern "C" fn rust_fma(a: f32, b: f32, c: f32) -> f32 {
    a * b + c
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rust_store(p: *mut i64, value: i64) {
    unsafe { *p = value };
}

/// Not exported (mangled Rust ABI): not a device function of the artifact.
pub fn helper(x: u32) -> u32 {
    x + 1
}
