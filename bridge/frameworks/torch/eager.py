"""The eager path of a :mod:`ptxbridge.torch` op: its kernel written out as Python source, once, when
the op is made.

What an eager op call does per call should cost little next to the launch, so nothing is looked up,
built or interpreted per call that could be decided when the op is made.  The rules of the op's
:class:`~ptxbridge.opspec.OpSpec` become lines of one function over local names (``v0, v1, ...``: the
op's arguments, then derived values, then outputs): a ``"numel x"`` rule is ``v0.numel()``, an output
"like x" is ``empty_like(v0)``, constant rules are evaluated once, a fixed geometry is a constant, the
launch is spelled out (no argument tuple or keyword dict built per call), and the launch target (the
:class:`~ptxbridge.launch.module.Kernel`, or the module a launcher function gets) is looked up once per
``torch.device``.  Per call that leaves: the launch target, the contiguity checks, the derived values,
the ``shapes=`` checks, the output allocations, the launch, and the version-counter bump of mutated
tensors (what torch's autograd would otherwise do).

The same lines make two functions: ``impl``, the kernel torch's dispatcher calls, and the op's direct
call (:mod:`ptxbridge.torch.direct`), which runs them behind the test that the dispatcher would only
have called ``impl``, and goes through the dispatcher otherwise.

A raw pointer or slice takes contiguous memory: a strided argument runs on a contiguous copy, copied
back when the kernel writes it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

import torch

from ptxbridge.abi.errors import ArgumentError
from ptxbridge.opspec import (
    Modules,
    OpSpec,
    OutputRule,
    Rule,
    as_shape,
    check_shape,
    contiguous_only,
    element_type,
)
from ptxbridge.torch.direct import CONTEXT_NAMES, CONTEXT_TEST, argument_test

__all__ = ["eager_kernels"]

_DEVICE_TYPES = ("cpu", "cuda")
# torch.autograd.graph.increment_version is this call behind an isinstance test (torch >= 2.9): called
# directly with a tuple it costs half as much per op call
_bump = getattr(torch._C, "_increment_version", torch.autograd.graph.increment_version)


class _Source:
    """The lines of an op's eager kernel and the names they use (rules, constants, helpers)."""

    def __init__(self, spec: OpSpec):
        self.spec = spec
        names = [p.name for p in spec.inputs] + [n for n, _ in spec.derived]
        names += [o.param.name for o in spec.outputs]
        self.names = names
        self.local = {name: f"v{i}" for i, name in enumerate(names)}
        self.namespace: dict[str, Any] = {}

    def bind(self, value: Any) -> str:
        """A name for ``value`` in the generated source."""
        name = f"k{len(self.namespace)}"
        self.namespace[name] = value
        return name

    def rule(self, rule: Rule) -> str:
        """``rule`` as an expression over the local names."""
        if rule.constant:
            return self.bind(rule.call())
        reads = [self.local[name] for name in rule.reads]
        if rule.form == "numel":  # torch answers this faster itself than through .shape
            return f"{reads[0]}.numel()"
        return f"{self.bind(rule.call)}({', '.join(reads)})"

    def tuple_of(self, names: list[str]) -> str:
        return f"({', '.join(self.local[name] for name in names)},)" if names else "()"


def _dtype_of_like(spec: OpSpec, output: OutputRule) -> bool:
    """Whether an output "like x" has x's dtype whenever the launch accepts x: untyped, or typed as
    x's parameter and after it in the signature (so a wrong x is what the launch names first)."""
    if output.dtype is None:
        return True
    params = [p.name for p in spec.signature.params]
    at = params.index(output.like)
    x = spec.signature.params[at]
    return element_type(x.type) == output.dtype and at < params.index(output.param.name)


def _output_lines(source: _Source, anchor: str, contiguous: frozenset[str],
                  to_torch: Mapping[Any, Any]) -> list[str]:
    """Each output allocated from its rule: ``empty_like`` where the rule is "like x" (cheaper than
    ``torch.empty`` with a shape, dtype and device); with no keywords at all where x is known
    contiguous by then (``contiguous``) and has the output's dtype, which torch parses faster still."""
    spec, lines = source.spec, []
    for output in spec.outputs:
        dt = None if output.dtype is None else to_torch.get(output.dtype)
        if output.dtype is not None and dt is None:
            raise ArgumentError(f"{spec.name}: output '{output.param.name}' has element type {output.dtype}, "
                                "which torch has no dtype for")
        into = source.local[output.param.name]
        if output.like is not None:
            like = source.bind(torch.zeros_like if output.zeros else torch.empty_like)
            x = source.local[output.like]
            if output.like in contiguous and _dtype_of_like(spec, output):
                lines.append(f"{into} = {like}({x})")
            else:
                lines.append(f"{into} = {like}({x}, dtype={source.bind(dt)}, "
                             f"memory_format={source.bind(torch.contiguous_format)})")
        else:
            make = source.bind(torch.zeros if output.zeros else torch.empty)
            shape = f"{source.bind(as_shape)}({source.bind(output.shape)}, {source.rule(output.shape)})"
            lines.append(f"{into} = {make}({shape}, dtype={source.bind(dt)}, device={anchor}.device)")
    return lines


