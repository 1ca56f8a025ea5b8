"""LLVM IR -> native code through llvmlite, with an object-file cache on disk and in the process.

A kernel's object is linked with the runtime's (the memory helpers every kernel calls, compiled
once per process or read from the cache).  Objects are keyed by their IR (which the PTX
determines), llvmlite's and LLVM's versions
and the host CPU's name and features, so a second process, or a second backend over the same
PTX, loads the object instead of compiling.  The directory is the ptxbridge cache's
(``$PTXBRIDGE_CACHE_DIR``, else ``$XDG_CACHE_HOME/ptxbridge``, else ``~/.cache/ptxbridge``),
namespace ``cpu-tier``, laid out as the cache's own entries; each file carries a SHA-256 over its
key and payload and is rejected
(and rebuilt) when they do not match, so a truncated or copied-over entry is never loaded.  A
cache that cannot be written is skipped silently: the object is then kept in the process only.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import tempfile
import threading
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Compiled", "compile_ir", "cache_root", "stats", "has_permutes", "has_masked_moves"]

_MAGIC = b"PTXB-CPU1\n"
_lock = threading.Lock()
_memory: dict[str, Compiled] = {}
_libraries: dict[str, bytes] = {}  # the runtime module's object, by its IR
stats = {"compiled": 0, "disk": 0, "memory": 0, "compile_seconds": 0.0}


@dataclass(frozen=True, slots=True)
class Compiled:
    """A loaded kernel: ``launch(ctx_address) -> status`` (native code at ``address``); the engine
    keeps the code mapped."""

    launch: Any
    address: int
    engine: Any
    objects: tuple[Any, ...]  # the object files (runtime, kernel) and their bytes, alive as the engine
    seconds: float  # time spent making it here (compiling, or loading from disk)


def cache_root() -> Path:
    explicit = os.environ.get("PTXBRIDGE_CACHE_DIR")
    if explicit:
        return Path(explicit) / "cpu-tier"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ptxbridge" / "cpu-tier"


_llvm: Any = None


def _avx512() -> bool:
    """Whether the host has AVX-512 (its features are in every cache key)."""
    return "+avx512f" in _target()[2].split("|")[-1].split(",")


def has_permutes() -> bool:
    """Whether the host has AVX-512's two-table permutes (``vpermi2d``/``vpermi2q``), which
    :func:`.direct.DirectMoves.windowed` loads use."""
    return _avx512()


def has_masked_moves() -> bool:
    """Whether the host's vector moves take a mask (AVX-512's mask registers): a load then zeroes
    the lanes off a warp's mask in the move (:func:`.direct.DirectMoves.moved`), where AVX2 blends."""
    return _avx512()


_CODEGEN_LEVEL = 1


def _target() -> tuple[Any, Any, str]:
    """llvmlite's binding, a target machine for this host, and the host's identity for keys."""
    global _llvm
    import llvmlite
    import llvmlite.binding as llvm

    if _llvm is None:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
        # code generation at O1: instruction selection is most of a compile, and O1 spends 14% less
        # on it than O3 for the same speed on the benchmark's kernels (warp sums 7% slower)
        machine = llvm.Target.from_default_triple().create_target_machine(
            cpu=cpu, features=features, opt=_CODEGEN_LEVEL, codemodel="jitdefault"
        )
        identity = f"{llvmlite.__version__}|{llvm.llvm_version_info}|O{_CODEGEN_LEVEL}|{cpu}|{features}"
        _llvm = (llvm, machine, identity)
    return _llvm


def _path(key: str) -> Path:
    """``cpu-tier/xx/key``: the layout of the ptxbridge cache's entries, which ``ptxbridge cache info``
    counts and ``ptxbridge cache clear`` removes."""
    return cache_root() / key[:2] / key


def _read(key: str) -> bytes | None:
    try:
        data = _path(key).read_bytes()
    except OSError:
        return None
    head = len(_MAGIC) + 32
    if (
        not data.startswith(_MAGIC)
        or hashlib.sha256(key.encode() + data[head:]).digest() != data[len(_MAGIC) : head]
    ):
        with suppress(OSError):
            _path(key).unlink()
        return None
    return data[head:]


def _write(key: str, payload: bytes) -> None:
    try:
        root = _path(key).parent
        root.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=root, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + hashlib.sha256(key.encode() + payload).digest() + payload)
        os.replace(temporary, _path(key))
    except OSError:
        pass  # an unwritable cache: kept in this process only


def _optimize(llvm: Any, machine: Any, module: Any) -> None:
    """A short pipeline: registers to SSA, peepholes and dead code, twice (the ``O2``/``O3``
    pipelines take several times longer on the wide vectors and gain little here)."""
    builder = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(speed_level=2))
    passes = llvm.create_new_module_pass_manager()
    passes.add_always_inliner_pass()
    for _ in range(2):
        passes.add_sroa_pass()
        passes.add_instruction_combine_pass()
        passes.add_simplify_cfg_pass()
    passes.add_new_gvn_pass()
    passes.add_dead_code_elimination_pass()
    passes.run(module, builder)


def _object(llvm: Any, machine: Any, identity: str, ir: str) -> bytes:
    """The object file of module ``ir``: from the disk cache, else compiled (and written there)."""
    key = hashlib.sha256(f"{identity}\n{ir}".encode()).hexdigest()
    payload = _read(key)
    if payload is None:
        module = llvm.parse_assembly(ir)
        module.verify()
        _optimize(llvm, machine, module)
        payload = machine.emit_object(module)
        _write(key, payload)
        stats["compiled"] += 1
    else:
        stats["disk"] += 1
    return payload


def compile_ir(ir: str, runtime: str) -> Compiled:
    """The native code of ``ir`` (a module defining ``@launch``), from the caches when there, linked
    with the object of module ``runtime`` (the helpers every kernel calls, compiled once)."""
    llvm, machine, identity = _target()
    key = hashlib.sha256(f"{identity}\n{ir}\n{runtime}".encode()).hexdigest()
    with _lock:
        found = _memory.get(key)
        if found is not None:
            stats["memory"] += 1
            return found
        start = time.perf_counter()
        library = _libraries.get(runtime)
        if library is None:
            library = _libraries[runtime] = _object(llvm, machine, identity, runtime)
        payload = _object(llvm, machine, identity, ir)
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), machine)
        refs = (llvm.ObjectFileRef.from_data(library), llvm.ObjectFileRef.from_data(payload))
        for ref in refs:
            engine.add_object_file(ref)
        objects = (library, payload, *refs)
        engine.finalize_object()
        address = engine.get_function_address("launch")
        launch = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p)(address)
        seconds = time.perf_counter() - start
        stats["compile_seconds"] += seconds
        found = _memory[key] = Compiled(launch, address, engine, objects, seconds)
        return found
