"""A kernel as a framework op: which parameters are op arguments, outputs or derived, decided once.

:mod:`ptxbridge.torch` and :mod:`ptxbridge.jax` turn a kernel into a ``torch.library`` custom op or
a ``jax.jit``-able function.  Both need the same facts, computed here from the kernel's
:class:`~ptxbridge.abi.Signature` and the rules the user states once:

============== ==========================================================================
parameter      becomes
============== ==========================================================================
``outputs``    a result, allocated from its shape rule (``"like x"``, ``"zeros like x"``,
               an :class:`Output`); the same rule gives torch's fake tensor and JAX's
               result shape
``derived``    not an argument: a value computed from the arguments (``"numel x"``,
               ``"len x"``, a callable of named arguments, or a constant); constants of
               cuTile kernels are derived automatically
``shapes``     a tensor argument's required shape (``"like x"``, a tuple of ints, a callable
               of named values), checked before every launch and while tracing: a raw
               pointer carries no length, so only this stops a short tensor from being
               read past its end
other tensor   an argument; *mutated* when the kernel may write it (the access trait,
               :func:`ptxbridge.abi.memory_access.access`)
other scalar   an argument (torch ``int`` / ``float`` / ``bool`` / ``complex``)
============== ==========================================================================

A callable rule names what it reads by its parameter names, e.g. ``grid=lambda n: -(-n // 256)``;
it gets the framework's own values (torch tensors, JAX arrays or tracers: read ``.shape``).

Modules: ``sharding`` (an op's ``sharding_rule``, parsed and checked for both frameworks).
"""

from __future__ import annotations

import functools
import inspect
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ptxbridge.abi.dtypes import DType, dtype
from ptxbridge.abi.errors import ArgumentError
from ptxbridge.abi.kind_entries import KINDS
from ptxbridge.abi.kinds import Constant, ParamType
from ptxbridge.abi.memory_access import access
from ptxbridge.abi.params import Convention
from ptxbridge.abi.signature import Param, Signature
from ptxbridge.abi.syntax import format_type
from ptxbridge.artifacts.image import Image
from ptxbridge.launch.module import Module
from ptxbridge.launch.raised import debug_kernels

__all__ = ["Modules", "OpSpec", "Output", "Rule", "as_shape", "contiguous_only", "element_type", "kernel_op",
           "op_spec", "shape_numel"]


def _family(t: ParamType, convention: Convention) -> str:
    """The call path's binding family of ``t`` (``tensor``, ``scalar``, ``by-value``...)."""
    return KINDS.entry_of(t).binding(t, convention)


def element_type(t: ParamType) -> DType | None:
    """The element type a tensor parameter demands, or None (``*mut void``)."""
    rule = KINDS.entry_of(t).tensor
    return None if rule is None else rule.dtype(t)


def contiguous_only(t: ParamType) -> bool:
    """Whether a tensor parameter takes only C-contiguous memory (raw pointers, slices)."""
    rule = KINDS.entry_of(t).tensor
    return rule is not None and rule.contiguous(t) is not None


def shape_numel(shape: Sequence[Any]) -> Any:
    """The element count of ``shape`` (works on torch SymInts too)."""
    return math.prod(shape, start=1)


@dataclass(frozen=True, slots=True)
class Rule:
    """A value computed from the op's named values: ``compute(values)``; ``reads`` its names.

    ``call`` is the rule as a function of the values it reads, positionally in ``reads`` order,
    so a per-call path can evaluate it without building a dict; ``constant`` marks a rule that
    reads nothing and returns a fixed value (worked out once, not per call); ``form`` names a text
    rule's form (``"numel"``, ``"len"``, ``"like"``), which a framework may compute its own way.
    """

    text: str
    reads: tuple[str, ...]
    call: Callable[..., Any]
    constant: bool = False
    form: str | None = None

    def compute(self, values: Mapping[str, Any]) -> Any:
        return self.call(*[values[n] for n in self.reads])

    def failed(self, exc: Exception) -> ArgumentError:
        """The error for this rule raising ``exc`` (a rule is user code: say which one failed)."""
        return ArgumentError(f"{self.text} failed: {type(exc).__name__}: {exc}")


