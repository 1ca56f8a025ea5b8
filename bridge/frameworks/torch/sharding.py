"""``sharding_rule=`` on a torch op: DTensor sharding strategies, so the op runs on each shard.

DTensor refuses an operator it has no sharding strategy for.  From the op's rule
(:mod:`ptxbridge.opspec.sharding`, the notation JAX's ops use) this registers, with
``torch.distributed.tensor.experimental.register_sharding``, the placements the op accepts per
mesh dimension: everything replicated, or one shardable factor sharded (``Shard(d)`` on the
dimension it names in each tensor argument and output, ``Replicate()`` on a tensor argument without
it).  DTensor then redistributes the arguments to one of these, and the op launches on each rank's
local tensors, its rules seeing the shard's shapes.  A factor is shardable when it is not kept
whole and every written tensor has it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ptxbridge.abi.errors import ArgumentError
from ptxbridge.opspec import OpSpec
from ptxbridge.opspec.sharding import ShardingRule

__all__ = ["dtensor_strategies"]


def dtensor_strategies(spec: OpSpec, rule: ShardingRule) -> Callable[[Any], None]:
    """Check ``rule`` for a torch op; returns ``register(op)``, which registers its DTensor sharding
    strategies for ``op`` (the ``OpOverload``)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.experimental import register_sharding

    operand = dict(zip(spec.arrays, rule.operands, strict=True))
    result = dict(zip(spec.written, rule.results, strict=True))
    for name in spec.mutated:
        if operand[name] != result[name]:
            raise ArgumentError(f"{spec.name}: sharding_rule {rule.text!r} gives '{name}', which the kernel "
                                f"writes in place, the factors {' '.join(operand[name])} as an argument but "
                                f"{' '.join(result[name])} as a result; a tensor written in place keeps its "
                                "layout")
    outputs = [result[o.param.name] for o in spec.outputs]
    factors = [f for m in rule.results for f in m if f not in rule.whole]
    shardable = [f for f in dict.fromkeys(factors) if all(f in m for m in rule.results)]

    def placements(factor: str | None) -> tuple[list, list]:
        def one(mapping: tuple[str, ...]) -> Any:
            return Shard(mapping.index(factor)) if factor in mapping else Replicate()

        ins = [one(operand[p.name]) if p.name in operand else None for p in spec.inputs]
        return [one(m) for m in outputs], ins

    def strategies(*args: Any, **kwargs: Any) -> list[tuple[list, list]]:
        return [placements(None), *(placements(f) for f in shardable)]

    return lambda op: register_sharding(op)(strategies)
