"""Loaded modules and callable kernels: the per-launch path.

``kernel(*args, grid=, block=, shared_mem=0, stream=None)`` looks up the
launch plan cached for the tuple of argument types (in C when the optional
extension is built: ``Kernel``'s base is then ``_fastlaunch.Launcher``, whose
vectorcall runs the C plan and calls ``Kernel._call_python`` for anything
else, or ``Kernel._call_keywords`` for parameters passed by name, unknown
keywords and a missing ``grid=``: :mod:`ptxbridge.launch.call_form`); a plan holds one binder
per argument (:mod:`ptxbridge.launch.args`), the packer, how to find the caller's
stream, and the loader's launch function.  Building a plan does everything
that depends only on types; a launch reads pointers, packs, and makes one
driver call.

Streams: an explicit ``stream=`` wins; otherwise torch tensors launch on
torch's current stream of their device, CuPy arrays on CuPy's current
stream, anything else on the legacy default stream.  Nothing synchronizes.

Graph capture: launches are captured like any stream work; arguments that
need scratch memory (cuTile lists, numba records) upload from pageable host
memory, which stream capture does not allow.

Lifetime: like a torch operator, a launch does not keep its tensors alive;
the producer's stream-ordered allocator keeps memory valid for work queued
on the same stream.  Free a tensor used on another stream only after that
stream is synchronized.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

import numpy

from ptxbridge.abi.cxx_names import find_symbol
from ptxbridge.abi.devices import DLPACK_CUDA
from ptxbridge.abi.errors import AbiMismatchError, ArgumentError, PtxBridgeError
from ptxbridge.abi.signature import Signature
from ptxbridge.launch.aliasing import alias_check
from ptxbridge.launch.args import BindContext, LaunchState, OtherDeviceError, make_binder
from ptxbridge.launch.call_form import LAUNCH_KEYWORDS, CallForm
from ptxbridge.launch.dlpack import default_stream_for, device_name, stream_handle
from ptxbridge.launch.fastpath import (
    _fastlaunch,
    compile_launch,
    native_alias,
    native_available,
    native_plan,
    native_specs,
)
from ptxbridge.launch.nvtx import nvtx_ranges
from ptxbridge.launch.panics import PANIC_MODES, PanicFlag, check_module_panics
from ptxbridge.launch.raised import ErrorFlag
from ptxbridge.launch.symbols import global_names, symbol_for
from ptxbridge.loaders import open_backend
from ptxbridge.loaders.base import Backend

__all__ = ["Module", "Kernel", "Globals", "dim3"]

Dim3 = tuple[int, int, int]
_DIM_LIMIT = 1 << 31
_KernelBase: type = object if _fastlaunch is None else _fastlaunch.Launcher
_LAUNCH_KEYWORDS = frozenset(LAUNCH_KEYWORDS)
_REPR_LIMIT = 100  # pydoc.TextRepr.maxother: help() shortens a longer repr mid-token
_UNNESTED = frozenset((int, float, bool, type(None), numpy.ndarray))  # types holding no members


class _PerKernel:
    """An attribute that is ``on_class`` on the class and ``of(kernel)`` on a kernel: ``__doc__`` and
    ``__signature__``, so ``help(kernel)``, ``inspect.signature(kernel)`` and notebooks show the kernel's
    own call while the class keeps its docstring and ``inspect.signature(Kernel)`` its constructor."""

    def __init__(self, on_class: Any, of: Any):
        self.on_class = on_class
        self.of = of

    def __get__(self, kernel: Kernel | None, owner: type) -> Any:
        return self.on_class if kernel is None else self.of(kernel._form())


def dim3(value: Any, what: str, kernel: str) -> Dim3:
    """``4`` / ``(4,)`` / ``(4, 2)`` / ``(4, 2, 1)`` -> a 3-tuple of positive ints."""
    items = (value,) if isinstance(value, int) else value
    if isinstance(items, (tuple, list)) and 1 <= len(items) <= 3:
        for v in items:
            if not isinstance(v, int) or isinstance(v, bool) or not 0 < v < _DIM_LIMIT:
                break
        else:
            return (*items, 1, 1)[:3]  # type: ignore[return-value]
    raise ArgumentError(f"{kernel}: {what} must be a positive int or a tuple of up to 3 positive ints "
                        f"(got {value!r})")


def _member_types(arg: Any) -> Any:
    """``arg``'s type, and for a struct (dict, dataclass) or tuple (tuple, list) its members' too: a plan
    learns the producers of the tensors inside, so dicts of CuPy arrays after dicts of torch tensors get
    their own; a NumPy structured scalar's dtype (its C plan copies fields of that dtype)."""
    kind = type(arg)
    if kind in _UNNESTED:
        return kind
    if kind is numpy.void:
        return kind, arg.dtype
    if kind is dict:
        return kind, tuple((name, _member_types(value)) for name, value in arg.items())
    if kind is tuple or kind is list:
        return kind, tuple(map(_member_types, arg))
    fields = getattr(kind, "__dataclass_fields__", None)
    if fields is not None and type(fields) is dict:
        return kind, tuple((name, _member_types(getattr(arg, name, None))) for name in fields)
    return kind


