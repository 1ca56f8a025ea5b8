"""Call a Rust kernel from Python on torch tensors.

The kernel (``kernels/affine.rs``) is plain rustc ``nvptx64`` code taking a
``#[repr(C)]`` struct by value plus two pointers.  ptxbridge reads its
signature from the Rust source, so every call is checked: the struct is filled
from a dataclass or a dict, each tensor must be float32 on the module's device.

Runs on CUDA tensors when torch sees a GPU, otherwise on CPU tensors through
ptxbridge's CPU loader, and says which.  Usage:
``python examples/rust_torch.py`` (needs PyTorch; exits cleanly without it).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import ptxbridge
import ptxbridge.rust

HERE = Path(__file__).parent


@dataclasses.dataclass
class Affine:
    """Mirrors ``#[repr(C)] struct Affine`` in kernels/affine.rs: fields match by name."""

    scale: float
    shift: float


def main() -> None:
    try:
        import torch
    except ImportError:
        print("rust_torch: PyTorch is not installed, nothing to run (pip install torch, then run again)")
        return
    # The tensors' device decides the module's: CUDA when torch has a GPU, else the CPU loader.
    device = "cuda:0" if torch.cuda.is_available() else "cpu"
    artifact = ptxbridge.rust.compile(HERE / "kernels" / "affine.rs")
    print(f"Rust kernel: {artifact.kernels['affine']}")
    module = ptxbridge.load([artifact], device=device)
    where = "" if device != "cpu" else " (ptxbridge's CPU loader; torch sees no CUDA GPU)"
    print(f"loaded on: {module.device}{where}")

    n = 10_000
    torch.manual_seed(0)
    x = torch.randn(n, device=device)
    y = torch.empty_like(x)
    # Tensors go in as they are (DLPack, no copies); on a GPU the launch is queued on torch's
    # current stream, so torch's own ops below are ordered after it.  8 x 256 threads cover
    # all n elements because the kernel loops with a grid stride.
    module.affine(Affine(scale=2.0, shift=0.5), x, y, n, grid=8, block=256)
    module.affine({"scale": -1.0, "shift": 1.0}, y, y, n, grid=8, block=256)  # a dict works too; in place
    torch.testing.assert_close(y, 1.0 - (2.0 * x + 0.5))
    print(f"affine twice on {n} floats on {device}: matches torch")

    # Every argument is checked against the Rust signature before anything is launched.
    try:
        module.affine(Affine(scale=1.0, shift=0.0), x.double(), y, n, grid=8, block=256)
    except ptxbridge.ArgumentError as exc:
        print(f"a float64 tensor is refused: {exc}")


if __name__ == "__main__":
    main()
