"""Run by tests/test_torch_distributed.py: one training step on two gloo ranks against one process.

``python tests/_torch_ranks.py CASE IMAGE OUT [cuda]`` spawns two ranks that each make the bridged
ops from the saved image IMAGE, take one SGD step of a small model whose activation is a
ptxbridge.torch op with ``backward=``, and compare the parameters with the same step taken in one
process on the whole batch; each rank writes ``ok`` or its traceback to OUT/CASE.RANK.  With
``cuda`` rank r runs on cuda:r over NCCL (tests/gpu/test_gpu_distributed.py), else on the CPU over
gloo.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from _cuda_sources import SQUARE_MUL
from torch import nn

import ptxbridge
import ptxbridge.torch as pt

CPP = SQUARE_MUL
BATCH, IN, HIDDEN, OUT = 8, 6, 16, 4
WORLD = 2
DEVICE = torch.device("cpu")  # rank r's cuda:r under ``cuda``


def ops(image: ptxbridge.Image, rule: bool = False) -> nn.Module:
    """The square activation (backward: ``mul(grad, x, 2)``), with a sharding rule for DTensor."""
    flat = {"grid": lambda n: -(-n // 64), "block": 64}
    sharded = {"sharding_rule": "b n, b n -> b n"} if rule else {}
    mul = pt.op(image, "mul", name="ranks::mul", outputs={"c": "like a"}, derived={"n": "numel a"},
                shapes={"b": "like a"}, **flat, **sharded)
    square = pt.op(image, "square", name="ranks::square", outputs={"y": "like x"}, derived={"n": "numel x"},
                   backward=lambda grad, x, y: {"x": mul(grad, x, 2.0)}, **flat,
                   **({"sharding_rule": "b n -> b n"} if rule else {}))
    return square


class Net(nn.Module):
    def __init__(self, square) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.square = nn.Linear(IN, HIDDEN), nn.Linear(HIDDEN, OUT), square
        self.to(DEVICE)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.square(self.a(x)))


def data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    found = torch.randn(BATCH, IN, generator=generator), torch.randn(BATCH, OUT, generator=generator)
    return tuple(t.to(DEVICE) for t in found)


def step(model: nn.Module, x: torch.Tensor, target: torch.Tensor) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    nn.functional.mse_loss(model(x), target).backward()
    optimizer.step()


def reference(square) -> dict[str, torch.Tensor]:
    model = Net(square)
    step(model, *data())
    return {k: v.detach() for k, v in model.state_dict().items()}


def full(value: torch.Tensor) -> torch.Tensor:
    return value.full_tensor() if hasattr(value, "full_tensor") else value


def ddp(square, rank: int) -> dict[str, torch.Tensor]:
    ids = [DEVICE.index] if DEVICE.type == "cuda" else None
    model = nn.parallel.DistributedDataParallel(Net(square), device_ids=ids)
    x, target = data()
    rows = slice(rank * BATCH // WORLD, (rank + 1) * BATCH // WORLD)  # each rank its half of the batch
    step(model, x[rows], target[rows])
    return {k.removeprefix("module."): v.detach() for k, v in model.state_dict().items()}


def fsdp(square, rank: int) -> dict[str, torch.Tensor]:
    from torch.distributed.fsdp import fully_shard

    model = Net(square)
    fully_shard(model.a)
    fully_shard(model)
    x, target = data()
    rows = slice(rank * BATCH // WORLD, (rank + 1) * BATCH // WORLD)
    step(model, x[rows], target[rows])
    assert type(model.a.weight).__name__ == "DTensor", "fully_shard left the parameters whole"
    return {k: full(v).detach() for k, v in model.state_dict().items()}


def tensor_parallel(square, rank: int) -> dict[str, torch.Tensor]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh(DEVICE.type, (WORLD,))
    model = Net(square)
    seen = []  # the hidden activation reaches the op as a DTensor sharded on its features
    model.square = _Recording(model.square, seen)
    parallelize_module(model, mesh, {"a": ColwiseParallel(use_local_output=False),
                                     "b": RowwiseParallel(input_layouts=Shard(-1))})
    step(model, *data())
    assert seen and all(isinstance(x, DTensor) and x.placements == (Shard(1),) for x in seen), seen
    assert seen[0].to_local().shape == (BATCH, HIDDEN // WORLD)
    return {k: full(v).detach() for k, v in model.state_dict().items()}


class _Recording(nn.Module):
    def __init__(self, op, seen: list) -> None:
        super().__init__()
        self.op, self.seen = op, seen

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(x)
        found = self.op(x)
        assert type(found).__name__ == "DTensor" and found.placements == x.placements, found
        return found


CASES = {"ddp": ddp, "fsdp": fsdp, "tensor_parallel": tensor_parallel}


def rank_main(rank: int, case: str, image_path: str, out: str, device: str) -> None:
    global DEVICE
    report = Path(out) / f"{case}.{rank}"
    try:
        if device == "cuda":
            DEVICE = torch.device("cuda", rank)
            torch.cuda.set_device(DEVICE)
        backend = "nccl" if device == "cuda" else "gloo"
        store = f"file://{out}/{case}.store"
        dist.init_process_group(backend, init_method=store, rank=rank, world_size=WORLD)
        square = ops(ptxbridge.Image.open(image_path), rule=case == "tensor_parallel")
        found = CASES[case](square, rank)
        want = reference(square)  # the same op on plain tensors, the whole batch
        assert found.keys() == want.keys(), (found.keys(), want.keys())
        for key in want:
            torch.testing.assert_close(found[key], want[key], rtol=1e-5, atol=1e-6, msg=f"{case}: {key}")
        report.write_text("ok")
    except Exception:
        report.write_text(traceback.format_exc())
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    case, image_path, out, *device = sys.argv[1:]
    mp.spawn(rank_main, args=(case, image_path, out, device[0] if device else "cpu"), nprocs=WORLD, join=True)
