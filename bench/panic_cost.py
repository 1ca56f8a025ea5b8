"""What panic reporting costs a Rust kernel: ``axpy`` with bounds checks (its panic path records to
``__ptxbridge_panic``) against ``axpy_unchecked``, the same kernel with ``get_unchecked``.

Both are in tests/rust/idiomatic.rs and compiled by ``ptxbridge.rust`` into one image, three ways: with
the default ``panic_messages="full"`` (the image the GPU suite runs as ``rust_panics``: the
panicking thread formats its message with ``core::fmt``, and the link caps the registers at what
the kernels need without it, so that cold code spills), with ``panic_messages="location"``
(``rust_panics_location``: where and which thread only, no formatting code), and with the full
message linked with ``LinkOptions(max_registers=0)`` (``rust_panics_uncapped``: no cap, as
ptxbridge linked before the cap: ptxas sizes every kernel that can panic for ``core::fmt``).
The checked kernel compares the index with ``x.len()`` before loading (``y.len()`` is checked by
both) and branches to the panic path, which no thread takes here.

1. **Kernel time on the GPU** (``--images DIR``): a bandwidth-bound axpy over 2^24 and 2^26 floats;
   each kernel launched 20 times inside a CUDA graph (a captured launch is not checked after, so
   the graph times the kernels alone), graphs replayed in interleaved rounds, CUDA events, medians;
   the ratio checked / unchecked.  Also eager calls in microseconds: the checked kernel waits for
   each launch and reads the 440-byte record; the unchecked one cannot panic (its PTX never
   reaches the record), so it launches without waiting: the host cost of reporting.
2. **The code** (``--save DIR``, no GPU): the registers (from the cubin) and SASS instruction counts
   (cuobjdump) of both kernels in each image, saved as ``DIR/<image>.ptxb``.

Usage: ``python bench/panic_cost.py --save .gpuimages`` where rustc is (or
``python tests/gpu/_images.py .gpuimages``, which saves the same image), then
``python bench/panic_cost.py --images .gpuimages`` on the GPU (no rustc, no NVRTC needed there).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from frameworks import _cuobjdump

SOURCE = Path(__file__).parents[1] / "tests" / "rust" / "idiomatic.rs"
KERNELS = ("axpy", "axpy_unchecked")
# row -> (image, panic_messages, LinkOptions.max_registers)
VARIANTS = {"full": ("rust_panics", "full", None), "location": ("rust_panics_location", "location", None),
            "full, max_registers=0": ("rust_panics_uncapped", "full", 0)}
SIZES, LAUNCHES, ROUNDS, BLOCK = (1 << 24, 1 << 26), 20, 15, 256


def build(panic_messages: str, max_registers: int | None):
    import ptxbridge
    import ptxbridge.rust
    from ptxbridge.linker.options import LinkOptions

    art = ptxbridge.rust.compile(SOURCE, arch="sm_90", progress=False, panic_messages=panic_messages)
    return ptxbridge.link([art], arch="sm_90", options=LinkOptions(max_registers=max_registers))


def registers(image) -> dict[str, int | None]:
    """Registers per kernel, as the image's cubin records them."""
    from ptxbridge.abi.cubin import read_cubin

    return {k.name: k.registers for k in read_cubin(image.cubin).kernels if k.name in KERNELS}


def sass_counts(image) -> dict[str, int | str]:
    """SASS instructions per kernel (cuobjdump -sass of the image's cubin)."""
    found = _cuobjdump()
    if found is None:
        return dict.fromkeys(KERNELS, "cuobjdump/nvdisasm not found")
    tool, env = found
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "image.cubin"
        path.write_bytes(image.cubin)
        text = subprocess.run([tool, "-sass", str(path)], capture_output=True, text=True, env=env).stdout
    counts: dict[str, int | str] = {}
    for block in re.split(r"\n\s*Function : ", text):
        name = block.split("\n", 1)[0].strip()
        if name in KERNELS:
            counts[name] = len(re.findall(r"/\*[0-9a-f]{4}\*/\s+(?!NOP\b)\S", block))  # NOPs pad
    return counts


def gpu(images: Path) -> None:
    import torch

    from ptxbridge import Image

    print("| panic messages, link | floats | axpy (checked) us | axpy_unchecked us | ratio | GB/s checked | "
          "GB/s unchecked |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    modules = {mode: Image.open(images / f"{name}.ptxb").load(0) for mode, (name, *_) in VARIANTS.items()}
    for n in SIZES:
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        grid = -(-n // BLOCK)
        graphs = {}
        for mode, module in modules.items():
            for name in KERNELS:
                module[name](1.0001, x, y, grid=grid, block=BLOCK)  # eager once: loads, checks, warms up
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    for _ in range(LAUNCHES):
                        module[name](1.0001, x, y, grid=grid, block=BLOCK)
                graphs[mode, name] = graph
        times: dict[tuple[str, str], list[float]] = {key: [] for key in graphs}
        for _ in range(ROUNDS):  # interleaved: every graph once per round
            for key, graph in graphs.items():
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                graph.replay()
                end.record()
                end.synchronize()
                times[key].append(start.elapsed_time(end) * 1000 / LAUNCHES)
        for mode in modules:
            checked, unchecked = (statistics.median(times[mode, name]) for name in KERNELS)
            rate = [12 * n / t / 1e3 for t in (checked, unchecked)]  # read x, y; write y
            print(f"| {mode} | 2^{n.bit_length() - 1} | {checked:.1f} | {unchecked:.1f} | "
                  f"{checked / unchecked:.3f} | {rate[0]:.0f} | {rate[1]:.0f} |")
    small = torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda")
    for name in KERNELS:
        calls = []
        for _ in range(ROUNDS):
            began = time.perf_counter()
            for _ in range(100):
                modules["full"][name](1.0, *small, grid=4, block=BLOCK)
            torch.cuda.synchronize()
            calls.append((time.perf_counter() - began) * 1e4)
        print(f"\neager `{name}` calls over 1024 floats, 100 then one synchronize: "
              f"{statistics.median(calls):.1f} us per call (median of {ROUNDS} rounds)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--save", type=Path,
                        help="build the images, save them in DIR, print registers and SASS")
    parser.add_argument("--images", type=Path, help="time the kernels on the GPU from the images in DIR")
    args = parser.parse_args()
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
        print("| panic messages, link | kernel | registers | SASS instructions (sm_90) |")
        print("|---|---|---:|---:|")
        for mode, (name, panic_messages, max_registers) in VARIANTS.items():
            image = build(panic_messages, max_registers)
            image.save(args.save / f"{name}.ptxb")
            counts, regs = sass_counts(image), registers(image)
            for kernel in KERNELS:
                print(f"| {mode} | {kernel} | {regs.get(kernel)} | {counts.get(kernel)} |")
    if args.images:
        gpu(args.images)
    if not (args.save or args.images):
        parser.error("give --save DIR (no GPU needed) and/or --images DIR (on the GPU)")


if __name__ == "__main__":
    main()
