//! A cuda-oxide crate as users write them: kernels next to host code.  Read by the tests of
//! `ptxbridge.rust` (never compiled: it needs cuda-oxide's crates).  Each kernel exhibits one
//! construct of docs/rust.md; the host code exhibits what the reader must skip.
#![allow(dead_code)]

use core::num::NonZeroU32;
use core::sync::atomic::AtomicU32;
use cuda_device::{
    ConstantMemory, DeviceAtomicU64, DisjointSlice, Runtime2DIndex, Uniform, constant, cuda_module, device,
    kernel, thread,
};
use std::error::Error;

const LANES: usize = 4;
const ROWS: usize = LANES * 2;

/// Fields in declaration order (repr(C)).
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Vec3 {
    pub x: f32,
    pub y: f32,
    pub z: f32,
}

/// repr(align(16)) with no padding: cuda-oxide passes the LLVM struct, align 4.
#[derive(Clone, Copy)]
#[repr(C, align(16))]
pub struct Quad(pub [f32; LANES]);

/// repr(align(16)) that pads: 16 bytes, still align 4 as a kernel parameter.
#[derive(Clone, Copy)]
#[repr(align(16))]
pub struct Padded {
    pub v: f32,
}

/// A data-carrying enum with a primitive repr: a union of repr(C) (tag, fields) structs.
#[derive(Clone, Copy)]
#[repr(u32)]
pub enum Shape {
    Circle(f32) = 1,
    Rect { w: f32, h: f32 } = 2,
    Empty = 3,
}

/// No defined layout for Option<bool>.
#[derive(Clone, Copy)]
pub struct Maybe(Option<bool>);

#[cuda_module]
mod kernels {
    use super::*;

    #[constant]
    static TABLE: ConstantMemory<[f32; LANES]> = ConstantMemory::UNINIT;

    #[kernel]
    pub fn nested(rows: &[[f32; 2]], mut grid: DisjointSlice<[[f32; 2]; ROWS]>) {}

    #[kernel]
    pub fn uniform(n: Uniform<u32>, scale: Uniform<f32>, mut out: DisjointSlice<f32>) {}

    #[kernel]
    pub fn structs(points: &[Vec3], mut quads: DisjointSlice<Quad>, tiles: DisjointSlice<'_, Vec3, Runtime2DIndex>) {}

    #[kernel]
    pub fn atomics(counts: &[DeviceAtomicU64], flags: &[AtomicU32], ids: &[Option<NonZeroU32>]) {}

    #[kernel]
    pub fn shapes(shapes: &[Shape], mut area: DisjointSlice<f32>) {}

    #[kernel]
    pub fn aligned(tag: u8, q: Quad, p: Padded, mut out: DisjointSlice<f32>) {}

    #[kernel]
    pub fn optional(
        values: &[f32],
        maybe: Maybe,
        mut out: DisjointSlice<f32>,
    ) {}

    #[kernel]
    pub fn with_closure<F: Fn(f32) -> f32 + Copy>(f: F, mut out: DisjointSlice<f32>) {}

    #[device]
    pub fn dot(a: Vec3, b: Vec3) -> f32 {
        a.x * b.x + a.y * b.y + a.z * b.z
    }

    #[device]
    extern "C" {
        fn cub_sum(x: f32, scratch: *mut u8) -> f32;
    }
}

#[constant(export_name = "my_scale")]
static SCALE: ConstantMemory<f32> = ConstantMemory::UNINIT;

// ---- host code: none of this has (or needs) a fixed ABI ----

trait Launcher {
    fn launch(&self) -> Result<(), Box<dyn Error + Send + Sync>>;
}

async fn upload(data: impl AsRef<[f32]>) -> Vec<f32> {
    let raw = r#"a "raw" string with } and { inside"#;
    let _ = (raw, b'}', '{', "}");
    data.as_ref().iter().map(|x| x * 2.0).collect()
}

macro_rules! make_kernel {
    ($name:ident) => {
        #[kernel]
        pub fn $name(mut out: DisjointSlice<f32>) {}
    };
}

fn callback() -> impl Fn(u32) -> u32 {
    |x| x + 1
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let closure = |v: &[f32]| -> f32 { v.iter().sum() };
    let _ = closure(&[1.0, 2.0]);
    Ok(())
}
