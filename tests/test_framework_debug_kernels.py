"""Framework ops of numba kernels compiled with ``debug=True``: an exception never turns into a wrong answer.

Such a kernel stores the first exception a thread raises in numba's flag, which ptxbridge reads after
each launch (:mod:`ptxbridge.launch.raised`).  On CPU tensors and JAX's CPU platform the flag is read:
torch ops raise :class:`KernelRaisedError`, eager and under ``torch.compile``; JAX's error carries its
text, eager, under ``jax.jit`` and ``jax.vmap``.  Where it cannot be read (a stream being captured, a
JAX op compiled for a GPU) the launch is refused, naming the kernel.  The kernels are real numba-cuda
output run by the CPU PTX interpreter; the GPU side is in tests/gpu/test_gpu_frameworks.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

cuda = pytest.importorskip("numba.cuda")

import ptxbridge
import ptxbridge.numba as pn
from ptxbridge.abi.errors import ArgumentError, KernelRaisedError

NS = "ptxbridge_debug_tests"
BLOCK = 32
SIGNATURE = "void(float32[::1], float32[::1])"


def checked_log(x, out):
    i = cuda.grid(1)
    if i < x.shape[0]:
        if x[i] < 0:
            raise ValueError("negative input", 3)
        out[i] = math.log(x[i])


RAISE_LINE = checked_log.__code__.co_firstlineno + 4
# element 40 is negative: thread 8 of block 1 raises (BLOCK = 32)
RAISED = (r"checked_log: thread tid=\(8, 0, 0\) ctaid=\(1, 0, 0\) raised ValueError\('negative input', 3\) "
          rf"\(In function 'checked_log', file .*, line {RAISE_LINE}\)")
CAPTURED = (r"checked_log: compiled with debug=True, it reports an exception through a flag that ptxbridge "
            r"reads after each launch, which a stream being captured into a CUDA graph .* does not allow; "
            r"compile it without debug=True, or launch it before or after the capture")
ON_GPU = (r"checked_log: compiled with debug=True, .* which ptxbridge.jax on a GPU \(the handler launches on "
          r"XLA's stream.*\) does not allow; compile it without debug=True, or run it on the CPU, or launch "
          r"it outside JAX through its loaded module \(module.checked_log\(...\) with torch or CuPy arrays\)")


def cover(n: int) -> int:
    return -(-n // BLOCK)


def inputs(n: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """A valid input, and the same with element 40 negative."""
    good = np.linspace(1.0, 5.0, n, dtype=np.float32)
    bad = good.copy()
    bad[40] = -1.0
    return good, bad


@pytest.fixture(scope="module")
def debug():
    return pn.compile(checked_log, SIGNATURE, options=pn.NumbaOptions(debug=True, opt=False))


@pytest.fixture(scope="module")
def image(debug):
    return ptxbridge.link([debug, pn.compile(checked_log, SIGNATURE, name="unchecked_log")])


@pytest.fixture(scope="module")
def torch_ops(image):
    torch = pytest.importorskip("torch")
    import ptxbridge.torch as pt

    rules = {"outputs": {"out": "like x"}, "read_only": ("x",), "grid": lambda x: cover(x.shape[0]),
             "block": BLOCK}

    @pt.function(image, "kernel twice(x: Array<f32, 1, C>, out: Array<f32, 1, C>)", name=f"{NS}::twice",
                 outputs={"out": "like x"}, read_only=("x",))
    def twice(kernels, x, out):
        kernels.checked_log(x, out, grid=cover(x.shape[0]), block=BLOCK)
        out.mul_(2.0)

    return torch, {"checked": pt.op(image, "checked_log", name=f"{NS}::checked_log", **rules),
                   "unchecked": pt.op(image, "unchecked_log", name=f"{NS}::unchecked_log", **rules),
                   "twice": twice}


@pytest.fixture(scope="module")
def jax():
    found = pytest.importorskip("jax")
    pytest.importorskip("ptxbridge.jax._xla_ffi", reason="the XLA FFI handler is not built (no jaxlib)")
    return found


def jax_op(image, kernel="checked_log"):
    import ptxbridge.jax as pj

    return pj.op(image, kernel, outputs={"out": "like x"}, read_only=["x"], grid=lambda x: cover(x.shape[0]),
                 block=BLOCK)


def test_torch_op_raises_kernel_raised_error_eager_and_compiled(torch_ops):
    torch, ops = torch_ops
    good, bad = map(torch.from_numpy, inputs())
    compiled = torch.compile(lambda x: ops["checked"](x) * 2.0, fullgraph=True, backend="aot_eager")
    for call in (ops["checked"], compiled, ops["twice"]):
        with pytest.raises(KernelRaisedError, match=RAISED) as raised:
            call(bad)
        error = raised.value
        assert isinstance(error.exception, ValueError) and error.exception.args == ("negative input", 3)
        assert (error.tid, error.ctaid) == ((8, 0, 0), (1, 0, 0))
    # the flag is cleared before each launch: a valid input after a raising one gets its answer
    torch.testing.assert_close(ops["checked"](good), torch.log(good))
    torch.testing.assert_close(compiled(good), 2.0 * torch.log(good))
    torch.testing.assert_close(ops["twice"](good), 2.0 * torch.log(good))


def test_without_debug_the_thread_ends_silently_as_in_numba(torch_ops):
    torch, ops = torch_ops
    _, bad = map(torch.from_numpy, inputs())
    found = ops["unchecked"](bad)
    # what numba itself gives without debug=True: no report; the raising thread wrote nothing
    torch.testing.assert_close(found[:40], torch.log(bad[:40]))
    torch.testing.assert_close(found[41:], torch.log(bad[41:]))


def test_torch_ops_of_debug_kernels_are_kept_out_of_cuda_graphs(torch_ops):
    torch, ops = torch_ops
    unsafe = torch.Tag.cudagraph_unsafe  # inductor runs such an op between its CUDA graphs
    assert unsafe in ops["checked"].tags and unsafe in ops["twice"].tags
    assert unsafe not in ops["unchecked"].tags
    assert torch.Tag.pt2_compliant_tag in ops["checked"].tags


def test_a_launch_where_the_flag_cannot_be_read_is_refused_before_it_runs(image, monkeypatch):
    module = image.load("cpu")
    # what a stream being captured answers (the CUDA loader asks the driver: cuStreamIsCapturing)
    monkeypatch.setattr(module.backend, "capturing", lambda stream: True)
    good, _ = inputs()
    out = np.zeros_like(good)
    with pytest.raises(ArgumentError, match=CAPTURED):
        module.checked_log(good, out, grid=cover(64), block=BLOCK)
    assert not out.any()  # refused before the launch
    module.unchecked_log(good, out, grid=cover(64), block=BLOCK)  # an ordinary kernel does not ask
    np.testing.assert_allclose(out, np.log(good), rtol=1e-6)


def test_jax_op_reports_the_exception_eager_under_jit_and_vmap(image, jax):
    op = jax_op(image)
    good, bad = inputs()
    failed = r"checked_log: the launch \(grid=\(2, 1, 1\), block=\(32, 1, 1\), .*KernelRaisedError: " + RAISED
    jitted = jax.jit(lambda x: op(x) * 2.0)
    rows = jax.jit(jax.vmap(op))
    with jax.default_device(jax.devices("cpu")[0]):
        for call, x in ((op, bad), (jitted, bad), (rows, np.stack([good, bad]))):
            with pytest.raises(jax.errors.JaxRuntimeError, match=failed):
                np.asarray(call(x))
        np.testing.assert_allclose(np.asarray(op(good)), np.log(good), rtol=1e-6)
        np.testing.assert_allclose(np.asarray(jitted(good)), 2.0 * np.log(good), rtol=1e-6)
        np.testing.assert_allclose(np.asarray(rows(np.stack([good, 2 * good]))),
                                   np.log(np.stack([good, 2 * good])), rtol=1e-6)


def test_jax_op_of_a_debug_kernel_is_refused_when_compiled_for_a_gpu(image, jax):
    op = jax_op(image)
    good, _ = inputs()
    traced = jax.jit(lambda x: op(x)).trace(good)
    assert "@ptxbridge_launch" in traced.lower(lowering_platforms=("cpu",)).as_text()
    with pytest.raises(ArgumentError, match=ON_GPU):
        traced.lower(lowering_platforms=("cuda",))
    with pytest.raises(ArgumentError, match=ON_GPU):
        jax.jit(jax.vmap(op)).trace(np.stack([good, good])).lower(lowering_platforms=("cuda",))
    # an eager call takes the branch of JAX's default backend: a GPU's branch refuses when run too
    from ptxbridge.jax.refused import refused

    branch = refused(ArgumentError("checked_log: refused"), [jax.ShapeDtypeStruct(good.shape, good.dtype)])
    with pytest.raises(ArgumentError, match="checked_log: refused"):
        branch(good)


def test_a_saved_image_keeps_its_debug_kernels(debug, torch_ops, jax):
    torch, _ = torch_ops
    import ptxbridge.torch as pt

    saved = ptxbridge.Image.from_bytes(ptxbridge.link([debug], arch="sm_90").to_bytes())
    assert not saved.raises  # the table is not saved; numba's flag is, in the cubin
    op = pt.op(saved, "checked_log", name=f"{NS}::saved_checked_log", outputs={"out": "like x"},
               read_only=("x",), grid=lambda x: cover(x.shape[0]), block=BLOCK)
    assert torch.Tag.cudagraph_unsafe in op.tags
    _, bad = inputs()
    by_code = r"checked_log: thread tid=\(8, 0, 0\) ctaid=\(1, 0, 0\) raised exception code 1, which the"
    with pytest.raises(KernelRaisedError, match=by_code):
        op(torch.from_numpy(bad))
    with pytest.raises(ArgumentError, match=ON_GPU):
        jax.jit(lambda x: jax_op(saved)(x)).trace(bad).lower(lowering_platforms=("cuda",))