def _rule_lines(source: _Source, anchor: str, contiguous: frozenset[str], launcher: bool,
                to_torch: Mapping[Any, Any]) -> tuple[list[str], str]:
    """The lines that evaluate the rules (derived values, ``shapes=`` checks, outputs, geometry) and
    the launch's geometry keywords."""
    spec, local = source.spec, source.local
    lines = [f"{local[name]} = {source.rule(rule)}" for name, rule in spec.derived]
    for name, rule in spec.shapes:
        held = source.bind(rule)
        lines.append(f"{source.bind(check_shape)}({spec.name!r}, {name!r}, {local[name]}.shape, "
                     f"{source.bind(as_shape)}({held}, {source.rule(rule)}), {held})")
    lines += _output_lines(source, anchor, contiguous, to_torch)
    if launcher:  # a launcher function has no geometry
        return lines, ""
    keywords = []
    for key, rule, default in (("grid", spec.grid, None), ("block", spec.block, None),
                               ("shared_mem", spec.shared_mem, 0)):
        if rule is None or rule.constant:
            keywords.append(f"{key}={source.bind(default if rule is None else rule.call())}")
        else:
            lines.append(f"{key} = {source.rule(rule)}")
            keywords.append(f"{key}={key}")
    return lines, ", ".join(keywords)


def eager_kernels(spec: OpSpec, modules: Modules, target: Callable[[Any], Any],
                  fn: Callable[..., None] | None, anchor: int, to_torch: Mapping[Any, Any],
                  kinds: Sequence[str]) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The op's kernel for CPU and CUDA tensors, ``impl(*args)`` with the op's arguments in order, and
    its direct call ``call(overload, *args)``, which skips torch's dispatcher where
    :mod:`ptxbridge.torch.direct`'s tests allow (``kinds``: the arguments' schema types).

    ``target(module)`` is what runs on a device: a kernel, launched with the spec's geometry, or
    (``fn`` given) the module that ``fn(module, *kernel_args)`` launches from.  ``anchor`` is the
    argument whose device the op runs on.
    """
    source = _Source(spec)
    local = source.local
    inputs = [p.name for p in spec.inputs]
    contiguous = [p.name for p in spec.inputs if p.name in spec.tensors and contiguous_only(p.type)]
    mutated = list(spec.mutated)
    at = local[inputs[anchor]]
    rules, geometry = _rule_lines(source, at, frozenset(contiguous), fn is not None, to_torch)
    args = ", ".join(local[p.name] for p in spec.signature.params)
    launch = (f"fn(found, {args})" if fn is not None
              else f"found({args}{', ' if args else ''}{geometry})")
    outputs = [local[o.param.name] for o in spec.outputs]
    body = []
    if contiguous:
        tests = " and ".join(f"{local[name]}.is_contiguous()" for name in contiguous)
        body += [f"if not ({tests}):", f"    return strided({source.tuple_of(inputs)})"]
    if rules:
        body += ["try:", *(f"    {line}" for line in rules), "except ArgumentError:", "    raise",
                 "except Exception as exc:", f"    explain({source.tuple_of(inputs)}, exc)"]
    body.append(launch)
    if mutated:
        body.append(f"bump({source.tuple_of(mutated)})")
    body.append("return " + ("None" if not outputs else outputs[0] if len(outputs) == 1
                             else f"({', '.join(outputs)})"))
    names = ", ".join(local[name] for name in inputs)
    text = "\n".join([
        f"def impl({names}):",
        f"    found = targets.get({at}.device) or find({at}.device)",
        *(f"    {line}" for line in body),
        "",
        "def call(self, /, *args, **kwargs):",
        f"    if not kwargs and len(args) == {len(inputs)} and {CONTEXT_TEST}:",
        f"        {names}, = args",
        f"        if {argument_test(kinds, [local[n] for n in inputs])}:",
        f"            found = targets.get({at}.device)",
        "            if found is not None:",
        *(f"                {line}" for line in body),
        "    return self._op(*args, **kwargs)",
        ""])
    targets: dict[Any, Any] = {}

    def find(device: torch.device) -> Any:
        if device.type not in _DEVICE_TYPES:
            raise ArgumentError(f"{spec.name}: tensors on {device}: ptxbridge ops run on cpu and cuda "
                                "tensors")
        key = "cpu" if device.type == "cpu" else f"cuda:{device.index or 0}"
        found = targets[device] = target(modules.get(key))
        return found

    def explain(args: tuple, exc: Exception) -> NoReturn:
        """A rule raised: evaluate the rules again by name, in order, which raises the error naming the
        one that failed (rules are pure); anything else (an allocation) is re-raised as it is."""
        named = dict(zip(inputs, args, strict=True))
        spec.derive(named)
        spec.check_shapes(named)
        for output in spec.outputs:
            spec.shape(output, named)
        if fn is None:
            spec.geometry(named)
        raise exc

    def strided(args: tuple) -> Any:
        given, copies = list(args), []
        for i, name in enumerate(inputs):
            if name in contiguous and not given[i].is_contiguous():
                given[i] = given[i].contiguous()
                if name in mutated:
                    copies.append((args[i], given[i]))
        found = namespace["impl"](*given)
        for original, copy in copies:
            original.copy_(copy)
        if mutated:
            _bump(tuple(args[inputs.index(name)] for name in mutated))
        return found

    namespace = {**source.namespace, **CONTEXT_NAMES, "targets": targets, "find": find, "explain": explain,
                 "strided": strided, "bump": _bump, "fn": fn, "ArgumentError": ArgumentError}
    exec(compile(text, f"<ptxbridge.torch eager kernel of {spec.name}>", "exec"), namespace)
    return namespace["impl"], namespace["call"]
