"""Run by tests/test_jax_sharding.py in a fresh process with four host CPU devices.

``python tests/_jax_devices.py CASE...`` runs each case and prints ``ok CASE`` or ``FAIL CASE`` and its
traceback; XLA_FLAGS must be set before JAX starts, which the parent test process cannot do for itself.
"""

from __future__ import annotations

import os
import sys
import traceback

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import jax
import jax.numpy as jnp
import numpy as np
from _cuda_sources import SQUARE_MUL, VADD_AXPY
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import ptxbridge
import ptxbridge.jax as pj
from ptxbridge import nvrtc

CPP = VADD_AXPY + SQUARE_MUL + r"""
extern "C" __global__ void addrow(const float* x, const float* r, float* y, int rows, int cols) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows * cols) y[i] = x[i] + r[i % cols];
}
"""
BLOCK = 64
IMAGE = ptxbridge.link([nvrtc.compile(CPP)])
FLAT = {"derived": {"n": "numel x"}, "grid": lambda n: -(-n // BLOCK), "block": BLOCK}
MESH = jax.make_mesh((4,), ("d",), axis_types=(AxisType.Auto,))
ROWS = NamedSharding(MESH, P("d"))


def vadd(**extra):
    return pj.op(IMAGE, "vadd", outputs={"c": "like a"}, derived={"n": "numel a"},
                 grid=lambda n: -(-n // BLOCK), block=BLOCK, **extra)


def compiled_text(fn, *args) -> str:
    return jax.jit(fn).lower(*args).compile().as_text()


def gathers(fn, *args) -> bool:
    text = compiled_text(fn, *args)
    return "all-gather" in text or "all-reduce" in text or "all-to-all" in text


def sharded(x, spec=ROWS):
    return jax.device_put(np.asarray(x), spec)


def case_elementwise():
    a, b = sharded(np.arange(1024, dtype=np.float32)), sharded(np.ones(1024, np.float32))
    op, plain = vadd(sharding_rule="i, i -> i"), vadd()
    assert gathers(plain, a, b), "without a rule XLA all-gathers the operands (the problem the rule solves)"
    assert not gathers(op, a, b)
    text = compiled_text(op, a, b)
    assert "f32[256]{0} custom-call" in text and 'custom_call_target="ptxbridge_launch"' in text  # one shard
    found = jax.jit(op)(a, b)
    np.testing.assert_array_equal(found, np.arange(1024) + 1)
    assert found.sharding.is_equivalent_to(ROWS, 1)


def case_explicit_mesh():
    mesh = jax.make_mesh((4,), ("d",), axis_types=(AxisType.Explicit,))
    a = jax.device_put(np.arange(512, dtype=np.float32), NamedSharding(mesh, P("d")))
    op = vadd(sharding_rule="i, i -> i")
    assert not gathers(op, a, a)
    np.testing.assert_array_equal(jax.jit(op)(a, a), 2 * np.arange(512))


def case_batched_with_a_whole_factor():
    op = pj.op(IMAGE, "addrow", outputs={"y": "like x"},
               derived={"rows": lambda x: x.shape[0], "cols": lambda x: x.shape[1]},
               grid=lambda rows, cols: -(-rows * cols // BLOCK), block=BLOCK,
               sharding_rule="b n, n -> b n", need_replication_factors=("n",))
    x = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    r = np.arange(32, dtype=np.float32)
    by_rows = sharded(x, NamedSharding(MESH, P("d", None)))
    whole_r = sharded(r, NamedSharding(MESH, P()))
    assert not gathers(op, by_rows, whole_r)
    assert "f32[16,32]{1,0} custom-call" in compiled_text(op, by_rows, whole_r)  # a launch on 16 of 64 rows
    np.testing.assert_array_equal(jax.jit(op)(by_rows, whole_r), x + r)
    by_cols = sharded(x, NamedSharding(MESH, P(None, "d")))
    assert gathers(op, by_cols, whole_r), "n must stay whole: XLA gathers it"
    np.testing.assert_array_equal(jax.jit(op)(by_cols, whole_r), x + r)


def case_mutated_argument():
    op = pj.op(IMAGE, "axpy", **FLAT, sharding_rule="i, i -> i")
    x, y = sharded(np.arange(256, dtype=np.float32)), sharded(np.ones(256, np.float32))
    assert not gathers(lambda x, y: op(2.0, x, y), x, y)
    np.testing.assert_array_equal(jax.jit(lambda x, y: op(2.0, x, y))(x, y), 2 * np.arange(256) + 1)


def case_grad():
    mul = pj.op(IMAGE, "mul", outputs={"c": "like a"}, derived={"n": "numel a"},
                grid=lambda n: -(-n // BLOCK), block=BLOCK, sharding_rule="i, i -> i")
    square = pj.op(IMAGE, "square", outputs={"y": "like x"}, **FLAT, sharding_rule="i -> i",
                   backward=lambda grad, x, y: {"x": mul(grad, x, 2.0)})
    x = sharded(np.linspace(-1, 1, 512, dtype=np.float32))

    def loss(x):
        return jnp.sum(jnp.sin(square(x)))

    grad = jax.grad(loss)
    np.testing.assert_allclose(jax.jit(grad)(x), 2 * np.asarray(x) * np.cos(np.asarray(x) ** 2), rtol=1e-5)
    text = compiled_text(grad, x)
    assert "all-gather" not in text  # the sum's all-reduce is jnp.sum's own


def case_vmap():
    op = vadd(sharding_rule="i, i -> i")
    xs = sharded(np.arange(4 * 128, dtype=np.float32).reshape(4, 128), NamedSharding(MESH, P("d", None)))
    assert not gathers(jax.vmap(op), xs, xs)
    np.testing.assert_array_equal(jax.jit(jax.vmap(op))(xs, xs), 2 * np.asarray(xs))
    one = sharded(np.ones(128, np.float32), NamedSharding(MESH, P()))
    np.testing.assert_array_equal(jax.jit(jax.vmap(op, in_axes=(0, None)))(xs, one), np.asarray(xs) + 1)


def case_shard_map():
    op = vadd()  # no rule: shard_map launches it on each shard's block
    a = sharded(np.arange(1024, dtype=np.float32))
    fn = jax.shard_map(op, mesh=MESH, in_specs=(P("d"), P("d")), out_specs=P("d"))
    assert not gathers(fn, a, a)
    np.testing.assert_array_equal(jax.jit(fn)(a, a), 2 * np.arange(1024))


def case_a_rule_the_op_cannot_follow():
    fixed = pj.op(IMAGE, "vadd", outputs={"c": pj.Output((1024,))}, derived={"n": "numel a"},
                  grid=lambda n: -(-n // BLOCK), block=BLOCK, sharding_rule="i, i -> i")
    a = sharded(np.arange(1024, dtype=np.float32))
    try:
        jax.jit(fixed).trace(a, a)
    except ptxbridge.ArgumentError as exc:
        assert "vadd: sharding_rule 'i, i -> i' makes result 'c' (512,) on a shard" in str(exc), exc
    else:
        raise AssertionError("a fixed output shape under a sharding rule was not refused while tracing")


def main(cases: list[str]) -> int:
    failed = 0
    for name in cases:
        try:
            globals()[f"case_{name}"]()
            print(f"ok {name}", flush=True)
        except Exception:
            failed += 1
            print(f"FAIL {name}\n{traceback.format_exc()}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
