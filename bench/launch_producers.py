"""Host time per launch for each tensor producer x parameter kind, each against its own least launcher.

Rows (the method of ``launch_overhead.py``: median of 30 batches of 500, one non-default stream,
interleaved rounds for the ratios):

========================================= ============================== ===============================
producer on kind                          ptxbridge (C plan)             peers in the same run
========================================= ============================== ===============================
CuPy arrays on ``float*`` (vadd3)         ``kernel(a, b, c, n, ...)``    the least CuPy launcher (C:
                                                                         ``data.ptr`` per array, no
                                                                         checks); CuPy ``RawKernel``
numba device arrays on ``float*``         the same                       the least array-interface
                                                                         launcher (C: the interface's
                                                                         ``data`` per array)
numba device arrays on numba ``Array``    a numba kernel compiled by     the least array-interface
(``float32[::1]``)                        ``ptxbridge.numba``            launcher packing numba's array
                                                                         struct; numba's own dispatcher
torch tensors on numba ``Array``          the same                       the least DLPack launcher
                                                                         packing numba's array struct
torch tensors / CuPy arrays in by-value   ``span_axpy(dict, dict, a)``   the least DLPack / CuPy launcher
structs ``{float*, u64}`` (dicts)                                        reading the same dicts
========================================= ============================== ===============================

The least launchers (``FLOORS``) are one positional C call each, reading only what the kind needs
through the producer's own interface, with no checks: what any Python launcher of that producer pays.

Usage: ``python bench/launch_producers.py`` on a machine with a GPU, nvcc, torch, CuPy and numba-cuda
(a producer that is missing is reported as skipped).  ``--json FILE`` also writes the numbers.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from launch_overhead import (
    BLOCK,
    C_PRELUDE,
    GRID,
    ROUNDS,
    N,
    build,
    c_extension,
    c_loop,
    per_launch,
    vadd3_image,
)

# One C extension of least launchers: setup(function, cuLaunchKernel, stream), then per producer x kind
# a positional call (a, b, c, n) that reads the three arrays and launches, checking nothing.
FLOORS = C_PRELUDE + r"""
#include <string.h>
static Launch launch; static void *function, *stream; static const Api *api;
static PyObject *s_data, *s_ptr, *s_cai, *s_len;

static PyObject *setup(PyObject *self, PyObject *args) {
    unsigned long long f, l, s; PyObject *capsule;
    if (!PyArg_ParseTuple(args, "KKKO", &f, &l, &s, &capsule)) return NULL;
    function = (void *)(uintptr_t)f; launch = (Launch)(uintptr_t)l; stream = (void *)(uintptr_t)s;
    api = capsule == Py_None ? NULL : PyCapsule_GetPointer(capsule, "dlpack_exchange_api");
    s_data = PyUnicode_InternFromString("data"); s_ptr = PyUnicode_InternFromString("ptr");
    s_cai = PyUnicode_InternFromString("__cuda_array_interface__");
    s_len = PyUnicode_InternFromString("len");
    Py_RETURN_NONE;
}

static PyObject *done(int code) {
    if (code) { PyErr_SetString(PyExc_RuntimeError, "cuLaunchKernel failed"); return NULL; }
    Py_RETURN_NONE;
}

static PyObject *launch_pointers(void *ptr[3], PyObject *n_obj) {
    int n = (int)PyLong_AsLong(n_obj);
    void *params[] = {&ptr[0], &ptr[1], &ptr[2], &n};
    return done(launch(function, GRID, 1, 1, BLOCK, 1, 1, 0, stream, params, NULL));
}

static int cupy_ptr(PyObject *a, void **out) {
    PyObject *data = PyObject_GetAttr(a, s_data);
    PyObject *ptr = data ? PyObject_GetAttr(data, s_ptr) : NULL;
    Py_XDECREF(data);
    if (ptr == NULL) return 0;
    *out = (void *)(uintptr_t)PyLong_AsUnsignedLongLong(ptr);
    Py_DECREF(ptr);
    return 1;
}

/* The interface's data pointer, shape[0] and strides[0] (None: the item size). */
static int cai_facts(PyObject *a, void **out, int64_t *extent, int64_t *stride) {
    PyObject *cai = PyObject_GetAttr(a, s_cai);
    if (cai == NULL) return 0;
    PyObject *data = PyDict_GetItemString(cai, "data"), *shape = PyDict_GetItemString(cai, "shape");
    PyObject *strides = PyDict_GetItemString(cai, "strides");
    *out = (void *)(uintptr_t)PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(data, 0));
    if (extent != NULL) {
        *extent = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, 0));
        *stride = strides == NULL || strides == Py_None ? 4 : PyLong_AsLongLong(PyTuple_GET_ITEM(strides, 0));
    }
    Py_DECREF(cai);
    return 1;
}

