"""numba-cuda frontend: a Python function + a numba signature -> a typed PTX or LTO-IR artifact.

numba-cuda compiles ahead of time with no GPU when the compute capability is
given (docs/conventions.md, "numba").  Kernels use numba's own parameter lowering
(convention ``numba``: arrays as meminfo, parent, nitems, itemsize, data,
shape, strides in bytes; records by device pointer; tuples flattened).
Device functions are exported with ``abi="c"`` so CUDA C++, Rust and other
numba kernels can call them.  Foreign functions a kernel calls through
``cuda.declare_device(name, sig, abi="c")`` appear in the PTX as ``.extern
.func`` declarations and are recorded as the artifact's imports.
"""

from __future__ import annotations

import inspect
import json
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from types import FunctionType, ModuleType, SimpleNamespace
from typing import Any

from ptxbridge import cache
from ptxbridge.abi.check import check, find_entry
from ptxbridge.abi.errors import AbiMismatchError, ArgumentError, CompileError, TargetError, ToolchainError
from ptxbridge.abi.kinds import Opaque, ParamType
from ptxbridge.abi.ptx import PtxFunction, PtxModule, read_ptx
from ptxbridge.abi.signature import Convention, Param, Signature
from ptxbridge.abi.targets import parse_target
from ptxbridge.artifacts.artifact import Artifact, CodeKind, Provenance
from ptxbridge.artifacts.signatures import layout_only, ptx_launch
from ptxbridge.cache.fingerprint import fingerprint, referenced_values
from ptxbridge.launch.raised import RaisedException, table_from_json, table_to_json
from ptxbridge.linker.device_runtime import runtime_calls
from ptxbridge.linker.target import default_arch
from ptxbridge.numba import libraries
from ptxbridge.numba.types import to_param_type

__all__ = ["compile", "arch_to_cc", "NumbaOptions"]

Raises = dict[int, RaisedException]  # a kernel's exception table: code -> what was raised

_OUTPUTS = ("ptx", "ltoir")
_NEEDS_GPU = ("; numba-cuda asked the driver for the current GPU while compiling a function the kernel "
              "calls, and there is none: compile where a GPU is, or write the helper's code into the kernel")
_TARGET_LOCK = threading.Lock()
_INSTALL = "install it with `pip install numba-cuda[cu13] nvidia-nvvm`"
_TOOLCHAIN_PROVIDES = ("vprintf",)  # device printf: the driver's (and the CPU loader's) own
_NUMBA_VOID = Opaque(8, 8)  # what numba's C ABI returns from a void function (never read)


def arch_to_cc(arch: str) -> tuple[int, int]:
    """``"sm_90"`` -> ``(9, 0)``; numba-cuda takes plain compute capabilities only."""
    target = parse_target(arch, who="numba")
    if target.suffix:
        raise TargetError(f"numba: arch must look like 'sm_90' (got {arch!r}); numba-cuda compiles for a "
                          f"compute capability, without {target.suffix!r} features: pass {target.plain.sm!r}")
    return target.cc


@dataclass(frozen=True, slots=True, kw_only=True)
class NumbaOptions:
    """Code-generation options passed through to ``numba.cuda.compile``.

    ``debug=True`` (with ``opt=False``, as numba-cuda requires) compiles a kernel whose
    exceptions are reported after the launch, as ``cuda.jit(debug=True)`` does.
    """

    fastmath: bool = False
    opt: bool = True
    lineinfo: bool = False
    launch_bounds: int | tuple[int, ...] | None = None
    debug: bool = False

    def __post_init__(self) -> None:
        if self.debug and self.opt:
            raise ArgumentError("numba: debug=True needs opt=False (numba-cuda: \"debug=True with "
                                "opt=True is not supported by CUDA\")")
        bounds = self.launch_bounds
        items = (bounds,) if isinstance(bounds, int) else bounds or ()
        if not isinstance(items, tuple) or len(items) > 3 or not all(
                isinstance(i, int) and i > 0 for i in items):
            raise ArgumentError(
                f"numba: launch_bounds must be a positive int or a tuple of 1-3 of them (got {bounds!r})")

    def as_flags(self) -> tuple[str, ...]:
        """The options as text, for provenance and the cache key."""
        return (f"fastmath={self.fastmath}", f"opt={self.opt}", f"lineinfo={self.lineinfo}",
                f"launch_bounds={self.launch_bounds}", f"debug={self.debug}")