class _Plan:
    """Everything decided once per (kernel, argument types)."""

    __slots__ = ("aliasing", "binders", "bound", "default_stream", "errors", "fast", "launch", "native",
                 "need_buffers", "stateful")

    def __init__(self, kernel: Kernel, arg_types: tuple[type, ...], args: tuple):
        signature, backend = kernel.signature, kernel._backend
        if len(arg_types) != len(signature.params):
            names = ", ".join(p.name for p in signature.params)
            raise ArgumentError(f"{kernel.name}: takes {len(signature.params)} arguments ({names}) "
                                f"(got {len(arg_types)})")
        ctx = BindContext(kernel.name, signature.convention, backend.device_type, backend.device_id,
                          backend.pointer_device)
        pairs = zip(signature.params, arg_types, strict=True)
        self.binders = tuple(make_binder(ctx, p, t) for p, t in pairs)
        self.aliasing = alias_check(signature, kernel.name) if kernel._module.check_aliasing else None
        self.stateful = any(b.stateful for b in self.binders)
        self.errors = ErrorFlag.of(kernel._module, kernel.name) or PanicFlag.of(kernel._module, kernel.name)
        self.need_buffers = backend.needs_buffers
        on_gpu = backend.device_type == DLPACK_CUDA
        self.default_stream = default_stream_for(args) if on_gpu else None
        packer = signature.layout.packer()
        prepared = None
        if not self.stateful and not self.need_buffers and self.errors is None:
            prepared = backend.prepare(kernel._function, packer, kernel.name, cooperative=kernel.cooperative)
        self.fast = prepared is not None
        if prepared is not None:
            self.launch = prepared
            self.bound = compile_launch(self.binders, prepared, self.aliasing)
        self.native = None  # the C plan (ptxbridge.launch._fastlaunch.Plan), when it can take this plan
        if self.fast and not kernel.cooperative and native_available():
            specs = native_specs(self.binders, args, signature.layout)
            alias = None if specs is None else ((), ()) if self.aliasing is None else native_alias(
                specs, self.aliasing.native_promises())  # None: C cannot check them
            facts = None if alias is None else backend.native_facts(kernel._function, kernel.name)
            if facts is not None:
                self.native = native_plan(packer.size, specs, alias, default_stream=self.default_stream,
                                          nvtx=kernel._module._nvtx, **facts)
        if not self.fast:
            function, name = kernel._function, kernel.name

            def general(values: tuple, grid: Dim3, block: Dim3, shared_mem: int, stream: int,
                        buffers: Sequence[Any] = ()) -> None:
                try:
                    params = packer.pack(values)
                except Exception as exc:  # a binder bug, not user input: say where
                    raise PtxBridgeError(f"{name}: packing the parameter buffer failed: {exc}") from exc
                backend.launch(function, grid, block, shared_mem, stream, params, buffers)

            self.launch = general
            self.bound = None

    def stream_of(self, stream: Any, device_id: int) -> int:
        if stream is not None:
            return stream_handle(stream)
        return 0 if self.default_stream is None else self.default_stream(device_id)

    def run(self, kernel: Kernel, args: tuple, grid: Dim3, block: Dim3, shared_mem: int, stream: Any,
            check_aliasing: bool = True) -> None:
        """The general path: binders in a loop, memory ranges collected for the loader."""
        backend = kernel._backend
        handle = self.stream_of(stream, backend.device_id)
        state = LaunchState(handle, backend.upload, to_device=backend.to_device, to_host=backend.to_host)
        values: tuple = ()
        for binder, arg in zip(self.binders, args, strict=True):
            if self.need_buffers and binder.both is not None:
                found, brought = binder.both(arg, handle)
                values += found
                state.buffers += brought
                continue
            values += binder.values(arg, state if binder.stateful else handle)
            if self.need_buffers and binder.buffers is not None:
                state.buffers += binder.buffers(arg, handle)
        if self.aliasing is not None and check_aliasing:
            self.aliasing(args)
        if self.errors is not None:
            self.errors.reset(handle)
        self.launch(values, grid, block, shared_mem, handle, state.buffers)
        if self.errors is not None:  # numba raises (a Rust panic too) before it copies anything back
            self.errors.check()
        for copy_back in state.after:
            copy_back()


