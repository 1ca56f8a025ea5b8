"""Framework ops on a GPU: torch.compile with CUDA graphs, manual graph capture, jax.jit on XLA's stream
(jax.grad through backward= ops, jax.vmap, the handler's no-alias check on device buffers), and ops of a
numba kernel compiled with debug=True (``checked_log``: its exception flag is read after each launch, so
CUDA graphs leave it out or refuse it, and JAX refuses it on the GPU).

The model mixes three images the GPU suite already builds (``_images.py``): ``vadd3`` (CUDA C++),
``saxpy`` (Rust, ``examples/kernels/scale.rs``) and ``scale2d`` (numba, 2-D).  Every result is
compared with the same computation in torch or NumPy.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
from _images import image

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

import ptxbridge.torch as pt
from ptxbridge.abi.errors import ArgumentError, KernelRaisedError

NS = "ptxbridge_gpu_tests"
BLOCK = 256


def cover(n: int, block: int = BLOCK) -> int:
    return -(-n // block)


@pytest.fixture(scope="module")
def ops():
    cpp, rust, numba = image("cpp"), image("rust"), image("numba")
    return {
        "vadd3": pt.op(cpp, "vadd3", name=f"{NS}::vadd3", outputs={"c": "like a"}, derived={"n": "numel a"},
                       grid=lambda n: cover(n), block=BLOCK),
        "saxpy": pt.op(rust, "saxpy", name=f"{NS}::saxpy", outputs={"y": "zeros like x"},
                       derived={"n": "numel x"}, grid=lambda n: cover(n), block=BLOCK),
        "scale2d": pt.op(numba, "scale2d", name=f"{NS}::scale2d", outputs={"out": "like x"},
                         grid=lambda x: (cover(x.shape[0], 16), cover(x.shape[1], 16)), block=(16, 16)),
        "add_one": pt.op(cpp, "add_one", name=f"{NS}::add_one", derived={"n": "numel x"},
                         grid=lambda n: cover(n), block=BLOCK),
    }


def model(ops, x, b):
    h = ops["vadd3"](x, b)  # CUDA C++
    y = ops["saxpy"](2.0, h)  # Rust: y = 2h (y starts at zero)
    return ops["scale2d"](y.view(32, 32), 0.5).sum(dim=0)  # numba


def reference(x, b):
    return (2.0 * (x + b) * 0.5).view(32, 32).sum(dim=0)


def inputs(seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(1024, device="cuda", generator=gen), torch.randn(1024, device="cuda", generator=gen)


def test_reduce_overhead_replays_the_kernels_in_a_cuda_graph(ops):
    from torch._dynamo.utils import counters

    counters.clear()
    compiled = torch.compile(lambda x, b: model(ops, x, b), fullgraph=True, mode="reduce-overhead")
    x, b = inputs()
    for _ in range(3):  # warm-up, record, replay
        result = compiled(x, b)
    torch.testing.assert_close(result, reference(x, b))
    x2, b2 = inputs(1)
    torch.testing.assert_close(compiled(x2, b2), reference(x2, b2))  # new data through the graph
    assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])


def test_ops_are_captured_by_torch_cuda_graph(ops):
    x, b = inputs()
    counter = torch.zeros(1000, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on the capture stream: modules load outside capture
        model(ops, x, b)
        ops["add_one"](counter)
    torch.cuda.current_stream().wait_stream(side)
    counter.zero_()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = model(ops, x, b)
        ops["add_one"](counter)  # in place, on a tensor from outside the graph
    x2, b2 = inputs(2)
    x.copy_(x2)
    b.copy_(b2)
    graph.replay()
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, reference(x2, b2))
    torch.testing.assert_close(counter, torch.full_like(counter, 2.0))


# checked_log of a saved image: the exception table is not saved, so the exception is reported by its code
RAISED = (r"checked_log: thread tid=\(4, 0, 0\) ctaid=\(1, 0, 0\) raised exception code 1, which the "
          r"kernel's exception table does not list")
NOT_READABLE = r"checked_log: compiled with debug=True, it reports an exception through a flag that ptxbridge"


@pytest.fixture(scope="module")
def checked():
    return pt.op(image("debug"), "checked_log", name=f"{NS}::checked_log", outputs={"out": "like x"},
                 read_only=("x",), grid=lambda x: cover(x.shape[0]), block=BLOCK)


def logs(negative_at=None):
    """checked_log's input: valid, or element ``negative_at`` negative (260: thread 4 of block 1 raises)."""
    x = torch.linspace(1.0, 5.0, 1024, device="cuda")
    if negative_at is not None:
        x[negative_at] = -1.0
    return x


def test_debug_op_raises_on_cuda_tensors(checked):
    with pytest.raises(KernelRaisedError, match=RAISED) as raised:
        checked(logs(260))
    assert (raised.value.tid, raised.value.ctaid) == ((4, 0, 0), (1, 0, 0))
    torch.testing.assert_close(checked(logs()), torch.log(logs()))  # the flag is cleared before each launch


