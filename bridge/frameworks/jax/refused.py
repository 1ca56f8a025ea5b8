"""A JAX branch that fails with ptxbridge's error when it is compiled or run, never when it is traced.

``jax.lax.platform_dependent`` traces every platform's branch but lowers only the branch of the
platform it compiles for.  :mod:`ptxbridge.jax` gives a kernel it must not launch on a GPU (a numba
kernel compiled with ``debug=True``: the GPU handler cannot read its exception flag) a CUDA branch
made by :func:`refused`, so the op runs on the CPU and fails, naming the kernel, before anything
runs on a GPU: when XLA compiles it for one, or when it is called eagerly on arrays on a GPU.
Raising while tracing would refuse the CPU too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir

from ptxbridge.abi.errors import PtxBridgeError

__all__ = ["refused"]

_REFUSED = Primitive("ptxbridge_refused")
_REFUSED.multiple_results = True


def refused(error: PtxBridgeError, results: Sequence[Any]) -> Callable[..., list]:
    """A branch with ``results``' shapes and dtypes (``jax.ShapeDtypeStruct``) whose lowering raises
    ``error``."""
    shaped = tuple(jax.core.ShapedArray(r.shape, r.dtype) for r in results)
    return lambda *operands: _REFUSED.bind(*operands, results=shaped, error=error)


def _abstract(*operands: Any, results: tuple, error: PtxBridgeError) -> list:
    return list(results)


def _refuse(*operands: Any, results: tuple, error: PtxBridgeError) -> list:
    """Evaluated eagerly: an eager call on arrays on a GPU takes this branch."""
    raise error


def _lower(ctx: Any, *operands: Any, results: tuple, error: PtxBridgeError) -> list:
    raise error


def _batch(operands: Sequence[Any], dims: Sequence[int | None], *, results: tuple,
           error: PtxBridgeError) -> tuple[list, list[int]]:
    """Under ``jax.vmap``: the same refusal, its results with the batch axis in front."""
    size = next(x.shape[d] for x, d in zip(operands, dims, strict=True) if d is not None)
    batched = tuple(jax.core.ShapedArray((size, *r.shape), r.dtype) for r in results)
    return _REFUSED.bind(*operands, results=batched, error=error), [0] * len(results)


_REFUSED.def_impl(_refuse)
_REFUSED.def_abstract_eval(_abstract)
mlir.register_lowering(_REFUSED, _lower)
batching.primitive_batchers[_REFUSED] = _batch
