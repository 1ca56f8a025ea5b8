//! cuda-oxide kernels that call libdevice math (`sin`, `exp`, `sqrt`, `atan2`).
//! cuda-oxide compiles such a crate to NVVM IR, not PTX; `libm.ll` is that IR
//! as cuda-oxide's llvm-export writes it for sm_80 (LLVM 7 dialect: typed
//! pointers, `@llvm.used`, `!nvvm.annotations`, `!nvvmir.version` 2.0).  The
//! `#[constant]` global is listed in `@llvm.used` too, or nvJitLink's LTO would
//! fold its initial value into the kernel and the host could not set it.
//! This source is *read*, never compiled (it needs the cuda-device crate).

use cuda_device::{ConstantMemory, DisjointSlice, constant, device, kernel, thread};

/// Set by the host before a launch (cuda-oxide's `set_bias`; ptxbridge: `module.globals[symbol]`).
#[constant]
static BIAS: ConstantMemory<f32> = ConstantMemory::UNINIT;

/// Passed to the device function `affine` as its two fields (cuda-oxide's device-function ABI).
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Line {
    pub slope: f32,
    pub offset: f32,
}

/// Exported under its own name: C++, numba or plain-rustc code may call it.
#[device]
pub fn affine(line: Line, x: f32) -> f32 {
    line.slope * x + line.offset
}

/// y = (a * sin(x) + exp(x)) * b: a multiply feeding an add, contracted to an FMA unless the
/// crate is built with FMA contraction off.
#[kernel]
pub fn wave(x: &[f32], mut y: DisjointSlice<f32>, a: f32, b: f32) {
    let idx = thread::index_1d();
    let i = idx.get();
    if let Some(out) = y.get_mut(idx) {
        *out = (a * x[i].sin() + x[i].exp()) * b;
    }
}

/// Cartesian pairs to (radius, angle) pairs: slices of arrays.
#[kernel]
pub fn polar(xy: &[[f32; 2]], mut out: DisjointSlice<[f32; 2]>) {
    let idx = thread::index_1d();
    let i = idx.get();
    if let Some(o) = out.get_mut(idx) {
        let [x, y] = xy[i];
        *o = [(x * x + y * y).sqrt(), y.atan2(x)];
    }
}

/// y = x + BIAS.
#[kernel]
pub fn biased(x: &[f32], mut y: DisjointSlice<f32>) {
    let idx = thread::index_1d();
    let i = idx.get();
    if let Some(out) = y.get_mut(idx) {
        *out = x[i] + BIAS.get();
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    Ok(())
}
