"""ptxbridge.jax under JAX's transformations, on the CPU: jax.grad / jax.vjp, jax.vmap, no-alias checks.

Gradients come from backwards built of other bridged ops (CUDA C++ through NVRTC, Rust, numba),
run by the C XLA FFI handler on ptxbridge's CPU PTX interpreter, and are compared with JAX's own
gradient of the same computation written in jax.numpy.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("ptxbridge.jax._xla_ffi", reason="the XLA FFI handler is not built (no jaxlib)")

import jax.numpy as jnp
from _rust_fixtures import sysroot, toolchain  # noqa: F401

import ptxbridge
import ptxbridge.jax as pj
import ptxbridge.jax.xla_ffi as xf
from ptxbridge.abi.errors import ArgumentError

CPP = r"""
extern "C" __global__ void mul(const double* a, const double* b, double* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] * b[i];
}
extern "C" __global__ void sin_cos(const double* x, double* s, double* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { s[i] = sin(x[i]); c[i] = cos(x[i]); }
}
extern "C" __global__ void sin_cos_grad(const double* x, const double* gs, const double* gc, double* gx,
                                         int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) gx[i] = gs[i] * cos(x[i]) - gc[i] * sin(x[i]);
}
extern "C" __global__ void rowsum(const float* x, float* out, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) { float s = 0.0f; for (int j = 0; j < cols; j++) s += x[r * cols + j]; out[r] = s; }
}
extern "C" __global__ void raxpy(float a, const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void take(const double* x, const int* idx, double* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[idx[i]];
}
"""
BLOCK = 128
SCALE_RS = Path(__file__).parents[1] / "examples" / "kernels" / "scale.rs"


def cover(n: int) -> int:
    return -(-n // BLOCK)


def elementwise(source, kernel: str, first: str, **rules):
    """An op of a 1-D kernel whose output ``rules['outputs']`` is shaped like ``first``."""
    return pj.op(source, kernel, derived={"n": f"numel {first}"}, grid=lambda n: cover(n), block=BLOCK,
                 **rules)


@pytest.fixture(scope="module")
def image():
    from ptxbridge import nvrtc

    return ptxbridge.link([nvrtc.compile(CPP)])


@pytest.fixture(scope="module")
def ops(image):
    mul = elementwise(image, "mul", "a", outputs={"c": "like a"},
                      backward=lambda g, a, b, c: {"a": mul(g, b), "b": mul(g, a)})
    sincos_grad = elementwise(image, "sin_cos_grad", "x", outputs={"gx": "like x"})
    sincos = elementwise(image, "sin_cos", "x", outputs={"s": "like x", "c": "like x"},
                         backward=lambda gs, gc, x, s, c: {"x": sincos_grad(x, gs, gc)})
    return {"mul": mul, "sincos": sincos}


def data(n=300, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n), rng.standard_normal(n)


def test_grad_of_nvrtc_kernels_under_jit_matches_jax(ops):
    a, b = data()

    def loss(mul, sincos, a, b):
        s, c = sincos(mul(a, b))
        return jnp.sum(s * s + 3.0 * c)

    def bridged(a, b):
        return loss(ops["mul"], ops["sincos"], a, b)

    def reference(a, b):
        return loss(jnp.multiply, lambda x: (jnp.sin(x), jnp.cos(x)), a, b)

    with jax.enable_x64():
        expected = jax.grad(reference, argnums=(0, 1))(a, b)
        for found in (jax.jit(jax.grad(bridged, argnums=(0, 1)))(a, b),  # grad traced inside jit
                      jax.grad(jax.jit(bridged), argnums=(0, 1))(a, b)):  # jit inside grad
            for got, want in zip(found, expected, strict=True):
                np.testing.assert_allclose(got, want, rtol=1e-12)
        value, pullback = jax.vjp(jax.jit(ops["sincos"]), a)
        (gx,) = pullback((jnp.ones_like(a), jnp.zeros_like(a)))  # d sum(sin x) = cos x
        np.testing.assert_allclose(value[0], np.sin(a), rtol=1e-12)
        np.testing.assert_allclose(gx, np.cos(a), rtol=1e-12)


def test_grad_of_a_rust_kernel(sysroot):  # noqa: F811
    import ptxbridge.rust

    rust = ptxbridge.link([ptxbridge.rust.compile(SCALE_RS)])
    # saxpy(a, x, y, n): y = a * x + y; with y a zero-filled output it is y = a * x, whose
    # vector-Jacobian product is again saxpy: a * grad
    scale = elementwise(rust, "saxpy", "x", outputs={"y": "zeros like x"},
                        backward=lambda grad, a, x, y: {"x": scale(a, grad)})
    x = np.linspace(-1.0, 1.0, 500, dtype=np.float32)
    f = jax.jit(jax.grad(lambda x: jnp.sum(jnp.tanh(scale(3.0, x)))))
    np.testing.assert_allclose(f(x), jax.grad(lambda x: jnp.sum(jnp.tanh(3.0 * x)))(x), rtol=1e-5)


def test_grad_of_a_numba_kernel():
    cuda = pytest.importorskip("numba.cuda")
    import ptxbridge.numba as pn

    def cube(x, y):
        i = cuda.grid(1)
        if i < x.shape[0]:
            y[i] = x[i] * x[i] * x[i]

    def scaled_square(x, g, s, y):
        i = cuda.grid(1)
        if i < x.shape[0]:
            y[i] = s * g[i] * x[i] * x[i]

    vector = "float64[::1]"
    image = ptxbridge.link([pn.compile(cube, f"void({vector}, {vector})", name="cube"),
                            pn.compile(scaled_square, f"void({vector}, {vector}, float64, {vector})",
                                       name="scaled_square")])
    geometry = {"grid": lambda x: cover(x.shape[0]), "block": BLOCK}
    # numba arrays are writable to numba: read_only= is the promise that keeps them inputs
    grad_cube = pj.op(image, "scaled_square", outputs={"y": "like x"}, read_only=("x", "g"), **geometry)
    cube_op = pj.op(image, "cube", outputs={"y": "like x"}, read_only=("x",), **geometry,
                    backward=lambda grad, x, y: {"x": grad_cube(x, grad, 3.0)})
    x, _ = data(200, seed=1)
    with jax.enable_x64():
        found = jax.jit(jax.grad(lambda x: jnp.sum(jnp.sin(cube_op(x)))))(x)
        np.testing.assert_allclose(found, jax.grad(lambda x: jnp.sum(jnp.sin(x ** 3)))(x), rtol=1e-12)


def test_bad_backwards_are_refused_naming_kernel_and_argument(image):
    a, b = data(16)

    def grad_of(backward, args=(a, b), kernel="mul", first="a"):
        op = elementwise(image, kernel, first, outputs={"c" if kernel == "mul" else "y": "like a" if
                                                        kernel == "mul" else "like x"}, backward=backward)
        with jax.enable_x64():
            return jax.jit(jax.grad(lambda *xs: jnp.sum(op(*xs))))(*args)

    listing = r"mul: backward must return a dict from tensor argument names \(a, b\) to gradients"
    with pytest.raises(ArgumentError, match=listing + r" \(got \["):
        grad_of(lambda g, **values: [g, g])
    with pytest.raises(ArgumentError, match=listing + r" \(got \{'n'"):
        grad_of(lambda g, **values: {"n": g})
    with pytest.raises(ArgumentError, match=r"mul: backward's gradient for 'a' is float64\[8\]; expected "
                                            r"float64\[16\], the argument's"):
        grad_of(lambda g, a, b, c: {"a": g[:8]})
    with pytest.raises(ArgumentError, match=r"mul: backward's gradient for 'b' is float32\[16\]; expected f"):
        grad_of(lambda g, a, b, c: {"a": g, "b": g.astype(jnp.float32)})
    with pytest.raises(ArgumentError, match="mul: backward's gradient for 'a' is not an array"):
        grad_of(lambda g, a, b, c: {"a": "zero"})
    with pytest.raises(ArgumentError, match="take: backward's gradient for 'idx': 'idx' is an array of "
                                            "int32, which takes no gradient"):
        grad_of(lambda g, x, idx, y: {"idx": g}, args=(a, np.arange(16, dtype=np.int32)), kernel="take",
                first="idx")
    # None (or leaving an argument out) is a zero gradient
    np.testing.assert_array_equal(grad_of(lambda g, a, b, c: {"a": None}), np.zeros(16))


def test_differentiation_needs_a_backward(image):
    mutating = r"raxpy: backward= needs an op that returns outputs and mutates no argument \(it mutates y\)"
    with pytest.raises(ArgumentError, match=mutating):
        elementwise(image, "raxpy", "x", backward=lambda g, **values: {})
    plain = elementwise(image, "mul", "a", outputs={"c": "like a"})
    a, b = data(8)
    with jax.enable_x64():
        with pytest.raises(ArgumentError, match=r"mul: JAX differentiates through the op, which has no "
                                                r"derivative; give ptxbridge\.jax\.op a backward="):
            jax.jit(jax.grad(lambda a: jnp.sum(plain(a, b))))(a)
        with pytest.raises(ArgumentError, match="mul: JAX differentiates through the op"):
            jax.jvp(lambda a: plain(a, b), (a,), (a,))
        # an op no differentiated value flows into is left alone
        np.testing.assert_allclose(jax.grad(lambda t: t * jnp.sum(plain(a, b)))(2.0), np.sum(a * b))


def test_vmap_launches_per_element_with_per_element_shapes(image, ops):
    rowsum = pj.op(image, "rowsum", outputs={"out": pj.Output(lambda x: x.shape[:1])},
                   derived={"rows": lambda x: x.shape[0], "cols": lambda x: x.shape[1]},
                   grid=lambda rows: cover(rows), block=BLOCK)
    x = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6)
    # the rules see one element (5, 6): a per-element (5,) result, stacked to (4, 5)
    np.testing.assert_allclose(jax.jit(jax.vmap(rowsum))(x), x.sum(axis=2))
    np.testing.assert_allclose(jax.vmap(rowsum, in_axes=2, out_axes=1)(x), x.sum(axis=1))
    np.testing.assert_allclose(jax.vmap(jax.vmap(rowsum))(x[:, :, None]), x[:, :, None].sum(axis=3))
    text = jax.jit(jax.vmap(rowsum)).lower(x).as_text()
    assert "stablehlo.while" in text  # a loop of launches: 5 rows (one element) each
    assert "geometry = dense<[1, 1, 1, 128, 1, 1, 0]>" in text
    assert "0, 0, 5, 0, 0, 0, 6, 0, 0, 0]> : tensor<24xui8>" in text  # params: two pointers, rows=5, cols=6

    raxpy = elementwise(image, "raxpy", "x")
    ys, x1 = x.reshape(4, 30), np.ones(30, np.float32)
    np.testing.assert_allclose(jax.vmap(lambda y: raxpy(2.0, x1, y))(ys), 2.0 + ys)  # unbatched x, batched y
    np.testing.assert_allclose(jax.vmap(lambda x: raxpy(2.0, x, x1))(ys), 2.0 * ys + 1.0)  # batched x only
    with pytest.raises(ArgumentError, match=r"raxpy: argument 'a' is a traced value; .*in_axes=None"):
        jax.vmap(lambda a, y: raxpy(a, x1, y))(np.ones(4, np.float32), ys)

    a, b = data(4 * 50)
    with jax.enable_x64():  # per-example gradients: vmap of grad of a custom_vjp op
        found = jax.jit(jax.vmap(jax.grad(lambda a, b: jnp.sum(ops["sincos"](ops["mul"](a, b))[0]))))(
            a.reshape(4, 50), b.reshape(4, 50))
    np.testing.assert_allclose(found, (np.cos(a * b) * b).reshape(4, 50), rtol=1e-12)


def test_zero_filled_outputs_start_at_zero(image):
    # XLA's results are uninitialized: a "zeros" output is a zero operand the result aliases
    scaled = elementwise(image, "raxpy", "x", outputs={"y": "zeros like x"})
    x = np.linspace(-1.0, 1.0, 1000, dtype=np.float32)
    np.testing.assert_allclose(jax.jit(lambda x: scaled(4.0, x) + scaled(-1.0, x))(x), 3.0 * x, rtol=1e-6)


def test_restrict_promises_reach_the_handler(image):
    raxpy = elementwise(image, "raxpy", "x")
    x = np.arange(8, dtype=np.float32)
    call = [line for line in jax.jit(lambda x, y: raxpy(2.0, x, y)).lower(x, x).as_text().splitlines()
            if "custom_call @ptxbridge_launch" in line]
    assert "no_alias = dense<[1, 0]>" in call[0]  # slot 1 (y, the promiser) against slot 0 (x)
    assert "spans = dense<[32, 0, 32, 1]>" in call[0]  # x: 32 bytes read; y: 32 bytes written
    assert "'y' is a __restrict__ pointer, which no other argument may overlap" in call[0]
    unchecked = elementwise(image, "raxpy", "x", check_aliasing=False)
    assert "no_alias" not in jax.jit(lambda x, y: unchecked(2.0, x, y)).lower(x, x).as_text()
    plain = elementwise(image, "mul", "a", outputs={"c": "like a"})  # no promises, no attributes
    with jax.enable_x64():
        assert "no_alias" not in jax.jit(lambda a: plain(a, a)).lower(x.astype(np.float64)).as_text()


def test_xla_copies_an_argument_passed_as_both_restrict_pointers(image):
    # y is written in place (its result aliases its operand), so XLA gives the kernel a copy of x as
    # y: the buffers differ and the check passes; this holds with the argument donated too
    raxpy = elementwise(image, "raxpy", "x")
    x = np.arange(100, dtype=np.float32)
    np.testing.assert_allclose(jax.jit(lambda x: raxpy(2.0, x, x))(x), 3.0 * x)
    np.testing.assert_allclose(jax.jit(lambda x: raxpy(2.0, x, x), donate_argnums=0)(jnp.asarray(x)), 3.0 * x)
    np.testing.assert_allclose(jax.jit(lambda x: raxpy(2.0, x.reshape(10, 10).ravel(), x))(x), 3.0 * x)


def test_the_handler_refuses_overlapping_restrict_buffers(image):
    # ptxbridge.jax never builds such a call; a hand-built one stands for a buffer assignment
    # that would hand the kernel one buffer as both x and y
    raxpy = elementwise(image, "raxpy", "x")
    x = jax.device_put(jnp.arange(8, dtype=jnp.float32), jax.devices("cpu")[0])  # CPU attributes: run there
    honest = pj._pack(raxpy.spec, {"a": 2.0, "x": x, "y": x, "n": 8}, {"x": 0, "y": -1}, raxpy.promises)
    overlapping = dataclasses.replace(honest, slots=((8, 0), (16, -1)))  # result 0 is operand 0's buffer
    xf.register()
    call = jax.ffi.ffi_call(xf.TARGET, jax.ShapeDtypeStruct((8,), jnp.float32), input_output_aliases={0: 0})
    refused = (r"raxpy: argument 'y' \(\*mut restrict f32\) overlaps argument 'x' \(\*const restrict f32\) "
               r"in bytes \[0x[0-9a-f]+, 0x[0-9a-f]+\) \(32 bytes\): 'y' is a __restrict__ pointer, which no "
               r"other argument may overlap; pass arrays that do not overlap, or check_aliasing=False")
    with pytest.raises(Exception, match=refused):
        jax.jit(lambda x: call(x, **xf.attributes(overlapping, raxpy.image, "cpu")))(x).block_until_ready()
    unchecked = dataclasses.replace(overlapping, no_alias=xf.NoAlias())
    found = jax.jit(lambda x: call(x, **xf.attributes(unchecked, raxpy.image, "cpu")))(x)
    np.testing.assert_allclose(found, 3.0 * np.arange(8))  # y = 2x + y on one buffer, as the kernel ran it

