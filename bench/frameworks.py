"""Framework ops, measured: CUDA graphs vs a raw C launch loop, op dispatch, cross-language LTO.

1. **Eight mixed-language kernels per step** (``_framework_images.py``: 3 CUDA C++, 3 numba,
   2 Rust; 1024 floats each, grid 4 x block 256), host microseconds per kernel: a raw C
   ``cuLaunchKernel`` loop over the same eight prepared launches (built here with ``cc``, called
   in this process), eager ptxbridge ``Kernel`` calls, eager ``ptxbridge.torch`` ops, the ops under
   ``torch.compile(mode="reduce-overhead")``, the same step written in torch's own operators under
   ``mode="reduce-overhead"`` (inductor fuses it into one kernel), the ops with cudagraph trees
   off, and a ``torch.cuda.CUDAGraph`` of the eager launches replayed.
   Interleaved rounds (every path once per round); medians over rounds.  Goal: under CUDA graphs,
   host time per kernel <= 0.35x the C loop's.
2. **Op dispatch** for one kernel: a ``ptxbridge.torch`` op (in place and allocating) against the
   direct ``Kernel`` call and against ``torch.add``.
3. **Cross-language LTO**: a compute-bound numba kernel whose multiply-add is a device function
   in numba itself (contracted to FFMA, and linked with ``-fma=0``: the unfused multiply and add
   the C++ and Rust functions do, the same-arithmetic baseline), in CUDA C++ through LTO, in Rust
   through plain PTX linking, and in Rust through LTO; kernel time from CUDA events (median of
   interleaved rounds) and the SASS ``CALL`` count (``cuobjdump -sass``: 0 means inlined).
4. **Op host overhead on CPU** (``--cpu-dispatch``, no GPU): the ``add`` op (in place and
   allocating) on CPU tensors through torch's real dispatch, with the kernel launch replaced by
   a no-op, against ``torch.add`` in the same form: what ptxbridge.torch and torch.library's
   dispatch cost on the host, without the launch.

Usage: ``python bench/frameworks.py --save DIR`` where the toolchains are (no GPU needed: it
builds the images and prints the SASS check), then ``python bench/frameworks.py --images DIR`` on
the GPU; ``python bench/frameworks.py --cpu-dispatch`` anywhere NVRTC is.  Prints markdown tables.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _framework_images import CPP_STEP, FMA_STEPS, images

N, GRID, BLOCK, BATCHES, PER_BATCH, ROUNDS = 1024, 4, 256, 20, 100, 7
ONE = "numba only (device function in numba)"
ONE_UNFUSED = "numba only, linked with -fma=0 (unfused, as the C++ and Rust functions)"
NATIVE = "torch.compile(mode='reduce-overhead') of the step in torch operators (one fused kernel)"
PLAIN = "torch.compile(mode='reduce-overhead') of the ops, cudagraph trees off"
LTO_N = 1 << 22

C_LOOP = r"""
#include <stddef.h>
#include <time.h>
typedef int (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                         void **, void **);
typedef int (*sync_fn)(void *);
static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}
/* per batch: host microseconds per step of ``count`` prepared launches (packed buffers, extra) */
int run_steps(void *launch, void *sync, int count, void **functions, void **params, size_t *sizes,
              const unsigned *dims, void *stream, int batches, int per, double *times) {
    launch_fn go = (launch_fn)launch;
    sync_fn wait = (sync_fn)sync;
    void *extras[64][5];
    if (count > 64) return -1;
    for (int i = 0; i < count; i++) {
        extras[i][0] = (void *)1; extras[i][1] = params[i]; extras[i][2] = (void *)2;
        extras[i][3] = &sizes[i]; extras[i][4] = (void *)0;
    }
    for (int b = -1; b < batches; b++) {
        double t0 = now_us();
        for (int p = 0; p < per; p++)
            for (int i = 0; i < count; i++) {
                const unsigned *d = dims + 6 * i;
                int r = go(functions[i], d[0], d[1], d[2], d[3], d[4], d[5], 0, stream, NULL, extras[i]);
                if (r) return r;
            }
        if (b >= 0) times[b] = (now_us() - t0) / per;
        if (wait(stream)) return -2;
    }
    return 0;
}
"""


def per_call(fn: Callable[[], object], sync: Callable[[], None], per: int = PER_BATCH) -> float:
    """Median over batches of host microseconds per call (synchronized between batches)."""
    for _ in range(per):
        fn()
    sync()
    times = []
    for _ in range(BATCHES):
        t0 = time.perf_counter()
        for _ in range(per):
            fn()
        times.append((time.perf_counter() - t0) / per * 1e6)
        sync()
    return statistics.median(times)


def the_step(module, tensors):
    """The eight launches of one step: (kernel, arguments) on preallocated tensors."""
    x, y, t = tensors["x"], tensors["y"], tensors["t"]
    return [(module.add, (x, y, t[0], N)), (module.relu, (t[0], t[1])),
            (module.scale_into, (0.5, t[1], t[2], N)), (module.mul, (t[2], x, t[3], N)),
            (module.square, (t[3], t[4])), (module.softsign, (t[4], t[5], N)),
            (module.affine, (t[5], t[6], 2.0, 1.0, N)), (module.relu, (t[6], t[7]))]


def reference(torch, x, y):
    h = torch.relu(x + y) * 0.5 * x
    h = h * h
    return torch.relu(2.0 * (h / (1.0 + h.abs())) + 1.0)


def make_ops(image):
    import ptxbridge.torch as pt
    from ptxbridge.abi.kinds import NumbaArray

    def make(kernel: str, source: str, output: str | None, name: str | None = None):
        """The op of ``kernel``: ``output`` shaped like argument ``source``, ``n`` its element count."""
        outputs = {} if output is None else {output: f"like {source}"}
        params = image.kernels[kernel].params
        numba = isinstance(params[0].type, NumbaArray)  # writable to numba; these kernels only read x
        return pt.op(image, kernel, name=f"bench::{name or kernel}", outputs=outputs, grid=GRID, block=BLOCK,
                     derived={"n": f"numel {source}"} if "n" in [p.name for p in params] else {},
                     read_only=(source,) if numba else ())

    ops = {"add": make("add", "a", "c"), "add_into": make("add", "a", None, "add_into"),
           "mul": make("mul", "a", "c"), "affine": make("affine", "x", "y"), "relu": make("relu", "x", "out"),
           "square": make("square", "x", "out"), "scale_into": make("scale_into", "x", "y"),
           "softsign": make("softsign", "x", "y")}

    def step(x, y):
        h = ops["relu"](ops["add"](x, y))
        h = ops["mul"](ops["scale_into"](0.5, h), x)
        h = ops["softsign"](ops["square"](h))
        return ops["relu"](ops["affine"](h, 2.0, 1.0))

    return ops, step


def c_loop_runner(module, launches, stream):
    """A callable timing the eight launches in C (per-step host microseconds, median of batches)."""
    from ptxbridge.launch.args import BindContext, make_binder

    work = Path(tempfile.mkdtemp())
    (work / "loop.c").write_text(C_LOOP)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(work / "loop.so"), str(work / "loop.c")],
                   check=True)
    lib = ctypes.CDLL(str(work / "loop.so"))
    backend = module.backend
    functions, buffers, sizes, dims = [], [], [], []
    for kernel, args in launches:
        sig = kernel.signature
        ctx = BindContext(kernel.name, sig.convention, backend.device_type, backend.device_id)
        flat: tuple = ()
        for param, arg in zip(sig.params, args, strict=True):
            flat += make_binder(ctx, param, type(arg)).values(arg, stream.cuda_stream)
        packed = sig.layout.packer().pack(flat)
        buffers.append(ctypes.create_string_buffer(packed, len(packed)))
        sizes.append(len(packed))
        functions.append(backend.function(kernel.name).handle)
        dims += [GRID, 1, 1, BLOCK, 1, 1]
    count = len(launches)
    c_functions = (ctypes.c_void_p * count)(*functions)
    c_params = (ctypes.c_void_p * count)(*(ctypes.addressof(b) for b in buffers))
    c_sizes = (ctypes.c_size_t * count)(*sizes)
    c_dims = (ctypes.c_uint * len(dims))(*dims)
    libcuda = ctypes.CDLL("libcuda.so.1")
    entry = ctypes.cast(libcuda.cuLaunchKernel, ctypes.c_void_p)
    sync = ctypes.cast(libcuda.cuStreamSynchronize, ctypes.c_void_p)
    times = (ctypes.c_double * BATCHES)()

    def run() -> float:
        code = lib.run_steps(entry, sync, count, c_functions, c_params, c_sizes, c_dims,
                             ctypes.c_void_p(stream.cuda_stream), BATCHES, PER_BATCH, times)
        if code:
            raise RuntimeError(f"the C loop failed with {code}")
        return statistics.median(times)

    run.keep = (buffers, c_functions, c_params, c_sizes, c_dims)  # the pointers above point into these
    return run


def step_section(image, torch) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Per-kernel host microseconds of each path, one list entry per interleaved round."""
    module = image.load(0)
    stream = torch.cuda.Stream()
    gen = torch.Generator(device="cuda").manual_seed(0)
    x, y = (torch.randn(N, device="cuda", generator=gen) for _ in range(2))
    tensors = {"x": x, "y": y, "t": [torch.empty(N, device="cuda") for _ in range(8)]}
    launches = the_step(module, tensors)
    expected = reference(torch, x, y)

    def eager() -> None:
        for kernel, args in launches:
            kernel(*args, grid=GRID, block=BLOCK)

    _, step = make_ops_cached(image)
    torch._dynamo.mark_static_address(x)
    torch._dynamo.mark_static_address(y)
    compiled = torch.compile(step, fullgraph=True, mode="reduce-overhead")
    # the same step in torch's own operators (inductor fuses it into one kernel)
    native = torch.compile(lambda a, b: reference(torch, a, b), fullgraph=True, mode="reduce-overhead")
    # the ops again, with cudagraph trees off (inductor's older single-graph wrapper: less per-call
    # bookkeeping, outputs overwritten by the next replay); the setting is read when compiling
    with torch._inductor.config.patch({"triton.cudagraph_trees": False}):
        plain = torch.compile(step, fullgraph=True, mode="reduce-overhead")
        for _ in range(3):
            result = plain(x, y)
        torch.testing.assert_close(result, expected)

    def replay_compiled() -> None:
        torch.compiler.cudagraph_mark_step_begin()
        compiled(x, y)

    def replay_native() -> None:
        torch.compiler.cudagraph_mark_step_begin()
        native(x, y)

    with torch.cuda.stream(stream):
        eager()
        stream.synchronize()
        torch.testing.assert_close(tensors["t"][7], expected)
        torch.testing.assert_close(step(x, y), expected)
        for _ in range(3):
            torch.compiler.cudagraph_mark_step_begin()
            result = compiled(x, y)
        torch.testing.assert_close(result, expected)
        for _ in range(3):
            replay_native()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            eager()
    c_loop = c_loop_runner(module, launches, stream)
    paths: dict[str, Callable[[], float]] = {"raw C cuLaunchKernel loop": c_loop}
    with torch.cuda.stream(stream):
        paths["eager ptxbridge Kernel calls"] = lambda: per_call(eager, stream.synchronize)
        paths["eager ptxbridge.torch ops (allocating)"] = lambda: per_call(lambda: step(x, y),
                                                                           stream.synchronize)
        paths["torch.compile(mode='reduce-overhead') of the ops"] = lambda: per_call(replay_compiled,
                                                                                     stream.synchronize)
        paths[NATIVE] = lambda: per_call(replay_native, stream.synchronize)
        paths[PLAIN] = lambda: per_call(lambda: plain(x, y), stream.synchronize)
        paths["torch.cuda.CUDAGraph.replay() of the eager launches"] = lambda: per_call(graph.replay,
                                                                                        stream.synchronize)
        rounds: dict[str, list[float]] = {name: [] for name in paths}
        for _ in range(ROUNDS):
            for name, measure in paths.items():
                rounds[name].append(measure() / len(launches))
        gpu = {"graph replay": _gpu_us(torch, graph.replay, stream) / len(launches),
               "eager launches": _gpu_us(torch, eager, stream) / len(launches)}
    torch.testing.assert_close(tensors["t"][7], expected)
    return rounds, gpu


