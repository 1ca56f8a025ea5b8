"""ptxbridge.jax on the CPU: kernels inside jax.jit through the C XLA FFI handler and the CPU loader.

The kernels are NVRTC output run by the CPU PTX interpreter, which the handler (``_xla_ffi.c``)
calls as its launch function on XLA's CPU platform, so these tests run the same C code a GPU runs.
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("ptxbridge.jax._xla_ffi", reason="the XLA FFI handler is not built (no jaxlib)")

import jax.numpy as jnp
from _cuda_sources import VADD_AXPY

import ptxbridge
import ptxbridge.jax as pj
from ptxbridge.abi.errors import ArgumentError
from ptxbridge.jax.xla_ffi import TARGET

CPP = VADD_AXPY + r"""
extern "C" __global__ void minmax(const float* x, float* lo, float* hi, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { lo[i] = fminf(x[i], 0.0f); hi[i] = fmaxf(x[i], 0.0f); }
}
"""
BLOCK = 128


def cover(n: int) -> int:
    return -(-n // BLOCK)


@pytest.fixture(scope="module")
def image():
    from ptxbridge import nvrtc

    return ptxbridge.link([nvrtc.compile(CPP)])


@pytest.fixture(scope="module")
def ops(image):
    n_rule = {"n": "numel x"}
    return {
        "vadd": pj.op(image, "vadd", outputs={"c": "like a"}, derived={"n": "numel a"},
                      grid=lambda n: cover(n), block=BLOCK),
        "axpy": pj.op(image, "axpy", derived=n_rule, grid=lambda n: cover(n), block=BLOCK),
        "minmax": pj.op(image, "minmax", outputs={"lo": "like x", "hi": "like x"}, derived=n_rule,
                        grid=lambda n: cover(n), block=BLOCK),
        "raw_axpy": pj.op(image, "axpy", grid=lambda n: cover(n), block=BLOCK),  # n passed by the caller
    }


def arrays(n=1000):
    rng = np.random.default_rng(0)
    return rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)


def test_kernels_inside_jit_match_numpy(ops):
    a, b = arrays()

    @jax.jit
    def step(a, b):
        c = ops["vadd"](a, b)
        y = ops["axpy"](2.0, c, b)  # y = 2c + b, written in place of b's buffer
        lo, hi = ops["minmax"](y)
        return jnp.tanh(hi) + lo

    y = 2 * (a + b) + b
    np.testing.assert_allclose(step(a, b), np.tanh(np.maximum(y, 0)) + np.minimum(y, 0), rtol=1e-6)


def test_lowering_passes_buffers_in_signature_order_and_aliases_what_is_written(ops):
    a, b = arrays(300)
    text = jax.jit(lambda x, y: ops["axpy"](3.0, x, y)).lower(a, b).as_text()
    (call,) = [line for line in text.splitlines() if f"custom_call @{TARGET}" in line]
    assert f"custom_call @{TARGET}(%arg0, %arg1)" in call  # x, y: operands in signature order
    assert "operand_index = 1" in call  # y (operand 1) is result 0: XLA hands the kernel y's buffer
    assert 'kernel = "axpy"' in call and "geometry = dense<[3, 1, 1, 128, 1, 1, 0]>" in call
    # slots: x's pointer at offset 8 from operand 0, y's at 16 from result 0 (encoded -1)
    assert "slots = dense<[8, 0, 16, -1]>" in call


def test_mutated_input_keeps_jax_semantics(ops):
    x, y = arrays(200)
    jy = jnp.asarray(y)
    out = jax.jit(lambda x, y: ops["axpy"](0.5, x, y))(x, jy)
    np.testing.assert_allclose(out, 0.5 * x + y, rtol=1e-6)
    np.testing.assert_array_equal(jy, y)  # the caller's array is unchanged


def test_eager_calls_and_vmap(ops):
    a, b = arrays(64)
    np.testing.assert_allclose(ops["vadd"](a, b), a + b)  # no jit: JAX dispatches the call itself
    batch = jnp.stack([jnp.asarray(a), jnp.asarray(b)])
    np.testing.assert_allclose(jax.vmap(lambda x: ops["vadd"](x, x))(batch), 2 * np.stack([a, b]))


def test_an_out_of_bounds_launch_names_kernel_thread_and_ptx_line(ops):
    x, y = arrays(100)
    fault = r"axpy: the launch .* MemoryAccessError: .*thread \(100, 0, 0\).*PTX line"
    # the CPU loader's report: on a GPU host jax would place the arrays on the GPU
    with pytest.raises(Exception, match=fault), jax.default_device(jax.devices("cpu")[0]):
        jax.jit(lambda x, y: ops["raw_axpy"](1.0, x, y, 256))(x, y).block_until_ready()


def test_bad_arguments_are_refused_at_trace_time(ops):
    x, y = arrays(10)
    wrong_dtype = r"axpy: argument 'x' \(\*const f32\) got int32 array; expected float32"
    with pytest.raises(ArgumentError, match=wrong_dtype):
        jax.jit(lambda x, y: ops["axpy"](1.0, x, y))(x.astype(np.int32), y)
    with pytest.raises(ArgumentError, match="axpy: argument 'a' is a traced value"):
        jax.jit(lambda a, x, y: ops["axpy"](a, x, y))(1.0, x, y)
    with pytest.raises(ArgumentError, match=r"argument 'n' \(i32\) .*does not fit i32"):
        jax.jit(lambda x, y: ops["raw_axpy"](1.0, x, y, 1 << 40))(x, y)
    with pytest.raises(ArgumentError, match="vadd: missing argument"):
        ops["vadd"](x)


def test_an_eager_call_takes_the_branch_of_its_arrays_device():
    # on a GPU machine JAX's default backend is the GPU: an eager call on CPU-placed arrays must
    # still take the CPU branch (tests/gpu/test_gpu_frameworks.py runs that case)
    cpu = jax.devices("cpu")[0]
    a, b = (jax.device_put(x, cpu) for x in arrays(8))
    assert pj.eager_device([a, b]) == cpu
    seen = []
    jax.jit(lambda a, b: seen.append(pj.eager_device([a, b])) or a)(a, b)
    assert seen == [None]  # traced: JAX lowers platform_dependent for the platform it compiles for
    assert pj.eager_device([]) is None


def test_shapes_are_checked_when_the_op_is_traced(image):
    # raw_axpy-like: n comes from x, and y must be as long, or the kernel reads and writes past its end
    axpy = pj.op(image, "axpy", derived={"n": "numel x"}, shapes={"y": "like x"}, grid=lambda n: cover(n),
                 block=BLOCK)
    x, y = arrays(300)
    np.testing.assert_allclose(jax.jit(lambda x, y: axpy(2.0, x, y))(x, y), 2 * x + y, rtol=1e-6)
    refused = r"axpy: argument 'y' has shape \(100,\); axpy: shapes\['y'\] 'like x' requires \(300,\)"
    with pytest.raises(ArgumentError, match=refused):
        jax.jit(lambda x, y: axpy(2.0, x, y))(x, y[:100])
    with pytest.raises(ArgumentError, match=refused):
        axpy(2.0, x, y[:100])  # eager: the same check


def test_a_numba_kernel_gets_its_array_descriptors_from_the_traced_shapes():
    cuda = pytest.importorskip("numba.cuda")
    import ptxbridge.numba as pn

    def scale_rows(x, out, alpha):
        i, j = cuda.grid(2)
        if i < x.shape[0] and j < x.shape[1]:
            out[i, j] = alpha * x[i, j] + i

    kernel = pn.compile(scale_rows, "void(float32[:, ::1], float32[:, ::1], float32)", name="scale_rows")
    image = ptxbridge.link([kernel])
    rules = {"outputs": {"out": "like x"}, "grid": lambda x: (x.shape[0], cover(x.shape[1])),
             "block": (1, BLOCK)}
    x = np.arange(6 * 200, dtype=np.float32).reshape(6, 200)
    expected = 2.0 * x + np.arange(6)[:, None]
    # meminfo, parent, nitems, itemsize, data, shape, strides (bytes): data is the pointer slot
    written, out = jax.jit(lambda x: pj.op(image, "scale_rows", **rules)(x, 2.0))(x)
    np.testing.assert_array_equal(written, x)  # a numba array may be written: returned, aliased
    np.testing.assert_allclose(out, expected)
    only_read = pj.op(image, "scale_rows", read_only=("x",), **rules)  # the caller's promise
    np.testing.assert_allclose(jax.jit(lambda x: only_read(x, 2.0))(x), expected)


def test_a_kernel_writing_nothing_is_refused(image):
    with pytest.raises(ArgumentError, match="vadd: writes no tensor"):
        pj.op(image, "vadd", derived={"n": "numel a", "c": 0}, grid=1, block=BLOCK)


def test_the_handler_refuses_a_call_without_its_attributes():
    import ptxbridge.jax.xla_ffi as xf

    xf.register()
    call = jax.ffi.ffi_call(TARGET, jax.ShapeDtypeStruct((4,), jnp.float32))
    with pytest.raises(Exception, match="ptxbridge_launch: the custom call lacks attributes"):
        jax.jit(lambda x: call(x))(jnp.zeros(4)).block_until_ready()