static PyObject *cupy_pointers(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    void *ptr[3];
    for (int i = 0; i < 3; ++i) if (!cupy_ptr(args[i], &ptr[i])) return NULL;
    return launch_pointers(ptr, args[3]);
}

static PyObject *cai_pointers(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    void *ptr[3];
    for (int i = 0; i < 3; ++i) if (!cai_facts(args[i], &ptr[i], NULL, NULL)) return NULL;
    return launch_pointers(ptr, args[3]);
}

/* numba's 1-d float32 array struct per array (meminfo, parent, nitems, itemsize, data, shape, stride),
 * then the i32 n: one packed buffer. */
static PyObject *launch_numba(void *ptr[3], int64_t extent[3], int64_t stride[3], PyObject *n_obj) {
    char buf[3 * 56 + 8];
    memset(buf, 0, sizeof buf);
    for (int i = 0; i < 3; ++i) {
        int64_t fields[7] = {0, 0, extent[i], 4, (int64_t)(uintptr_t)ptr[i], extent[i], stride[i]};
        memcpy(buf + 56 * i, fields, sizeof fields);
    }
    int n = (int)PyLong_AsLong(n_obj);
    memcpy(buf + 168, &n, 4);
    size_t size = 172;
    void *extra[] = {(void *)1, buf, (void *)2, &size, (void *)0};
    return done(launch(function, GRID, 1, 1, BLOCK, 1, 1, 0, stream, NULL, extra));
}

static PyObject *cai_numba(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    void *ptr[3]; int64_t extent[3], stride[3];
    for (int i = 0; i < 3; ++i) if (!cai_facts(args[i], &ptr[i], &extent[i], &stride[i])) return NULL;
    return launch_numba(ptr, extent, stride, args[3]);
}

static PyObject *dlpack_numba(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    void *ptr[3]; int64_t extent[3], stride[3]; View v;
    for (int i = 0; i < 3; ++i) {
        if (api->view(args[i], &v) != 0) return NULL;
        ptr[i] = (char *)v.data + v.byte_offset;
        extent[i] = v.shape[0];
        stride[i] = 4 * (v.strides ? v.strides[0] : 1);
    }
    return launch_numba(ptr, extent, stride, args[3]);
}

/* span_axpy(Span x, Span y, float a), struct Span { float* data; unsigned long long len; }: a {"data",
 * "len"} dict per struct, its tensor read through the DLPack C exchange API when set up with one, else
 * as a CuPy array (data.ptr); both structs and the float packed into one buffer. */
static PyObject *spans(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    uint64_t fields[4];
    char buf[36];
    for (int i = 0; i < 2; ++i) {
        PyObject *data = PyDict_GetItem(args[i], s_data), *len = PyDict_GetItem(args[i], s_len);
        void *ptr;
        View v;
        if (data == NULL || len == NULL) return NULL;
        if (api != NULL) {
            if (api->view(data, &v) != 0) return NULL;
            ptr = (char *)v.data + v.byte_offset;
        } else if (!cupy_ptr(data, &ptr)) {
            return NULL;
        }
        fields[2 * i] = (uint64_t)(uintptr_t)ptr;
        fields[2 * i + 1] = PyLong_AsUnsignedLongLong(len);
    }
    float a = (float)PyFloat_AsDouble(args[2]);
    memcpy(buf, fields, sizeof fields);
    memcpy(buf + sizeof fields, &a, sizeof a);
    size_t size = sizeof buf;
    void *extra[] = {(void *)1, buf, (void *)2, &size, (void *)0};
    return done(launch(function, GRID, 1, 1, BLOCK, 1, 1, 0, stream, NULL, extra));
}

#define FAST(name) {#name, (PyCFunction)(void (*)(void))name, METH_FASTCALL, NULL}
static PyMethodDef methods[] = {{"setup", setup, METH_VARARGS, NULL}, FAST(cupy_pointers), FAST(cai_pointers),
                                FAST(cai_numba), FAST(dlpack_numba), FAST(spans), {0}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "floors", NULL, -1, methods};
