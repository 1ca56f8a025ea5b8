"""The eager path of a :mod:`ptxbridge.torch` op: every per-call decision made once, when the op is made.

An eager op call already pays torch's dispatcher and its call into a Python kernel; what the
kernel itself does per call should cost little next to the launch.  So the rules of the op's
:class:`~ptxbridge.opspec.OpSpec` are resolved here to positions in one list of values (the op's
arguments, then derived values, then outputs), constant rules are evaluated once, the launch call
is written out once per op (no argument tuple or keyword dict built per call), and the launch
target (the :class:`~ptxbridge.launch.module.Kernel`, or the module a launcher function gets) is
looked up once per ``torch.device``.  Per call that leaves: the contiguity checks, the derived
values, the ``shapes=`` checks, the output allocations, the launch, and the version-counter bump
of mutated tensors (what torch's autograd would otherwise do).

A raw pointer or slice takes contiguous memory: a strided argument runs on a contiguous copy,
copied back when the kernel writes it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from typing import Any, NoReturn

import torch

from ptxbridge.abi.errors import ArgumentError
from ptxbridge.opspec import Modules, OpSpec, Rule, as_shape, check_shape, contiguous_only

__all__ = ["eager_impl"]

_DEVICE_TYPES = ("cpu", "cuda")
_CONTIGUOUS = torch.contiguous_format
# torch.autograd.graph.increment_version is this call behind an isinstance test (torch >= 2.9): called
# directly with a tuple it costs half as much per op call
_bump = getattr(torch._C, "_increment_version", torch.autograd.graph.increment_version)


_FORMS = {"numel": torch.Tensor.numel}  # the text rules torch answers faster itself than through .shape


def _reader(rule: Rule, index: Mapping[str, int]) -> Callable[[Sequence[Any]], Any]:
    """``rule`` as a function of the list of values (its reads found by position)."""
    call = _FORMS.get(rule.form, rule.call)
    if rule.constant:
        value = call()
        return lambda values: value
    places = [index[name] for name in rule.reads]
    if len(places) == 1:
        (at,) = places
        return lambda values: call(values[at])
    pick = itemgetter(*places)
    return lambda values: call(*pick(values))


def _picker(places: Sequence[int]) -> Callable[[Sequence[Any]], tuple]:
    """The values at ``places`` as a tuple (``itemgetter`` returns a bare value for one place)."""
    if len(places) == 1:
        (at,) = places
        return lambda values: (values[at],)
    return itemgetter(*places) if places else (lambda values: ())


def _allocator(spec: OpSpec, index: Mapping[str, int], to_torch: Mapping[Any, Any],
               contiguous: frozenset[int]) -> Callable[[list, Any], None]:
    """Appends each output, allocated from its rule, to the values (``empty_like`` where the rule is
    "like x": cheaper than ``torch.empty`` with a shape, dtype and device; with no keywords at all
    where x is known contiguous by then (``contiguous``) and the dtype is x's, which torch parses
    faster still)."""
    makers = []
    for output in spec.outputs:
        dt = None if output.dtype is None else to_torch.get(output.dtype)
        if output.dtype is not None and dt is None:
            raise ArgumentError(f"{spec.name}: output '{output.param.name}' has element type {output.dtype}, "
                                "which torch has no dtype for")
        if output.like is not None:
            like = torch.zeros_like if output.zeros else torch.empty_like
            plain = dt is None and index[output.like] in contiguous  # like x, x contiguous: x's layout
            makers.append((False if plain else None, index[output.like], like, dt))
        else:
            make = torch.zeros if output.zeros else torch.empty
            makers.append((_reader(output.shape, index), output.shape, make, dt))

    def allocate(values: list, device: Any) -> None:
        for shape, where, make, dt in makers:
            if shape is False:
                values.append(make(values[where]))
            elif shape is None:
                values.append(make(values[where], dtype=dt, memory_format=_CONTIGUOUS))
            else:
                values.append(make(as_shape(where, shape(values)), dtype=dt, device=device))
    return allocate


def _shape_checker(spec: OpSpec, index: Mapping[str, int]) -> Callable[[Sequence[Any]], None] | None:
    """Raises when a tensor argument's shape is not the one its ``shapes=`` rule gives; None without rules."""
    checks = [(name, index[name], _reader(rule, index), rule) for name, rule in spec.shapes]
    if not checks:
        return None

    def check(values: Sequence[Any]) -> None:
        for name, at, read, rule in checks:
            check_shape(spec.name, name, values[at].shape, as_shape(rule, read(values)), rule)
    return check