def compile(func: Callable, signature: Any, *, arch: str | None = None, output: str = "ptx",
            device: bool = False, name: str | None = None, abi: str | None = None,
            imports: Iterable[Any] = (), options: NumbaOptions | None = None) -> Artifact:
    """Compile ``func`` with numba-cuda for ``signature`` (text or numba types) and ``arch``.

    Parameters
    ----------
    func : the Python function (or a ``cuda.jit`` dispatcher; its ``py_func`` is used).
    signature : a numba signature, e.g. ``"void(float32[::1], float32)"``; kernels return
        void, device functions must name their return type.
    arch : ``"sm_90"`` style; None uses the GPU's arch, or ``sm_90`` without a GPU.
    output : ``"ptx"`` or ``"ltoir"`` (LTO-IR, for ``nvJitLink -lto`` across languages).
    device : compile a device function (exported with the C ABI) instead of a kernel.
    name : the plain entry/function name; defaults to ``func.__name__``.
    abi : None or ``"c"`` for device functions (numba's own ABI is not callable from
        other languages); kernels always use numba's kernel ABI.
    imports : ``cuda.declare_device(...)`` results (or Signatures) of foreign functions the
        kernel calls; those found in the function's globals need not be listed.
    options : :class:`NumbaOptions`.

    Returns an :class:`Artifact` whose signatures were checked against the PTX.
    """
    pyfunc = getattr(func, "py_func", func)
    if not isinstance(pyfunc, FunctionType):
        raise ArgumentError(f"numba.compile: func must be a Python function (got {type(func).__name__})")
    if output not in _OUTPUTS:
        raise ArgumentError(f"numba.compile: output must be one of {_OUTPUTS} (got {output!r})")
    if abi not in (None, "c") or (abi == "c" and not device):
        raise ArgumentError(
            "numba.compile: abi must be None, or 'c' for a device function; numba kernels only "
            f"have numba's kernel ABI and numba-ABI device functions are not callable from other "
            f"languages (got abi={abi!r}, device={device})")
    arch = arch or default_arch()  # the GPU's, else sm_90
    cc = arch_to_cc(arch)
    options = options or NumbaOptions()
    name = name or pyfunc.__name__
    args, restype = _normalize(signature, name, device)
    params = _params(pyfunc, args, name, device)
    tools = _versions()
    link = tuple(getattr(func, "targetoptions", {}).get("link") or ())  # cuda.jit(link=[...])
    ptx_text, links, raises = _compile_cached(pyfunc, args, restype, cc, "ptx", device, name, options, tools,
                                              link)
    module = read_ptx(ptx_text, source=f"<numba {name}>")
    code = ptx_text if output == "ptx" else _compile_cached(
        pyfunc, args, restype, cc, "ltoir", device, name, options, tools, link)[0]
    carried, defined = libraries.build(links, arch, output, tools)

    if device:
        own = Signature(name, params, Convention.C, kind="device", returns=_c_return(restype, name))
        check(own, module)
        kernels, exports = {}, {name: own}
    else:
        entry = find_entry(module, name)
        own = Signature(name, params, Convention.NUMBA, launch=ptx_launch(entry), kind="kernel")
        check(own, module)
        kernels, exports = {name: own}, {}
    provenance = Provenance("numba-cuda", tools, (f"output={output}", f"cc={cc[0]}.{cc[1]}",
                                                     f"abi_name={name}") + options.as_flags(), arch)
    return Artifact(code=code, kind=CodeKind.PTX if output == "ptx" else CodeKind.LTOIR, arch=arch,
                    kernels=kernels, device_functions=exports,
                    imports=_imports(module, pyfunc, imports, defined), provenance=provenance, name=name,
                    libraries=carried, raises={name: raises} if raises else {})


# --- signature handling ---------------------------------------------------------------


def _normalize(signature: Any, name: str, device: bool) -> tuple[tuple[Any, ...], Any]:
    """(argument types, return type) from numba signature text or types."""
    sigutils, _ = _numba()
    try:
        args, restype = sigutils.normalize_signature(signature)
    except Exception as exc:  # numba raises TypeError/NameError/SyntaxError for bad text
        raise ArgumentError(f"{name}: not a numba signature: {exc} (got {signature!r})") from exc
    if device and restype is None:
        raise ArgumentError(f"{name}: a device function's signature must give its return type, so "
                            f"other languages know it, e.g. 'float32(float32)' (got {signature!r})")
    if not device and not _is_void(restype):
        raise ArgumentError(f"{name}: a kernel returns void (got return type {restype})")
    return tuple(args), restype


def _is_void(restype: Any) -> bool:
    return restype is None or str(restype) in ("none", "void")


