"""The main job: a Rust kernel and a numba kernel, linked into one image and called on the same arrays.

Runs on the first GPU when there is one, otherwise on ptxbridge's CPU loader
(the kernels' PTX compiled to native code), and says which it used.  Usage: ``python examples/quickstart.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import ptxbridge
import ptxbridge.rust

try:
    from numba import cuda

    import ptxbridge.numba
except ImportError:  # a plain `pip install .` has no numba-cuda
    sys.exit("quickstart: the numba kernel needs numba-cuda: pip install '.[numba]' in the ptxbridge "
             "checkout (or run scripts/quickstart, which installs every extra)")

HERE = Path(__file__).parent


def square_inplace(y, n):
    """numba-cuda kernel: y[i] = y[i] * y[i]."""
    i = cuda.grid(1)
    if i < n:
        y[i] = y[i] * y[i]


def main() -> None:
    n = 1 << 12
    rust = ptxbridge.rust.compile(HERE / "kernels" / "scale.rs")
    numba = ptxbridge.numba.compile(square_inplace, "void(float32[::1], int32)", name="square_inplace")
    print(f"Rust kernel:  {rust.kernels['saxpy']}")
    print(f"numba kernel: {numba.kernels['square_inplace']}")

    module = ptxbridge.load([rust, numba])
    where = "the GPU" if module.device.startswith("cuda") else "the CPU loader (no GPU found)"
    print(f"loaded on: {module.device}, i.e. {where}")
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    expected = (2.0 * x + y) ** 2

    x_dev, y_dev = module.to_device(x), module.to_device(y)
    grid, block = (n + 255) // 256, 256
    module.saxpy(2.0, x_dev, y_dev, n, grid=grid, block=block)
    module.square_inplace(y_dev, n, grid=grid, block=block)
    result = module.to_host(y_dev)
    np.testing.assert_allclose(result, expected, rtol=1e-5)
    print(f"saxpy then square on {n} floats: matches NumPy (max |err| = "
          f"{np.abs(result - expected).max():.2e})")


if __name__ == "__main__":
    try:
        main()
    except ptxbridge.ToolchainError as exc:  # e.g. no Rust compiler: the message says what to install
        sys.exit(f"quickstart: {exc}")
