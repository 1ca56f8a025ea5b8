"""One pipeline, four languages, the same arrays: CUDA C++ -> Rust -> numba -> cuTile.

    h   = normalize_rows(x)          CUDA C++ via NVRTC (shared-memory reduction)
    h   = 1.5 * h + 0.25             Rust, plain rustc (a #[repr(C)] struct by value)
    h   = silu(h) = h / (1 + e^-h)   numba-cuda
    out = h + x                      cuTile (tileiras cubin, sm_90a)

The first three are linked into one image by nvJitLink.  The cuTile kernel is
an executable tileiras cubin, which nvJitLink cannot link with other code, so
it is loaded as a second module beside the first, on the same device.  Every
step works in place on device arrays; nothing goes back to the host until the
end, where the result is checked against NumPy.

On a GPU all four run (the cuTile step needs sm_90, e.g. an H100/H200).  On
the CPU loader the first three run and the cuTile step, which has no
PTX to interpret, is replaced by NumPy; the program says so.
Usage: ``python examples/pipeline.py``.
"""

# No ``from __future__ import annotations`` here: cuTile reads the kernel's annotations
# (``ct.Constant[int]``) at export time and needs them as objects, not strings.
import math
import sys
from pathlib import Path

import numpy as np

import ptxbridge
import ptxbridge.nvrtc
import ptxbridge.rust

try:
    import cuda.tile as ct
    from cuda.tile import compilation as tc
    from numba import cuda

    import ptxbridge.numba
    import ptxbridge.tile
except ImportError as missing:  # a plain `pip install .` has neither numba-cuda nor cuda-tile
    sys.exit(f"pipeline: needs numba-cuda and cuda-tile (no module {missing.name!r}): pip install "
             "'.[numba,tile]' in the ptxbridge checkout (or run scripts/quickstart, which installs every "
             "extra)")

HERE = Path(__file__).parent
ROWS, COLS, TILE = 64, 1024, 256
SCALE, SHIFT, EPS = 1.5, 0.25, 1e-5


def silu_inplace(h):
    """numba-cuda kernel: h[i] = h[i] / (1 + exp(-h[i]))."""
    i = cuda.grid(1)
    if i < h.size:
        h[i] = h[i] / (1.0 + math.exp(-h[i]))


@ct.kernel
def tile_add(a, b, c, tile: ct.Constant[int]):
    """cuTile kernel: c = a + b, one tile of ``tile`` elements per block."""
    bid = ct.bid(0)
    ct.store(c, index=(bid,), tile=ct.load(a, index=(bid,), shape=(tile,)) + ct.load(b, index=(bid,),
                                                                                       shape=(tile,)))


def tile_artifact() -> ptxbridge.Artifact:
    """Export ``tile_add`` for float32 vectors whose length is a multiple of TILE (a promise
    ptxbridge checks at every call)."""
    vector = tc.ArrayConstraint(ct.float32, 1, index_dtype=ct.int32, stride_lower_bound_incl=0,
                                alias_groups=(), may_alias_internally=False, shape_divisible_by=TILE)
    signature = tc.KernelSignature([vector] * 3 + [TILE], tc.CallingConvention.cutile_python_v1(),
                                   symbol="tile_add")
    return ptxbridge.tile.export(tile_add, signature, arch="sm_90")


def reference(x: np.ndarray) -> np.ndarray:
    rows = x.reshape(ROWS, COLS).astype(np.float64)
    h = (rows - rows.mean(axis=1, keepdims=True)) / np.sqrt(rows.var(axis=1, keepdims=True) + EPS)
    h = SCALE * h + SHIFT
    return (h / (1.0 + np.exp(-h))).ravel() + x


def main() -> None:
    cpp = ptxbridge.nvrtc.compile(HERE / "kernels" / "normalize_rows.cu")
    rust = ptxbridge.rust.compile(HERE / "kernels" / "affine.rs")
    numba = ptxbridge.numba.compile(silu_inplace, "void(float32[::1])", name="silu_inplace")
    tile = tile_artifact()  # compiling needs no GPU: tileiras writes the cubin here too
    for artifact in (cpp, rust, numba, tile):
        for signature in artifact.kernels.values():
            print(f"{artifact.kind.value:>5}: {signature}")

    module = ptxbridge.load([cpp, rust, numba])  # the first GPU, else the CPU loader
    on_gpu = module.device != "cpu"
    print(f"loaded on: {module.device}" + ("" if on_gpu else " (ptxbridge's CPU loader: no GPU)"))

    n = ROWS * COLS
    x_host = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    x, h = module.to_device(x_host), module.to_device(np.empty(n, np.float32))
    blocks = (n + 255) // 256
    module.normalize_rows(x, h, COLS, EPS, grid=ROWS, block=256)
    module.affine({"scale": SCALE, "shift": SHIFT}, h, h, n, grid=blocks, block=256)
    module.silu_inplace(h, grid=blocks, block=256)
    if on_gpu:
        # A second module on the same device: it takes the first module's arrays as they are.
        out = module.to_device(np.empty(n, np.float32))
        tiles = ptxbridge.load([tile], device=module.device)
        tiles.tile_add(h, x, out, TILE, grid=n // TILE)  # block: the cubin's .reqntid (128)
        result = module.to_host(out)
    else:
        print("cuTile step skipped: a tileiras cubin runs only on an sm_90 GPU; NumPy adds h + x instead")
        result = module.to_host(h) + x_host
    expected = reference(x_host)
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-4)
    steps = "C++, Rust, numba, cuTile" if on_gpu else "C++, Rust, numba (cuTile step by NumPy)"
    print(f"pipeline on {ROWS}x{COLS} floats ({steps}) on {module.device}: matches NumPy "
          f"(max |err| = {np.abs(result - expected).max():.2e})")


if __name__ == "__main__":
    try:
        main()
    except ptxbridge.ToolchainError as exc:  # e.g. no Rust compiler: the message says what to install
        sys.exit(f"pipeline: {exc}")