def test_reduce_overhead_runs_a_debug_op_outside_its_cuda_graphs(checked):
    assert torch.Tag.cudagraph_unsafe in checked.tags
    compiled = torch.compile(lambda x: checked(x * 2.0) + 1.0, fullgraph=True, mode="reduce-overhead")
    for _ in range(3):  # warm-up, record, replay
        torch.testing.assert_close(compiled(logs()), torch.log(logs() * 2.0) + 1.0)
    with pytest.raises(KernelRaisedError, match=RAISED):
        compiled(logs(260))
    torch.testing.assert_close(compiled(logs()), torch.log(logs() * 2.0) + 1.0)


def test_capturing_a_debug_op_is_refused_before_it_launches(checked):
    x = logs()
    checked(x)  # warm-up outside the capture: the module is loaded, the plan built
    graph = torch.cuda.CUDAGraph()
    refused = NOT_READABLE + r".*a stream being captured into a CUDA graph"
    with pytest.raises(ArgumentError, match=refused), torch.cuda.graph(graph):
        assert torch.cuda.is_current_stream_capturing()  # torch's view of the stream ptxbridge asks about
        checked(x)
    assert not torch.cuda.is_current_stream_capturing()  # the capture ended cleanly: nothing invalidated it
    torch.testing.assert_close(checked(x), torch.log(x))


@pytest.fixture(scope="module")
def jax():
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave GPU memory to torch
    found = pytest.importorskip("jax")
    pytest.importorskip("ptxbridge.jax._xla_ffi", reason="the XLA FFI handler is not built (no jaxlib)")
    if not any(d.platform == "gpu" for d in found.devices()):
        pytest.skip("JAX sees no GPU")
    return found


def test_jax_jit_launches_on_xlas_stream(jax):
    import jax.numpy as jnp

    import ptxbridge.jax as pj

    vadd3 = pj.op(image("cpp"), "vadd3", outputs={"c": "like a"}, derived={"n": "numel a"},
                  grid=lambda n: cover(n), block=BLOCK)
    saxpy = pj.op(image("rust"), "saxpy", derived={"n": "numel x"}, grid=lambda n: cover(n), block=BLOCK)
    step = jax.jit(lambda a, b: jnp.tanh(saxpy(2.0, vadd3(a, b), b)), donate_argnums=1)
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(5000, dtype=np.float32) for _ in range(2))
    expected = np.tanh(2.0 * (a + b) + b)
    assert "stream = 1" in step.lower(a, b).as_text()
    for _ in range(3):  # compiled once, run from XLA's executable cache (and its command buffers)
        result = step(jnp.asarray(a), jnp.asarray(b))
    np.testing.assert_allclose(np.asarray(result), expected, rtol=1e-5, atol=1e-6)


def test_jax_eager_call_runs_where_its_arrays_are(jax):
    import ptxbridge.jax as pj

    vadd3 = pj.op(image("cpp"), "vadd3", outputs={"c": "like a"}, derived={"n": "numel a"},
                  grid=lambda n: cover(n), block=BLOCK)
    a = np.arange(1000, dtype=np.float32)
    cpu = jax.devices("cpu")[0]
    on_cpu = vadd3(jax.device_put(a, cpu), jax.device_put(2 * a, cpu))  # the default backend is the GPU
    assert on_cpu.devices() == {cpu}
    np.testing.assert_array_equal(np.asarray(on_cpu), 3 * a)
    on_gpu = vadd3(jax.numpy.asarray(a), jax.numpy.asarray(2 * a))
    assert next(iter(on_gpu.devices())).platform == "gpu"
    np.testing.assert_array_equal(np.asarray(on_gpu), 3 * a)


def test_jax_reports_a_launch_the_driver_refuses(jax):
    import ptxbridge.jax as pj

    too_big = pj.op(image("cpp"), "vadd3", outputs={"c": "like a"}, derived={"n": "numel a"}, grid=1,
                    block=2048)
    x = jax.numpy.ones(16, jax.numpy.float32)
    refused = r"vadd3: the launch \(grid=\(1, 1, 1\), block=\(2048, 1, 1\), shared_mem=0\) failed with code"
    with pytest.raises(Exception, match=refused):
        jax.jit(lambda x: too_big(x, x))(x).block_until_ready()


def test_jax_grad_under_jit_on_cuda(jax):
    import jax.numpy as jnp

    import ptxbridge.jax as pj

    vadd3 = pj.op(image("cpp"), "vadd3", outputs={"c": "like a"}, derived={"n": "numel a"},
                  grid=lambda n: cover(n), block=BLOCK, backward=lambda g, a, b, c: {"a": g, "b": g})
    # Rust saxpy with a zero-filled y is y = a * x; its vector-Jacobian product is saxpy again
    scale = pj.op(image("rust"), "saxpy", outputs={"y": "zeros like x"}, derived={"n": "numel x"},
                  grid=lambda n: cover(n), block=BLOCK, backward=lambda g, a, x, y: {"x": scale(a, g)})

    def loss(add, a, b):
        return jnp.sum(jnp.tanh(add(a, b)) ** 2)

    rng = np.random.default_rng(0)
    a, b = (jnp.asarray(rng.standard_normal(5000, dtype=np.float32)) for _ in range(2))
    bridged = jax.jit(jax.grad(lambda a, b: loss(lambda a, b: scale(2.0, vadd3(a, b)), a, b), argnums=(0, 1)))
    expected = jax.grad(lambda a, b: loss(lambda a, b: 2.0 * (a + b), a, b), argnums=(0, 1))(a, b)
    assert "stream = 1" in bridged.lower(a, b).as_text()
    for found, want in zip(bridged(a, b), expected, strict=True):
        np.testing.assert_allclose(np.asarray(found), np.asarray(want), rtol=1e-5, atol=1e-6)
    # per-row gradients, one launch per row: d sum((3a)^2) = 18a
    per_row = jax.jit(jax.vmap(jax.grad(lambda a: jnp.sum(scale(3.0, a) ** 2))))
    np.testing.assert_allclose(np.asarray(per_row(a.reshape(50, 100))), 18.0 * np.asarray(a).reshape(50, 100),
                               rtol=1e-5)