def _gpu_us(torch, fn: Callable[[], object], stream) -> float:
    """Device microseconds per call of ``fn``, from CUDA events around PER_BATCH calls."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(stream)
    for _ in range(PER_BATCH):
        fn()
    end.record(stream)
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / PER_BATCH


def dispatch_section(image, torch) -> dict[str, list[float]]:
    """Host microseconds per call of one kernel (``add``, 1024 floats) through each path, one
    entry per interleaved round."""
    module = image.load(0)
    ops, _ = make_ops_cached(image)
    stream = torch.cuda.Stream()
    a, b, c = (torch.rand(N, device="cuda") for _ in range(3))

    def allocate_then_launch():
        out = torch.empty_like(a)
        module.add(a, b, out, N, grid=GRID, block=BLOCK)
        return out

    paths = {"ptxbridge Kernel call, preallocated c": lambda: module.add(a, b, c, N, grid=GRID, block=BLOCK),
             "floor, allocating: torch.empty_like(a), then the Kernel call": allocate_then_launch,
             "ptxbridge.torch op, in place (c mutated)": lambda: ops["add_into"](a, b, c),
             "ptxbridge.torch op, allocating (returns c)": lambda: ops["add"](a, b),
             "the op in place through torch's dispatcher (op._op)": lambda: ops["add_into"]._op(a, b, c),
             "the op allocating through torch's dispatcher (op._op)": lambda: ops["add"]._op(a, b),
             "torch.add(a, b, out=c)": lambda: torch.add(a, b, out=c),
             "torch.add(a, b)": lambda: torch.add(a, b)}
    rounds: dict[str, list[float]] = {name: [] for name in paths}
    with torch.cuda.stream(stream):
        for _ in range(ROUNDS):
            for name, fn in paths.items():
                rounds[name].append(per_call(fn, stream.synchronize))
    torch.testing.assert_close(ops["add"](a, b), a + b)
    torch.testing.assert_close(allocate_then_launch(), a + b)
    return rounds


_OPS: dict[int, tuple] = {}


def make_ops_cached(image):
    """The torch ops of ``image``, made once (op names are global to the process)."""
    if id(image) not in _OPS:
        _OPS[id(image)] = make_ops(image)
    return _OPS[id(image)]


def lto_section(found, torch) -> dict[str, tuple[float | str, int | str, str]]:
    """Kernel microseconds (median of interleaved rounds), SASS CALL count and arithmetic per variant."""
    labels = {"fw_lto_one": ONE, "fw_lto_one_unfused": ONE_UNFUSED,
              "fw_lto_cpp": "numba -> CUDA C++ device function, LTO",
              "fw_ptx_rust": "numba -> Rust device function, PTX link (no LTO)",
              "fw_lto_rust": "numba -> Rust device function, LTO"}
    x = torch.rand(LTO_N, device="cuda")
    out = torch.empty_like(x)  # one output for every variant: the same memory, the same L2 state
    blocks = -(-LTO_N // BLOCK)
    expected = x.clone()
    for _ in range(FMA_STEPS):
        expected = expected * 1.0001 + 0.5
    kernels, results = {}, {}
    for name, label in labels.items():
        if isinstance(found[name], str):
            results[label] = (found[name], "")
            continue
        kernels[label] = found[name].load(0).fma_loop
        out.zero_()
        kernels[label](x, out, grid=blocks, block=BLOCK)
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    times: dict[str, list[float]] = {label: [] for label in kernels}
    for _ in range(ROUNDS):
        for label, kernel in kernels.items():
            times[label].append(_gpu_us(torch, lambda k=kernel: k(x, out, grid=blocks, block=BLOCK),
                                        torch.cuda.current_stream()))
    for label in kernels:
        results[label] = (statistics.median(times[label]), "")
    return {label: (results[label][0], sass_calls(found[name]), sass_arithmetic(found[name]))
            for name, label in labels.items()}


def _cuobjdump() -> tuple[str, dict[str, str]] | None:
    """cuobjdump, with nvdisasm (which ``-sass`` runs) on PATH: the CUDA wheels' bin folder first."""
    env = dict(os.environ)
    try:
        import nvidia.cu13

        wheel_bin = Path(nvidia.cu13.__path__[0]) / "bin"
        env["PATH"] = f"{wheel_bin}{os.pathsep}{env.get('PATH', '')}"
    except ImportError:
        pass
    tool = shutil.which("cuobjdump", path=env["PATH"])
    if tool is None or shutil.which("nvdisasm", path=env["PATH"]) is None:
        return None
    return tool, env


