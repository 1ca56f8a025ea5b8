//! A kernel calling a foreign device function, resolved at link time (e.g. CUDA C++).
#![no_std]
#![feature(abi_ptx, stdarch_nvptx)]

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {}
}

unsafe extern "C" {
    /// Defined in another language; `float cxx_scale(float x, int k)`.
    fn cxx_scale(x: f32, k: i32) -> f32;
    /// Declared but never called: rustc emits no declaration for it.
    fn never_called(x: f64) -> f64;
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn scale_all(data: *mut f32, n: u32, k: i32) {
    let i = core::arch::nvptx::_thread_idx_x() as u32;
    if i < n {
        unsafe { *data.add(i as usize) = cxx_scale(*data.add(i as usize), k) };
    }
}
