"""A ``sharding_rule``: which dimensions of an op's arrays may be split across devices, parsed once.

The notation is that of ``jax.experimental.custom_partitioning``: one factor name per dimension,
the array arguments before ``->``, the results after, ``"b n, n -> b n"``.  A factor sharded on a
mesh axis means every array with that factor is split the same way along its dimension, and the
op runs on each shard as on a whole array.  :mod:`ptxbridge.jax.sharding` gives the rule to XLA's
partitioner; :mod:`ptxbridge.torch.sharding` turns it into DTensor sharding strategies.  Both
check it here, when the op is made and against the shapes an op meets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ptxbridge.abi.errors import ArgumentError

__all__ = ["ShardingRule", "check_shapes", "sharding_rule"]


@dataclass(frozen=True, slots=True)
class ShardingRule:
    """A parsed ``sharding_rule``: the factor of each dimension of each operand and result."""

    text: str
    operands: tuple[tuple[str, ...], ...]
    results: tuple[tuple[str, ...], ...]
    whole: tuple[str, ...]


def _mappings(kernel: str, text: str, side: str) -> tuple[tuple[str, ...], ...]:
    found = []
    for part in side.split(","):
        factors = tuple(part.split())
        for factor in factors:
            if not factor.isidentifier():
                raise ArgumentError(f"{kernel}: sharding_rule {text!r}: a dimension is one factor name "
                                    f"(letters, digits, _); ptxbridge takes no '...' or compound factors "
                                    f"(got {factor!r})")
        found.append(factors)
    return tuple(found)


def sharding_rule(kernel: str, text: str, whole: Sequence[str], operands: Sequence[str],
                  results: Sequence[str]) -> ShardingRule:
    """Check ``text`` against the op's array arguments (``operands``) and results, by count and by
    factor; ``whole`` are the factors that must not be sharded."""
    if not isinstance(text, str) or text.count("->") != 1:
        raise ArgumentError(f"{kernel}: sharding_rule is a string 'operands -> results', e.g. 'i, i -> i' "
                            f"(got {text!r})")
    lhs, rhs = text.split("->")
    rule = ShardingRule(text, _mappings(kernel, text, lhs), _mappings(kernel, text, rhs),
                        tuple([whole] if isinstance(whole, str) else whole))
    for what, mappings, names in (("operand", rule.operands, operands), ("result", rule.results, results)):
        if len(mappings) != len(names):
            raise ArgumentError(f"{kernel}: sharding_rule {text!r} has {len(mappings)} {what}(s); the op has "
                                f"{len(names)} ({', '.join(names) or 'none'})")
    ins = {f for m in rule.operands for f in m}
    outs = {f for m in rule.results for f in m}
    unknown = set(rule.whole) - ins - outs
    if unknown:
        raise ArgumentError(f"{kernel}: need_replication_factors names {', '.join(sorted(unknown))}, not a "
                            f"factor of sharding_rule {text!r}")
    for factor in sorted((ins ^ outs) - set(rule.whole)):
        where = ("the operands only: launches on shards of it would each give a partial result"
                 if factor in ins else "the results only: no operand says how big a shard of it is")
        raise ArgumentError(f"{kernel}: sharding_rule {text!r}: factor {factor!r} appears in {where}; "
                            "name it in need_replication_factors to keep it whole")
    return rule


def check_shapes(kernel: str, rule: ShardingRule, names: Sequence[str], shapes: Sequence[tuple],
                 what: str, sizes: dict[str, int]) -> None:
    """Raise when ``shapes`` (of the operands or results ``names``) disagree with the rule's ranks, or a
    factor has two sizes (``sizes`` collects them)."""
    mappings = rule.operands if what == "operand" else rule.results
    for name, mapping, shape in zip(names, mappings, shapes, strict=True):
        if len(mapping) != len(shape):
            factors = " ".join(mapping) or "a scalar"
            raise ArgumentError(f"{kernel}: sharding_rule {rule.text!r} gives {what} '{name}' "
                                f"{len(mapping)} dimension(s) ({factors}); it has shape {tuple(shape)}")
        for factor, size in zip(mapping, shape, strict=True):
            if sizes.setdefault(factor, size) != size:
                raise ArgumentError(f"{kernel}: sharding_rule {rule.text!r}: factor {factor!r} is "
                                    f"{sizes[factor]} long elsewhere but {size} in {what} '{name}' "
                                    f"{tuple(shape)}")