@dataclass(frozen=True, slots=True)
class Output:
    """How to allocate one output parameter.

    Parameters
    ----------
    shape
        ``"like x"`` (the shape of argument ``x``), a callable of named arguments returning a
        shape, or a tuple of ints.
    zeros
        Fill with zeros (for kernels that accumulate, e.g. with atomics); default uninitialized.
    dtype
        Element type name (``"f32"``); default: the parameter's (``*mut f32``), else that of
        the ``like`` argument.
    """

    shape: Any
    zeros: bool = False
    dtype: str | None = None


@dataclass(frozen=True, slots=True)
class OutputRule:
    """An :class:`Output` resolved against the signature."""

    param: Param
    shape: Rule
    zeros: bool
    dtype: DType | None
    like: str | None  # the argument whose dtype (and device) an untyped output takes


def _callable_rule(what: str, fn: Callable, known: Sequence[str]) -> Rule:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        raise ArgumentError(f"{what}: a rule must be a Python callable with named parameters "
                            f"(got {fn!r})") from None
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return Rule(f"{what} {fn!r}", tuple(known), _by_keyword(fn, tuple(known)))
    reads_list = []
    for p in parameters:
        if p.kind in (p.VAR_POSITIONAL, p.POSITIONAL_ONLY):
            raise ArgumentError(f"{what}: a rule reads values by parameter name; *args and "
                                f"positional-only parameters cannot be named (got {fn!r})")
        if p.name in known:
            reads_list.append(p.name)
        elif p.default is p.empty:
            raise ArgumentError(f"{what}: the rule reads {p.name!r}, which is not among the values it "
                                f"can see ({', '.join(known) or 'none'})")
    reads = tuple(reads_list)
    leading = [p.name for p in parameters][:len(reads)]
    positional = leading == list(reads) and all(p.kind is p.POSITIONAL_OR_KEYWORD
                                                for p in parameters if p.name in reads)
    return Rule(f"{what} {fn!r}", reads, fn if positional else _by_keyword(fn, reads))


def _by_keyword(fn: Callable, reads: tuple[str, ...]) -> Callable[..., Any]:
    """``fn`` called with ``reads`` by name (a rule whose read parameters are not its leading ones)."""
    return lambda *found: fn(**dict(zip(reads, found, strict=True)))


def _text_rule(what: str, text: str, forms: Mapping[str, Callable[[Any], Any]],
               known: Sequence[str]) -> Rule:
    words = text.split()
    if len(words) != 2 or words[0] not in forms:
        choices = " or ".join(f"'{form} NAME'" for form in forms)
        raise ArgumentError(f"{what}: a text rule is {choices} (got {text!r})")
    form, name = words
    if name not in known:
        raise ArgumentError(f"{what}: {text!r} reads {name!r}, which is not among the values it can see "
                            f"({', '.join(known) or 'none'})")
    return Rule(f"{what} {text!r}", (name,), forms[form], form=form)


def _rule(what: str, spec: Any, known: Sequence[str]) -> Rule:
    """A :class:`Rule` from a callable or a constant (geometry, derived values)."""
    if callable(spec) and not isinstance(spec, type):
        return _callable_rule(what, spec, known)
    return Rule(f"{what} {spec!r}", (), lambda: spec, constant=True)


_DERIVED_FORMS: dict[str, Callable[[Any], Any]] = {
    "numel": lambda x: shape_numel(x.shape),
    "len": lambda x: x.shape[0],
}


def _derived_rule(what: str, spec: Any, known: Sequence[str]) -> Rule:
    if isinstance(spec, str):
        return _text_rule(what, spec, _DERIVED_FORMS, known)
    return _rule(what, spec, known)


def _shape_rule(what: str, spec: Any, tensors: Sequence[str], known: Sequence[str]) -> Rule:
    """A shape: ``"like x"`` (tensor argument ``x``'s), a tuple of ints, or a callable of named values."""
    if isinstance(spec, str):
        return _text_rule(what, spec, {"like": lambda x: tuple(x.shape)}, tensors)
    if isinstance(spec, tuple) and all(isinstance(n, int) and n >= 0 for n in spec):
        return Rule(f"{what} {spec!r}", (), lambda: spec, constant=True)
    if callable(spec):
        return _callable_rule(what, spec, known)
    raise ArgumentError(f"{what}: the shape is 'like NAME', a callable or a tuple of ints (got {spec!r})")


