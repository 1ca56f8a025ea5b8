"""A small torch model whose elementwise work is three bridged kernels, under torch.compile.

    h = gelu(linear(x) + bias)    CUDA C++ via NVRTC      (kernels/bias_gelu.cu)
    h = 0.5 * x + h               Rust, in place          (kernels/scale.rs: saxpy)
    y = silu(h)                   numba-cuda, 2-D grid

``ptxbridge.torch.op`` turns each kernel into a torch custom op: its schema comes from the
kernel's signature (``saxpy`` writes through ``y: *mut f32``, so the op declares ``y`` mutated),
outputs are allocated from a shape rule stated once ("like x"), and the same rule gives the
fake tensors torch.compile traces with, so ``fullgraph=True`` holds: no graph break.

On a GPU the model compiles with ``mode="reduce-overhead"`` (CUDA graphs replay the three
launches).  Without one it runs on CPU tensors through ptxbridge's CPU loader, compiled
with the ``aot_eager`` backend (inductor would build C++ for the torch ops around the kernels,
which takes a minute on a small machine; ``--backend inductor`` does it anyway).
Usage: ``python examples/torch_compile.py [--backend NAME]``.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch
from numba import cuda

import ptxbridge
import ptxbridge.numba
import ptxbridge.nvrtc
import ptxbridge.rust
import ptxbridge.torch

HERE = Path(__file__).parent
BATCH, WIDTH = 16, 64


def silu(x, out):
    """numba-cuda kernel: out = x / (1 + e^-x), one thread per element of a 2-D array."""
    i, j = cuda.grid(2)
    if i < x.shape[0] and j < x.shape[1]:
        out[i, j] = x[i, j] / (1.0 + math.exp(-x[i, j]))


def cover(n: int, block: int) -> int:
    return -(-n // block)


def make_ops(image: ptxbridge.Image) -> dict:
    """The three kernels as torch ops; each rule is stated once and read by name."""
    return {
        "bias_gelu": ptxbridge.torch.op(
            image, "bias_gelu", name="example::bias_gelu", outputs={"y": "like x"},
            derived={"rows": "len x", "cols": lambda x: x.shape[1]},
            shapes={"bias": lambda cols: (cols,)},  # raw pointers carry no length: the op checks it
            grid=lambda rows, cols: cover(rows * cols, 256), block=256),
        "saxpy": ptxbridge.torch.op(
            image, "saxpy", name="example::saxpy", derived={"n": "numel x"}, shapes={"y": "like x"},
            grid=lambda n: cover(n, 256), block=256),
        "silu": ptxbridge.torch.op(  # numba arrays are writable to numba: promise x is only read
            image, "silu", name="example::silu", outputs={"out": "like x"}, read_only=("x",),
            grid=lambda x: (cover(x.shape[0], 16), cover(x.shape[1], 16)), block=(16, 16)),
    }


class Block(torch.nn.Module):
    def __init__(self, ops: dict):
        super().__init__()
        self.ops = ops
        self.linear = torch.nn.Linear(WIDTH, WIDTH)
        self.bias = torch.nn.Parameter(0.1 * torch.randn(WIDTH))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ops["bias_gelu"](self.linear(x), self.bias)  # CUDA C++
        self.ops["saxpy"](0.5, x, h)  # Rust: h = 0.5 * x + h, in place
        return self.ops["silu"](h)  # numba


def reference(block: Block, x: torch.Tensor) -> torch.Tensor:
    h = torch.nn.functional.gelu(block.linear(x) + block.bias, approximate="tanh") + 0.5 * x
    return torch.nn.functional.silu(h)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", help="torch.compile backend (default: inductor on GPU, else aot_eager)")
    args = parser.parse_args()
    device = "cuda:0" if torch.cuda.is_available() else "cpu"
    cpp = ptxbridge.nvrtc.compile(HERE / "kernels" / "bias_gelu.cu")
    rust = ptxbridge.rust.compile(HERE / "kernels" / "scale.rs")
    numba = ptxbridge.numba.compile(silu, "void(float32[:, ::1], float32[:, ::1])", name="silu")
    image = ptxbridge.link([cpp, rust, numba])  # one image, three languages
    ops = make_ops(image)
    for name, op in ops.items():
        print(f"{image.kernels[name]}\n    -> torch op {op._schema}")

    torch.manual_seed(0)
    model = Block(ops).to(device)
    x = torch.randn(BATCH, WIDTH, device=device)
    with torch.no_grad():
        eager = model(x)
        torch.testing.assert_close(eager, reference(model, x), rtol=1e-4, atol=1e-5)
        where = "" if device != "cpu" else " (ptxbridge's CPU loader; torch sees no CUDA GPU)"
        print(f"eager on {device}{where}: matches torch's own gelu/silu")
        breaks = torch._dynamo.explain(model)(x).graph_break_count
        print(f"torch._dynamo.explain: {breaks} graph breaks")
        if device == "cpu":
            options = {"backend": args.backend or "aot_eager"}
        else:
            options = {"backend": args.backend or "inductor", "mode": "reduce-overhead"}
        compiled = torch.compile(model, fullgraph=True, **options)
        for _ in range(3):  # reduce-overhead records its CUDA graph on a later call
            result = compiled(x)
        torch.testing.assert_close(result, eager, rtol=1e-4, atol=1e-5)  # inductor may order the matmul
    settings = ", ".join(f"{k}={v!r}" for k, v in options.items())
    print(f"torch.compile(fullgraph=True, {settings}) on {device}: matches eager")


if __name__ == "__main__":
    main()
