"""The Triton peer of the launch benchmark (its own file: Triton reads the kernel's source)."""

import triton
import triton.language as tl


@triton.jit
def vadd3(a, b, c, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(c + offsets, tl.load(a + offsets, mask=mask) + tl.load(b + offsets, mask=mask), mask=mask)
