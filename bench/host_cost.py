"""The C launch path's own host cost per producer, on any machine: ``cuLaunchKernel`` is a C no-op.

No GPU is needed.  Each row launches ``vadd3(const float*, const float*, float*, int)`` (or a numba
``float32[::1]`` / struct variant, or ``launch_producers.py``'s ``span_axpy`` of two structs holding
tensors) through ``Kernel.__call__`` on a loader double whose C plan calls a
no-op in place of the driver, next to the producer's least launcher of ``launch_producers.py``
(``FLOORS``: one positional C call reading only what the kind needs, no checks) on the same no-op.
What is left between the two is what ptxbridge's checks and dispatch cost per call.  Producers:
CuPy arrays (real ``cupy.ndarray`` objects over host addresses: CuPy makes arrays without a device
when handed ``UnownedMemory``), ``__cuda_array_interface__`` objects, torch CPU tensors (DLPack C
exchange API).  Rounds are interleaved; median ns per call.

Usage: ``python bench/host_cost.py`` (about 20 s); ``--quick`` for fewer rounds.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from launch_overhead import FLOOR_LAUNCHER, NOOP_LAUNCH, N, c_extension
from launch_producers import floors

from ptxbridge.abi import Param, Pointer, Scalar, Signature, dtype
from ptxbridge.abi.devices import DLPACK_CPU, DLPACK_CUDA
from ptxbridge.abi.kinds import NumbaArray, Slice, Struct, StructField
from ptxbridge.abi.signature import Convention
from ptxbridge.artifacts.image import Image
from ptxbridge.launch.module import Module
from ptxbridge.loaders.base import Backend

STREAM = 0x1234  # a non-default stream handle: no cuCtxSetCurrent per launch
CALLS = 20000


class _Function:
    max_dynamic_shared = 0


class NoDriver(Backend):
    """A loader whose C plans call ``noop`` in place of cuLaunchKernel (its Python launches fail)."""

    needs_buffers = False

    def __init__(self, device_type: int, noop: int):
        self.device_type, self.device_id, self.noop = device_type, 0, noop

    def function(self, name: str) -> Any:
        return _Function()

    def prepare(self, function: Any, packer: Any, name: str, **extra: Any) -> Callable[..., None]:
        return lambda *args: None  # the Python path's launch, a no-op too

    def native_facts(self, function: Any, name: str) -> dict[str, Any]:
        return {"function": 0xF00, "launch_entry": self.noop, "set_current_entry": self.noop,
                "function_obj": function, "name": name}

    def launch(self, *args: Any) -> None:
        raise AssertionError("the benchmark ran the general path")

    def global_address(self, name: str) -> int:
        raise KeyError(name)

    read_global = write_global = global_address

    def close(self) -> None:
        pass


def per_call_ns(call: Callable[[], Any], calls: int = CALLS) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        call()
    return (time.perf_counter_ns() - start) / calls


def interleave(rows: dict[str, tuple[str, Callable[[], Any]]], rounds: int) -> dict[str, tuple[str, float]]:
    times: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(rounds):
        for name, (_path, call) in rows.items():
            times[name].append(per_call_ns(call))
    return {name: (rows[name][0], statistics.median(values)) for name, values in times.items()}


F32 = Scalar(dtype("f32"))
I32 = Scalar(dtype("i32"))
VADD3 = Signature("vadd3", (*(Param(n, Pointer(F32, n == "c")) for n in "abc"), Param("n", I32)))
NUMBA3 = Signature("vadd3", (*(Param(n, NumbaArray(dtype("f32"), 1, "C")) for n in "abc"),
                             Param("n", I32)), convention=Convention.NUMBA)
SPAN = Struct("Span", (StructField("data", Slice(dtype("f32"), True)), StructField("scale", F32)))
# launch_producers.py's span_axpy(Span x, Span y, float a), Span = { float* data; unsigned long long len; }
SPAN_PTR = Struct("Span", (StructField("data", Pointer(F32, True)), StructField("len", Scalar(dtype("u64")))))
SPAN_AXPY = Signature("vadd3", (Param("x", SPAN_PTR), Param("y", SPAN_PTR), Param("a", F32)),
                      convention=Convention.C)
STRUCT3 = Signature("vadd3", (Param("a", SPAN), Param("b", SPAN), Param("c", SPAN), Param("n", I32)))


def _kernel(sig: Signature, device_type: int, noop: int) -> Any:
    return Module(Image(None, "sm_90", {"vadd3": sig}), NoDriver(device_type, noop)).vadd3


def _checked(kernel: Any, args: tuple) -> tuple[str, Callable[[], None]]:
    """The call, and which path it takes ("C" or "Python")."""
    kernel(*args, grid=4, block=256, stream=STREAM)
    path = "C" if kernel._cached() else "Python"
    if len(args) == 3:  # spelled out as a caller writes them: `*args` with keywords builds a dict per call
        x, y, z = args
        return path, lambda: kernel(x, y, z, grid=4, block=256, stream=STREAM)
    a, b, c, n = args
    return path, lambda: kernel(a, b, c, n, grid=4, block=256, stream=STREAM)


def rows(work: Path, noop: int) -> dict[str, tuple[str, Callable[[], Any]]]:
    found: dict[str, tuple[str, Callable[[], Any]]] = {}
    floor = floors(work)
    host = [np.zeros(N, np.float32) for _ in range(3)]
    try:
        import cupy
        from cupy.cuda import memory
    except ImportError:
        cupy = None
    if cupy is not None:
        arrays = x, y, z = [cupy.ndarray((N,), cupy.float32, memptr=memory.MemoryPointer(memory.UnownedMemory(
            h.ctypes.data, h.nbytes, h, device_id=0), 0)) for h in host]
        floor.setup(0xF00, noop, STREAM, None)
        found["CuPy on float*: least CuPy launcher (data.ptr)"] = "-", lambda: floor.cupy_pointers(x, y, z, N)
        found["CuPy on float*: ptxbridge"] = _checked(_kernel(VADD3, DLPACK_CUDA, noop), (*arrays, N))
        found["CuPy on numba Array: ptxbridge"] = _checked(_kernel(NUMBA3, DLPACK_CUDA, noop), (*arrays, N))
        spans = [{"data": a, "scale": 1.0} for a in arrays]
        found["CuPy in structs {&mut [f32], f32}: ptxbridge"] = _checked(_kernel(STRUCT3, DLPACK_CUDA, noop),
                                                                         (*spans, N))
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        tensors = p, q, r = [torch.from_numpy(h) for h in host]
        least = c_extension(work, "floor_launcher", FLOOR_LAUNCHER)
        least.setup(torch.Tensor.__dlpack_c_exchange_api__, 0xF00, noop, STREAM)
        found["torch on float*: least DLPack launcher"] = "-", lambda: least.vadd3(p, q, r, N)
        found["torch on float*: ptxbridge"] = _checked(_kernel(VADD3, DLPACK_CPU, noop), (*tensors, N))
        floor.setup(0xF00, noop, STREAM, torch.Tensor.__dlpack_c_exchange_api__)  # cupy_pointers reads no api
        sp, sq = {"data": p, "len": N}, {"data": q, "len": N}
        found["torch in span_axpy structs {float*, u64}: least DLPack launcher"] = "-", lambda: floor.spans(
            sp, sq, 1.0)
        found["torch in span_axpy structs {float*, u64}: ptxbridge"] = _checked(
            _kernel(SPAN_AXPY, DLPACK_CPU, noop), (sp, sq, 1.0))
        spans = [{"data": t, "scale": 1.0} for t in tensors]
        found["torch in structs {&mut [f32], f32}: ptxbridge"] = _checked(_kernel(STRUCT3, DLPACK_CPU, noop),
                                                                          (*spans, N))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds instead of 9")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "noop.c").write_text(NOOP_LAUNCH)
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(work / "noop.so"), str(work / "noop.c")],
                       check=True)
        library = ctypes.CDLL(str(work / "noop.so"))
        noop = ctypes.cast(library.noop_launch, ctypes.c_void_p).value
        results = interleave(rows(work, noop), 3 if options.quick else 9)
    print("| row (cuLaunchKernel a C no-op, CPU) | path | ns per call (median) |")
    print("|---|---|---|")
    for name, (path, ns) in results.items():
        print(f"| {name} | {path} | {ns:.0f} |")


if __name__ == "__main__":
    main()
