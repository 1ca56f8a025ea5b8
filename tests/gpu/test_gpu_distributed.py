"""Beyond one device on GPUs: jax.export and the persistent cache on a GPU, a sharding_rule over two GPUs,
and DDP / FSDP / tensor parallelism over NCCL on two GPUs (the CPU versions: tests/test_jax_export.py,
tests/test_jax_sharding.py, tests/test_torch_distributed.py, whose helper scripts these reuse).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).parents[1]))  # the CPU tests' helper scripts

import _torch_ranks as ranks

import ptxbridge

two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")


@pytest.fixture(scope="module")
def jax():
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    found = pytest.importorskip("jax")
    pytest.importorskip("ptxbridge.jax._xla_ffi", reason="the XLA FFI handler is not built (no jaxlib)")
    if not any(d.platform == "gpu" for d in found.devices()):
        pytest.skip("JAX sees no GPU")
    return found


@pytest.fixture(scope="module")
def child(jax):
    """The fresh-process script of tests/test_jax_export.py (it imports JAX)."""
    import _jax_processes

    return _jax_processes


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    from ptxbridge import nvrtc

    folder = tmp_path_factory.mktemp("gpu_exported")
    ptxbridge.link([nvrtc.compile(child_source())]).save(folder / "image.ptxb")
    return folder


def child_source() -> str:
    return r"""
extern "C" __global__ void vadd(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
"""


def run_child(child, *args: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    run = subprocess.run([sys.executable, str(Path(child.__file__)), *args], capture_output=True, text=True,
                         env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[-1])


def test_an_exported_gpu_program_runs_in_a_fresh_process(jax, child, saved):
    import jax.numpy as jnp
    from jax import export

    image = ptxbridge.Image.open(saved / "image.ptxb")
    spec = jax.ShapeDtypeStruct((child.N,), jnp.float32)
    checks = [export.DisabledSafetyCheck.custom_call("ptxbridge_launch")]
    found = export.export(jax.jit(child.program(child.vadd_op(image))), platforms=["cuda"],
                          disabled_checks=checks)(spec, spec)
    assert "stream = 1" in found.mlir_module()  # the CUDA branch: the launch on XLA's stream
    (saved / "program.bin").write_bytes(found.serialize())
    seen = run_child(child, "exported", str(saved))
    assert "is not registered in this process" in seen["unregistered"]
    assert seen["right"]


def test_the_persistent_cache_hits_on_the_gpu_in_a_second_process(child, saved, tmp_path):
    first = run_child(child, "cached", str(saved), str(tmp_path))
    assert first == {"right": True, "events": ["cache_misses"]}
    assert run_child(child, "cached", str(saved), str(tmp_path)) == {"right": True, "events": ["cache_hits"]}


@two_gpus
def test_a_sharding_rule_runs_per_gpu_with_no_all_gather(jax, saved):
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    import ptxbridge.jax as pj

    gpus = [d for d in jax.devices() if d.platform == "gpu"][:2]
    if len(gpus) < 2:
        pytest.skip("JAX sees one GPU")
    op = pj.op(ptxbridge.Image.open(saved / "image.ptxb"), "vadd", outputs={"c": "like a"},
               derived={"n": "numel a"}, grid=lambda n: -(-n // 256), block=256, sharding_rule="i, i -> i")
    mesh = jax.sharding.Mesh(np.array(gpus), ("d",), axis_types=(AxisType.Auto,))
    rows = NamedSharding(mesh, P("d"))
    a = jax.device_put(np.arange(1 << 20, dtype=np.float32), rows)
    text = jax.jit(op).lower(a, a).compile().as_text()
    assert "all-gather" not in text and "f32[524288]" in text  # each GPU launches on its half
    found = jax.jit(op)(a, a)
    assert found.sharding.is_equivalent_to(rows, 1)
    np.testing.assert_array_equal(np.asarray(found), 2 * np.arange(1 << 20, dtype=np.float32))


@two_gpus
@pytest.mark.parametrize("case", ["ddp", "fsdp", "tensor_parallel"])
def test_two_nccl_ranks_take_the_single_process_step(tmp_path, case):
    from ptxbridge import nvrtc

    image = tmp_path / "image.ptxb"
    ptxbridge.link([nvrtc.compile(ranks.CPP)]).save(image)
    command = [sys.executable, ranks.__file__, case, str(image), str(tmp_path), "cuda"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=300)
    for rank in range(ranks.WORLD):
        report = tmp_path / f"{case}.{rank}"
        assert report.exists(), f"rank {rank} wrote no report: {run.stderr[-3000:]}"
        assert report.read_text() == "ok", report.read_text()
