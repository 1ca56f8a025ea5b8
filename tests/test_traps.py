"""``trap`` on the CPU loader (cuda-oxide lowers a Rust panic to it; ``__trap()``, an explicit trap)
is a :class:`KernelTrapError` naming the kernel, the thread and, where the PTX has line info, the
source line; on a GPU the same trap is a sticky error, which the CUDA loader explains."""

from __future__ import annotations

import _rust_fixtures
import numpy as np
import pytest

import ptxbridge
from ptxbridge import KernelTrapError

CHECKED = r"""
extern "C" __global__ void checked_scale(unsigned* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        if (x[i] > 1000) __trap();
        x[i] *= 3;
    }
}"""

RUST_TRAP = r"""#![no_std]
#![feature(abi_ptx, stdarch_nvptx, asm_experimental_arch)]
#[panic_handler]
fn p(_: &core::panic::PanicInfo) -> ! { loop {} }
#[unsafe(no_mangle)]
pub extern "ptx-kernel" fn checked_scale(x: &mut [u32]) {
    let i = unsafe { core::arch::nvptx::_thread_idx_x() } as usize;
    if i < x.len() {
        if x[i] > 1000 { unsafe { core::arch::asm!("trap;") } } // what cuda-oxide makes of a panic
        x[i] *= 3;
    }
}
"""


def test_a_trap_names_kernel_thread_and_source_line():
    from ptxbridge import nvrtc

    art = nvrtc.compile(CHECKED, arch="sm_90", output="ptx", options=["-lineinfo"])
    lines = CHECKED.splitlines()
    line = next(n for n, text in enumerate(lines, 1) if "__trap()" in text)
    column = lines[line - 1].index("if (") + 1  # NVRTC's line table marks the statement
    expected = (rf"^kernel 'checked_scale': block \(1, 0, 0\), thread \(8, 0, 0\) executed trap at "
                rf".*:{line}:{column}, in checked_scale, PTX line \d+: `trap`; "
                rf".*CUDA_ERROR_ILLEGAL_INSTRUCTION")
    with ptxbridge.link([art], arch="sm_90").load("cpu") as module:
        x = np.array([1, 2, 3, 4] * 10 + [5000] + [1] * 23, np.uint32)
        with pytest.raises(KernelTrapError, match=expected):
            module.checked_scale(x, x.size, grid=2, block=32)
        y = np.arange(4, dtype=np.uint32)
        module.checked_scale(y, 4, grid=1, block=4)  # the module still works
        assert y.tolist() == [0, 3, 6, 9]


@pytest.mark.usefixtures("sysroot")
def test_a_rust_trap_without_line_tables_says_so():
    import ptxbridge.rust as prust

    art = prust.compile(RUST_TRAP, arch="sm_90", progress=False)
    no_lines = r"thread \(2, 0, 0\) executed trap \(no line info in the PTX"
    module = ptxbridge.link([art], arch="sm_90").load("cpu")
    with module, pytest.raises(KernelTrapError, match=no_lines):
        module.checked_scale(np.array([1, 2, 5000], np.uint32), grid=1, block=4)


def test_the_cuda_loader_explains_errors_that_lose_the_context():
    pytest.importorskip("cuda.bindings")
    from ptxbridge.loaders.cuda import sticky_note

    assert "cuda-oxide lowers a Rust panic to it" in sticky_note("CUDA_ERROR_ILLEGAL_INSTRUCTION")
    assert "context of this device is lost" in sticky_note("CUDA_ERROR_ILLEGAL_ADDRESS")
    assert sticky_note("CUDA_ERROR_INVALID_VALUE") == ""


toolchain, sysroot = _rust_fixtures.toolchain, _rust_fixtures.sysroot  # session fixtures