def _geometry(spec: OpSpec, index: Mapping[str, int]) -> tuple | Callable[[Sequence[Any]], tuple]:
    """``(grid, block, shared_mem)``: fixed when no rule reads anything, else a function of the values."""
    rules = [(spec.grid, None), (spec.block, None), (spec.shared_mem, 0)]
    if all(rule is None or rule.constant for rule, _ in rules):
        return tuple(default if rule is None else rule.call() for rule, default in rules)
    grid, block, shared_mem = (_reader(rule, index) if rule is not None else (lambda values, d=default: d)
                               for rule, default in rules)
    return lambda values: (grid(values), block(values), shared_mem(values))


def _caller(places: Sequence[int], fn: Callable[..., None] | None) -> Callable[[Any, Sequence, tuple], None]:
    """``call(found, values, geometry)``: the kernel ``found`` launched with the values at ``places`` and
    ``geometry`` as ``grid=``, ``block=``, ``shared_mem=`` (or ``fn(found, ...)`` without geometry), the
    call spelled out: through ``*args`` and keywords it would build a tuple and a dict per call, which
    costs more than the rest of the op's own work.  The source names only positions."""
    values = "".join(f", v[{int(at)}]" for at in places)
    call = (f"fn(found{values})" if fn is not None
            else f"found({values[2:]}{', ' if values else ''}grid=g[0], block=g[1], shared_mem=g[2])")
    namespace: dict[str, Any] = {"fn": fn}
    exec(compile(f"def call(found, v, g):\n    {call}\n", "<ptxbridge.torch launch>", "exec"), namespace)
    return namespace["call"]


def eager_impl(spec: OpSpec, modules: Modules, target: Callable[[Any], Any], fn: Callable[..., None] | None,
               anchor: int, to_torch: Mapping[Any, Any]) -> Callable[..., Any]:
    """The op's kernel for CPU and CUDA tensors: ``impl(*args)`` with the op's arguments in order.

    ``target(module)`` is what runs on a device: a kernel, launched with the spec's geometry, or
    (``fn`` given) the module that ``fn(module, *kernel_args)`` launches from.  ``anchor`` is the
    argument whose device the op runs on.
    """
    names = [p.name for p in spec.inputs] + [n for n, _ in spec.derived]
    names += [o.param.name for o in spec.outputs]
    index = {name: i for i, name in enumerate(names)}
    derived = [_reader(rule, index) for _, rule in spec.derived]
    check_shapes = _shape_checker(spec, index)
    contiguous = [i for i, p in enumerate(spec.inputs) if p.name in spec.tensors and contiguous_only(p.type)]
    allocate = _allocator(spec, index, to_torch, frozenset(contiguous)) if spec.outputs else None
    geometry = () if fn is not None else _geometry(spec, index)  # a launcher function has none
    fixed = geometry if isinstance(geometry, tuple) else None
    call = _caller([index[p.name] for p in spec.signature.params], fn)
    outputs = [index[o.param.name] for o in spec.outputs]
    result = itemgetter(*outputs) if outputs else None  # several outputs: a tuple
    mutated = [index[name] for name in spec.mutated]
    written = _picker(mutated)  # a tuple, as _bump takes it
    shapes = {o.param.name: o for o in spec.outputs}
    targets: dict[Any, Any] = {}

    def find(device: torch.device) -> Any:
        if device.type not in _DEVICE_TYPES:
            raise ArgumentError(f"{spec.name}: tensors on {device}: ptxbridge ops run on cpu and cuda "
                                "tensors")
        key = "cpu" if device.type == "cpu" else f"cuda:{device.index or 0}"
        found = targets[device] = target(modules.get(key))
        return found

    def explain(values: list, exc: Exception) -> NoReturn:
        """A rule raised while filling ``values``: evaluate the one that failed again by name, which
        raises the error naming it (rules are pure); anything else is re-raised as it is."""
        named = dict(zip(names, values, strict=False))
        failed = names[len(values)] if len(values) < len(names) else None
        if failed is None and fn is None:
            spec.geometry(named)
        elif failed in shapes:
            spec.shape(shapes[failed], named)
        else:
            spec.derive(named, only=frozenset([failed]))
        raise exc

    def strided(args: tuple) -> Any:
        given, copies = list(args), []
        for i in contiguous:
            if not given[i].is_contiguous():
                given[i] = given[i].contiguous()
                if i in mutated:
                    copies.append((args[i], given[i]))
        found = impl(*given)
        for original, copy in copies:
            original.copy_(copy)
        if mutated:
            _bump(written(args))
        return found

    def impl(*args: Any) -> Any:
        for i in contiguous:
            if not args[i].is_contiguous():
                return strided(args)
        device = args[anchor].device
        found = targets.get(device) or find(device)
        values = [*args]
        try:
            for read in derived:
                values.append(read(values))
            if check_shapes is not None:
                check_shapes(values)
            if allocate is not None:
                allocate(values, device)
            launch = fixed if fixed is not None else geometry(values)
        except ArgumentError:
            raise
        except Exception as exc:
            explain(values, exc)
        call(found, values, launch)
        if mutated:
            _bump(written(values))
        return None if result is None else result(values)

    return impl
