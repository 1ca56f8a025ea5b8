"""Host time per kernel launch: ptxbridge against a C++ driver loop and the Python peers.

One run, one kernel (``vadd3(const float*, const float*, float*, int)``, 1024
elements, grid 4 x block 256), one non-default stream.  Figure: host time per
launch, median of 30 batches of 500 launches, synchronized between batches
(one batch is timed end to end, so queueing and the launch call count).  Because the host drifts by
up to 30% within a run, the headline ratio is also measured in interleaved
rounds (C loop, then the checked launch, back to back; median of the per-round
ratios).  Also: cold link + load of a mixed NVRTC + numba image against a warm
(cached) link + load; and the no-alias check (docs/safety.md) on vs off for
vadd3 typed with ``__restrict__`` pointers, in interleaved rounds.

Usage: ``python bench/launch_overhead.py`` on a machine with a GPU, nvcc and
torch; peers that are not installed are reported as skipped.  Prints a
markdown table; ``--json FILE`` also writes the numbers.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

N, GRID, BLOCK, BATCHES, PER_BATCH, ROUNDS = 1024, 4, 256, 30, 500, 7
UNCHECKED = "least Python launcher: positional C call, 3 DLPack views, no checks (FLOOR_LAUNCHER)"

SOURCE = r"""
extern "C" __global__ void vadd3(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
"""

C_LOOP = r"""
#include <cuda.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#define CK(x) do { CUresult r = (x); if (r) { const char* s; cuGetErrorName(r, &s); \
    std::fprintf(stderr, "%s: %s\n", #x, s); return 1; } } while (0)
int main(int argc, char** argv) {
    int batches = std::atoi(argv[2]), per = std::atoi(argv[3]), n = 1024;
    CUdevice dev; CUcontext ctx; CUmodule mod; CUfunction f; CUstream s;
    CK(cuInit(0)); CK(cuDeviceGet(&dev, 0)); CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx)); CK(cuModuleLoad(&mod, argv[1]));
    CK(cuModuleGetFunction(&f, mod, "vadd3")); CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr a, b, c;
    CK(cuMemAlloc(&a, n * 4)); CK(cuMemAlloc(&b, n * 4)); CK(cuMemAlloc(&c, n * 4));
    void* args[] = {&a, &b, &c, &n};
    for (int i = 0; i < per; ++i) CK(cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, s, args, nullptr));
    CK(cuStreamSynchronize(s));
    std::vector<double> times;
    for (int k = 0; k < batches; ++k) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < per; ++i) CK(cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, s, args, nullptr));
        auto t1 = std::chrono::steady_clock::now();
        CK(cuStreamSynchronize(s));
        times.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / per);
    }
    std::sort(times.begin(), times.end());
    std::printf("%.4f\n", times[times.size() / 2]);
    return 0;
}
"""


def per_launch(launch: Callable[[], None], sync: Callable[[], None]) -> float:
    """Median over batches of host microseconds per launch."""
    for _ in range(PER_BATCH):
        launch()
    sync()
    times = []
    for _ in range(BATCHES):
        t0 = time.perf_counter()
        for _ in range(PER_BATCH):
            launch()
        t1 = time.perf_counter()
        sync()
        times.append((t1 - t0) / PER_BATCH * 1e6)
    return statistics.median(times)


# cuLaunchKernel's signature, doing nothing: the C fast path's own cost without the driver's
NOOP_LAUNCH = """
int noop_launch(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                unsigned shared, void *stream, void **params, void **extra) { return 0; }
"""


# What the least launchers share: DLPack's C views, the exchange API struct, cuLaunchKernel's type.
C_PRELUDE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
typedef struct { int32_t device_type, device_id; } Dev;
typedef struct { uint8_t code, bits; uint16_t lanes; } Type;
typedef struct { void *data; Dev device; int32_t ndim; Type dtype; int64_t *shape, *strides;
                 uint64_t byte_offset; } View;
typedef struct { uint32_t major, minor; void *prev; void *alloc, *managed_from, *managed_to;
                 int (*view)(void *, View *); void *stream; } Api;
typedef int (*Launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                      void *, void **, void **);
"""

