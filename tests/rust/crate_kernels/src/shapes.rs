#[repr(C)]
#[derive(Clone, Copy)]
pub struct Rect {
    pub w: f32,
    pub h: f32,
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn areas(rects: *const Rect, out: *mut f32, n: u32) {
    let i = core::arch::nvptx::_thread_idx_x() as u32;
    if i < n {
        let r = unsafe { *rects.add(i as usize) };
        unsafe { *out.add(i as usize) = r.w * r.h };
    }
}