PyMODINIT_FUNC PyInit_floors(void) { return PyModule_Create(&module); }
"""


def floors(work: Path) -> Any:
    """FLOORS built against this Python.  Its state is one (function, stream) per process: call
    ``setup`` right before the group of rows that uses it."""
    return c_extension(work, "floors", FLOORS)


def _launch_entry() -> int:
    return ctypes.cast(ctypes.CDLL("libcuda.so.1").cuLaunchKernel, ctypes.c_void_p).value


def _numba_vadd3():
    from numba import cuda

    def vadd3(a, b, c, n):
        i = cuda.grid(1)
        if i < n:
            c[i] = a[i] + b[i]
    return vadd3


def interleave(contenders: dict[str, Callable[[], None]], sync: Callable[[], None],
               rounds: int = ROUNDS) -> dict[str, float]:
    """Median us per launch of each contender, timed back to back in each of ``rounds`` rounds."""
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, launch in contenders.items():
            times[name].append(per_launch(launch, sync))
    return {name: statistics.median(values) for name, values in times.items()}


def cupy_rows(work: Path, cubin: bytes) -> dict[str, float | str]:
    import cupy
    from launch_overhead import SOURCE

    module = vadd3_image(cubin).load(0)
    kernel = module.vadd3
    stream = cupy.cuda.Stream(non_blocking=True)
    a, b, c = (cupy.random.random(N, dtype=cupy.float32) for _ in range(3))
    floor = floors(work)
    floor.setup(module.backend.function("vadd3").handle, _launch_entry(), stream.ptr, None)
    raw = cupy.RawKernel(SOURCE, "vadd3")
    n = np.int32(N)
    handle = stream.ptr
    with stream:
        rows = interleave({
            "CuPy arrays on float*: ptxbridge, stream=int": lambda: kernel(a, b, c, N, grid=GRID, block=BLOCK,
                                                                         stream=handle),
            "CuPy arrays on float*: ptxbridge (CuPy's current stream)": lambda: kernel(a, b, c, N, grid=GRID,
                                                                                     block=BLOCK),
            "CuPy arrays on float*: least CuPy launcher (data.ptr, no checks)": lambda: floor.cupy_pointers(
                a, b, c, N),
            "CuPy arrays on float*: CuPy RawKernel (its current stream)": lambda: raw((GRID,), (BLOCK,),
                                                                                     (a, b, c, n)),
        }, stream.synchronize)
    assert kernel._cached() and next(iter(kernel._plans.values())).native is not None, "no C plan"
    c.fill(0)
    kernel(a, b, c, N, grid=GRID, block=BLOCK, stream=handle)
    stream.synchronize()
    assert cupy.allclose(c, a + b), "ptxbridge computed a wrong vadd3 from CuPy arrays"
    return rows


def numba_rows(work: Path, cubin: bytes, torch: Any) -> dict[str, float | str]:
    from numba import cuda

    import ptxbridge
    import ptxbridge.numba as pn

    stream = cuda.stream()
    handle = int(getattr(stream.handle, "value", stream.handle))  # ctypes in older numba-cuda, CUstream now
    a, b, c = (cuda.to_device(np.random.random(N).astype(np.float32), stream=stream) for _ in range(3))
    pointers = vadd3_image(cubin).load(0)
    floor = floors(work)
    floor.setup(pointers.backend.function("vadd3").handle, _launch_entry(), handle, None)
    pointer_kernel = pointers.vadd3
    rows = interleave({
        "numba device arrays on float*: ptxbridge, stream=int": lambda: pointer_kernel(
            a, b, c, N, grid=GRID, block=BLOCK, stream=handle),
        "numba device arrays on float*: least array-interface launcher": lambda: floor.cai_pointers(
            a, b, c, N),
    }, stream.synchronize)
    function = _numba_vadd3()
    artifact = pn.compile(function, "void(float32[::1], float32[::1], float32[::1], int32)", name="vadd3")
    arrays = ptxbridge.link([artifact]).load(0)
    kernel = arrays.vadd3
    floor_numba = floors(work)
    floor_numba.setup(arrays.backend.function(kernel.name).handle, _launch_entry(), handle, None)
    dispatcher = cuda.jit(function)
    rows.update(interleave({
        "numba device arrays on numba Array: ptxbridge, stream=int": lambda: kernel(
            a, b, c, N, grid=GRID, block=BLOCK, stream=handle),
        "numba device arrays on numba Array: least array-interface launcher": lambda: floor_numba.cai_numba(
            a, b, c, N),
        "numba device arrays on numba Array: numba's dispatcher": lambda: dispatcher[GRID, BLOCK, stream](
            a, b, c, N),
    }, stream.synchronize))
    assert kernel._cached() and pointer_kernel._cached(), "the C launcher ran no plan"
    c.copy_to_device(np.zeros(N, np.float32), stream=stream)
    kernel(a, b, c, N, grid=GRID, block=BLOCK, stream=handle)
    np.testing.assert_allclose(c.copy_to_host(stream=stream), a.copy_to_host() + b.copy_to_host())
    tstream = torch.cuda.Stream()
    ta, tb, tc = (torch.rand(N, device="cuda") for _ in range(3))
    floor_torch = floors(work)
    floor_torch.setup(arrays.backend.function(kernel.name).handle, _launch_entry(), tstream.cuda_stream,
                      torch.Tensor.__dlpack_c_exchange_api__)
    th = tstream.cuda_stream
    rows.update(interleave({
        "torch tensors on numba Array: ptxbridge, stream=int": lambda: kernel(ta, tb, tc, N, grid=GRID,
                                                                            block=BLOCK, stream=th),
        "torch tensors on numba Array: least DLPack launcher": lambda: floor_torch.dlpack_numba(
            ta, tb, tc, N),
    }, tstream.synchronize))
    tc.zero_()
    kernel(ta, tb, tc, N, grid=GRID, block=BLOCK, stream=th)
    tstream.synchronize()
    torch.testing.assert_close(tc, ta + tb)
    return rows


SPANS = r"""
struct Span { float* data; unsigned long long len; };
extern "C" __global__ void span_axpy(Span x, Span y, float a) {
    unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < y.len && i < x.len) y.data[i] += a * x.data[i];
}
"""


def struct_rows(work: Path, torch: Any) -> dict[str, float | str]:
    """Tensors inside by-value structs: ``span_axpy({"data": x, "len": n}, {"data": y, "len": n}, a)``
    against the least launcher reading the same dicts (FLOORS ``spans``), torch then CuPy."""
    import ptxbridge
    from ptxbridge import nvrtc

    module = ptxbridge.link([nvrtc.compile(SPANS)]).load(0)
    kernel, handle = module.span_axpy, module.backend.function("span_axpy").handle
    stream = torch.cuda.Stream()
    th = stream.cuda_stream
    x, y = torch.rand(N, device="cuda"), torch.zeros(N, device="cuda")
    sx, sy = {"data": x, "len": N}, {"data": y, "len": N}
    floor = floors(work)
    floor.setup(handle, _launch_entry(), th, torch.Tensor.__dlpack_c_exchange_api__)
    rows = interleave({
        "torch tensors in structs {float*, u64}: ptxbridge, stream=int": lambda: kernel(
            sx, sy, 1.0, grid=GRID, block=BLOCK, stream=th),
        "torch tensors in structs {float*, u64}: least DLPack launcher": lambda: floor.spans(sx, sy, 1.0),
    }, stream.synchronize)
    assert kernel._cached(), "structs of torch tensors took the Python path"
    y.zero_()
    kernel(sx, sy, 2.0, grid=GRID, block=BLOCK, stream=th)
    stream.synchronize()
    torch.testing.assert_close(y, 2 * x)
    try:
        import cupy
    except ImportError as exc:
        rows["CuPy arrays in structs"] = f"skipped: {exc}"
        return rows
    cstream = cupy.cuda.Stream(non_blocking=True)
    cx, cy = cupy.random.random(N, dtype=cupy.float32), cupy.zeros(N, dtype=cupy.float32)
    cx_span, cy_span = {"data": cx, "len": N}, {"data": cy, "len": N}
    floor.setup(handle, _launch_entry(), cstream.ptr, None)
    rows.update(interleave({
        "CuPy arrays in structs {float*, u64}: ptxbridge, stream=int": lambda: kernel(
            cx_span, cy_span, 1.0, grid=GRID, block=BLOCK, stream=cstream.ptr),
        "CuPy arrays in structs {float*, u64}: least CuPy launcher": lambda: floor.spans(
            cx_span, cy_span, 1.0),
    }, cstream.synchronize))
    cy.fill(0)
    kernel(cx_span, cy_span, 2.0, grid=GRID, block=BLOCK, stream=cstream.ptr)
    cstream.synchronize()
    assert cupy.allclose(cy, 2 * cx), "ptxbridge computed a wrong span_axpy from CuPy arrays"
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    import torch

    rows: dict[str, float | str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cubin_path = build(work)
        cubin = cubin_path.read_bytes()
        c_us = c_loop(work, cubin_path)
        for name, section in (("CuPy", lambda: cupy_rows(work, cubin)),
                              ("numba", lambda: numba_rows(work, cubin, torch)),
                              ("structs", lambda: struct_rows(work, torch))):
            try:
                rows.update(section())
            except ImportError as exc:
                rows[name] = f"skipped: {exc}"
    print(f"# launch per producer x kind, {time.strftime('%Y-%m-%d')}, {torch.cuda.get_device_name(0)}, "
          f"Python {sys.version.split()[0]}\n")
    print(f"| row ({ROUNDS} interleaved rounds per group) | us per launch | vs C loop ({c_us:.2f} us) |\n"
          "| --- | ---: | ---: |")
    for name, value in rows.items():
        cells = f"{value} | " if isinstance(value, str) else f"{value:.2f} | {value / c_us:.2f}"
        print(f"| {name} | {cells} |")
    if args.json:
        args.json.write_text(json.dumps({"c_loop_us": c_us, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
