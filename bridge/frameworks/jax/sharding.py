"""``sharding_rule=``: a bridged op that XLA partitions, one launch per shard and no collective.

An XLA FFI call is opaque to XLA's partitioner, which all-gathers its sharded operands onto every
device and runs the whole call on each.  An op made with ``sharding_rule="b n, n -> b n"`` (the
einsum-like notation of ``jax.experimental.custom_partitioning``: one factor name per dimension,
operands before ``->``, results after) is a ``custom_partitioning`` function instead.  Shardy
propagates shardings through it by the rule, and when XLA partitions the program the op is traced
again on one shard's shapes, so every rule of the op (``outputs``, ``derived``, the geometry)
sees the shard, as it sees one element under ``jax.vmap``.

A factor named in ``need_replication_factors`` stays whole: its dimensions are gathered where
they are sharded (the kernel needs all of them).  A factor that appears only among the operands
(a reduction: per-shard launches would give partial results) or only among the results (nothing
says how big a shard of it is) must stay whole, which is checked when the op is made.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding, PartitionSpec

from ptxbridge.abi.errors import ArgumentError
from ptxbridge.opspec.sharding import ShardingRule, check_shapes

__all__ = ["partitioned"]


def _factor_axes(rule: ShardingRule, arg_shapes: Sequence[Any]) -> dict[str, Any]:
    """Each sharded factor's mesh axes, from the first operand dimension sharded along it; a whole
    factor, or one whose axes another factor took, is left out (replicated)."""
    axes: dict[str, Any] = {}
    taken: set[str] = set()
    for mapping, shape in zip(rule.operands, arg_shapes, strict=True):
        spec = tuple(shape.sharding.spec) + (None,) * (len(mapping) - len(shape.sharding.spec))
        for factor, part in zip(mapping, spec, strict=True):
            names = () if part is None else (part,) if isinstance(part, str) else tuple(part)
            if factor in axes or factor in rule.whole or not names or taken & set(names):
                continue
            axes[factor] = part
            taken |= set(names)
    return axes


def _shardings(mesh: Any, mappings: Sequence[tuple[str, ...]], axes: dict[str, Any]) -> tuple:
    return tuple(NamedSharding(mesh, PartitionSpec(*(axes.get(f) for f in m))) for m in mappings)


def partitioned(kernel: str, rule: ShardingRule, names: tuple[Sequence[str], Sequence[str]],
                launch: Callable[..., Any]) -> Callable[..., Any]:
    """``launch`` (a function of the op's arrays) as a ``custom_partitioning`` function by ``rule``.

    Per shard the op is traced again on the shard's shapes; a result whose shape rule does not follow
    the shard (a fixed shape where the rule shards it) is refused naming the kernel and the result.
    """
    operands, results = names

    def single(found: Any) -> bool:
        return not isinstance(found, tuple)

    def arrange(mesh: Any, arg_shapes: Sequence[Any]) -> tuple[tuple, tuple]:
        axes = _factor_axes(rule, arg_shapes)
        return _shardings(mesh, rule.operands, axes), _shardings(mesh, rule.results, axes)

    def infer(mesh: Any, arg_shapes: Sequence[Any], result_shape: Any) -> Any:
        outs = arrange(mesh, arg_shapes)[1]
        return outs[0] if single(result_shape) else outs

    def partition(mesh: Any, arg_shapes: Sequence[Any], result_shape: Any) -> tuple:
        ins, outs = arrange(mesh, arg_shapes)
        globals_ = (result_shape,) if single(result_shape) else tuple(result_shape)
        expected = [s.shard_shape(r.shape) for s, r in zip(outs, globals_, strict=True)]

        def per_shard(*arrays: Any) -> Any:
            found = launch(*arrays)
            for name, got, want in zip(results, (found,) if single(found) else found, expected, strict=True):
                if tuple(got.shape) != tuple(want):
                    raise ArgumentError(_unfollowed(kernel, rule, name, tuple(want), tuple(got.shape)))
            return found

        return mesh, per_shard, outs[0] if single(result_shape) else outs, ins

    function = custom_partitioning(launch)
    function.def_partition(partition, infer_sharding_from_operands=infer, sharding_rule=rule.text,
                           need_replication_factors=rule.whole)

    @jax.custom_batching.custom_vmap
    def checked(*arrays: Any) -> Any:
        sizes: dict[str, int] = {}
        check_shapes(kernel, rule, operands, [a.shape for a in arrays], "operand", sizes)
        found = jax.eval_shape(launch, *arrays)
        check_shapes(kernel, rule, results, [r.shape for r in ((found,) if single(found) else found)],
                     "result", sizes)
        halved = {f: n // 2 for f, n in sizes.items() if f not in rule.whole and n >= 2}
        if halved:  # the op on a shard of half of every shardable factor: do its results follow?
            shard = [jax.ShapeDtypeStruct(tuple(halved.get(f, n) for f, n in zip(m, a.shape, strict=True)),
                                          a.dtype) for m, a in zip(rule.operands, arrays, strict=True)]
            got = jax.eval_shape(launch, *shard)
            for name, mapping, r in zip(results, rule.results, (got,) if single(got) else got, strict=True):
                want = tuple(halved.get(f, sizes[f]) for f in mapping)
                if tuple(r.shape) != want:
                    raise ArgumentError(_unfollowed(kernel, rule, name, want, tuple(r.shape)))
        return function(*arrays)

    @checked.def_vmap
    def batched(size: int, in_batched: Sequence[bool], *arrays: Any) -> tuple[Any, Any]:
        """Under ``jax.vmap``: the per-element loop partitioned too, the batch a new leading factor."""
        axes = [0 if b else None for b in in_batched]
        inner = partitioned(kernel, _with_batch(rule, in_batched), names,
                            lambda *xs: jax.vmap(launch, in_axes=axes)(*xs))
        found = inner(*arrays)
        return found, True if single(found) else tuple(True for _ in found)

    return checked


def _unfollowed(kernel: str, rule: ShardingRule, name: str, want: tuple, got: tuple) -> str:
    return (f"{kernel}: sharding_rule {rule.text!r} makes result '{name}' {want} on a shard, but its "
            f"output rule gives {got} for the shard's arguments; write the rule in terms of the arguments' "
            "shapes, or keep the factor whole (need_replication_factors)")


def _with_batch(rule: ShardingRule, in_batched: Sequence[bool]) -> ShardingRule:
    """``rule`` with a fresh factor in front of every batched operand and every result."""
    used = {f for m in rule.operands + rule.results for f in m}
    batch = next(f"vmap{k}" for k in range(len(used) + 1) if f"vmap{k}" not in used)
    operands = tuple((batch, *m) if b else m for m, b in zip(rule.operands, in_batched, strict=True))
    results = tuple((batch, *m) for m in rule.results)
    text = " -> ".join(", ".join(" ".join(m) for m in side) for side in (operands, results))
    return ShardingRule(text, operands, results, rule.whole)
