"""CUDA C++ through NVRTC: source -> PTX, LTO-IR or cubin, typed from the source itself.

NVRTC is driven through ``cuda.bindings.nvrtc`` rather than
``cuda.core.Program``: cuda.core 1.2 asks the driver whether it can load the
PTX it made, which fails on a machine without one, and NVRTC itself needs no
driver.  Signatures come from :mod:`ptxbridge.nvrtc.c_source` and are checked
against the PTX NVRTC wrote (docs/conventions.md, "c").
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from ptxbridge import cache
from ptxbridge.abi.check import check
from ptxbridge.abi.errors import AbiMismatchError, CompileError, FormatError, OptionError, ToolchainError
from ptxbridge.abi.ptx import PtxModule, read_ptx
from ptxbridge.abi.signature import Signature
from ptxbridge.artifacts.artifact import Artifact, CodeKind, Provenance
from ptxbridge.artifacts.signatures import with_cubin_facts
from ptxbridge.linker.target import default_arch, normalize_arch
from ptxbridge.nvrtc.c_source import CDeclarations, read_c_source

__all__ = ["compile", "nvrtc_args", "nvrtc_version"]

OUTPUTS = ("ptx", "ltoir", "cubin")
@functools.cache
def nvrtc_version() -> str:
    """``"13.5"``; a :class:`ToolchainError` when the NVRTC wheel is missing."""
    try:
        from cuda.bindings import nvrtc

        _, major, minor = nvrtc.nvrtcVersion()
    except Exception as exc:
        raise ToolchainError("NVRTC is not available: pip install nvidia-cuda-nvrtc cuda-bindings "
                             f"(got {exc})") from exc
    return f"{major}.{minor}"


# The runtime headers (cuda_fp16.h ...), CCCL (<cooperative_groups.h> needs its <nv/target> and
# cuda/std; CUB, Thrust) and cuRAND (<curand_kernel.h>), from their wheels or the toolkit.
_HEADER_LIBRARIES = ("cudart", "cccl", "curand")


@functools.cache
def _include_dirs() -> tuple[str, ...]:
    """The header folders of the installed CUDA wheels (or toolkit), in search order, each once."""
    try:
        from cuda.pathfinder import find_nvidia_header_directory
    except ImportError:  # headers are optional: sources without #include compile without them
        return ()
    found: list[str] = []
    for library in _HEADER_LIBRARIES:
        try:
            folder = find_nvidia_header_directory(library)
        except Exception:  # an unknown or broken install of one library does not hide the others
            folder = None
        if folder and folder not in found:
            found.append(folder)
    return tuple(found)


def nvrtc_args(arch: str, output: str, options: Sequence[str] = (), *, rdc: bool = False,
               include_dirs: Sequence[str] = ()) -> list[str]:
    """The NVRTC command line for ``output`` on ``arch``.

    ``ltoir`` adds ``-dlto`` and relocatable device code (LTO-IR is always
    relocatable); ``rdc`` (the source imports or exports device functions)
    adds relocatable device code for PTX and cubin too.  An ``-arch`` in
    ``options`` is refused: ``arch`` is the one place the target is named.
    ``include_dirs`` come after the user's own ``-I`` options, so a user's header wins.
    """
    if output not in OUTPUTS:
        raise OptionError(f"output must be one of {OUTPUTS} (got {output!r})")
    for option in options:
        if option.startswith(("-arch", "--gpu-architecture")):
            raise OptionError(f"nvrtc options: give the target as arch=, not in options (got {option!r})")
    args = [f"--gpu-architecture={arch}"]
    if output == "ltoir":
        args.append("-dlto")
    if rdc or output == "ltoir":
        args.append("--relocatable-device-code=true")
    return args + list(options) + [f"--include-path={folder}" for folder in include_dirs]


def compile(source: str | os.PathLike[str], *, arch: str | tuple[int, int] | None = None,
            output: str = "ptx", options: Sequence[str] = (), name_expressions: Sequence[str] = (),
            signatures: Mapping[str, Signature | str] | None = None, name: str = "<source>",
            typed: bool = True) -> Artifact:
    """Compile CUDA C++ with NVRTC into a typed :class:`Artifact`.

    Parameters
    ----------
    source
        The C++ text, or a path (``pathlib.Path``) to a ``.cu`` file.
    arch
        Target, e.g. ``"sm_90"``; default: the first GPU's arch, else ``sm_90``.
    output
        ``"ptx"``, ``"ltoir"`` (``-dlto -rdc``, for nvJitLink ``-lto``) or ``"cubin"``.
    options
        Extra NVRTC options (``"-DN=4"``, ``"-use_fast_math"``).
    name_expressions
        C++ kernels to instantiate (``"scale<float>"``); each becomes a kernel
        under its mangled name, typed from the template when the reader can,
        and a loaded module finds it by the exact expression too
        (``module["block_sum<int, 64, true>"]``; NVRTC's expression-to-symbol
        map is kept on the artifact, the linked image and saved images).
        C++ kernels that are not templates need none: each is added under its
        mangled name when the reader can type it, and a loaded module finds
        kernels (and globals) by their C++ name too: ``module["vectorAdd"]``,
        ``module["scale<float>"]``, ``module.globals["d_OptionData"]``.
    signatures
        Signatures by name or name expression, overriding the reader (for
        types it cannot read); strings are parsed with ``Signature.parse``.
    typed
        False: do not read the source's declarations (code another tool links, such
        as numba-cuda's runtime); nothing is typed and device code is relocatable.

    The result is cached on disk, keyed by source, options, arch and NVRTC
    version: a second compile runs no compiler.
    """
    if isinstance(source, os.PathLike):
        name, source = os.fspath(source), Path(source).read_text()
    arch = normalize_arch(arch) if arch is not None else default_arch()
    decls = read_c_source(source if typed else "", name)
    # relocatable device code when functions cross compilation units, or kernels launch kernels
    # from the device (dynamic parallelism: `<<<` in device code needs the device runtime)
    rdc = not typed or bool(decls.device_functions or decls.imports) or "<<<" in source
    args = nvrtc_args(arch, output, options, rdc=rdc, include_dirs=_include_dirs())
    version = nvrtc_version()
    automatic = [n for n in decls.cxx_names() if n not in name_expressions]  # plain C++ kernels
    expressions = [*name_expressions, *automatic]
    entry = cache.key("nvrtc", version, source, output, *args, "\0", *expressions, "\0",
                      *_included_files(source, name, options))
    blob = cache.cached("nvrtc", entry, lambda: _run_nvrtc(source, name, args, output, expressions))
    header, _, code = blob.partition(b"\n")
    lowered: dict[str, str] = json.loads(header)
    given = {key: (Signature.parse(sig) if isinstance(sig, str) else sig)
             for key, sig in (signatures or {}).items()}
    kernels = _typed_kernels(decls, lowered, given, frozenset(automatic))
    exports = _typed(decls.device_functions, decls, "export", given)
    imports = _typed(decls.imports, decls, "import", given)
    unused = set(given) - set(kernels) - set(exports) - set(imports) - set(lowered)
    if unused:
        raise AbiMismatchError(f"{name}: signatures given for {sorted(unused)} but the source declares no "
                               f"such extern \"C\" function or name expression (has {sorted(kernels)})")
    if output == "ptx":
        kernels, exports, imports = _checked(read_ptx(code, name), kernels, exports, imports)
    elif output == "cubin":

        kernels = {k: v for k, v in with_cubin_facts(kernels, code, name).items() if k in kernels}
    kind = {"ptx": CodeKind.PTX, "ltoir": CodeKind.LTOIR, "cubin": CodeKind.CUBIN}[output]
    return Artifact(code, kind, arch, kernels, exports, imports,
                    Provenance("nvrtc", version, tuple(args), arch), name,
                    name_expressions={e: symbol for e, symbol in lowered.items() if symbol in kernels})


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^">\n]+)[">]', re.MULTILINE)
_MAX_HEADERS = 512


def _included_files(source: str, name: str, options: Sequence[str]) -> list[str]:
    """Path and text of every header the source includes from the user's folders, for the cache key.

    NVRTC looks for ``#include`` files beside ``name``, in the working directory
    and in ``-I``/``--include-path`` folders; an edited header must miss the
    cache.  The CUDA headers come from the versioned wheel and are not read.
    """
    folders = [Path(name).parent, Path.cwd()]
    for option in options:
        for prefix in ("--include-path=", "-I"):
            if option.startswith(prefix):
                folders.append(Path(option[len(prefix):]))
    parts: list[str] = []
    seen: set[Path] = set()
    pending = [source]
    while pending and len(seen) < _MAX_HEADERS:
        for include in _INCLUDE.findall(pending.pop()):
            found = next((f / include for f in folders if (f / include).is_file()), None)
            if found is not None and found.resolve() not in seen:
                seen.add(found.resolve())
                text = found.read_text(errors="replace")
                parts += [str(found.resolve()), text]
                pending.append(text)
    return parts


def _typed(read: Mapping[str, Signature], decls: CDeclarations, role: str,
           given: Mapping[str, Signature]) -> dict[str, Signature]:
    """Device functions the reader read, or that it could not read and ``given`` supplies."""
    table = {n: given.get(n, sig) for n, sig in read.items()}
    table.update({n: given[n] for n, (r, _) in decls.problems.items() if r == role and n in given})
    return table


def _typed_kernels(decls: CDeclarations, lowered: Mapping[str, str], given: Mapping[str, Signature],
                   automatic: frozenset[str] = frozenset()) -> dict[str, Signature]:
    """extern "C" kernels plus each name expression's kernel under its lowered name.

    A kernel the user did not name (``automatic``) whose types the reader cannot read is left
    out rather than failing the compile: pass it in ``signatures`` to launch it.
    """
    for problem in decls.problems:
        if problem not in given:
            raise decls.error(problem)
    kernels = _typed(decls.kernels, decls, "kernel", given)
    for expression, mangled in lowered.items():
        sig = given.get(expression) or given.get(mangled)
        if sig is None:
            try:
                sig = decls.for_expression(expression, mangled)
            except FormatError:
                if expression in automatic:
                    continue
                raise
        kernels[mangled] = replace(sig, name=mangled)
    return kernels


def _checked(module: PtxModule, *tables: dict[str, Signature]) -> tuple[dict[str, Signature], ...]:
    """Check every signature against the PTX, filling launch demands only the PTX states.

    ``__launch_bounds__`` written with constants the reader cannot evaluate
    (``constexpr``, templates) still reach the PTX as ``.maxntid``.  Imports
    the code never calls have no ``.extern .func`` and are not checked.
    """
    names = {f.name: f for f in module.functions}
    out: list[dict[str, Signature]] = []
    for table in tables:
        checked = {}
        for key, sig in table.items():
            function = names.get(sig.name)
            if function is not None and function.kind == "entry":
                launch = sig.launch
                sig = replace(sig, launch=replace(
                    launch, maxntid=launch.maxntid or _xyz(function.maxntid),
                    reqntid=launch.reqntid or _xyz(function.reqntid),
                    minnctapersm=launch.minnctapersm or function.minnctapersm,
                    cluster=launch.cluster or _xyz(function.reqnctapercluster)))
            if function is not None:
                check(sig, function)
            checked[key] = sig
        out.append(checked)
    return tuple(out)


def _xyz(dims: tuple[int, ...] | None) -> tuple[int, int, int] | None:
    return None if dims is None else (*dims, 1, 1, 1)[:3]  # type: ignore[return-value]


def _run_nvrtc(source: str, name: str, args: list[str], output: str,
               name_expressions: Sequence[str]) -> bytes:
    """One NVRTC compile; returns ``json(lowered names) + b"\\n" + code`` for the cache."""
    from cuda.bindings import nvrtc

    err, program = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    _ok(err, "nvrtcCreateProgram")
    try:
        for expression in name_expressions:
            _ok(nvrtc.nvrtcAddNameExpression(program, expression.encode())[0], "nvrtcAddNameExpression")
        encoded = [a.encode() for a in args]
        (status,) = nvrtc.nvrtcCompileProgram(program, len(encoded), encoded)
        _, size = nvrtc.nvrtcGetProgramLogSize(program)
        # bytearray, never b" " * size: NVRTC writes into the buffer, and for size 1 that
        # expression is CPython's shared single-byte object, which would corrupt every b" ".
        log = bytearray(size)
        nvrtc.nvrtcGetProgramLog(program, log)
        text = bytes(log).rstrip(b"\0").decode(errors="replace")
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"{name}: NVRTC failed to compile for {' '.join(args)}", log=text)
        lowered = {}
        for expression in name_expressions:
            err, mangled = nvrtc.nvrtcGetLoweredName(program, expression.encode())
            _ok(err, f"nvrtcGetLoweredName({expression!r})")
            lowered[expression] = mangled.decode()
        what = {"ptx": "PTX", "ltoir": "LTOIR", "cubin": "CUBIN"}[output]
        err, size = getattr(nvrtc, f"nvrtcGet{what}Size")(program)
        _ok(err, f"nvrtcGet{what}Size")
        buffer = bytearray(size)
        _ok(getattr(nvrtc, f"nvrtcGet{what}")(program, buffer)[0], f"nvrtcGet{what}")
        code = bytes(buffer)
    finally:
        nvrtc.nvrtcDestroyProgram(program)
    if output == "ptx":
        code = code.rstrip(b"\0")
    return json.dumps(lowered).encode() + b"\n" + code


def _ok(err: object, call: str) -> None:
    from cuda.bindings import nvrtc

    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"{call} failed: {nvrtc.nvrtcGetErrorString(err)[1].decode()}")
