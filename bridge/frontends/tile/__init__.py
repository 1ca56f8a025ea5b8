"""cuTile frontend: ``cuda.tile`` kernels exported to cubin, and tileiras cubins loaded back.

A cuTile kernel's entry symbol is mangled from its whole signature
(``vadd_Kt1_A1f32_1l0_...``; docs/conventions.md), so the signature is
recovered from the name (:func:`ptxbridge.abi.cutile_names.demangle`) and
checked against the cubin's ``EIATTR_KPARAM_INFO`` records.  Launch demands
come from the cubin: block (1,1,1), or exactly its ``REQNTID``; no cluster.
cutile-rs kernels (``<kernel>_entry``) carry no signature in their names, so
:func:`load` takes one from the caller (signature text, a manifest or
Signature objects, see :func:`ptxbridge.artifacts.signatures.coerce_signatures`).
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import re
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from ptxbridge import cache
from ptxbridge.abi.cubin import read_cubin
from ptxbridge.abi.cutile_cache import CUTILE_CACHE_MAGIC, CutileCacheEntry, read_cache_entry
from ptxbridge.abi.cutile_names import demangle, is_cutile_symbol
from ptxbridge.abi.errors import AbiMismatchError, ArgumentError, CompileError, FormatError, ToolchainError
from ptxbridge.abi.kinds import TileTensor
from ptxbridge.abi.signature import Signature
from ptxbridge.abi.targets import known_target, parse_target
from ptxbridge.artifacts.artifact import (
    Artifact,
    CodeKind,
    Provenance,
    artifact_from_bytes,
    artifact_from_file,
)
from ptxbridge.artifacts.signatures import coerce_signatures, sidecar_signatures
from ptxbridge.cache.fingerprint import fingerprint
from ptxbridge.linker.target import default_arch

__all__ = ["export", "load", "specialise"]

_INSTALL = "install them with `pip install cuda-tile nvidia-cuda-tileiras`"


def export(kernel: Any, signatures: Any, *, arch: str | None = None) -> Artifact:
    """Compile a ``@cuda.tile.kernel`` ahead of time to a cubin for ``arch``, one entry per signature.

    Parameters
    ----------
    kernel : a ``cuda.tile.kernel``.
    signatures : one ``cuda.tile.compilation.KernelSignature`` or a sequence of them; a
        signature without ``symbol`` gets cuTile's mangled name.
    arch : the GPU to assemble for (``"sm_90"``, ``"sm_100"``...); default: the first GPU's arch,
        else ``sm_90``.  tileiras needs no GPU.

    Returns a cubin :class:`Artifact` whose kernels carry signatures recovered from the
    mangled names, with the Python parameter names, checked against the cubin.
    """
    compilation = _cuda_tile()
    pyfunc = getattr(getattr(kernel, "_annotated_function", None), "pyfunc", None)
    if pyfunc is None:
        raise ArgumentError(f"tile.export: kernel must be a @cuda.tile.kernel (got {type(kernel).__name__})")
    arch = parse_target(default_arch() if arch is None else arch, who="tile.export").sm
    given = [signatures] if isinstance(signatures, compilation.KernelSignature) else list(signatures)
    if not given or not all(isinstance(s, compilation.KernelSignature) for s in given):
        raise ArgumentError("tile.export: signatures must be one or more "
                            f"cuda.tile.compilation.KernelSignature (got {signatures!r})")
    ours = [_signature(pyfunc, ks) for ks in given]
    versions = _versions()
    entry_key = cache.key(versions, fingerprint(pyfunc), repr(kernel._compiler_options), arch,
                          *(s.name for s in ours), *(str(s) for s in ours))

    def produce() -> bytes:
        out = io.BytesIO()
        try:
            compilation.export_kernel(kernel, given, out, gpu_code=arch, output_format="cubin")
        except FileNotFoundError as exc:  # cuda.tile's way of saying tileiras is missing
            raise ToolchainError(f"tileiras not found ({exc}); {_INSTALL}") from exc
        except Exception as exc:  # typing errors, tileiras failures: cuda.tile has many types
            raise CompileError(f"cuTile could not compile {pyfunc.__name__} for {arch}: "
                               f"{type(exc).__name__}", log=str(exc)) from exc
        return out.getvalue()

    cubin = cache.cached("tile", entry_key, produce)
    artifact = artifact_from_bytes(cubin, ours, source=f"<cuTile {pyfunc.__name__}>", name=pyfunc.__name__)
    provenance = Provenance("cuda-tile", versions, ("output_format=cubin", f"gpu_code={arch}",
                                                     f"options={kernel._compiler_options!r}"), arch)
    return dataclasses.replace(artifact, provenance=provenance)


def load(path: str | Path, signatures: Any = None, *, arch: str | None = None,
         fingerprint: str | None = None) -> Artifact:
    """A tileiras (or cutile-rs) cubin, or a cutile-rs JIT cache entry, as an artifact.

    Parameters
    ----------
    path
        A cubin, or an entry of cutile-rs's persistent JIT cache (``<key>.cubin``
        starting ``CUTILECUBIN``, :mod:`ptxbridge.abi.cutile_cache`): its header
        is read and checked (format, the cubin's SHA-256, the GPU name against
        the cubin's arch).
    signatures
        cuTile Python kernels need none: their names carry them.  A cutile-rs
        kernel ``add_entry`` needs one named ``add`` or ``add_entry`` with
        ``#[convention(cutile-rs)]``, stating its specialisation (see :func:`specialise`).
    arch, fingerprint
        For a cache entry: the GPU (``"sm_90"``) and ``tileiras --version`` it
        must have been compiled for and by; a mismatch is a :class:`FormatError`.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ArgumentError(f"tile.load: cannot read {str(path)!r}: {exc.strerror}") from exc
    if not data.startswith(CUTILE_CACHE_MAGIC):
        artifact = artifact_from_file(path, signatures)
    else:
        entry = _checked_entry(data, str(path), arch, fingerprint)
        given = coerce_signatures(signatures) if signatures is not None else sidecar_signatures(path)
        artifact = artifact_from_bytes(entry.cubin, given, source=str(path), name=path.stem)
        key = (f"key={path.stem}",) if re.fullmatch(r"[0-9a-f]{64}", path.stem) else ()
        artifact = dataclasses.replace(artifact, provenance=Provenance(
            "cutile-rs JIT cache", entry.tileiras_fingerprint,
            (f"gpu={entry.gpu_name}", f"opt_level={entry.opt_level}", *key), artifact.arch))
    if artifact.kind is not CodeKind.CUBIN:
        raise FormatError(f"tile.load reads cubins (tileiras output) (got {artifact.kind.value})",
                          source=str(path))
    given = {s.name for s in coerce_signatures(signatures)} if signatures is not None else set()
    for name in artifact.kernels:
        if not is_cutile_symbol(name) and name not in given and name.removesuffix("_entry") not in given:
            raise AbiMismatchError(
                f"{name}: not a cuTile symbol, so its signature must be given, e.g. "
                f"signatures='#[convention(cutile-rs)] kernel {name.removesuffix('_entry')}"
                f"(x: Tensor<f32, 1>, y: Partition<f32, 1>)' (got none for it in {str(path)!r})")
    return artifact


def _family(arch: str) -> object:
    """The compute capability of ``sm_90``, ``sm_90a``, ``compute_90`` (tileiras writes sm_90a code for
    an sm_90 GPU); a name that is no target stands for itself."""
    target = known_target(arch)
    return arch if target is None else target.cc


def _checked_entry(data: bytes, source: str, gpu: str | None, fingerprint: str | None) -> CutileCacheEntry:
    entry = read_cache_entry(data, source)
    built = read_cubin(entry.cubin, source).arch
    if built is not None and _family(built) != _family(entry.gpu_name):
        raise FormatError(f"the cache entry says it was compiled for {entry.gpu_name} but its cubin is "
                          f"{built} code", source=source)
    if gpu is not None and _family(gpu) != _family(entry.gpu_name):
        raise FormatError(f"the cache entry was compiled for {entry.gpu_name}, not {gpu}", source=source)
    if fingerprint is not None and fingerprint != entry.tileiras_fingerprint:
        raise FormatError(f"the cache entry was compiled by tileiras {entry.tileiras_fingerprint!r}, not "
                          f"{fingerprint!r}", source=source)
    return entry


def specialise(signature: Signature, stride_args: Mapping[str, Sequence[int]] | None = None,
               spec_args: Mapping[str, Mapping[str, Any]] | None = None) -> Signature:
    """``signature`` with the specialisation a cutile-rs launch recorded in its kernel key.

    cutile-rs keys a compiled kernel (``TileFunctionKey``, ``cutile/src/tile_kernel.rs``) by,
    per tensor parameter, ``stride_args`` (1 where the stride was 1, compiled in as static;
    -1 dynamic) and ``spec_args`` (``SpecializationBits``: ``shape_div``, ``stride_div`` in
    elements, ``base_ptr_div`` in bytes).  The entry it generates assumes the i-th *dynamic* dim
    (stride) divisible by ``shape_div[i]`` (``stride_div[i]``) and the base pointer aligned
    (``kernel_entry_generator.rs``); partitions use the tensor's own strides.  Those become the
    parameters' promises, checked at every launch.  A cache entry's file name is a hash and
    records none of this: pass the key's fields, or write the promises in the signature text.
    """
    params = []
    for param in signature.params:
        t = param.type
        if isinstance(t, TileTensor):
            t = _specialised(t, param.name, (stride_args or {}).get(param.name),
                             (spec_args or {}).get(param.name))
        params.append(dataclasses.replace(param, type=t))
    return dataclasses.replace(signature, params=tuple(params))


def _specialised(t: TileTensor, name: str, strides: Sequence[int] | None,
                 spec: Mapping[str, Any] | None) -> TileTensor:
    static_stride = t.static_stride
    if strides is not None:
        if len(strides) != t.rank:
            raise ArgumentError(f"specialise: stride_args[{name!r}] needs {t.rank} entries "
                                f"(got {list(strides)})")
        static_stride = tuple(1 if s == 1 else None for s in strides)
    changes: dict[str, Any] = {"static_stride": static_stride, "own_strides": t.partition or t.own_strides}
    if spec is not None:
        shapes = [a for a in range(t.rank) if t.partition or t.axis_promise("static_shape", a, None) is None]
        dynamic_strides = [a for a in range(t.rank) if not static_stride or static_stride[a] is None]
        changes["shape_divisible_by"] = _on_axes(t.rank, shapes, spec.get("shape_div", ()))
        changes["stride_divisible_by"] = _on_axes(t.rank, dynamic_strides, spec.get("stride_div", ()))
        changes["base_align"] = int(spec.get("base_ptr_div", 1))
    return dataclasses.replace(t, **changes)


def _on_axes(rank: int, axes: list[int], divisors: Sequence[int]) -> tuple[int, ...]:
    """Per-axis divisors: the i-th of ``divisors`` on the i-th of ``axes`` (as the entry applies them)."""
    found = [1] * rank
    for axis, divisor in zip(axes, divisors, strict=False):
        found[axis] = int(divisor)
    return tuple(found) if any(d > 1 for d in found) else ()


def _signature(pyfunc: Any, kernel_signature: Any) -> Signature:
    """Our signature for one KernelSignature: demangled from its canonical mangled name."""
    names = [p.name for p in inspect.signature(pyfunc).parameters.values()]
    try:
        mangled = kernel_signature.with_mangled_symbol(pyfunc.__name__).symbol
    except Exception as exc:  # the mangler rejects what cuda.tile cannot export
        raise ArgumentError(f"{pyfunc.__name__}: cuda.tile cannot name this signature: {exc}") from exc
    sig = demangle(mangled, names)
    return dataclasses.replace(sig, name=kernel_signature.symbol or mangled)


def _cuda_tile() -> Any:
    try:
        from cuda.tile import compilation
    except ImportError as exc:
        raise ToolchainError(f"cuda-tile is not importable ({exc}); {_INSTALL}") from exc
    return compilation


def _versions() -> str:
    """cuda-tile and tileiras versions, for provenance and the cache key."""
    return ", ".join(f"{package} {_version(package)}" for package in ("cuda-tile", "nvidia-cuda-tileiras"))


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "(not from a wheel)"