# The least a Python launcher of torch tensors can do: one positional C call, three DLPack C
# exchange views (no checks of dtype, device, size or aliasing), cuLaunchKernel.  The checked
# launch is compared with this as well as with the C loop, so the table says how much of the gap is
# ptxbridge's and how much any Python caller of torch tensors pays.
FLOOR_LAUNCHER = C_PRELUDE + r"""
static const Api *api; static Launch launch; static void *function, *stream;
static PyObject *setup(PyObject *self, PyObject *args) {
    PyObject *capsule; unsigned long long f, l, s;
    if (!PyArg_ParseTuple(args, "OKKK", &capsule, &f, &l, &s)) return NULL;
    api = PyCapsule_GetPointer(capsule, "dlpack_exchange_api");
    if (api == NULL) return NULL;
    function = (void *)(uintptr_t)f; launch = (Launch)(uintptr_t)l; stream = (void *)(uintptr_t)s;
    Py_RETURN_NONE;
}
static PyObject *vadd3(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    View v[3]; void *ptr[3];
    if (nargs != 4) { PyErr_SetString(PyExc_TypeError, "vadd3(a, b, c, n)"); return NULL; }
    for (int i = 0; i < 3; ++i) {
        if (api->view(args[i], &v[i]) != 0) return NULL;
        ptr[i] = (char *)v[i].data + v[i].byte_offset;
    }
    int n = (int)PyLong_AsLong(args[3]);
    void *params[] = {&ptr[0], &ptr[1], &ptr[2], &n};
    if (launch(function, GRID, 1, 1, BLOCK, 1, 1, 0, stream, params, NULL) != 0) {
        PyErr_SetString(PyExc_RuntimeError, "cuLaunchKernel failed"); return NULL;
    }
    Py_RETURN_NONE;
}
static PyMethodDef methods[] = {{"setup", setup, METH_VARARGS, NULL},
                                {"vadd3", (PyCFunction)(void (*)(void))vadd3, METH_FASTCALL, NULL}, {0}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "floor_launcher", NULL, -1, methods};
PyMODINIT_FUNC PyInit_floor_launcher(void) { return PyModule_Create(&module); }
"""


def c_extension(work: Path, name: str, source: str) -> Any:
    """The C extension ``name`` built from ``source`` with ``cc`` against this Python (once per ``work``
    folder), imported; GRID and BLOCK are defined for it."""
    import importlib.util
    import sysconfig

    target = work / f"{name}{sysconfig.get_config_var('EXT_SUFFIX')}"
    if not target.exists():
        (work / f"{name}.c").write_text(source)
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", f"-DGRID={GRID}", f"-DBLOCK={BLOCK}",
                        f"-I{sysconfig.get_paths()['include']}", "-o", str(target), str(work / f"{name}.c")],
                       check=True)
    spec = importlib.util.spec_from_file_location(name, target)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def floor_launcher(work: Path, cubin: bytes, torch, stream) -> Callable[..., None]:
    """FLOOR_LAUNCHER built against this Python, set up for vadd3 on ``stream``."""
    floor = c_extension(work, "floor_launcher", FLOOR_LAUNCHER)
    module = vadd3_image(cubin).load(0)
    entry = ctypes.cast(ctypes.CDLL("libcuda.so.1").cuLaunchKernel, ctypes.c_void_p).value
    floor.setup(torch.Tensor.__dlpack_c_exchange_api__, module.backend.function("vadd3").handle, entry,
                stream.cuda_stream)
    floor.keep = module  # the function handle lives as long as its module
    return floor.vadd3


def build(work: Path) -> Path:
    (work / "vadd3.cu").write_text(SOURCE)
    (work / "loop.cpp").write_text(C_LOOP)
    (work / "noop.c").write_text(NOOP_LAUNCH)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(work / "noop.so"), str(work / "noop.c")],
                   check=True)
    subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-o", str(work / "vadd3.cubin"), str(work / "vadd3.cu")],
                   check=True)
    subprocess.run(["nvcc", "-O2", "-o", str(work / "loop"), str(work / "loop.cpp"), "-lcuda"], check=True)
    return work / "vadd3.cubin"