class Kernel(_KernelBase):
    """One kernel of a loaded module; call it with tensors and scalars:
    ``kernel(*args, grid=, block=None, shared_mem=0, stream=None)`` launches on ``grid`` x ``block``;
    arguments go by position or by parameter name; ``block`` defaults to the kernel's ``.reqntid``.
    ``inspect.signature(kernel)`` and ``help(kernel)`` show the kernel's own parameters."""

    __doc__ = _PerKernel(__doc__, CallForm.doc)
    __signature__ = _PerKernel(None, CallForm.inspect_signature)
    __slots__ = ("_backend", "_call_form", "_cooperative", "_default_block", "_function", "_module", "_plans",
                 "name", "signature")

    def __init__(self, module: Module, name: str, signature: Signature):
        self._module = module
        self._backend = module.backend
        self.name = name
        self.signature = signature
        self._function = module.backend.function(name)
        self._call_form: CallForm | None = None
        self._plans: dict[tuple[Any, ...], _Plan] = {}  # by _member_types
        self._cooperative = name in module.backend.cooperative_kernels
        reqntid = signature.launch.reqntid
        self._default_block = dim3(tuple(reqntid), "reqntid", name) if reqntid else None
        if _KernelBase is not object:
            self._configure(self._default_block, stream_handle)

    def _call_python(self, *args: Any, grid: Any, block: Any = None, shared_mem: int = 0,
                     stream: Any = None, check_aliasing: bool = True) -> None:
        """The whole call in Python: what the C launcher does not take, and every error.
        ``check_aliasing=False`` skips the no-alias check for this call (docs/safety.md)."""
        key = tuple(map(_member_types, args))
        plan = self._plans.get(key)
        types = tuple(map(type, args))
        if plan is None:
            plan = self._plans[key] = _Plan(self, types, args)
        if plan.native is not None:  # the C launcher keeps one plan per top-level types: this call's
            self._remember(types, plan.native)
        if grid.__class__ is int and 0 < grid < _DIM_LIMIT:
            grid3 = (grid, 1, 1)
        else:
            grid3 = dim3(grid, "grid", self.name)
        if block is None:
            if self._default_block is None:
                raise ArgumentError(f"{self.name}: block= is required (the kernel declares no .reqntid)")
            block3 = self._default_block
        else:
            block3 = (block, 1, 1) if block.__class__ is int and 0 < block < _DIM_LIMIT else dim3(
                block, "block", self.name)
        if shared_mem.__class__ is not int or shared_mem < 0:
            raise ArgumentError(f"{self.name}: shared_mem must be a non-negative int (got {shared_mem!r})")
        try:
            if plan.native is not None:
                if stream is not None and stream.__class__ is not int:
                    stream = stream_handle(stream)
                code = plan.native.launch(args, grid3, block3, shared_mem, stream)
                if code is None:
                    return
                if code is not False:  # the driver refused the launch
                    self._launch_failed(code, grid3, block3, shared_mem)
            ranges = self._module._nvtx
            if ranges is not None:
                ranges[0](self.name)
            try:
                if plan.bound is not None:
                    if stream is None:
                        reader = plan.default_stream
                        handle = 0 if reader is None else reader(self._backend.device_id)
                    else:
                        handle = stream if stream.__class__ is int else stream_handle(stream)
                    plan.bound(args, grid3, block3, shared_mem, handle, check_aliasing)
                else:
                    plan.run(self, args, grid3, block3, shared_mem, stream, check_aliasing)
            finally:
                if ranges is not None:
                    ranges[1]()
        except OtherDeviceError as moved:
            sibling = self._module._sibling(moved.device_id)
            if sibling is None:
                raise
            sibling[self.name](*args, grid=grid, block=block, shared_mem=shared_mem, stream=stream,
                               check_aliasing=check_aliasing)

    def _call_keywords(self, *args: Any, **kwargs: Any) -> None:
        """A call in any other spelling (parameters by name, no ``grid=``, unknown keywords): put in
        order, or the ArgumentError that shows the expected call."""
        args, launch = self._form().bind(args, kwargs)
        self._call_python(*args, **launch)

    if _KernelBase is object:  # no C launcher: the common spelling goes straight to the Python path
        def __call__(self, *args: Any, **kwargs: Any) -> None:
            if "grid" in kwargs and kwargs.keys() <= _LAUNCH_KEYWORDS:
                return self._call_python(*args, **kwargs)
            return self._call_keywords(*args, **kwargs)

    def _form(self) -> CallForm:
        if self._call_form is None:
            self._call_form = CallForm(self.name, self.signature, self._default_block is not None)
        return self._call_form

    def _launch_failed(self, code: int, grid3: Dim3, block3: Dim3, shared_mem: int) -> NoReturn:
        """Raise the loader's error for a launch the driver refused (the C launcher calls this too)."""
        raise self._backend.launch_error(code, self.name, grid3, block3, shared_mem)

    @property
    def cooperative(self) -> bool:
        """Launch with ``cuLaunchCooperativeKernel``: on by default for kernels whose cubin records
        grid-wide sync (the CUDA loader reads it); settable."""
        return self._cooperative

    @cooperative.setter
    def cooperative(self, value: bool) -> None:
        self._cooperative = bool(value)
        self._replan()

    def _replan(self) -> None:
        """Drop the cached plans (Python and C): the next call decides afresh."""
        self._plans.clear()
        if _KernelBase is not object:
            self._forget()

    def __repr__(self) -> str:
        """The signature; past :data:`_REPR_LIMIT` characters (where ``help()``'s title line, pydoc's
        ``repr``, cuts text in the middle of a word) the parameter names only, whole ones."""
        full = f"<ptxbridge kernel {self.signature}>"
        if len(full) <= _REPR_LIMIT:
            return full
        names = [p.name for p in self.signature.params]
        for count in range(len(names), -1, -1):
            shown = ", ".join(names[:count] + (["..."] if count < len(names) else []))
            short = f"<ptxbridge kernel {self.name}({shown})>"
            if len(short) <= _REPR_LIMIT:
                return short
        return short


