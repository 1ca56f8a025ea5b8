"""When a :mod:`ptxbridge.torch` op may skip torch's dispatcher: its direct call.

torch's dispatcher calling a Python kernel costs more than all of ``torch.add(a, b, out=c)`` on small
tensors, so an op whose kernel went only through it could not match the operator it stands beside.
The op's ``OpOverload`` (the very object ``torch.ops.<namespace>.<name>.default`` names) is given a
per-op subclass whose ``__call__`` runs the op's eager kernel itself when nothing the dispatcher does
between the call and that kernel could change what happens:

- the arguments are positional, as many as the schema has, each of exactly the type the schema
  names (``torch.Tensor`` itself, not a subclass: no FakeTensor, DTensor, FunctionalTensor or
  ``__torch_function__`` override; Python ``int`` for ``SymInt``, and so on);
- no tensor argument requires grad (autograd would record a node, or run the op's backward
  registration) and no forward-mode AD level is open;
- the op's device has its kernel already (a meta tensor, or a device the op has not met, goes
  through the dispatcher: the fake kernel serves meta);
- no ``TorchDispatchMode`` or ``TorchFunctionMode`` is active (FakeTensorMode, ``make_fx``,
  functionalization, ``opcheck``'s modes, ``with torch.device(...)``), no functorch transform
  (``vmap``, ``grad``), no ``torch.jit.trace`` and no profiler (both record ops at the dispatcher).

Anything else takes the dispatcher, as before: ``torch.compile``, ``torch.export``, ``opcheck``,
``vmap`` and autograd see a ``torch.library`` op.  Both paths run the same lines
(:mod:`ptxbridge.torch.eager`), so they check, launch and bump versions alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.autograd.forward_ad

__all__ = ["CONTEXT_NAMES", "CONTEXT_TEST", "argument_test", "call_directly"]

_PYTHON_TYPES = {"SymInt": "int", "float": "float", "bool": "bool", "complex": "complex"}

# the process-wide conditions, as source over the names of CONTEXT_NAMES
CONTEXT_TEST = ("not dispatch_modes() and not function_modes() and not transforms() and not profiling() "
                "and tracing() is None and forward_ad._current_level < 0")
CONTEXT_NAMES = {
    "dispatch_modes": torch._C._len_torch_dispatch_stack,
    "function_modes": torch._C._is_torch_function_mode_enabled,
    "transforms": torch._C._are_functorch_transforms_active,
    "profiling": torch._C._autograd._profiler_enabled,
    "tracing": torch._C._get_tracing_state,
    "forward_ad": torch.autograd.forward_ad,
    "Tensor": torch.Tensor,
}


def argument_test(kinds: Sequence[str], names: Sequence[str]) -> str:
    """The conditions on the arguments, as source over ``names``: each of exactly its schema type
    (``kinds``, alias annotations left out: ``"Tensor"``, ``"SymInt"``, ``"float"``, ``"bool"``,
    ``"complex"``), and no tensor requiring grad."""
    tests = []
    for name, kind in zip(names, kinds, strict=True):
        if kind == "Tensor":
            tests.append(f"type({name}) is Tensor and not {name}.requires_grad")
        else:
            tests.append(f"type({name}) is {_PYTHON_TYPES[kind]}")
    return " and ".join(tests)


def call_directly(overload: torch._ops.OpOverload, call: Callable[..., Any]) -> None:
    """Make ``call(overload, *args, **kwargs)`` the overload's ``__call__`` (a per-op subclass, so
    ``torch.ops`` and every ``isinstance`` test still see an ``OpOverload``)."""
    overload.__class__ = type("DirectOpOverload", (type(overload),), {
        "__call__": call, "__doc__": __doc__, "__module__": __name__})