def c_loop(work: Path, cubin: Path) -> float:
    out = subprocess.run([str(work / "loop"), str(cubin), str(BATCHES), str(PER_BATCH)], check=True,
                         capture_output=True, text=True)
    return float(out.stdout.strip())


def vadd3_image(cubin: bytes, noalias: str = ""):
    """The benchmark kernel as a ptxbridge image: ``vadd3(*const f32, *const f32, *mut f32, i32)``;
    ``noalias="restrict"`` types it as ``__restrict__`` pointers (a no-alias promise checked at launch)."""
    from ptxbridge.abi import Param, Pointer, Scalar, Signature, dtype
    from ptxbridge.artifacts.image import Image

    f32 = Scalar(dtype("f32"))
    a, b, c = (Param(name, Pointer(f32, name == "c", noalias)) for name in "abc")
    sig = Signature("vadd3", (a, b, c, Param("n", Scalar(dtype("i32")))))
    return Image(cubin, "sm_90", {"vadd3": sig})


def aliasing_rows(cubin: bytes, torch, rounds: int = ROUNDS) -> dict[str, float]:
    """The cost of the no-alias check (docs/safety.md) on the C fast path: vadd3 typed with
    ``__restrict__`` pointers (two pairs of tensors to compare), check on vs off, in interleaved rounds."""
    os.environ.pop("PTXBRIDGE_FASTLAUNCH", None)
    checked = vadd3_image(cubin, "restrict").load(0)
    unchecked = vadd3_image(cubin, "restrict").load(0)
    unchecked.check_aliasing = False
    stream = torch.cuda.Stream()
    a, b, c = (torch.rand(N, device="cuda") for _ in range(3))
    handle = stream.cuda_stream
    times: dict[str, list[float]] = {"on": [], "off": []}
    for _ in range(rounds):
        for key, module in (("on", checked), ("off", unchecked)):
            times[key].append(per_launch(lambda k=module.vadd3: k(a, b, c, N, grid=GRID, block=BLOCK,
                                                                  stream=handle), stream.synchronize))
    for module in (checked, unchecked):
        assert next(iter(module.vadd3._plans.values())).native is not None, "the C plan was not used"
    torch.testing.assert_close(c, a + b)
    row = f"ptxbridge, torch, C fast path, stream=int, __restrict__ signature ({rounds} interleaved rounds)"
    return {f"{row}: with aliasing check": statistics.median(times["on"]),
            f"{row}: check off": statistics.median(times["off"])}