def _params(pyfunc: FunctionType, args: tuple[Any, ...], name: str, device: bool) -> tuple[Param, ...]:
    """Named parameters from the function's argument names and the numba types."""
    spec = inspect.signature(pyfunc).parameters.values()
    names = [p.name for p in spec if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(names) != len(args):
        raise ArgumentError(f"{name}: the signature has {len(args)} argument types but the function "
                            f"takes {len(names)} positional parameters (got {names})")
    params = []
    for pname, nbtype in zip(names, args, strict=True):
        kind = to_param_type(nbtype, f"{name}: parameter {pname!r}", c_abi=device)
        params.append(Param(pname, kind))
    return tuple(params)


# --- foreign device functions -----------------------------------------------------------


def _imports(module: PtxModule, pyfunc: FunctionType, given: Iterable[Any],
             defined: dict[str, Signature]) -> dict[str, Signature]:
    """Signatures of the ``.extern .func`` the PTX calls, checked against their declarations.

    Not imports: what the CUDA toolchain provides (``vprintf``; device-runtime
    calls, for which the linker adds ``libcudadevrt.a``) and what the carried
    libraries ``defined`` (numba's own functions, ``link=`` files), against whose
    definition the call is checked here: nvJitLink reports a prototype mismatch
    only as a log line (and has crashed on one).
    """
    declared = {sig.name: sig for sig in map(_import_signature, given)}
    for extern in _referenced_externs(pyfunc):
        declared.setdefault(extern.name, _import_signature(extern))
    provided = set(_TOOLCHAIN_PROVIDES) | set(runtime_calls([module]))
    result = {}
    for func in module.functions:
        if func.kind != "func" or func.linkage != "extern" or func.body is not None or func.name in provided:
            continue
        if func.name in defined:
            _check_definition(func, defined[func.name])
            continue
        sig = declared.get(func.name) or layout_only(func)
        try:
            check(sig, module)
        except AbiMismatchError as exc:
            raise AbiMismatchError(
                f"{exc}; foreign functions must be declared with "
                f"cuda.declare_device({func.name!r}, sig, abi='c')") from exc
        result[func.name] = sig
    return result


def _check_definition(call: PtxFunction, definition: Signature) -> None:
    """The PTX declaration numba calls against the library's definition of the function."""
    try:
        check(definition, call)
    except AbiMismatchError as exc:
        raise AbiMismatchError(
            f"{call.name}: the numba code calls it differently from its definition in a link= file "
            f"({exc}); numba's C ABI gives a void function a 64-bit return value, so a C definition "
            "returns a 64-bit integer (unused) for a function declared void") from None


def _c_return(restype: Any, where: str) -> ParamType:
    """The return type of a numba C-ABI function; numba returns an unused 64-bit word for void."""
    return _NUMBA_VOID if _is_void(restype) else to_param_type(restype, f"{where}: return type")


def _import_signature(decl: Any) -> Signature:
    """A C-ABI device signature from a ``declare_device`` result (or a Signature as is)."""
    if isinstance(decl, Signature):
        return decl
    sig = getattr(decl, "sig", None)
    if not isinstance(getattr(decl, "name", None), str) or sig is None:
        raise ArgumentError("numba.compile: imports must be cuda.declare_device(...) results or "
                            f"Signatures (got {type(decl).__name__})")
    where = f"import {decl.name}"
    params = tuple(Param(f"p{i}", to_param_type(t, f"{where}: argument {i}", c_abi=True))
                   for i, t in enumerate(sig.args))
    returns = _c_return(sig.return_type, where)
    return Signature(decl.name, params, Convention.C, kind="device", returns=returns)


def _referenced_externs(pyfunc: FunctionType) -> list[Any]:
    """``declare_device`` results the function (or functions it calls) names in globals/closure."""
    from numba.cuda.compiler import ExternFunction

    return [value for value in referenced_values(pyfunc) if isinstance(value, ExternFunction)]


# --- compiling and caching ---------------------------------------------------------------


def _numba() -> tuple[ModuleType, ModuleType]:
    try:
        from numba import cuda
        from numba.cuda.core import sigutils
    except ImportError as exc:
        raise ToolchainError(f"numba-cuda is not importable ({exc}); {_INSTALL}") from exc
    return sigutils, cuda


def _versions() -> str:
    """numba-cuda and libNVVM versions, for provenance and the cache key."""
    _numba()
    try:
        nvvm = metadata.version("nvidia-nvvm")
    except metadata.PackageNotFoundError:
        nvvm = "system"
    return f"numba-cuda {metadata.version('numba-cuda')}, NVVM {nvvm}"


def _compile_cached(pyfunc: FunctionType, args: tuple[Any, ...], restype: Any, cc: tuple[int, int],
                    output: str, device: bool, name: str, options: NumbaOptions, tools: str,
                    link: tuple[Any, ...]) -> tuple[bytes, tuple[libraries.Link, ...], Raises]:
    """Run numba-cuda (or reuse the disk cache): the code and, for PTX, what numba links with it and
    the kernel's exception table (``debug=True``; :mod:`ptxbridge.launch.raised`).

    The key covers the code and what it names, the types, arch, options,
    versions and whether NRT is on (``numba.cuda.config.CUDA_ENABLE_NRT``).
    """
    from numba.cuda import config

    nrt = bool(getattr(config, "CUDA_ENABLE_NRT", False))
    entry_key = cache.key("links+raises", tools, fingerprint(pyfunc), repr(args), str(restype), f"{cc}",
                          output, str(device), name, f"nrt={nrt}", repr(link), *options.as_flags())

    def produce() -> bytes:
        from numba.cuda import compiler
        from numba.cuda.core.compiler_lock import global_compiler_lock

        sig = restype(*args) if not _is_void(restype) else args
        try:
            wants_table = options.debug and not device
            with global_compiler_lock, _callees_compiled_for(cc), _compiles_seen(wants_table) as seen:
                library, _ = compiler._compile_pyfunc_with_fixup(
                    pyfunc, sig, device=device, cc=cc, abi="c" if device else "numba",
                    abi_info={"abi_name": name}, fastmath=options.fastmath, opt=options.opt,
                    lineinfo=options.lineinfo, launch_bounds=options.launch_bounds, lto=output == "ltoir",
                    debug=options.debug)
                if output == "ltoir":
                    return _header((), {}) + b"\n" + bytes(library.get_ltoir(cc=cc))
                code = "\n".join(library.get_asm_strs(cc=cc))
                links = libraries.gather(library, read_ptx(code, f"<numba {name}>"), link)
                raises = _exception_table(seen[-1]) if seen else {}
        except Exception as exc:  # numba reports typing and lowering errors with many types
            hint = _NEEDS_GPU if "CudaSupportError" in _exception_chain(exc) else ""
            raise CompileError(f"numba-cuda could not compile {name} for {sig}: "
                               f"{type(exc).__name__}{hint}", log=str(exc)) from exc
        return _header(links, raises) + b"\n" + code.encode()

    header, _, code = cache.cached("numba", entry_key, produce).partition(b"\n")
    found = json.loads(header)
    return code, libraries.loads(found["links"].encode()), table_from_json(found["raises"])


def _header(links: Iterable[libraries.Link], raises: Raises) -> bytes:
    """The cache entry's first line: what numba links with the code, and the exception table."""
    return json.dumps({"links": libraries.dumps(links).decode(), "raises": table_to_json(raises)}).encode()


@contextmanager
def _compiles_seen(active: bool) -> Iterator[list[Any]]:
    """When ``active``, the results of numba-cuda's ``compile_cuda`` calls while compiling one
    function (the kernel's is the last: its callees are typed, so compiled, inside it).
    ``_compile_pyfunc_with_fixup`` returns the code library only; the exception table lives on
    the result's ``call_helper``."""
    from numba.cuda import compiler

    seen: list[Any] = []
    if not active:
        yield seen
        return
    original = compiler.compile_cuda

    def recording(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        seen.append(result)
        return result

    compiler.compile_cuda = recording
    try:
        yield seen
    finally:
        compiler.compile_cuda = original


def _exception_table(compiled: Any) -> Raises:
    """numba's ``{code: (exception class, constant args, (function, file, line))}`` as plain data."""
    table = {}
    for code, (cls, exc_args, loc) in getattr(compiled.call_helper, "exceptions", {}).items():
        kind = cls.__name__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
        where = f"In function {loc[0]!r}, file {loc[1]}, line {loc[2]}" if loc else ""
        table[int(code)] = RaisedException(kind, tuple(_plain(a) for a in exc_args or ()), where)
    return table


def _plain(value: Any) -> Any:
    """A constant exception argument as JSON holds it (numba allows only constants)."""
    return value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)


@contextmanager
def _callees_compiled_for(cc: tuple[int, int]) -> Iterator[None]:
    """Let numba-cuda compile the ``@cuda.jit(device=True)`` functions a kernel calls without a GPU.

    numba-cuda 0.30 compiles such a callee for ``get_current_device().compute_capability``
    (``CUDADispatcher.compile_device``), which needs a driver and a GPU even when the kernel
    itself is compiled for an explicit ``cc``.  On a machine without a GPU, the callee is
    compiled for the kernel's own ``cc`` instead (what the kernel is linked for anyway); with
    a GPU numba's own behaviour is kept.  Without that hook (another numba-cuda) nothing changes.
    """
    from numba import cuda
    from numba.cuda import dispatcher

    if cuda.is_available() or not callable(getattr(dispatcher, "get_current_device", None)):
        yield
        return
    target = SimpleNamespace(compute_capability=cc)
    with _TARGET_LOCK:
        original = dispatcher.get_current_device
        dispatcher.get_current_device = lambda: target
        try:
            yield
        finally:
            dispatcher.get_current_device = original


def _exception_chain(exc: BaseException | None) -> str:
    """Type names of ``exc`` and its causes: numba wraps the driver error in typing errors."""
    names = []
    while exc is not None and len(names) < 16:
        names.append(type(exc).__name__)
        exc = exc.__cause__ or exc.__context__
    return " ".join(names)