def fma_loop_sass(image) -> tuple[str | None, str]:
    """``fma_loop``'s SASS (cuobjdump -sass), or None and why there is none."""
    found = _cuobjdump()
    if found is None:
        return None, "cuobjdump/nvdisasm not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)"
    tool, env = found
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "image.cubin"
        path.write_bytes(image.cubin)
        done = subprocess.run([tool, "-sass", str(path)], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        return None, f"cuobjdump -sass failed: {(done.stderr or done.stdout).strip()[:120]}"
    functions = re.split(r"\n\s*Function : ", done.stdout)
    body = next((f for f in functions if f.startswith("fma_loop")), None)
    return body, "" if body is not None else "fma_loop not in the SASS"


def sass_calls(image) -> int | str:
    """``CALL`` instructions in ``fma_loop``'s SASS, or why they were not counted."""
    if isinstance(image, str):
        return "-"
    body, why = fma_loop_sass(image)
    return why if body is None else len(re.findall(r"\bCALL\b", body))


def sass_arithmetic(image) -> str:
    """What ``fma_loop`` computes with: its SASS float multiply/add instructions, counted (``64 FFMA``)."""
    if isinstance(image, str):
        return ""
    body, why = fma_loop_sass(image)
    if body is None:
        return why
    ops = ("FFMA", "FMUL", "FADD", "DFMA", "DMUL", "DADD")
    counts = {op: len(re.findall(rf"\b{op}\b", body)) for op in ops}
    return ", ".join(f"{n} {op}" for op, n in counts.items() if n) or "none in fma_loop"


def no_launch(*args: object, grid: object, block: object = None, shared_mem: int = 0) -> None:
    """Stands in for a kernel launch: the CPU section measures everything but the launch."""


def dispatcher_floor(torch) -> tuple[object, object]:
    """The least a ``torch.library`` op with a Python kernel costs eagerly: ops of the benchmark's
    schemas, registered as ptxbridge registers its ops (``CompositeExplicitAutograd``), whose kernels do
    nothing (in place) or only allocate the output (``empty_like``)."""
    library = torch.library.Library("bench_floor", "FRAGMENT")
    library.define("add_into(Tensor a, Tensor b, Tensor(a!) c) -> ()")
    library.define("add(Tensor a, Tensor b) -> Tensor")
    library.impl("add_into", lambda a, b, c: None, "CompositeExplicitAutograd")
    library.impl("add", lambda a, b: torch.empty_like(a), "CompositeExplicitAutograd")
    _KEEP.append(library)  # a Library deregisters its ops when it is collected
    return torch.ops.bench_floor.add_into.default, torch.ops.bench_floor.add.default


_KEEP: list[object] = []


def cpu_dispatch_section(torch) -> dict[str, list[float]]:
    """Host microseconds per call on CPU tensors (1024 floats), one entry per interleaved round."""
    import ptxbridge
    import ptxbridge.torch as pt
    from ptxbridge import nvrtc

    image = ptxbridge.link([nvrtc.compile(CPP_STEP)])
    rules = {"derived": {"n": "numel a"}, "grid": GRID, "block": BLOCK}
    a, b, c = (torch.rand(N) for _ in range(3))
    checked = pt.op(image, "add", name="bench_cpu::add_checked", outputs={"c": "like a"}, **rules)
    torch.testing.assert_close(checked(a, b), a + b)  # the real launch (CPU PTX interpreter)
    module = image.load("cpu")
    module._kernels["add"] = no_launch  # a bench-only swap: these ops launch nothing
    add = pt.op(module, "add", name="bench_cpu::add", outputs={"c": "like a"}, **rules)
    add_into = pt.op(module, "add", name="bench_cpu::add_into", **rules)
    into_floor, alloc_floor = dispatcher_floor(torch)
    paths = {"ptxbridge.torch op, in place (c mutated), no-op launch": lambda: add_into(a, b, c),
             "ptxbridge.torch op, allocating (returns c), no-op launch": lambda: add(a, b),
             "the same op in place through torch's dispatcher (op._op), no-op launch":
                 lambda: add_into._op(a, b, c),
             "the same op allocating through torch's dispatcher (op._op), no-op launch":
                 lambda: add._op(a, b),
             "torch.add(a, b, out=c)": lambda: torch.add(a, b, out=c),
             "torch.add(a, b)": lambda: torch.add(a, b),
             "floor, in place: a torch.library op whose Python kernel does nothing":
                 lambda: into_floor(a, b, c),
             "floor, allocating: a torch.library op whose Python kernel is empty_like(a)":
                 lambda: alloc_floor(a, b),
             "the no-op launch alone": lambda: no_launch(a, b, c, N, grid=GRID, block=BLOCK, shared_mem=0)}
    rounds: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(3 * ROUNDS):
        for name, fn in paths.items():
            rounds[name].append(per_call(fn, lambda: None))
    return rounds


def _median_ratio(values: list[float], peer: list[float]) -> float:
    return statistics.median(v / p for v, p in zip(values, peer, strict=True))


def _is_allocating(name: str) -> bool:
    """Whether a row returns a new tensor, so is set beside ``torch.add(a, b)``, not ``out=c``."""
    return "allocating" in name or name == "torch.add(a, b)"


def _same_form(rounds: dict[str, list[float]], name: str) -> list[float]:
    return rounds["torch.add(a, b)" if _is_allocating(name) else "torch.add(a, b, out=c)"]


def print_cpu_dispatch(rounds: dict[str, list[float]]) -> None:
    print("| one op on CPU tensors, 1024 floats, launch replaced by a no-op | host us per call (median) "
          "| min | vs torch.add, same form (median of per-round ratios) |\n| --- | ---: | ---: | ---: |")
    for name, values in rounds.items():
        ratio = _median_ratio(values, _same_form(rounds, name))  # the floors too: by their own form
        print(f"| {name} | {statistics.median(values):.2f} | {min(values):.2f} | {ratio:.2f} |")


def print_step(rounds: dict[str, list[float]], gpu: dict[str, float]) -> None:
    floor = rounds["raw C cuLaunchKernel loop"]
    print("| 8 mixed-language kernels per step | host us per kernel (median) | min | max | vs C loop "
          "(median of per-round ratios) |\n| --- | ---: | ---: | ---: | ---: |")
    for name, values in rounds.items():
        ratio = _median_ratio(values, floor)
        middle = statistics.median(values)
        print(f"| {name} | {middle:.2f} | {min(values):.2f} | {max(values):.2f} | {ratio:.2f} |")
    for name, value in gpu.items():
        print(f"\nGPU time per kernel, {name} (CUDA events): {value:.2f} us")
    ours = rounds["torch.compile(mode='reduce-overhead') of the ops"]
    goal = _median_ratio(ours, floor)
    native = _median_ratio(ours, rounds[NATIVE])
    print(f"\ngoal (reduce-overhead host time per kernel <= 0.35x the C loop's): "
          f"{'met' if goal <= 0.35 else 'not met'} ({goal:.2f}x); the ops against torch's own operators "
          f"under reduce-overhead (same step, per-round ratio, median): {native:.2f}x")


def print_dispatch(rounds: dict[str, list[float]]) -> None:
    direct = rounds["ptxbridge Kernel call, preallocated c"]
    floor = rounds["floor, allocating: torch.empty_like(a), then the Kernel call"]
    print(f"\n| one kernel, 1024 floats ({ROUNDS} interleaved rounds) | host us per call (median) | min "
          "| max | vs Kernel call | vs torch.add, same form | allocating: vs the floor |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, values in rounds.items():
        to_floor = f"{_median_ratio(values, floor):.2f}" if _is_allocating(name) else ""
        to_torch = _median_ratio(values, _same_form(rounds, name))
        print(f"| {name} | {statistics.median(values):.2f} | {min(values):.2f} | {max(values):.2f} "
              f"| {_median_ratio(values, direct):.2f} | {to_torch:.2f} | {to_floor} |")


def print_lto(rows: dict[str, tuple[float | str, int | str, str]]) -> None:
    baselines = [rows[ONE][0], rows[ONE_UNFUSED][0]]
    print(f"\n| {FMA_STEPS} dependent multiply-adds x {LTO_N} floats | kernel us (median) | vs numba only | "
          "vs numba only, unfused (same arithmetic) | SASS CALLs in fma_loop | its arithmetic |\n"
          "| --- | ---: | ---: | ---: | ---: | --- |")
    for name, (value, calls, arithmetic) in rows.items():
        if isinstance(value, str):
            print(f"| {name} | {value} | | | {calls} | {arithmetic} |")
        else:
            ratios = " | ".join(f"{value / one:.3f}" if isinstance(one, float) else "" for one in baselines)
            print(f"| {name} | {value:.1f} | {ratios} | {calls} | {arithmetic} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", type=Path, help="build the images into DIR and check their SASS (no GPU)")
    parser.add_argument("--images", type=Path, help="load the images saved in DIR (e.g. on a GPU host)")
    parser.add_argument("--cpu-dispatch", action="store_true",
                        help="only the ops' host overhead on CPU tensors, launch replaced by a no-op")
    args = parser.parse_args()
    if args.cpu_dispatch:
        import torch

        print(f"# ptxbridge.torch op host overhead on CPU, {time.strftime('%Y-%m-%d')}, "
              f"torch {torch.__version__}, Python {sys.version.split()[0]}\n")
        print_cpu_dispatch(cpu_dispatch_section(torch))
        return
    found = images(args.save or args.images)
    if args.save:
        for name, value in found.items():
            if isinstance(value, str):
                print(f"{name}: {value}")
            elif name == "fw_step":
                print(f"{name}: saved; kernels {', '.join(value.kernels)}")
            else:
                print(f"{name}: saved; SASS CALLs in fma_loop: {sass_calls(value)} "
                      f"({sass_arithmetic(value)})")
        return
    import torch

    print(f"# framework ops, {time.strftime('%Y-%m-%d')}, {torch.cuda.get_device_name(0)}, "
          f"torch {torch.__version__}, Python {sys.version.split()[0]}\n")
    rounds, gpu = step_section(found["fw_step"], torch)
    print_step(rounds, gpu)
    print_dispatch(dispatch_section(found["fw_step"], torch))
    print_lto(lto_section(found, torch))


if __name__ == "__main__":
    main()
