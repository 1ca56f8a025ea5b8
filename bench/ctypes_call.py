"""How much a ctypes call to cuLaunchKernel costs, three ways, on pre-built arguments.

Usage: ``python bench/ctypes_call.py IMAGE`` where IMAGE is a saved ptxbridge image holding
``vadd3`` (e.g. ``.gpuimages/cpp.ptxb`` from ``tests/gpu/_images.py``).  Same method as
``launch_overhead.py`` (median of 30 batches of 500); numbers in bench/RESULTS.md.
"""

from __future__ import annotations

import ctypes
import statistics
import struct
import sys
import time

import torch
from cuda.bindings import driver as cu

from ptxbridge import Image


def per_launch(launch, stream) -> float:
    for _ in range(500):
        launch()
    stream.synchronize()
    times = []
    for _ in range(30):
        t0 = time.perf_counter()
        for _ in range(500):
            launch()
        times.append((time.perf_counter() - t0) / 500 * 1e6)
        stream.synchronize()
    return statistics.median(times)


def main() -> None:
    torch.zeros(1, device="cuda")  # the primary context, current on this thread
    module = cu.cuModuleLoadData(Image.open(sys.argv[1]).cubin)[1]
    function = cu.cuModuleGetFunction(module, b"vadd3")[1]
    stream = torch.cuda.Stream()
    a, b, c = (torch.rand(1024, device="cuda") for _ in range(3))
    buffer = (ctypes.c_char * 28)()
    struct.pack_into("<QQQi", buffer, 0, a.data_ptr(), b.data_ptr(), c.data_ptr(), 1024)
    size = ctypes.c_size_t(28)
    extra = (ctypes.c_void_p * 5)(1, ctypes.addressof(buffer), 2, ctypes.addressof(size), 0)
    handle, stream_arg = ctypes.c_void_p(int(function)), ctypes.c_void_p(stream.cuda_stream)
    plain = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
    holding_gil = ctypes.PyDLL("libcuda.so.1").cuLaunchKernel
    typed = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
    vp, ui = ctypes.c_void_p, ctypes.c_uint
    typed.argtypes = [vp, ui, ui, ui, ui, ui, ui, ui, vp, vp, vp]
    rows = {
        "CDLL, no argtypes, extra": lambda: plain(handle, 4, 1, 1, 256, 1, 1, 0, stream_arg, None, extra),
        "PyDLL (GIL held), no argtypes, extra": lambda: holding_gil(
            handle, 4, 1, 1, 256, 1, 1, 0, stream_arg, None, extra),
        "CDLL, argtypes, extra": lambda: typed(int(function), 4, 1, 1, 256, 1, 1, 0, stream.cuda_stream,
                                               None, extra),
    }
    for name, launch in rows.items():
        print(f"{name}: {per_launch(launch, stream):.2f} us")


if __name__ == "__main__":
    main()
