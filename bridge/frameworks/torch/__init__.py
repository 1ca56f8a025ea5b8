"""Bridged kernels as PyTorch custom ops: traced by ``torch.compile``, kept by ``torch.export``.

:func:`op` turns one kernel, and :func:`function` a short Python function launching several
bridged kernels, into a ``torch.library`` custom op (its ``OpOverload``,
``torch.ops.<namespace>.<name>.default``: call it).  The op's schema comes from the kernel's
signature (:mod:`ptxbridge.opspec`): tensors the kernel may write are declared mutated
(``Tensor(a!)``), outputs are allocated from their shape rule, and the fake implementation
allocates from the same rule, so ``torch.compile(fullgraph=True)`` traces through the op without
a graph break.  The eager path is :mod:`ptxbridge.torch.eager`.

Per call the op launches on the tensors' device: CUDA tensors on torch's current stream (so
CUDA graph capture and ``mode="reduce-overhead"`` record the launch), CPU tensors on ptxbridge's
CPU PTX interpreter.  The image is loaded on a device the first time the op meets it; under
manual ``torch.cuda.graph`` capture, call the op once before capturing (as torch advises for
any warm-up), since a module load is not a stream operation.

A numba kernel compiled with ``debug=True`` raises :class:`~ptxbridge.KernelRaisedError` from the
op call, eager or compiled; ``mode="reduce-overhead"`` leaves such an op out of its CUDA graphs and
a manual capture of it is refused (docs/frameworks.md).

Modules: ``eager`` (the op's eager kernel: checks, allocations, the launch), ``direct`` (when a
call may skip torch's dispatcher), ``sharding`` (``sharding_rule=``: the op's DTensor sharding
strategies).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from ptxbridge.abi.dtypes import KDL_COMPLEX
from ptxbridge.abi.errors import ArgumentError
from ptxbridge.abi.signature import Signature
from ptxbridge.abi.syntax import format_type
from ptxbridge.artifacts.image import Image
from ptxbridge.launch.dlpack import torch_dtype_map
from ptxbridge.launch.module import Module
from ptxbridge.opspec import Modules, OpSpec, Output, element_type, kernel_op, op_spec
from ptxbridge.opspec.sharding import sharding_rule as parse_rule
from ptxbridge.torch.direct import call_directly
from ptxbridge.torch.eager import eager_kernels
from ptxbridge.torch.sharding import dtensor_strategies

__all__ = ["Output", "function", "op", "schema"]

_TO_TORCH = {dt: t for t, dt in torch_dtype_map(torch).items()}
_LIBRARIES: dict[str, torch.library.Library] = {}  # every op's registrations, kept for the process


def op(source: Image | Module, kernel: str, *, grid: Any, block: Any = None, shared_mem: Any = None,
       outputs: Mapping[str, Any] | None = None, derived: Mapping[str, Any] | None = None,
       read_only: Sequence[str] = (), shapes: Mapping[str, Any] | None = None, name: str | None = None,
       backward: Callable[..., Mapping[str, Any]] | None = None, sharding_rule: str | None = None,
       need_replication_factors: Sequence[str] = ()) -> Any:
    """Kernel ``kernel`` of ``source`` as a torch custom op.

    Parameters
    ----------
    source
        A linked :class:`~ptxbridge.Image` or a loaded :class:`~ptxbridge.Module` (which serves
        its own device; other devices load its image on first use).
    kernel
        The kernel's name in the image.
    grid, block, shared_mem
        Launch geometry: an int / tuple, or a callable of named op values, e.g.
        ``grid=lambda n: -(-n // 256)``.  ``block=None`` takes the kernel's ``.reqntid``.
    outputs
        Parameters the op allocates and returns, with their shape rule: ``{"y": "like x"}``,
        ``"zeros like x"``, or an :class:`Output`.
    derived
        Parameters computed per call instead of passed: ``{"n": "numel x"}``, ``"len x"``, a
        callable of named arguments, or a constant (structs as dicts).
    read_only
        Tensor arguments the kernel only reads although its signature lets it write them (numba
        arrays): your promise, which keeps them out of ``mutates_args``.
    shapes
        The shape a tensor argument must have: ``{"b": "like a"}``, a tuple of ints, or a callable
        of named values.  Checked before every launch and while tracing; a raw pointer carries no
        length, so this is what keeps a short tensor from being read past its end.
    name
        ``"namespace::name"``; default ``"ptxbridge::<kernel>"``.
    backward
        Makes the op differentiable: ``backward(*grads, **values) -> {input name: grad}``, called
        with one gradient per output and every argument and output by name; build it from other
        bridged ops.
    sharding_rule, need_replication_factors
        The op on DTensors (:mod:`ptxbridge.torch.sharding`): ``"b n, n -> b n"`` names a factor per
        dimension of each tensor argument and each tensor the kernel writes (as
        :func:`ptxbridge.jax.op`'s); factors in ``need_replication_factors`` are never sharded.

    Returns
    -------
    torch._ops.OpOverload
        ``torch.ops.<namespace>.<name>.default``; call it with the op's arguments (the kernel's
        parameters in order, less outputs and derived ones); returns the output (a tuple for
        several, None for none).

    Raises
    ------
    ArgumentError
        A rule names an unknown parameter, a parameter cannot be an op argument, or the name is
        taken; when called: an argument breaks a rule (dtype, ``shapes=``).
    """
    modules, spec = kernel_op(source, kernel, outputs=outputs, derived=derived, read_only=read_only,
                              grid=grid, block=block, shared_mem=shared_mem, shapes=shapes)

    if need_replication_factors and sharding_rule is None:
        raise ArgumentError(f"{spec.name}: need_replication_factors needs a sharding_rule")
    dtensor = None if sharding_rule is None else dtensor_strategies(
        spec, parse_rule(spec.name, sharding_rule, need_replication_factors, spec.arrays, spec.written))
    found = _custom_op(spec, modules, name or f"ptxbridge::{kernel}", lambda module: module[kernel], None,
                       backward)
    if dtensor is not None:
        dtensor(found)
    return found


def function(source: Image | Module, signature: str | Signature, *, outputs: Mapping[str, Any] | None = None,
             derived: Mapping[str, Any] | None = None, read_only: Sequence[str] = (),
             shapes: Mapping[str, Any] | None = None, name: str | None = None,
             backward: Callable[..., Mapping[str, Any]] | None = None) -> Callable[[Callable], Any]:
    """Decorator: a Python function launching bridged kernels, as one torch custom op.

    ``signature`` (text as in ``docs/signature-syntax.md``, e.g.
    ``"kernel step(x: *const f32, out: *mut f32, n: u32)"``) says what the function reads and
    writes, as a kernel's would; ``outputs``, ``derived``, ``read_only``, ``shapes``, ``name`` and
    ``backward`` are as in :func:`op`.  The function is called as ``fn(kernels, *values)``: ``kernels`` is
    ``source`` loaded on the tensors' device, ``values`` every signature parameter in order.
    """
    parsed = Signature.parse(signature) if isinstance(signature, str) else signature
    spec = op_spec(parsed, outputs=outputs, derived=derived, read_only=read_only, shapes=shapes)
    modules = Modules(source)

    def decorate(fn: Callable) -> Any:
        return _custom_op(spec, modules, name or f"ptxbridge::{parsed.name}", lambda module: module, fn,
                          backward)

    return decorate


def schema(spec: OpSpec) -> str:
    """The torch schema of an op: ``(Tensor x, Tensor(a!) y, float a, SymInt n) -> Tensor``."""
    parts = []
    for index, (param, kind) in enumerate(zip(spec.inputs, _kinds(spec), strict=True)):
        if not param.name.isidentifier():
            raise ArgumentError(f"{spec.name}: parameter name {param.name!r} cannot be a torch schema "
                                "argument")
        if param.name in spec.mutated:
            kind = f"Tensor(a{index}!)"
        parts.append(f"{kind} {param.name}")
    count = len(spec.outputs)
    returns = "()" if count == 0 else "Tensor" if count == 1 else f"({', '.join(['Tensor'] * count)})"
    return f"({', '.join(parts)}) -> {returns}"


def _kinds(spec: OpSpec) -> list[str]:
    """Each op argument's schema type, alias annotations left out: ``Tensor``, ``SymInt``, ``float``, ..."""
    kinds = []
    for param in spec.inputs:
        if param.name in spec.tensors:
            kinds.append("Tensor")
        else:
            dt = param.type.dtype
            kinds.append("bool" if dt.name == "bool" else "SymInt" if dt.is_integer
                         else "complex" if dt.code == KDL_COMPLEX else "float")
    return kinds


def _check_dtypes(spec: OpSpec, values: Mapping[str, Any]) -> None:
    """Dtype errors while faking outside Dynamo (make_fx, meta), in the call path's words (the binders
    check again per launch)."""
    for param in spec.inputs:
        value = values[param.name]
        if param.name in spec.tensors and isinstance(value, torch.Tensor):
            want = element_type(param.type)
            if want is not None and _TO_TORCH.get(want) is not value.dtype:
                raise ArgumentError(f"{spec.name}: argument '{param.name}' ({format_type(param.type)}) got "
                                    f"{str(value.dtype).removeprefix('torch.')} tensor; expected "
                                    f"{want.numpy_name or want.name}")


def _fake_outputs(spec: OpSpec, values: dict[str, Any], device: torch.device) -> Any:
    """The outputs' fake tensors: the same rules as the eager path's, contiguous like its outputs."""
    outs = []
    for output in spec.outputs:
        # an element type torch lacks was refused when the op was made (torch_call's allocator)
        dt = _TO_TORCH[output.dtype] if output.dtype is not None else values[output.like].dtype
        outs.append(torch.empty(spec.shape(output, values), dtype=dt, device=device))
    return None if not outs else outs[0] if len(outs) == 1 else tuple(outs)


def _custom_op(spec: OpSpec, modules: Modules, name: str, target: Callable[[Module], Any],
               fn: Callable[..., None] | None, backward: Callable[..., Mapping[str, Any]] | None) -> Any:
    """Define the op with ``torch.library``'s low-level API and register its kernels.

    Not ``torch.library.custom_op``: its Python wrappers (an autograd function even without a
    backward, a mutation re-check, a version bump and a re-dispatch per layer) cost an eager call
    several times the launch.  Here torch's dispatcher goes straight to the eager kernel
    (``CompositeExplicitAutograd``: CPU, CUDA, and a clear error elsewhere), and a plain eager call
    skips even that (:mod:`ptxbridge.torch.direct`: the overload's own ``__call__`` runs the same
    kernel where the dispatcher would only have called it); the fake kernel serves
    FakeTensor and meta; an op without ``backward`` takes torch's C++ autograd fallback (its
    outputs carry a node that warns if a backward pass reaches it); ``backward`` registers an
    autograd kernel.  An op launching numba kernels compiled with ``debug=True`` is tagged
    ``cudagraph_unsafe``: inductor runs it outside its CUDA graphs, where the exception flag can be read.
    """
    names = [p.name for p in spec.inputs]
    anchor = next((i for i, p in enumerate(spec.inputs) if p.name in spec.tensors), None)
    if anchor is None:
        raise ArgumentError(f"{spec.name}: a torch op needs at least one tensor argument to know its device")
    if backward is not None:
        spec.check_backward()
    impl, direct = eager_kernels(spec, modules, target, fn, anchor, _TO_TORCH, _kinds(spec))
    debug = modules.debug if fn is not None else modules.debug & {spec.name}  # flags read after each launch
    tags = (torch.Tag.pt2_compliant_tag, *((torch.Tag.cudagraph_unsafe,) if debug else ()))

    def fake(*args: Any) -> Any:
        values = dict(zip(names, args, strict=True))
        if not torch.compiler.is_compiling():
            # Dynamo turns an error raised here into a graph break (``Unsupported: TypeError when making
            # fake tensor call``, logged at length, the message buried); while it traces, the launch's
            # own check raises the ArgumentError when the compiled graph runs
            _check_dtypes(spec, values)
        spec.derive(values, only=spec.shape_reads)
        spec.check_shapes(values)
        return _fake_outputs(spec, values, args[anchor].device)

    namespace, _, opname = name.partition("::")
    if namespace and opname and hasattr(getattr(torch.ops, namespace), opname):
        # torch would silently re-point the existing op
        raise ArgumentError(f"{spec.name}: the op name {name!r} is taken in this process; pass "
                            "name='namespace::unique_name'")
    try:
        if not (namespace.isidentifier() and opname.isidentifier()):
            raise ValueError("expected 'namespace::name', both Python identifiers")
        library = torch.library.Library(namespace, "FRAGMENT")
        library.define(opname + schema(spec), tags=tags)
    except (RuntimeError, ValueError) as exc:
        raise ArgumentError(f"{spec.name}: torch refused the op name {name!r} ({exc}); pass "
                            "name='namespace::unique_name'") from None
    _LIBRARIES[name] = library  # a Library deregisters its op when it is collected
    library.impl(opname, impl, "CompositeExplicitAutograd")
    torch.library.register_fake(name, fake, lib=library)
    if backward is not None:
        _register_backward(library, name, spec, backward)
    overload = getattr(getattr(torch.ops, namespace), opname).default
    call_directly(overload, direct)
    return overload


def _register_backward(library: Any, name: str, spec: OpSpec,
                       backward: Callable[..., Mapping[str, Any]]) -> None:
    names = [p.name for p in spec.inputs]
    out_names = [o.param.name for o in spec.outputs]

    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        outs = output if isinstance(output, tuple) else (output,)
        named = dict(zip(names, inputs, strict=True)) | dict(zip(out_names, outs, strict=True))
        tensors = [k for k, v in named.items() if isinstance(v, torch.Tensor)]
        ctx.ptxbridge_tensors = tensors
        ctx.ptxbridge_values = {k: v for k, v in named.items() if k not in tensors}
        ctx.save_for_backward(*(named[k] for k in tensors))

    def run_backward(ctx: Any, *grads: Any) -> tuple:
        saved = dict(zip(ctx.ptxbridge_tensors, ctx.saved_tensors, strict=True)) | ctx.ptxbridge_values
        found = spec.gradients(backward(*grads, **saved))
        return tuple(found.get(n) for n in names)

    torch.library.register_autograd(name, run_backward, setup_context=setup_context, lib=library)