def ptxbridge_rows(cubin: bytes, torch, noop: Path) -> dict[str, float]:
    image = vadd3_image(cubin)
    sig = image.kernels["vadd3"]
    rows = {}
    stream = torch.cuda.Stream()
    a, b, c = (torch.rand(N, device="cuda") for _ in range(3))
    handle = stream.cuda_stream
    from ptxbridge.launch import fastpath

    if fastpath.native_available():  # the C launcher + plan (ptxbridge.launch._fastlaunch) first, then Python
        native = image.load(0).vadd3
        with torch.cuda.stream(stream):
            rows["ptxbridge, torch tensors, C fast path (torch's current stream)"] = per_launch(
                lambda: native(a, b, c, N, grid=GRID, block=BLOCK), stream.synchronize)
        torch.testing.assert_close(c, a + b)
        c.zero_()
        torch.cuda.synchronize()
        rows["ptxbridge, torch tensors, C fast path, stream=int handle"] = per_launch(
            lambda: native(a, b, c, N, grid=GRID, block=BLOCK, stream=handle), stream.synchronize)
        assert next(iter(native._plans.values())).native is not None, "the C plan was not used"
        assert native._cached(), "the C launcher has no plan: every call ran Python"
        torch.testing.assert_close(c, a + b)
        rows["ptxbridge, torch tensors, C fast path, stream=torch.cuda.Stream"] = per_launch(
            lambda: native(a, b, c, N, grid=GRID, block=BLOCK, stream=stream), stream.synchronize)
        python_front = native._call_python  # the C path before the launcher: Python parses, then the plan
        rows["ptxbridge, torch tensors, C plan behind Python's Kernel._call_python, stream=int"] = per_launch(
            lambda: python_front(a, b, c, N, grid=GRID, block=BLOCK, stream=handle), stream.synchronize)
        c.zero_()
        torch.cuda.synchronize()
        native(a, b, c, N // 2, grid=GRID, block=BLOCK, stream=handle)  # the scalar reaches the kernel
        stream.synchronize()
        torch.testing.assert_close(c[: N // 2], (a + b)[: N // 2])
        assert not c[N // 2:].any(), "the C path packed n wrongly"
        address = ctypes.cast(ctypes.CDLL(str(noop)).noop_launch, ctypes.c_void_p).value
        idle = image.load(0)
        facts = idle.backend.native_facts
        idle.backend.native_facts = lambda *args, **kw: {**facts(*args, **kw), "launch_entry": address}
        idle_kernel = idle.vadd3
        rows["breakdown: C fast path, stream=int, cuLaunchKernel replaced by a C no-op"] = per_launch(
            lambda: idle_kernel(a, b, c, N, grid=GRID, block=BLOCK, stream=handle), stream.synchronize)
        assert idle_kernel._cached(), "the no-op row did not run the C launcher"
        rows["breakdown: the timing loop itself (an empty lambda per launch)"] = per_launch(
            lambda: None, stream.synchronize)
    else:
        rows["ptxbridge, C fast path"] = "skipped: ptxbridge.launch._fastlaunch not built"
    os.environ["PTXBRIDGE_FASTLAUNCH"] = "0"  # the pure-Python path from here on
    module = image.load(0)
    kernel = module.vadd3
    with torch.cuda.stream(stream):
        rows["ptxbridge, torch tensors, Python path (torch's current stream)"] = per_launch(
            lambda: kernel(a, b, c, N, grid=GRID, block=BLOCK), stream.synchronize)
    c.zero_()
    torch.cuda.synchronize()
    rows["ptxbridge, torch tensors, Python path, stream=int handle"] = per_launch(
        lambda: kernel(a, b, c, N, grid=GRID, block=BLOCK, stream=handle), stream.synchronize)
    torch.testing.assert_close(c, a + b)
    # Where the time goes: the prepared driver call alone, and the Python side alone.
    backend = module.backend
    raw = backend.prepare(backend.function("vadd3"), sig.layout.packer(), "vadd3")
    values = (a.data_ptr(), b.data_ptr(), c.data_ptr(), N)
    grid3, block3 = (GRID, 1, 1), (BLOCK, 1, 1)
    rows["breakdown: pack + ctypes cuLaunchKernel only (no checks)"] = per_launch(
        lambda: raw(values, grid3, block3, 0, handle), stream.synchronize)
    stub = image.load(0)
    stub.backend.prepare = lambda *args, **kwargs: (lambda *launch_args: None)
    stubbed = stub.vadd3
    rows["breakdown: checks + binding + call path, launch stubbed out"] = per_launch(
        lambda: stubbed(a, b, c, N, grid=GRID, block=BLOCK, stream=handle), stream.synchronize)
    os.environ["PTXBRIDGE_LAUNCH_PARAMS"] = "pointers"
    pointers = image.load(0).vadd3
    del os.environ["PTXBRIDGE_LAUNCH_PARAMS"]
    rows["ptxbridge, torch tensors, stream=int, kernelParams instead of extra"] = per_launch(
        lambda: pointers(a, b, c, N, grid=GRID, block=BLOCK, stream=handle), stream.synchronize)
    try:
        import cupy
    except ImportError:
        return rows
    ca, cb, cc = (cupy.random.random(N, dtype=cupy.float32) for _ in range(3))
    cstream = cupy.cuda.Stream(non_blocking=True)
    with cstream:
        rows["ptxbridge, CuPy arrays (CuPy's current stream)"] = per_launch(
            lambda: kernel(ca, cb, cc, N, grid=GRID, block=BLOCK), cstream.synchronize)
    return rows


def interleaved_ratios(work: Path, cubin_path: Path, torch, rounds: int = ROUNDS) -> dict[str, list[float]]:
    """The headline ratio, robust to drift: each round times the C loop, then the checked launch
    through the default call path (the C launcher where built), back to back; ratio per round."""
    os.environ.pop("PTXBRIDGE_FASTLAUNCH", None)  # the default path (the rows above switched it off)
    kernel = vadd3_image(cubin_path.read_bytes()).load(0).vadd3
    stream = torch.cuda.Stream()
    a, b, c = (torch.rand(N, device="cuda") for _ in range(3))
    handle = stream.cuda_stream
    unchecked = floor_launcher(work, cubin_path.read_bytes(), torch, stream)
    ratios: dict[str, list[float]] = {"torch's current stream": [], "stream=int handle": [],
                                      UNCHECKED: [], "stream=int handle / " + UNCHECKED: []}
    for _ in range(rounds):
        floor = c_loop(work, cubin_path)
        with torch.cuda.stream(stream):
            ratios["torch's current stream"].append(
                per_launch(lambda: kernel(a, b, c, N, grid=GRID, block=BLOCK), stream.synchronize) / floor)
        checked = per_launch(lambda: kernel(a, b, c, N, grid=GRID, block=BLOCK, stream=handle),
                             stream.synchronize)
        least = per_launch(lambda: unchecked(a, b, c, N), stream.synchronize)
        ratios["stream=int handle"].append(checked / floor)
        ratios[UNCHECKED].append(least / floor)
        ratios["stream=int handle / " + UNCHECKED].append(checked / least)
    c.zero_()
    unchecked(a, b, c, N)
    stream.synchronize()
    torch.testing.assert_close(c, a + b)  # the floor launcher computes what the checked launch does
    return ratios


def peer_rows(cubin: bytes, torch) -> dict[str, float | str]:
    rows: dict[str, float | str] = {}
    a, b, c = (torch.rand(N, device="cuda") for _ in range(3))
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        rows["torch.add(a, b, out=c)"] = per_launch(lambda: torch.add(a, b, out=c), stream.synchronize)
    for name, peer in (("cuda.core launch, raw int pointers", _cuda_core), ("CuPy RawKernel", _cupy),
                       ("numba-cuda, numba device arrays", _numba), ("Triton JIT kernel", _triton)):
        try:
            rows[name] = peer(cubin, torch)
        except Exception as exc:  # a missing or broken peer is reported, not fatal
            rows[name] = f"skipped: {type(exc).__name__}: {str(exc)[:80]}"
    return rows


def _cuda_core(cubin: bytes, torch) -> float:
    from cuda.core import Device, LaunchConfig, ObjectCode, launch

    device = Device(0)
    device.set_current()
    stream = device.create_stream()
    kernel = ObjectCode.from_cubin(cubin).get_kernel("vadd3")
    a, b, c = (torch.rand(N, device="cuda") for _ in range(3))
    pa, pb, pc, n = a.data_ptr(), b.data_ptr(), c.data_ptr(), np.int32(N)
    config = LaunchConfig(grid=GRID, block=BLOCK)
    return per_launch(lambda: launch(stream, config, kernel, pa, pb, pc, n), stream.sync)


def _cupy(cubin: bytes, torch) -> float:
    import cupy

    kernel = cupy.RawKernel(SOURCE, "vadd3")
    a, b, c = (cupy.random.random(N, dtype=cupy.float32) for _ in range(3))
    stream = cupy.cuda.Stream(non_blocking=True)
    n = np.int32(N)
    with stream:
        return per_launch(lambda: kernel((GRID,), (BLOCK,), (a, b, c, n)), stream.synchronize)


def _numba(cubin: bytes, torch) -> float:
    from numba import cuda

    @cuda.jit
    def vadd3(a, b, c, n):
        i = cuda.grid(1)
        if i < n:
            c[i] = a[i] + b[i]

    a, b, c = (cuda.to_device(np.random.random(N).astype(np.float32)) for _ in range(3))
    stream = cuda.stream()
    return per_launch(lambda: vadd3[GRID, BLOCK, stream](a, b, c, N), stream.synchronize)


def _triton(cubin: bytes, torch) -> float:
    from _triton_vadd import vadd3

    a, b, c = (torch.rand(N, device="cuda") for _ in range(3))
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        return per_launch(lambda: vadd3[(GRID,)](a, b, c, N, BLOCK=BLOCK), stream.synchronize)


def link_rows() -> dict[str, float | str]:
    """Cold nvJitLink of a mixed NVRTC + numba image vs the warm cached link, each plus load."""
    try:
        from numba import cuda

        import ptxbridge.numba as pn
        import ptxbridge.nvrtc as nvrtc
        from ptxbridge.linker import link
        from ptxbridge.linker.target import default_arch

        def scale(x, alpha):
            i = cuda.grid(1)
            if i < x.size:
                x[i] *= alpha

        with tempfile.TemporaryDirectory() as cache:
            os.environ["PTXBRIDGE_CACHE_DIR"] = cache
            arch = default_arch()
            parts = [nvrtc.compile(SOURCE, arch=arch), pn.compile(scale, "void(float32[::1], float32)",
                                                                   arch=arch, name="scale")]
            times = {}
            for label in ("cold link + load (nvJitLink)", "warm cached link + load"):
                t0 = time.perf_counter()
                module = link(parts, arch=arch).load(0)
                times[label] = (time.perf_counter() - t0) * 1e6
                module.close()
            return times
    except Exception as exc:
        return {"cold/warm link": f"skipped: {type(exc).__name__}: {str(exc)[:120]}"}


def table(c_us: float, rows: dict[str, float | str]) -> str:
    lines = ["| path | us per launch | vs raw C |", "| --- | ---: | ---: |",
             f"| C++ `cuLaunchKernel` loop | {c_us:.2f} | 1.00 |"]
    for name, value in rows.items():
        if isinstance(value, str):
            lines.append(f"| {name} | {value} | |")
        else:
            lines.append(f"| {name} | {value:.2f} | {value / c_us:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    import torch

    sys.path.insert(0, str(Path(__file__).parent))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cubin_path = build(work)
        cubin = cubin_path.read_bytes()
        c_us = c_loop(work, cubin_path)
        rows: dict[str, float | str] = {}
        rows.update(ptxbridge_rows(cubin, torch, work / "noop.so"))
        rows.update(aliasing_rows(cubin, torch))
        rows.update(peer_rows(cubin, torch))
        c_again = c_loop(work, cubin_path)  # the floor again, to show drift over the run
        interleaved = interleaved_ratios(work, cubin_path, torch)
    rows["C++ loop again, after the Python rows"] = c_again
    links = link_rows()
    print(f"# launch overhead, {time.strftime('%Y-%m-%d')}, {torch.cuda.get_device_name(0)}, "
          f"torch {torch.__version__}, Python {sys.version.split()[0]}\n")
    print(table(c_us, rows))
    print(f"\n| per-round ratio (to the C loop unless named), {ROUNDS} interleaved rounds | median | min "
          "| max |\n"
          "| --- | ---: | ---: | ---: |")
    for name, values in interleaved.items():
        print(f"| {name} | {statistics.median(values):.2f} | {min(values):.2f} | {max(values):.2f} |")
    print("\n| image | microseconds |\n| --- | ---: |")
    for name, value in links.items():
        print(f"| {name} | {value if isinstance(value, str) else f'{value:.0f}'} |")
    if args.json:
        args.json.write_text(json.dumps({"c_loop_us": c_us, "rows": rows, "link": links,
                                         "interleaved_ratios": interleaved}, indent=2))


if __name__ == "__main__":
    main()
