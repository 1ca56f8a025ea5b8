"""ptxbridge.jax over several devices: sharding_rule= partitions an op, one launch per shard.

The multi-device cases run in one fresh process with four host CPU devices (tests/_jax_devices.py:
XLA_FLAGS must be set before JAX starts); the rule's checks run here, on one device.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("ptxbridge.jax._xla_ffi", reason="the XLA FFI handler is not built (no jaxlib)")

import ptxbridge
import ptxbridge.jax as pj
from ptxbridge.abi.errors import ArgumentError

CASES = ["elementwise", "explicit_mesh", "batched_with_a_whole_factor", "mutated_argument", "grad", "vmap",
         "shard_map", "a_rule_the_op_cannot_follow"]
CPP = r"""
extern "C" __global__ void vadd(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
"""


@pytest.fixture(scope="module")
def four_devices() -> dict[str, str]:
    script = Path(__file__).with_name("_jax_devices.py")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"} | {"JAX_PLATFORMS": "cpu"}
    run = subprocess.run([sys.executable, str(script), *CASES], capture_output=True, text=True, env=env,
                         timeout=300)
    results, current = {}, None
    for line in run.stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("ok", "FAIL") and rest in CASES:
            current = rest
            results[rest] = "ok" if word == "ok" else ""
        elif current is not None and results[current] != "ok":
            results[current] += line + "\n"
    results["stderr"] = run.stderr[-3000:]
    return results


@pytest.mark.parametrize("case", CASES)
def test_on_four_host_devices(four_devices, case):
    assert four_devices.get(case) == "ok", four_devices.get(case) or four_devices["stderr"]


@pytest.fixture(scope="module")
def image():
    from ptxbridge import nvrtc

    return ptxbridge.link([nvrtc.compile(CPP)])


def vadd(image, rule, **extra):
    return pj.op(image, "vadd", outputs={"c": "like a"}, derived={"n": "numel a"}, grid=lambda n: -(-n // 64),
                 block=64, sharding_rule=rule, **extra)


@pytest.mark.parametrize(("rule", "extra", "message"), [
    ("i i", {}, r"sharding_rule is a string 'operands -> results'"),
    ("i -> i", {}, r"sharding_rule 'i -> i' has 1 operand\(s\); the op has 2 \(a, b\)"),
    ("i, i -> i, i", {}, r"has 2 result\(s\); the op has 1 \(c\)"),
    ("i j, i -> i", {}, r"factor 'j' appears in the operands only: .*partial result; name it in "
                        r"need_replication_factors"),
    ("i, i -> i k", {}, r"factor 'k' appears in the results only"),
    ("i, i -> i", {"need_replication_factors": ("k",)}, r"need_replication_factors names k, not a factor"),
    ("..., ... -> ...", {}, r"ptxbridge takes no '\.\.\.' or compound factors \(got '\.\.\.'\)"),
])
def test_a_rule_that_cannot_be_honoured_is_refused_when_the_op_is_made(image, rule, extra, message):
    with pytest.raises(ArgumentError, match="vadd: .*" + message):
        vadd(image, rule, **extra)


def test_a_rule_is_checked_against_the_traced_shapes(image):
    a = np.ones(64, np.float32)
    with pytest.raises(ArgumentError, match=r"vadd: sharding_rule 'i j, i j -> i j' gives operand 'a' 2 "
                                            r"dimension\(s\) \(i j\); it has shape \(64,\)"):
        jax.jit(vadd(image, "i j, i j -> i j"))(a, a)
    with pytest.raises(ArgumentError, match=r"factor 'i' is 64 long elsewhere but 32 in operand 'b'"):
        jax.jit(vadd(image, "i, i -> i"))(a, a[:32])
    with pytest.raises(ArgumentError, match="vadd: need_replication_factors needs a sharding_rule"):
        pj.op(image, "vadd", outputs={"c": "like a"}, derived={"n": "numel a"}, grid=1, block=64,
              need_replication_factors=("i",))


def test_on_one_device_a_rule_changes_nothing(image):
    a, b = np.arange(100, dtype=np.float32), np.ones(100, np.float32)
    op = vadd(image, "i, i -> i")
    np.testing.assert_array_equal(jax.jit(op)(a, b), a + 1)
    np.testing.assert_array_equal(op(a, b), a + 1)  # eager: no partitioning wrapper at all
    batched = jax.jit(jax.vmap(op))(np.stack([a, b]), np.stack([b, a]))
    np.testing.assert_array_equal(batched, np.stack([a + 1] * 2))