def test_jax_handler_checks_restrict_promises_on_device_buffers(jax):
    import jax.numpy as jnp

    import ptxbridge.jax as pj
    import ptxbridge.jax.xla_ffi as xf

    raxpy = pj.op(image("cpp"), "raxpy", derived={"n": "numel x"}, grid=lambda n: cover(n), block=BLOCK)
    x = jnp.arange(1000, dtype=jnp.float32)
    np.testing.assert_allclose(np.asarray(jax.jit(lambda x: raxpy(2.0, x, x))(x)), 3.0 * np.arange(1000))
    # a hand-built call whose written result is its read operand's buffer: the handler refuses it
    honest = pj._pack(raxpy.spec, {"a": 2.0, "x": x, "y": x, "n": 1000}, {"x": 0, "y": -1}, raxpy.promises)
    overlapping = dataclasses.replace(honest, slots=((8, 0), (16, -1)))
    result = jax.ShapeDtypeStruct((1000,), jnp.float32)
    call = jax.ffi.ffi_call(xf.TARGET, result, input_output_aliases={0: 0})
    attributes = xf.attributes(overlapping, raxpy.image, "cuda")
    refused = r"raxpy: argument 'y' \(\*mut restrict f32\) overlaps argument 'x' .* \(4000 bytes\)"
    with pytest.raises(Exception, match=refused):
        jax.jit(lambda x: call(x, **attributes))(x).block_until_ready()


def test_jax_refuses_a_debug_kernel_on_the_gpu_and_runs_it_on_the_cpu(jax):
    import ptxbridge.jax as pj

    checked_log = pj.op(image("debug"), "checked_log", outputs={"out": "like x"}, read_only=["x"],
                        grid=lambda x: cover(x.shape[0]), block=BLOCK)
    x = jax.numpy.linspace(1.0, 5.0, 1024, dtype=jax.numpy.float32)  # on the GPU
    refused = NOT_READABLE + r".*ptxbridge.jax on a GPU"
    with pytest.raises(ArgumentError, match=refused):
        jax.jit(lambda x: checked_log(x))(x)
    with pytest.raises(ArgumentError, match=refused):
        checked_log(x)  # eager, on arrays on the GPU
    cpu = jax.devices("cpu")[0]
    on_cpu = jax.device_put(np.linspace(1.0, 5.0, 1024, dtype=np.float32), cpu)
    np.testing.assert_allclose(np.asarray(jax.jit(lambda x: checked_log(x))(on_cpu)),
                               np.log(np.asarray(on_cpu)), rtol=1e-6)
    bad = np.asarray(on_cpu).copy()
    bad[260] = -1.0
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"KernelRaisedError: " + RAISED):
        np.asarray(jax.jit(lambda x: checked_log(x))(jax.device_put(bad, cpu)))


two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")


@two_gpus
def test_torch_ops_run_on_the_gpu_their_tensors_are_on(ops):
    x, b = (t.to("cuda:1") for t in inputs())
    with torch.cuda.device(1):  # the image is loaded on cuda:1 the first time the op meets it
        out = model(ops, x, b)
    assert out.device == torch.device("cuda:1")
    torch.testing.assert_close(out, reference(x, b))


@two_gpus
def test_jax_jit_on_the_second_gpu(jax):
    import ptxbridge.jax as pj

    # the handler launches the kernel loaded for cuda:0 (a context-independent CUkernel) in the
    # context of the GPU XLA runs the call on
    vadd3 = pj.op(image("cpp"), "vadd3", outputs={"c": "like a"}, derived={"n": "numel a"},
                  grid=lambda n: cover(n), block=BLOCK)
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if len(gpus) < 2:
        pytest.skip("JAX sees one GPU")
    a = np.arange(3000, dtype=np.float32)
    on_second = [jax.device_put(v, gpus[1]) for v in (a, 2 * a)]
    result = jax.jit(lambda x, y: vadd3(x, y))(*on_second)
    assert result.devices() == {gpus[1]}
    np.testing.assert_array_equal(np.asarray(result), 3 * a)
    np.testing.assert_array_equal(np.asarray(vadd3(*on_second)), 3 * a)  # eager, on the same GPU