class Globals:
    """``module.globals["name"]`` reads a module global's bytes; assigning bytes (or anything
    with the buffer protocol, e.g. a NumPy scalar or array) writes them.  Synchronous.
    ``name`` is the symbol or its C++ name (``"d_OptionData"`` for ``_ZL12d_OptionData``);
    :attr:`names` lists the symbols."""

    __slots__ = ("_backend", "_image", "_names")

    def __init__(self, backend: Backend, image: Any = None):
        self._backend, self._image = backend, image
        self._names: tuple[str, ...] | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """Every ``__device__`` / ``__constant__`` variable of the image, by symbol."""
        if self._names is None:
            self._names = () if self._image is None else global_names(self._image)
        return self._names

    def _symbol(self, name: str) -> str:
        """The symbol of ``name``; a name no listed symbol answers to goes to the loader as written."""
        return name if name in self.names else find_symbol(name, self.names) or name

    def __getitem__(self, name: str) -> bytes:
        return self._backend.read_global(self._symbol(name))

    def __setitem__(self, name: str, value: Any) -> None:
        self._backend.write_global(self._symbol(name), bytes(memoryview(value).cast("B")))

    def address(self, name: str) -> tuple[int, int]:
        """(device address, size in bytes) of global ``name``."""
        return self._backend.global_address(self._symbol(name))


