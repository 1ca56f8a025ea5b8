"""What numba-cuda links with a function besides its own code, carried by the artifact as libraries.

numba-cuda 0.30 links more than the PTX it generates (``_Kernel.__init__`` and
``CUDACodeLibrary._link_all`` in its dispatcher and codegen):

- the files its code library collected while lowering: ``cuda.declare_device(..., link=...)``
  and ``cuda.jit(link=...)`` sources, and the Numbast wrappers behind float16 / bfloat16 / fp8
  operators (one CUDA C++ source per header and process, which grows as operators are used);
- NRT (``nrt.cu``) when NRT is enabled and the PTX calls an NRT function;
- ``reshape_funcs.cu`` when the PTX calls its reshape helpers;
- ``libcudadevrt.a`` when the code uses cooperative groups (grid sync).

:func:`gather` records them as :class:`Link` items, which the compile cache keeps
next to the code; :func:`build` turns them into artifacts: CUDA C++ through NVRTC
with numba's include folders, other code read by content.  numba's own sources
are linked weak (``.weak .func``): several numba artifacts in one image each
carry a copy, and the wrapper sources are snapshots of one growing file.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ptxbridge import cache
from ptxbridge.abi.ptx import PtxModule, read_ptx
from ptxbridge.abi.signature import Signature
from ptxbridge.artifacts.artifact import (
    Artifact,
    CodeKind,
    Provenance,
    artifact_from_bytes,
    artifact_from_file,
)
from ptxbridge.artifacts.signatures import ptx_signatures
from ptxbridge.linker.device_runtime import device_runtime

__all__ = ["Link", "build", "dumps", "gather", "loads"]

_WRAPPERS = "_wrappers.cu"  # the name ptxbridge gives numba's Numbast wrapper sources

_DEVICE_C = r'\bextern\s+"C"\s+__device__\b'
_WEAK = re.compile(_DEVICE_C)  # numba's own functions, made weak
_WRAPPER = re.compile(rf"(?={_DEVICE_C})")  # where each Numbast wrapper starts
_WRAPPER_NAME = re.compile(rf"{_DEVICE_C}[^(]*?(\w+)\s*\(")


@dataclass(frozen=True, slots=True)
class Link:
    """One thing numba links with the function.

    ``kind``: ``"cu"`` (CUDA C++, compiled with NVRTC), ``"code"`` (PTX, cubin,
    fatbin, LTO-IR, object or archive: read by content) or ``"cudadevrt"``.
    ``data`` holds in-memory code (text for ``cu``, base64 otherwise); a file
    given by ``path`` is read when built, so an edited file is picked up.
    ``own``: numba-cuda's own code, linked weak.
    """

    name: str
    kind: str
    data: str = ""
    path: str = ""
    own: bool = False


def gather(library: Any, module: PtxModule, extra: Sequence[Any] = ()) -> tuple[Link, ...]:
    """Everything numba would link with the code of ``library`` (a numba ``CUDACodeLibrary``).

    ``module`` is the PTX numba made from it (whose ``.extern .func`` say whether
    NRT and the reshape helpers are needed); ``extra``: ``cuda.jit(link=...)`` files.
    """
    from numba.cuda import config, dispatcher
    from numba.cuda.memory_management.nrt import NRT_LIBRARY

    files = list(library._linking_files) + list(extra)
    called = {f.name for f in module.functions if f.linkage == "extern" and f.body is None}
    if called & set(dispatcher.reshape_funcs):
        files.append(os.path.join(os.path.dirname(dispatcher.__file__), "reshape_funcs.cu"))
    needs_nrt = called & set(dispatcher._Kernel.NRT_functions) or any(getattr(f, "nrt", False) for f in files)
    if getattr(config, "CUDA_ENABLE_NRT", False) and needs_nrt:
        files.append(NRT_LIBRARY)
    own = _numba_sources()
    items = {_item(f, own, called): None for f in files}  # once each, in a stable order
    links = sorted(items, key=lambda link: (link.name, link.path, link.data))
    if library.use_cooperative:
        links.append(Link("libcudadevrt.a", "cudadevrt"))
    return tuple(links)


def _numba_sources() -> dict[int, str]:
    """numba-cuda's own in-memory sources by id, with a name for messages: NRT and the Numbast
    wrappers of the headers loaded so far (``numba.cuda._internal.cuda_fp16.shim_obj`` ...)."""
    from numba.cuda.memory_management.nrt import NRT_LIBRARY

    found = {id(NRT_LIBRARY): "nrt.cu"}
    for module_name, module in list(sys.modules.items()):
        shim = getattr(module, "shim_obj", None) if module_name.startswith("numba.cuda._internal.") else None
        if shim is not None:
            found[id(shim)] = module_name.rpartition(".")[2] + _WRAPPERS
    return found


def _item(file: Any, own: dict[int, str], called: set[str]) -> Link:
    """A path or a numba ``LinkableCode`` as a :class:`Link`; of a wrapper source, what ``called``."""
    import numba.cuda

    if isinstance(file, (str, os.PathLike)):
        path = os.path.abspath(file)
        ours = path.startswith(os.path.dirname(numba.cuda.__file__) + os.sep)
        return Link(os.path.basename(path), "cu" if path.endswith(".cu") else "code", path=path, own=ours)
    data, name = file.data, own.get(id(file), file.name)
    if file.kind == "cu":
        text = data.decode() if isinstance(data, bytes) else data
        if own.get(id(file), "").endswith(_WRAPPERS):
            text = _wrappers_called(text, called)
        return Link(name, "cu", text, own=id(file) in own)
    raw = data.encode() if isinstance(data, str) else bytes(data)
    return Link(name, "code", base64.b64encode(raw).decode(), own=id(file) in own)


def _wrappers_called(source: str, called: set[str]) -> str:
    """A Numbast wrapper source cut to its head (the ``#include``) and the wrappers ``called``.

    numba's source holds every wrapper any kernel of the process used so far
    (it only grows), each starting with ``extern "C" __device__``; the artifact
    carries what its own code calls.  When a called name is not found as a
    wrapper, the source is kept whole.
    """
    head, *wrappers = _WRAPPER.split(source)
    named = {m.group(1): w for w in wrappers if (m := _WRAPPER_NAME.match(w))}
    if any(n in source and n not in named for n in called):
        return source
    return head + "".join(w for n, w in named.items() if n in called)


def dumps(links: Iterable[Link]) -> bytes:
    """The links as one line of JSON, for the cache entry."""
    return json.dumps([asdict(link) for link in links]).encode()


def loads(data: bytes) -> tuple[Link, ...]:
    return tuple(Link(**item) for item in json.loads(data))


def build(links: Iterable[Link], arch: str, output: str,
          tools: str) -> tuple[tuple[Artifact, ...], dict[str, Signature]]:
    """The links as artifacts for ``arch``, and the functions they define (typed by their PTX).

    CUDA C++ becomes PTX or, for ``output="ltoir"``, LTO-IR; ``tools`` (the
    numba-cuda and NVVM versions) keys the cache of numba's own sources.
    """
    result: list[Artifact] = []
    defined: dict[str, Signature] = {}
    for link in links:
        if link.kind == "cudadevrt":
            result.append(device_runtime())
        elif link.kind == "cu":
            source = Path(link.path).read_text() if link.path else link.data
            art, names = _compiled(source, link.name, arch, output, link.own, tools)
            result.append(art)
            defined.update(names)
        else:
            art = artifact_from_file(link.path, []) if link.path else artifact_from_bytes(
                base64.b64decode(link.data), source=link.name, name=link.name)
            result.append(replace(art, kernels={}, imports={}))
            defined.update(art.device_functions)
    return tuple(result), defined


@functools.lru_cache(maxsize=64)
def _compiled(source: str, name: str, arch: str, output: str, own: bool,
              tools: str) -> tuple[Artifact, dict[str, Signature]]:
    """CUDA C++ as numba compiles it (NVRTC, relocatable, numba's include folders).

    The PTX is always made: it names the functions the library defines (and is
    what the CPU loader runs); for LTO the code is LTO-IR of the same source.
    numba's own device functions are made weak, so that copies from several
    artifacts link (their exports are not listed in LTO-IR, whose linkage the
    linker's checks cannot see).  numba's own sources include only headers of
    installed wheels, so their cache key is the source and the versions
    (NVRTC's own key would read every CCCL header NRT includes, at each compile).
    """
    from ptxbridge.nvrtc import nvrtc_version

    if own:
        source = _WEAK.sub(r"\g<0> __attribute__((weak))", source)
        key = cache.key("numba-library", tools, nvrtc_version(), source, arch, output, *_include_options())
        blob = cache.cached("numba", key, lambda: _nvrtc(source, name, arch, output))
    else:
        blob = _nvrtc(source, name, arch, output)
    size = int.from_bytes(blob[:8], "little")
    ptx, code = blob[8:8 + size], blob[8 + size:]
    _, exports, _ = ptx_signatures(read_ptx(ptx, name), {})
    kind = CodeKind.LTOIR if output == "ltoir" else CodeKind.PTX
    listed = {} if own and kind is CodeKind.LTOIR else exports
    origin = "numba-cuda's own library" if own else "a numba link= file"
    provenance = Provenance(f"nvrtc {nvrtc_version()} ({origin})", tools, _include_options(), arch)
    artifact = Artifact(code if kind is CodeKind.LTOIR else ptx, kind, arch, device_functions=listed,
                        provenance=provenance, name=name)
    return artifact, exports


def _nvrtc(source: str, name: str, arch: str, output: str) -> bytes:
    """PTX (length-prefixed) and, for LTO, LTO-IR of ``source``."""
    from ptxbridge import nvrtc

    options = _include_options()
    ptx = nvrtc.compile(source, arch=arch, output="ptx", options=options, name=name, typed=False).code
    code = nvrtc.compile(source, arch=arch, output="ltoir", options=options, name=name, typed=False).code \
        if output == "ltoir" else b""
    return len(ptx).to_bytes(8, "little") + ptx + code


@functools.cache
def _include_options() -> tuple[str, ...]:
    """The include folders numba-cuda gives NVRTC: its headers for this NVRTC major, NRT's, CCCL."""
    import numba.cuda
    from numba.cuda import config
    from numba.cuda.memory_management import nrt

    from ptxbridge.nvrtc import nvrtc_version

    folders = [os.path.join(os.path.dirname(numba.cuda.__file__), "include", nvrtc_version().split(".")[0]),
               nrt.get_include()]
    try:
        from cuda.pathfinder import locate_nvidia_header_directory

        cccl = locate_nvidia_header_directory("cccl")
        if cccl is not None:
            folders.append(cccl.abs_path)
    except Exception:  # no pathfinder or no CCCL wheel: sources that need it fail with NVRTC's log
        pass
    extra = getattr(config, "CUDA_NVRTC_EXTRA_SEARCH_PATHS", "") or ""
    folders += [f for f in extra.split(":") if f]
    return tuple(f"--include-path={f}" for f in folders if os.path.isdir(f))