def _output_rule(kernel: str, param: Param, spec: Any, tensors: Sequence[str],
                 known: Sequence[str]) -> OutputRule:
    what = f"{kernel}: output '{param.name}'"
    if isinstance(spec, str):
        words = spec.split()
        zeros = words[:1] == ["zeros"]
        spec = Output(" ".join(words[1:]) if zeros else spec, zeros=zeros)
    if not isinstance(spec, Output):
        spec = Output(spec)
    shape = _shape_rule(what, spec.shape, tensors, known)
    like = shape.reads[0] if shape.form == "like" else None
    try:
        dt = dtype(spec.dtype) if spec.dtype is not None else element_type(param.type)
    except ValueError as exc:
        raise ArgumentError(f"{what}: {exc}") from None
    if dt is None and like is None:
        raise ArgumentError(f"{what}: {format_type(param.type)} has no element type; give "
                            "Output(..., dtype='f32') or a 'like NAME' shape")
    return OutputRule(param, shape, spec.zeros, dt, like)


@dataclass(frozen=True, slots=True)
class OpSpec:
    """One kernel (or launcher function) as a framework op.

    ``inputs`` are the op's arguments in signature order; ``outputs`` the allocated results;
    ``derived`` values computed per call; ``tensors`` the parameters that take one tensor;
    ``mutated`` the tensor inputs the kernel may write; ``shapes`` the shapes tensor arguments
    must have.
    """

    signature: Signature
    inputs: tuple[Param, ...]
    tensors: frozenset[str]
    outputs: tuple[OutputRule, ...]
    derived: tuple[tuple[str, Rule], ...]
    mutated: tuple[str, ...]
    grid: Rule | None
    block: Rule | None
    shared_mem: Rule | None
    shapes: tuple[tuple[str, Rule], ...] = ()

    @property
    def name(self) -> str:
        return self.signature.name

    def bind(self, args: tuple, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The op's arguments by name, from a call's positional and keyword arguments."""
        names = [p.name for p in self.inputs]
        if len(args) > len(names):
            raise ArgumentError(f"{self.name}: takes {len(names)} arguments ({', '.join(names)}) "
                                f"(got {len(args)})")
        values = dict(zip(names, args, strict=False))
        for key, value in kwargs.items():
            if key not in names:
                raise ArgumentError(f"{self.name}: no argument {key!r} (arguments: {', '.join(names)})")
            if key in values:
                raise ArgumentError(f"{self.name}: argument {key!r} given twice")
            values[key] = value
        missing = [n for n in names if n not in values]
        if missing:
            raise ArgumentError(f"{self.name}: missing argument(s) {', '.join(missing)}")
        return values

    def derive(self, values: dict[str, Any], only: frozenset[str] | None = None) -> None:
        """Add the derived values (those in ``only``, when given) to ``values``."""
        for name, found in self.derived:
            if only is None or name in only:
                values[name] = _run(found, values)

    def check_shapes(self, values: Mapping[str, Any]) -> None:
        """Raise when a tensor argument's shape is not the one ``shapes=`` requires (``values``
        holds the arguments and the derived values the rules read)."""
        for name, rule in self.shapes:
            check_shape(self.name, name, values[name].shape, as_shape(rule, _run(rule, values)), rule)

    def shape(self, output: OutputRule, values: Mapping[str, Any]) -> tuple:
        """The shape of ``output`` for these argument values."""
        return as_shape(output.shape, _run(output.shape, values))

    def geometry(self, values: Mapping[str, Any]) -> tuple[Any, Any, int]:
        """``(grid, block, shared_mem)`` for these values (block None: the kernel's ``.reqntid``)."""
        if self.grid is None:
            raise ArgumentError(f"{self.name}: the op launches no kernel itself (it has no grid rule)")
        block = None if self.block is None else _run(self.block, values)
        shared_mem = 0 if self.shared_mem is None else _run(self.shared_mem, values)
        return _run(self.grid, values), block, shared_mem

    @property
    def written(self) -> tuple[str, ...]:
        """Every tensor the kernel writes, outputs and mutated arguments, in signature order (a
        JAX op's results; the results of a ``sharding_rule``)."""
        outs = {o.param.name for o in self.outputs}
        return tuple(p.name for p in self.signature.params if p.name in self.mutated or p.name in outs)

    @property
    def arrays(self) -> tuple[str, ...]:
        """The tensor arguments, in signature order (the operands of a ``sharding_rule``)."""
        return tuple(p.name for p in self.inputs if p.name in self.tensors)

    @property
    def shape_reads(self) -> frozenset[str]:
        """The derived values a shape rule reads (a fake / abstract evaluation needs only these)."""
        rules = [o.shape for o in self.outputs] + [rule for _, rule in self.shapes]
        return frozenset(n for rule in rules for n in rule.reads)

    def check_backward(self) -> None:
        """Refuse ``backward=`` on an op whose gradients would have no place to go.

        A mutated argument is both an input and a result under one name, so neither torch's
        autograd nor a ``backward(**values)`` call can tell the two apart; an op without outputs
        has nothing to differentiate.
        """
        if self.mutated or not self.outputs:
            mutates = ", ".join(self.mutated) or "nothing"
            raise ArgumentError(f"{self.name}: backward= needs an op that returns outputs and mutates no "
                                f"argument (it mutates {mutates}); declare written tensors as outputs= "
                                "(and tensors the kernel only reads in read_only=)")

    def gradients(self, found: Any) -> Mapping[str, Any]:
        """``found``, a backward's result, checked: a dict from tensor argument names to gradients."""
        differentiable = {p.name for p in self.inputs if p.name in self.tensors}
        if not isinstance(found, Mapping) or not set(found) <= differentiable:
            raise ArgumentError(f"{self.name}: backward must return a dict from tensor argument names "
                                f"({', '.join(sorted(differentiable))}) to gradients (got {found!r})")
        return found


def check_shape(kernel: str, name: str, shape: Sequence[Any], expected: tuple, rule: Rule) -> None:
    """Raise the error for argument ``name`` of shape ``shape`` when it is not ``expected``."""
    if tuple(shape) != expected:
        raise ArgumentError(f"{kernel}: argument '{name}' has shape {tuple(shape)}; {rule.text} requires "
                            f"{expected}")


def as_shape(rule: Rule, found: Any) -> tuple:
    """``found``, what shape rule ``rule`` returned, as a tuple."""
    try:
        return tuple(found)
    except TypeError:
        raise ArgumentError(f"{rule.text}: a shape rule returns a sequence of ints (got {found!r})") from None


def _run(found: Rule, values: Mapping[str, Any]) -> Any:
    try:
        return found.compute(values)
    except ArgumentError:
        raise
    except Exception as exc:
        raise found.failed(exc) from exc


def op_spec(signature: Signature, *, outputs: Mapping[str, Any] | None = None,
            derived: Mapping[str, Any] | None = None, read_only: Sequence[str] = (), grid: Any = None,
            block: Any = None, shared_mem: Any = None, shapes: Mapping[str, Any] | None = None) -> OpSpec:
    """Check the rules against ``signature`` and resolve them (see the module docstring).

    ``read_only`` names tensor arguments the kernel only reads where its signature cannot say so
    (a numba array is writable to numba): the caller's promise, which drops them from the
    mutated arguments.
    """
    outputs, derived = dict(outputs or {}), dict(derived or {})
    kernel = signature.name
    by_name = {p.name: p for p in signature.params}
    if isinstance(read_only, str):
        read_only = (read_only,)
    for name in [*outputs, *derived, *read_only]:
        if name not in by_name:
            raise ArgumentError(f"{kernel}: no parameter {name!r} (parameters: {', '.join(by_name)})")
    both = set(outputs) & set(derived)
    if both:
        raise ArgumentError(f"{kernel}: {', '.join(sorted(both))} is both an output and derived")
    for param in signature.params:
        if isinstance(param.type, Constant) and param.name not in derived:
            derived[param.name] = param.type.value
    families = {p.name: _family(p.type, signature.convention) for p in signature.params}
    tensors = frozenset(name for name, family in families.items() if family == "tensor")
    inputs = []
    for param in signature.params:
        if param.name in outputs:
            if param.name not in tensors:
                raise ArgumentError(f"{kernel}: output '{param.name}' ({format_type(param.type)}) is not a "
                                    "tensor parameter")
        elif param.name not in derived:
            if families[param.name] not in ("tensor", "scalar"):
                raise ArgumentError(f"{kernel}: parameter '{param.name}' ({format_type(param.type)}) cannot "
                                    "be a framework op argument; give its value in derived=")
            inputs.append(param)
    input_names = [p.name for p in inputs]
    derived_rules = tuple((name, _derived_rule(f"{kernel}: derived '{name}'", spec, input_names))
                          for name, spec in derived.items())
    seen = input_names + [n for n, _ in derived_rules]
    tensor_inputs = [p.name for p in inputs if p.name in tensors]
    output_rules = tuple(_output_rule(kernel, by_name[name], spec, tensor_inputs, seen)
                         for name, spec in outputs.items())
    everything = [p.name for p in signature.params]
    for name in read_only:
        if name not in tensor_inputs:
            raise ArgumentError(f"{kernel}: read_only names '{name}', which is not a tensor argument of the "
                                "op")
    mutated = tuple(p.name for p in inputs if p.name in tensors and p.name not in read_only
                    and access(p.type, signature.convention).writes)

    def geometry(what: str, spec: Any) -> Rule | None:
        return None if spec is None else _rule(f"{kernel}: {what}", spec, everything)

    shape_rules = tuple((name, _input_shape_rule(kernel, name, rule, tensor_inputs, seen))
                        for name, rule in (shapes or {}).items())
    return OpSpec(signature, tuple(inputs), tensors, output_rules, derived_rules, mutated,
                  geometry("grid", grid), geometry("block", block), geometry("shared_mem", shared_mem),
                  shape_rules)


def _input_shape_rule(kernel: str, name: str, spec: Any, tensors: Sequence[str],
                      known: Sequence[str]) -> Rule:
    """The rule of ``shapes={name: spec}``: the shape tensor argument ``name`` must have."""
    what = f"{kernel}: shapes['{name}']"
    if name not in tensors:
        raise ArgumentError(f"{what}: '{name}' is not a tensor argument of the op (tensor arguments: "
                            f"{', '.join(tensors) or 'none'})")
    return _shape_rule(what, spec, tensors, known)


class Modules:
    """One image loaded on each device an op meets, once (``get("cpu")``, ``get("cuda:1")``).

    A :class:`~ptxbridge.Module` given at construction serves its own device; other devices load
    ``module.image`` on first use.
    """

    def __init__(self, source: Image | Module):
        if isinstance(source, Module):
            self.image, self._loaded = source.image, {source.device: source}
        elif isinstance(source, Image):
            self.image, self._loaded = source, {}
        else:
            raise ArgumentError("an op takes a linked Image or a loaded Module "
                                f"(got {type(source).__name__})")
        self._lock = threading.Lock()

    @functools.cached_property
    def debug(self) -> frozenset[str]:
        """The image's kernels compiled by numba with ``debug=True`` (:mod:`ptxbridge.launch.raised`)."""
        return debug_kernels(self.image)

    def get(self, device: str) -> Any:
        """The module on ``device`` (``"cpu"`` or ``"cuda:N"``), loaded on first use."""
        found = self._loaded.get(device)
        if found is None:
            with self._lock:
                found = self._loaded.get(device)
                if found is None:
                    found = self._loaded[device] = self.image.load(device)
        return found


def kernel_op(source: Image | Module, kernel: str, **rules: Any) -> tuple[Modules, OpSpec]:
    """``source``'s modules and the :class:`OpSpec` of its kernel ``kernel`` (rules as in :func:`op_spec`)."""
    modules = Modules(source)
    signature = modules.image.kernels.get(kernel)
    if signature is None:
        known = ", ".join(modules.image.kernels)
        raise ArgumentError(f"the image has no kernel {kernel!r} (kernels: {known})")
    return modules, op_spec(signature, **rules)