class Module:
    """An image loaded on one device: kernels as attributes and ``module["name"]``.

    ``check_aliasing`` (default True, settable): refuse launches whose arguments break the
    signature's no-alias promises (Rust ``&mut``, ``DisjointSlice``, ``__restrict__``, cuTile
    alias groups; docs/safety.md).  Per call: ``kernel(..., check_aliasing=False)``.
    """

    def __init__(self, image: Any, backend: Backend, *, check_aliasing: bool = True,
                 nvtx: bool | None = None, panics: str = "raise"):
        if panics not in PANIC_MODES:
            raise ArgumentError(f"load: panics must be one of {PANIC_MODES} (got {panics!r})")
        self.panics = panics
        self.image = image
        self.backend = backend
        self._check_aliasing = bool(check_aliasing)
        self._nvtx = nvtx_ranges(nvtx)  # None, or NVTX's (push, pop) around every launch
        self.globals = Globals(backend, image)
        self._kernels: dict[str, Kernel] = {}
        self._siblings: dict[int, Module] = {}

    @property
    def check_aliasing(self) -> bool:
        return self._check_aliasing

    @check_aliasing.setter
    def check_aliasing(self, value: bool) -> None:
        self._check_aliasing = bool(value)
        for module in (self, *self._siblings.values()):
            module._check_aliasing = self._check_aliasing
            for kernel in module._kernels.values():
                kernel._replan()

    @property
    def kernel_names(self) -> tuple[str, ...]:
        return tuple(self.image.kernels)

    def __getitem__(self, name: str) -> Kernel:
        """Kernel ``name``: its symbol, its C++ name (``"vectorAdd"``, ``"scale<float>"``), or the NVRTC
        name expression it was compiled with (``"block_sum<int, 64, true>"``)."""
        found = self._kernels.get(name)
        if found is None:
            if name in getattr(self.image, "unusable", {}):
                raise AbiMismatchError(self.image.unusable[name])
            expressions = getattr(self.image, "name_expressions", None)
            symbol = symbol_for(name, self.image.kernels, "kernel", expressions)
            found = self._kernels.get(symbol) or Kernel(self, symbol, self.image.kernels[symbol])
            self._kernels[name] = self._kernels[symbol] = found
        return found

    def __getattr__(self, name: str) -> Kernel:
        special = name.startswith("__") and name.endswith("__")  # Python's (__array__...), never kernels
        if not special and name in getattr(self.image, "unusable", {}):
            raise AbiMismatchError(self.image.unusable[name])
        image = vars(self).get("image")  # absent while the module is being made or copied
        if special or image is None or (name.startswith("_") and name not in image.kernels):
            # a _private name only when it is a kernel's (cuda.vectorize's __vectorized_f)
            raise AttributeError(f"module has no kernel {name!r} (kernels: "
                                 f"{', '.join(image.kernels) if image else 'none yet'})")
        try:
            return self[name]
        except KeyError as exc:
            raise AttributeError(exc.args[0]) from None

    def __dir__(self) -> list[str]:
        return [*super().__dir__(), *self.image.kernels]

    @property
    def device(self) -> str:
        """``"cuda:N"`` or ``"cpu"`` (the CPU PTX interpreter)."""
        return device_name(self.backend.device_type, self.backend.device_id)

    def to_device(self, array: Any) -> Any:
        """A copy of a NumPy array where this module's kernels can use it (synchronous)."""
        import numpy

        return self.backend.to_device(numpy.ascontiguousarray(array))

    def to_host(self, array: Any) -> Any:
        """A NumPy copy of an array made by :meth:`to_device` (waits for the device)."""
        return self.backend.to_host(array)

    def _sibling(self, device_id: int) -> Module | None:
        """The same image on another GPU, loaded on first use (CUDA loader only)."""
        if self.backend.device_type != DLPACK_CUDA or device_id == self.backend.device_id:
            return None
        found = self._siblings.get(device_id)
        if found is None:
            found = self._siblings[device_id] = Module(self.image, open_backend(self.image, device_id),
                                                       check_aliasing=self._check_aliasing,
                                                       nvtx=self._nvtx is not None, panics=self.panics)
        return found

    def synchronize(self) -> None:
        """Wait for this module's device; a kernel fault is raised here, naming the last kernel, and
        with ``panics="defer"`` a Rust panic of any launch since the last check."""
        self.backend.synchronize()
        if self.panics == "defer":
            self.check_panics()

    def check_panics(self) -> None:
        """Raise :class:`~ptxbridge.KernelRaisedError` when a thread of a launch since the last check
        panicked (waits for the device); nothing for an image without Rust panics."""
        check_module_panics(self)

    def close(self) -> None:
        for sibling in self._siblings.values():
            sibling.close()
        self._siblings.clear()
        self._kernels.clear()
        self.backend.close()

    def __enter__(self) -> Module:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = f"{type(self.backend).__name__}({self.backend.device_id})"
        return f"<ptxbridge module on {where}: {', '.join(self.image.kernels)}>"
