"""ptxbridge.torch ops under torch.distributed: DDP, FSDP (fully_shard) and DTensor tensor parallelism.

Each case takes one SGD step on two gloo ranks (CPU tensors: the CPU PTX interpreter runs the
kernels) of a model whose activation is a bridged op with ``backward=``, and each rank compares the
parameters with one process's step on the whole batch (tests/_torch_ranks.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("this torch build has no torch.distributed", allow_module_level=True)

import _torch_ranks as ranks

import ptxbridge
import ptxbridge.torch as pt
from ptxbridge.abi.errors import ArgumentError


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    from ptxbridge import nvrtc

    path = tmp_path_factory.mktemp("ranks") / "image.ptxb"
    ptxbridge.link([nvrtc.compile(ranks.CPP)]).save(path)
    return path


@pytest.mark.parametrize("case", ["ddp", "fsdp", "tensor_parallel"])
def test_two_gloo_ranks_take_the_single_process_step(saved, tmp_path, case):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    command = [sys.executable, ranks.__file__, case, str(saved), str(tmp_path)]
    run = subprocess.run(command, capture_output=True, text=True, env=env, timeout=240)
    reports = {rank: (tmp_path / f"{case}.{rank}") for rank in range(ranks.WORLD)}
    for rank, report in reports.items():
        assert report.exists(), f"rank {rank} wrote no report: {run.stderr[-3000:]}"
        assert report.read_text() == "ok", report.read_text()
    assert run.returncode == 0, run.stderr[-3000:]


def test_a_sharding_rule_is_checked_when_the_torch_op_is_made(saved):
    image = ptxbridge.Image.open(saved)
    rules = {"outputs": {"c": "like a"}, "derived": {"n": "numel a"}, "grid": 1, "block": 64}
    with pytest.raises(ArgumentError, match=r"mul: sharding_rule 'i, j -> i': factor 'j' appears in the "
                                            r"operands only"):
        pt.op(image, "mul", name="checks::mul_rule", sharding_rule="i, j -> i", **rules)
    with pytest.raises(ArgumentError, match="mul: need_replication_factors needs a sharding_rule"):
        pt.op(image, "mul", name="checks::mul_whole", need_replication_factors=("i",), **rules)
    assert not hasattr(torch.ops.checks, "mul_rule"), "a refused rule left its op registered"


def test_a_tensor_written_in_place_keeps_its_factors():
    from ptxbridge import nvrtc

    source = r'''extern "C" __global__ void axpy(float a, const float* x, float* y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = a * x[i] + y[i];
    }'''
    image = ptxbridge.link([nvrtc.compile(source)])
    refused = (r"axpy: sharding_rule 'i j, i j -> j i' gives 'y', which the kernel writes in place, the "
               r"factors i j as an argument but j i as a result")
    with pytest.raises(ArgumentError, match=refused):
        pt.op(image, "axpy", name="checks::axpy_rule", derived={"n": "numel x"}, grid=1, block=64,
              sharding_rule="i j, i j -> j i")
    assert not hasattr(torch.ops.checks, "axpy_rule")
