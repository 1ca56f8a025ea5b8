"""Bridged kernels inside ``jax.jit``: one XLA FFI custom call per launch.

:func:`op` turns a kernel into a JAX function.  Its arguments are the kernel's parameters in
order, less ``outputs`` and ``derived`` ones (:mod:`ptxbridge.opspec`); it returns every tensor
the kernel writes, in signature order: the outputs, allocated from their shape rule, and the
tensors it mutates, which XLA aliases to their inputs (``input_output_aliases``), so the kernel
writes in place where XLA can give it the buffer.  Scalars are compile-time attributes (like a
static argument: pass Python numbers; a new value traces again).

Under ``jax.jit`` the call lowers to the custom call ``ptxbridge_launch`` (``_xla_ffi.c`` beside this file),
whose attributes fix the launch at trace time: the packed parameter buffer, where each buffer's
address goes, the geometry.  On a GPU it calls ``cuLaunchKernel`` on XLA's stream; on the CPU
the same handler calls back into ptxbridge's CPU PTX interpreter (:mod:`ptxbridge.jax.xla_ffi`).
Buffers arrive in the signature's order, dense and row-major.

Outside ``jax.jit`` the op runs the same way (JAX dispatches it eagerly); a plain
``module.kernel(...)`` call also takes eager JAX arrays through DLPack, read-only.

A numba kernel compiled with ``debug=True`` has its exception flag read after each CPU launch: the
handler's error carries the :class:`~ptxbridge.KernelRaisedError` text.  On a GPU the flag cannot
be read on XLA's stream, so such an op fails when XLA compiles it for the GPU
(:mod:`ptxbridge.jax.refused`).

Transformations: ``backward=`` makes the op a ``jax.custom_vjp`` whose backward is built from
other bridged ops, so ``jax.grad`` and ``jax.vjp`` work under ``jax.jit``; without it the op
is a ``jax.custom_jvp`` whose rule refuses differentiation in ptxbridge's words.  ``jax.vmap``
launches the kernel once per batch element (``vmap_method="sequential"``: a loop in the
program), every rule seeing one element's shapes.

``sharding_rule=`` lets XLA partition the op over sharded arrays, one launch per shard with no
collective (:mod:`ptxbridge.jax.sharding`).

Modules: ``xla_ffi`` (the handler's registration, attributes and CPU launches), ``_xla_ffi.c``
(the XLA FFI handler, built where jaxlib is installed), ``refused`` (the GPU branch of an op that
must not launch there), ``sharding`` (``sharding_rule=``: the op as a ``custom_partitioning``
function).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from ptxbridge.abi.devices import DLPACK_CPU
from ptxbridge.abi.dtypes import DTYPES, DType, from_numpy
from ptxbridge.abi.errors import ArgumentError
from ptxbridge.abi.kind_entries import KINDS
from ptxbridge.abi.kinds import NumbaArray
from ptxbridge.abi.syntax import format_type
from ptxbridge.abi.tensor_rules import TensorProblem
from ptxbridge.artifacts.image import Image
from ptxbridge.jax.refused import refused
from ptxbridge.jax.sharding import partitioned
from ptxbridge.jax.xla_ffi import TARGET, NoAlias, Packed, attributes, no_alias, provide, register
from ptxbridge.launch.args import BindContext, make_binder
from ptxbridge.launch.dlpack import TensorInfo
from ptxbridge.launch.module import Module, dim3
from ptxbridge.launch.raised import unreadable
from ptxbridge.opspec import Modules, OpSpec, Output, element_type, kernel_op, shape_numel
from ptxbridge.opspec.sharding import ShardingRule
from ptxbridge.opspec.sharding import sharding_rule as parse_rule

__all__ = ["JaxOp", "Output", "op", "register_image"]

_ML_DTYPES = {"bfloat16": "bf16", "float8_e4m3fn": "f8e4m3fn", "float8_e5m2": "f8e5m2"}
_TO_JAX = {v: k for k, v in _ML_DTYPES.items()}


def op(source: Image | Module, kernel: str, *, grid: Any, block: Any = None, shared_mem: Any = None,
       outputs: Mapping[str, Any] | None = None, derived: Mapping[str, Any] | None = None,
       read_only: Sequence[str] = (), shapes: Mapping[str, Any] | None = None,
       backward: Callable[..., Mapping[str, Any]] | None = None, check_aliasing: bool = True,
       sharding_rule: str | None = None, need_replication_factors: Sequence[str] = ()) -> JaxOp:
    """Kernel ``kernel`` of ``source`` as a function usable inside ``jax.jit``.

    Parameters
    ----------
    source
        A linked :class:`~ptxbridge.Image` or a loaded :class:`~ptxbridge.Module`.
    kernel
        The kernel's name in the image.
    grid, block, shared_mem
        Launch geometry: an int / tuple, or a callable of named op values (shapes are static
        under ``jax.jit``).  ``block=None`` takes the kernel's ``.reqntid``.
    outputs, derived, read_only, shapes
        As in :func:`ptxbridge.torch.op`: ``{"y": "like x"}``, ``{"n": "numel x"}``; a tensor named
        in ``read_only`` (a numba array the kernel only reads) is neither aliased nor returned;
        ``shapes={"b": "like a"}`` is checked when the op is traced.
    backward
        Makes the op differentiable (``jax.grad``, ``jax.vjp``): ``backward(*grads, **values) ->
        {argument name: gradient}``, called with one gradient per result (in the order the op
        returns them) and every argument and result by name; build it from other ptxbridge.jax
        ops.  As in :func:`ptxbridge.torch.op`, the op must return outputs and mutate nothing.
    check_aliasing
        Check the kernel's no-alias promises on the buffers XLA passes, in the handler, before
        each launch (docs/safety.md); False takes that responsibility.
    sharding_rule, need_replication_factors
        Lets XLA partition the op under ``jax.jit`` over sharded arrays, one launch per shard
        (:mod:`ptxbridge.jax.sharding`): ``"b n, n -> b n"`` names a factor per dimension of each
        array argument and each result; factors in ``need_replication_factors`` stay whole.

    Returns
    -------
    JaxOp
        ``f(*args, **kwargs)``: one array, or a tuple when the kernel writes several tensors.
    """
    modules, spec = kernel_op(source, kernel, outputs=outputs, derived=derived, read_only=read_only,
                              grid=grid, block=block, shared_mem=shared_mem, shapes=shapes)
    if backward is not None:
        spec.check_backward()
    found = JaxOp(spec, modules, backward, no_alias(spec) if check_aliasing else NoAlias())
    if sharding_rule is not None:
        found.sharding = parse_rule(spec.name, sharding_rule, need_replication_factors, found.arrays,
                                    found.written)
    elif need_replication_factors:
        raise ArgumentError(f"{spec.name}: need_replication_factors needs a sharding_rule")
    return found


def register_image(source: Image | Module) -> str:
    """Make ``source``'s image known to the handler in this process; returns its content hash.

    A program with bridged ops names each image by that hash, so a ``jax.export`` program
    deserialized in another process, or an executable from JAX's persistent compilation cache,
    runs there once the process has the image: made an op of it, or called this.
    """
    register()
    return provide(Modules(source))[0]


class JaxOp:
    """A bridged kernel as a JAX function (see :func:`op`)."""

    def __init__(self, spec: OpSpec, modules: Modules, backward: Callable[..., Mapping[str, Any]] | None,
                 promises: NoAlias):
        written = spec.written
        if not written:
            raise ArgumentError(f"{spec.name}: writes no tensor, so a JAX op of it would return nothing; "
                                "declare what it writes in outputs= or type the pointer *mut")
        self.image, modules = provide(modules)  # the handler finds the image by this content hash
        self.spec, self.modules, self.written = spec, modules, written
        self.backward, self.promises = backward, promises
        self.arrays = spec.arrays  # the call's operands
        self.sharding: ShardingRule | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        spec = self.spec
        values = spec.bind(args, kwargs)
        for param in spec.inputs:
            if param.name in spec.tensors:
                values[param.name] = jax.numpy.asarray(values[param.name])
            else:
                values[param.name] = _static(spec.name, param.name, values[param.name])
        statics = {k: v for k, v in values.items() if k not in self.arrays}
        arrays = [values[name] for name in self.arrays]
        return self._differentiable(statics, eager_device(arrays))(*arrays)

    def _differentiable(self, statics: dict[str, Any], device: Any) -> Callable[..., Any]:
        """The launch as a function of the arrays, with the op's differentiation rule and, traced,
        its sharding rule (``device``: an eager call's, None under a trace)."""
        def launch(*arrays: Any) -> Any:
            return self._launch(statics | dict(zip(self.arrays, arrays, strict=True)), device)

        if self.sharding is not None and device is None:
            launch = partitioned(self.spec.name, self.sharding, (self.arrays, self.written), launch)

        if self.backward is None:
            refusing = jax.custom_jvp(launch)
            refusing.defjvp(self._no_derivative)
            return refusing

        def forward(*arrays: Any) -> tuple[Any, Any]:
            found = launch(*arrays)
            return found, (arrays, found)

        def backward(saved: tuple, cotangent: Any) -> tuple:
            arrays, found = saved
            values = statics | dict(zip(self.arrays, arrays, strict=True))
            return self._gradients(values, found, cotangent)

        differentiable = jax.custom_vjp(launch)
        differentiable.defvjp(forward, backward)
        return differentiable

    def _no_derivative(self, primals: tuple, tangents: tuple) -> Any:
        raise ArgumentError(f"{self.spec.name}: JAX differentiates through the op, which has no derivative; "
                            "give ptxbridge.jax.op a backward= built from other bridged ops")

    def _gradients(self, values: dict[str, Any], found: Any, cotangent: Any) -> tuple:
        """The user's backward, checked: one gradient (or None, zero) per array argument."""
        results = found if isinstance(found, tuple) else (found,)
        grads = cotangent if isinstance(cotangent, tuple) else (cotangent,)
        named = values | dict(zip(self.written, results, strict=True))
        given = self.spec.gradients(self.backward(*grads, **named))
        return tuple(_gradient(self.spec.name, name, values[name], given.get(name)) for name in self.arrays)

    def _launch(self, values: dict[str, Any], device: Any) -> Any:
        """One custom call on the arrays and static values in ``values`` (on ``device``, eager)."""
        spec = self.spec
        operands = [values[name] for name in self.arrays]
        sources = {name: i for i, name in enumerate(self.arrays)}
        spec.derive(values)
        spec.check_shapes(values)
        for output in spec.outputs:
            dt = _jax_dtype(output.dtype) if output.dtype is not None else values[output.like].dtype
            shape = spec.shape(output, values)
            values[output.param.name] = jax.ShapeDtypeStruct(shape, dt)
            if output.zeros:  # XLA's results start uninitialized: a zero operand that the result aliases
                sources[output.param.name] = len(operands)
                operands.append(jax.numpy.zeros(shape, dt, device=device))
        results, aliases = [], {}
        for name in self.written:
            if name in sources:  # mutated: the result is the operand's buffer, written in place
                aliases[sources[name]] = len(results)
            sources[name] = -len(results) - 1
            results.append(jax.ShapeDtypeStruct(values[name].shape, values[name].dtype))
        packed = _pack(spec, values, sources, self.promises)
        call = jax.ffi.ffi_call(TARGET, results, input_output_aliases=aliases, vmap_method="sequential")
        register()
        branches = {"cpu": lambda *ops: call(*ops, **attributes(packed, self.image, "cpu"))}
        if spec.name in self.modules.debug:  # its exception flag cannot be read on XLA's GPU stream
            where = ("ptxbridge.jax on a GPU (the handler launches on XLA's stream, which XLA may record "
                     "into a CUDA graph)")
            instead = ("run it on the CPU, or launch it outside JAX through its loaded module "
                       f"(module.{spec.name}(...) with torch or CuPy arrays)")
            branches["cuda"] = refused(unreadable(spec.name, where, instead), results)
        elif _has_cuda():
            self._check_cuda(packed.geometry[6])
            branches["cuda"] = lambda *ops: call(*ops, **attributes(packed, self.image, "cuda"))
        platform = "cpu" if len(branches) == 1 else None if device is None else _BRANCHES.get(device.platform)
        found = (branches[platform](*operands) if platform in branches
                 else jax.lax.platform_dependent(*operands, **branches))
        return found[0] if len(found) == 1 else tuple(found)

    def _check_cuda(self, shared_mem: int) -> None:
        """Refuse, while tracing, a launch the handler cannot make on a GPU."""
        name = self.spec.name
        backend = self.modules.get("cuda:0").backend
        facts = backend.native_facts(backend.function(name), name)
        if name in backend.cooperative_kernels:
            raise ArgumentError(f"{name}: a cooperative (grid-sync) kernel cannot run inside jax.jit (the "
                                "handler launches with cuLaunchKernel)")
        if shared_mem > facts["max_shared"]:
            raise ArgumentError(f"{name}: {shared_mem} bytes of dynamic shared memory need an opt-in the "
                                "handler does not make; declare #[shared(dynamic = N)] in the signature so "
                                "the loader opts in when it loads the image")

    def __repr__(self) -> str:
        return f"<ptxbridge JAX op {self.spec.signature}>"


_BRANCHES = {"cpu": "cpu", "gpu": "cuda"}  # a JAX device's platform -> the handler branch for it


def eager_device(operands: Sequence[Any]) -> Any:
    """The one device an eager call's arrays are on, which picks its branch; None under a trace
    (jit, vmap, grad: JAX picks the branch when it lowers for a platform) or for arrays on several.

    An eager ``platform_dependent`` would take the branch of JAX's default backend, so arrays
    placed on the CPU of a GPU machine would reach the GPU handler.
    """
    if not operands or any(isinstance(o, jax.core.Tracer) for o in operands):
        return None
    devices = {d for o in operands for d in o.devices()}
    return next(iter(devices)) if len(devices) == 1 else None


@functools.cache
def _has_cuda() -> bool:
    try:
        return bool(jax.devices("cuda"))
    except RuntimeError:
        return False


def _static(kernel: str, name: str, value: Any) -> Any:
    """A scalar argument as the Python value it is compiled in as."""
    if isinstance(value, jax.core.Tracer):
        raise ArgumentError(f"{kernel}: argument '{name}' is a traced value; scalars are compiled into the "
                            "call: pass a Python number (under jax.jit mark it static_argnames; under "
                            "jax.vmap give it in_axes=None; jax.grad differentiates array arguments only)")
    return value.item() if isinstance(value, (jax.Array, np.ndarray, np.generic)) else value


def _gradient(kernel: str, name: str, primal: Any, grad: Any) -> Any:
    """``grad``, the gradient a backward gave argument ``name``, checked against the argument."""
    if grad is None:
        return None  # custom_vjp reads None as a zero cotangent
    where = f"{kernel}: backward's gradient for '{name}'"
    try:
        grad = jax.numpy.asarray(grad)
    except (TypeError, ValueError):
        raise ArgumentError(f"{where} is not an array (got {type(grad).__name__})") from None
    if not jax.numpy.issubdtype(primal.dtype, jax.numpy.inexact):
        raise ArgumentError(f"{where}: '{name}' is an array of {primal.dtype}, which takes no gradient "
                            "(leave it out of the dict)")
    if grad.shape != primal.shape or grad.dtype != primal.dtype:
        raise ArgumentError(f"{where} is {grad.dtype}{list(grad.shape)}; expected {primal.dtype}"
                            f"{list(primal.shape)}, the argument's")
    return grad


def _dtype_of(value: Any) -> DType | None:
    name = np.dtype(value.dtype).name
    return from_numpy(name) or DTYPES.get(_ML_DTYPES.get(name, ""))


def _jax_dtype(dt: DType) -> Any:
    name = _TO_JAX.get(dt.name, dt.numpy_name)
    if name is None:
        raise ArgumentError(f"element type {dt.name} has no JAX dtype")
    return jax.numpy.dtype(name)


def _tensor_values(spec: OpSpec, index: int, value: Any) -> tuple:
    """The flat values of a tensor parameter for a dense row-major buffer at address 0."""
    param = spec.signature.params[index]
    dt, want = _dtype_of(value), element_type(param.type)
    if want is not None and dt != want:
        raise ArgumentError(f"{spec.name}: argument '{param.name}' ({format_type(param.type)}) got "
                            f"{np.dtype(value.dtype).name} array; expected {want.numpy_name or want.name}")
    shape = tuple(int(n) for n in value.shape)
    steps = itertools.accumulate(reversed(shape[1:]), lambda step, n: step * max(n, 1), initial=1)
    dense = tuple(steps)[::-1] if shape else ()  # row-major strides in elements: XLA's buffers are dense
    info = TensorInfo(0, dt, np.dtype(value.dtype).name, shape, dense, DLPACK_CPU, 0, False, None)
    try:
        return KINDS.entry_of(param.type).tensor.values(info, param.type)
    except TensorProblem as problem:
        where = f"{spec.name}: argument '{param.name}' ({format_type(param.type)})"
        raise ArgumentError(f"{where} {problem}") from None


def _pack(spec: OpSpec, values: dict[str, Any], sources: Mapping[str, int], promises: NoAlias) -> Packed:
    """The launch fixed at trace time: template buffer, pointer slots, spans and geometry."""
    signature = spec.signature
    context = BindContext(spec.name, signature.convention, DLPACK_CPU, 0)
    flat: tuple = ()
    for index, param in enumerate(signature.params):
        value = values[param.name]
        if param.name in spec.tensors:
            flat += _tensor_values(spec, index, value)
            continue
        binder = make_binder(context, param, type(value))
        if binder.stateful:
            raise ArgumentError(f"{spec.name}: parameter '{param.name}' ({format_type(param.type)}) needs "
                                "scratch memory per launch, which a jax.jit call cannot upload")
        flat += binder.values(value, 0)
    layout = signature.layout
    slots, spans = [], []
    for index, param in enumerate(signature.params):
        if param.name not in spec.tensors:
            continue
        slot = param.name + ".data" if isinstance(param.type, NumbaArray) else param.name
        offset = next(p.offset for p in layout.params if p.param.source == index and p.param.name == slot)
        value = values[param.name]
        slots.append((offset, sources[param.name]))
        spans.append((shape_numel(value.shape) * np.dtype(value.dtype).itemsize, sources[param.name] < 0))
    grid, block, shared_mem = spec.geometry(values)
    grid3 = dim3(grid, "grid", spec.name)
    if block is None:
        reqntid = signature.launch.reqntid
        if reqntid is None:
            raise ArgumentError(f"{spec.name}: block= is required (the kernel declares no .reqntid)")
        block = tuple(reqntid)
    block3 = dim3(block, "block", spec.name)
    if not isinstance(shared_mem, int) or shared_mem < 0:
        raise ArgumentError(f"{spec.name}: shared_mem must be a non-negative int (got {shared_mem!r})")
    return Packed(spec.name, layout.packer().pack(flat), tuple(slots), tuple(spans),
                  (*grid3, *block3, shared_mem), promises)
