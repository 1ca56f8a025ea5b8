"""The images bench/frameworks.py measures, built by ptxbridge's frontends (NVRTC, numba-cuda, rustc).

``step``: eight small elementwise kernels in three languages, launched in this order per step::

    t1 = add(x, y)         CUDA C++      t5 = square(t4)        numba
    t2 = relu(t1)          numba         t6 = softsign(t5)      Rust
    t3 = scale_into(.5,t2) Rust          t7 = affine(t6, 2, 1)  CUDA C++
    t4 = mul(t3, x)        CUDA C++      t8 = relu(t7)          numba

``lto_*``: one compute-bound numba kernel (64 dependent float32 multiply-adds per element) whose
multiply-add is a device function: written in numba itself (``lto_one``), CUDA C++ linked through LTO
(``lto_cpp``), Rust linked as PTX without LTO (``ptx_rust``), and Rust as LTO-IR
(``ptxbridge.rust.compile(output="ltoir")``, ``lto_rust``).

The GPU host has no rustc: build here with ``--save DIR`` and measure there with ``--images DIR``
(saved with ``Image.save``, as the GPU suite saves its images).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from numba import cuda, float32

ARCH = "sm_90"
HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "tests" / "gpu"))

import _images  # noqa: E402  (the GPU suite's sources: RUST_DIR)

CPP_STEP = r"""
extern "C" __global__ void add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
extern "C" __global__ void mul(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] * b[i];
}
extern "C" __global__ void affine(const float* x, float* y, float s, float t, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = s * x[i] + t;
}
"""

RUST_STEP = r"""
#![no_std]
#![feature(abi_ptx, stdarch_nvptx)]
use core::arch::nvptx::{_block_dim_x, _block_idx_x, _thread_idx_x};

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! { loop {} }

fn index() -> usize { unsafe { (_block_idx_x() * _block_dim_x() + _thread_idx_x()) as usize } }

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn scale_into(a: f32, x: *const f32, y: *mut f32, n: u32) {
    let i = index();
    if i < n as usize { unsafe { *y.add(i) = a * *x.add(i) } }
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn softsign(x: *const f32, y: *mut f32, n: u32) {
    let i = index();
    if i < n as usize {
        let v = unsafe { *x.add(i) };
        let magnitude = if v < 0.0 { -v } else { v };
        unsafe { *y.add(i) = v / (1.0 + magnitude) }
    }
}
"""

# a * b + c rounded twice, as Rust's ``a * b + c`` is (Rust never contracts it; numba's libNVVM does)
CPP_FMA = r"""
extern "C" __device__ float cpp_fma(float a, float b, float c) { return __fadd_rn(__fmul_rn(a, b), c); }
"""
FMA_STEPS = 512  # compute-bound: the kernel's time is its arithmetic, not where its arrays sit in L2


def relu(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = max(x[i], 0.0)


def square(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = x[i] * x[i]


def _fma_kernel(name: str, device: Callable):
    """numba kernel: ``FMA_STEPS`` dependent calls of ``device`` per element."""

    def kernel(x, out):
        i = cuda.grid(1)
        if i < x.size:
            acc = x[i]
            for _ in range(FMA_STEPS):
                acc = device(acc, float32(1.0001), float32(0.5))  # float32 throughout
            out[i] = acc

    kernel.__name__ = name
    return kernel


def _step() -> list:
    import ptxbridge.numba as pn
    import ptxbridge.rust
    from ptxbridge import nvrtc

    sig = "void(float32[::1], float32[::1])"
    return [nvrtc.compile(CPP_STEP, arch=ARCH), ptxbridge.rust.compile(RUST_STEP, arch=ARCH, progress=False),
            pn.compile(relu, sig, arch=ARCH, name="relu"), pn.compile(square, sig, arch=ARCH, name="square")]


def _lto(provider: str) -> list:
    import ptxbridge.numba as pn
    import ptxbridge.rust
    from ptxbridge import nvrtc

    sig = "void(float32[::1], float32[::1])"
    if provider == "one":
        inline = cuda.jit(device=True)(lambda a, b, c: a * b + c)
        return [pn.compile(_fma_kernel("fma_loop", inline), sig, arch=ARCH, name="fma_loop", output="ltoir")]
    symbol = {"cpp": "cpp_fma", "rust": "rust_fma"}[provider.split("_")[-1]]
    external = cuda.declare_device(symbol, "float32(float32, float32, float32)", abi="c")
    output = "ptx" if provider == "ptx_rust" else "ltoir"
    kernel = pn.compile(_fma_kernel("fma_loop", external), sig, arch=ARCH, name="fma_loop",
                        imports=[external], output=output)
    if provider == "cpp":
        return [kernel, nvrtc.compile(CPP_FMA, arch=ARCH, output="ltoir")]
    rust_options = {} if provider == "ptx_rust" else {"output": "ltoir"}
    return [kernel, ptxbridge.rust.compile(_images.RUST_DIR / "device_fn.rs", arch=ARCH, progress=False,
                                           **rust_options)]


BUILDERS: dict[str, Callable[[], list]] = {
    "fw_step": _step, "fw_lto_one": lambda: _lto("one"), "fw_lto_cpp": lambda: _lto("cpp"),
    "fw_ptx_rust": lambda: _lto("ptx_rust"), "fw_lto_rust": lambda: _lto("lto_rust"),
    "fw_lto_one_unfused": lambda: _lto("one"),
}
# linked with -fma=0: numba's own multiply-add left unfused, the arithmetic the C++ (__fmul_rn,
# __fadd_rn) and Rust (which never contracts) device functions do, so "same computation" is exact
UNFUSED = {"fw_lto_one_unfused"}


def images(store: Path | None) -> dict[str, object]:
    """Every image: from ``store`` where saved there, else built here (and saved when ``store`` is
    given).  An image that cannot be built here (a missing toolchain or frontend feature) maps to
    the reason, as a string."""
    from ptxbridge import Image
    from ptxbridge.linker import LinkOptions, link

    found: dict[str, object] = {}
    for name, builder in BUILDERS.items():
        saved = None if store is None else store / f"{name}.ptxb"
        if saved is not None and saved.is_file():
            found[name] = Image.open(saved)
            continue
        try:
            options = LinkOptions(fma=False) if name in UNFUSED else None
            found[name] = link(builder(), arch=ARCH, options=options)
        except Exception as exc:  # e.g. the Rust frontend has no output="ltoir" yet
            found[name] = f"not built: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
            continue
        if saved is not None:
            store.mkdir(parents=True, exist_ok=True)
            found[name].save(saved)
    return found
